package mvcc

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/netsy-io/netsy/proto/netsyv1"
)

// Snapshot calls fn for every version the store keeps, tombstones included,
// in (mod_revision, sub) order: what Restore needs to rebuild this store,
// history above the compaction floor included. It is Capture read in full;
// fn may keep what it is given. It stops at the first error fn returns.
func (s *Store) Snapshot(fn func(*netsyv1.KeyVersion) error) error {
	c := s.Capture()
	defer c.Release()
	for i := range c.Len() {
		kv, err := c.At(i)
		if err != nil {
			return err
		}
		if err := fn(kv); err != nil {
			return err
		}
	}
	return nil
}

// Capture is the store's versions at one moment, as Snapshot yields them,
// kept as pointers to the store's immutable versions: a capture of a large
// store costs a few words per version, and values are read from the spill
// files only when At asks for them. It keeps the files it may read until
// Release. It implements datafile.Source.
type Capture struct {
	vs []captured

	mu     sync.Mutex
	pinned []*spillFile
	// ahead holds the bytes of file at [aheadOff, aheadOff+len(ahead)):
	// values are captured in the order they were written, so reading a
	// block at a time serves a whole snapshot with few syscalls.
	ahead    []byte
	aheadF   *spillFile
	aheadOff int64
}

// captureReadAhead is the block At reads from a spill file.
const captureReadAhead = 256 << 10

// captured is one version, its sub and, if spilled, where its value is.
type captured struct {
	kv  *mvccpb.KeyValue
	r   spillRef
	sub int64
}

// Len is the number of versions captured.
func (c *Capture) Len() int { return len(c.vs) }

// At returns version i as a new KeyVersion. It is safe to call from any
// goroutine until Release.
func (c *Capture) At(i int) (*netsyv1.KeyVersion, error) {
	e := c.vs[i]
	kv := keyVersion(e.kv, e.sub)
	if e.r.f != nil {
		c.mu.Lock()
		defer c.mu.Unlock()
		v, err := c.view(e.r)
		if err != nil {
			return nil, err
		}
		kv.Value = bytes.Clone(v)
	}
	return kv, nil
}

// View sets kv to version i without allocating: a spilled value is
// the capture's read-ahead block itself, valid until the next View or At
// (datafile.Viewer). The encoder of a local snapshot reads a million
// values this way; copying each into a KeyVersion of its own made
// two allocations per version and most of the collector's work.
func (c *Capture) View(i int, kv *netsyv1.KeyVersion) error {
	e := c.vs[i]
	setKeyVersion(kv, e.kv, e.sub)
	if e.r.f != nil {
		c.mu.Lock()
		defer c.mu.Unlock()
		v, err := c.view(e.r)
		if err != nil {
			return err
		}
		kv.Value = v
	}
	return nil
}

// view returns the value r locates from the read-ahead block (or, for a
// value larger than the block, a buffer of its own), which the next call
// overwrites; c.mu is held. Capture flushed everything it refers to, so
// the file alone serves it: the spill buffer belongs to the writer.
func (c *Capture) view(r spillRef) ([]byte, error) {
	if r.f != c.aheadF || r.off() < c.aheadOff || r.off()+int64(r.n()) > c.aheadOff+int64(len(c.ahead)) {
		if r.n() > captureReadAhead {
			v := make([]byte, r.n())
			if _, err := r.f.readAt(v, r.off(), r.n()); err != nil {
				return nil, err
			}
			return v, nil
		}
		if c.ahead == nil {
			c.ahead = make([]byte, captureReadAhead)
		}
		// A short read at the end of the file is fine as long as it
		// covers the value.
		n, err := r.f.readAt(c.ahead[:cap(c.ahead)], r.off(), r.n())
		if err != nil {
			c.aheadF = nil
			return nil, err
		}
		c.ahead, c.aheadF, c.aheadOff = c.ahead[:n], r.f, r.off()
	}
	at := r.off() - c.aheadOff
	return c.ahead[at : at+int64(r.n()) : at+int64(r.n())], nil
}

