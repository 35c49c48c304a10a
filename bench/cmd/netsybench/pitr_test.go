package main

import (
	"math"
	"strings"
	"testing"
)

func TestRevLabelNamesMillionsAndThousands(t *testing.T) {
	for n, want := range map[int]string{1_000_000: "1m", 2_000_000: "2m", 50_000: "50k", 1_500_000: "1500k", 1500: "1500", 999: "999"} {
		if got := revLabel(n); got != want {
			t.Errorf("revLabel(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestPITRRevisionsFollowScaleWithAFloor(t *testing.T) {
	c := &config{PITRRevisions: 1_000_000, Scale: 0.05}
	if got := c.pitrRevisions(); got != 50_000 {
		t.Errorf("-quick: %d revisions, want 50000", got)
	}
	if got := (&config{PITRRevisions: 1_000_000, Scale: 0.0001}).pitrRevisions(); got != 1000 {
		t.Errorf("tiny scale: %d revisions, want the floor 1000", got)
	}
	if got := pitrRows(1_000_000)[0]; got != "restore-1m" {
		t.Errorf("restore row %q, want restore-1m", got)
	}
}

func TestMidRevisionIsInsideTheWindow(t *testing.T) {
	for _, tc := range []struct{ oldest, newest, want int64 }{
		{1, 1_000_001, 500_001}, {0, 100, 50}, {400, 600, 500}, {7, 7, 7},
	} {
		if got := midRevision(tc.oldest, tc.newest); got != tc.want {
			t.Errorf("midRevision(%d, %d) = %d, want %d", tc.oldest, tc.newest, got, tc.want)
		}
	}
}

func TestRestoreBudgetIsFreshStartPlusReplayAtTheMeasuredRate(t *testing.T) {
	// 12 s with 400k entries replayed, 4 s with none: 50k entries/s; a
	// fresh start of 6 s gives a budget of 6 + 8 = 14 s.
	rate, budget, ratio, ok := restoreBudget(12, 4, 6, 400_000)
	if !ok || rate != 50_000 || budget != 14 || math.Abs(ratio-12.0/14) > 1e-12 {
		t.Fatalf("got rate %v budget %v ratio %v ok %v, want 50000, 14, 0.857, true", rate, budget, ratio, ok)
	}
	// The restore's fixed part (4 s) above the fresh start (3 s) is what
	// puts it over budget.
	if _, _, ratio, _ := restoreBudget(12, 4, 3, 400_000); ratio <= 1 {
		t.Errorf("ratio %v, want above 1 when the restore's fixed part exceeds the fresh start", ratio)
	}
	for _, tc := range []struct {
		restore, base float64
		replayed      int64
	}{{12, 4, 0}, {4, 4, 10}, {3, 4, 10}, {0, 0, 10}} {
		if _, _, _, ok := restoreBudget(tc.restore, tc.base, 5, tc.replayed); ok {
			t.Errorf("restoreBudget(%v, %v, 5, %d) gave a rate", tc.restore, tc.base, tc.replayed)
		}
	}
}

func TestParseRestoreJSONReadsNetsyctlOutput(t *testing.T) {
	out := []byte(`{"data_dir":"/d","storage":"s3://b","revision":500001,"compact_revision":400000,"index":500001,"keys":100000,
"key_versions":200000,"leases":0,"from":"s3://a","base_snapshot_revision":500000,"entries_replayed":1,"window":{"oldest":1,"newest":1000001}}` + "\n")
	r, err := parseRestoreJSON(out)
	if err != nil {
		t.Fatal(err)
	}
	if r.Revision != 500001 || r.BaseRevision != 500000 || r.Replayed != 1 || r.Keys != 100000 || r.Window.Oldest != 1 || r.Window.Newest != 1000001 {
		t.Fatalf("parsed %+v", r)
	}
	if _, err := parseRestoreJSON([]byte("restored s3://a at revision 5 into /d\n")); err == nil {
		t.Error("table output parsed as JSON")
	}
	if _, err := parseRestoreJSON([]byte(`{"keys":3}`)); err == nil {
		t.Error("JSON without a revision accepted")
	}
}

func TestPITRIsNotInAllAndDefaultsToNetsyMinIO(t *testing.T) {
	all, err := selectWorkloads("all")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range all {
		if w.PITR {
			t.Fatal("pitr is in all: make bench's first run would load a 1 M-revision history on every target")
		}
	}
	if !pitrOnly("pitr") || pitrOnly("pitr,put-seq") || pitrOnly("all") || pitrOnly("nope") {
		t.Error("pitrOnly: want true for pitr alone only")
	}
	w, _ := selectWorkloads("pitr")
	for _, k := range []kind{kindEtcd, kindT4} {
		if w[0].runsOn(k) == nil {
			t.Errorf("pitr runs on %s", k)
		}
	}
	if w[0].runsOn(kindNetsy) != nil || w[0].tool() {
		t.Error("pitr should run on netsy, and not through the benchmark tool")
	}
}

func TestPITRTableShowsBudgetRatioAndVerdicts(t *testing.T) {
	minio, _ := lookupVariant("netsy-minio")
	etcd, _ := lookupVariant("etcd")
	ws, _ := selectWorkloads("pitr")
	c := &config{Targets: []variant{minio, etcd}, Labels: []string{"netsy-minio", "etcd"}, Workloads: ws,
		PITRRevisions: 1_000_000, Scale: 1, notes: new([]string)}
	d := pitrDetail{Revisions: 1_000_001, Revision: 500_001, WindowOldest: 1, WindowNewest: 1_000_001,
		BaseRevision: 500_000, Replayed: 1, BaseSecs: 4, ReplayPerSec: 50_000, FreshSecs: 6, BudgetSecs: 14, Ratio: 12.0 / 14}
	results := map[string][][]measurement{
		"restore-1m":    {{{Value: 12, Extra: d}}, nil},
		"branch-create": {{{Value: 6.5, Extra: pitrDetail{Revision: 500_001, Revisions: 1_000_001, FirstReadSecs: 3}}}, nil},
	}
	rep := &report{Targets: c.Labels, Variants: c.Targets, Rows: buildRows(c, results)}
	md := rep.markdown()
	for _, want := range []string{
		"## Point-in-time restore and branches",
		"| restore-1m | netsy-minio | 12.00 | 0.86× |",
		"budget 14.00 s = fresh node's start to first read 6.00 s + 1 entries at 50000 entries/s",
		"| ≤ fresh start + replay (ratio ≤ 1×) | met |",
		"| branch-create | netsy-minio | 6.50 |",
		"first node served a read 3.00 s after launch (0 keys) | ≤ 5 s | **not met** |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "## netsy-minio vs etcd") {
		t.Errorf("the pitr rows also went into the per-target table:\n%s", md)
	}
}
