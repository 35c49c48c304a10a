//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Error strings clients match on; they must be etcd's, byte for byte.
const (
	errCompacted    = "etcdserver: mvcc: required revision has been compacted"
	errFutureRev    = "etcdserver: mvcc: required revision is a future revision"
	errLeaseMissing = "etcdserver: requested lease not found"
)

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestEtcdctlPutGet(t *testing.T) {
	c := newCtl(t, startServer(t))

	// Like etcd, an empty store is at revision 1 and the first write makes
	// revision 2. Clients depend on it: concurrency.Election waits for keys
	// created before its own with max_create_revision = rev-1, and 0 there
	// means "no limit".
	var empty jsonRange
	c.okJSON(&empty, "get", "a/1")
	if empty.Header.Revision != 1 {
		t.Errorf("empty store at revision %d, want 1", empty.Header.Revision)
	}
	if r := c.putRev("a/1", "v1"); r != 2 {
		t.Errorf("first write at revision %d, want 2", r)
	}
	r1 := c.putRev("a/2", "v2")
	r2 := c.putRev("b/1", "x")
	r3 := c.putRev("a/1", "v1b")
	// Revisions are dense: exactly one per write.
	if r2 != r1+1 || r3 != r2+1 {
		t.Fatalf("revisions %d, %d, %d are not consecutive", r1, r2, r3)
	}

	c.expect("a/1\nv1b\n", "get", "a/1")
	c.expect("", "get", "a/missing")
	c.expect("a/1\nv1b\na/2\nv2\n", "get", "--prefix", "a/")
	c.expect("a/2\nv2\na/1\nv1b\n", "get", "--prefix", "a/", "--order=DESCEND")
	c.expect("a/1\n\na/2\n\n", "get", "--prefix", "a/", "--keys-only")
	c.expect("v1b\nv2\n", "get", "--prefix", "a/", "--print-value-only")
	c.expect("a/1\nv1b\n", "get", "--prefix", "a/", "--limit", "1")
	// An explicit range end is exclusive.
	c.expect("a/1\nv1b\na/2\nv2\n", "get", "a/", "b/1")
	c.expect("a/1\nv1b\na/2\nv2\nb/1\nx\n", "get", "a/", "--from-key")

	// Historic reads see each key as it was at that revision.
	c.expect("a/1\nv1\n", "get", "a/1", "--rev", itoa(r1))
	c.expect("a/1\nv1\na/2\nv2\n", "get", "--prefix", "a/", "--rev", itoa(r2))
	c.expect("", "get", "a/2", "--rev", itoa(r1-1))
	c.fails(errFutureRev, "get", "a/1", "--rev", itoa(r3+100))

	var lim jsonRange
	c.okJSON(&lim, "get", "--prefix", "a/", "--limit", "1")
	if lim.Header.Revision != r3 || len(lim.KVs) != 1 || !lim.More || lim.Count != 2 {
		t.Errorf("get --limit 1 -w json: header rev %d (want %d), %d kvs (want 1), more %v (want true), count %d (want 2)",
			lim.Header.Revision, r3, len(lim.KVs), lim.More, lim.Count)
	}
	var one jsonRange
	c.okJSON(&one, "get", "a/1")
	want := jsonKV{Key: []byte("a/1"), CreateRevision: r1 - 1, ModRevision: r3, Version: 2, Value: []byte("v1b")}
	if len(one.KVs) != 1 || fmt.Sprint(one.KVs[0]) != fmt.Sprint(want) {
		t.Errorf("get a/1 -w json: kvs %+v, want [%+v]", one.KVs, want)
	}
	if one.Header.ClusterID == 0 || one.Header.MemberID == 0 {
		t.Errorf("get -w json: header %+v lacks cluster or member id", one.Header)
	}
	c.expectMatch(`"ClusterID" : \d+\n"MemberID" : \d+\n"Revision" : `+itoa(r3)+`\n"RaftTerm" : \d+\n"More" : false\n"Count" : 2\n`,
		"get", "--prefix", "a/", "--count-only", "-w", "fields")
	// Reads do not move the revision.
	var cnt jsonRange
	c.okJSON(&cnt, "get", "a/1")
	if cnt.Header.Revision != r3 {
		t.Errorf("revision after reads = %d, want %d", cnt.Header.Revision, r3)
	}
}

