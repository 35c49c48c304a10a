package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/netsy-io/netsy/internal/clusterview"
)

// deployment is what one run of a workload starts for a target: one
// server, or the nodes of a cluster variant (netsy nodes sharing one
// bucket, etcd members of one initial cluster).
type deployment struct {
	v     variant
	tag   string
	nodes []*server
	// bucket is the deployment's bucket on the harness's MinIO, empty
	// for a target that does not use it.
	bucket string
}

// deploy starts target t for the run named tag, with its data under dir
// and its logs in the raw directory. The returned function stops it again
// and removes its data and bucket; it is safe to call after a failed start.
func deploy(ctx context.Context, c *config, t int, dir, tag string, pprof bool) (*deployment, func(), error) {
	v := c.Targets[t]
	d := &deployment{v: v, tag: tag}
	var cleanups []func()
	cleanup := func() {
		d.stop(c)
		for _, f := range slices.Backward(cleanups) {
			f()
		}
		_ = os.RemoveAll(dir)
	}
	n := max(v.Nodes, 1)
	var peers []string
	for i := range n {
		ndir := dir
		if n > 1 {
			ndir = filepath.Join(dir, fmt.Sprintf("n%d", i+1))
		}
		srv, err := newServer(v, c.bins, ndir, c.ExtraArgs[v.Kind])
		if err != nil {
			return nil, cleanup, err
		}
		srv.LogPath = filepath.Join(c.rawDir, tag+".server.log")
		if n > 1 {
			srv.Name = fmt.Sprintf("n%d", i+1)
			srv.LogPath = filepath.Join(c.rawDir, tag+"."+srv.Name+".server.log")
			peers = append(peers, srv.Name+"=http://"+srv.PeerAddr)
		}
		// netsy always serves pprof on its HTTP port.
		srv.Pprof = pprof && v.Kind != kindNetsy
		d.nodes = append(d.nodes, srv)
	}
	if v.Kind == kindEtcd && n > 1 {
		for _, s := range d.nodes {
			s.InitialCluster = strings.Join(peers, ",")
			s.ClusterToken = "bench-" + tag
		}
	}
	if v.MinIO {
		bucket, err := c.minio.bucket(ctx, tag)
		if err != nil {
			return nil, cleanup, fmt.Errorf("minio: %w", err)
		}
		cleanups = append(cleanups, func() { c.minio.removeBucket(context.WithoutCancel(ctx), bucket) })
		d.bucket = bucket
		for _, s := range d.nodes {
			if v.Kind == kindT4 {
				s.extra = append(c.minio.t4Args(bucket, tag), s.extra...)
				s.env = c.minio.t4Env()
				continue
			}
			s.extra = append(c.minio.netsyArgs(bucket), s.extra...)
			s.env = c.minio.env()
		}
	}
	// Every node is launched before any is waited for: a cluster serves
	// only once enough of its members are up.
	for _, s := range d.nodes {
		if err := s.Launch(); err != nil {
			return nil, cleanup, fmt.Errorf("%s: %w", s.label(), err)
		}
	}
	for _, s := range d.nodes {
		if err := s.waitReady(ctx, 90*time.Second); err != nil {
			return nil, cleanup, fmt.Errorf("%s: %w\nlog tail:\n%s", s.label(), err, logTail(s.LogPath, 30))
		}
	}
	if v.cluster() {
		if err := d.waitSteady(ctx, 90*time.Second); err != nil {
			return nil, cleanup, err
		}
	}
	return d, cleanup, nil
}

// endpoint lists every node's client address, comma-separated, as
// etcd's benchmark tool and newClient take them.
func (d *deployment) endpoint() string {
	return strings.Join(d.clientAddrs(d.indexesBut(-1)), ",")
}

// indexesBut lists the indexes of every node except skip.
func (d *deployment) indexesBut(skip int) []int {
	var out []int
	for i := range d.nodes {
		if i != skip {
			out = append(out, i)
		}
	}
	return out
}

func (d *deployment) clientAddrs(idx []int) []string {
	var out []string
	for _, i := range idx {
		out = append(out, d.nodes[i].ClientAddr)
	}
	return out
}

// running reports whether every node's process is alive.
func (d *deployment) running() bool {
	for _, s := range d.nodes {
		if s.PID() == 0 {
			return false
		}
	}
	return true
}

func (d *deployment) logTails(n int) string {
	var b strings.Builder
	for _, s := range d.nodes {
		fmt.Fprintf(&b, "--- %s\n%s\n", s.label(), logTail(s.LogPath, n))
	}
	return b.String()
}

