//go:build e2e

package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/netsy-io/netsy/internal/testutil/procutil"
)

// scrape returns the samples of /metrics on s by name, labels included as
// written ("m_bucket{le=\"0.001\"}").
func scrape(t *testing.T, s *procutil.Server) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, line := range strings.Split(string(metricsText(t, s)), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if i < 0 || err != nil {
			t.Fatalf("scrape: malformed line %q", line)
		}
		out[line[:i]] = v
	}
	return out
}

// metricsText is the body of s's /metrics.
func metricsText(t *testing.T, s *procutil.Server) []byte {
	t.Helper()
	resp, err := http.Get("http://" + s.HTTPAddr + "/metrics")
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: status %d, %v", resp.StatusCode, err)
	}
	return body
}

// TestMetrics checks that the figures an operator watches move with the
// writes: the revision, the local fsyncs and the chunk uploads.
func TestMetrics(t *testing.T) {
	t.Parallel() // waits more than it computes and times nothing: see parallel in main_test.go
	if target != procutil.KindNetsy {
		t.Skip("netsy's own metrics")
	}
	// Sync mode: every acknowledged write has been uploaded, so the upload
	// counters are exact when the writes return.
	s := procutil.StartNetsy(t, procutil.Options{Args: []string{"--quorum", "0"}})
	cli := newClient(t, s)
	const n = 50
	var rev int64
	for i := range n {
		rev = mustPut(t, cli, fmt.Sprintf("metrics/%d", i), "v")
	}
	m := scrape(t, s)
	want := func(name string, ok bool) {
		t.Helper()
		if !ok {
			t.Errorf("%s = %v (present: %v)", name, m[name], hasKey(m, name))
		}
	}
	want("netsy_committed_revision", m["netsy_committed_revision"] == float64(rev))
	syncs := m["netsy_wal_fsync_duration_seconds_count"]
	want("netsy_wal_fsync_duration_seconds_count", syncs >= 1)
	want(`netsy_wal_fsync_duration_seconds_bucket{le="+Inf"}`, m[`netsy_wal_fsync_duration_seconds_bucket{le="+Inf"}`] == syncs)
	want(`netsy_wal_fsync_duration_seconds_bucket{le="0.001"}`, hasKey(m, `netsy_wal_fsync_duration_seconds_bucket{le="0.001"}`))
	// Every put is one entry; start-up writes a few of its own.
	want("netsy_wal_fsync_entries_total", m["netsy_wal_fsync_entries_total"] >= n)
	// The default single node uploads every write before acknowledging it.
	want("netsy_objwal_puts_total", m["netsy_objwal_puts_total"] >= 1)
	want("netsy_objwal_entries_uploaded_total", m["netsy_objwal_entries_uploaded_total"] >= n)
}

func hasKey(m map[string]float64, k string) bool {
	_, ok := m[k]
	return ok
}
