package mvcc

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"unsafe"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Store is the multi-version key-value state. One goroutine writes (Put,
// Delete, Compact, Rollback, Restore, and Capture, Snapshot and Close,
// which touch the spill files); any number read concurrently.
type Store struct {
	mu sync.RWMutex

	idx tree
	// keys finds a key's index without the tree's pointer chasing: point
	// reads and writes, the hot paths, cost one hash lookup.
	keys keyMap
	// log holds every event with mod_revision >= compactRev in (revision,
	// sub) order; a version's sub is its position within its revision. Its
	// kv pointers are the same values the key histories hold.
	log []logEntry

	// rev and compactRev are written under mu and read without it by
	// Rev/CompactRev.
	rev        atomic.Int64
	compactRev atomic.Int64

	versions int64
	bytes    int64

	// compactBatch is how many log entries Compact works through per
	// hold of the lock.
	compactBatch int

	// sp, when not nil, holds values of at least spillMin bytes; a
	// stored version whose value it holds is a spilledVersion, and
	// spilled counts them.
	sp       *spill
	spilled  int
	spillMin int
	// fault is the first error reading a spilled value.
	fault atomic.Pointer[error]
}

// Options configure Open.
type Options struct {
	// SpillDir, when not empty, is a directory the store owns for values
	// of at least SpillMin bytes, which then stay out of the Go heap: see
	// spill. Its files are a cache, removed at Open and Close.
	SpillDir string
	// SpillMin is the smallest value spilled (default 128 bytes).
	SpillMin int
}

// DefaultSpillMin is Options.SpillMin's default: below it a value costs
// less in memory than its place in the spill index.
const DefaultSpillMin = 128

// Open returns an empty store at revision 0 configured by o. Close
// releases what it holds.
func Open(o Options) (*Store, error) {
	s := New()
	if o.SpillDir == "" {
		return s, nil
	}
	sp, err := openSpill(o.SpillDir)
	if err != nil {
		return nil, err
	}
	s.sp, s.spillMin = sp, o.SpillMin
	if s.spillMin <= 0 {
		s.spillMin = DefaultSpillMin
	}
	return s, nil
}

// Close deletes the spill files. Reads of spilled values fail afterwards,
// except through a Capture not yet released, which keeps the files it
// reads until Release.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sp != nil {
		s.sp.close()
		s.sp = nil
		s.setFault(ErrClosed)
	}
	return nil
}

// Err returns the error that made a spilled value unreadable, or nil. The
// store's answers are then incomplete, and the engine stops taking writes:
// a restart rebuilds the spill files from the log.
func (s *Store) Err() error {
	if p := s.fault.Load(); p != nil {
		return *p
	}
	return nil
}

func (s *Store) setFault(err error) {
	s.fault.CompareAndSwap(nil, &err)
}

// spilledVersion is a stored version whose value is in the spill files:
// kv.Value is spillMark, and ref says where the value is. It replaces a
// map from version to place (issue 22 item 5: at 1 M keys the map took
// ~80 of the store's ~340 MB and two pointers per version for the
// collector to follow), so a version and its place are one allocation,
// and spilledAt finds the place from the version's pointer alone.
type spilledVersion struct {
	// kv comes first: a *mvccpb.KeyValue whose Value is spillMark points
	// to the start of its spilledVersion.
	kv  mvccpb.KeyValue
	ref spillRef
}

// spillMark is the Value of every spilled version: empty, as a value read
// without resolving it always was, and at an address no other slice has,
// so a version carrying it is known to be a spilledVersion. Its capacity
// is 0, so an append to it never writes to spillMarkByte.
var (
	spillMarkByte [1]byte
	spillMark     = spillMarkByte[:0:0]
)

// spilled reports whether kv is a spilledVersion.
func spilledKV(kv *mvccpb.KeyValue) bool {
	return kv != nil && len(kv.Value) == 0 && unsafe.SliceData(kv.Value) == &spillMarkByte[0]
}

// spilledAt reports where kv's value is when the store spilled it and has
// not dropped it since.
func (s *Store) spilledAt(kv *mvccpb.KeyValue) (spillRef, bool) {
	if !spilledKV(kv) {
		return spillRef{}, false
	}
	r := (*spilledVersion)(unsafe.Pointer(kv)).ref
	return r, r.f != nil
}

