package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The scale group (issue 22 item 5) measures what grows with the data.
// ScaleKeys distinct keys (× -scale) of ScaleValSize bytes (256 unless
// -scale-val-size says otherwise) are loaded by
// etcd's `benchmark put` (64 clients, 8 connections, sequential keys, a
// key space as large as the total, so every put creates a key) into a
// fresh deployment: one server, or every node of a cluster, the tool
// given every endpoint. After ScaleSettle the harness reads, summed over
// the nodes (and, on a cluster, the leader's alone):
//
//   - put: the load's rate; its CPU is the servers' over the load, per
//     1000 keys;
//   - rss: VmRSS;
//   - disk: the data directories as du counts them (allocated blocks,
//     hard links once; diskUsage), with the file object store of a netsy
//     that runs on one (netsy, netsy-local) inside it;
//   - bucket: on MinIO targets, the bytes of the objects in the
//     deployment's bucket, which is not in disk;
//
// then every node is stopped with SIGTERM (a netsy Primary or t4 leader
// last, as deployment.stop does), all are launched again at once on their
// data, and restart is the time from that launch until a linearizable Get
// through any endpoint succeeds; restart cpu is the CPU the servers spent
// in that time (less noisy than the seconds on a shared machine); rss
// after restart is VmRSS ScaleSettle later. The targets are the issue's: put ≥ 1.5×, the rest ≤ 1.0× etcd.

// Row suffixes of the scale workload; the row is "scale-<keys> <suffix>".
const (
	scalePut        = "put"
	scaleRSS        = "rss"
	scaleRSSLeader  = "rss leader"
	scaleDisk       = "disk"
	scaleDiskLeader = "disk leader"
	scaleBucket     = "bucket"
	scaleRestart    = "restart"
	scaleRestartCPU = "restart cpu"
	scaleRSSAfter   = "rss after restart"
)

// scaleKeys is how many keys the scale rows load: ScaleKeys scaled by
// -scale, at least 1000.
func (c *config) scaleKeys() int {
	return max(int(float64(c.ScaleKeys)*c.Scale), 1000)
}

// scaleRow names a row of the scale workload for a load of keys.
func scaleRow(keys int, suffix string) string {
	return "scale-" + revLabel(keys) + " " + suffix
}

// scaleSpecs are the rows of the scale workload: the leader's rows when
// the run compares clusters, the bucket row when a target keeps its data
// on the harness's MinIO.
func scaleSpecs(w *workload, keys int, cluster, bucket bool) []rowSpec {
	atMost := func() *goal { return &goal{Metric: "value", Op: "<=", Bound: 1.0} }
	spec := func(suffix, metric string, g *goal) rowSpec {
		return rowSpec{Name: scaleRow(keys, suffix), Group: w.Group, Metric: metric, Goal: g}
	}
	out := []rowSpec{
		spec(scalePut, "ops/s", &goal{Metric: "ops", Op: ">=", Bound: 1.5}),
		spec(scaleRSS, "RSS MiB", atMost()),
	}
	if cluster {
		out = append(out, spec(scaleRSSLeader, "RSS MiB", nil))
	}
	out = append(out, spec(scaleDisk, "data MiB", atMost()))
	if cluster {
		out = append(out, spec(scaleDiskLeader, "data MiB", nil))
	}
	if bucket {
		out = append(out, spec(scaleBucket, "bucket MiB", nil))
	}
	return append(out,
		spec(scaleRestart, "s to serve", atMost()),
		spec(scaleRestartCPU, "CPU s", nil),
		spec(scaleRSSAfter, "RSS MiB", atMost()))
}

// scaleLoadTimeout bounds the load: the harness's -run-timeout, or
// 2 ms a key when that is longer (1 M keys: 33 min), so that a large
// -scale is not cut short by a limit sized for the other workloads.
func scaleLoadTimeout(runTimeout time.Duration, keys int) time.Duration {
	return max(runTimeout, time.Duration(keys)*2*time.Millisecond)
}

// scaleServeTimeout bounds the wait for the first read after a restart:
// 2 minutes and 100 µs a key (1 M keys: 3 min 40 s).
func scaleServeTimeout(keys int) time.Duration {
	return 2*time.Minute + time.Duration(keys)*100*time.Microsecond
}

// nodeMemory is one node's memory fields (KiB) from /proc/PID/status.
type nodeMemory struct {
	Node   string           `json:"node"`
	Leader bool             `json:"leader,omitempty"`
	Status map[string]int64 `json:"status"`
}

// nodeDisk is one node's data directory: MiB in total and per part
// (diskPart).
type nodeDisk struct {
	Node    string             `json:"node"`
	Leader  bool               `json:"leader,omitempty"`
	MiB     float64            `json:"mib"`
	Entries map[string]float64 `json:"entries_mib"`
}

