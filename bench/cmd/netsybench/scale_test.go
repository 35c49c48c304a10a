package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDiskUsageCountsAllocatedBlocksOncePerInode(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"a", "b", "b/c"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	const written = 256 << 10
	data := filepath.Join(dir, "a", "data")
	if err := os.WriteFile(data, make([]byte, written), 0o644); err != nil {
		t.Fatal(err)
	}
	// A hard link is the same blocks: du counts them once.
	if err := os.Link(data, filepath.Join(dir, "b", "c", "link")); err != nil {
		t.Fatal(err)
	}
	// A sparse file's holes take no blocks (a preallocated-by-truncate
	// segment, as opposed to one written).
	f, err := os.Create(filepath.Join(dir, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()

	total, parts, err := diskUsage(dir)
	if err != nil {
		t.Fatal(err)
	}
	if total < written || total > written+(256<<10) {
		t.Errorf("total %d bytes, want the %d written plus a few directory blocks", total, written)
	}
	if parts["a"] < written {
		t.Errorf("a: %d bytes, want at least %d", parts["a"], written)
	}
	if parts["b/c"] >= written {
		t.Errorf("b/c: %d bytes, the hard link counted twice", parts["b/c"])
	}
	if parts["sparse"] >= 1<<20 {
		t.Errorf("sparse: %d bytes, its holes counted", parts["sparse"])
	}
	var sum int64
	for _, n := range parts {
		sum += n
	}
	if sum > total || total-sum > 64<<10 {
		t.Errorf("parts add up to %d of %d bytes: want every entry but dir itself in one part", sum, total)
	}
	if _, _, err := diskUsage(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing data directory measured without an error")
	}
}

func TestDiskPartSplitsTheSecondLevelOfDirectoriesOnly(t *testing.T) {
	for rel, want := range map[string]string{
		"member":                  "member",
		"member/wal":              "member",
		"member/wal/0000.wal":     "member/wal",
		"member/snap/db":          "member/snap",
		"wal/00000001.seg":        "wal",
		"values/000001":           "values",
		"objects/chunks/a/b/c.wz": "objects/chunks",
		"LOCK":                    "LOCK",
	} {
		if got := diskPart(rel); got != want {
			t.Errorf("diskPart(%q) = %q, want %q", rel, got, want)
		}
	}
}

func scaleConfig(t *testing.T, scale float64, targets ...string) *config {
	t.Helper()
	c := &config{Scale: scale, ScaleKeys: 1_000_000}
	for _, n := range targets {
		v, err := lookupVariant(n)
		if err != nil {
			t.Fatal(err)
		}
		c.Targets, c.Labels = append(c.Targets, v), append(c.Labels, n)
	}
	ws, err := selectWorkloads("scale-1m")
	if err != nil {
		t.Fatal(err)
	}
	c.Workloads = ws
	return c
}

func TestScaleRowsFollowTheKeyCountAndTheTargets(t *testing.T) {
	names := func(c *config) []string {
		var out []string
		for _, s := range c.rowSpecs(&c.Workloads[0]) {
			out = append(out, s.Name)
		}
		return out
	}
	single := scaleConfig(t, 1, "netsy-local", "etcd")
	if got, want := names(single), []string{"scale-1m put", "scale-1m rss", "scale-1m disk", "scale-1m restart", "scale-1m restart cpu", "scale-1m rss after restart"}; !slices.Equal(got, want) {
		t.Errorf("single rows %q, want %q", got, want)
	}
	// -quick's scale, and a MinIO target: its bucket has a row of its own.
	if got := names(scaleConfig(t, 0.05, "netsy-minio", "etcd")); !slices.Contains(got, "scale-50k bucket") || slices.Contains(got, "scale-50k rss leader") {
		t.Errorf("netsy-minio at -quick: rows %q, want scale-50k with a bucket row and no leader rows", got)
	}
	cluster := scaleConfig(t, 5, "netsy-cluster", "etcd-cluster")
	if got, want := names(cluster), []string{"scale-5m put", "scale-5m rss", "scale-5m rss leader", "scale-5m disk", "scale-5m disk leader",
		"scale-5m bucket", "scale-5m restart", "scale-5m restart cpu", "scale-5m rss after restart"}; !slices.Equal(got, want) {
		t.Errorf("cluster rows %q, want %q", got, want)
	}
	if got := (&config{Scale: 0.0001, ScaleKeys: 1_000_000}).scaleKeys(); got != 1000 {
		t.Errorf("tiny scale: %d keys, want the floor 1000", got)
	}
	// The targets: put ≥ 1.5×, the others ≤ 1×; the leader's,
	// the bucket's and the restart's CPU rows are shown without one.
	for _, s := range cluster.rowSpecs(&cluster.Workloads[0]) {
		_, what, _ := strings.Cut(s.Name, " ")
		var want string
		switch what {
		case scalePut:
			want = "ops >= 1.5×"
		case scaleRSS, scaleDisk, scaleRestart, scaleRSSAfter:
			want = "value <= 1×"
		}
		got := ""
		if s.Goal != nil {
			got = s.Goal.String()
		}
		if got != want {
			t.Errorf("%s: target %q, want %q", s.Name, got, want)
		}
	}
}

func TestScaleRunsInFullRunsButNotInQuickDefaults(t *testing.T) {
	has := func(ws []workload) bool {
		return slices.ContainsFunc(ws, func(w workload) bool { return w.Name == "scale-1m" })
	}
	all, err := selectWorkloads("all")
	if err != nil {
		t.Fatal(err)
	}
	cl, err := selectWorkloads(clusterWorkloads)
	if err != nil {
		t.Fatal(err)
	}
	if !has(all) || !has(cl) {
		t.Fatalf("scale-1m in make bench's selection: %v, in make bench-cluster's: %v; want both", has(all), has(cl))
	}
	if has(withoutScale(all)) || has(withoutScale(cl)) {
		t.Error("-quick's default selection still runs scale-1m")
	}
	if len(withoutScale(all)) != len(all)-1 || !has(all) {
		t.Error("withoutScale dropped more than the scale workload, or changed its argument")
	}
	if scaleLoadTimeout(10*time.Minute, 1_000_000) < 30*time.Minute || scaleLoadTimeout(10*time.Minute, 1000) != 10*time.Minute {
		t.Error("the load's limit does not grow with the keys above -run-timeout")
	}
}

func TestScaleRowsInTheTables(t *testing.T) {
	c := scaleConfig(t, 1, "netsy-local", "etcd")
	cpu := 10.0
	res := map[string][][]measurement{
		"scale-1m put":     {{{Value: 21000, Ops: 1_000_000, CPUSecs: &cpu}}, {{Value: 14000}}},
		"scale-1m rss":     {{{Value: 500}}, {{Value: 520}}},
		"scale-1m disk":    {{{Value: 400}}, {{Value: 800}}},
		"scale-1m restart": {{{Value: 8}}, {{Value: 4}}},
	}
	rep := &report{Targets: c.Labels, Variants: c.Targets, Rows: buildRows(c, res)}
	md := rep.markdown()
	for _, want := range []string{
		"| scale-1m put | ops/s | 21000 | 14000 | 1.50× |",
		"| 0.010 | – | – | ops >= 1.5× | met |",
		"| scale-1m disk | data MiB | 400.0 | 800.0 | 0.50× |",
		"| scale-1m restart | s to serve | 8.000 | 4.000 | 2.00× |",
		"| value <= 1× | **not met** |",
		"| scale-1m rss after restart | RSS MiB | – | – | – |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	csv := rep.csv()
	if !strings.Contains(csv, "scale-1m disk,scale,data MiB,netsy-local,etcd,400,0.5,") {
		t.Errorf("csv lacks the disk row:\n%s", csv)
	}
}
