package discovery

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/netsy-io/netsy/internal/objstore"
	"github.com/netsy-io/netsy/internal/objstore/faulty"
)

func assign(ids ...string) func(*Members) error {
	return func(m *Members) error {
		for _, id := range ids {
			m.Assign(id)
		}
		return nil
	}
}

// seq returns an id source that yields vals in order, then fails the test.
func seq(t *testing.T, vals ...uint64) func() uint64 {
	var mu sync.Mutex
	return func() uint64 {
		mu.Lock()
		defer mu.Unlock()
		if len(vals) == 0 {
			t.Error("id source exhausted")
			return 0
		}
		v := vals[0]
		vals = vals[1:]
		return v
	}
}

func TestMembersFirstCreate(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore()
	f := NewMembersFile(s, "prod")
	f.newID = seq(t, 0x3e9e05c52164694d, 0x2a)
	m, exists, err := f.Load(ctx)
	if err != nil || exists || m.ClusterID != "prod" || len(m.IDs) != 0 || m.Counter != 0 {
		t.Fatalf("Load of a missing file = %+v, %v, %v", m, exists, err)
	}
	m, err = f.Update(ctx, func(m *Members) error {
		m.Assign("n1")
		m.Assign("n2")
		m.ElectorTerm = 9
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if m.Counter != 1 || m.IDs["n1"] != 0x3e9e05c52164694d || m.IDs["n2"] != 0x2a || m.ElectorTerm != 9 {
		t.Fatalf("Update returned %+v", m)
	}
	want := `{"version":1,"cluster_id":"prod","counter":1,"primary_term":0,"elector_term":9,` +
		`"members":{"n1":"3e9e05c52164694d","n2":"2a"}}`
	if got := string(mustGet(t, s, MembersKey)); got != want {
		t.Fatalf("body\n got %s\nwant %s", got, want)
	}
}

func TestMembersAssignStableAcrossReload(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore()
	first, err := NewMembersFile(s, "prod").Update(ctx, assign("n1", "n2"))
	if err != nil {
		t.Fatal(err)
	}
	// A new Elector (a restart, or after n1 deregistered) loads the file.
	f := NewMembersFile(s, "prod")
	f.newID = func() uint64 { t.Error("a known node was given a new id"); return 1 }
	m, exists, err := f.Load(ctx)
	if err != nil || !exists {
		t.Fatalf("Load = %v, %v", exists, err)
	}
	if !mapsEqual(m.IDs, first.IDs) {
		t.Fatalf("reloaded ids %v, wrote %v", m.IDs, first.IDs)
	}
	id, changed := m.Assign("n1")
	if changed || id != first.IDs["n1"] {
		t.Fatalf("Assign(n1) after reload = %x, %v; want %x, false", id, changed, first.IDs["n1"])
	}
	for _, id := range first.IDs {
		if id == 0 || id >= 1<<63 {
			t.Fatalf("member id %x is not a non-zero 63-bit value", id)
		}
	}
	// Re-assigning known nodes changes nothing, so nothing is written.
	before := mustGet(t, s, MembersKey)
	m, err = f.Update(ctx, assign("n2", "n1"))
	if err != nil || m.Counter != first.Counter {
		t.Fatalf("no-op Update = %+v, %v", m, err)
	}
	if after := mustGet(t, s, MembersKey); string(after) != string(before) {
		t.Fatalf("no-op Update rewrote the file")
	}
}

func mapsEqual(a, b map[string]uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestMembersAssignAvoidsCollisions(t *testing.T) {
	// 0 is never an id, 7 is taken by n1, and the top bit is cleared so
	// 1<<63|7 is 7 again.
	m := Members{ClusterID: "prod", newID: seq(t, 7, 0, 7, 1<<63|7, 9)}
	if id, changed := m.Assign("n1"); id != 7 || !changed {
		t.Fatalf("Assign(n1) = %d, %v", id, changed)
	}
	if id, changed := m.Assign("n2"); id != 9 || !changed {
		t.Fatalf("Assign(n2) = %d, %v; want 9 after skipping 0 and two collisions", id, changed)
	}
	if err := m.validate(); err != nil {
		t.Fatal(err)
	}

	// A broken source is a programming error, not a silent duplicate.
	m.newID = func() uint64 { return 7 }
	defer func() {
		if recover() == nil {
			t.Fatal("Assign accepted a source that only returns a used id")
		}
	}()
	m.Assign("n3")
}

func TestMembersUpdateRefusesToForget(t *testing.T) {
	ctx := context.Background()
	inner, clk := newStore()
	s := faulty.New(inner, clk)
	f := NewMembersFile(s, "prod")
	if _, err := f.Update(ctx, func(m *Members) error {
		m.Assign("n1")
		m.Assign("n2")
		m.PrimaryTerm, m.ElectorTerm = 4, 9
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	writes := s.Calls(faulty.Writes)
	for name, c := range map[string]struct {
		fn   func(*Members) error
		want string
	}{
		"remove id":         {func(m *Members) error { delete(m.IDs, "n1"); return nil }, "removed"},
		"change id":         {func(m *Members) error { m.IDs["n1"]++; return nil }, "may not change"},
		"duplicate id":      {func(m *Members) error { m.IDs["n3"] = m.IDs["n1"]; return nil }, "share member id"},
		"zero id":           {func(m *Members) error { m.IDs["n3"] = 0; return nil }, "non-zero"},
		"invalid node":      {func(m *Members) error { m.Assign("a/b"); return nil }, "invalid node id"},
		"lower primary":     {func(m *Members) error { m.PrimaryTerm--; return nil }, "primary term"},
		"lower elector":     {func(m *Members) error { m.ElectorTerm--; return nil }, "elector term"},
		"change cluster id": {func(m *Members) error { m.ClusterID = "x"; return nil }, "cluster id"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := f.Update(ctx, c.fn)
			wantErr(t, err, nil, "refused", c.want)
		})
	}
	fnErr := errors.New("elector stepped down")
	if _, err := f.Update(ctx, func(m *Members) error { m.PrimaryTerm++; return fnErr }); !errors.Is(err, fnErr) {
		t.Fatalf("Update returned %v, want fn's error", err)
	}
	if n := s.Calls(faulty.Writes); n != writes {
		t.Fatalf("%d writes after refused updates", n-writes)
	}
	m, _, err := NewMembersFile(s, "prod").Load(ctx)
	if err != nil || len(m.IDs) != 2 || m.PrimaryTerm != 4 || m.ElectorTerm != 9 || m.Counter != 1 {
		t.Fatalf("file after refused updates: %+v, %v", m, err)
	}
}

// Two Electors with stale views write one after the other: the second loses
// the precondition, reloads, and both changes survive.
func TestMembersUpdateTwoWritersNoLostUpdate(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore()
	a, b := NewMembersFile(s, "prod"), NewMembersFile(s, "prod")
	if _, err := a.Update(ctx, assign("n0")); err != nil {
		t.Fatal(err)
	}
	for _, f := range []*MembersFile{a, b} {
		if _, _, err := f.Load(ctx); err != nil {
			t.Fatal(err)
		}
	}
	ma, err := a.Update(ctx, assign("n1"))
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	mb, err := b.Update(ctx, func(m *Members) error { runs++; m.Assign("n2"); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if runs != 2 {
		t.Fatalf("b's fn ran %d times, want 2 (stale, then reloaded)", runs)
	}
	final, _, err := NewMembersFile(s, "prod").Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if final.IDs["n1"] != ma.IDs["n1"] || final.IDs["n2"] != mb.IDs["n2"] || len(final.IDs) != 3 || final.Counter != 3 {
		t.Fatalf("final %+v; a wrote n1=%x, b wrote n2=%x", final, ma.IDs["n1"], mb.IDs["n2"])
	}
}

// Many Electors race on one store. Every Update either lands, and then its
// change is in the final file, or fails with ErrPreconditionFailed; member
// ids stay unique.
func TestMembersConcurrentUpdates(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore()
	const writers, each = 6, 5
	type result struct {
		node string
		id   uint64
		err  error
	}
	results := make(chan result, writers*each)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			f := NewMembersFile(s, "prod")
			for i := range each {
				node := fmt.Sprintf("w%d-%d", w, i)
				m, err := f.Update(ctx, assign(node))
				results <- result{node, m.IDs[node], err}
			}
		})
	}
	wg.Wait()
	close(results)
	final, _, err := NewMembersFile(s, "prod").Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	landed := 0
	for r := range results {
		if r.err != nil {
			if !errors.Is(r.err, objstore.ErrPreconditionFailed) {
				t.Errorf("%s: unexpected error %v", r.node, r.err)
			}
			continue
		}
		landed++
		if got, ok := final.IDs[r.node]; !ok || got != r.id {
			t.Errorf("lost update: %s was given %x, final file has %x (present %v)", r.node, r.id, got, ok)
		}
	}
	if landed == 0 {
		t.Fatal("no update landed")
	}
	if err := final.validate(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d of %d updates landed, counter %d", landed, writers*each, final.Counter)
}

func TestMembersUpdateGivesUpAfterBoundedRetries(t *testing.T) {
	ctx := context.Background()
	inner, clk := newStore()
	s := faulty.New(inner, clk)
	f := NewMembersFile(s, "prod")
	if _, err := f.Update(ctx, assign("n1")); err != nil {
		t.Fatal(err)
	}
	s.Inject(faulty.Rule{Ops: faulty.PutIfMatch, Err: objstore.ErrPreconditionFailed})
	runs := 0
	_, err := f.Update(ctx, func(m *Members) error { runs++; m.Assign("n2"); return nil })
	wantErr(t, err, objstore.ErrPreconditionFailed, MembersKey, "another Elector")
	if runs != updateAttempts || s.Calls(faulty.PutIfMatch) != updateAttempts {
		t.Fatalf("fn ran %d times, %d PutIfMatch; want %d each", runs, s.Calls(faulty.PutIfMatch), updateAttempts)
	}
	s.Clear()
	m, err := f.Update(ctx, assign("n2"))
	if err != nil || len(m.IDs) != 2 {
		t.Fatalf("Update after the contention ended = %+v, %v", m, err)
	}
}

// A write that lands but reports an error must not make a later write reuse
// the stale ETag or re-issue a term.
func TestMembersWriteErrorsThenRecover(t *testing.T) {
	ctx := context.Background()
	inner, clk := newStore()
	s := faulty.New(inner, clk)
	f := NewMembersFile(s, "prod")

	// The create lands, its answer is lost as a precondition failure: the
	// retry finds n1 already assigned and writes nothing more.
	s.Inject(faulty.Rule{Ops: faulty.PutIfAbsent, Err: objstore.ErrPreconditionFailed, AfterCall: true, Count: 1})
	m, err := f.Update(ctx, assign("n1"))
	if err != nil || m.Counter != 1 || len(m.IDs) != 1 {
		t.Fatalf("Update after a lost create answer = %+v, %v", m, err)
	}

	// A term increment lands, its answer is lost: the term it wrote is
	// burned, the retry takes the next one.
	s.Inject(faulty.Rule{Ops: faulty.PutIfMatch, Err: objstore.ErrPreconditionFailed, AfterCall: true, Count: 1})
	term, err := f.NextPrimaryTerm(ctx)
	if err != nil || term != 2 {
		t.Fatalf("NextPrimaryTerm after a lost answer = %d, %v; want 2", term, err)
	}

	// A transient error is returned as such; the next call reloads.
	fault := s.Inject(faulty.Rule{Ops: faulty.PutIfMatch, Err: faulty.ErrInjected, AfterCall: true, Count: 1})
	_, err = f.NextPrimaryTerm(ctx)
	wantErr(t, err, faulty.ErrInjected, MembersKey)
	if errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Fatalf("transient error reported as a lost precondition: %v", err)
	}
	if fault.Fired() != 1 {
		t.Fatal("fault did not fire")
	}
	term, err = f.NextPrimaryTerm(ctx)
	if err != nil || term != 4 {
		t.Fatalf("NextPrimaryTerm after a landed-but-failed write = %d, %v; want 4", term, err)
	}
}

func TestNextPrimaryTermTwoElectors(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore()
	a, b := NewMembersFile(s, "prod"), NewMembersFile(s, "prod")
	var terms []uint64
	for i := range 6 {
		f := a
		if i%3 != 0 { // interleave unevenly so both hold stale ETags
			f = b
		}
		term, err := f.NextPrimaryTerm(ctx)
		if err != nil {
			t.Fatal(err)
		}
		terms = append(terms, term)
	}
	if !slices.Equal(terms, []uint64{1, 2, 3, 4, 5, 6}) {
		t.Fatalf("terms %v, want 1..6", terms)
	}

	// Concurrently: every term handed out is distinct and none exceeds the file's.
	const electors, each = 4, 8
	got := make(chan uint64, electors*each)
	var wg sync.WaitGroup
	for range electors {
		wg.Go(func() {
			f := NewMembersFile(s, "prod")
			last := uint64(0)
			for range each {
				term, err := f.NextPrimaryTerm(ctx)
				if err != nil {
					if !errors.Is(err, objstore.ErrPreconditionFailed) {
						t.Errorf("NextPrimaryTerm: %v", err)
					}
					continue
				}
				if term <= last {
					t.Errorf("one Elector got term %d after %d", term, last)
				}
				last = term
				got <- term
			}
		})
	}
	wg.Wait()
	close(got)
	seen := map[uint64]bool{}
	for term := range got {
		if term <= 6 || seen[term] {
			t.Errorf("term %d handed out twice", term)
		}
		seen[term] = true
	}
	final, _, err := a.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for term := range seen {
		if term > final.PrimaryTerm {
			t.Errorf("term %d is above the file's primary_term %d", term, final.PrimaryTerm)
		}
	}
	if uint64(len(seen)) != final.PrimaryTerm-6 {
		t.Errorf("%d terms handed out, file advanced by %d", len(seen), final.PrimaryTerm-6)
	}
}

func TestMembersClusterMismatch(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore()
	if _, err := NewMembersFile(s, "prod").Update(ctx, assign("n1")); err != nil {
		t.Fatal(err)
	}
	before := mustGet(t, s, MembersKey)
	f := NewMembersFile(s, "staging")
	_, _, err := f.Load(ctx)
	wantErr(t, err, ErrClusterMismatch, MembersKey, `"prod"`, `"staging"`)
	_, err = f.Update(ctx, assign("n2"))
	wantErr(t, err, ErrClusterMismatch, `"prod"`, `"staging"`)
	_, err = f.NextPrimaryTerm(ctx)
	wantErr(t, err, ErrClusterMismatch)
	if after := mustGet(t, s, MembersKey); string(after) != string(before) {
		t.Fatal("a foreign cluster's members.json was changed")
	}
	_, _, err = NewMembersFile(s, "").Load(ctx)
	wantErr(t, err, nil, "empty cluster id")
}

func TestMembersCorruptFile(t *testing.T) {
	ctx := context.Background()
	for name, body := range map[string]string{
		"not json":      `{"version":1`,
		"trailing":      `{"version":1,"cluster_id":"prod","members":{}}x`,
		"version":       `{"version":2,"cluster_id":"prod","members":{}}`,
		"unknown field": `{"version":1,"cluster_id":"prod","members":{},"learners":{}}`,
		"no cluster":    `{"version":1,"cluster_id":"","members":{}}`,
		"bad hex":       `{"version":1,"cluster_id":"prod","members":{"n1":"xyz"}}`,
		"too long":      `{"version":1,"cluster_id":"prod","members":{"n1":"00000000000000001"}}`,
		"64-bit id":     `{"version":1,"cluster_id":"prod","members":{"n1":"8000000000000001"}}`,
		"zero id":       `{"version":1,"cluster_id":"prod","members":{"n1":"0"}}`,
		"duplicate id":  `{"version":1,"cluster_id":"prod","members":{"n1":"2a","n2":"2a"}}`,
		"bad node id":   `{"version":1,"cluster_id":"prod","members":{"a/b":"2a"}}`,
		"negative term": `{"version":1,"cluster_id":"prod","primary_term":-1,"members":{}}`,
	} {
		t.Run(name, func(t *testing.T) {
			inner, clk := newStore()
			s := faulty.New(inner, clk)
			if _, err := inner.PutIfAbsent(ctx, MembersKey, []byte(body)); err != nil {
				t.Fatal(err)
			}
			f := NewMembersFile(s, "prod")
			_, _, err := f.Load(ctx)
			wantErr(t, err, ErrCorrupt, MembersKey)
			_, err = f.Update(ctx, assign("n1"))
			wantErr(t, err, ErrCorrupt, MembersKey)
			if n := s.Calls(faulty.Writes); n != 0 {
				t.Fatalf("%d writes over a corrupt members.json", n)
			}
		})
	}
}

func TestMembersLoadError(t *testing.T) {
	ctx := context.Background()
	inner, clk := newStore()
	s := faulty.New(inner, clk)
	s.Fail(faulty.Get, MembersKey)
	f := NewMembersFile(s, "prod")
	_, exists, err := f.Load(ctx)
	wantErr(t, err, faulty.ErrInjected, MembersKey)
	if exists {
		t.Fatal("exists reported with an error")
	}
	_, err = f.Update(ctx, assign("n1"))
	wantErr(t, err, faulty.ErrInjected)
	if n := s.Calls(faulty.Writes); n != 0 {
		t.Fatalf("%d writes without a successful load", n)
	}
}
