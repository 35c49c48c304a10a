package objwal

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/netsy-io/netsy/internal/datafile"
	"github.com/netsy-io/netsy/internal/objstore"
	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

// The timeline: what a bucket can rebuild, and when each revision in it
// was committed. RevisionAt, TimeOf and Window need no open Log (netsyctl
// restore calls them on a bucket no cluster runs on), make one attempt per
// object-storage call, and download only what a binary search over the
// chunk keys needs: the listings, the headers (first record) of the
// oldest snapshots until one starts the history, and about log2(chunks)
// chunks, each in full (chunks are small and have no index to seek in).
//
// Times are the commit_time_ms stamps the writer puts on each entry (see
// stamp.go): they never go backwards along the log, so a search by time
// is a search by position. An entry without a stamp (written before the
// field existed) has an unknown time: it is never the answer to
// RevisionAt, and TimeOf reports its time as zero.

// Point is one place in the bucket's history: the state after the entry at
// Index, whose revision is Revision.
type Point struct {
	Revision int64
	Index    uint64
	// Time is when the Primary committed that entry (millisecond
	// resolution); zero if unknown. For a Point that is a snapshot (the
	// oldest one, see Window) it is the time of the snapshot's last entry.
	Time time.Time
}

func (p Point) String() string {
	if p.Time.IsZero() {
		return fmt.Sprintf("revision %d (index %d, time unknown)", p.Revision, p.Index)
	}
	return fmt.Sprintf("revision %d (index %d, %s)", p.Revision, p.Index, p.Time.UTC().Format(time.RFC3339Nano))
}

// ErrNotRetained is what RangeError matches: the revision or time asked
// for is outside what the bucket can rebuild.
var ErrNotRetained = errors.New("objwal: not in the history the bucket retains")

// RangeError says a revision or time lies outside the restorable window,
// and names the window.
type RangeError struct {
	// Asked is the revision or time asked for, as the caller gave it.
	Asked          string
	Oldest, Newest Point
}

func (e *RangeError) Error() string {
	return fmt.Sprintf("%s is outside the history the bucket can rebuild: from %s to %s", e.Asked, e.Oldest, e.Newest)
}

func (e *RangeError) Is(target error) bool { return target == ErrNotRetained }

// Window returns the oldest and the newest point a restore from store can
// rebuild: the oldest snapshot whose later chunks are all present (or the
// first entry, when the chunks hold the history from index 1) and the
// last entry of the newest chunk that holds entries. Every revision
// between them can be rebuilt from that snapshot and the chunks after it.
func Window(ctx context.Context, store objstore.Store) (oldest, newest Point, err error) {
	tl, err := loadTimeline(ctx, store)
	if err != nil {
		return Point{}, Point{}, err
	}
	return tl.oldest, tl.newest, nil
}

// RevisionAt returns the last point committed at or before t: the state a
// reader saw at t. A t before the oldest restorable point (or one whose
// time is unknown) is a *RangeError; a t after the newest point answers the
// newest point.
func RevisionAt(ctx context.Context, store objstore.Store, t time.Time) (Point, error) {
	tl, err := loadTimeline(ctx, store)
	if err != nil {
		return Point{}, err
	}
	return tl.revisionAt(ctx, t)
}

// TimeOf returns the point at which rev was committed: the first entry
// carrying rev, with its commit time (zero if unknown). For the oldest
// snapshot's revision, whose entry may precede it, the answer is the
// snapshot's point. A rev outside the window is a *RangeError.
func TimeOf(ctx context.Context, store objstore.Store, rev int64) (Point, error) {
	tl, err := loadTimeline(ctx, store)
	if err != nil {
		return Point{}, err
	}
	return tl.timeOf(ctx, rev)
}