// Release lets the store delete the files the capture kept. It may be
// called from any goroutine; calls after the first do nothing.
func (c *Capture) Release() {
	c.mu.Lock()
	pinned := c.pinned
	c.pinned, c.ahead, c.aheadF = nil, nil, nil
	c.mu.Unlock()
	for _, f := range pinned {
		f.unpin()
	}
}

// Capture copies the store's versions; versions a compaction in progress
// has yet to drop are left out, and writes not yet committed are included.
// Like the writes, it is called by the store's one writer. Readers wait
// only while the spill buffer is written out; the read lock is held to
// copy pointers.
//
// Versions below the floor have left the log and with it their sub; they
// are at most one per key and nothing reads their sub, so they are numbered
// in key order within their revision, which Restore reproduces exactly.
func (s *Store) Capture() *Capture {
	c := &Capture{}
	if s.sp != nil {
		// The write lock only to write out the spill buffer, which
		// readers read; the writer itself is the caller, so nothing
		// changes between this and the read lock below.
		s.mu.Lock()
		if err := s.sp.cur.flush(); err != nil && s.sp.err == nil {
			s.sp.err = err
		}
		for _, f := range s.sp.files {
			f.pin()
			c.pinned = append(c.pinned, f)
		}
		s.mu.Unlock()
	}
	s.mu.RLock()
	floor := s.compactRev.Load()
	grab := func(kv *mvccpb.KeyValue) captured {
		r, _ := s.spilledAt(kv)
		return captured{kv: kv, r: r}
	}
	var old []captured
	if floor > 0 {
		s.idx.ascend(nil, nil, func(ki *keyIndex) bool {
			if k := ki.kept(floor); len(k) > 0 && k[0].ModRevision < floor {
				old = append(old, grab(k[0]))
			}
			return true
		})
	}
	// A compaction in progress may not have dropped its part of the log
	// yet.
	tail := s.log[s.logSearch(floor):]
	c.vs = make([]captured, len(old), len(old)+len(tail))
	copy(c.vs, old)
	for _, e := range tail {
		c.vs = append(c.vs, grab(e.kv))
	}
	if s.sp != nil {
		// Whatever a failed flush left in the buffer is copied now.
		for i, e := range c.vs {
			if r := e.r; r.f != nil && r.off() >= r.f.flushed {
				v, _ := r.read() // from memory: cannot fail
				kv := withValue(e.kv, v)
				c.vs[i] = captured{kv: &kv}
			}
		}
	}
	s.mu.RUnlock()

	// Key order within a revision; old has one version per key.
	old = c.vs[:len(old)]
	slices.SortFunc(old, func(a, b captured) int {
		if c := cmp.Compare(a.kv.ModRevision, b.kv.ModRevision); c != 0 {
			return c
		}
		return bytes.Compare(a.kv.Key, b.kv.Key)
	})
	for _, part := range [][]captured{old, c.vs[len(old):]} {
		var rev, sub int64
		for i := range part {
			if part[i].kv.ModRevision != rev {
				rev, sub = part[i].kv.ModRevision, 0
			}
			part[i].sub = sub
			sub++
		}
	}
	return c
}

func keyVersion(kv *mvccpb.KeyValue, sub int64) *netsyv1.KeyVersion {
	v := new(netsyv1.KeyVersion)
	setKeyVersion(v, kv, sub)
	return v
}

// setKeyVersion sets every field of dst to stored version kv at sub,
// sharing its key and value.
func setKeyVersion(dst *netsyv1.KeyVersion, kv *mvccpb.KeyValue, sub int64) {
	dst.Key, dst.Value = kv.Key, kv.Value
	dst.CreateRevision, dst.ModRevision, dst.Sub = kv.CreateRevision, kv.ModRevision, sub
	dst.Version, dst.Lease, dst.Tombstone = kv.Version, kv.Lease, tombstone(kv)
}