func TestEtcdctlDel(t *testing.T) {
	c := newCtl(t, startServer(t))
	for i := 1; i <= 4; i++ {
		c.ok("put", fmt.Sprintf("d/%d", i), fmt.Sprintf("v%d", i))
	}
	c.ok("put", "e", "keep")

	c.expect("1\nd/1\nv1\n", "del", "d/1", "--prev-kv")
	c.expect("0\n", "del", "d/1")
	c.expect("1\n", "del", "d/2")
	c.expect("2\nd/3\nv3\nd/4\nv4\n", "del", "--prefix", "d/", "--prev-kv")
	c.expect("", "get", "--prefix", "d/")
	c.expect("e\nkeep\n", "get", "e")

	// A delete that removes nothing does not create a revision.
	var before, after jsonRange
	c.okJSON(&before, "get", "e")
	c.expect("0\n", "del", "--prefix", "nothing/")
	c.okJSON(&after, "get", "e")
	if after.Header.Revision != before.Header.Revision {
		t.Errorf("empty delete moved revision %d -> %d", before.Header.Revision, after.Header.Revision)
	}
}

type jsonTxn struct {
	Header    jsonHeader        `json:"header"`
	Succeeded bool              `json:"succeeded"`
	Responses []json.RawMessage `json:"responses"`
}

func TestEtcdctlTxn(t *testing.T) {
	c := newCtl(t, startServer(t))
	created := c.putRev("t/k", "one")

	// The stdin form: compares, blank line, success ops, blank line,
	// failure ops, blank line. Every compare target and operator etcdctl
	// can express appears here, and all hold.
	allTrue := `value("t/k") = "one"
version("t/k") = "1"
create("t/k") = "` + itoa(created) + `"
mod("t/k") < "` + itoa(created+1) + `"
mod("t/k") > "0"
version("t/k") != "7"
create("t/absent") = "0"

put t/k2 two
get t/k
del t/k

put t/fail x

`
	var res jsonTxn
	c.okJSONIn(&res, allTrue, "txn")
	if !res.Succeeded || len(res.Responses) != 3 || res.Header.Revision != created+1 {
		t.Fatalf("txn -w json: succeeded %v, %d responses, revision %d; want true, 3, %d",
			res.Succeeded, len(res.Responses), res.Header.Revision, created+1)
	}
	c.expect("t/k2\ntwo\n", "get", "--prefix", "t/")

	// The same compares fail now that t/k is gone.
	c.expectIn("FAILURE\n\nOK\n", allTrue, "txn")
	c.expect("t/fail\nx\nt/k2\ntwo\n", "get", "--prefix", "t/")

	// The plain output shows the branch and each op's result in order.
	c.expectIn("SUCCESS\n\nOK\n\nt/k2\ntwo\n\n1\nt/fail\nx\n", `value("t/k2") = "two"
value("t/fail") != "y"

put t/k3 three
get t/k2
del t/fail --prev-kv

put t/never x

`, "txn")

	// One false compare among true ones selects the failure branch.
	c.expectIn("FAILURE\n\nOK\n\nt/k2\ntwo\n", `value("t/k2") = "two"
value("t/k2") > "zzz"

put t/never x

put t/else y
get t/k2

`, "txn")
	c.expect("t/else\ny\nt/k2\ntwo\nt/k3\nthree\n", "get", "--prefix", "t/")

	// The interactive form prompts for each section on stdout.
	c.expectIn("compares:\nsuccess requests (get, put, del):\nfailure requests (get, put, del):\nSUCCESS\n\nOK\n", `mod("t/k2") > "0"

put t/i 1


`, "txn", "--interactive")

	// A read-only txn does not create a revision; a write txn creates one
	// for all of its ops.
	before := c.putRev("t/rev", "0")
	c.okJSONIn(&res, `value("t/rev") = "0"

get t/rev
get t/k2


`, "txn")
	if !res.Succeeded || res.Header.Revision != before {
		t.Errorf("read-only txn: succeeded %v, revision %d; want true, %d", res.Succeeded, res.Header.Revision, before)
	}
	c.okJSONIn(&res, `
put t/m1 a
put t/m2 b
del t/rev


`, "txn")
	if !res.Succeeded || res.Header.Revision != before+1 {
		t.Errorf("write txn: succeeded %v, revision %d; want true, %d", res.Succeeded, res.Header.Revision, before+1)
	}
	var m jsonRange
	c.okJSON(&m, "get", "--prefix", "t/m")
	if len(m.KVs) != 2 || m.KVs[0].ModRevision != before+1 || m.KVs[1].ModRevision != before+1 {
		t.Errorf("keys written by one txn: %+v; want both at revision %d", m.KVs, before+1)
	}
}