// timeline is one reading of the bucket's restorable history.
type timeline struct {
	store objstore.Store
	// seqs are the chunks after the oldest usable snapshot (or every
	// chunk, when the history starts at index 1), dense.
	seqs   []uint64
	base   *netsyv1.SnapshotHeader // nil when the history starts at index 1
	oldest Point
	newest Point
	cache  map[uint64][]*netsyv1.Entry // by seq
}

func msTime(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

func entryPoint(e *netsyv1.Entry) Point {
	return Point{Revision: e.Revision, Index: e.Index, Time: msTime(e.CommitTimeMs)}
}

func loadTimeline(ctx context.Context, store objstore.Store) (*timeline, error) {
	tl := &timeline{store: store, cache: map[uint64][]*netsyv1.Entry{}}
	var seqs []uint64
	if err := listKeys(ctx, store, walPrefix, func(key string) error {
		seq := parseSeq(key)
		if seq == 0 {
			return fmt.Errorf("list %s: %q is not a wal chunk key", walPrefix, key)
		}
		seqs = append(seqs, seq)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("timeline: %w", err)
	}
	// Chunks below a hole rebuild nothing a snapshot after the hole
	// does not: only the dense run that reaches the newest chunk counts.
	start := len(seqs) - 1
	for start > 0 && seqs[start-1]+1 == seqs[start] {
		start--
	}
	if start >= 0 {
		seqs = seqs[start:]
	}
	var snaps []string
	if err := listKeys(ctx, store, snapPrefix, func(key string) error {
		if parseNum(key, snapPrefix) == 0 {
			return fmt.Errorf("list %s: %q is not a snapshot key", snapPrefix, key)
		}
		snaps = append(snaps, key)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("timeline: %w", err)
	}
	tl.seqs = seqs
	if len(seqs) > 0 && seqs[0] == 1 {
		// A log kept from its first chunk may hold the history from
		// index 1 (unless a seeded snapshot precedes it).
		for i := range seqs {
			ents, err := tl.chunk(ctx, i)
			if err != nil {
				return nil, err
			}
			if len(ents) > 0 {
				if ents[0].Index == 1 {
					tl.oldest = entryPoint(ents[0])
				}
				break
			}
		}
	}
	if tl.oldest.Index == 0 {
		for _, key := range snaps {
			h, err := snapshotHeader(ctx, store, key)
			if errors.Is(err, objstore.ErrNotFound) {
				continue // garbage-collected after the listing
			}
			if err != nil {
				return nil, fmt.Errorf("timeline: %w", err)
			}
			if len(seqs) == 0 || h.WalSeq+1 >= seqs[0] {
				tl.base = h
				break
			}
		}
		if tl.base == nil {
			return nil, errors.New("timeline: the bucket holds no snapshot the chunks follow on from, and no history from index 1: nothing can be rebuilt")
		}
		// Chunks the snapshot covers are not part of the search.
		for len(tl.seqs) > 0 && tl.seqs[0] <= tl.base.WalSeq {
			tl.seqs = tl.seqs[1:]
		}
		tl.oldest = Point{Revision: tl.base.Revision, Index: tl.base.Index, Time: msTime(tl.base.CommitTimeMs)}
	}
	tl.newest = tl.oldest
	for i := len(tl.seqs) - 1; i >= 0; i-- {
		ents, err := tl.chunk(ctx, i)
		if err != nil {
			return nil, err
		}
		if n := len(ents); n > 0 {
			if ents[n-1].Index > tl.newest.Index {
				tl.newest = entryPoint(ents[n-1])
			}
			break
		}
	}
	return tl, nil
}

// chunk returns the entries of tl.seqs[i], downloading it once.
func (tl *timeline) chunk(ctx context.Context, i int) ([]*netsyv1.Entry, error) {
	seq := tl.seqs[i]
	if ents, ok := tl.cache[seq]; ok {
		return ents, nil
	}
	key := walKey(seq)
	body, _, err := tl.store.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("timeline: get %s: %w", key, err)
	}
	ents, _, err := datafile.DecodeChunk(key, body)
	if err != nil {
		return nil, fmt.Errorf("timeline: chunk %s: %w", key, err)
	}
	tl.cache[seq] = ents
	return ents, nil
}

// search returns the first position in [0, len(seqs)) from which every
// chunk that decide answers for says true (len(seqs) if none): decide
// answers ok=false for a chunk it cannot judge (empty, or no stamps),
// and such chunks take the answer of the next one that it can judge.
// decide must be monotone (false then true) over the chunks it judges.
func (tl *timeline) search(ctx context.Context, decide func([]*netsyv1.Entry) (bool, bool)) (int, error) {
	lo, hi := 0, len(tl.seqs)
	for lo < hi {
		mid := lo + (hi-lo)/2
		j, judged, v := mid, false, false
		for ; j < hi; j++ {
			ents, err := tl.chunk(ctx, j)
			if err != nil {
				return 0, err
			}
			if v, judged = decide(ents); judged {
				break
			}
		}
		switch {
		case !judged || v:
			hi = mid
		default:
			lo = j + 1
		}
	}
	return lo, nil
}

func (tl *timeline) revisionAt(ctx context.Context, t time.Time) (Point, error) {
	ms := t.UnixMilli()
	notRetained := &RangeError{Asked: "time " + t.UTC().Format(time.RFC3339Nano), Oldest: tl.oldest, Newest: tl.newest}
	// The first chunk with an entry stamped after t.
	k, err := tl.search(ctx, func(ents []*netsyv1.Entry) (bool, bool) {
		for i := len(ents) - 1; i >= 0; i-- {
			if s := ents[i].CommitTimeMs; s != 0 {
				return s > ms, true
			}
		}
		return false, false
	})
	if err != nil {
		return Point{}, err
	}
	// The answer is the last stamped entry at or before t: in the first
	// stamped chunk from k on, before its first later one, or else in the
	// chunks before that.
	from := len(tl.seqs) - 1
	for i := k; i < len(tl.seqs); i++ {
		ents, err := tl.chunk(ctx, i)
		if err != nil {
			return Point{}, err
		}
		if slices.ContainsFunc(ents, func(e *netsyv1.Entry) bool { return e.CommitTimeMs != 0 }) {
			from = i
			break
		}
	}
	for i := from; i >= 0; i-- {
		ents, err := tl.chunk(ctx, i)
		if err != nil {
			return Point{}, err
		}
		for j := len(ents) - 1; j >= 0; j-- {
			if s := ents[j].CommitTimeMs; s != 0 && s <= ms {
				return entryPoint(ents[j]), nil
			}
		}
	}
	if tl.base != nil && tl.base.CommitTimeMs != 0 && tl.base.CommitTimeMs <= ms {
		return tl.oldest, nil
	}
	return Point{}, notRetained
}

func (tl *timeline) timeOf(ctx context.Context, rev int64) (Point, error) {
	notRetained := &RangeError{Asked: fmt.Sprintf("revision %d", rev), Oldest: tl.oldest, Newest: tl.newest}
	switch {
	case rev < tl.oldest.Revision || rev > tl.newest.Revision:
		return Point{}, notRetained
	case tl.base != nil && rev == tl.base.Revision:
		return tl.oldest, nil
	}
	// The first chunk whose last revision reaches rev.
	k, err := tl.search(ctx, func(ents []*netsyv1.Entry) (bool, bool) {
		if n := len(ents); n > 0 {
			return ents[n-1].Revision >= rev, true
		}
		return false, false
	})
	if err != nil {
		return Point{}, err
	}
	for i := k; i < len(tl.seqs); i++ {
		ents, err := tl.chunk(ctx, i)
		if err != nil {
			return Point{}, err
		}
		for _, e := range ents {
			if e.Revision >= rev {
				return entryPoint(e), nil
			}
		}
	}
	return Point{}, notRetained
}
