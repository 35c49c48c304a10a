package wal

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/netsy-io/netsy/internal/vfs/crashfs"
	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

var (
	powerLossSeeds = flag.Int("wal.powerloss.seeds", 100, "how many seeds TestPowerLoss runs")
	powerLossSeed  = flag.Int64("wal.powerloss.seed", -1, "run TestPowerLoss for this one seed only")
)

// TestPowerLoss appends to a log on crashfs, pulls the power at a random
// moment and reopens the log on what a reboot finds, several times over
// on the same disk. Each time the log must open (only a torn tail may be
// cut off), replay densely with the bytes that were appended, and hold
// every entry ever reported durable (by OnSync, or by an earlier Open) or
// a local snapshot that covers it. Each seed is one history; a failure
// names it (-wal.powerloss.seed=N runs it alone). The cut lands between two
// file operations chosen in advance, or wherever the appender happens to
// be; the scheduler still varies the history from run to run.
func TestPowerLoss(t *testing.T) {
	if *powerLossSeed >= 0 {
		powerLoss(t, uint64(*powerLossSeed))
		return
	}
	for seed := range uint64(*powerLossSeeds) {
		if !t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { powerLoss(t, seed) }) {
			t.Fatalf("seed %d failed (rerun: go test ./internal/wal -run TestPowerLoss -wal.powerloss.seed=%d)", seed, seed)
		}
	}
}

// durableLog records the highest index OnSync reported.
type durableLog struct {
	mu  sync.Mutex
	max uint64
}

func (d *durableLog) onSync(index uint64, _ error) {
	d.mu.Lock()
	d.max = max(d.max, index)
	d.mu.Unlock()
}

func (d *durableLog) get() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.max
}

// powerLossModel is what the test knows must survive.
type powerLossModel struct {
	durable  uint64 // every index up to here was reported durable
	snapped  uint64 // a snapshot at this index was saved
	appended uint64 // the highest index ever appended
}

const powerLossRounds = 6

func powerLoss(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	fsys := crashfs.New()
	segSize := int64(512 + rng.IntN(4)*512)
	lazy := seed%2 == 1
	var m powerLossModel
	for round := range powerLossRounds {
		desc := fmt.Sprintf("seed %d round %d (segments %d B, lazy %v)", seed, round, segSize, lazy)
		var durable durableLog
		opts := Options{Dir: "/data/wal", FS: fsys, SegmentBytes: segSize, SyncOnRequest: lazy, OnSync: durable.onSync}
		if round > 0 {
			// The power is back: nothing is lost before the next cut.
			w, err := Open(opts)
			if err != nil {
				t.Fatalf("%s: reopen after power loss: %v", desc, err)
			}
			checkRecovered(t, desc, w, &m)
			if err := w.Close(); err != nil {
				t.Fatalf("%s: close the recovered log: %v", desc, err)
			}
		}
		powerLossRound(t, desc, rng, fsys, opts, &m, &durable)
		fsys = fsys.Crash(rng)
	}
	w, err := Open(Options{Dir: "/data/wal", FS: fsys, SegmentBytes: segSize})
	if err != nil {
		t.Fatalf("seed %d: reopen after the last power loss: %v", seed, err)
	}
	defer w.Close()
	checkRecovered(t, fmt.Sprintf("seed %d, last round", seed), w, &m)
	// The recovered log takes appends again.
	next := max(w.LastIndex(), m.snapped) + 1
	appendRange(t, w, next, next+4)
	waitSynced(t, w, next+4)
	checkReplay(t, w, max(w.FirstIndex(), m.snapped+1), next+4)
	if err := w.Close(); err != nil {
		t.Fatalf("seed %d: close the recovered log: %v", seed, err)
	}
}

