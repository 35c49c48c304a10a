package main

import (
	"strings"
	"testing"
)

func TestAggregateMinIORatioPerRun(t *testing.T) {
	puts, entries := 100.0, 100.0
	ms := []measurement{
		{Value: 300, Puts: &puts, Entries: &entries, MinIOSeqPut: &seqPut{PUTs: 50, PerSec: 600, P50: 0.0015}},
		{Value: 400, Puts: &puts, Entries: &entries, MinIOSeqPut: &seqPut{PUTs: 50, PerSec: 500, P50: 0.0020}},
		{Value: 350, Puts: &puts, Entries: &entries, MinIOSeqPut: &seqPut{PUTs: 50, PerSec: 400, P50: 0.0025}},
	}
	s := aggregate(ms)
	// Per run: 0.5, 0.8, 0.875; the median is 0.8, not median(value) /
	// median(rate) = 350/500.
	if s.MinIOSeqPutRatio == nil || *s.MinIOSeqPutRatio != 0.8 {
		t.Fatalf("ratio %v, want 0.8", s.MinIOSeqPutRatio)
	}
	if *s.MinIOSeqPutRate != 500 || *s.MinIOSeqPutP50 != 0.002 {
		t.Fatalf("rate %v p50 %v, want 500 and 0.002", *s.MinIOSeqPutRate, *s.MinIOSeqPutP50)
	}
	if s := aggregate([]measurement{{Value: 300}}); s.MinIOSeqPutRatio != nil || s.MinIOSeqPutRate != nil {
		t.Fatal("a row without a baseline got a MinIO ratio")
	}
}

func TestSyncTableShowsRatioAndEntriesPerPut(t *testing.T) {
	minio, _ := lookupVariant("netsy-minio")
	file, _ := lookupVariant("netsy")
	etcd, _ := lookupVariant("etcd")
	c := &config{Targets: []variant{minio, file, etcd}, Labels: []string{"netsy-minio", "netsy", "etcd"}}
	for _, name := range []string{"put-seq", "put-64"} {
		w, err := selectWorkloads(name)
		if err != nil {
			t.Fatal(err)
		}
		c.Workloads = append(c.Workloads, w...)
	}
	one, fifty, thousand := 1000.0, 50.0, 5000.0
	res := map[string][][]measurement{
		"put-seq": {
			{{Value: 450, Puts: &one, Entries: &one, MinIOSeqPut: &seqPut{PUTs: 250, BodyBytes: 16384, PerSec: 500, P50: 0.0018}}},
			{{Value: 900, Puts: &one, Entries: &one}},
			{{Value: 1800}},
		},
		"put-64": {
			{{Value: 12000, Puts: &fifty, Entries: &thousand}},
			{{Value: 14000, Puts: &fifty, Entries: &thousand}},
			{{Value: 15000}},
		},
	}
	rep := &report{Targets: c.Labels, Variants: c.Targets, Rows: buildRows(c, res)}
	var b strings.Builder
	rep.syncTable(&b)
	got := b.String()
	for _, want := range []string{
		"| put-seq | netsy-minio | 450.0 |  |  | 1.0 | 500.0 (p50 1.800) | 0.90× |",
		"| put-seq | netsy | 900.0 |  |  | 1.0 |  |  |",
		"| put-64 | netsy-minio | 12000 |  |  | 100.0 |  |  |",
		"250 PUTs (If-None-Match: *, 16384-byte bodies",
		"~1.0× is its ceiling",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("sync table lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "etcd") || strings.Contains(got, ">=") {
		t.Errorf("sync table lists etcd or an absolute target:\n%s", got)
	}
}
