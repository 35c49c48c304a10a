package main

import (
	"errors"
	"testing"
	"time"
)

func TestLongestGap(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	fail := errors.New("refused")
	// Node 0 and node 1 answer out of order, as concurrent puts do.
	as := []attempt{
		{node: 0, done: at(-50)},           // before the window: ignored
		{node: 1, done: at(10)},            // 10 ms after the start
		{node: 0, done: at(20), err: fail}, // failures acknowledge nothing
		{node: 0, done: at(150)},           // 140 ms after the last success
		{node: 1, done: at(160)},
		{node: 0, done: at(155)},
		{node: 1, done: at(400), err: fail},
		{node: 0, done: at(900)}, // after the window: ignored
		{node: 1, done: at(170)},
		{node: 0, done: at(30), err: fail},
	}
	if got, want := longestGap(as, t0, at(200)), 140*time.Millisecond; got != want {
		t.Errorf("longestGap = %v, want %v", got, want)
	}
	// The end of the window counts: nothing acknowledged after 170 ms.
	if got, want := longestGap(as, t0, at(500)), 330*time.Millisecond; got != want {
		t.Errorf("longestGap to 500 ms = %v, want %v", got, want)
	}
	// No success at all: the whole window.
	if got, want := longestGap(nil, t0, at(80)), 80*time.Millisecond; got != want {
		t.Errorf("longestGap of nothing = %v, want %v", got, want)
	}
	if got, want := longestGap(onNode(as, 1), t0, at(170)), 150*time.Millisecond; got != want {
		t.Errorf("longestGap of node 1 = %v, want %v", got, want)
	}

	first := firstSuccesses(as, at(100), 3)
	if !first[0].Equal(at(150)) || !first[1].Equal(at(160)) || !first[2].IsZero() {
		t.Errorf("firstSuccesses after 100 ms = %v, want [150 ms, 160 ms, none]", first)
	}
	if got := failuresSince([]attempt{{sent: at(-1), err: fail}, {sent: at(0), err: fail}, {sent: at(5)}}, t0); got != 1 {
		t.Errorf("failuresSince = %d, want 1 (a failure sent before the start does not count)", got)
	}
}

func TestFailoverRowAggregates(t *testing.T) {
	// Two runs of a failover workload on each side: the median and max
	// are over every repetition, not over the runs' medians.
	ms := func(v ...float64) measurement {
		m := measurement{}
		for _, x := range v {
			m.Samples = append(m.Samples, x/1000)
		}
		return m
	}
	netsy := aggregate([]measurement{ms(80, 90, 400), ms(70, 100, 110)})
	etcd := aggregate([]measurement{ms(1100, 1200, 1300), ms(1150, 1250, 1350)})
	if netsy.Samples != 6 || *netsy.Value != 0.095 || *netsy.Max != 0.4 {
		t.Fatalf("netsy side = %d samples, median %v, max %v; want 6, 0.095, 0.4", netsy.Samples, *netsy.Value, *netsy.Max)
	}
	if etcd.Samples != 6 || *etcd.Value != 1.225 || *etcd.Max != 1.35 {
		t.Fatalf("etcd side = %d samples, median %v, max %v; want 6, 1.225, 1.35", etcd.Samples, *etcd.Value, *etcd.Max)
	}

	c := &config{
		Targets:   []variant{{Name: "netsy-cluster", Nodes: 3}, {Name: "etcd-cluster", Nodes: 3}},
		Labels:    []string{"netsy-cluster", "etcd-cluster"},
		Workloads: []workload{{Name: "failover-kill", Group: "failover", Failover: failoverKill, Goal: &goal{Metric: "median+max", Op: "<=", Bound: 1}}},
	}
	check := func(name string, n, e []measurement, wantMet bool) {
		t.Helper()
		rows := buildRows(c, map[string][][]measurement{"failover-kill": {n, e}})
		vs := rows[0].Versus[0]
		if vs.Met == nil || *vs.Met != wantMet {
			t.Errorf("%s: met = %v, want %v (ratio %v, max ratio %v)", name, vs.Met, wantMet, *vs.Ratio, *vs.MaxRatio)
		}
	}
	check("faster", []measurement{ms(80, 90, 400)}, []measurement{ms(1100, 1200, 1300)}, true)
	// A median below etcd's does not hide a worst case above etcd's.
	check("slow tail", []measurement{ms(80, 90, 2000)}, []measurement{ms(1100, 1200, 1300)}, false)
	check("slow median", []measurement{ms(1500, 1600, 1700)}, []measurement{ms(1100, 1200, 1800)}, false)
}
