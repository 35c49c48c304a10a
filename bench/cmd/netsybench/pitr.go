package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/netsy-io/netsy/internal/testutil/procutil"
)

// The pitr group (not in "all", not in CI) times what issue 21 asks of
// point-in-time restore and branches on a netsy MinIO target: a history
// of PITRRevisions revisions is loaded into one bucket by a real netsy
// (several snapshots, compaction on), the node is stopped, and then,
// with no server running on the bucket:
//
//   - restore: `netsyctl restore --revision R` (R the middle of the
//     history) into a new bucket and data directory, then the same to the
//     base snapshot the first restore started from (nothing to replay),
//     which gives the restore's replay rate: entries replayed over the
//     difference of the two times;
//   - branch: `netsyctl branch --revision R` into a new bucket, then a
//     netsy on it and an empty data directory, until its first read;
//   - fresh start: a netsy on the parent bucket and an empty data
//     directory (newest snapshot, then the chunks after it), until its
//     first read. It runs last: it writes to the parent bucket.
//
// The restore's target is the issue's: no longer than the fresh start plus
// the entries it replayed at the replay rate (ratio ≤ 1). Branch creation's
// is an absolute 5 s.
const (
	rowRestorePrefix = "restore-"
	rowBranchCreate  = "branch-create"
	branchCreateGoal = 5.0 // seconds
)

// pitrTargets are the targets -workloads pitr runs on unless -targets is
// given: netsy on MinIO, and etcd as the harness's baseline column (etcd
// has no equivalent and is skipped, with a note).
const pitrTargets = "netsy-minio,etcd"

// pitrOnly reports whether the -workloads list names the pitr group (or
// workload) alone.
func pitrOnly(list string) bool {
	ws, err := selectWorkloads(list)
	if err != nil || len(ws) == 0 {
		return false
	}
	for _, w := range ws {
		if !w.PITR {
			return false
		}
	}
	return true
}

// pitrCompaction is the source node's --auto-compaction-retention
// (periodic mode).
const pitrCompaction = "5s"

// pitrDetail is what the restore row (or the branch row) measured besides
// its value; it lands in the JSON (measurement.Extra) and the pitr table.
type pitrDetail struct {
	Revisions     int64   `json:"revisions"`      // head revision after the load
	Revision      int64   `json:"revision"`       // R restored or branched
	WindowOldest  int64   `json:"window_oldest"`  // as the restore reported it
	WindowNewest  int64   `json:"window_newest"`  //
	BaseRevision  int64   `json:"base_revision"`  // snapshot the restore started from
	Replayed      int64   `json:"replayed"`       // entries the restore replayed
	BaseSecs      float64 `json:"base_secs"`      // restore to BaseRevision (nothing replayed)
	ReplayPerSec  float64 `json:"replay_per_sec"` // Replayed / (restore - base)
	FreshSecs     float64 `json:"fresh_start_secs"`
	BudgetSecs    float64 `json:"budget_secs"` // FreshSecs + Replayed / ReplayPerSec
	Ratio         float64 `json:"ratio"`       // restore / budget
	LoadSecs      float64 `json:"load_secs"`
	LoadPerSec    float64 `json:"load_per_sec"`
	FirstReadSecs float64 `json:"branch_first_read_secs,omitempty"` // branch row: its first node's start
	// Keys live in the restored data directory (netsyctl's count), on the
	// branch's first node and on the fresh node: a check that each served
	// the history, not an empty store.
	RestoredKeys int   `json:"restored_keys,omitempty"`
	BranchKeys   int64 `json:"branch_keys,omitempty"`
	FreshKeys    int64 `json:"fresh_keys,omitempty"`
}

// revLabel names a revision count as the row does: 1m, 50k, 1500.
func revLabel(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return strconv.Itoa(n/1_000_000) + "m"
	case n >= 1000 && n%1000 == 0:
		return strconv.Itoa(n/1000) + "k"
	}
	return strconv.Itoa(n)
}

// pitrRevisions is the history the pitr rows load: PITRRevisions scaled
// by -scale, at least 1000.
func (c *config) pitrRevisions() int {
	return max(int(float64(c.PITRRevisions)*c.Scale), 1000)
}