// valueLen is the length of kv's value wherever it is held.
func (s *Store) valueLen(kv *mvccpb.KeyValue) int {
	if r, ok := s.spilledAt(kv); ok {
		return r.n()
	}
	return len(kv.Value)
}

// slotValueMax is the largest value kept in memory in a keyIndex's slot:
// the slot outlives its version once compaction drops it, and so would the
// value it points to.
const slotValueMax = DefaultSpillMin

// keep returns the version the store keeps for kv: in slot when not nil
// (a new key's own, see keyIndex.v0) and the value it would hold in
// memory is at most slotValueMax bytes, else in a new allocation. A value
// large enough goes to the spill files, and the version is then a
// spilledVersion without it.
func (s *Store) keep(slot *spilledVersion, kv mvccpb.KeyValue) *mvccpb.KeyValue {
	if s.sp != nil && len(kv.Value) >= s.spillMin {
		// On an error the file cannot take more, or not this value:
		// it stays in memory.
		if r, err := s.sp.put(kv.Value); err == nil {
			if slot == nil {
				slot = new(spilledVersion)
			}
			kv.Value = spillMark
			slot.kv, slot.ref = kv, r
			s.spilled++
			return &slot.kv
		}
	}
	if slot == nil || len(kv.Value) > slotValueMax {
		// Not &kv: that would move every call's kv to the heap.
		cp := new(mvccpb.KeyValue)
		*cp = kv
		return cp
	}
	slot.kv = kv
	return &slot.kv
}

// withValue is a copy of kv with value v.
func withValue(kv *mvccpb.KeyValue, v []byte) mvccpb.KeyValue {
	return mvccpb.KeyValue{Key: kv.Key, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision, Version: kv.Version, Value: v, Lease: kv.Lease}
}

// unspill forgets kv's spilled value, if any, as kv leaves the store.
// The published KeyValue keeps its mark; its place beside it is cleared
// (nothing reads it through the store any more, and a Capture holds its
// own spillRef and pins the file), so a keyIndex's v0 that outlives its
// version does not keep a retired file and its buffers reachable.
func (s *Store) unspill(kv *mvccpb.KeyValue) {
	if r, ok := s.spilledAt(kv); ok {
		s.spilled--
		(*spilledVersion)(unsafe.Pointer(kv)).ref = spillRef{}
		if s.sp != nil {
			s.sp.drop(r)
		}
	}
}

// emptyLocked drops every key and version: their spilled values first
// (unspillAll walks the index), then the index, the key map and the log.
// The revisions are the caller's to set.
func (s *Store) emptyLocked() {
	s.unspillAll()
	s.idx, s.keys, s.log, s.versions, s.bytes = newTree(), keyMap{}, nil, 0, 0
}

// unspillAll forgets every spilled value the index holds, for a store
// about to drop everything; emptyLocked empties the index afterwards.
func (s *Store) unspillAll() {
	if s.spilled == 0 {
		return
	}
	s.idx.ascend(nil, nil, func(ki *keyIndex) bool {
		for _, kv := range ki.hist {
			s.unspill(kv)
		}
		return true
	})
}

// resolve replaces each version in kvs whose value is spilled by a copy
// with the value read back; nil entries are skipped. The caller holds the
// lock.
func (s *Store) resolve(kvs []*mvccpb.KeyValue) error {
	if s.spilled == 0 {
		return nil
	}
	n, size := 0, 0
	for _, kv := range kvs {
		if r, ok := s.spilledAt(kv); ok {
			n++
			size += r.n()
		}
	}
	if n == 0 {
		return nil
	}
	cps := make([]mvccpb.KeyValue, n)
	buf := make([]byte, size)
	for i, kv := range kvs {
		r, ok := s.spilledAt(kv)
		if !ok {
			continue
		}
		v, err := s.readSpilled(r, buf[:r.n():r.n()])
		if err != nil {
			return err
		}
		buf = buf[r.n():]
		cp := &cps[0]
		cps = cps[1:]
		*cp = withValue(kv, v)
		kvs[i] = cp
	}
	return nil
}

// readSpilled reads the value r locates into dst, or into a new slice when
// dst is too small. A failure becomes the store's Err: the value is lost
// until a restart rebuilds the files.
func (s *Store) readSpilled(r spillRef, dst []byte) ([]byte, error) {
	if cap(dst) < r.n() {
		dst = make([]byte, r.n())
	}
	v, err := r.readInto(dst[:r.n()])
	if err != nil {
		s.setFault(err)
	}
	return v, err
}

