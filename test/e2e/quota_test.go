//go:build e2e

package e2e

import (
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/netsy-io/netsy/internal/clusterview"
	"github.com/netsy-io/netsy/internal/testutil/procutil"
)

// quotaBytes is the space quota of the quota tests: a few hundred writes
// of fillValue, on netsy and on etcd.
const quotaBytes = 4 << 20

var fillValue = strings.Repeat("x", 32<<10)

// fillToQuota updates one key until the server refuses a write for space,
// and fails the test unless that happens with etcd's error.
func fillToQuota(t *testing.T, cli *clientv3.Client) {
	t.Helper()
	for i := 0; i < 2000; i++ {
		_, err := cli.Put(opCtx(t), "quota/fill", fillValue)
		if err == nil {
			continue
		}
		if !errors.Is(err, rpctypes.ErrNoSpace) {
			t.Fatalf("put %d: %v, want %v", i, err, rpctypes.ErrNoSpace)
		}
		return
	}
	t.Fatalf("2000 puts of %d bytes fit a quota of %d bytes", len(fillValue), quotaBytes)
}

var alarmLine = regexp.MustCompile(`\AmemberID:(\d+) alarm:NOSPACE ?\n\z`)

// alarmMember runs `etcdctl alarm list` and returns the member id of the
// one NOSPACE alarm it must list.
func alarmMember(t *testing.T, c *ctl) uint64 {
	t.Helper()
	out := c.ok("alarm", "list")
	m := alarmLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("alarm list on %s printed %q, want one NOSPACE alarm", c.endpoint, out)
	}
	id, _ := strconv.ParseUint(m[1], 10, 64)
	return id
}

// TestQuotaAlarm: with --quota-backend-bytes, a node filled past it
// refuses writes with etcd's error and lists the NOSPACE alarm of its own
// member; reads and deletes still work; after compaction and defrag,
// disarm lets writes in again.
func TestQuotaAlarm(t *testing.T) {
	s := procutil.Start(t, target, procutil.Options{Args: []string{"--quota-backend-bytes", strconv.Itoa(quotaBytes)}})
	c := newCtl(t, s)
	cli := newClient(t, s)
	c.ok("put", "quota/other", "v")
	fillToQuota(t, cli)

	c.fails("etcdserver: mvcc: database space exceeded", "put", "quota/new", "v")
	c.fails("etcdserver: mvcc: database space exceeded", "lease", "grant", "60")
	var status []struct {
		Status struct {
			Header jsonHeader `json:"header"`
		}
	}
	c.okJSON(&status, "endpoint", "status")
	if id := alarmMember(t, c); id != status[0].Status.Header.MemberID {
		t.Errorf("alarm raised by member %x, want this node's %x", id, status[0].Status.Header.MemberID)
	}
	c.expect("quota/other\nv\n", "get", "quota/other")
	c.expect("1\n", "del", "quota/other")
	rev := currentRev(t, cli)
	c.expect("compacted revision "+itoa(rev)+"\n", "compaction", "--physical", itoa(rev))
	c.expectMatch(`Finished defragmenting etcd member\[\Q`+s.Endpoint+`\E\]\. took \S+\n`, "defrag")
	// Still refused until disarmed.
	c.fails("etcdserver: mvcc: database space exceeded", "put", "quota/new", "v")
	out := c.ok("alarm", "disarm")
	if !alarmLine.MatchString(out) {
		t.Errorf("alarm disarm printed %q, want the disarmed NOSPACE alarm", out)
	}
	c.expect("", "alarm", "list")
	c.expect("OK\n", "put", "quota/new", "v")
}

// TestQuotaAlarmOnReplica: in a 3-node cluster the alarm the Primary
// raises is listed by every node under the Primary's member id, a replica
// refuses writes with etcd's error, and a disarm through a replica lets
// writes in on every node.
func TestQuotaAlarmOnReplica(t *testing.T) {
	skipUnlessNetsy(t)
	cl := startCluster(t, 3, nil, "--quota-backend-bytes", strconv.Itoa(quotaBytes))
	v := cl.waitState(30*time.Second, func(v clusterview.View) bool { return v.Primary != nil })
	replica := cl.other(v.Primary.NodeID)
	cli := cl.client(replica)
	fillToQuota(t, cli)

	rc := newCtl(t, cl.nodes[replica])
	rc.fails("etcdserver: mvcc: database space exceeded", "put", "quota/new", "v")
	var status []struct {
		Status struct {
			Leader uint64 `json:"leader"`
		}
	}
	rc.okJSON(&status, "endpoint", "status")
	for id, s := range cl.nodes {
		// A replica lists what it applied: the alarm entry follows the
		// refused write's answer by at most a commit message.
		c := newCtl(t, s)
		var got uint64
		for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
			if m := alarmLine.FindStringSubmatch(c.ok("alarm", "list")); m != nil {
				got, _ = strconv.ParseUint(m[1], 10, 64)
				break
			}
			if time.Since(start) > 5*time.Second {
				t.Fatalf("node %s lists no NOSPACE alarm", id)
			}
		}
		if got != status[0].Status.Leader {
			t.Errorf("node %s lists the alarm of member %x, want the Primary's %x", id, got, status[0].Status.Leader)
		}
	}
	rev := currentRev(t, cli)
	rc.expect("compacted revision "+itoa(rev)+"\n", "compaction", itoa(rev))
	rc.ok("alarm", "disarm")
	rc.expect("", "alarm", "list")
	rc.expect("OK\n", "put", "quota/new", "v")
	newCtl(t, cl.nodes[v.Primary.NodeID]).expect("", "alarm", "list")
}

// TestAutoCompactionPeriodic: with --auto-compaction-mode periodic and a
// retention of 2s, a client that never compacts finds an old revision
// compacted within a few seconds.
func TestAutoCompactionPeriodic(t *testing.T) {
	s := procutil.Start(t, target, procutil.Options{Args: []string{"--auto-compaction-mode", "periodic", "--auto-compaction-retention", "2s"}})
	cli := newClient(t, s)
	old := mustPut(t, cli, "ac/k", "v0")
	start := time.Now()
	for i := 1; ; i++ {
		mustPut(t, cli, "ac/k", "v"+itoa(int64(i)))
		_, err := cli.Get(opCtx(t), "ac/k", clientv3.WithRev(old))
		if errors.Is(err, rpctypes.ErrCompacted) {
			t.Logf("revision %d compacted after %s", old, time.Since(start).Round(100*time.Millisecond))
			return
		}
		if err != nil {
			t.Fatalf("get at revision %d: %v", old, err)
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("revision %d still readable after %s with a 2s retention", old, time.Since(start))
		}
		time.Sleep(200 * time.Millisecond)
	}
}
