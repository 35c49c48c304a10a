package mvcc

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// refStore is the reference: every version of every key in a map, never
// compacted (compaction only moves the floor), each read answered by brute
// force.
type refStore struct {
	hist   map[string][]*mvccpb.KeyValue // tombstones have Version 0
	events []refEvent
	rev    int64
	floor  int64
}

type refEvent struct {
	rev int64
	ev  *mvccpb.Event
}

func newRef() *refStore { return &refStore{hist: map[string][]*mvccpb.KeyValue{}} }

func (m *refStore) latest(key string) *mvccpb.KeyValue {
	h := m.hist[key]
	if len(h) == 0 || h[len(h)-1].Version == 0 {
		return nil
	}
	return h[len(h)-1]
}

func (m *refStore) put(rev int64, key, val string, lease int64) string {
	prev := m.latest(key)
	kv := &mvccpb.KeyValue{Key: []byte(key), Value: []byte(val), CreateRevision: rev, ModRevision: rev, Version: 1, Lease: lease}
	if prev != nil {
		kv.CreateRevision, kv.Version = prev.CreateRevision, prev.Version+1
	}
	return m.record(rev, key, kv, prev, mvccpb.PUT)
}

func (m *refStore) del(rev int64, key string) string {
	prev := m.latest(key)
	if prev == nil {
		return "<nil>"
	}
	return m.record(rev, key, &mvccpb.KeyValue{Key: []byte(key), ModRevision: rev}, prev, mvccpb.DELETE)
}

func (m *refStore) record(rev int64, key string, kv, prev *mvccpb.KeyValue, typ mvccpb.Event_EventType) string {
	m.hist[key] = append(m.hist[key], kv)
	ev := &mvccpb.Event{Type: typ, Kv: kv, PrevKv: prev}
	m.events = append(m.events, refEvent{rev: rev, ev: ev})
	m.rev = rev
	return evStr(ev)
}

func (m *refStore) rollback(rev int64) {
	for k, h := range m.hist {
		for len(h) > 0 && h[len(h)-1].ModRevision > rev {
			h = h[:len(h)-1]
		}
		if len(h) == 0 {
			delete(m.hist, k)
		} else {
			m.hist[k] = h
		}
	}
	for len(m.events) > 0 && m.events[len(m.events)-1].rev > rev {
		m.events = m.events[:len(m.events)-1]
	}
	m.rev = min(m.rev, rev)
}

func (m *refStore) at(key string, rev int64) *mvccpb.KeyValue {
	var found *mvccpb.KeyValue
	for _, kv := range m.hist[key] {
		if kv.ModRevision <= rev {
			found = kv
		}
	}
	if found == nil || found.Version == 0 {
		return nil
	}
	return found
}

func (m *refStore) liveKeys() int64 {
	n := int64(0)
	for k := range m.hist {
		if m.latest(k) != nil {
			n++
		}
	}
	return n
}

