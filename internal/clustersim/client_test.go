package clustersim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// clientKeys are the keys the client writes and reads: few, so that reads
// often race writes of the same key.
const clientKeys = 3

// op is one client request and what it returned.
type op struct {
	node       string
	put        bool
	key, value string
	start, end time.Duration // true time
	ok         bool
	// rev is the revision a put was acknowledged at, or the mod revision
	// a read returned (0: the key was absent).
	rev int64
	err error
}

func (o op) String() string {
	what := "get"
	if o.put {
		what = "put " + o.value
	}
	res := fmt.Sprintf("rev %d", o.rev)
	if !o.ok {
		res = fmt.Sprint(o.err)
	}
	return fmt.Sprintf("%s %s via %s [%v, %v]: %s", what, o.key, o.node, o.start, o.end, res)
}

// client is a tiny etcd client of the cluster: each request goes to a
// random node's client API (its replica.Backend, which forwards writes and
// asks the Primary for linearizable reads over the peer port), and its
// result is kept for the checks after the run.
type client struct {
	c   *cluster
	rng *rand.Rand

	mu      sync.Mutex
	ops     []op
	seq     int
	stopped bool
	wg      sync.WaitGroup
	running int
}

func newClient(c *cluster) *client {
	return &client{c: c, rng: rand.New(rand.NewPCG(c.seed, 0xc11e47))}
}

// run issues a request every 0.3 to 3 s of true time until end.
func (cl *client) run(end time.Duration) {
	w := cl.c.w
	var next func()
	next = func() {
		if w.Now() >= end {
			return
		}
		cl.issue(cl.rng.IntN(2) == 0, cl.rng.IntN(clientKeys))
		w.after(uniform(cl.rng, 300*time.Millisecond, 3*time.Second), next)
	}
	w.after(uniform(cl.rng, 0, time.Second), next)
}

// issue sends one request through a random live node (from the driver: it
// does not wait for the answer).
func (cl *client) issue(put bool, k int) *op {
	var live []*simNode
	for _, n := range cl.c.nodes {
		if n.process() != nil {
			live = append(live, n)
		}
	}
	cl.mu.Lock()
	if cl.stopped || len(live) == 0 {
		cl.mu.Unlock()
		return nil
	}
	n := live[cl.rng.IntN(len(live))]
	cl.mu.Unlock()
	return cl.issueOn(n, put, k)
}

// issueOn sends one request through n's client API (from the driver: it
// does not wait for the answer); the checks after the run see it as any
// other request.
func (cl *client) issueOn(n *simNode, put bool, k int) *op {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.stopped {
		return nil
	}
	cl.seq++
	o := op{node: n.id, put: put, key: fmt.Sprintf("k%d", k), start: cl.c.w.Now()}
	if put {
		o.value = fmt.Sprintf("v%d", cl.seq)
	}
	cl.running++
	cl.wg.Go(func() {
		cl.do(n, &o)
		cl.mu.Lock()
		cl.ops = append(cl.ops, o)
		cl.running--
		cl.mu.Unlock()
	})
	return &o
}

// do runs one request against n's process, bounded by 10 s of n's clock
// and by the process's life.
func (cl *client) do(n *simNode, o *op) {
	n.mu.Lock()
	p, base := n.p, n.ctx
	n.mu.Unlock()
	if p == nil {
		o.err = errors.New("the node is down")
		o.end = cl.c.w.Now()
		return
	}
	ctx, cancel := clock.WithTimeout(base, n.clk, 10*time.Second)
	defer cancel()
	if o.put {
		resp, err := p.backend.Put(ctx, &pb.PutRequest{Key: []byte(o.key), Value: []byte(o.value)})
		if err == nil {
			o.ok, o.rev = true, resp.GetHeader().GetRevision()
		}
		o.err = err
	} else {
		resp, err := p.backend.Range(ctx, &pb.RangeRequest{Key: []byte(o.key)})
		if err == nil {
			o.ok = true
			if len(resp.Kvs) > 0 {
				o.rev = resp.Kvs[0].ModRevision
			}
		}
		o.err = err
	}
	o.end = cl.c.w.Now()
	cl.c.w.tracef("client: %v", *o)
}