// resolveEvents resolves the versions events carry.
func (s *Store) resolveEvents(evs []*mvccpb.Event) error {
	if s.spilled == 0 {
		return nil
	}
	kvs := make([]*mvccpb.KeyValue, 0, 2*len(evs))
	for _, ev := range evs {
		kvs = append(kvs, ev.Kv, ev.PrevKv)
	}
	if err := s.resolve(kvs); err != nil {
		return err
	}
	for i, ev := range evs {
		ev.Kv, ev.PrevKv = kvs[2*i], kvs[2*i+1]
	}
	return nil
}

// logEntry is one event: kv is the new version (a tombstone for a delete)
// and prev the version it replaced when the key was live before.
type logEntry struct {
	kv, prev *mvccpb.KeyValue
}

// keyIndex is one key and its versions in (mod_revision, sub) order.
//
// A tombstone is a *mvccpb.KeyValue with Version 0 carrying only Key and
// ModRevision, the exact value a DELETE event reports, so one pointer per
// version serves histories, the log and events alike. hist only loses its
// oldest entries to compaction and its newest to rollback.
type keyIndex struct {
	hist []*mvccpb.KeyValue
	// first is where a new key's hist starts (see newKeyIndex): most keys
	// of a write-heavy store are written once between compactions, and
	// the slot saves each new key the allocation of a one-element slice.
	first [1]*mvccpb.KeyValue
	// v0 holds the key's first version (see slot), for the same reason:
	// one allocation per new key instead of two, and one object fewer
	// for the collector to find per key held (issue 22 item 5). It
	// outlives that version when compaction drops it, at the price of
	// its size once per updated key; a large value held in memory is
	// therefore never put there (see keep). Its Key is set from the
	// start, whether or not the first version goes there: it is the
	// key's one copy (see key).
	v0 spilledVersion
}

// newKeyIndex is the index of a key not yet written.
func newKeyIndex(key []byte) *keyIndex {
	ki := &keyIndex{}
	ki.v0.kv.Key = key
	ki.hist = ki.first[:0]
	return ki
}

// key is the key: v0 holds it from newKeyIndex on (every version's Key
// is the same slice), so the index does not hold a second slice header of
// it, 24 bytes per key (issue 22 item 5).
func (ki *keyIndex) key() []byte { return ki.v0.kv.Key }

// slot is where the key's next version is kept: v0 for its first (a key
// whose history empties leaves the store, so an empty hist means v0 was
// never used), nil (a new allocation) afterwards.
func (ki *keyIndex) slot() *spilledVersion {
	if len(ki.hist) == 0 {
		return &ki.v0
	}
	return nil
}

func tombstone(kv *mvccpb.KeyValue) bool { return kv.Version == 0 }

// latest returns the newest version if it is live.
func (ki *keyIndex) latest() *mvccpb.KeyValue {
	if len(ki.hist) == 0 {
		return nil
	}
	kv := ki.hist[len(ki.hist)-1]
	if tombstone(kv) {
		return nil
	}
	return kv
}

func (ki *keyIndex) live() bool { return ki.latest() != nil }

// at returns the version visible at rev, or nil if the key is not live
// there.
func (ki *keyIndex) at(rev int64) *mvccpb.KeyValue {
	h := ki.hist
	n := len(h)
	if n == 0 {
		return nil
	}
	var kv *mvccpb.KeyValue
	if h[n-1].ModRevision <= rev {
		// Reads at the newest revisions are the common case.
		kv = h[n-1]
	} else {
		i := sort.Search(n, func(i int) bool { return h[i].ModRevision > rev })
		if i == 0 {
			return nil
		}
		kv = h[i-1]
	}
	if tombstone(kv) {
		return nil
	}
	return kv
}

// New returns an empty store at revision 0.
func New() *Store {
	return &Store{idx: newTree(), keys: newKeyMap(0), compactBatch: 1024}
}

func (s *Store) lookup(key []byte) *keyIndex { return s.keys.get(key) }

func (s *Store) addKey(ki *keyIndex, live bool) {
	s.idx.insert(ki, live)
	s.keys.put(ki)
	s.bytes += int64(len(ki.key()))
}

func (s *Store) removeKey(ki *keyIndex) {
	s.idx.delete(ki.key())
	s.keys.del(ki)
	s.bytes -= int64(len(ki.key()))
}