// midRevision is the revision the restore and the branch go to: the
// middle of the window [oldest, newest].
func midRevision(oldest, newest int64) int64 {
	if oldest < 1 {
		oldest = 1
	}
	return oldest + (newest-oldest)/2
}

// restoreBudget is the bound on a restore: a fresh node's start
// plus the entries replayed at the replay rate measured from the two
// restores (restoreSecs with replayed entries, baseSecs with none). It
// returns the rate, the budget and restoreSecs over it; ok is false when
// the rate cannot be had (nothing replayed, or the replay took no time).
func restoreBudget(restoreSecs, baseSecs, freshSecs float64, replayed int64) (rate, budget, ratio float64, ok bool) {
	replaySecs := restoreSecs - baseSecs
	if replayed <= 0 || replaySecs <= 0 || restoreSecs <= 0 {
		return 0, 0, 0, false
	}
	rate = float64(replayed) / replaySecs
	budget = freshSecs + float64(replayed)/rate
	return rate, budget, restoreSecs / budget, true
}

// restoreJSON is the part of `netsyctl restore -o json` the rows use.
type restoreJSON struct {
	Revision     int64 `json:"revision"`
	BaseRevision int64 `json:"base_snapshot_revision"`
	Replayed     int64 `json:"entries_replayed"`
	Keys         int   `json:"keys"`
	Window       struct {
		Oldest int64 `json:"oldest"`
		Newest int64 `json:"newest"`
	} `json:"window"`
}

func parseRestoreJSON(out []byte) (restoreJSON, error) {
	var r restoreJSON
	if err := json.Unmarshal(bytes.TrimSpace(out), &r); err != nil {
		return r, fmt.Errorf("netsyctl restore -o json: %w in %q", err, clip(out))
	}
	if r.Revision <= 0 {
		return r, fmt.Errorf("netsyctl restore -o json: no revision in %q", clip(out))
	}
	return r, nil
}

