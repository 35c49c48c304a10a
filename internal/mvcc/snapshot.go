package mvcc

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/netsy-io/netsy/proto/netsyv1"
)

// Snapshot calls fn for every version the store keeps, tombstones included,
// in (mod_revision, sub) order: what Restore needs to rebuild this store,
// history above the compaction floor included. Versions a compaction in
// progress has yet to drop are left out. It stops at the first error fn
// returns.
//
// The lock is held only to copy pointers, so fn may do I/O without stalling
// the writer; the output is the state at the moment of the call, writes not
// yet committed included.
//
// Versions below the floor have left the log and with it their sub; they
// are at most one per key and nothing reads their sub, so they are numbered
// in key order within their revision, which Restore reproduces exactly.
func (s *Store) Snapshot(fn func(*netsyv1.KeyVersion) error) error {
	s.mu.RLock()
	floor := s.compactRev.Load()
	var old []*mvccpb.KeyValue
	if floor > 0 {
		s.idx.ascend(nil, nil, func(ki *keyIndex) bool {
			if k := ki.kept(floor); len(k) > 0 && k[0].ModRevision < floor {
				old = append(old, k[0])
			}
			return true
		})
	}
	// A compaction in progress may not have dropped its part of the log
	// yet.
	tail := s.log[s.logSearch(floor):]
	log := make([]*mvccpb.KeyValue, len(tail))
	for i, e := range tail {
		log[i] = e.kv
	}
	s.mu.RUnlock()

	// Key order within a revision; old has one version per key.
	slices.SortFunc(old, func(a, b *mvccpb.KeyValue) int {
		if c := cmp.Compare(a.ModRevision, b.ModRevision); c != 0 {
			return c
		}
		return bytes.Compare(a.Key, b.Key)
	})
	for _, part := range [][]*mvccpb.KeyValue{old, log} {
		var rev, sub int64
		for _, kv := range part {
			if kv.ModRevision != rev {
				rev, sub = kv.ModRevision, 0
			}
			if err := fn(keyVersion(kv, sub)); err != nil {
				return err
			}
			sub++
		}
	}
	return nil
}

func keyVersion(kv *mvccpb.KeyValue, sub int64) *netsyv1.KeyVersion {
	return &netsyv1.KeyVersion{
		Key:            kv.Key,
		Value:          kv.Value,
		CreateRevision: kv.CreateRevision,
		ModRevision:    kv.ModRevision,
		Sub:            sub,
		Version:        kv.Version,
		Lease:          kv.Lease,
		Tombstone:      tombstone(kv),
	}
}

// Restore loads Snapshot output into an empty store and sets Rev and
// CompactRev. The store keeps the versions' key and value slices. It rejects
// input that is not a consistent history, naming the offending version, so a
// damaged snapshot never loads silently.
func (s *Store) Restore(rev, compactRev int64, versions []*netsyv1.KeyVersion) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rev.Load() != 0 || s.idx.n != 0 {
		return errors.New("mvcc: restore into a store that is not empty")
	}
	if compactRev < 0 || compactRev > rev {
		return fmt.Errorf("mvcc: restore: compact revision %d outside [0, %d]", compactRev, rev)
	}
	if err := s.load(rev, versions); err != nil {
		// Leave the store empty rather than half loaded.
		s.idx, s.keys, s.log, s.versions, s.bytes = newTree(), map[string]*keyIndex{}, nil, 0, 0
		return err
	}
	s.rev.Store(rev)
	if compactRev > 0 {
		s.compact(compactRev, nil)
	}
	return nil
}

func (s *Store) load(rev int64, versions []*netsyv1.KeyVersion) error {
	var last, lastSub int64
	for i, v := range versions {
		bad := func(why string) error {
			return fmt.Errorf("mvcc: restore: version %d (key %q, revision %d, sub %d): %s", i, v.Key, v.ModRevision, v.Sub, why)
		}
		switch {
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
			ki = &keyIndex{key: v.Key}
			s.addKey(ki, true)
		} else if (prev == nil) != v.Tombstone {
			s.idx.setLive(ki.key, !v.Tombstone)
		}
		kv := &mvccpb.KeyValue{Key: ki.key, ModRevision: v.ModRevision}
		if !v.Tombstone {
			kv.CreateRevision, kv.Version, kv.Value, kv.Lease = v.CreateRevision, v.Version, v.Value, v.Lease
		}
		s.append(ki, kv, prev)
	}
	return nil
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
	var buf []byte
	s.idx.ascend(nil, nil, func(ki *keyIndex) bool {
		// Only what compaction keeps, so a compaction in progress does
		// not show.
		for _, kv := range ki.kept(floor) {
			if kv.ModRevision > rev {
				break
			}
			buf = binary.AppendUvarint(buf[:0], uint64(len(kv.Key)))
			buf = append(buf, kv.Key...)
			buf = binary.AppendVarint(buf, kv.CreateRevision)
			buf = binary.AppendVarint(buf, kv.ModRevision)
			buf = binary.AppendVarint(buf, kv.Version)
			buf = binary.AppendVarint(buf, kv.Lease)
			buf = binary.AppendUvarint(buf, uint64(len(kv.Value)))
			h.Write(buf)
			h.Write(kv.Value)
		}
		return true
	})
	return h.Sum32(), floor, nil
}
