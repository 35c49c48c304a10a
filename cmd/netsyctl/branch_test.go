package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/netsy-io/netsy/internal/backup"
	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/objwal"
)

// branch pins the parent and prints one JSON result; --time picks the
// last revision committed by then; list shows the pin and delete drops it.
func TestBranchCommandCreatesListsAndDeletes(t *testing.T) {
	from, mid := writtenBucket(t)
	to := "file://" + filepath.Join(t.TempDir(), "child")
	var out bytes.Buffer
	if code := Run(t.Context(), []string{"branch", "--from", from, "--to", to, "--revision", "99"}, &out, &out); code == 0 {
		t.Fatalf("a revision past the parent's newest was accepted: %s", out.String())
	}
	out.Reset()
	if code := Run(t.Context(), []string{"branch", "--from", from, "--to", to, "--revision", "1", "--time", "2026-01-01T00:00:00Z"}, &out, &out); code == 0 {
		t.Fatal("--revision and --time together were accepted")
	}
	out.Reset()
	if code := Run(t.Context(), []string{"branch", "--from", from, "--to", to, "--revision", itoa(mid), "-o", "json"}, &out, &out); code != 0 {
		t.Fatalf("branch: exit %d: %s", code, out.String())
	}
	var res backup.BranchResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("branch -o json printed %q: %v", out.String(), err)
	}
	if res.Revision != mid || res.ID != backup.BranchID(to) || res.Parent != from {
		t.Fatalf("result %+v", res)
	}
	out.Reset()
	if code := Run(t.Context(), []string{"branch", "list", "--from", from, "-o", "json"}, &out, &out); code != 0 {
		t.Fatalf("list: exit %d: %s", code, out.String())
	}
	var pins []objwal.Pin
	if err := json.Unmarshal(out.Bytes(), &pins); err != nil || len(pins) != 1 || pins[0].ID != res.ID || pins[0].Child != to {
		t.Fatalf("list printed %s (%v)", out.String(), err)
	}
	for i, want := range []string{"deleted the pin", "no pin"} {
		out.Reset()
		if code := Run(t.Context(), []string{"branch", "delete", "--from", from, "--branch", res.ID}, &out, &out); code != 0 || !strings.Contains(out.String(), want) {
			t.Fatalf("delete %d: exit %d: %s, want %q", i, code, out.String(), want)
		}
	}

	// By time: a second branch at the time after every write is the tip.
	to2 := "file://" + filepath.Join(t.TempDir(), "child2")
	out.Reset()
	at := clock.Real().Wall().Add(time.Minute).UTC().Format(time.RFC3339)
	if code := Run(t.Context(), []string{"branch", "--from", from, "--to", to2, "--time", at, "-o", "json"}, &out, &out); code != 0 {
		t.Fatalf("branch --time: exit %d: %s", code, out.String())
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil || res.Revision != res.Window.Newest {
		t.Fatalf("branch --time %s gave %+v (%v), want the newest revision", at, res, err)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