// scaleRestartDetail is the restart row's extra: how long the stop took,
// and the CPU the servers spent from launch until the first read.
type scaleRestartDetail struct {
	StopSecs   float64 `json:"stop_secs"`
	CPUSecs    float64 `json:"cpu_secs_until_served"`
	KeysServed int64   `json:"keys_served"`
}

// runScale runs the scale workload on deployment d (see the group's
// comment above).
func runScale(ctx context.Context, c *config, d *deployment, tag string) (map[string]measurement, error) {
	keys := c.scaleKeys()
	row := func(suffix string) string { return scaleRow(keys, suffix) }
	n := strconv.Itoa(keys)
	args := []string{"put", "--clients", "64", "--conns", "8", "--key-size", "8", "--sequential-keys",
		"--val-size", strconv.Itoa(c.ScaleValSize), "--total", n, "--key-space-size", n}
	loadPath := filepath.Join(c.rawDir, tag+".load.txt")
	fallbacksBefore, fbErr := d.quorumFallbacks(ctx)
	meter := startCPU(d, c.minio, d.v.MinIO)
	sums, err := runToolWithin(ctx, c, scaleLoadTimeout(c.RunTimeout, keys), d.endpoint(), args, loadPath)
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	s := pickSummary(sums, "")
	if s == nil || s.ErrorCount() > 0 {
		return nil, fmt.Errorf("load had failed requests (see %s)", loadPath)
	}
	put := measurement{Value: s.RPS, Secs: s.Total, Summary: s, Ops: float64(keys)}
	c.measureCPU(tag, meter, d, &put)
	if v, ok := s.Pct("50"); ok {
		put.P50 = &v
	}
	if v, ok := s.Pct("99"); ok {
		put.P99 = &v
	}
	if !d.running() {
		return nil, fmt.Errorf("a server exited during the load; log tails:\n%s", d.logTails(20))
	}
	loaded, err := countKeys(ctx, d.endpoint())
	if err != nil {
		return nil, fmt.Errorf("count after load: %w", err)
	}
	if loaded != int64(keys) {
		c.notef("%s: %d keys after loading %d", tag, loaded, keys)
	}
	extra := map[string]int64{"keys": loaded}
	if fbErr == nil {
		if after, err := d.quorumFallbacks(ctx); err == nil && after >= 0 {
			n := int64(after - fallbacksBefore)
			extra["quorum_fallbacks"] = n
			if n > 0 {
				c.notef("%s: during the load the Primary fell back %d times to acknowledging writes through object storage "+
					"(netsy_quorum_fallbacks_total; the log says why, e.g. its lease lapsed on a starved machine): the put row is not "+
					"the quorum mode's rate alone", tag, n)
			}
		}
	}
	put.Extra = extra
	out := map[string]measurement{row(scalePut): put}

	leader := -1
	if d.v.cluster() {
		if leader, err = d.leader(ctx); err != nil {
			c.notef("%s: no leader for the leader's rows: %v", tag, err)
			leader = -1
		}
	}
	if err := sleepCtx(ctx, c.ScaleSettle); err != nil {
		return nil, err
	}
	rss, rssLeader, mem, err := d.memory(leader)
	if err != nil {
		return nil, err
	}
	out[row(scaleRSS)] = measurement{Value: rss, Extra: mem}
	disk, diskLeader, disks, err := d.disk(leader)
	if err != nil {
		return nil, err
	}
	out[row(scaleDisk)] = measurement{Value: disk, Extra: disks}
	if d.v.cluster() && leader >= 0 {
		out[row(scaleRSSLeader)] = measurement{Value: rssLeader}
		out[row(scaleDiskLeader)] = measurement{Value: diskLeader}
	}
	if d.v.MinIO {
		bytes, objects, err := c.minio.bucketBytes(ctx, d.bucket)
		if err != nil {
			c.notef("%s: bucket size: %v", tag, err)
		} else {
			out[row(scaleBucket)] = measurement{Value: mib(bytes), Extra: map[string]int{"objects": objects}}
		}
	}

	stopStart := time.Now()
	d.stop(c)
	stopSecs := time.Since(stopStart).Seconds()
	cli, err := newClient(d.endpoint())
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	start := time.Now()
	for _, srv := range d.nodes {
		if err := srv.Launch(); err != nil {
			return nil, fmt.Errorf("restart %s: %w", srv.label(), err)
		}
	}
	served, err := waitServing(ctx, cli, scaleServeTimeout(keys))
	if err != nil {
		return nil, fmt.Errorf("restart: %w\n%s", err, d.logTails(20))
	}
	detail := scaleRestartDetail{StopSecs: stopSecs}
	var cpuErr error
	for _, srv := range d.nodes {
		v, err := procCPU(srv.PID())
		if err != nil {
			cpuErr = fmt.Errorf("%s: %w", srv.label(), err)
			break
		}
		detail.CPUSecs += v
	}
	if detail.KeysServed, err = countKeys(ctx, d.endpoint()); err != nil {
		return nil, fmt.Errorf("count after restart: %w", err)
	} else if detail.KeysServed != loaded {
		c.notef("%s: %d keys after restart, %d before", tag, detail.KeysServed, loaded)
	}
	out[row(scaleRestart)] = measurement{Value: served.Sub(start).Seconds(), Extra: detail}
	if cpuErr != nil {
		c.notef("%s: no restart CPU: %v", tag, cpuErr)
	} else {
		out[row(scaleRestartCPU)] = measurement{Value: detail.CPUSecs}
	}
	if err := sleepCtx(ctx, c.ScaleSettle); err != nil {
		return nil, err
	}
	rss, _, mem, err = d.memory(-1)
	if err != nil {
		return nil, err
	}
	out[row(scaleRSSAfter)] = measurement{Value: rss, Extra: mem}
	return out, nil
}