func (cl *client) stop() {
	cl.mu.Lock()
	cl.stopped = true
	cl.mu.Unlock()
}

func (cl *client) busy() bool {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.running > 0
}

func (cl *client) done() []op {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return append([]op(nil), cl.ops...)
}

// checkHistory checks the client's requests against the final Primary's
// log: every acknowledged write is in its history at the revision it was
// acknowledged at, with its value; and no linearizable read returned a
// revision of its key older than a write of that key acknowledged before
// the read began.
func (c *cluster) checkHistory(ctx context.Context) error {
	p := c.primaryNode()
	if p == nil {
		return errors.New("no Primary to check the history against")
	}
	proc := p.process()
	if proc == nil {
		return errors.New("the Primary has no process")
	}
	var errs []string
	ops := c.cl.done()
	for _, o := range ops {
		if !o.put || !o.ok {
			continue
		}
		resp, err := proc.eng.Range(ctx, &pb.RangeRequest{Key: []byte(o.key), Revision: o.rev, Serializable: true})
		switch {
		case err != nil:
			errs = append(errs, fmt.Sprintf("acknowledged %v: read at its revision on %s: %v", o, p.id, err))
		case len(resp.Kvs) == 0 || string(resp.Kvs[0].Value) != o.value || resp.Kvs[0].ModRevision != o.rev:
			errs = append(errs, fmt.Sprintf("acknowledged %v is missing from the history on %s (%v)", o, p.id, resp.Kvs))
		}
	}
	// Every put writes a value of its own: one found at two revisions of
	// the history was applied twice (a forwarded write sent again after
	// its first sending was written).
	evs, _, err := proc.eng.Events(1, proc.eng.CurrentRevision(), 0)
	if err != nil {
		errs = append(errs, fmt.Sprintf("read the history on %s: %v", p.id, err))
	}
	seen := map[string]int64{}
	for _, ev := range evs {
		if ev.Type != mvccpb.PUT || !strings.HasPrefix(string(ev.Kv.Key), "k") {
			continue
		}
		v := string(ev.Kv.Key) + "=" + string(ev.Kv.Value)
		if rev, ok := seen[v]; ok {
			errs = append(errs, fmt.Sprintf("put %s applied twice: at revisions %d and %d on %s", v, rev, ev.Kv.ModRevision, p.id))
		}
		seen[v] = ev.Kv.ModRevision
	}
	for _, r := range ops {
		if r.put || !r.ok {
			continue
		}
		for _, w := range ops {
			if w.put && w.ok && w.key == r.key && w.end < r.start && w.rev > r.rev {
				errs = append(errs, fmt.Sprintf("stale read: %v began after %v was acknowledged", r, w))
			}
		}
	}
	if len(errs) > 10 {
		errs = append(errs[:10], fmt.Sprintf("and %d more", len(errs)-10))
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "\n"))
	}
	return nil
}

// clientCounts says how many writes and reads were acknowledged.
func (cl *client) counts() (puts, gets, failed int) {
	for _, o := range cl.done() {
		switch {
		case !o.ok:
			failed++
		case o.put:
			puts++
		default:
			gets++
		}
	}
	return
}

// writeOnce writes through a random node and runs the world until the
// write is acknowledged or fails.
func (c *cluster) writeOnce(k int) (op, error) {
	o := c.cl.issue(true, k)
	if o == nil {
		return op{}, errors.New("no node to write through")
	}
	want := o.value
	for {
		c.w.run(c.w.Now()+100*time.Millisecond, nil)
		for _, d := range c.cl.done() {
			if d.put && d.value == want {
				if !d.ok {
					return d, d.err
				}
				return d, nil
			}
		}
	}
}

