package discovery

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/objstore"
	"github.com/netsy-io/netsy/internal/objstore/faulty"
	"github.com/netsy-io/netsy/internal/objstore/mem"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func newStore() (*mem.Store, *clock.Fake) {
	clk := clock.NewFake(t0)
	return mem.New(clk), clk
}

func reg(id string) Registration {
	return Registration{
		NodeID:       id,
		ClusterID:    "prod",
		PeerAddr:     "10.0.0.1:2380",
		ClientURLs:   []string{"http://10.0.0.1:2379"},
		HTTPAddr:     "10.0.0.1:2381",
		RegisteredAt: t0,
	}
}

func mustGet(t *testing.T, s objstore.Store, key string) []byte {
	t.Helper()
	b, _, err := s.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	return b
}

// wantErr fails unless err wraps target and its text holds every part.
func wantErr(t *testing.T, err, target error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v", target)
	}
	if target != nil && !errors.Is(err, target) {
		t.Fatalf("error %q does not wrap %v", err, target)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not mention %q", err, p)
		}
	}
}

func TestRegisterCreatesFile(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore()
	if err := Register(ctx, s, reg("n1")); err != nil {
		t.Fatal(err)
	}
	got := string(mustGet(t, s, "nodes/n1.json"))
	want := `{"version":1,"node_id":"n1","cluster_id":"prod","peer_addr":"10.0.0.1:2380",` +
		`"client_urls":["http://10.0.0.1:2379"],"http_addr":"10.0.0.1:2381","registered_at":"2026-01-02T03:04:05Z"}`
	if got != want {
		t.Fatalf("body\n got %s\nwant %s", got, want)
	}
	regs, errs, err := List(ctx, s)
	if err != nil || len(errs) != 0 || len(regs) != 1 {
		t.Fatalf("List = %v, %v, %v", regs, errs, err)
	}
	if r := regs[0]; !r.sameAddresses(reg("n1")) || !r.RegisteredAt.Equal(t0) {
		t.Fatalf("List read back %+v", r)
	}
}

func TestRegisterSameDataIsNoOp(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore()
	if err := Register(ctx, s, reg("n1")); err != nil {
		t.Fatal(err)
	}
	before := mustGet(t, s, "nodes/n1.json")
	again := reg("n1")
	again.RegisteredAt = t0.Add(time.Hour) // a restart: only the informational time differs
	if err := Register(ctx, s, again); err != nil {
		t.Fatalf("re-register with the same addresses: %v", err)
	}
	if after := mustGet(t, s, "nodes/n1.json"); string(after) != string(before) {
		t.Fatalf("no-op register rewrote the file:\n%s\n%s", before, after)
	}
}

func TestRegisterConflictingAddresses(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore()
	if err := Register(ctx, s, reg("n1")); err != nil {
		t.Fatal(err)
	}
	before := mustGet(t, s, "nodes/n1.json")
	for name, change := range map[string]func(*Registration){
		"peer":    func(r *Registration) { r.PeerAddr = "10.0.0.9:2380" },
		"client":  func(r *Registration) { r.ClientURLs = []string{"http://10.0.0.9:2379"} },
		"no urls": func(r *Registration) { r.ClientURLs = nil },
		"http":    func(r *Registration) { r.HTTPAddr = "10.0.0.9:2381" },
	} {
		t.Run(name, func(t *testing.T) {
			r := reg("n1")
			change(&r)
			err := Register(ctx, s, r)
			wantErr(t, err, ErrConflict, "nodes/n1.json", r.addrs(), reg("n1").addrs(),
				"--node-id n1", "netsyctl deregister n1")
			if after := mustGet(t, s, "nodes/n1.json"); string(after) != string(before) {
				t.Fatalf("conflicting register changed the file")
			}
		})
	}
}

func TestRegisterMemberName(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore()
	named := reg("n1")
	named.Name = "etcd-1"
	if err := Register(ctx, s, named); err != nil {
		t.Fatal(err)
	}
	if got := string(mustGet(t, s, "nodes/n1.json")); !strings.Contains(got, `"http_addr":"10.0.0.1:2381","name":"etcd-1",`) {
		t.Fatalf("body %s lacks the name", got)
	}
	regs, _, err := List(ctx, s)
	if err != nil || len(regs) != 1 || regs[0].Name != "etcd-1" || regs[0].MemberName() != "etcd-1" {
		t.Fatalf("List = %+v, %v", regs, err)
	}

	// A file written without a name (before --name was carried, or
	// without --name) names the member by its node id.
	if err := Register(ctx, s, reg("n2")); err != nil {
		t.Fatal(err)
	}
	if got := string(mustGet(t, s, "nodes/n2.json")); strings.Contains(got, `"name"`) {
		t.Fatalf("body %s names a member without --name", got)
	}
	regs, _, _ = List(ctx, s)
	if len(regs) != 2 || regs[1].Name != "" || regs[1].MemberName() != "n2" {
		t.Fatalf("List = %+v", regs)
	}
	// --name equal to the node id is the same member name: no rewrite.
	before := mustGet(t, s, "nodes/n2.json")
	same := reg("n2")
	same.Name = "n2"
	if err := Register(ctx, s, same); err != nil {
		t.Fatal(err)
	}
	if after := mustGet(t, s, "nodes/n2.json"); string(after) != string(before) {
		t.Fatalf("the same member name rewrote the file:\n%s\n%s", before, after)
	}
}

