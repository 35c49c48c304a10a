// Package enginetest provides an in-memory engine.Storage for tests of the
// engine and of the layers above it. It never touches disk and must never
// be used outside tests.
package enginetest

import (
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/netsy-io/netsy/internal/datafile"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// MemStorage keeps entries and the newest snapshot in memory. By default an
// entry is durable the moment it is appended; with Manual set, entries
// become durable only when the test calls SyncAll.
type MemStorage struct {
	Manual bool

	mu      sync.Mutex
	entries []*netsyv1.Entry
	snap    *datafile.Snapshot
	failErr error
	onSync  func(uint64, error)
}

// Attach sets the durability callback (the engine attaches its own) and
// reports everything held as durable, as a real log does at open.
func (m *MemStorage) Attach(f func(uint64, error)) {
	m.mu.Lock()
	m.onSync = f
	m.mu.Unlock()
	m.SyncAll()
}

// Fail makes every later Append return err; nil heals the storage.
func (m *MemStorage) Fail(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failErr = err
}

// Len is the number of entries held.
func (m *MemStorage) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.entries)
}

// HasSnapshot reports whether a snapshot was saved.
func (m *MemStorage) HasSnapshot() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.snap != nil
}

func (m *MemStorage) LoadSnapshot() (*datafile.Snapshot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.snap, nil
}

func (m *MemStorage) Replay(from uint64, fn func(*netsyv1.Entry) error) error {
	m.mu.Lock()
	ents := append([]*netsyv1.Entry(nil), m.entries...)
	m.mu.Unlock()
	for _, e := range ents {
		if e.Index >= from {
			if err := fn(e); err != nil {
				return err
			}
		}
	}
	return nil
}

func (m *MemStorage) Append(e *netsyv1.Entry) error {
	m.mu.Lock()
	if m.failErr != nil {
		err := m.failErr
		m.mu.Unlock()
		return err
	}
	// Keep a deep copy, as a real log keeps bytes, so later mutation of
	// the entry by anyone cannot change the history.
	m.entries = append(m.entries, proto.Clone(e).(*netsyv1.Entry))
	manual := m.Manual
	m.mu.Unlock()
	if !manual {
		m.SyncAll()
	}
	return nil
}

// SyncAll reports every entry held as durable.
func (m *MemStorage) SyncAll() {
	m.mu.Lock()
	var last uint64
	if n := len(m.entries); n > 0 {
		last = m.entries[n-1].Index
	}
	cb := m.onSync
	m.mu.Unlock()
	if cb != nil && last > 0 {
		cb(last, nil)
	}
}

// SaveSnapshot keeps s, its values read into memory, and drops the entries
// it covers, as a real log does.
func (m *MemStorage) SaveSnapshot(s *datafile.Snapshot) error {
	defer s.Release()
	keep := &datafile.Snapshot{Header: s.Header, KVs: make([]*netsyv1.KeyVersion, s.Len()), Leases: s.Leases}
	for i := range keep.KVs {
		kv, err := s.At(i)
		if err != nil {
			return err
		}
		keep.KVs[i] = kv
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.snap = keep
	kept := m.entries[:0]
	for _, e := range m.entries {
		if e.Index > s.Header.Index {
			kept = append(kept, e)
		}
	}
	m.entries = kept
	return nil
}

// TruncateAfter drops the entries after index (a follower cutting what the
// Primary never committed).
func (m *MemStorage) TruncateAfter(index uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := len(m.entries)
	for n > 0 && m.entries[n-1].Index > index {
		n--
	}
	clear(m.entries[n:])
	m.entries = m.entries[:n]
	return nil
}

// FirstIndex is the oldest entry held, 0 if none.
func (m *MemStorage) FirstIndex() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.entries) == 0 {
		return 0
	}
	return m.entries[0].Index
}

// Entries returns copies of the entries held from index from on.
func (m *MemStorage) Entries(from uint64) []*netsyv1.Entry {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*netsyv1.Entry
	for _, e := range m.entries {
		if e.Index >= from {
			out = append(out, proto.Clone(e).(*netsyv1.Entry))
		}
	}
	return out
}
