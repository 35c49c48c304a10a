//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/netsy-io/netsy/internal/clusterview"
	"github.com/netsy-io/netsy/internal/testutil/lincheck"
	"github.com/netsy-io/netsy/internal/testutil/miniotest"
	"github.com/netsy-io/netsy/internal/testutil/procutil"
)

// cluster is several netsy processes sharing one bucket.
type cluster struct {
	t     *testing.T
	nodes map[string]*procutil.Server
	// net is the proxies in front of the nodes and MinIO
	// (startProxiedCluster), nil without.
	net *faultNet
}

// clusterElectorLease is the Elector lock's lease in the cluster tests:
// short, so an Elector crash is survived within the test's patience.
const clusterElectorLease = 3 * time.Second

// startCluster starts n nodes (n1, n2, ...) on srv's bucket (or a shared
// file store when srv is nil) and waits for them all to be ready.
func startCluster(t *testing.T, n int, srv *miniotest.Server, extra ...string) *cluster {
	t.Helper()
	return startClusterNet(t, n, srv, nil, extra...)
}

// startProxiedCluster is startCluster with a faultNet: every peer
// connection and every object storage request passes a faultproxy the
// test can cut (c.net).
func startProxiedCluster(t *testing.T, n int, srv *miniotest.Server, extra ...string) *cluster {
	t.Helper()
	return startClusterNet(t, n, srv, newFaultNet(t), extra...)
}

func startClusterNet(t *testing.T, n int, srv *miniotest.Server, fn *faultNet, extra ...string) *cluster {
	t.Helper()
	var args, env []string
	if srv != nil {
		args, env = minioArgs(srv, "cluster")
		// minioArgs asks for sync mode; the cluster tests choose their own.
		args = args[:len(args)-6]
		if fn != nil {
			args[slices.Index(args, "--s3-endpoint")+1] = fn.s3Endpoint(srv)
		}
	} else {
		args = []string{"--storage", "file://" + t.TempDir()}
	}
	args = append(args, "--elector-lease", clusterElectorLease.String(), "--elector-renew", "1s")
	c := &cluster{t: t, nodes: map[string]*procutil.Server{}, net: fn}
	opts := make([]procutil.Options, n+1)
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("n%d", i)
		a := append(append([]string{"--node-id", id}, args...), extra...)
		if fn != nil {
			var more []string
			opts[i], more = fn.nodeOptions(id)
			a = append(a, more...)
		}
		opts[i].Args, opts[i].Env = a, env
	}
	// n1 first, so it takes the Elector lock and is elected as the tests
	// expect; the others then start side by side (each waits for its
	// /readyz, which is most of a start), not one after another.
	c.nodes["n1"] = procutil.StartNetsy(t, opts[1])
	started := make([]*procutil.Server, n+1)
	var wg sync.WaitGroup
	for i := 2; i <= n; i++ {
		wg.Add(1)
		go func() {
			// A failed start fails t (procutil reports it) and ends this
			// goroutine; the test stops below.
			defer wg.Done()
			started[i] = procutil.StartNetsy(t, opts[i])
		}()
	}
	wg.Wait()
	for i := 2; i <= n; i++ {
		if started[i] == nil {
			t.FailNow()
		}
		c.nodes[fmt.Sprintf("n%d", i)] = started[i]
	}
	c.waitState(30*time.Second, func(v clusterview.View) bool {
		return v.Primary != nil && v.RegisteredNodes == uint32(n)
	})
	return c
}

// state reads /cluster/state from node id.
func (c *cluster) state(id string) (clusterview.View, error) {
	var v clusterview.View
	s := c.nodes[id]
	resp, err := http.Get("http://" + s.HTTPAddr + "/cluster/state")
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return v, fmt.Errorf("/cluster/state on %s: %s", id, resp.Status)
	}
	return v, json.NewDecoder(resp.Body).Decode(&v)
}