// checkRecovered checks a log just opened after a power loss against m,
// and records what it holds as durable: Open fsyncs what it keeps.
func checkRecovered(t *testing.T, desc string, w *WAL, m *powerLossModel) {
	t.Helper()
	snap, err := w.LoadSnapshot()
	if err != nil {
		t.Fatalf("%s: load snapshot after power loss: %v", desc, err)
	}
	var snapIdx uint64
	if snap != nil {
		snapIdx = snap.Header.Index
		if want := testSnapshot(snapIdx); snap.Header.Revision != want.Header.Revision || len(snap.KVs) != len(want.KVs) || !proto.Equal(snap.KVs[1], want.KVs[1]) {
			t.Fatalf("%s: snapshot %d came back as %v", desc, snapIdx, snap)
		}
	}
	if snapIdx < m.snapped {
		t.Fatalf("%s: snapshot %d was saved, the newest after power loss is %d", desc, m.snapped, snapIdx)
	}
	first, last := w.FirstIndex(), w.LastIndex()
	var replayed uint64
	err = w.Replay(0, func(e *netsyv1.Entry) error {
		want := first + replayed
		if e.Index != want {
			return fmt.Errorf("replay: index %d where %d belongs", e.Index, want)
		}
		if !proto.Equal(e, entry(want)) {
			return fmt.Errorf("replay: entry %d is not the one appended: %v", want, e)
		}
		replayed++
		return nil
	})
	if err != nil {
		t.Fatalf("%s: %v", desc, err)
	}
	switch {
	case first == 0 && replayed != 0, first != 0 && replayed != last-first+1:
		t.Fatalf("%s: first %d last %d, but %d entries replayed", desc, first, last, replayed)
	case last > m.appended:
		t.Fatalf("%s: log ends at %d, only %d appended", desc, last, m.appended)
	case first > snapIdx+1:
		t.Fatalf("%s: log starts at %d after snapshot %d: entries in between are gone", desc, first, snapIdx)
	case m.durable > max(last, snapIdx):
		t.Fatalf("%s: %d was reported durable; after power loss the log ends at %d and the snapshot at %d", desc, m.durable, last, snapIdx)
	}
	// A snapshot saved past the durable end of the log (SaveSnapshot of
	// an index not yet synced, cut before its seal) can outlive the
	// entries it covers; the caller saves it again to restart the log
	// after it, as objwal does for an interrupted restore.
	if snapIdx > last {
		if err := w.SaveSnapshot(snap); err != nil {
			t.Fatalf("%s: save snapshot %d again: %v", desc, snapIdx, err)
		}
		if w.FirstIndex() != 0 || w.LastIndex() != 0 {
			t.Fatalf("%s: log holds %d..%d after snapshot %d", desc, w.FirstIndex(), w.LastIndex(), snapIdx)
		}
		last = 0
	}
	m.durable = max(m.durable, last, snapIdx)
	m.snapped = snapIdx
}

// powerLossRound opens the log, appends until the power goes, mixing in
// sync requests, waits and snapshots, and cuts the power.
func powerLossRound(t *testing.T, desc string, rng *rand.Rand, fsys *crashfs.FS, opts Options, m *powerLossModel, durable *durableLog) {
	cutAt := -1 // the appender cuts before this append
	if rng.IntN(3) > 0 {
		// A round makes some 50 to 500 disk-changing calls, so most cuts
		// land inside it.
		fsys.CutAfter(rng.IntN(300))
	} else {
		cutAt = rng.IntN(250)
	}
	// How often the appender waits for durability or lets the writer run:
	// small batches put more writes right before a cut.
	waitPct, yieldPct := rng.IntN(20), rng.IntN(50)
	cleanClose := rng.IntN(5) == 0

	w, err := Open(opts)
	if err != nil {
		if !errors.Is(err, crashfs.ErrPowerLost) {
			t.Fatalf("%s: open: %v", desc, err)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	next := max(w.LastIndex(), m.snapped) + 1
	for n := range 200 {
		if n == cutAt {
			fsys.Cut()
		}
		if err := w.Append(entry(next)); err != nil {
			break
		}
		appended := next
		m.appended = max(m.appended, appended)
		next++
		if rng.IntN(100) < yieldPct {
			runtime.Gosched()
		}
		if r := rng.IntN(100); r < waitPct {
			if err := w.WaitSynced(ctx, appended); err != nil {
				if ctx.Err() != nil {
					t.Fatalf("%s: wait synced %d: %v", desc, appended, err)
				}
				break
			}
		} else if r < waitPct+10 {
			w.SyncTo(appended - uint64(rng.IntN(3)))
		} else if r < waitPct+13 {
			// A snapshot at the newest entry seals the log and restarts
			// it; one at the newest durable entry keeps the active
			// segment.
			idx := appended
			if rng.IntN(2) == 0 {
				idx = w.syncedIndex()
			}
			if idx <= m.snapped {
				continue
			}
			if err := w.SaveSnapshot(testSnapshot(idx)); err != nil {
				break
			}
			m.snapped = idx
		}
	}
	if cleanClose {
		// Close makes everything queued durable, if the power holds.
		_ = w.Close()
		fsys.Cut()
	} else {
		fsys.Cut()
		_ = w.Close()
	}
	if got := durable.get(); got > m.appended {
		t.Fatalf("%s: OnSync reported %d, only %d appended", desc, got, m.appended)
	}
	m.durable = max(m.durable, durable.get())
}

func (w *WAL) syncedIndex() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.synced
}