// recovered checks that a write succeeds once the faults healed: a few
// tries, each through a random node.
func (c *cluster) recovered() error {
	var err error
	for range 3 {
		if _, err = c.writeOnce(0); err == nil {
			return nil
		}
	}
	return fmt.Errorf("no write succeeded after the faults healed: %v", err)
}

// settledReason says why the cluster is not in its healthy steady state
// (one Elector, one Active Primary with a lease on another node, every
// node registered, Healthy by its own and the Elector's judgement, all
// agreeing on the Primary and ready to serve clients: a replica follows
// it), or "" if it is.
func (c *cluster) settledReason() string {
	var electors, primaries []*simNode
	for _, n := range c.nodes {
		if n.roles() == nil {
			return n.id + " is down"
		}
		if n.currentElector() != nil {
			electors = append(electors, n)
		}
		if n.leaseHeld() {
			primaries = append(primaries, n)
		}
	}
	if len(electors) != 1 {
		return fmt.Sprintf("%d Electors", len(electors))
	}
	if len(primaries) != 1 {
		return fmt.Sprintf("%d Active Primaries with a lease", len(primaries))
	}
	if electors[0] == primaries[0] && len(c.nodes) > 1 {
		return electors[0].id + " is both Elector and Primary"
	}
	p := primaries[0].id
	for _, n := range c.nodes {
		r := n.roles()
		if r == nil {
			return n.id + " is down"
		}
		named, _ := r.Primary()
		switch {
		case !r.Registered():
			return n.id + " is not registered"
		case !r.Healthy():
			return n.id + " judges itself Degraded"
		case named.GetNodeId() != p:
			return fmt.Sprintf("%s's view names Primary %q, not %s", n.id, named.GetNodeId(), p)
		}
		if err := r.Ready(); err != nil {
			return fmt.Sprintf("%s is not ready: %v", n.id, err)
		}
	}
	e := electors[0].currentElector()
	if e == nil {
		return "the Elector just stopped"
	}
	cs, err := clusterStateNow(e)
	if err != nil {
		return err.Error()
	}
	if cs.GetPrimary().GetNodeId() != p {
		return fmt.Sprintf("the Elector names Primary %q, not %s", cs.GetPrimary().GetNodeId(), p)
	}
	if int(cs.RegisteredNodes) != len(c.nodes) {
		return fmt.Sprintf("the Elector has %d registered nodes of %d", cs.RegisteredNodes, len(c.nodes))
	}
	for _, ns := range cs.Nodes {
		if ns.Health != netsyv1.HealthState_HEALTHY {
			return fmt.Sprintf("the Elector judges %s %s", ns.Info.NodeId, ns.Health)
		}
	}
	return ""
}

// settle runs the world until the cluster is settled, at most limit of
// true time; it returns how long that took, or an error naming why not.
func (c *cluster) settle(limit, step time.Duration) (time.Duration, error) {
	start := c.w.Now()
	why := ""
	for c.w.Now()-start <= limit {
		if why = c.settledReason(); why == "" {
			return c.w.Now() - start, nil
		}
		c.w.run(c.w.Now()+step, nil)
	}
	return 0, fmt.Errorf("not settled %v after the faults healed: %s\n%s", limit, why, c.summary())
}

// summary says, per node, what its process holds: its Primary state, the
// Primary its view names, and the Elector term it runs, if any.
func (c *cluster) summary() string {
	var b strings.Builder
	for _, n := range c.nodes {
		r := n.roles()
		if r == nil {
			fmt.Fprintf(&b, "  %s: down\n", n.id)
			continue
		}
		st, held := r.PrimaryState()
		named, term := r.Primary()
		el := ""
		if e := r.RunningElector(); e != nil {
			el = fmt.Sprintf(", Elector at lock term %d", e.Term())
		}
		fmt.Fprintf(&b, "  %s: %s at term %d, its view names Primary %q at term %d, Healthy %v, ready: %v%s\n",
			n.id, st, held, named.GetNodeId(), term, r.Healthy(), r.Ready(), el)
	}
	return b.String()
}
