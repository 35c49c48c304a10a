package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/netsy-io/netsy/internal/testutil/procutil"
)

// The write probe of the failover rows: a put every probeInterval, each
// sent without waiting for the ones before it, so that a put stuck on a
// dead leader does not hide the moment the cluster takes writes again.
const (
	probeInterval = 5 * time.Millisecond
	probeTimeout  = 15 * time.Second
	// probeMaxInFlight bounds the puts waiting at once (15 s of puts).
	probeMaxInFlight = 3000
	// failoverPatience is how long a failover run waits for a write.
	failoverPatience = 60 * time.Second
	// loadInterval is the load probe's: 2000 puts a second, the rate of
	// issue 20's measurement (etcd's benchmark put, 16 clients, 2000/s).
	loadInterval = 500 * time.Microsecond
	// loadLead is how long the load runs before the kill.
	loadLead = time.Second
)

// attempt is one put of a write probe.
type attempt struct {
	node       int // index into the probe's clients
	sent, done time.Time
	err        error
}

// writeProbe sends puts until stopped, in turn through one client per
// node (as a client given every endpoint spreads its requests round
// robin), and records when each was sent and answered and by which node.
type writeProbe struct {
	clis   []*clientv3.Client
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// halt stops sending; the puts in flight still get their answers.
	halt chan struct{}

	mu       sync.Mutex
	attempts []attempt
	changed  chan struct{} // closed and replaced at every answer
}

// probeClients connects one warmed-up client to each of addrs: n puts
// through each must succeed before a run's clock starts.
func probeClients(ctx context.Context, addrs []string, prefix string, n int) ([]*clientv3.Client, func(), error) {
	var clis []*clientv3.Client
	closeAll := func() {
		for _, c := range clis {
			c.Close()
		}
	}
	for i, a := range addrs {
		cli, err := newClient(a)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		clis = append(clis, cli)
		if err := warm(ctx, cli, fmt.Sprintf("%s/%d", prefix, i), n); err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("through %s: %w", a, err)
		}
	}
	return clis, closeAll, nil
}

func startProbe(ctx context.Context, clis []*clientv3.Client, prefix string) *writeProbe {
	return startProbeEvery(ctx, clis, prefix, probeInterval)
}

// startProbeEvery is startProbe with a put every interval.
func startProbeEvery(ctx context.Context, clis []*clientv3.Client, prefix string, interval time.Duration) *writeProbe {
	ctx, cancel := context.WithCancel(ctx)
	p := &writeProbe{clis: clis, cancel: cancel, changed: make(chan struct{}), halt: make(chan struct{})}
	p.wg.Go(func() {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		var inFlight sync.WaitGroup
		defer inFlight.Wait()
		slots := make(chan struct{}, probeMaxInFlight)
		for n := 0; ; n++ {
			select {
			case slots <- struct{}{}:
				key := fmt.Sprintf("%s/%d", prefix, n)
				inFlight.Go(func() {
					defer func() { <-slots }()
					p.put(ctx, n%len(p.clis), key)
				})
			default: // all slots waiting: skip this tick
			}
			select {
			case <-ctx.Done():
				return
			case <-p.halt:
				return
			case <-tick.C:
			}
		}
	})
	return p
}

func (p *writeProbe) put(ctx context.Context, node int, key string) {
	sent := time.Now()
	actx, cancel := context.WithTimeout(ctx, probeTimeout)
	_, err := p.clis[node].Put(actx, key, "v")
	cancel()
	done := time.Now()
	if ctx.Err() != nil {
		// Abandoned when the probe stopped: neither success nor failure.
		return
	}
	p.mu.Lock()
	p.attempts = append(p.attempts, attempt{node: node, sent: sent, done: done, err: err})
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

// waitSuccessAfter waits until a put answered after t succeeded and
// returns when it was answered. With every set, it waits until a put
// through each node did, and returns the first of them.
func (p *writeProbe) waitSuccessAfter(ctx context.Context, t time.Time, patience time.Duration, every bool) (time.Time, error) {
	deadline := time.After(patience)
	for {
		p.mu.Lock()
		first := firstSuccesses(p.attempts, t, len(p.clis))
		changed := p.changed
		p.mu.Unlock()
		var earliest time.Time
		missing := false
		for _, f := range first {
			missing = missing || f.IsZero()
			if !f.IsZero() && (earliest.IsZero() || f.Before(earliest)) {
				earliest = f
			}
		}
		if !earliest.IsZero() && (!every || !missing) {
			return earliest, nil
		}
		select {
		case <-changed:
		case <-deadline:
			return time.Time{}, fmt.Errorf("no write succeeded within %v (%s)", patience, p.lastError())
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
}

func (p *writeProbe) lastError() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, a := range slices.Backward(p.attempts) {
		if a.err != nil {
			return "last error: " + a.err.Error()
		}
	}
	return fmt.Sprintf("%d answers, no error", len(p.attempts))
}

// stop ends the probe, abandons the puts still waiting and returns the
// answered ones in the order they were answered.
func (p *writeProbe) stop() []attempt {
	p.cancel()
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.attempts)
}

// finish stops sending, waits until every put in flight is answered
// (each is bounded by probeTimeout) and returns them all: none is
// abandoned, so a put the failover left waiting counts as what it became.
func (p *writeProbe) finish() []attempt {
	close(p.halt)
	p.wg.Wait()
	p.cancel()
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.attempts)
}