// rangeAt follows etcd's recipe literally: collect, count, filter, sort,
// limit, strip.
func (m *refStore) rangeAt(key string, end []byte, opt RangeOptions) (keys []string, count int64, more bool, err error) {
	if opt.Rev > m.rev {
		return nil, 0, false, ErrFutureRev
	}
	if opt.Rev < m.floor {
		return nil, 0, false, ErrCompacted
	}
	var names []string
	for k := range m.hist {
		switch {
		case len(end) == 0 && k == key,
			string(end) == "\x00" && k >= key,
			len(end) > 0 && string(end) != "\x00" && k >= key && k < string(end):
			names = append(names, k)
		}
	}
	sort.Strings(names)
	var kvs []*mvccpb.KeyValue
	for _, k := range names {
		if kv := m.at(k, opt.Rev); kv != nil {
			kvs = append(kvs, kv)
		}
	}
	count = int64(len(kvs))
	if opt.CountOnly {
		return []string{}, count, false, nil
	}
	// etcd fetches limit+1 keys in key order unless it filters or sorts
	// in an explicit order.
	fetch := opt.Limit
	if opt.SortOrder != pb.RangeRequest_NONE || opt.MinModRev != 0 || opt.MaxModRev != 0 || opt.MinCreateRev != 0 || opt.MaxCreateRev != 0 {
		fetch = 0
	}
	if fetch > 0 && int64(len(kvs)) > fetch+1 {
		kvs = kvs[:fetch+1]
	}
	var kept []*mvccpb.KeyValue
	for _, kv := range kvs {
		if opt.MinModRev != 0 && kv.ModRevision < opt.MinModRev || opt.MaxModRev != 0 && kv.ModRevision > opt.MaxModRev ||
			opt.MinCreateRev != 0 && kv.CreateRevision < opt.MinCreateRev || opt.MaxCreateRev != 0 && kv.CreateRevision > opt.MaxCreateRev {
			continue
		}
		kept = append(kept, kv)
	}
	order := opt.SortOrder
	if opt.SortTarget != pb.RangeRequest_KEY && order == pb.RangeRequest_NONE {
		order = pb.RangeRequest_ASCEND
	}
	if order != pb.RangeRequest_NONE {
		less := func(a, b *mvccpb.KeyValue) bool {
			switch opt.SortTarget {
			case pb.RangeRequest_VERSION:
				return a.Version < b.Version
			case pb.RangeRequest_CREATE:
				return a.CreateRevision < b.CreateRevision
			case pb.RangeRequest_MOD:
				return a.ModRevision < b.ModRevision
			case pb.RangeRequest_VALUE:
				return string(a.Value) < string(b.Value)
			}
			return string(a.Key) < string(b.Key)
		}
		sort.SliceStable(kept, func(i, j int) bool {
			if order == pb.RangeRequest_DESCEND {
				return less(kept[j], kept[i])
			}
			return less(kept[i], kept[j])
		})
	}
	if opt.Limit > 0 && int64(len(kept)) > opt.Limit {
		kept, more = kept[:opt.Limit], true
	}
	keys = []string{}
	for _, kv := range kept {
		if opt.KeysOnly {
			c := *kv
			c.Value = nil
			kv = &c
		}
		keys = append(keys, kvStr(kv))
	}
	return keys, count, more, nil
}

func (m *refStore) eventsAt(from, to int64, limit int) ([]string, int64, error) {
	if from < m.floor {
		return nil, from, ErrCompacted
	}
	to = min(to, m.rev)
	if from > to {
		return []string{}, from, nil
	}
	out := []string{}
	last := int64(-1)
	for _, e := range m.events {
		if e.rev < from || e.rev > to {
			continue
		}
		if limit > 0 && len(out) >= limit && e.rev != last {
			return out, e.rev, nil
		}
		out = append(out, evStr(withFloor(e.ev, m.floor)))
		last = e.rev
	}
	return out, to + 1, nil
}

// versionsAbove counts versions a compacted store must still hold.
func (m *refStore) versionsAbove(floor int64) int64 {
	n := int64(0)
	for _, h := range m.hist {
		for _, kv := range h {
			if kv.ModRevision >= floor {
				n++
			}
		}
	}
	return n
}

var modelAlphabet = []byte{'a', 'b', 0, 0xff}

func randKey(rng *rand.Rand) string {
	n := 1 + rng.IntN(3)
	b := make([]byte, n)
	for i := range b {
		b[i] = modelAlphabet[rng.IntN(len(modelAlphabet))]
	}
	return string(b)
}

func TestModel(t *testing.T) {
	eachKind(t, func(t *testing.T, s *Store) {
		for seed := range uint64(3) {
			t.Run(fmt.Sprint(seed), func(t *testing.T) { runModel(t, like(t, s), seed, 2500) })
		}
	})
}

