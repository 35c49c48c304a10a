package clustersim

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// rscenario is one named, scripted run of the roles-driven cluster (see
// scenario).
type rscenario struct {
	t *testing.T
	c *rcluster
}

// runRScenario builds n nodes (n1 boots first and takes the lock; the
// others follow 200 ms apart), runs body, then checks the recorder.
func runRScenario(t *testing.T, n int, tweak func(*rconfig), body func(s *rscenario)) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		cfg := defaultRConfig()
		if tweak != nil {
			tweak(&cfg)
		}
		c := newRCluster(1, cfg, dir, true)
		rates := []int64{1000, 960, 1040, 1010, 980}
		for i := range n {
			c.addNode(fmt.Sprintf("n%d", i+1), time.Duration(i)*7*time.Hour-9*time.Hour, rates[i], time.Duration(5+i)*time.Millisecond)
		}
		c.setLatencies(func(a, b string) time.Duration { return 2 * time.Millisecond })
		for i, nd := range c.nodes {
			c.w.after(time.Duration(i)*200*time.Millisecond, nd.boot)
		}
		s := &rscenario{t: t, c: c}
		defer func() {
			c.closeAll()
			if t.Failed() {
				t.Log("trace:\n" + c.w.dump())
			}
		}()
		body(s)
		if err := c.rec.check(); err != nil {
			t.Errorf("invariants: %v", err)
		}
	})
}

func (s *rscenario) settle() {
	s.t.Helper()
	if _, err := s.c.settle(30*time.Second, 100*time.Millisecond); err != nil {
		s.t.Fatal(err)
	}
}

func (s *rscenario) runFor(d time.Duration) { s.c.w.run(s.c.w.Now()+d, nil) }

func TestRolesSimSettlesAndWrites(t *testing.T) {
	runRScenario(t, 3, nil, func(s *rscenario) {
		s.settle()
		o, err := s.c.writeOnce(1)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %v", o)
	})
}