// A restart with another --name at the same addresses renames the member
// in place; other addresses are still a conflict, whatever the name.
func TestRegisterRename(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore()
	if err := Register(ctx, s, reg("n1")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"etcd-1", "etcd-one", ""} {
		r := reg("n1")
		r.Name = name
		if err := Register(ctx, s, r); err != nil {
			t.Fatalf("rename to %q: %v", name, err)
		}
		regs, _, err := List(ctx, s)
		if err != nil || len(regs) != 1 || regs[0].Name != name {
			t.Fatalf("after renaming to %q: List = %+v, %v", name, regs, err)
		}
	}
	before := mustGet(t, s, "nodes/n1.json")
	moved := reg("n1")
	moved.Name = "etcd-2"
	moved.PeerAddr = "10.0.0.9:2380"
	wantErr(t, Register(ctx, s, moved), ErrConflict, "nodes/n1.json")
	if after := mustGet(t, s, "nodes/n1.json"); string(after) != string(before) {
		t.Fatalf("a conflicting register changed the file")
	}
}

func TestRegisterRenameFaults(t *testing.T) {
	ctx := context.Background()
	renamed := reg("n1")
	renamed.Name = "etcd-1"

	// The rename's answer is lost: the read-back shows the new name.
	inner, clk := newStore()
	s := faulty.New(inner, clk)
	if err := Register(ctx, s, reg("n1")); err != nil {
		t.Fatal(err)
	}
	s.Inject(faulty.Rule{Ops: faulty.PutIfMatch, Err: objstore.ErrPreconditionFailed, AfterCall: true, Count: 1})
	if err := Register(ctx, s, renamed); err != nil {
		t.Fatalf("rename after a lost answer: %v", err)
	}
	if got := string(mustGet(t, inner, "nodes/n1.json")); !strings.Contains(got, `"name":"etcd-1"`) {
		t.Fatalf("body %s", got)
	}

	// The rename fails: the error says so and the file keeps the old name.
	inner, clk = newStore()
	s = faulty.New(inner, clk)
	if err := Register(ctx, s, reg("n1")); err != nil {
		t.Fatal(err)
	}
	s.Fail(faulty.PutIfMatch, NodesPrefix)
	wantErr(t, Register(ctx, s, renamed), faulty.ErrInjected, "nodes/n1.json", `rename "n1" to "etcd-1"`)
	if got := string(mustGet(t, inner, "nodes/n1.json")); strings.Contains(got, `"name"`) {
		t.Fatalf("a failed rename changed the file: %s", got)
	}
}

func TestRegisterOtherCluster(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore()
	if err := Register(ctx, s, reg("n1")); err != nil {
		t.Fatal(err)
	}
	r := reg("n1")
	r.ClusterID = "staging"
	wantErr(t, Register(ctx, s, r), ErrClusterMismatch, "nodes/n1.json", `"prod"`, `"staging"`)
}

func TestRegisterCorruptFile(t *testing.T) {
	ctx := context.Background()
	for name, body := range map[string]string{
		"not json":      `{"version":1,`,
		"trailing":      `{"version":1,"node_id":"n1","cluster_id":"prod","peer_addr":"a:1"} {}`,
		"version":       `{"version":2,"node_id":"n1","cluster_id":"prod","peer_addr":"a:1"}`,
		"wrong node":    `{"version":1,"node_id":"n2","cluster_id":"prod","peer_addr":"a:1"}`,
		"no cluster":    `{"version":1,"node_id":"n1","cluster_id":"","peer_addr":"a:1"}`,
		"no peer":       `{"version":1,"node_id":"n1","cluster_id":"prod","peer_addr":""}`,
		"bad timestamp": `{"version":1,"node_id":"n1","cluster_id":"prod","peer_addr":"a:1","registered_at":"yesterday"}`,
	} {
		t.Run(name, func(t *testing.T) {
			s, _ := newStore()
			if _, err := s.PutIfAbsent(ctx, "nodes/n1.json", []byte(body)); err != nil {
				t.Fatal(err)
			}
			wantErr(t, Register(ctx, s, reg("n1")), ErrCorrupt, "nodes/n1.json")
			if got := mustGet(t, s, "nodes/n1.json"); string(got) != body {
				t.Fatalf("corrupt file was replaced by %s", got)
			}
		})
	}
}

func TestRegisterInvalidInput(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore()
	r := reg("-n1")
	wantErr(t, Register(ctx, s, r), ErrInvalidNodeID, `"-n1"`)
	r = reg("n1")
	r.ClusterID = ""
	wantErr(t, Register(ctx, s, r), nil, "cluster id")
	r = reg("n1")
	r.PeerAddr = ""
	wantErr(t, Register(ctx, s, r), nil, "peer address")
	if objs, _ := s.List(ctx, "", "", 0); len(objs) != 0 {
		t.Fatalf("invalid registrations wrote %v", objs)
	}
}

