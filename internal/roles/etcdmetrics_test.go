package roles

import (
	"fmt"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/objstore/mem"
	"github.com/netsy-io/netsy/internal/peer/memnet"
)

// gathered is one scrape of a node's role metrics, by name.
func gathered(t *testing.T, r *Roles) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(r.Collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]*dto.MetricFamily, len(mfs))
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// value is the value of an unlabelled gauge or counter (-1 if absent).
func value(mfs map[string]*dto.MetricFamily, name string) float64 {
	mf := mfs[name]
	if mf == nil || len(mf.Metric) != 1 {
		return -1
	}
	m := mf.Metric[0]
	if m.Gauge != nil {
		return m.Gauge.GetValue()
	}
	return m.Counter.GetValue()
}

// Three real nodes in a bubble: once settled, exactly one says it is the
// leader, all say they have one and have seen a leader change, and every
// node but the Elector has timed its heartbeats to the Elector under the
// Elector's member id in hex. When the Primary stops, the survivors see a
// second leader change and one of them becomes the leader.
func TestEtcdLeaderMetricsFollowThePrimary(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		net := memnet.New()
		defer net.Close()
		store := mem.New(clock.Real())
		var procs []*simProc
		for _, id := range []string{"n1", "n2", "n3"} {
			procs = append(procs, startSimProc(t, net, store, dir, id))
		}
		stopped := map[*simProc]bool{}
		defer func() {
			for _, p := range procs {
				if !stopped[p] {
					p.stop()
				}
			}
		}()
		waitFor(t, time.Minute, "settle", func() error { return settled(procs) })

		var primary, elector *simProc
		for _, p := range procs {
			if p.r.Active() {
				primary = p
			}
			if p.r.RunningElector() != nil {
				elector = p
			}
		}
		electorID := strconv.FormatUint(elector.r.MemberID(), 16)
		waitFor(t, 10*time.Second, "every node but the Elector times a heartbeat", func() error {
			for _, p := range procs {
				mf := gathered(t, p.r)["etcd_network_peer_round_trip_time_seconds"]
				if p == elector {
					if mf != nil {
						return fmt.Errorf("the Elector %s timed a heartbeat to itself: %v", p.id, mf)
					}
					continue
				}
				if mf == nil || len(mf.Metric) != 1 || mf.Metric[0].Histogram.GetSampleCount() == 0 {
					return fmt.Errorf("%s: no round trips: %v", p.id, mf)
				}
				if l := mf.Metric[0].Label[0]; l.GetName() != "To" || l.GetValue() != electorID {
					return fmt.Errorf("%s: label %v, want To=%s", p.id, l, electorID)
				}
			}
			return nil
		})
		changes := map[*simProc]float64{}
		for _, p := range procs {
			mfs := gathered(t, p.r)
			want := 0.0
			if p == primary {
				want = 1
			}
			if got := value(mfs, "etcd_server_is_leader"); got != want {
				t.Errorf("%s: is_leader %v, want %v", p.id, got, want)
			}
			if got := value(mfs, "etcd_server_has_leader"); got != 1 {
				t.Errorf("%s: has_leader %v, want 1", p.id, got)
			}
			changes[p] = value(mfs, "etcd_server_leader_changes_seen_total")
			if changes[p] < 1 {
				t.Errorf("%s: leader changes %v, want at least 1", p.id, changes[p])
			}
		}

		primary.stop()
		stopped[primary] = true
		var rest []*simProc
		for _, p := range procs {
			if p != primary {
				rest = append(rest, p)
			}
		}
		waitFor(t, time.Minute, "a new Primary", func() error {
			leaders := 0
			for _, p := range rest {
				mfs := gathered(t, p.r)
				leaders += int(value(mfs, "etcd_server_is_leader"))
				if value(mfs, "etcd_server_has_leader") != 1 {
					return fmt.Errorf("%s has no leader", p.id)
				}
				if got := value(mfs, "etcd_server_leader_changes_seen_total"); got <= changes[p] {
					return fmt.Errorf("%s: leader changes %v, was %v", p.id, got, changes[p])
				}
			}
			if leaders != 1 {
				return fmt.Errorf("%d leaders", leaders)
			}
			return nil
		})
	})
}

// A heartbeat the Elector refuses counts as a failed heartbeat send; one
// it answers does not.
func TestHeartbeatSendFailuresCountRefusals(t *testing.T) {
	n := newTestNode(t, nil)
	n.calls.next(t, "heartbeat")
	n.settle()
	if got := testutil.ToFloat64(n.r.hbFailuresC); got != 0 {
		t.Fatalf("failures %v after an answered heartbeat, want 0", got)
	}
	n.el.setRefuse(fmt.Errorf("refused"))
	n.beat()
	n.calls.next(t, "heartbeat")
	waitFor(t, 10*time.Second, "a counted failure", func() error {
		if got := testutil.ToFloat64(n.r.hbFailuresC); got < 1 {
			return fmt.Errorf("failures %v", got)
		}
		return nil
	})
}