// firstSuccesses returns, per node, when the first put answered after t
// succeeded (zero when none did).
func firstSuccesses(as []attempt, t time.Time, nodes int) []time.Time {
	first := make([]time.Time, nodes)
	for _, a := range as {
		if a.err == nil && a.done.After(t) && (first[a.node].IsZero() || a.done.Before(first[a.node])) {
			first[a.node] = a.done
		}
	}
	return first
}

// onNode keeps the attempts through one node.
func onNode(as []attempt, node int) []attempt {
	var out []attempt
	for _, a := range as {
		if a.node == node {
			out = append(out, a)
		}
	}
	return out
}

// failuresSince counts the puts sent at or after t that failed.
func failuresSince(as []attempt, t time.Time) int {
	n := 0
	for _, a := range as {
		if a.err != nil && !a.sent.Before(t) {
			n++
		}
	}
	return n
}

// longestGap is the longest stretch within [from, to] in which no put was
// acknowledged: the write pause a client saw.
func longestGap(as []attempt, from, to time.Time) time.Duration {
	var dones []time.Time
	for _, a := range as {
		if a.err == nil && a.done.After(from) && !a.done.After(to) {
			dones = append(dones, a.done)
		}
	}
	slices.SortFunc(dones, func(a, b time.Time) int { return a.Compare(b) })
	prev, gap := from, time.Duration(0)
	for _, d := range append(dones, to) {
		gap = max(gap, d.Sub(prev))
		prev = d
	}
	return gap
}

// warm makes sure a client has working connections: n puts must succeed.
func warm(ctx context.Context, cli *clientv3.Client, prefix string, n int) error {
	for i := range n {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := cli.Put(actx, fmt.Sprintf("%s/warm-%d", prefix, i), "v")
		cancel()
		if err != nil {
			return fmt.Errorf("warm-up put: %w", err)
		}
	}
	return nil
}

// failoverRun is one repetition of a failover row, kept in the JSON.
type failoverRun struct {
	Victim string  `json:"victim,omitempty"`
	To     string  `json:"to,omitempty"`
	MS     float64 `json:"ms"`
	// FailedPuts is how many probe puts sent during the run failed.
	FailedPuts int `json:"failed_puts"`
	// CommandMS is how long the handoff or move-leader call took.
	CommandMS float64 `json:"command_ms,omitempty"`
	// Errors are a few of the failed puts' errors (failover-kill-load).
	Errors []string `json:"errors,omitempty"`
	// ByNodeMS is the row's time for the puts through each node alone:
	// the first success after the kill, or the longest stretch without
	// an acknowledged put from the handoff's start until that node's
	// first success after the handoff returned.
	ByNodeMS map[string]float64 `json:"by_node_ms,omitempty"`
}

