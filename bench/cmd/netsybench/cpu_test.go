package main

import (
	"encoding/csv"
	"errors"
	"math"
	"os"
	"strings"
	"testing"
)

// statFixture is a /proc/PID/stat line as Linux 6.x writes it, for a
// process whose name holds a space and a ')': utime 1234 and stime 567
// ticks (fields 14 and 15), cutime and cstime (16, 17) 9000 and 8000,
// which belong to reaped children and must not count.
const statFixture = "4242 (net sy) x) S 1 4242 4242 0 -1 4194560 51234 0 12 0 1234 567 9000 8000 20 0 9 0 123456 1572864000 30000 18446744073709551615 1 1 0 0 0 0 0 0 2143420159 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n"

func TestProcStatCPUSumsUserAndSystemTicks(t *testing.T) {
	got, err := procStatCPU([]byte(statFixture))
	if err != nil {
		t.Fatal(err)
	}
	if want := (1234.0 + 567.0) / 100; math.Abs(got-want) > 1e-9 {
		t.Fatalf("procStatCPU = %v s, want %v s (utime + stime at USER_HZ 100)", got, want)
	}
}

func TestProcStatCPURejectsTruncatedOrGarbledStat(t *testing.T) {
	for name, in := range map[string]string{
		"no name":     "4242 S 1 2 3",
		"truncated":   "4242 (netsy) S 1 4242 4242 0 -1 4194560 51234 0 12 0 1234",
		"utime words": strings.Replace(statFixture, " 1234 567 ", " x 567 ", 1),
		"stime words": strings.Replace(statFixture, " 1234 567 ", " 1234 -5 ", 1),
	} {
		if v, err := procStatCPU([]byte(in)); err == nil {
			t.Errorf("%s: got %v, want an error", name, v)
		}
	}
}

func TestProcCPUReadsThisProcess(t *testing.T) {
	before, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// The reading must move with the process's own CPU use: spin until
	// the kernel has charged two more ticks.
	spin(t, before+0.02)
}