// Restore loads Snapshot output into an empty store and sets Rev and
// CompactRev. The store keeps the versions' key and value slices. It rejects
// input that is not a consistent history, naming the offending version, so a
// damaged snapshot never loads silently.
func (s *Store) Restore(rev, compactRev int64, versions []*netsyv1.KeyVersion) error {
	return s.RestoreFrom(Load{Rev: rev, CompactRev: compactRev, Versions: versions})
}

// Replace drops everything the store holds and restores versions as
// Restore does: a replica too far behind its Primary's log loads a newer
// snapshot over the state it had. Readers see the old state or the new
// one, never a mix. On an error the store is left empty.
func (s *Store) Replace(rev, compactRev int64, versions []*netsyv1.KeyVersion) error {
	return s.ReplaceFrom(Load{Rev: rev, CompactRev: compactRev, Versions: versions})
}

// Load is what RestoreFrom and ReplaceFrom load, and what they do along
// the way.
type Load struct {
	// Rev and CompactRev become the store's Rev and CompactRev.
	Rev, CompactRev int64
	// Versions is Snapshot output.
	Versions []*netsyv1.KeyVersion
	// Consume lets the store clear each entry of Versions once it holds
	// what it keeps of it (the key and, unless spilled, the value), so a
	// decoded snapshot is freed while the store grows rather than after
	// the store is whole: at 1 M keys the two together were most of a
	// restart's peak memory. Only for a slice nothing else reads: a
	// storage that hands the same snapshot out again (a test's, a
	// restore's) must not have its versions cleared. The KeyVersions
	// themselves are never modified.
	Consume bool
	// OnLease, when set, is told of every loaded version that changes the
	// lease its key is attached to (prev, next: the lease of the key's
	// live version before and after it, 0 for none; a tombstone's next is
	// 0), in load order. Applied in order, the calls leave every key with
	// its latest live version's lease, with no pass over every key after
	// the load.
	OnLease func(key []byte, prev, next int64)
}

// RestoreFrom loads l into an empty store: Restore with the options of
// Load.
func (s *Store) RestoreFrom(l Load) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rev.Load() != 0 || s.idx.n != 0 {
		return errors.New("mvcc: restore into a store that is not empty")
	}
	return s.restoreLocked(l)
}

// ReplaceFrom drops everything the store holds and loads l: Replace with
// the options of Load.
func (s *Store) ReplaceFrom(l Load) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.emptyLocked()
	s.rev.Store(0)
	s.compactRev.Store(0)
	return s.restoreLocked(l)
}

func (s *Store) restoreLocked(l Load) error {
	rev, compactRev := l.Rev, l.CompactRev
	if compactRev < 0 || compactRev > rev {
		return fmt.Errorf("mvcc: restore: compact revision %d outside [0, %d]", compactRev, rev)
	}
	if err := s.load(l); err != nil {
		// Leave the store empty rather than half loaded.
		s.emptyLocked()
		return err
	}
	s.rev.Store(rev)
	if compactRev > 0 {
		s.compact(compactRev, nil)
	}
	return nil
}