// failoverKill SIGKILLs the Primary (netsy) or the leader (etcd, t4) reps
// times and measures, each time, how long after the signal the first put
// through the surviving nodes succeeds. The killed node is restarted on
// its data and the cluster allowed to settle before the next repetition.
func failoverKill(ctx context.Context, c *config, d *deployment, reps int) (measurement, error) {
	var m measurement
	var runs []failoverRun
	for r := range reps {
		if err := d.waitSteady(ctx, 90*time.Second); err != nil {
			return m, fmt.Errorf("before kill %d: %w", r+1, err)
		}
		victim, err := d.leader(ctx)
		if err != nil {
			return m, fmt.Errorf("before kill %d: %w", r+1, err)
		}
		survivors := d.indexesBut(victim)
		prefix := fmt.Sprintf("/bench/failover/kill-%d", r)
		clis, closeAll, err := probeClients(ctx, d.clientAddrs(survivors), prefix, 2)
		if err != nil {
			return m, fmt.Errorf("kill %d: %w", r+1, err)
		}
		start := time.Now()
		// Kill returns once the process is reaped: no put sent after it
		// can be answered by the dead node.
		_ = d.nodes[victim].Kill()
		p := startProbe(ctx, clis, prefix)
		first, err := p.waitSuccessAfter(ctx, start, failoverPatience, true)
		as := p.stop()
		closeAll()
		if err != nil {
			return m, fmt.Errorf("kill %d of %s: %w\n%s", r+1, d.nodes[victim].label(), err, d.logTails(20))
		}
		took := first.Sub(start)
		run := failoverRun{Victim: d.nodes[victim].Name, MS: ms(took), FailedPuts: failuresSince(as, start), ByNodeMS: map[string]float64{}}
		for k, f := range firstSuccesses(as, start, len(clis)) {
			run.ByNodeMS[d.nodes[survivors[k]].Name] = ms(f.Sub(start))
		}
		runs = append(runs, run)
		m.Samples = append(m.Samples, took.Seconds())
		m.Errors += failuresSince(as, start)
		if err := d.nodes[victim].Launch(); err != nil {
			return m, fmt.Errorf("restart %s: %w", d.nodes[victim].label(), err)
		}
		if err := d.nodes[victim].waitReady(ctx, 90*time.Second); err != nil {
			return m, fmt.Errorf("restart %s: %w\n%s", d.nodes[victim].label(), err, logTail(d.nodes[victim].LogPath, 30))
		}
	}
	m.Value = *median(m.Samples)
	m.Extra = runs
	return m, nil
}

// failoverKillLoad SIGKILLs the Primary (netsy) or the leader (etcd) reps
// times while the load probe (2000 puts/s, through the surviving nodes
// in turn) has been running for loadLead, and counts the puts that
// failed: those in flight on the dead node and those sent during the
// failover. Every put is waited for (none abandoned). The row's time is
// until a put through every survivor was acknowledged after the kill.
func failoverKillLoad(ctx context.Context, c *config, d *deployment, reps int) (measurement, error) {
	var m measurement
	var runs []failoverRun
	for r := range reps {
		if err := d.waitSteady(ctx, 90*time.Second); err != nil {
			return m, fmt.Errorf("before kill %d: %w", r+1, err)
		}
		victim, err := d.leader(ctx)
		if err != nil {
			return m, fmt.Errorf("before kill %d: %w", r+1, err)
		}
		survivors := d.indexesBut(victim)
		prefix := fmt.Sprintf("/bench/failover/kill-load-%d", r)
		clis, closeAll, err := probeClients(ctx, d.clientAddrs(survivors), prefix, 2)
		if err != nil {
			return m, fmt.Errorf("kill %d: %w", r+1, err)
		}
		p := startProbeEvery(ctx, clis, prefix, loadInterval)
		time.Sleep(loadLead)
		start := time.Now()
		_ = d.nodes[victim].Kill()
		first, err := p.waitSuccessAfter(ctx, start, failoverPatience, true)
		as := p.finish()
		closeAll()
		if err != nil {
			return m, fmt.Errorf("kill %d of %s: %w\n%s", r+1, d.nodes[victim].label(), err, d.logTails(20))
		}
		took := first.Sub(start)
		failed := failuresSince(as, time.Time{})
		run := failoverRun{Victim: d.nodes[victim].Name, MS: ms(took), FailedPuts: failed, ByNodeMS: map[string]float64{}}
		for k, f := range firstSuccesses(as, start, len(clis)) {
			run.ByNodeMS[d.nodes[survivors[k]].Name] = ms(f.Sub(start))
		}
		if failed > 0 {
			run.Errors = distinctErrors(as, 3)
		}
		runs = append(runs, run)
		m.Samples = append(m.Samples, took.Seconds())
		m.Errors += failed
		if err := d.nodes[victim].Launch(); err != nil {
			return m, fmt.Errorf("restart %s: %w", d.nodes[victim].label(), err)
		}
		if err := d.nodes[victim].waitReady(ctx, 90*time.Second); err != nil {
			return m, fmt.Errorf("restart %s: %w\n%s", d.nodes[victim].label(), err, logTail(d.nodes[victim].LogPath, 30))
		}
	}
	m.Value = *median(m.Samples)
	m.Extra = runs
	return m, nil
}

// distinctErrors lists up to n distinct errors of the failed puts.
func distinctErrors(as []attempt, n int) []string {
	var out []string
	for _, a := range as {
		if a.err != nil && len(out) < n && !slices.Contains(out, a.err.Error()) {
			out = append(out, a.err.Error())
		}
	}
	return out
}