// clip is the start of a command's output, for an error message.
func clip(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\n")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// pitrRows are the row names of the pitr workload for a history of revs.
func pitrRows(revs int) []string {
	return []string{rowRestorePrefix + revLabel(revs), rowBranchCreate}
}

// runPITR runs the pitr workload on netsy target t (see the group's
// comment above).
func runPITR(ctx context.Context, c *config, t int, tag string) (map[string]measurement, error) {
	v := c.Targets[t]
	if v.Kind != kindNetsy || !v.MinIO || v.cluster() {
		return nil, fmt.Errorf("%w on %s: the pitr rows run on one netsy node on the harness's MinIO (netsy-minio)", errNoEquivalent, c.Labels[t])
	}
	dir := filepath.Join(c.dataDir, tag)
	defer os.RemoveAll(dir)
	m := c.minio
	newBucket := func(suffix string) (string, error) {
		b, err := m.bucket(ctx, tag+suffix)
		if err != nil {
			return "", fmt.Errorf("minio: %w", err)
		}
		return b, nil
	}
	parent, err := newBucket("")
	if err != nil {
		return nil, err
	}
	defer m.removeBucket(context.WithoutCancel(ctx), parent)

	revs := c.pitrRevisions()
	every := max(revs/10, 100)
	// The history: a real netsy, acknowledging on its local fsync so the
	// load is quick (chunks upload behind it), a snapshot every tenth of
	// the history, and compaction on, as under kube-apiserver: periodic,
	// 5 s (revision mode was tried first: its compactor had not run once
	// by the end of a 1 M load, and the snapshots carried every version).
	node := func(name, bucket string) (*server, error) {
		srv, err := newServer(v, c.bins, filepath.Join(dir, name), c.ExtraArgs[kindNetsy])
		if err != nil {
			return nil, err
		}
		srv.LogPath = filepath.Join(c.rawDir, tag+"."+name+".server.log")
		srv.extra = append(append(m.netsyArgs(bucket), "--quorum", "-1"), srv.extra...)
		srv.env = m.env()
		return srv, nil
	}
	src, err := node("source", parent)
	if err != nil {
		return nil, err
	}
	// The fresh node takes the source's id: the same member rebuilt on a
	// new disk from the bucket alone.
	src.Name = "n1"
	src.extra = append(src.extra, "--snapshot-every-revisions", strconv.Itoa(every),
		"--auto-compaction-mode", "periodic", "--auto-compaction-retention", pitrCompaction)
	if err := src.Start(ctx, 90*time.Second); err != nil {
		return nil, err
	}
	defer src.Stop()
	n := strconv.Itoa(revs)
	args := []string{"put", "--clients", "64", "--conns", "8", "--key-size", "8", "--sequential-keys",
		"--val-size", "256", "--total", n, "--key-space-size", strconv.Itoa(max(revs/10, 1))}
	loadStart := time.Now()
	sums, err := runTool(ctx, c, src.ClientAddr, args, filepath.Join(c.rawDir, tag+".load.txt"))
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	loadSecs := time.Since(loadStart).Seconds()
	if s := pickSummary(sums, ""); s == nil || s.ErrorCount() > 0 {
		return nil, fmt.Errorf("load had failed requests (see %s)", filepath.Join(c.rawDir, tag+".load.txt"))
	}
	head, err := headRevision(ctx, src.ClientAddr)
	if err != nil {
		return nil, fmt.Errorf("head revision: %w", err)
	}
	// etcd's tool wrote more distinct keys than its key space holds (5064
	// for a space of 5000 at -quick, 108192 for 100k at 1 M; not looked
	// into): the fresh node is checked against what the source served.
	srcKeys, err := countKeys(ctx, src.ClientAddr)
	if err != nil {
		return nil, fmt.Errorf("count keys after the load: %w", err)
	}
	// A clean stop uploads what the bucket still lacks; from here on no
	// server runs on the parent until the fresh start at the end.
	if err := src.Stop(); err != nil {
		c.notef("%s: %v", tag, err)
	}
	d := pitrDetail{Revisions: head, LoadSecs: loadSecs, LoadPerSec: float64(revs) / loadSecs}

	// Restore to the middle of the history, then to its base snapshot.
	d.Revision = midRevision(1, head)
	restore := func(name string, rev int64) (restoreJSON, float64, error) {
		to, err := newBucket("-" + name)
		if err != nil {
			return restoreJSON{}, 0, err
		}
		defer m.removeBucket(context.WithoutCancel(ctx), to)
		start := time.Now()
		out, err := c.netsyctl(ctx, tag+"."+name, "restore", "--from", "s3://"+parent, "--to", "s3://"+to,
			"--data-dir", filepath.Join(dir, name), "--revision", strconv.FormatInt(rev, 10), "-o", "json")
		secs := time.Since(start).Seconds()
		if err != nil {
			return restoreJSON{}, 0, err
		}
		r, err := parseRestoreJSON(out)
		_ = os.RemoveAll(filepath.Join(dir, name))
		return r, secs, err
	}
	r, restoreSecs, err := restore("restore", d.Revision)
	if err != nil {
		return nil, err
	}
	d.WindowOldest, d.WindowNewest, d.BaseRevision, d.Replayed = r.Window.Oldest, r.Window.Newest, r.BaseRevision, r.Replayed
	d.RestoredKeys = r.Keys
	if d.WindowNewest < head {
		c.notef("%s: the bucket's window ends at %d, short of the head %d the node had served", tag, d.WindowNewest, head)
	}
	if mid := midRevision(d.WindowOldest, d.WindowNewest); d.Revision != mid {
		c.notef("%s: restored %d; the middle of the window %d..%d is %d", tag, d.Revision, d.WindowOldest, d.WindowNewest, mid)
	}
	if d.BaseRevision > 0 && d.Replayed > 0 {
		if _, d.BaseSecs, err = restore("restore-base", d.BaseRevision); err != nil {
			return nil, fmt.Errorf("restore to the base snapshot %d: %w", d.BaseRevision, err)
		}
	} else {
		c.notef("%s: the restore to %d replayed %d entries from snapshot %d: no replay rate", tag, d.Revision, d.Replayed, d.BaseRevision)
	}

	// Branch at the same revision, and its first node.
	bbucket, err := newBucket("-branch")
	if err != nil {
		return nil, err
	}
	defer m.removeBucket(context.WithoutCancel(ctx), bbucket)
	start := time.Now()
	if _, err := c.netsyctl(ctx, tag+".branch", "branch", "--from", "s3://"+parent, "--to", "s3://"+bbucket,
		"--revision", strconv.FormatInt(d.Revision, 10), "-o", "json"); err != nil {
		return nil, err
	}
	branchSecs := time.Since(start).Seconds()
	bn, err := node("branch", bbucket)
	if err != nil {
		return nil, err
	}
	defer bn.Stop()
	if d.FirstReadSecs, err = firstRead(ctx, bn); err != nil {
		return nil, fmt.Errorf("branch node: %w", err)
	}
	if d.BranchKeys, err = countKeys(ctx, bn.ClientAddr); err != nil {
		return nil, fmt.Errorf("branch node: count keys: %w", err)
	}
	if err := bn.Stop(); err != nil {
		c.notef("%s: %v", tag, err)
	}

	// A fresh node on the parent: newest snapshot, then the chunks after it.
	fresh, err := node("fresh", parent)
	if err != nil {
		return nil, err
	}
	fresh.Name = "n1"
	defer fresh.Stop()
	if d.FreshSecs, err = firstRead(ctx, fresh); err != nil {
		return nil, fmt.Errorf("fresh node: %w", err)
	}
	if d.FreshKeys, err = countKeys(ctx, fresh.ClientAddr); err != nil {
		return nil, fmt.Errorf("fresh node: count keys: %w", err)
	}
	if d.FreshKeys != srcKeys {
		c.notef("%s: the fresh node serves %d keys, the source served %d", tag, d.FreshKeys, srcKeys)
	}
	if err := fresh.Stop(); err != nil {
		c.notef("%s: %v", tag, err)
	}

	if rate, budget, ratio, ok := restoreBudget(restoreSecs, d.BaseSecs, d.FreshSecs, d.Replayed); ok {
		d.ReplayPerSec, d.BudgetSecs, d.Ratio = rate, budget, ratio
	}
	bd := pitrDetail{Revisions: head, Revision: d.Revision, FirstReadSecs: d.FirstReadSecs, BranchKeys: d.BranchKeys}
	return map[string]measurement{
		rowRestorePrefix + revLabel(revs): {Value: restoreSecs, Secs: restoreSecs, Extra: d},
		rowBranchCreate:                   {Value: branchSecs, Secs: branchSecs, Extra: bd},
	}, nil
}

// firstRead launches srv on an empty data directory and returns the
// seconds until a linearizable Get succeeds.
func firstRead(ctx context.Context, srv *server) (float64, error) {
	cli, err := newClient(srv.ClientAddr)
	if err != nil {
		return 0, err
	}
	defer cli.Close()
	start := time.Now()
	if err := srv.Launch(); err != nil {
		return 0, err
	}
	served, err := waitServing(ctx, cli, 5*time.Minute)
	if err != nil {
		return 0, fmt.Errorf("%w\nlog tail:\n%s", err, logTail(srv.LogPath, 20))
	}
	return served.Sub(start).Seconds(), nil
}

// headRevision is the revision a linearizable Get reports.
func headRevision(ctx context.Context, endpoint string) (int64, error) {
	resp, err := getOnce(ctx, endpoint, singleKey)
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

// netsyctl runs the harness's netsyctl against the harness's MinIO (its
// S3 flags and credentials appended) and returns its stdout; the command
// and all its output are kept in the results folder as name.txt.
func (c *config) netsyctl(ctx context.Context, name string, args ...string) ([]byte, error) {
	if c.bins.Netsyctl == "" {
		return nil, errors.New("no netsyctl binary built")
	}
	args = append(args, c.minio.s3Flags()...)
	ctx, cancel := context.WithTimeout(ctx, c.RunTimeout)
	defer cancel()
	path := filepath.Join(c.rawDir, name+".txt")
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fmt.Fprintf(f, "$ %s %s\n", c.bins.Netsyctl, strings.Join(args, " "))
	var stdout bytes.Buffer
	cmd := exec.CommandContext(ctx, c.bins.Netsyctl, args...)
	cmd.Env = append(os.Environ(), c.minio.env()...)
	cmd.Stdout = &stdout
	cmd.Stderr = f
	cmd.WaitDelay = 5 * time.Second
	done, err := procutil.StartTied(cmd)
	if err != nil {
		return nil, err
	}
	err = <-done
	_, _ = f.Write(stdout.Bytes())
	if err != nil {
		return nil, fmt.Errorf("netsyctl %s: %w (output in %s):\n%s", args[0], err, path, logTail(path, 5))
	}
	return stdout.Bytes(), nil
}

// pitrSide is one target's pitr row, medians over runs.
type pitrSide struct {
	Secs, Fresh, Rate, Budget, Ratio, FirstRead *float64
	Detail                                      pitrDetail // of the first run: R, window, base
	Runs                                        int
}

func summarizePITR(ms []measurement) (pitrSide, bool) {
	var s pitrSide
	var secs, fresh, rate, budget, ratio, first []float64
	for _, m := range ms {
		d, ok := m.Extra.(pitrDetail)
		if !ok {
			continue
		}
		if s.Runs == 0 {
			s.Detail = d
		}
		s.Runs++
		secs = append(secs, m.Value)
		if d.FirstReadSecs > 0 {
			first = append(first, d.FirstReadSecs)
		}
		if d.BudgetSecs > 0 {
			fresh, rate = append(fresh, d.FreshSecs), append(rate, d.ReplayPerSec)
			budget, ratio = append(budget, d.BudgetSecs), append(ratio, d.Ratio)
		}
	}
	s.Secs, s.Fresh, s.Rate, s.Budget, s.Ratio, s.FirstRead = median(secs), median(fresh), median(rate), median(budget), median(ratio), median(first)
	return s, s.Runs > 0
}

// pitrVerdict is a pitr row's target and whether it was met: restore
// within its budget (ratio ≤ 1), branch creation within 5 s.
func pitrVerdict(name string, s pitrSide) (target string, met *bool) {
	var ok bool
	switch {
	case name == rowBranchCreate:
		target = fmt.Sprintf("≤ %.0f s", branchCreateGoal)
		if s.Secs == nil {
			return target, nil
		}
		ok = *s.Secs <= branchCreateGoal
	case strings.HasPrefix(name, rowRestorePrefix):
		target = "≤ fresh start + replay (ratio ≤ 1×)"
		if s.Ratio == nil {
			return target, nil
		}
		ok = *s.Ratio <= 1
	default:
		return "", nil
	}
	return target, &ok
}

// pitrTable lists the pitr rows of every target that ran them.
func (r *report) pitrTable(b *strings.Builder) {
	var lines []string
	var desc string
	for _, row := range r.Rows {
		if row.Group != "pitr" {
			continue
		}
		desc = row.Desc
		for t, side := range row.Sides {
			s, ok := summarizePITR(side.Runs)
			if !ok {
				continue
			}
			d := s.Detail
			var cmp string
			if row.Workload == rowBranchCreate {
				cmp = fmt.Sprintf("at revision %d of %d; its first node served a read %s s after launch (%d keys)", d.Revision, d.Revisions, fmtSecs(s.FirstRead), d.BranchKeys)
			} else {
				cmp = fmt.Sprintf("revision %d of window %d..%d (%d keys), from snapshot %d + %d entries replayed", d.Revision, d.WindowOldest, d.WindowNewest, d.RestoredKeys, d.BaseRevision, d.Replayed)
				if s.Budget != nil {
					cmp += fmt.Sprintf("; budget %s s = fresh node's start to first read %s s + %d entries at %s entries/s (restore to the base snapshot alone: %.2f s)",
						fmtSecs(s.Budget), fmtSecs(s.Fresh), d.Replayed, fmtNum(*s.Rate), d.BaseSecs)
				}
				cmp += fmt.Sprintf("; history loaded at %s puts/s", fmtNum(d.LoadPerSec))
			}
			target, met := pitrVerdict(row.Workload, s)
			lines = append(lines, fmt.Sprintf("| %s | %s | %s | %s | %s | %s | %s |",
				row.Workload, r.Targets[t], fmtSecs(s.Secs), fmtRatio(s.Ratio), cmp, target, fmtMet(met)))
		}
	}
	if len(lines) == 0 {
		return
	}
	b.WriteString("\n## Point-in-time restore and branches\n\n")
	fmt.Fprintf(b, "%s. The history: one node with --quorum -1, a snapshot every tenth of it, periodic compaction every 5 s (bench/README.md). Times in seconds, medians over runs; ratio = restore / budget.\n\n", desc)
	b.WriteString("| row | target | s | ratio | what | target | status |\n|---|---|--:|--:|---|---|---|\n")
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
}

func fmtSecs(v *float64) string {
	if v == nil {
		return "–"
	}
	return fmt.Sprintf("%.2f", *v)
}