// Rev returns the latest applied revision, uncommitted writes included.
func (s *Store) Rev() int64 { return s.rev.Load() }

// CompactRev returns the compaction floor (0 when never compacted).
func (s *Store) CompactRev() int64 { return s.compactRev.Load() }

// Stats describes what the store holds.
type Stats struct {
	// Keys is the number of keys live at the latest revision.
	Keys int64
	// Versions is the number of versions held, tombstones included.
	Versions int64
	// Bytes approximates the key and value bytes held: each key once,
	// each version's value.
	Bytes int64
	// Spilled is the part of Bytes held in the spill files rather than in
	// memory, and SpillGarbage the bytes of dropped values those files
	// still occupy.
	Spilled, SpillGarbage int64
	// IndexKeys is the number of keys the index holds, live or with
	// history only.
	IndexKeys int64
}

// Stats reports the current size of the store.
func (s *Store) Stats() Stats {
	s.mu.RLock()
	defer s.mu.RUnlock()
	st := Stats{Keys: int64(s.idx.live), Versions: s.versions, Bytes: s.bytes, IndexKeys: int64(s.keys.len())}
	if s.sp != nil {
		st.Spilled, st.SpillGarbage = s.sp.live, s.sp.garbage
	}
	return st
}

// checkWriteRev panics unless rev opens the next revision or continues the
// current one: the engine owns revision numbering and a mismatch means its
// log and this store disagree, which no caller can recover from.
func (s *Store) checkWriteRev(rev int64) {
	cur := s.rev.Load()
	if rev != cur+1 && (rev != cur || cur == 0) {
		panic(fmt.Sprintf("mvcc: write at revision %d, store at revision %d", rev, cur))
	}
}

// Put sets key to value at revision rev and returns the PUT event. rev must
// be Rev()+1 (the first op of a new revision) or Rev() (a further op of the
// same revision); any other rev panics. The store keeps key and value: callers
// must not modify them afterwards. A spilled value is copied out, so the
// event's Kv is then not the version the store keeps.
func (s *Store) Put(rev int64, key, value []byte, lease int64) *mvccpb.Event {
	kv, prev := s.PutKV(rev, key, value, lease)
	prev = s.Resolve(prev)
	if len(kv.Value) == 0 && len(value) > 0 {
		// Spilled: the event carries the value, the store a version
		// without it.
		cp := withValue(kv, value)
		kv = &cp
	}
	return &mvccpb.Event{Type: mvccpb.PUT, Kv: kv, PrevKv: prev}
}

// PutKV is Put without the event: it returns the version the store now
// keeps, whose Value is empty when the value went to the spill files, and
// the version it replaced (nil when the key was not live) as the store
// keeps it: when that value was spilled, prev's Value is not it, and a
// caller that hands prev out reads it back with Resolve. The engine's
// write and apply paths use it: they read neither the new value nor an
// event, and most writes do not want the previous value (a put without
// prev_kv, every apply on a follower), whose read-back from the spill
// files was a read and two allocations per update nobody kept.
func (s *Store) PutKV(rev int64, key, value []byte, lease int64) (kv, prev *mvccpb.KeyValue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checkWriteRev(rev)
	ki := s.lookup(key)
	if ki == nil {
		ki = newKeyIndex(key)
		s.addKey(ki, true)
	}
	prev = ki.latest()
	v := mvccpb.KeyValue{Key: ki.key(), CreateRevision: rev, ModRevision: rev, Version: 1, Value: value, Lease: lease}
	if prev != nil {
		v.CreateRevision = prev.CreateRevision
		v.Version = prev.Version + 1
	} else if len(ki.hist) > 0 {
		s.idx.setLive(key, true)
	}
	kv = s.keep(ki.slot(), v)
	s.append(ki, kv, prev)
	s.rev.Store(rev)
	return kv, prev
}