func runModel(t *testing.T, s *Store, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 99))
	m := newRef()
	// Small batches make compactions pause, as large stores do.
	s.compactBatch = 3
	// Seed 0 compacts rarely, so historic counts take the range walk.
	compactOdds := 20
	if seed == 0 {
		compactOdds = 400
	}
	for step := range steps {
		switch r := rng.IntN(100); {
		case r < 2 && s.Rev() > 0:
			s = restore(t, s)
			s.compactBatch = 3
		case r < 5:
			rev := m.floor + rng.Int64N(max(1, m.rev-m.floor+3)) - 1
			if rev < m.floor {
				rev = m.floor
			}
			s.Rollback(rev)
			m.rollback(rev)
		case r < 10 && rng.IntN(compactOdds) < 20:
			rev := m.floor + rng.Int64N(m.rev-m.floor+2)
			err := s.Compact(rev)
			switch {
			case rev <= m.floor:
				if !errors.Is(err, ErrCompacted) {
					t.Fatalf("step %d: compact %d at floor %d: %v", step, rev, m.floor, err)
				}
			case rev > m.rev:
				if !errors.Is(err, ErrFutureRev) {
					t.Fatalf("step %d: compact %d at rev %d: %v", step, rev, m.rev, err)
				}
			default:
				if err != nil {
					t.Fatalf("step %d: compact %d: %v", step, rev, err)
				}
				m.floor = rev
			}
		default:
			rev := s.Rev() + 1
			for range 1 + rng.IntN(3) {
				k := randKey(rng)
				var got, want string
				if rng.IntN(10) < 3 {
					got, want = evStr(s.Delete(rev, []byte(k))), m.del(rev, k)
				} else {
					v := fmt.Sprint(rng.IntN(5))
					lease := rng.Int64N(2)
					got, want = evStr(s.Put(rev, []byte(k), []byte(v), lease)), m.put(rev, k, v, lease)
				}
				if got != want {
					t.Fatalf("step %d: write %q: %s, want %s", step, k, got, want)
				}
			}
		}
		if s.Rev() != m.rev || s.CompactRev() != m.floor {
			t.Fatalf("step %d: rev %d floor %d, want %d %d", step, s.Rev(), s.CompactRev(), m.rev, m.floor)
		}
		st := s.Stats()
		if st.Keys != m.liveKeys() {
			t.Fatalf("step %d: %d live keys, want %d", step, st.Keys, m.liveKeys())
		}
		if bound := m.versionsAbove(m.floor) + int64(len(m.hist)); st.Versions > bound {
			t.Fatalf("step %d: holds %d versions, bound %d", step, st.Versions, bound)
		}
		for range 3 {
			checkRange(t, step, rng, s, m)
		}
		from := m.floor + rng.Int64N(m.rev-m.floor+3) - 1
		to := from + rng.Int64N(6)
		limit := rng.IntN(5) - 1
		evs, next, err := s.Events(from, to, limit)
		wevs, wnext, werr := m.eventsAt(from, to, limit)
		if !errors.Is(err, werr) || err == nil && (!slices.Equal(evStrs(evs), wevs) || next != wnext) {
			t.Fatalf("step %d: Events(%d, %d, %d) = %q %d %v, want %q %d %v", step, from, to, limit, evStrs(evs), next, err, wevs, wnext, werr)
		}
	}
	checkTree(t, &s.idx)
	sameStore(t, true, s, restore(t, s))
}

func checkRange(t *testing.T, step int, rng *rand.Rand, s *Store, m *refStore) {
	key := randKey(rng)
	var end []byte
	switch rng.IntN(4) {
	case 0:
	case 1:
		end = []byte{0}
	default:
		end = []byte(randKey(rng))
	}
	if rng.IntN(8) == 0 {
		key = ""
	}
	optRev := func() int64 {
		if rng.IntN(3) == 0 {
			return 0
		}
		return m.floor + rng.Int64N(m.rev-m.floor+1)
	}
	opt := RangeOptions{
		Rev:        m.floor + rng.Int64N(m.rev-m.floor+3) - 1,
		Limit:      rng.Int64N(5),
		KeysOnly:   rng.IntN(4) == 0,
		CountOnly:  rng.IntN(8) == 0,
		SortOrder:  pb.RangeRequest_SortOrder(rng.IntN(3)),
		SortTarget: pb.RangeRequest_SortTarget(rng.IntN(5)),
	}
	if rng.IntN(3) == 0 {
		opt.SortOrder, opt.SortTarget = 0, 0
	}
	if rng.IntN(3) == 0 {
		opt.MinModRev, opt.MaxModRev, opt.MinCreateRev, opt.MaxCreateRev = optRev(), optRev(), optRev(), optRev()
	}
	res, err := s.Range([]byte(key), end, opt)
	wkeys, wcount, wmore, werr := m.rangeAt(key, end, opt)
	desc := func() string {
		return fmt.Sprintf("step %d: Range(%q, %q, %+v)", step, key, end, opt)
	}
	if !errors.Is(err, werr) {
		t.Fatalf("%s: err %v, want %v", desc(), err, werr)
	}
	if err != nil {
		return
	}
	if got := kvStrs(res.KVs); !slices.Equal(got, wkeys) || res.Count != wcount || res.More != wmore {
		t.Fatalf("%s:\n got %q count %d more %v\nwant %q count %d more %v", desc(),
			strings.Join(got, " "), res.Count, res.More, strings.Join(wkeys, " "), wcount, wmore)
	}
}

// withFloor drops a previous version below the compaction floor, as
// clients must not see one.
func withFloor(ev *mvccpb.Event, floor int64) *mvccpb.Event {
	if ev.PrevKv == nil || ev.PrevKv.ModRevision >= floor {
		return ev
	}
	return &mvccpb.Event{Type: ev.Type, Kv: ev.Kv}
}
