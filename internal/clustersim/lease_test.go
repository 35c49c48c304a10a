package clustersim

import (
	"context"
	"errors"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/netsy-io/netsy/internal/engine"
)

// A lease survives the Primary's crash with the time it had left, not its
// whole TTL again: granted with TTL 60 through a replica, kept alive 30 s
// later through another node, the Primary crashes 10 s after that. Every
// node then tells about the same remaining time, and the new Primary
// expires the lease no later than its TTL plus the failover time after
// that keep-alive (nor much sooner: clock rates differ by up to 4% here).
func TestScenarioLeaseKeepsRemainingTimeAcrossPrimaryCrash(t *testing.T) {
	runScenario(t, 3, nil, func(s *scenario) {
		t := s.t
		s.settle()
		e, _, p, pterm := s.roles()
		r := s.others(e, p)[0]
		var id int64
		if err := s.onProc(r, 5*time.Second, func(ctx context.Context, pr *proc) error {
			g, err := pr.backend.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 60})
			if err == nil {
				id = g.ID
			}
			return err
		}); err != nil {
			t.Fatalf("grant through %s: %v", r.id, err)
		}
		s.runFor(30 * time.Second)
		if err := s.onProc(e, 5*time.Second, func(ctx context.Context, pr *proc) error {
			_, err := pr.backend.LeaseRenew(ctx, id)
			return err
		}); err != nil {
			t.Fatalf("keep-alive through %s: %v", e.id, err)
		}
		renewed := s.c.w.Now()
		s.runFor(10 * time.Second)

		crashed := s.c.w.Now()
		p.crash()
		var np *simNode
		s.until(15*time.Second, "a new Primary", func() bool {
			var ok bool
			np, ok = s.primaryAbove(p, pterm)
			return ok
		})
		failover := s.c.w.Now() - crashed
		// ttl asks n for the lease's remaining time; -1 once it is gone.
		ttl := func(n *simNode) int64 {
			t.Helper()
			var left int64
			err := s.onProc(n, 5*time.Second, func(ctx context.Context, pr *proc) error {
				resp, err := pr.backend.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: id})
				if errors.Is(err, engine.ErrLeaseNotFound) {
					left = -1
					return nil
				}
				if err == nil {
					left = resp.TTL
				}
				return err
			})
			if err != nil {
				t.Fatalf("TimeToLive through %s: %v", n.id, err)
			}
			return left
		}
		since := (s.c.w.Now() - renewed).Seconds()
		for _, n := range []*simNode{e, r} {
			left := ttl(n)
			t.Logf("%s: %d s left, %.1f s after the keep-alive (failover %v)", n.id, left, since, failover)
			if want := 60 - since; float64(left) < want-3 || float64(left) > want+3 {
				t.Fatalf("%s: %d s left %.1f s after the keep-alive of a 60 s lease, want about %.0f", n.id, left, since, want)
			}
		}
		var gone time.Duration
		s.until(90*time.Second, "the lease to expire", func() bool {
			if ttl(np) >= 0 {
				s.runFor(500 * time.Millisecond)
				return false
			}
			gone = s.c.w.Now() - renewed
			return true
		})
		t.Logf("expired %v after the keep-alive, failover %v", gone, failover)
		if lo, hi := 57*time.Second, 60*time.Second+failover+3*time.Second; gone < lo || gone > hi {
			t.Fatalf("the lease expired %v after its last keep-alive, want %v..%v (TTL 60 s, failover %v)", gone, lo, hi, failover)
		}
	})
}