// spin burns CPU until this process's CPU time reaches secs, and fails
// the test if it never does.
func spin(t *testing.T, secs float64) {
	t.Helper()
	x := 0
	for i := 0; i < 1<<34; i++ {
		x += i % 7
		if i%(1<<20) != 0 {
			continue
		}
		now, err := procCPU(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if now >= secs-1e-9 {
			return
		}
	}
	t.Fatalf("CPU time never reached %v s while spinning (%d)", secs, x)
}

func TestCPUMeterSumsNodesAndRefusesAReplacedProcess(t *testing.T) {
	self := &server{Name: "n1", Variant: variant{Name: "x"}, proc: &proc{pid: os.Getpid(), done: make(chan struct{})}}
	d := &deployment{nodes: []*server{self, self}}
	m := startCPU(d, nil, true)
	if m.err != nil {
		t.Fatal(m.err)
	}
	base, _ := procCPU(os.Getpid())
	spin(t, base+0.02)
	cpu, minio, err := m.stop(d)
	if err != nil {
		t.Fatal(err)
	}
	// The same process listed twice counts twice: ≥ 2 × 20 ms.
	if cpu == nil || *cpu < 0.04-1e-9 {
		t.Fatalf("servers' CPU = %v, want ≥ 0.04 s", fmtPtr(cpu))
	}
	if minio != nil {
		t.Fatalf("MinIO CPU = %v without a MinIO", *minio)
	}
	// A node restarted in between is another process: its CPU since the
	// start is unknown.
	n2 := &server{Name: "n2", Variant: variant{Name: "x"}, proc: &proc{pid: os.Getpid(), done: make(chan struct{})}}
	d.nodes = []*server{self, n2}
	if m = startCPU(d, nil, false); m.err != nil {
		t.Fatal(m.err)
	}
	n2.proc = &proc{pid: os.Getppid(), done: make(chan struct{})}
	if cpu, _, err := m.stop(d); err == nil {
		t.Fatalf("stop after a restart = %v, want an error", *cpu)
	}
}

func TestCPUPer1kDividesByOperations(t *testing.T) {
	secs := 1.76
	if v := cpuPer1k(&secs, 40000); v == nil || math.Abs(*v-0.044) > 1e-12 {
		t.Fatalf("1.76 s over 40000 ops = %v s per 1000, want 0.044", v)
	}
	if cpuPer1k(nil, 40000) != nil || cpuPer1k(&secs, 0) != nil {
		t.Fatal("a missing time or no operations gave a number")
	}
	s := &summary{Total: 2.5, RPS: 16000.4}
	if got := s.ops(); got != 40001 {
		t.Fatalf("summary ops = %v, want 40001 (rate × duration, rounded)", got)
	}
}

func TestCPURatioIsMedianPerRunOverBaseline(t *testing.T) {
	nc, _ := lookupVariant("netsy-cluster")
	t4, _ := lookupVariant("t4-cluster")
	ec, _ := lookupVariant("etcd-cluster")
	c := &config{Targets: []variant{nc, t4, ec}, Labels: []string{"netsy-cluster", "t4-cluster", "etcd-cluster"}}
	w, err := selectWorkloads("put-64")
	if err != nil {
		t.Fatal(err)
	}
	c.Workloads = w
	f := func(v float64) *float64 { return &v }
	res := map[string][][]measurement{"put-64": {
		// Per run 0.020, 0.030, 0.100 s per 1000: the median is 0.030.
		{{Value: 9000, Ops: 1000, CPUSecs: f(0.02), MinIOCPUSecs: f(0.005)},
			{Value: 9500, Ops: 2000, CPUSecs: f(0.06), MinIOCPUSecs: f(0.02)},
			{Value: 9100, Ops: 1000, CPUSecs: f(0.1), MinIOCPUSecs: f(0.004)}},
		{{Value: 6000, Ops: 1000, CPUSecs: f(0.09)}},
		{{Value: 6000, Ops: 4000, CPUSecs: f(0.24)}},
	}}
	rows := buildRows(c, res)
	r := rows[0]
	if got := r.Sides[0].CPUPer1k; got == nil || math.Abs(*got-0.03) > 1e-12 {
		t.Fatalf("netsy-cluster CPU per 1k = %v, want 0.030", got)
	}
	if got := r.Sides[0].MinIOCPUPer1k; got == nil || math.Abs(*got-0.005) > 1e-12 {
		t.Fatalf("netsy-cluster MinIO CPU per 1k = %v, want 0.005", got)
	}
	if got := r.Versus[0].CPURatio; got == nil || math.Abs(*got-0.5) > 1e-12 {
		t.Fatalf("netsy-cluster / etcd-cluster CPU = %v, want 0.50", got)
	}
	if got := r.Versus[1].CPURatio; got == nil || math.Abs(*got-1.5) > 1e-12 {
		t.Fatalf("t4-cluster / etcd-cluster CPU = %v, want 1.50", got)
	}

	rep := &report{Targets: c.Labels, Variants: c.Targets, Rows: rows}
	md := rep.markdown()
	for _, want := range []string{
		"| CPU netsy-cluster | CPU etcd-cluster | CPU ratio |",
		"| 0.030 +0.005 MinIO | 0.060 | 0.50× |",
		"| 0.090 | 0.060 | 1.50× |",
		"CPU = the servers' user + system CPU seconds",
		// The all-targets table: netsy-cluster against t4-cluster too.
		"| workload | metric | netsy-cluster | t4-cluster | etcd-cluster | netsy-cluster / t4-cluster | netsy-cluster / etcd-cluster | CPU netsy-cluster | CPU t4-cluster | CPU etcd-cluster | CPU netsy-cluster / t4-cluster | CPU netsy-cluster / etcd-cluster |",
		"| put-64 | ops/s | 9100 | 6000 | 6000 | 1.52× | 1.52× | 0.030 +0.005 MinIO | 0.090 | 0.060 | 0.33× | 0.50× |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}

	recs, err := csv.NewReader(strings.NewReader(rep.csv())).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 4 {
		t.Fatalf("csv has %d records, want a header and 3 targets:\n%v", len(recs), recs)
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	for _, want := range []struct{ target, cpu, ratio, minio string }{
		{"netsy-cluster", "0.03", "0.5", "0.005"},
		{"t4-cluster", "0.09", "1.5", ""},
		{"etcd-cluster", "0.06", "", ""},
	} {
		var rec []string
		for _, r := range recs[1:] {
			if r[col["target"]] == want.target {
				rec = r
			}
		}
		if rec == nil {
			t.Fatalf("csv has no line for %s", want.target)
		}
		if rec[col["cpu_secs_per_1k_ops"]] != want.cpu || rec[col["cpu_ratio"]] != want.ratio ||
			rec[col["minio_cpu_secs_per_1k_ops"]] != want.minio || rec[col["baseline"]] != "etcd-cluster" {
			t.Errorf("csv line for %s = %v, want cpu %s ratio %q minio %q", want.target, rec, want.cpu, want.ratio, want.minio)
		}
	}
}

func TestT4StatusFromMetrics(t *testing.T) {
	// Part of a t4 v1.1.17 leader's /metrics.
	const scrape = `# HELP t4_follower_lag_revisions Revisions the follower is behind.
# TYPE t4_follower_lag_revisions gauge
t4_follower_lag_revisions{follower_id="n2"} 0
t4_follower_lag_revisions{follower_id="n3"} 12
# TYPE t4_role gauge
t4_role{role="follower"} 0
t4_role{role="leader"} 1
t4_role{role="single"} 0
go_goroutines 57
netsy_objwal_puts_total 1.5e+06 1700000000000
`
	ms, err := parseMetrics(strings.NewReader(scrape))
	if err != nil {
		t.Fatal(err)
	}
	if ms["go_goroutines"] != 57 || ms["netsy_objwal_puts_total"] != 1.5e6 {
		t.Fatalf("parseMetrics = %v", ms)
	}
	st := t4StatusOf(ms)
	if !st.leader || st.follower {
		t.Fatalf("leader %v follower %v, want a leader", st.leader, st.follower)
	}
	if len(st.lag) != 2 || st.lag["n2"] != 0 || st.lag["n3"] != 12 {
		t.Fatalf("lag = %v, want n2: 0, n3: 12", st.lag)
	}
	f := t4StatusOf(map[string]float64{`t4_role{role="follower"}`: 1, `t4_role{role="leader"}`: 0})
	if f.leader || !f.follower || len(f.lag) != 0 {
		t.Fatalf("follower status = %+v", f)
	}
}

func TestT4SkipsHandoffAndBinaryKeyWatchOnly(t *testing.T) {
	skipped := map[string]bool{"failover-handoff": true, "watch-latency": true}
	for _, w := range workloads {
		if w.PITR {
			continue // netsy alone (TestPITRIsNotInAllAndDefaultsToNetsyMinIO)
		}
		err := w.runsOn(kindT4)
		if got := err != nil; got != skipped[w.Name] {
			t.Errorf("%s skipped on t4: %v (%v), want %v", w.Name, got, err, skipped[w.Name])
		}
		if err != nil && (!errors.Is(err, errNoEquivalent) || !strings.Contains(err.Error(), "t4")) {
			t.Errorf("%s on t4: %v does not say why it is skipped", w.Name, err)
		}
		if w.runsOn(kindNetsy) != nil || w.runsOn(kindEtcd) != nil {
			t.Errorf("%s does not run on netsy or etcd", w.Name)
		}
	}
}

func TestT4NodeArgs(t *testing.T) {
	v, err := lookupVariant("t4-cluster")
	if err != nil {
		t.Fatal(err)
	}
	s, err := newServer(v, binaries{T4: "/bin/t4"}, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Name, s.Pprof = "n2", true
	m := &minioServer{addr: "127.0.0.1:9000"}
	s.extra = m.t4Args("bench-x", "put-64-t4-cluster-r1")
	got := " " + strings.Join(s.args(), " ") + " "
	for _, want := range []string{
		" run ", " --listen " + s.ClientAddr + " ", " --metrics-addr " + s.HTTPAddr + " ",
		" --peer-listen " + s.PeerAddr + " ", " --node-id n2 ", " --pprof ",
		" --follower-wait-mode quorum ", " --s3-bucket bench-x --s3-prefix put-64-t4-cluster-r1 ",
		" --s3-endpoint http://127.0.0.1:9000 ",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("t4 args lack %q: %s", want, got)
		}
	}
	if !strings.HasPrefix(got, " run ") {
		t.Errorf("t4 args do not start with the run command: %s", got)
	}
	if s.PprofBase() != "http://"+s.HTTPAddr+"/debug/pprof" {
		t.Errorf("t4 pprof at %s, want its metrics address", s.PprofBase())
	}
}

func fmtPtr(v *float64) string {
	if v == nil {
		return "nil"
	}
	return fmtNum(*v)
}