// stop stops every node with SIGTERM. A netsy Primary goes last: each node
// that leaves before it only deregisters, and the Primary, alone by then,
// has nobody to hand its role to.
func (d *deployment) stop(c *config) {
	order := slices.Clone(d.nodes)
	if d.v.Kind != kindEtcd && d.v.cluster() {
		// t4's followers, too, would each try to take over from a
		// leader that left first.
		if i, err := d.leader(context.Background()); err == nil {
			leader := d.nodes[i]
			slices.SortStableFunc(order, func(a, b *server) int {
				return boolInt(a == leader) - boolInt(b == leader)
			})
		}
	}
	for _, s := range order {
		if err := s.Stop(); err != nil {
			c.notef("%s: %v", d.tag, err)
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// waitSteady waits until the cluster is in the state every failover run
// starts from: all nodes healthy and caught up, one leader (etcd, t4) or
// an Active Primary and a separate Elector (netsy).
func (d *deployment) waitSteady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last string
	for {
		var err error
		switch d.v.Kind {
		case kindNetsy:
			err = d.netsySteady(ctx)
		case kindT4:
			err = d.t4Steady(ctx)
		default:
			err = d.etcdSteady(ctx)
		}
		if err == nil {
			return nil
		}
		last = err.Error()
		if !d.running() {
			return fmt.Errorf("%s: a node exited while waiting for a steady cluster (%s)\n%s", d.tag, last, d.logTails(20))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: no steady cluster within %v: %s", d.tag, timeout, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// netsyView reads the Cluster State from the first node that answers
// (each node answers with the Elector's view it was pushed).
func (d *deployment) netsyView(ctx context.Context) (clusterview.View, error) {
	var errs []error
	for _, s := range d.nodes {
		if s.PID() == 0 {
			continue
		}
		v, err := clusterState(ctx, s.HTTPAddr)
		if err == nil {
			return v, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", s.label(), err))
	}
	return clusterview.View{}, errors.Join(errs...)
}

func clusterState(ctx context.Context, httpAddr string) (clusterview.View, error) {
	var v clusterview.View
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+httpAddr+"/cluster/state", nil)
	if err != nil {
		return v, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return v, fmt.Errorf("/cluster/state: %s", resp.Status)
	}
	return v, json.NewDecoder(resp.Body).Decode(&v)
}

// netsySteady: every node registered, Healthy and without lag, the
// Primary Active and the Elector on another node (where it moves by
// itself once another node is Healthy and caught up).
func (d *deployment) netsySteady(ctx context.Context) error {
	v, err := d.netsyView(ctx)
	switch {
	case err != nil:
		return err
	case v.Primary == nil || v.Elector == nil:
		return errors.New("no Primary or no Elector")
	case v.Primary.NodeID == v.Elector.NodeID:
		return fmt.Errorf("%s is Primary and Elector", v.Primary.NodeID)
	case int(v.RegisteredNodes) != len(d.nodes) || len(v.Nodes) != len(d.nodes):
		return fmt.Errorf("%d nodes registered, %d listed", v.RegisteredNodes, len(v.Nodes))
	}
	for _, n := range v.Nodes {
		switch {
		case n.Health != "Healthy":
			return fmt.Errorf("%s is %s", n.NodeID, n.Health)
		case n.Primary && n.PrimaryState != "Active":
			return fmt.Errorf("Primary %s is %s", n.NodeID, n.PrimaryState)
		case n.Lag == nil || *n.Lag != 0:
			return fmt.Errorf("%s lags", n.NodeID)
		}
	}
	return nil
}

// netsyPrimary returns the index of the Primary among the nodes.
func (d *deployment) netsyPrimary(ctx context.Context) (int, clusterview.View, error) {
	v, err := d.netsyView(ctx)
	if err != nil {
		return -1, v, err
	}
	if v.Primary == nil {
		return -1, v, errors.New("no Primary")
	}
	i := slices.IndexFunc(d.nodes, func(s *server) bool { return s.Name == v.Primary.NodeID })
	if i < 0 {
		return -1, v, fmt.Errorf("Primary %q is none of the nodes", v.Primary.NodeID)
	}
	return i, v, nil
}

// etcdStatuses asks every member for its status.
func (d *deployment) etcdStatuses(ctx context.Context) ([]*clientv3.StatusResponse, error) {
	cli, err := newClient(d.endpoint())
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	out := make([]*clientv3.StatusResponse, len(d.nodes))
	errs := make([]error, len(d.nodes))
	var wg sync.WaitGroup
	for i, s := range d.nodes {
		wg.Go(func() {
			out[i], errs[i] = cli.Status(ctx, s.ClientAddr)
		})
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// etcdSteady: every member healthy, all agree on one leader and have
// applied the same raft index.
func (d *deployment) etcdSteady(ctx context.Context) error {
	hc := &http.Client{Timeout: time.Second}
	for _, s := range d.nodes {
		resp, err := hc.Get("http://" + s.ClientAddr + "/health")
		if err != nil {
			return fmt.Errorf("%s: %w", s.label(), err)
		}
		var h struct{ Health string }
		err = json.NewDecoder(resp.Body).Decode(&h)
		resp.Body.Close()
		if err != nil || h.Health != "true" {
			return fmt.Errorf("%s: not healthy (%v)", s.label(), err)
		}
	}
	sts, err := d.etcdStatuses(ctx)
	if err != nil {
		return err
	}
	for _, st := range sts {
		if st.Leader == 0 || st.Leader != sts[0].Leader {
			return errors.New("members disagree on the leader")
		}
		if st.RaftAppliedIndex != sts[0].RaftAppliedIndex {
			return errors.New("members have applied different indexes")
		}
	}
	return nil
}

// etcdLeader returns the index of the leader among the members and the
// member ids by index.
func (d *deployment) etcdLeader(ctx context.Context) (int, []uint64, error) {
	sts, err := d.etcdStatuses(ctx)
	if err != nil {
		return -1, nil, err
	}
	ids := make([]uint64, len(sts))
	leader := -1
	for i, st := range sts {
		ids[i] = st.Header.MemberId
		if st.Leader == st.Header.MemberId {
			leader = i
		}
	}
	if leader < 0 {
		return -1, nil, errors.New("no member is the leader")
	}
	return leader, ids, nil
}

// t4Status is what a t4 node's /metrics says about its role: whether it
// leads, follows, and, on the leader, each follower's lag in revisions.
type t4Status struct {
	leader, follower bool
	lag              map[string]float64 // by follower node id
}

// t4Scrape reads one t4 node's role metrics.
func t4Scrape(ctx context.Context, httpAddr string) (t4Status, error) {
	ms, err := scrapeMetrics(ctx, httpAddr)
	if err != nil {
		return t4Status{}, err
	}
	return t4StatusOf(ms), nil
}

// t4StatusOf picks t4's role gauges (t4_role{role=...}, 1 for the role
// the node has) and, on the leader, t4_follower_lag_revisions per
// follower out of a scrape.
func t4StatusOf(ms map[string]float64) t4Status {
	st := t4Status{lag: map[string]float64{}}
	st.leader = ms[`t4_role{role="leader"}`] == 1
	st.follower = ms[`t4_role{role="follower"}`] == 1
	const lagPrefix = `t4_follower_lag_revisions{follower_id="`
	for k, v := range ms {
		if id, ok := strings.CutPrefix(k, lagPrefix); ok {
			st.lag[strings.TrimSuffix(id, `"}`)] = v
		}
	}
	return st
}

// t4Leader returns the index of the one node that says it leads, with
// every node's status by index.
func (d *deployment) t4Leader(ctx context.Context) (int, []t4Status, error) {
	sts := make([]t4Status, len(d.nodes))
	leader := -1
	for i, s := range d.nodes {
		st, err := t4Scrape(ctx, s.HTTPAddr)
		if err != nil {
			return -1, nil, fmt.Errorf("%s: %w", s.label(), err)
		}
		sts[i] = st
		if st.leader {
			if leader >= 0 {
				return -1, nil, fmt.Errorf("%s and %s both lead", d.nodes[leader].Name, s.Name)
			}
			leader = i
		}
	}
	if leader < 0 {
		return -1, nil, errors.New("no node leads")
	}
	return leader, sts, nil
}

// t4Steady: one leader, every other node a follower that the leader
// streams to without lag.
func (d *deployment) t4Steady(ctx context.Context) error {
	leader, sts, err := d.t4Leader(ctx)
	if err != nil {
		return err
	}
	for i, s := range d.nodes {
		if i == leader {
			continue
		}
		lag, ok := sts[leader].lag[s.Name]
		switch {
		case !sts[i].follower:
			return fmt.Errorf("%s is not a follower", s.Name)
		case !ok:
			return fmt.Errorf("leader %s does not stream to %s", d.nodes[leader].Name, s.Name)
		case lag != 0:
			return fmt.Errorf("%s lags %v revisions", s.Name, lag)
		}
	}
	return nil
}