// quorumFallbacks sums netsy_quorum_fallbacks_total over the nodes of a
// netsy deployment: how often a Primary gave up acknowledging on its
// quorum and waited for object storage instead. It is -1 on other kinds.
func (d *deployment) quorumFallbacks(ctx context.Context) (float64, error) {
	if d.v.Kind != kindNetsy {
		return -1, nil
	}
	sum := 0.0
	for _, s := range d.nodes {
		ms, err := scrapeMetrics(ctx, s.HTTPAddr)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", s.label(), err)
		}
		sum += ms["netsy_quorum_fallbacks_total"]
	}
	return sum, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// memory reads every node's VmRSS and returns the sum and the leader's
// (0 when leader < 0) in MiB, with each node's memory fields.
func (d *deployment) memory(leader int) (sum, lead float64, nodes []nodeMemory, err error) {
	for i, srv := range d.nodes {
		pid := srv.PID()
		if pid == 0 {
			return 0, 0, nil, fmt.Errorf("%s is not running", srv.label())
		}
		st, err := procStatus(pid)
		if err != nil {
			return 0, 0, nil, fmt.Errorf("%s: %w", srv.label(), err)
		}
		keep := map[string]int64{}
		for _, k := range []string{"VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"} {
			if v, ok := st[k]; ok {
				keep[k+"_kib"] = v
			}
		}
		v := float64(st["VmRSS"]) / 1024
		sum += v
		if i == leader {
			lead = v
		}
		nodes = append(nodes, nodeMemory{Node: srv.label(), Leader: i == leader, Status: keep})
	}
	return sum, lead, nodes, nil
}

// disk measures every node's data directory and returns the sum and the
// leader's (0 when leader < 0) in MiB, with each node's breakdown.
func (d *deployment) disk(leader int) (sum, lead float64, nodes []nodeDisk, err error) {
	for i, srv := range d.nodes {
		total, parts, err := diskUsage(srv.DataDir)
		if err != nil {
			return 0, 0, nil, fmt.Errorf("%s: %w", srv.label(), err)
		}
		nd := nodeDisk{Node: srv.label(), Leader: i == leader, MiB: mib(total), Entries: map[string]float64{}}
		for name, b := range parts {
			nd.Entries[name] = mib(b)
		}
		sum += nd.MiB
		if i == leader {
			lead = nd.MiB
		}
		nodes = append(nodes, nd)
	}
	return sum, lead, nodes, nil
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// diskUsage returns what the tree under dir occupies on disk, as du
// counts it: allocated blocks (st_blocks × 512, so the holes of a sparse
// file are not counted), directories included, a file with several hard
// links once; and the same per part of dir (diskPart). The server may
// still be writing, so an entry that disappears during the walk is
// skipped rather than failing the row.
func diskUsage(dir string) (total int64, parts map[string]int64, err error) {
	type inode struct{ dev, ino uint64 }
	seen := map[inode]bool{}
	parts = map[string]int64{}
	err = filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && path != dir {
				return nil
			}
			return err
		}
		info, err := e.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("%s: no stat_t", path)
		}
		id := inode{uint64(st.Dev), st.Ino}
		if seen[id] {
			return nil
		}
		seen[id] = true
		n := st.Blocks * 512
		total += n
		if rel, _ := filepath.Rel(dir, path); rel != "." {
			parts[diskPart(rel)] += n
		}
		return nil
	})
	return total, parts, err
}

// diskPart names the part of a data directory a path (relative to it)
// is counted in: the top-level entry, or the top-level directory and the
// directory inside it, so that etcd's member/wal and member/snap and the
// directories of netsy's file store show apart while the files directly
// in netsy's wal/ or values/ add up under that name.
func diskPart(rel string) string {
	parts := strings.SplitN(filepath.ToSlash(rel), "/", 3)
	if len(parts) < 3 {
		return parts[0]
	}
	return parts[0] + "/" + parts[1]
}

// withoutScale drops the scale group from a default selection: with
// -quick, loading even a twentieth of a million keys on every target
// would take longer than the rest of the smoke run. Naming the workload
// or the group runs it anyway.
func withoutScale(ws []workload) []workload {
	return slices.DeleteFunc(slices.Clone(ws), func(w workload) bool { return w.DataScale })
}
