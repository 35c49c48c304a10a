package roles

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/config"
	"github.com/netsy-io/netsy/internal/discovery"
	"github.com/netsy-io/netsy/internal/engine"
	"github.com/netsy-io/netsy/internal/objstore"
	"github.com/netsy-io/netsy/internal/objstore/mem"
	"github.com/netsy-io/netsy/internal/objwal"
	"github.com/netsy-io/netsy/internal/peer"
	"github.com/netsy-io/netsy/internal/peer/memnet"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// simProc is one node process of an in-bubble cluster: the real roles
// over a real engine and objwal on the shared in-memory bucket, serving
// the peer services over real gRPC on memnet.
type simProc struct {
	id      string
	r       *Roles
	eng     *engine.Engine
	log     *objwal.Log
	pool    *peer.Pool
	serving *peer.Serving
}

func startSimProc(t *testing.T, net *memnet.Net, store objstore.Store, dir, id string) *simProc {
	t.Helper()
	ctx := context.Background()
	clk := clock.Real() // the bubble's time
	cfg := config.Default()
	cfg.NodeID, cfg.PeerAddr, cfg.DataDir = id, id+":2380", filepath.Join(dir, id)
	cfg.ClientAddr = id + ":2379"
	if err := discovery.Register(ctx, store, Registration(cfg, clk.Now())); err != nil {
		t.Fatal(err)
	}
	objlog, err := objwal.Open(ctx, objwal.Options{
		Store: store, WALDir: filepath.Join(cfg.DataDir, "wal"), Mode: objwal.ModeSync, Follower: true,
		SegmentBytes: 1 << 20, Clock: clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.Open(engine.Config{Storage: objlog, Clock: clk, Follower: true, ClusterID: ClusterIDHash(cfg.ClusterID)})
	if err != nil {
		t.Fatal(err)
	}
	pool := peer.NewPool(net.Host(id))
	logger := hclog.NewNullLogger()
	if testing.Verbose() {
		logger = hclog.New(&hclog.LoggerOptions{Name: id, Level: hclog.Info, Output: testWriter{t}})
	}
	r, err := New(Config{Node: cfg, Clock: clk, Store: store, Engine: eng, Log: objlog, Conn: pool.Conn, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Host(id).Listen(cfg.PeerAddr)
	if err != nil {
		t.Fatal(err)
	}
	g := peer.NewServer(peer.ServerOptions()...)
	r.RegisterPeerServices(g)
	p := &simProc{id: id, r: r, eng: eng, log: objlog, pool: pool, serving: peer.Serve(g, l)}
	r.Start(ctx)
	return p
}

// stop ends the process in node's shutdown order (without leaving).
func (p *simProc) stop() {
	p.serving.Close()
	p.r.Close()
	p.pool.Close()
	p.eng.Close()
	p.log.Close()
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(string(b))
	return len(b), nil
}

// settled reports whether the procs agree: one Elector, one Active
// Primary every node names, every node registered and Healthy, and every
// replica following.
func settled(procs []*simProc) error {
	electors, primary := 0, ""
	for _, p := range procs {
		if p.r.RunningElector() != nil {
			electors++
		}
		if p.r.Active() {
			primary = p.id
		}
	}
	if electors != 1 || primary == "" {
		return fmt.Errorf("%d Electors, Primary %q", electors, primary)
	}
	for _, p := range procs {
		if err := p.r.Ready(); err != nil {
			return fmt.Errorf("%s: %v", p.id, err)
		}
		if !p.r.Healthy() {
			return fmt.Errorf("%s not Healthy", p.id)
		}
		if named, _ := p.r.Primary(); named.GetNodeId() != primary {
			return fmt.Errorf("%s names Primary %v, want %s", p.id, named, primary)
		}
	}
	return nil
}

// waitFor advances the bubble's time in heartbeat steps until cond holds.
func waitFor(t *testing.T, within time.Duration, what string, cond func() error) {
	t.Helper()
	var err error
	for waited := time.Duration(0); waited < within; waited += 100 * time.Millisecond {
		if err = cond(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond) // the bubble's time: no real wait
	}
	t.Fatalf("%s within %v: %v", what, within, err)
}

// Three nodes' real roles, engines and logs, on one bucket and memnet
// with real gRPC, in a synctest bubble (virtual time: nothing waits for
// real): they settle on one Elector and one Active Primary that every
// replica follows, and a replica that leaves turns Degraded (the
// Primary's quorum stops counting its receipts while its stream still
// runs), is gone from the Elector's map and from nodes/, while the other
// two stay settled.
func TestRolesSettleAndARoleLeavesInTheBubble(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		net := memnet.New()
		defer net.Close()
		store := mem.New(clock.Real())
		var procs []*simProc
		for _, id := range []string{"n1", "n2", "n3"} {
			procs = append(procs, startSimProc(t, net, store, dir, id))
		}
		defer func() {
			for _, p := range procs {
				p.stop()
			}
		}()
		waitFor(t, time.Minute, "settle", func() error { return settled(procs) })

		var leaving *simProc
		for _, p := range procs {
			if !p.r.Active() && p.r.RunningElector() == nil {
				leaving = p
			}
		}
		if leaving == nil {
			t.Fatal("no node is only a replica (the Elector stays on the Primary)")
		}
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		var primary *simProc
		for _, p := range procs {
			if p.r.Active() {
				primary = p
			}
		}
		waitFor(t, 10*time.Second, "the Primary counts the replica", func() error {
			for _, rs := range primary.r.Replication().GetReplicas() {
				if rs.NodeId == leaving.id && rs.Counted {
					return nil
				}
			}
			return fmt.Errorf("replication %v", primary.r.Replication())
		})
		leaving.r.Leave(ctx)
		// Its receipts say Degraded from here: the Primary's quorum stops
		// counting it while its stream still runs (failure 6: a write
		// acknowledged by the Primary plus the departing node alone).
		waitFor(t, 10*time.Second, "the Primary stops counting the leaving node", func() error {
			for _, rs := range primary.r.Replication().GetReplicas() {
				if rs.NodeId == leaving.id && rs.Counted {
					return fmt.Errorf("replication %v", primary.r.Replication())
				}
			}
			return nil
		})
		if ok, _ := leaving.r.Following(); !ok {
			t.Fatal("the leaving node's Follow stream ended: the check above proves nothing")
		}
		if h := leaving.r.state().Health; h != netsyv1.HealthState_DEGRADED {
			t.Fatalf("the leaving node reports %v", h)
		}
		if _, _, err := store.Get(ctx, discovery.NodeKey(leaving.id)); err == nil {
			t.Fatal("the leaving node's registration file is still there")
		}
		var rest []*simProc
		for _, p := range procs {
			if p != leaving {
				rest = append(rest, p)
			}
		}
		waitFor(t, time.Minute, "settle without the node that left", func() error {
			if err := settled(rest); err != nil {
				return err
			}
			for _, p := range rest {
				if e := p.r.RunningElector(); e != nil {
					cs, err := e.ClusterState(ctx, true)
					if err != nil {
						return err
					}
					for _, ns := range cs.Nodes {
						if ns.GetInfo().GetNodeId() == leaving.id {
							return fmt.Errorf("the Elector still lists %s", leaving.id)
						}
					}
				}
			}
			return nil
		})
	})
}

// slowListing is a bucket whose listing of nodes/ takes 20 ms: the
// Elector's load (which lists the registrations first) then always ends
// after this node's first registration reached it.
type slowListing struct{ objstore.Store }

func (s slowListing) List(ctx context.Context, prefix, startAfter string, limit int) ([]objstore.ObjectInfo, error) {
	if strings.HasPrefix(prefix, "nodes/") {
		time.Sleep(20 * time.Millisecond) // the bubble's time: no real wait
	}
	return s.Store.List(ctx, prefix, startAfter, limit)
}

// A lone node's first registration reaches its own Elector before that
// Elector has loaded and is refused (ErrNotLoaded); the node registers
// again as soon as the load ends, not at its next heartbeat: it is
// registered some tens of milliseconds after it started. Before the fix it
// waited a heartbeat interval (500 ms) to register again.
func TestLoneNodeRegistersAsSoonAsItsElectorHasLoaded(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		net := memnet.New()
		defer net.Close()
		store := slowListing{mem.New(clock.Real())}
		start := time.Now()
		p := startSimProc(t, net, store, dir, "n1")
		defer p.stop()
		for p.r.MemberID() == 0 && time.Since(start) < 10*time.Second {
			time.Sleep(10 * time.Millisecond) // the bubble's time: no real wait
		}
		if took := time.Since(start); took >= p.r.cfg.Node.HeartbeatInterval {
			t.Fatalf("the lone node registered %v after it started: it registered again only at its next heartbeat", took)
		}
		waitFor(t, 10*time.Second, "settle", func() error { return settled([]*simProc{p}) })
	})
}
