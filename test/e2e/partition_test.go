//go:build e2e

package e2e

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/netsy-io/netsy/internal/testutil/faultproxy"
	"github.com/netsy-io/netsy/internal/testutil/miniotest"
)

// The faults of the network (through the cluster's faultNet) and the
// SIGSTOPs of a role that TestClusterPartitions injects, one class per
// subtest. The Primary's peer links are cut while its client port and its
// object storage stay reachable: clients on its side keep calling it, which
// is where a Primary that still answers after being replaced shows up.
const (
	// Both ways: nothing reaches the Primary's peer port and nothing the
	// Primary sends to another node's peer port arrives (blackhole).
	faultPrimaryPartition = "primary partition"
	// Only the Primary's inbound peer port, blackholed.
	faultPrimaryInDrop = "primary inbound drop"
	// Only the Primary's inbound peer port, refused (ECONNREFUSED, open
	// connections reset), as a REJECT rule: what a dialer reads as "that
	// process is gone" although the Primary runs on.
	faultPrimaryInRefuse = "primary inbound refused"
	// One-way: bytes reach the Primary over its peer links, none leave it.
	faultPrimaryMute = "primary one-way in"
	// One-way: the Primary's bytes leave over its peer links, none reach it.
	faultPrimaryDeaf = "primary one-way out"
	faultPrimaryStop = "primary SIGSTOP"
	faultElectorStop = "elector SIGSTOP"
	// Object storage blackholed, and every request to it reset.
	faultS3Drop  = "object storage drop"
	faultS3Reset = "object storage reset"
)

// netFaultKinds are the kinds netFault injects, for the soak plan.
var netFaultKinds = []string{
	faultPrimaryPartition, faultPrimaryInDrop, faultPrimaryInRefuse, faultPrimaryMute, faultPrimaryDeaf,
	faultPrimaryStop, faultElectorStop, faultS3Drop, faultS3Reset,
}

// partRecover is how soon after a fault of TestClusterPartitions heals a
// write through every node must succeed.
const partRecover = 5 * time.Second

// partParallel is how many classes of TestClusterPartitions' default plan
// run at once.
const partParallel = 3

// netFault injects one of netFaultKinds, holds it for f.hold, lifts it and
// returns when it did.
func (r *linRun) netFault(f linFault, elector, primary string) time.Time {
	t, c := r.t, r.c
	pid := func(id string) int {
		p := c.nodes[id].PID()
		if p == 0 {
			t.Fatalf("%s: %s is not running", f.kind, id)
		}
		return p
	}
	stop := func(pid int) func() {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { syscall.Kill(pid, syscall.SIGCONT) })
		return func() {
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
		}
	}
	var lift func()
	if c.net == nil {
		switch f.kind {
		case faultPrimaryStop, faultElectorStop:
		default:
			t.Fatalf("%s needs a proxied cluster (startProxiedCluster)", f.kind)
		}
	}
	switch f.kind {
	case faultPrimaryPartition:
		c.net.cutNode(primary, pid(primary), faultproxy.Drop, faultproxy.Drop)
	case faultPrimaryInDrop:
		c.net.set(c.net.peer[primary], faultproxy.Drop)
	case faultPrimaryInRefuse:
		c.net.set(c.net.peer[primary], faultproxy.Refuse)
	case faultPrimaryMute:
		// Its inbound connections carry requests to it but no answers;
		// its outbound ones carry answers to it but no requests.
		c.net.cutNode(primary, pid(primary), faultproxy.ToUpstream, faultproxy.ToClient)
	case faultPrimaryDeaf:
		c.net.cutNode(primary, pid(primary), faultproxy.ToClient, faultproxy.ToUpstream)
	case faultPrimaryStop:
		lift = stop(pid(primary))
	case faultElectorStop:
		lift = stop(pid(elector))
	case faultS3Drop:
		c.net.set(c.net.s3, faultproxy.Drop)
	case faultS3Reset:
		c.net.set(c.net.s3, faultproxy.Reset)
	default:
		t.Fatalf("unknown fault %q", f.kind)
	}
	if lift == nil {
		lift = c.net.heal
	}
	if c.net != nil {
		pids := map[string]int{}
		for id, s := range c.nodes {
			pids[id] = s.PID()
		}
		t.Logf("%s injected; node pids %v; %v", f.kind, pids, c.net)
	}
	time.Sleep(f.hold)
	lifted := time.Now()
	lift()
	return lifted
}