// A create whose answer is lost looks like a conflict with ourselves; the
// read-back shows our own data and Register succeeds.
func TestRegisterLostResponse(t *testing.T) {
	ctx := context.Background()
	inner, clk := newStore()
	s := faulty.New(inner, clk)
	s.Inject(faulty.Rule{Ops: faulty.PutIfAbsent, Err: objstore.ErrPreconditionFailed, AfterCall: true, Count: 1})
	if err := Register(ctx, s, reg("n1")); err != nil {
		t.Fatalf("register after a lost answer: %v", err)
	}
	mustGet(t, inner, "nodes/n1.json")
}

func TestRegisterStoreError(t *testing.T) {
	ctx := context.Background()
	inner, clk := newStore()
	s := faulty.New(inner, clk)
	s.Fail(faulty.PutIfAbsent, NodesPrefix)
	wantErr(t, Register(ctx, s, reg("n1")), faulty.ErrInjected, "nodes/n1.json")
}

func TestDeregisterThenRegisterAgain(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore()
	if err := Register(ctx, s, reg("n1")); err != nil {
		t.Fatal(err)
	}
	if err := Deregister(ctx, s, "n1"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get(ctx, "nodes/n1.json"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("file still there after Deregister: %v", err)
	}
	if err := Deregister(ctx, s, "n1"); err != nil {
		t.Fatalf("deregistering a missing node: %v", err)
	}
	moved := reg("n1")
	moved.PeerAddr = "10.0.0.9:2380"
	if err := Register(ctx, s, moved); err != nil {
		t.Fatalf("register at a new address after deregister: %v", err)
	}
	regs, _, err := List(ctx, s)
	if err != nil || len(regs) != 1 || regs[0].PeerAddr != "10.0.0.9:2380" {
		t.Fatalf("List = %+v, %v", regs, err)
	}
	wantErr(t, Deregister(ctx, s, "../x"), ErrInvalidNodeID)
}

func TestListReportsCorruptWithoutHidingOthers(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore()
	for _, id := range []string{"n3", "n1"} {
		if err := Register(ctx, s, reg(id)); err != nil {
			t.Fatal(err)
		}
	}
	for key, body := range map[string]string{
		"nodes/n2.json":    "garbage",
		"nodes/README.txt": "hello",
	} {
		if _, err := s.PutIfAbsent(ctx, key, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	regs, errs, err := List(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if len(regs) != 2 || regs[0].NodeID != "n1" || regs[1].NodeID != "n3" {
		t.Fatalf("regs = %+v, want n1 and n3", regs)
	}
	if len(errs) != 2 {
		t.Fatalf("errs = %v, want two", errs)
	}
	wantErr(t, errs[0], ErrCorrupt, "nodes/README.txt")
	wantErr(t, errs[1], ErrCorrupt, "nodes/n2.json")
}

func TestListFailures(t *testing.T) {
	ctx := context.Background()
	inner, clk := newStore()
	s := faulty.New(inner, clk)
	if err := Register(ctx, s, reg("n1")); err != nil {
		t.Fatal(err)
	}
	f := s.Fail(faulty.List, "")
	_, _, err := List(ctx, s)
	wantErr(t, err, faulty.ErrInjected, "nodes/")
	f.Stop()

	// A registration that cannot be read makes the whole list unknown.
	f = s.Fail(faulty.Get, "nodes/n1.json")
	regs, _, err := List(ctx, s)
	wantErr(t, err, faulty.ErrInjected, "nodes/n1.json")
	if regs != nil {
		t.Fatalf("partial list %v returned with an error", regs)
	}
	f.Stop()

	// A registration deleted between the listing and its read is skipped.
	s.Inject(faulty.Rule{Ops: faulty.Get, KeyPrefix: "nodes/n1.json", Err: objstore.ErrNotFound, Count: 1})
	regs, errs, err := List(ctx, s)
	if err != nil || len(errs) != 0 || len(regs) != 0 {
		t.Fatalf("List with a vanished file = %v, %v, %v", regs, errs, err)
	}
}

func TestValidateNodeID(t *testing.T) {
	for _, c := range []struct {
		id string
		ok bool
	}{
		{"n1", true},
		{"node-1.example_A", true},
		{"0", true},
		{strings.Repeat("a", 63), true},
		{strings.Repeat("a", 64), false},
		{"", false},
		{"-n1", false},
		{".hidden", false},
		{"_x", false},
		{"a/b", false},
		{"..", false},
		{"a b", false},
		{"a:b", false},
		{"nöde", false},
		{"a\x00", false},
	} {
		err := ValidateNodeID(c.id)
		if (err == nil) != c.ok {
			t.Errorf("ValidateNodeID(%q) = %v, want ok=%v", c.id, err, c.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidNodeID) {
			t.Errorf("ValidateNodeID(%q) = %v, does not wrap ErrInvalidNodeID", c.id, err)
		}
		if err == nil {
			if kerr := objstore.ValidateKey(NodeKey(c.id)); kerr != nil {
				t.Errorf("valid id %q gives an invalid key: %v", c.id, kerr)
			}
		}
	}
}
