package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/netsy-io/netsy/internal/backup"
	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/config"
	"github.com/netsy-io/netsy/internal/node"
	objopen "github.com/netsy-io/netsy/internal/objstore/open"
	"github.com/netsy-io/netsy/internal/objwal"
)

// writtenBucket runs a node, writes a few revisions and stops it; it
// returns the node's bucket URL and the revision after the first puts.
func writtenBucket(t *testing.T) (url string, mid int64) {
	t.Helper()
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	cfg.ClientAddr, cfg.HTTPAddr, cfg.PeerAddr = freeAddr(t), freeAddr(t), freeAddr(t)
	cfg.NodeID = "n1"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := node.StartWith(ctx, cfg, hclog.NewNullLogger(), node.Deps{Clock: clock.Real(), WaitReady: true})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{n.ClientAddr()}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for i, kv := range [][2]string{{"a", "1"}, {"b", "2"}, {"a", "3"}, {"c", "4"}} {
		r, err := cli.Put(ctx, kv[0], kv[1])
		if err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
		if i == 1 {
			mid = r.Header.Revision
		}
	}
	url, err = cfg.StorageURL()
	if err != nil {
		t.Fatal(err)
	}
	return url, mid
}

func TestRestoreJSONPrintsOneResultAndNoProgress(t *testing.T) {
	from, mid := writtenBucket(t)
	var progress bytes.Buffer
	defer func(o io.Writer, term func(io.Writer) bool) { progressOut, isTerminal = o, term }(progressOut, isTerminal)
	progressOut = &progress
	isTerminal = func(io.Writer) bool { return true } // -o json stays quiet even on a terminal
	dataDir, to := filepath.Join(t.TempDir(), "restored"), "file://"+t.TempDir()
	out, errOut, code := run(t, "restore", "--from", from, "--revision", strconv.FormatInt(mid, 10), "--to", to, "--data-dir", dataDir, "-o", "json")
	if code != 0 {
		t.Fatalf("restore: exit %d: %s", code, errOut)
	}
	dec := json.NewDecoder(strings.NewReader(out))
	var res backup.PointInTimeResult
	if err := dec.Decode(&res); err != nil {
		t.Fatalf("restore -o json: %v\n%s", err, out)
	}
	if dec.More() {
		t.Fatalf("restore -o json printed more than one object:\n%s", out)
	}
	if res.Revision != mid || res.Keys != 2 || res.DataDir != dataDir || res.Storage != to || res.From != from || res.Window.Oldest > mid || res.Window.Newest != mid+2 {
		t.Fatalf("restore -o json = %+v", res)
	}
	if progress.Len() > 0 || errOut != "" {
		t.Fatalf("restore -o json drew progress %q / wrote %q", progress.String(), errOut)
	}

	// Outside the window: refused, with the window.
	_, errOut, code = run(t, "restore", "--from", from, "--revision", "99", "--to", "file://"+t.TempDir(), "--data-dir", filepath.Join(t.TempDir(), "d"))
	if code == 0 || !strings.Contains(errOut, "can restore revisions") || !strings.Contains(errOut, "..5") {
		t.Fatalf("restore outside the window: exit %d: %s", code, errOut)
	}
}

func TestRestoreShowsProgressOnlyOnATerminal(t *testing.T) {
	from, _ := writtenBucket(t)
	var progress bytes.Buffer
	defer func(o io.Writer, term func(io.Writer) bool) { progressOut, isTerminal = o, term }(progressOut, isTerminal)
	progressOut = &progress
	for _, term := range []bool{false, true} {
		progress.Reset()
		isTerminal = func(io.Writer) bool { return term }
		out, errOut, code := run(t, "restore", "--from", from, "--revision", "4", "--to", "file://"+t.TempDir(), "--data-dir", filepath.Join(t.TempDir(), "d"))
		if code != 0 || !strings.Contains(out, "restored "+from+" at revision 4") {
			t.Fatalf("restore: exit %d: %s%s", code, out, errOut)
		}
		if drawn := strings.Contains(progress.String(), "replayed "); drawn != term {
			t.Fatalf("terminal %v: progress %q", term, progress.String())
		}
	}
}

func TestProgressLineShowsRateAndTimeLeft(t *testing.T) {
	p := backup.Progress{Entries: 3000, From: 1000, Revision: 2000, To: 5000, Elapsed: 2 * time.Second}
	if got, want := progressLine(p), "replayed 3000 entries, revision 2000 of 5000 (25%), 1500 entries/s, 6s left"; got != want {
		t.Fatalf("progressLine = %q, want %q", got, want)
	}
	p.Revision, p.Done = 5000, true
	if got := progressLine(p); !strings.Contains(got, "(100%)") || !strings.Contains(got, "done in 2s") {
		t.Fatalf("progressLine(done) = %q", got)
	}
}