// Resolve returns kv as a reader sees it: kv itself, or a copy with its
// value read back when the spill files hold it (a version PutKV returned,
// which must still be held: the caller's write has not been rolled back
// or compacted away). A read failure is recorded in Err, which fails the
// write, and kv is returned as it is.
func (s *Store) Resolve(kv *mvccpb.KeyValue) *mvccpb.KeyValue {
	if kv == nil {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.eventPrev(kv)
}

// eventPrev is prev as an event reports it, its value read back if
// spilled. A read failure is recorded in Err, which fails the write.
func (s *Store) eventPrev(prev *mvccpb.KeyValue) *mvccpb.KeyValue {
	if _, ok := s.spilledAt(prev); !ok {
		return prev
	}
	one := []*mvccpb.KeyValue{prev}
	_ = s.resolve(one) // on failure one[0] is still prev
	return one[0]
}

// Delete writes a tombstone for key at revision rev (same rule as Put) and
// returns the DELETE event, or nil without changing anything when the key is
// not live at the latest revision.
func (s *Store) Delete(rev int64, key []byte) *mvccpb.Event {
	kv, prev := s.DeleteKV(rev, key)
	if kv == nil {
		return nil
	}
	return &mvccpb.Event{Type: mvccpb.DELETE, Kv: kv, PrevKv: s.Resolve(prev)}
}

// DeleteKV is Delete without the event, as PutKV is Put: it returns the
// tombstone and the version it deleted as the store keeps it (both nil
// when the key was not live), whose Value is not the value when that was
// spilled: a caller that hands prev out reads it back with Resolve. The
// engine's write and apply paths use it: a delete without prev_kv, and
// every apply on a follower, wants prev's lease alone, and reading the
// value back from the spill files only to drop it cost a read and two
// allocations per delete.
func (s *Store) DeleteKV(rev int64, key []byte) (kv, prev *mvccpb.KeyValue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checkWriteRev(rev)
	ki := s.lookup(key)
	if ki == nil {
		return nil, nil
	}
	prev = ki.latest()
	if prev == nil {
		return nil, nil
	}
	kv = &mvccpb.KeyValue{Key: ki.key(), ModRevision: rev}
	s.idx.setLive(key, false)
	s.append(ki, kv, prev)
	s.rev.Store(rev)
	return kv, prev
}

func (s *Store) append(ki *keyIndex, kv, prev *mvccpb.KeyValue) {
	ki.hist = append(ki.hist, kv)
	if len(ki.hist) == 2 {
		// hist has left first, whose pointer would otherwise keep the
		// key's first version, and its value, after compaction drops it.
		ki.first[0] = nil
	}
	s.log = append(s.log, logEntry{kv: kv, prev: prev})
	s.versions++
	s.bytes += int64(s.valueLen(kv))
}

// logSearch returns the position of the first log entry with mod_revision
// >= rev.
//
// Revisions in the log are dense and each has at least one event, which
// pins the answer between rev-first and n-(last-rev+1): a point when every
// revision has one event, as nearly all do. The check afterwards guards
// against a log restored with gaps.
func (s *Store) logSearch(rev int64) int {
	log := s.log
	n := len(log)
	if n == 0 || rev <= log[0].kv.ModRevision {
		return 0
	}
	first, last := log[0].kv.ModRevision, log[n-1].kv.ModRevision
	if rev > last {
		return n
	}
	lo, hi := int(rev-first), n-int(last-rev+1)
	if lo <= hi {
		p := lo + sort.Search(hi-lo, func(i int) bool { return log[lo+i].kv.ModRevision >= rev })
		if log[p].kv.ModRevision >= rev && (p == 0 || log[p-1].kv.ModRevision < rev) {
			return p
		}
	}
	return sort.Search(n, func(i int) bool { return log[i].kv.ModRevision >= rev })
}

// Rollback discards every write above rev: they never became durable.
// rev must not be below the compaction floor, whose versions are gone.
func (s *Store) Rollback(rev int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rev >= s.rev.Load() {
		return
	}
	if rev < s.compactRev.Load() {
		panic(fmt.Sprintf("mvcc: rollback to revision %d below compaction floor %d", rev, s.compactRev.Load()))
	}
	p := s.logSearch(rev + 1)
	for i := len(s.log) - 1; i >= p; i-- {
		kv := s.log[i].kv
		ki := s.lookup(kv.Key)
		wasLive := ki.live()
		ki.hist[len(ki.hist)-1] = nil
		ki.hist = ki.hist[:len(ki.hist)-1]
		s.versions--
		s.bytes -= int64(s.valueLen(kv))
		s.unspill(kv)
		if len(ki.hist) == 0 {
			s.removeKey(ki)
		} else if live := ki.live(); live != wasLive {
			s.idx.setLive(ki.key(), live)
		}
	}
	clear(s.log[p:])
	s.log = s.log[:p]
	s.rev.Store(rev)
	if s.idx.sparse() {
		s.idx.rebuild()
	}
}