// running lists the ids of the running nodes.
func (c *cluster) running() []string {
	var ids []string
	for id, s := range c.nodes {
		if s.Running() {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// waitState waits until cond holds for the state every running node
// answers with the Elector's view.
func (c *cluster) waitState(timeout time.Duration, cond func(clusterview.View) bool) clusterview.View {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	var last clusterview.View
	var lastErr error
	for time.Now().Before(deadline) {
		ok := true
		for _, id := range c.running() {
			v, err := c.state(id)
			if err != nil || !cond(v) {
				ok, last, lastErr = false, v, err
				break
			}
			last = v
		}
		if ok {
			return last
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("cluster state not reached within %v: %+v %v", timeout, last, lastErr)
	return last
}

func (c *cluster) roles() (elector, primary string) {
	c.t.Helper()
	v := c.waitState(30*time.Second, func(v clusterview.View) bool { return v.Primary != nil && v.Elector != nil })
	return v.Elector.NodeID, v.Primary.NodeID
}

// other returns a running node that is neither of avoid.
func (c *cluster) other(avoid ...string) string {
	for _, id := range c.running() {
		if !slices.Contains(avoid, id) {
			return id
		}
	}
	c.t.Fatalf("no running node besides %v", avoid)
	return ""
}

func (c *cluster) client(ids ...string) *clientv3.Client {
	var eps []string
	for _, id := range ids {
		eps = append(eps, c.nodes[id].Endpoint)
	}
	return newClientEndpoints(c.t, eps)
}

// writeLoop puts keys through cli until stopped, counting failures.
type writeLoop struct {
	ok, failed atomic.Int64
	stop       chan struct{}
	done       chan struct{}
}

func startWrites(t *testing.T, cli *clientv3.Client, prefix string) *writeLoop {
	w := &writeLoop{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for i := 0; ; i++ {
			select {
			case <-w.stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			_, err := cli.Put(ctx, fmt.Sprintf("%s/%d", prefix, i), "v")
			cancel()
			if err != nil {
				w.failed.Add(1)
				t.Logf("write failed: %v", err)
			} else {
				w.ok.Add(1)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return w
}

func (w *writeLoop) end() (ok, failed int64) {
	close(w.stop)
	<-w.done
	return w.ok.Load(), w.failed.Load()
}

// firstWrite returns how long it takes until a write through cli succeeds.
func firstWrite(t *testing.T, cli *clientv3.Client, key string) time.Duration {
	t.Helper()
	start := time.Now()
	for time.Since(start) < 60*time.Second {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		_, err := cli.Put(ctx, key, "v")
		cancel()
		if err == nil {
			return time.Since(start)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no write succeeded within a minute")
	return 0
}

func skipUnlessNetsy(t *testing.T) {
	if target != procutil.KindNetsy {
		t.Skip("a Netsy cluster")
	}
}

// TestClusterFailover: three nodes on MinIO. netsyctl shows one Elector and
// one Primary; a SIGKILLed Primary is replaced and writes through a
// surviving node succeed again; a SIGKILLed Elector is replaced within its
// lease + 1 s with no failed write; a SIGSTOPped node is Degraded and then
// Healthy again after SIGCONT, with no restart; a handoff moves the Primary
// with no failed write.
func TestClusterFailover(t *testing.T) {
	skipUnlessNetsy(t)
	srv := miniotest.Start(t)
	c := startCluster(t, 3, srv)

	// netsyctl cluster-state, through any node's client port.
	ctl := procutil.BuildNetsyctl(t)
	out, err := exec.Command(ctl, "cluster-state", "--endpoints", c.nodes["n2"].ClientAddr, "-o", "json").CombinedOutput()
	if err != nil {
		t.Fatalf("netsyctl cluster-state: %v\n%s", err, out)
	}
	var v clusterview.View
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("netsyctl cluster-state -o json: %v\n%s", err, out)
	}
	electors, primaries := 0, 0
	for _, n := range v.Nodes {
		if n.Elector {
			electors++
		}
		if n.Primary {
			primaries++
		}
	}
	if electors != 1 || primaries != 1 || len(v.Nodes) != 3 {
		t.Fatalf("cluster-state: %d Electors, %d Primaries, %d nodes:\n%s", electors, primaries, len(v.Nodes), out)
	}

	// The Elector moves off the Primary once the others caught up.
	v = c.waitState(30*time.Second, func(v clusterview.View) bool {
		return v.Primary != nil && v.Elector != nil && v.Primary.NodeID != v.Elector.NodeID
	})
	elector, primary := v.Elector.NodeID, v.Primary.NodeID

	t.Run("primary SIGKILL", func(t *testing.T) {
		survivor := c.other(primary)
		cli := c.client(survivor)
		firstWrite(t, cli, "warm")
		if err := c.nodes[primary].Kill(); err != nil {
			t.Fatal(err)
		}
		took := firstWrite(t, cli, "after-primary-kill")
		t.Logf("first successful write %v after the Primary was SIGKILLed", took)
		nv := c.waitState(30*time.Second, func(v clusterview.View) bool { return v.Primary != nil && v.Primary.NodeID != primary })
		t.Logf("new Primary %s at term %d", nv.Primary.NodeID, nv.PrimaryTerm)
		if err := c.nodes[primary].Restart(); err != nil {
			t.Fatal(err)
		}
		c.waitState(30*time.Second, func(v clusterview.View) bool { return v.RegisteredNodes == 3 })
	})

	elector, primary = c.roles()
	t.Run("elector SIGKILL", func(t *testing.T) {
		if elector == primary {
			v := c.waitState(30*time.Second, func(v clusterview.View) bool {
				return v.Primary != nil && v.Elector != nil && v.Primary.NodeID != v.Elector.NodeID
			})
			elector, primary = v.Elector.NodeID, v.Primary.NodeID
		}
		cli := c.client(primary)
		w := startWrites(t, cli, "elector-kill")
		start := time.Now()
		if err := c.nodes[elector].Kill(); err != nil {
			t.Fatal(err)
		}
		nv := c.waitState(clusterElectorLease+5*time.Second, func(v clusterview.View) bool {
			return v.Elector != nil && v.Elector.NodeID != elector
		})
		took := time.Since(start)
		ok, failed := w.end()
		t.Logf("new Elector %s %v after the Elector was SIGKILLed; %d writes meanwhile, %d failed", nv.Elector.NodeID, took, ok, failed)
		if took > clusterElectorLease+time.Second+500*time.Millisecond {
			t.Errorf("new Elector after %v, want within the lease (%v) + 1 s", took, clusterElectorLease)
		}
		if failed > 0 {
			t.Errorf("%d writes failed while the Elector was replaced", failed)
		}
		if err := c.nodes[elector].Restart(); err != nil {
			t.Fatal(err)
		}
		c.waitState(30*time.Second, func(v clusterview.View) bool { return v.RegisteredNodes == 3 })
	})

	elector, primary = c.roles()
	t.Run("SIGSTOP and SIGCONT", func(t *testing.T) {
		victim := c.other(elector, primary)
		s := c.nodes[victim]
		if err := syscall.Kill(s.PID(), syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		stopped := true
		defer func() {
			if stopped {
				syscall.Kill(s.PID(), syscall.SIGCONT)
			}
		}()
		state := func(v clusterview.View) string {
			for _, n := range v.Nodes {
				if n.NodeID == victim {
					return n.Health
				}
			}
			return ""
		}
		delete(c.nodes, victim) // not asked while stopped
		c.waitState(10*time.Second, func(v clusterview.View) bool { return state(v) == "Degraded" })
		if err := syscall.Kill(s.PID(), syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		stopped = false
		c.nodes[victim] = s
		c.waitState(10*time.Second, func(v clusterview.View) bool { return state(v) == "Healthy" })
	})

	elector, primary = c.roles()
	t.Run("handoff", func(t *testing.T) {
		cli := c.client(c.other(primary))
		w := startWrites(t, cli, "handoff")
		time.Sleep(200 * time.Millisecond)
		start := time.Now()
		out, err := exec.Command(ctl, "handoff", "--endpoints", c.nodes[c.other()].ClientAddr).CombinedOutput()
		if err != nil {
			t.Fatalf("netsyctl handoff: %v\n%s", err, out)
		}
		took := time.Since(start)
		time.Sleep(300 * time.Millisecond)
		ok, failed := w.end()
		t.Logf("netsyctl handoff took %v; %d writes, %d failed:\n%s", took, ok, failed, out)
		if failed > 0 {
			t.Errorf("%d writes failed during the handoff", failed)
		}
		_, np := c.roles()
		if np == primary {
			t.Errorf("the Primary is still %s after the handoff", np)
		}
	})
}

// The faults TestClusterLinearizable injects, one at a time.
const (
	faultPrimaryKill = "primary SIGKILL"
	faultElectorKill = "elector SIGKILL"
	faultReplicaKill = "replica SIGKILL"
	faultReplicaStop = "replica SIGSTOP"
	faultMinIOFreeze = "MinIO SIGSTOP"
	faultMinIOKill   = "MinIO SIGKILL"
)

const (
	// linRecover bounds how long after a fault is lifted (the restart
	// or SIGCONT begins) a write through every node must succeed again.
	linRecover = 15 * time.Second
	// linBudget bounds TestClusterLinearizable's default plan, both
	// quorum modes together.
	linBudget = 5 * time.Minute
	// A client's pause after a failed call, doubling up to linMaxBackoff
	// while its calls keep failing.
	linBackoff, linMaxBackoff = 250 * time.Millisecond, 2 * time.Second
)

// linFault is one fault: after pause, kind is injected and lifted after
// hold (a killed node or MinIO restarts after hold).
type linFault struct {
	kind        string
	pause, hold time.Duration
}

// linFaults is the fault plan: every kind, the Primary SIGKILL twice, MinIO
// frozen and then stopped for 10 s each; or with NETSY_SOAK_ROUNDS (make
// soak) that many drawn at random, with random pauses and holds, from
// NETSY_SOAK_SEED or a seed the test logs, which replays the plan.
func linFaults(t *testing.T) []linFault {
	rounds, _ := strconv.Atoi(os.Getenv("NETSY_SOAK_ROUNDS"))
	if rounds <= 0 {
		return []linFault{
			{faultPrimaryKill, time.Second, 2 * time.Second},
			{faultElectorKill, time.Second, 2 * time.Second},
			{faultReplicaKill, time.Second, 2 * time.Second},
			{faultReplicaStop, time.Second, 3 * time.Second},
			{faultMinIOFreeze, time.Second, 10 * time.Second},
			{faultPrimaryKill, time.Second, 2 * time.Second},
			{faultMinIOKill, time.Second, 10 * time.Second},
		}
	}
	seed, err := strconv.ParseUint(os.Getenv("NETSY_SOAK_SEED"), 10, 64)
	if err != nil {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("soak: %d faults from seed %d (NETSY_SOAK_SEED=%d replays the plan)", rounds, seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	kinds := append([]string{faultPrimaryKill, faultElectorKill, faultReplicaKill, faultReplicaStop, faultMinIOFreeze, faultMinIOKill}, netFaultKinds...)
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo))) }
	plan := make([]linFault, rounds)
	for i := range plan {
		f := linFault{kind: kinds[rng.IntN(len(kinds))], pause: between(0, 3*time.Second)}
		switch f.kind {
		case faultReplicaStop:
			f.hold = between(500*time.Millisecond, 8*time.Second)
		case faultMinIOFreeze, faultMinIOKill, faultS3Drop, faultS3Reset:
			f.hold = between(time.Second, 15*time.Second)
		case faultPrimaryPartition, faultPrimaryInDrop, faultPrimaryInRefuse, faultPrimaryMute, faultPrimaryDeaf, faultPrimaryStop, faultElectorStop:
			f.hold = between(500*time.Millisecond, 10*time.Second)
		default:
			f.hold = between(0, 5*time.Second)
		}
		plan[i] = f
	}
	return plan
}

// TestClusterLinearizable records a history of get, put, cas, delete and
// two-key transactions through every node of a 3-node cluster on MinIO
// while the harness injects, one at a time, SIGKILLs of the Primary (twice),
// of the Elector and of a replica (each restarted), a SIGSTOP of a replica,
// and MinIO frozen (SIGSTOP) and stopped (SIGKILL, restarted on the same
// data) for 10 s each, and checks it with porcupine. After each fault is
// lifted a write through every node must succeed within linRecover (the
// time it took is logged). A final read of every key through every node
// joins the history, so an acknowledged write that was lost fails it too.
// Both quorum modes together must finish within linBudget; the default
// plan runs them side by side, a soak one after the other. The cluster is
// proxied (startProxiedCluster); the default plan leaves its proxies
// passing. make soak runs it with a long random fault plan (linFaults) that
// also draws the network cuts and SIGSTOPs of TestClusterPartitions.
func TestClusterLinearizable(t *testing.T) {
	skipUnlessNetsy(t)
	start := time.Now()
	soak, _ := strconv.Atoi(os.Getenv("NETSY_SOAK_ROUNDS"))
	var (
		mu   sync.Mutex
		took []string
	)
	// Runs once both modes have ended, parallel or not.
	t.Cleanup(func() {
		total := time.Since(start)
		t.Logf("took %v (%s)", total.Round(100*time.Millisecond), strings.Join(took, ", "))
		if soak <= 0 && total > linBudget {
			t.Errorf("took %v, over the budget of %v", total, linBudget)
		}
	})
	for _, q := range []string{"-1", "0"} {
		t.Run("quorum"+q, func(t *testing.T) {
			// The default plan's two modes, each on its own MinIO and
			// cluster, run side by side: the test is mostly waiting out
			// fault holds (31 s of them per mode) and recoveries. A soak
			// runs them one after the other.
			if soak <= 0 {
				t.Parallel()
			}
			began := time.Now()
			clusterLinearizable(t, q)
			mu.Lock()
			took = append(took, fmt.Sprintf("quorum %s: %v", q, time.Since(began).Round(100*time.Millisecond)))
			mu.Unlock()
		})
	}
}

// clusterLinearizable is one quorum mode of TestClusterLinearizable.
func clusterLinearizable(t *testing.T, quorum string) {
	srv := miniotest.Start(t)
	t.Cleanup(func() { syscall.Kill(srv.PID, syscall.SIGCONT) })
	c := startProxiedCluster(t, 3, srv, "--quorum", quorum)
	r := startLinRun(t, c, srv, linRecover)
	for _, f := range linFaults(t) {
		time.Sleep(f.pause)
		if !r.fault(f) {
			break
		}
	}
	r.finish()
}

// linKeys is the number of keys of a linRun: 16 pairs, so each partition
// of the check has few open writes.
const linKeys = 32

// linRun is a linearizability check in progress over a cluster: clients
// record a history through every node while the test injects faults one
// at a time (fault), and finish checks it.
type linRun struct {
	t   *testing.T
	c   *cluster
	srv *miniotest.Server
	// recover bounds how long after a fault is lifted a write through
	// every node must succeed.
	recover   time.Duration
	h         *lincheck.History
	nodes     []string
	probes    map[string]*clientv3.Client
	stop      chan struct{}
	wg        sync.WaitGroup
	failed    atomic.Int64
	recovered []string
}

// startLinRun starts two clients on each node of c.
func startLinRun(t *testing.T, c *cluster, srv *miniotest.Server, recover time.Duration) *linRun {
	r := &linRun{t: t, c: c, srv: srv, recover: recover, h: lincheck.NewHistory(), nodes: c.running(),
		probes: map[string]*clientv3.Client{}, stop: make(chan struct{})}
	for _, id := range r.nodes {
		r.probes[id] = c.client(id)
	}
	// Runs before the servers stop (cleanups run last-in first-out).
	t.Cleanup(func() {
		if t.Failed() {
			for _, id := range r.nodes {
				t.Logf("what %s's log says about its roles (%s):\n%s", id, c.nodes[id].LogPath, logStory(c.nodes[id].LogPath, 120))
			}
		}
	})
	for i, id := range []string{"n1", "n2", "n3", "n1", "n2", "n3"} {
		cli := c.client(id)
		lc := newLinClient(uint64(i), "lin", linKeys)
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			backoff := linBackoff
			for n := 0; ; n++ {
				select {
				case <-r.stop:
					return
				case <-t.Context().Done(): // a Fatal elsewhere
					return
				default:
				}
				in := lc.next(fmt.Sprintf("c%d-%d", i, n))
				out, err := r.h.Run(t.Context(), i, cli, in, 5*time.Second)
				if err == nil {
					lc.saw(in, out)
					backoff = linBackoff
					continue
				}
				// An unacknowledged write stays open in the history for
				// good, and each one multiplies the checker's work on its
				// keys: back off longer while calls keep failing, so an
				// outage leaves few of them.
				r.failed.Add(1)
				time.Sleep(backoff)
				backoff = min(2*backoff, linMaxBackoff)
			}
		}()
	}
	return r
}

// settled waits for a Primary and an Elector on two different nodes and
// every node registered.
func (r *linRun) settled() clusterview.View {
	return r.c.waitState(60*time.Second, func(v clusterview.View) bool {
		return v.Primary != nil && v.Elector != nil && v.Primary.NodeID != v.Elector.NodeID && v.RegisteredNodes == 3
	})
}

// writable waits until a put through each node succeeds, at most
// r.recover after lifted, and returns how long after lifted the last of
// them did.
func (r *linRun) writable(lifted time.Time) (time.Duration, error) {
	ctx, cancel := context.WithDeadline(r.t.Context(), lifted.Add(r.recover))
	defer cancel()
	for _, id := range r.nodes {
		var last error
		for n := 1; ; n++ {
			pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := r.probes[id].Put(pctx, "progress/"+id, "v")
			timedOut := pctx.Err() != nil && ctx.Err() == nil
			pcancel()
			if err == nil {
				break
			}
			if timedOut {
				err = fmt.Errorf("no answer within 2s: %w", err)
			}
			if ctx.Err() == nil || last == nil {
				last = err
			}
			if ctx.Err() != nil {
				return 0, fmt.Errorf("no write through %s succeeded within %v (%d attempts, the last complete one: %v)", id, r.recover, n, last)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return time.Since(lifted), nil
}

// fault injects f once the cluster is settled, lifts it after f.hold and
// checks that a write through every node succeeds within r.recover. It
// reports false (after t.Errorf) when one did not.
func (r *linRun) fault(f linFault) bool {
	t, c := r.t, r.c
	v := r.settled()
	elector, primary := v.Elector.NodeID, v.Primary.NodeID
	replica := c.other(elector, primary)
	before, ops := r.failed.Load(), r.h.Len()
	t.Logf("%s for %v (elector %s, primary %s, replica %s)", f.kind, f.hold, elector, primary, replica)
	injected := time.Now()
	var lifted time.Time
	switch f.kind {
	case faultPrimaryKill, faultElectorKill, faultReplicaKill:
		victim := map[string]string{faultPrimaryKill: primary, faultElectorKill: elector, faultReplicaKill: replica}[f.kind]
		if err := c.nodes[victim].Kill(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(f.hold)
		lifted = time.Now()
		if err := c.nodes[victim].Restart(); err != nil {
			t.Fatal(err)
		}
	case faultReplicaStop, faultMinIOFreeze:
		pid := r.srv.PID
		if f.kind == faultReplicaStop {
			pid = c.nodes[replica].PID()
		}
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(f.hold)
		lifted = time.Now()
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	case faultMinIOKill:
		r.srv.Kill()
		time.Sleep(f.hold)
		lifted = time.Now()
		if err := r.srv.Restart(); err != nil {
			t.Fatal(err)
		}
	default:
		lifted = r.netFault(f, elector, primary)
	}
	rec, err := r.writable(lifted)
	if err != nil {
		t.Errorf("%s: not recovered: %v", f.kind, err)
		return false
	}
	rec, all := rec.Round(time.Millisecond), (rec + lifted.Sub(injected)).Round(time.Millisecond)
	r.recovered = append(r.recovered, fmt.Sprintf("%s %v", f.kind, rec))
	t.Logf("%s: a write through every node %v after the fault was lifted (%v after it was injected); %d operations, %d failed or timed out",
		f.kind, rec, all, r.h.Len()-ops, r.failed.Load()-before)
	after := r.settled()
	t.Logf("%s: then elector %s (term %d), primary %s (term %d)", f.kind, after.Elector.NodeID, after.ElectorTerm, after.Primary.NodeID, after.PrimaryTerm)
	return true
}

// finish stops the clients, reads every key through every node into the
// history, and checks it.
func (r *linRun) finish() {
	t := r.t
	time.Sleep(time.Second)
	close(r.stop)
	r.wg.Wait()
	// Every key, read through every node at the end; a node that fails
	// one is not asked again, so a dead cluster fails in seconds.
	for n, id := range r.nodes {
		for k := range linKeys {
			in := lincheck.Input{Op: lincheck.Get, Key: fmt.Sprintf("lin/%d", k)}
			if _, err := r.h.Run(t.Context(), 100+n, r.probes[id], in, 10*time.Second); err != nil {
				t.Errorf("final read of %s through %s: %v", in.Key, id, err)
				break
			}
		}
	}
	t.Logf("recovery after the fault was lifted: %s", strings.Join(r.recovered, ", "))
	t.Logf("%d operations, %d failed or timed out", r.h.Len(), r.failed.Load())
	lincheck.Check(t, r.h.Ops())
}