// timedBucket runs a node and puts a few keys, a few milliseconds apart
// (commit times are stamped to the millisecond), recording each put's
// revision and the wall time after it was acknowledged and before the
// next one was sent; it stops the node and returns its bucket URL.
func timedBucket(t *testing.T) (url string, revs []int64, after []time.Time) {
	t.Helper()
	clk := clock.Real()
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	cfg.ClientAddr, cfg.HTTPAddr, cfg.PeerAddr = freeAddr(t), freeAddr(t), freeAddr(t)
	cfg.NodeID = "n1"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := node.StartWith(ctx, cfg, hclog.NewNullLogger(), node.Deps{Clock: clk, WaitReady: true})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{n.ClientAddr()}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for i := range 4 {
		r, err := cli.Put(ctx, "k", strconv.Itoa(i))
		if err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
		revs = append(revs, r.Header.Revision)
		after = append(after, clk.Wall())
		if err := clk.Sleep(ctx, 3*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	if url, err = cfg.StorageURL(); err != nil {
		t.Fatal(err)
	}
	return url, revs, after
}

// restore --time T restores the last revision committed at or before T,
// taking T as RFC 3339 or as date --rfc-3339 prints it; a T before the
// history is refused with the window's times, as is a T in the future,
// and --time with --revision.
func TestRestoreByTimePicksTheLastRevisionCommittedByThen(t *testing.T) {
	from, revs, after := timedBucket(t)
	for i, at := range []string{
		after[1].UTC().Format(time.RFC3339Nano),
		after[2].Format("2006-01-02 15:04:05.000000000-07:00"), // date --rfc-3339=ns
	} {
		want := revs[i+1]
		dataDir := filepath.Join(t.TempDir(), "restored")
		out, errOut, code := run(t, "restore", "--from", from, "--time", at, "--to", "file://"+t.TempDir(), "--data-dir", dataDir, "-o", "json")
		if code != 0 {
			t.Fatalf("restore --time %s: exit %d: %s", at, code, errOut)
		}
		var res struct {
			Revision     int64     `json:"revision"`
			Time         time.Time `json:"time"`
			RevisionTime time.Time `json:"revision_time"`
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("restore -o json: %v\n%s", err, out)
		}
		if res.Revision != want || res.RevisionTime.After(res.Time) || res.RevisionTime.IsZero() {
			t.Fatalf("restore --time %s = %+v; want revision %d (puts at %v, acknowledged by %v)", at, res, want, revs, after)
		}
	}
	out, errOut, code := run(t, "restore", "--from", from, "--time", after[3].UTC().Format(time.RFC3339Nano), "--to", "file://"+t.TempDir(), "--data-dir", filepath.Join(t.TempDir(), "d"))
	if code != 0 || !strings.Contains(out, "at revision "+strconv.FormatInt(revs[3], 10)) || !strings.Contains(out, "time: ") {
		t.Fatalf("restore --time (table): exit %d: %s%s", code, out, errOut)
	}

	store, err := objopen.Open(t.Context(), from, objopen.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	oldest, newest, err := objwal.Window(t.Context(), store)
	if err != nil || oldest.Revision != revs[0] || newest.Revision != revs[3] || oldest.Time.IsZero() {
		t.Fatalf("window %v..%v, %v; want revisions %d..%d with times", oldest, newest, err, revs[0], revs[3])
	}
	before := after[0].Add(-time.Hour).UTC().Truncate(time.Second)
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--time", before.Format(time.RFC3339)}, []string{"--time: time " + before.Format(time.RFC3339Nano) + " is outside the history", "from " + oldest.String() + " to " + newest.String()}},
		{[]string{"--time", after[0].Add(time.Hour).Format(time.RFC3339)}, []string{"is in the future"}},
		{[]string{"--time", after[1].Format(time.RFC3339), "--revision", "2"}, []string{"give one, not both"}},
		{[]string{"--time", "yesterday"}, []string{"--time: \"yesterday\" is not an RFC 3339 time"}},
	} {
		args := append([]string{"restore", "--from", from, "--to", "file://" + t.TempDir(), "--data-dir", filepath.Join(t.TempDir(), "d")}, c.args...)
		_, errOut, code := run(t, args...)
		for _, w := range c.want {
			if code == 0 || !strings.Contains(errOut, w) {
				t.Errorf("restore %v: exit %d, stderr %q; want it to contain %q", c.args, code, errOut, w)
			}
		}
	}
}