// partitionPlan is TestClusterPartitions' classes, each with how long it
// is held and the quorum mode it runs under by default (alternating, so
// make test covers both modes in about a minute, partParallel classes at a
// time; NETSY_PARTITION_QUORUM
// runs every class under the modes it lists): the peer cuts for 4 s
// (several times the Primary's lease, so the Elector replaces it while it
// still runs), the Primary's SIGSTOP for 8 s (the pause that once left it
// never rejoining), the Elector's SIGSTOP for twice its lease, object
// storage for 4 s.
var partitionPlan = []struct {
	linFault
	quorum string
}{
	{linFault{kind: faultPrimaryPartition, hold: 4 * time.Second}, "-1"},
	{linFault{kind: faultPrimaryInDrop, hold: 4 * time.Second}, "0"},
	{linFault{kind: faultPrimaryInRefuse, hold: 4 * time.Second}, "-1"},
	{linFault{kind: faultPrimaryMute, hold: 4 * time.Second}, "0"},
	{linFault{kind: faultPrimaryDeaf, hold: 4 * time.Second}, "-1"},
	{linFault{kind: faultPrimaryStop, hold: 8 * time.Second}, "0"},
	{linFault{kind: faultElectorStop, hold: 2 * clusterElectorLease}, "-1"},
	{linFault{kind: faultS3Drop, hold: 4 * time.Second}, "0"},
	{linFault{kind: faultS3Reset, hold: 4 * time.Second}, "-1"},
}

// TestClusterPartitions runs the linearizability check of
// TestClusterLinearizable (6 clients through every node of a 3-node cluster
// on MinIO) once per fault class, each on a fresh cluster whose peer ports
// and object storage sit behind faultproxies, under its own subtest
// (-run 'TestClusterPartitions/primary_inbound_refused/' runs one): the
// Primary partitioned from its peers both ways, only its inbound peer port
// blackholed or refused, one-way cuts of its peer links each way, a SIGSTOP
// of the Primary for 8 s and of the Elector for twice its lease, object
// storage blackholed and reset. Each class must leave 0 violations and no
// acknowledged write lost (a final read of every key through every node),
// and a write through every node must succeed within 5 s after the fault
// heals. Each class runs under one quorum mode (partitionPlan), up to
// partParallel classes at a time; NETSY_PARTITION_QUORUM=-1,0 runs each
// under both, as subtests quorum-1 and quorum0 of the class, one class
// after the other.
func TestClusterPartitions(t *testing.T) {
	skipUnlessNetsy(t)
	var quorums []string
	if q := os.Getenv("NETSY_PARTITION_QUORUM"); q != "" {
		for _, s := range strings.Split(q, ",") {
			if _, err := strconv.Atoi(s); err != nil {
				t.Fatalf("NETSY_PARTITION_QUORUM=%q: %v", q, err)
			}
			quorums = append(quorums, s)
		}
	}
	start := time.Now()
	// Runs once every class has ended, parallel or not.
	t.Cleanup(func() { t.Logf("took %v", time.Since(start).Round(100*time.Millisecond)) })
	// The default plan's classes run partParallel at a time, each on its
	// own MinIO, proxies and cluster: a class mostly waits (its cluster
	// settling, the fault's hold, the recovery). NETSY_PARTITION_QUORUM
	// (make soak) runs them one after the other.
	slots := make(chan struct{}, partParallel)
	for _, class := range partitionPlan {
		t.Run(class.kind, func(t *testing.T) {
			qs := quorums
			if qs == nil {
				qs = []string{class.quorum}
				t.Parallel()
				slots <- struct{}{}
				defer func() { <-slots }()
			}
			for _, q := range qs {
				t.Run("quorum"+q, func(t *testing.T) {
					srv := miniotest.Start(t)
					t.Cleanup(func() { syscall.Kill(srv.PID, syscall.SIGCONT) })
					c := startProxiedCluster(t, 3, srv, "--quorum", q)
					r := startLinRun(t, c, srv, partRecover)
					time.Sleep(time.Second) // a history before the fault
					r.fault(class.linFault)
					r.finish()
				})
			}
		})
	}
}