func (s *Store) load(l Load) error {
	rev, versions := l.Rev, l.Versions
	// The store is empty here: size its maps for the snapshot at once
	// rather than let them grow and rehash a million keys step by step
	// (restart of a 1 M key store, issue 22), with a quarter more for
	// the entries a restart replays next: sized for the snapshot alone,
	// the maps were full and the replay of 100 k new keys after 900 k
	// spent a third of its time splitting their tables.
	if s.keys.len() == 0 && len(versions) > 0 {
		hint := len(versions) + len(versions)/4
		s.keys = newKeyMap(hint)
		// The log holds every version loaded at first (compaction drops
		// from its front): one allocation instead of twenty doublings.
		s.log = make([]logEntry, 0, hint)
	}
	var last, lastSub int64
	for i, v := range versions {
		bad := func(why string) error {
			return fmt.Errorf("mvcc: restore: version %d (key %q, revision %d, sub %d): %s", i, v.Key, v.ModRevision, v.Sub, why)
		}
		switch {
		case v == nil:
			return fmt.Errorf("mvcc: restore: version %d is missing", i)
		case v.ModRevision < 1 || v.ModRevision > rev:
			return bad(fmt.Sprintf("revision outside [1, %d]", rev))
		case v.ModRevision < last || v.ModRevision == last && v.Sub < lastSub:
			return bad("out of (revision, sub) order")
		case len(v.Key) == 0:
			return bad("empty key")
		}
		last, lastSub = v.ModRevision, v.Sub
		ki := s.lookup(v.Key)
		var prev *mvccpb.KeyValue
		if ki != nil {
			prev = ki.latest()
		}
		if v.Tombstone && prev == nil {
			return bad("tombstone for a key that is not live")
		}
		if !v.Tombstone && (v.Version < 1 || v.CreateRevision < 1 || v.CreateRevision > v.ModRevision) {
			return bad("invalid version or create revision")
		}
		if ki == nil {
			ki = newKeyIndex(v.Key)
			s.addKey(ki, true)
		} else if (prev == nil) != v.Tombstone {
			s.idx.setLive(ki.key(), !v.Tombstone)
		}
		var kv *mvccpb.KeyValue
		if v.Tombstone {
			kv = &mvccpb.KeyValue{Key: ki.key(), ModRevision: v.ModRevision}
		} else {
			kv = s.restored(ki.slot(), mvccpb.KeyValue{Key: ki.key(), ModRevision: v.ModRevision,
				CreateRevision: v.CreateRevision, Version: v.Version, Value: v.Value, Lease: v.Lease})
		}
		if l.OnLease != nil {
			var from int64
			if prev != nil {
				from = prev.Lease
			}
			if to := kv.Lease; from != to {
				l.OnLease(ki.key(), from, to)
			}
		}
		s.append(ki, kv, prev)
		if l.Consume {
			versions[i] = nil
		}
	}
	return nil
}

// restored is stored for a version being restored, with one allocation
// instead of two: a spilled version is copied without its value once, not
// built with it and then copied.
func (s *Store) restored(slot *spilledVersion, kv mvccpb.KeyValue) *mvccpb.KeyValue {
	return s.keep(slot, kv)
}

// HashKV hashes every version with mod_revision <= rev that the store holds
// (rev 0: Rev()) and returns the hash with the compaction floor. Stores with
// the same history and floor hash equal whatever path built them (writes,
// compactions, restores), so nodes can compare. The hash is CRC-32C over the
// versions in key order, each key's versions oldest first.
func (s *Store) HashKV(rev int64) (uint32, int64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	floor := s.compactRev.Load()
	if rev == 0 {
		rev = s.rev.Load()
	}
	if rev > s.rev.Load() {
		return 0, floor, ErrFutureRev
	}
	if rev < floor {
		return 0, floor, ErrCompacted
	}
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	var buf, val []byte
	var err error
	s.idx.ascend(nil, nil, func(ki *keyIndex) bool {
		// Only what compaction keeps, so a compaction in progress does
		// not show.
		for _, kv := range ki.kept(floor) {
			if kv.ModRevision > rev {
				break
			}
			value := kv.Value
			if r, ok := s.spilledAt(kv); ok {
				if value, err = s.readSpilled(r, val); err != nil {
					return false
				}
				val = value
			}
			buf = binary.AppendUvarint(buf[:0], uint64(len(kv.Key)))
			buf = append(buf, kv.Key...)
			buf = binary.AppendVarint(buf, kv.CreateRevision)
			buf = binary.AppendVarint(buf, kv.ModRevision)
			buf = binary.AppendVarint(buf, kv.Version)
			buf = binary.AppendVarint(buf, kv.Lease)
			buf = binary.AppendUvarint(buf, uint64(len(value)))
			h.Write(buf)
			h.Write(value)
		}
		return true
	})
	if err != nil {
		return 0, floor, err
	}
	return h.Sum32(), floor, nil
}