// failoverHandoff moves the Primary with `netsyctl handoff` (netsy) or the
// leader with MoveLeader, as `etcdctl move-leader` does (etcd), reps times
// while puts are sent through every node, and measures the longest
// stretch from the command's start until a put succeeded after it
// returned in which no put was acknowledged.
func failoverHandoff(ctx context.Context, c *config, d *deployment, reps int) (measurement, error) {
	var m measurement
	var runs []failoverRun
	for r := range reps {
		if err := d.waitSteady(ctx, 90*time.Second); err != nil {
			return m, fmt.Errorf("before handoff %d: %w", r+1, err)
		}
		all := d.indexesBut(-1)
		prefix := fmt.Sprintf("/bench/failover/handoff-%d", r)
		clis, closeAll, err := probeClients(ctx, d.clientAddrs(all), prefix, 2)
		if err != nil {
			return m, fmt.Errorf("handoff %d: %w", r+1, err)
		}
		victim, ids, err := d.roles(ctx)
		if err != nil {
			closeAll()
			return m, fmt.Errorf("before handoff %d: %w", r+1, err)
		}
		p := startProbe(ctx, clis, prefix)
		// Let the probe reach its steady rate before the clock starts.
		time.Sleep(200 * time.Millisecond)
		start := time.Now()
		run, err := d.handoff(ctx, c, victim, ids)
		returned := time.Now()
		var last time.Time
		if err == nil {
			last, err = p.waitSuccessAfter(ctx, returned, failoverPatience, true)
		}
		as := p.stop()
		closeAll()
		if err != nil {
			return m, fmt.Errorf("handoff %d: %w\n%s", r+1, err, d.logTails(20))
		}
		gap := longestGap(as, start, last)
		run.MS, run.FailedPuts = ms(gap), failuresSince(as, start)
		run.CommandMS = ms(returned.Sub(start))
		run.ByNodeMS = map[string]float64{}
		for k, f := range firstSuccesses(as, returned, len(clis)) {
			run.ByNodeMS[d.nodes[all[k]].Name] = ms(longestGap(onNode(as, k), start, f))
		}
		runs = append(runs, run)
		m.Samples = append(m.Samples, gap.Seconds())
		m.Errors += run.FailedPuts
	}
	m.Value = *median(m.Samples)
	m.Extra = runs
	return m, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// leader returns the index of the netsy Primary or the etcd leader.
func (d *deployment) leader(ctx context.Context) (int, error) {
	i, _, err := d.roles(ctx)
	return i, err
}

// roles returns the index of the netsy Primary or the etcd or t4 leader
// and, for etcd, the member ids by index.
func (d *deployment) roles(ctx context.Context) (int, []uint64, error) {
	switch d.v.Kind {
	case kindNetsy:
		i, _, err := d.netsyPrimary(ctx)
		return i, nil, err
	case kindT4:
		i, _, err := d.t4Leader(ctx)
		return i, nil, err
	}
	return d.etcdLeader(ctx)
}

// handoff moves the role of node leader once: netsyctl handoff for netsy
// (the Elector picks the next Primary), MoveLeader to the next member for
// etcd.
func (d *deployment) handoff(ctx context.Context, c *config, leader int, ids []uint64) (failoverRun, error) {
	run := failoverRun{Victim: d.nodes[leader].Name}
	if d.v.Kind == kindNetsy {
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		cmd := exec.CommandContext(cctx, c.bins.Netsyctl, "handoff", "--endpoints", d.endpoint(), "-o", "json")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := procutil.RunTied(cmd); err != nil {
			return run, fmt.Errorf("netsyctl handoff: %w: %s", err, bytes.TrimSpace(errb.Bytes()))
		}
		var res struct {
			Primary *struct {
				NodeID string `json:"node_id"`
			} `json:"primary"`
		}
		if err := json.Unmarshal(out.Bytes(), &res); err != nil {
			return run, fmt.Errorf("netsyctl handoff -o json: %w: %s", err, out.Bytes())
		}
		if res.Primary == nil || res.Primary.NodeID == run.Victim {
			return run, fmt.Errorf("netsyctl handoff left the Primary on %s: %s", run.Victim, out.Bytes())
		}
		run.To = res.Primary.NodeID
		return run, nil
	}
	to := (leader + 1) % len(d.nodes)
	run.To = d.nodes[to].Name
	lcli, err := newClient(d.nodes[leader].ClientAddr)
	if err != nil {
		return run, err
	}
	defer lcli.Close()
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := lcli.MoveLeader(cctx, ids[to]); err != nil {
		return run, fmt.Errorf("move-leader to %s: %w", run.To, err)
	}
	return run, nil
}