// syncWatch waits until a freshly started watcher on prefix is live: etcdctl
// prints nothing when its watch is established, so keep writing a marker
// key until the watcher reports the latest marker write.
func syncWatch(t *testing.T, c *ctl, w *watcher, key string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for i := 1; ; i++ {
		val := strconv.Itoa(i)
		c.ok("put", key, val)
		for {
			l, ok := w.nextWithin(300 * time.Millisecond)
			if !ok {
				break
			}
			if l != "PUT" {
				t.Fatalf("watch printed %q before the marker", l)
			}
			k, v := w.next(), w.next()
			if k != key {
				t.Fatalf("watch printed key %q before the marker", k)
			}
			if v == val {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("watch on %s never reported a write\nstderr:\n%s", key, w.stderr())
		}
	}
}

func TestEtcdctlWatch(t *testing.T) {
	c := newCtl(t, startServer(t))
	c.ok("put", "w/before", "old")

	live := c.watch("--prefix", "w/")
	syncWatch(t, c, live, "w/sync")

	first := c.putRev("w/a", "1")
	c.ok("put", "x/outside", "no")
	c.ok("put", "w/b", "2")
	c.ok("del", "w/a")
	// One txn, two events at one revision.
	c.okIn("\nput w/c 3\nput w/d 4\n\n\n", "txn")
	c.ok("put", "w/b", "22")
	c.ok("put", "w/end", "x")

	live.expectLines(
		"PUT", "w/a", "1",
		"PUT", "w/b", "2",
		"DELETE", "w/a", "",
		"PUT", "w/c", "3",
		"PUT", "w/d", "4",
		"PUT", "w/b", "22",
		"PUT", "w/end", "x",
	)

	// Replay of history from a past revision, with previous values: etcdctl
	// prints the previous key and value before the event's own.
	replay := c.watch("--prefix", "w/", "--rev", itoa(first), "--prev-kv")
	replay.expectLines(
		"PUT", "w/a", "1",
		"PUT", "w/b", "2",
		"DELETE", "w/a", "1", "w/a", "",
		"PUT", "w/c", "3",
		"PUT", "w/d", "4",
		"PUT", "w/b", "2", "w/b", "22",
		"PUT", "w/end", "x",
	)
	// The replay continues live.
	c.ok("put", "w/after", "y")
	replay.expectLines("PUT", "w/after", "y")

	// A single-key watch from a revision sees only that key.
	one := c.watch("w/b", "--rev", itoa(first))
	one.expectLines("PUT", "w/b", "2", "PUT", "w/b", "22")
	c.ok("del", "w/b")
	one.expectLines("DELETE", "w/b", "")
}

func TestEtcdctlLease(t *testing.T) {
	c := newCtl(t, startServer(t))

	m := c.expectMatch(`lease ([0-9a-f]+) granted with TTL\(60s\)\n`, "lease", "grant", "60")
	id := m[1]
	c.expect("OK\n", "put", "--lease="+id, "l/k", "v")
	c.expect("OK\n", "put", "--lease="+id, "l/k2", "v2")
	m = c.expectMatch(`lease `+id+` granted with TTL\(60s\), remaining\((\d+)s\), attached keys\(\[(.*)\]\)\n`,
		"lease", "timetolive", id, "--keys")
	if rem, _ := strconv.Atoi(m[1]); rem < 45 || rem > 60 {
		t.Errorf("remaining TTL %ds, want 45..60", rem)
	}
	if keys := strings.Fields(m[2]); len(keys) != 2 || !contains(keys, "l/k") || !contains(keys, "l/k2") {
		t.Errorf("attached keys %q, want l/k and l/k2", m[2])
	}
	c.expectMatch(`lease `+id+` granted with TTL\(60s\), remaining\(\d+s\)\n`, "lease", "timetolive", id)
	c.expect("lease "+id+" keepalived with TTL(60)\n", "lease", "keep-alive", "--once", id)
	c.expect("found 1 leases\n"+id+"\n", "lease", "list")

	var kv jsonRange
	c.okJSON(&kv, "get", "l/k")
	// etcdctl prints lease ids as zero-padded hex.
	if len(kv.KVs) != 1 || fmt.Sprintf("%016x", kv.KVs[0].Lease) != id {
		t.Errorf("get l/k -w json: %+v, want lease %s", kv.KVs, id)
	}

	c.expect("lease "+id+" revoked\n", "lease", "revoke", id)
	c.expect("", "get", "--prefix", "l/")
	c.expect("lease "+id+" already expired\n", "lease", "timetolive", id)
	c.expect("found 0 leases\n", "lease", "list")
	c.fails(errLeaseMissing, "lease", "revoke", id)
	c.fails(errLeaseMissing, "lease", "keep-alive", "--once", id)
	c.fails(errLeaseMissing, "put", "--lease="+id, "l/k", "v")

	// Expiry deletes the attached keys.
	m = c.expectMatch(`lease ([0-9a-f]+) granted with TTL\(2s\)\n`, "lease", "grant", "2")
	short := m[1]
	c.ok("put", "--lease="+short, "l/exp", "soon")
	c.expect("l/exp\nsoon\n", "get", "l/exp")
	granted := time.Now()
	for c.ok("get", "l/exp") != "" {
		if time.Since(granted) > 10*time.Second {
			t.Fatalf("key of a 2s lease still present after %v", time.Since(granted))
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.expect("lease "+short+" already expired\n", "lease", "timetolive", short)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestEtcdctlCompaction(t *testing.T) {
	c := newCtl(t, startServer(t))
	r1 := c.putRev("c/k", "v1")
	r2 := c.putRev("c/k", "v2")
	r3 := c.putRev("c/k", "v3")
	c.putRev("c/other", "o")

	c.expect("compacted revision "+itoa(r2)+"\n", "compaction", itoa(r2))

	c.fails(errCompacted, "get", "c/k", "--rev", itoa(r1))
	// The compaction revision itself stays readable.
	c.expect("c/k\nv2\n", "get", "c/k", "--rev", itoa(r2))
	c.expect("c/k\nv3\n", "get", "c/k", "--rev", itoa(r3))
	c.expect("c/k\nv3\n", "get", "c/k")
	c.fails(errCompacted, "compaction", itoa(r1))
	c.fails(errFutureRev, "compaction", itoa(r3+100))

	// A watch starting below the floor is cancelled with the same error.
	out, errOut, err := c.run("", "watch", "c/k", "--rev", itoa(r1))
	if err == nil || !strings.Contains(errorLines(errOut), errCompacted) {
		t.Errorf("watch --rev below compaction: err %v, stdout %q, stderr:\n%s", err, out, errOut)
	}
	// From the floor on, history is intact.
	w := c.watch("c/k", "--rev", itoa(r2))
	w.expectLines("PUT", "c/k", "v2", "PUT", "c/k", "v3")
}

func TestEtcdctlMaintenance(t *testing.T) {
	s := startServer(t)
	c := newCtl(t, s)
	rev := c.putRev("m/k", "v")

	var status []struct {
		Endpoint string
		Status   struct {
			Header  jsonHeader `json:"header"`
			Version string     `json:"version"`
			DBSize  int64      `json:"dbSize"`
			Leader  uint64     `json:"leader"`
		}
	}
	c.okJSON(&status, "endpoint", "status")
	if len(status) != 1 {
		t.Fatalf("endpoint status: %d entries, want 1", len(status))
	}
	st := status[0]
	if st.Endpoint != s.Endpoint {
		t.Errorf("endpoint status: endpoint %q, want %q", st.Endpoint, s.Endpoint)
	}
	if !strings.HasPrefix(st.Status.Version, "3.6.") {
		t.Errorf("endpoint status: version %q, want 3.6.x", st.Status.Version)
	}
	if st.Status.Header.Revision != rev {
		t.Errorf("endpoint status: revision %d, want %d", st.Status.Header.Revision, rev)
	}
	if replicaMode() {
		if st.Status.Leader == 0 || st.Status.Leader == st.Status.Header.MemberID {
			t.Errorf("endpoint status: leader %x, member %x; a replica names the Primary", st.Status.Leader, st.Status.Header.MemberID)
		}
	} else if st.Status.Leader == 0 || st.Status.Leader != st.Status.Header.MemberID {
		t.Errorf("endpoint status: leader %x, member %x; a single node leads itself", st.Status.Leader, st.Status.Header.MemberID)
	}
	if st.Status.DBSize <= 0 {
		t.Errorf("endpoint status: dbSize %d", st.Status.DBSize)
	}
	c.expectMatch(`\Q`+s.Endpoint+`\E, [0-9a-f]+, 3\.6\.\d+, .*\n`, "endpoint", "status")

	c.expectMatch(`\Q`+s.Endpoint+`\E is healthy: successfully committed proposal: took = \S+\n`, "endpoint", "health")
	var health []struct {
		Endpoint string `json:"endpoint"`
		Health   bool   `json:"health"`
	}
	c.okJSON(&health, "endpoint", "health")
	if len(health) != 1 || health[0].Endpoint != s.Endpoint || !health[0].Health {
		t.Errorf("endpoint health -w json: %+v", health)
	}

	var members struct {
		Header  jsonHeader `json:"header"`
		Members []struct {
			ID         uint64   `json:"ID"`
			Name       string   `json:"name"`
			PeerURLs   []string `json:"peerURLs"`
			ClientURLs []string `json:"clientURLs"`
		} `json:"members"`
	}
	c.okJSON(&members, "member", "list")
	want := 1
	if replicaMode() {
		want = 3
	}
	if len(members.Members) != want {
		t.Fatalf("member list: %d members, want %d", len(members.Members), want)
	}
	mem := members.Members[0]
	for _, m := range members.Members {
		if m.ID == members.Header.MemberID {
			mem = m
		}
	}
	if mem.ID == 0 || mem.ID != members.Header.MemberID || !contains(mem.ClientURLs, s.Endpoint) {
		t.Errorf("member list: %+v (header member %x), want this member serving %s", mem, members.Header.MemberID, s.Endpoint)
	}
	if !replicaMode() {
		c.expectMatch(strconv.FormatUint(mem.ID, 16)+`, started, [^,]*, [^,]*, \Q`+s.Endpoint+`\E, false\n`, "member", "list")
	}

	c.expect("", "alarm", "list")
	c.expectMatch(`Finished defragmenting etcd member\[\Q`+s.Endpoint+`\E\]\. took \S+\n`, "defrag")

	path := filepath.Join(t.TempDir(), "snap.db")
	out := c.ok("snapshot", "save", path)
	if !strings.Contains(out, "Snapshot saved at "+path+"\n") {
		t.Errorf("snapshot save printed %q", out)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		t.Errorf("snapshot file: %v, %v", fi, err)
	}
}

// TestRestartKeepsData stops the server gracefully (SIGTERM), expects a
// clean exit, and finds every write and the revision again after a restart.
func TestRestartKeepsData(t *testing.T) {
	s := startServer(t)
	c := newCtl(t, s)
	for i := range 20 {
		c.ok("put", fmt.Sprintf("r/%02d", i), strconv.Itoa(i))
	}
	c.ok("del", "r/05")
	var before jsonRange
	c.okJSON(&before, "get", "--prefix", "r/")
	if err := s.Stop(); err != nil {
		t.Errorf("graceful stop: %v", err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	var after jsonRange
	c.okJSON(&after, "get", "--prefix", "r/")
	if after.Header.Revision != before.Header.Revision || fmt.Sprint(after.KVs) != fmt.Sprint(before.KVs) {
		t.Errorf("after restart: rev %d, %d keys; before: rev %d, %d keys\nafter  %+v\nbefore %+v",
			after.Header.Revision, len(after.KVs), before.Header.Revision, len(before.KVs), after.KVs, before.KVs)
	}
	// History survives too.
	c.expect("r/05\n5\n", "get", "r/05", "--rev", itoa(before.Header.Revision-1))
}
