package mvcc

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// op is one mutation of a test transaction.
type op struct {
	del   bool
	key   string
	val   string
	lease int64
}

func put(k, v string) op { return op{key: k, val: v} }
func del(k string) op    { return op{del: true, key: k} }

// apply writes each txn at the next revision.
func apply(t testing.TB, s *Store, txns ...[]op) {
	t.Helper()
	for _, txn := range txns {
		rev := s.Rev() + 1
		for _, o := range txn {
			if o.del {
				s.Delete(rev, []byte(o.key))
			} else {
				s.Put(rev, []byte(o.key), []byte(o.val), o.lease)
			}
		}
		if s.Rev() != rev {
			t.Fatalf("txn %v did not write revision %d", txn, rev)
		}
	}
}

// kvStr renders a KeyValue as key=value/create/mod/version[+lease].
func kvStr(kv *mvccpb.KeyValue) string {
	if kv == nil {
		return "<nil>"
	}
	s := fmt.Sprintf("%s=%s/%d/%d/%d", kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version)
	if kv.Lease != 0 {
		s += fmt.Sprintf("+%d", kv.Lease)
	}
	return s
}

func kvStrs(kvs []*mvccpb.KeyValue) []string {
	out := []string{}
	for _, kv := range kvs {
		out = append(out, kvStr(kv))
	}
	return out
}

// rangeHistory is the history the Range table reads. Its state:
//
//	rev 1: a=1/1/1/1 b=1/1/1/1
//	rev 2: c=3/2/2/1
//	rev 3: a=22/1/3/2
//	rev 4: b deleted
//	rev 5: b=bb/5/5/1 (recreated: create and version reset)
//	rev 6: d=4/6/6/1 e=5/6/6/1, c deleted
//	rev 7: a=333/1/7/3 lease 7
//	rev 8..10: foo=x, foo/bar=y, fop=z
func rangeHistory(t testing.TB) *Store {
	s := New()
	apply(t, s,
		[]op{put("a", "1"), put("b", "1")},
		[]op{put("c", "3")},
		[]op{put("a", "22")},
		[]op{del("b")},
		[]op{put("b", "bb")},
		[]op{put("d", "4"), put("e", "5"), del("c")},
		[]op{{key: "a", val: "333", lease: 7}},
		[]op{put("foo", "x")},
		[]op{put("foo/bar", "y")},
		[]op{put("fop", "z")},
	)
	return s
}

var (
	kvA    = "a=333/1/7/3+7"
	kvB    = "b=bb/5/5/1"
	kvD    = "d=4/6/6/1"
	kvE    = "e=5/6/6/1"
	kvFoo  = "foo=x/8/8/1"
	kvFooB = "foo/bar=y/9/9/1"
	kvFop  = "fop=z/10/10/1"
	all10  = []string{kvA, kvB, kvD, kvE, kvFoo, kvFooB, kvFop}
)

func TestRange(t *testing.T) {
	s := rangeHistory(t)
	const (
		none = pb.RangeRequest_NONE
		asc  = pb.RangeRequest_ASCEND
		desc = pb.RangeRequest_DESCEND
	)
	all := "\x00"
	tests := []struct {
		name     string
		key, end string
		opt      RangeOptions
		want     []string
		count    int64
		more     bool
	}{
		{name: "single key latest", key: "a", opt: RangeOptions{Rev: 10}, want: []string{kvA}, count: 1},
		{name: "single key first version", key: "a", opt: RangeOptions{Rev: 2}, want: []string{"a=1/1/1/1"}, count: 1},
		{name: "single key second version", key: "a", opt: RangeOptions{Rev: 6}, want: []string{"a=22/1/3/2"}, count: 1},
		{name: "single key before creation", key: "d", opt: RangeOptions{Rev: 5}, want: []string{}},
		{name: "single key deleted", key: "b", opt: RangeOptions{Rev: 4}, want: []string{}},
		{name: "single key recreated", key: "b", opt: RangeOptions{Rev: 5}, want: []string{kvB}, count: 1},
		{name: "single key missing", key: "zz", opt: RangeOptions{Rev: 10}, want: []string{}},
		{name: "single key count only", key: "a", opt: RangeOptions{Rev: 10, CountOnly: true}, want: []string{}, count: 1},
		{name: "single key filtered out keeps count", key: "a", opt: RangeOptions{Rev: 10, MaxModRev: 6}, want: []string{}, count: 1},
		{name: "range", key: "a", end: "e", opt: RangeOptions{Rev: 10}, want: []string{kvA, kvB, kvD}, count: 3},
		{name: "range end is exclusive and key inclusive", key: "b", end: "d", opt: RangeOptions{Rev: 10}, want: []string{kvB}, count: 1},
		{name: "prefix", key: "foo", end: "fop", opt: RangeOptions{Rev: 10}, want: []string{kvFoo, kvFooB}, count: 2},
		{name: "all from empty key", key: "", end: all, opt: RangeOptions{Rev: 10}, want: all10, count: 7},
		{name: "all from key", key: "e", end: all, opt: RangeOptions{Rev: 10}, want: []string{kvE, kvFoo, kvFooB, kvFop}, count: 4},
		{name: "end before key", key: "e", end: "a", opt: RangeOptions{Rev: 10}, want: []string{}},
		{name: "end equals key", key: "a", end: "a", opt: RangeOptions{Rev: 10}, want: []string{}},
		{name: "limit", key: "", end: all, opt: RangeOptions{Rev: 10, Limit: 2}, want: []string{kvA, kvB}, count: 7, more: true},
		{name: "limit exact", key: "", end: all, opt: RangeOptions{Rev: 10, Limit: 7}, want: all10, count: 7},
		{name: "limit above count", key: "", end: all, opt: RangeOptions{Rev: 10, Limit: 8}, want: all10, count: 7},
		{name: "limit max int", key: "", end: all, opt: RangeOptions{Rev: 10, Limit: math.MaxInt64, SortTarget: pb.RangeRequest_MOD}, want: []string{kvB, kvD, kvE, kvA, kvFoo, kvFooB, kvFop}, count: 7},
		{name: "limit from middle", key: "c", end: all, opt: RangeOptions{Rev: 10, Limit: 2}, want: []string{kvD, kvE}, count: 5, more: true},
		{name: "historic all", key: "", end: all, opt: RangeOptions{Rev: 3}, want: []string{"a=22/1/3/2", "b=1/1/1/1", "c=3/2/2/1"}, count: 3},
		{name: "historic after delete", key: "", end: all, opt: RangeOptions{Rev: 4}, want: []string{"a=22/1/3/2", "c=3/2/2/1"}, count: 2},
		{name: "historic limit", key: "", end: all, opt: RangeOptions{Rev: 4, Limit: 1}, want: []string{"a=22/1/3/2"}, count: 2, more: true},
		{name: "historic txn with delete", key: "", end: all, opt: RangeOptions{Rev: 6}, want: []string{"a=22/1/3/2", kvB, kvD, kvE}, count: 4},
		{name: "historic range deleted key", key: "c", end: "d", opt: RangeOptions{Rev: 6}, want: []string{}},
		{name: "historic range before delete", key: "c", end: "d", opt: RangeOptions{Rev: 5}, want: []string{"c=3/2/2/1"}, count: 1},
		{name: "historic range limit count", key: "b", end: "e", opt: RangeOptions{Rev: 5, Limit: 1}, want: []string{kvB}, count: 2, more: true},
		{name: "revision zero is empty", key: "", end: all, opt: RangeOptions{Rev: 0}, want: []string{}},
		{name: "keys only", key: "a", end: "c", opt: RangeOptions{Rev: 10, KeysOnly: true}, want: []string{"a=/1/7/3+7", "b=/5/5/1"}, count: 2},
		{name: "keys only single", key: "a", opt: RangeOptions{Rev: 10, KeysOnly: true}, want: []string{"a=/1/7/3+7"}, count: 1},
		{name: "count only", key: "", end: all, opt: RangeOptions{Rev: 10, CountOnly: true}, want: []string{}, count: 7},
		{name: "count only ignores limit", key: "", end: all, opt: RangeOptions{Rev: 10, CountOnly: true, Limit: 1}, want: []string{}, count: 7},
		{name: "count only historic", key: "", end: all, opt: RangeOptions{Rev: 4, CountOnly: true}, want: []string{}, count: 2},
		{name: "count only range", key: "b", end: "foo", opt: RangeOptions{Rev: 6, CountOnly: true}, want: []string{}, count: 3},
		{name: "sort key ascend is natural", key: "", end: all, opt: RangeOptions{Rev: 10, SortOrder: asc, SortTarget: pb.RangeRequest_KEY, Limit: 3}, want: []string{kvA, kvB, kvD}, count: 7, more: true},
		{name: "sort key descend", key: "", end: all, opt: RangeOptions{Rev: 10, SortOrder: desc, SortTarget: pb.RangeRequest_KEY, Limit: 2}, want: []string{kvFop, kvFooB}, count: 7, more: true},
		{name: "sort version none means ascend", key: "", end: all, opt: RangeOptions{Rev: 10, SortTarget: pb.RangeRequest_VERSION}, want: []string{kvB, kvD, kvE, kvFoo, kvFooB, kvFop, kvA}, count: 7},
		{name: "sort version descend ties in key order", key: "", end: all, opt: RangeOptions{Rev: 10, SortOrder: desc, SortTarget: pb.RangeRequest_VERSION}, want: []string{kvA, kvB, kvD, kvE, kvFoo, kvFooB, kvFop}, count: 7},
		{name: "sort create descend", key: "", end: all, opt: RangeOptions{Rev: 10, SortOrder: desc, SortTarget: pb.RangeRequest_CREATE}, want: []string{kvFop, kvFooB, kvFoo, kvD, kvE, kvB, kvA}, count: 7},
		{name: "sort mod ascend", key: "", end: all, opt: RangeOptions{Rev: 10, SortOrder: asc, SortTarget: pb.RangeRequest_MOD}, want: []string{kvB, kvD, kvE, kvA, kvFoo, kvFooB, kvFop}, count: 7},
		{name: "sort value", key: "", end: all, opt: RangeOptions{Rev: 10, SortOrder: asc, SortTarget: pb.RangeRequest_VALUE}, want: []string{kvA, kvD, kvE, kvB, kvFoo, kvFooB, kvFop}, count: 7},
		{name: "sort value then keys only", key: "", end: all, opt: RangeOptions{Rev: 10, SortOrder: desc, SortTarget: pb.RangeRequest_VALUE, KeysOnly: true, Limit: 2}, want: []string{"fop=/10/10/1", "foo/bar=/9/9/1"}, count: 7, more: true},
		{name: "sort then limit", key: "", end: all, opt: RangeOptions{Rev: 10, SortOrder: desc, SortTarget: pb.RangeRequest_MOD, Limit: 3}, want: []string{kvFop, kvFooB, kvFoo}, count: 7, more: true},
		{name: "sort historic", key: "", end: all, opt: RangeOptions{Rev: 6, SortOrder: desc, SortTarget: pb.RangeRequest_MOD}, want: []string{kvD, kvE, kvB, "a=22/1/3/2"}, count: 4},
		{name: "sort none with none", key: "", end: all, opt: RangeOptions{Rev: 10, SortOrder: none}, want: all10, count: 7},
		{name: "min mod", key: "", end: all, opt: RangeOptions{Rev: 10, MinModRev: 6}, want: []string{kvA, kvD, kvE, kvFoo, kvFooB, kvFop}, count: 7},
		{name: "max mod", key: "", end: all, opt: RangeOptions{Rev: 10, MaxModRev: 6}, want: []string{kvB, kvD, kvE}, count: 7},
		{name: "create window", key: "", end: all, opt: RangeOptions{Rev: 10, MinCreateRev: 6, MaxCreateRev: 9}, want: []string{kvD, kvE, kvFoo, kvFooB}, count: 7},
		{name: "max create", key: "", end: all, opt: RangeOptions{Rev: 10, MaxCreateRev: 1}, want: []string{kvA}, count: 7},
		{name: "filter then limit", key: "", end: all, opt: RangeOptions{Rev: 10, MinModRev: 6, Limit: 2}, want: []string{kvA, kvD}, count: 7, more: true},
		{name: "filter limit not reached", key: "", end: all, opt: RangeOptions{Rev: 10, MaxModRev: 6, Limit: 3}, want: []string{kvB, kvD, kvE}, count: 7},
		{name: "filter sort limit", key: "", end: all, opt: RangeOptions{Rev: 10, MinCreateRev: 5, SortOrder: desc, SortTarget: pb.RangeRequest_MOD, Limit: 3}, want: []string{kvFop, kvFooB, kvFoo}, count: 7, more: true},
		{name: "filter removes all", key: "", end: all, opt: RangeOptions{Rev: 10, MinModRev: 11, Limit: 1}, want: []string{}, count: 7},
		{name: "filter historic", key: "", end: all, opt: RangeOptions{Rev: 5, MinModRev: 3}, want: []string{"a=22/1/3/2", kvB}, count: 3},
		{name: "filter count only", key: "", end: all, opt: RangeOptions{Rev: 10, MinModRev: 8, CountOnly: true}, want: []string{}, count: 7},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var end []byte
			if tc.end != "" {
				end = []byte(tc.end)
			}
			res, err := s.Range([]byte(tc.key), end, tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			if got := kvStrs(res.KVs); !slices.Equal(got, tc.want) {
				t.Errorf("kvs %q, want %q", got, tc.want)
			}
			if res.Count != tc.count || res.More != tc.more {
				t.Errorf("count %d more %v, want %d %v", res.Count, res.More, tc.count, tc.more)
			}
		})
	}
	// KeysOnly returned copies: stored values are intact.
	if res, _ := s.Range([]byte("a"), nil, RangeOptions{Rev: 10}); kvStr(res.KVs[0]) != kvA {
		t.Fatalf("stored value changed: %s", kvStr(res.KVs[0]))
	}
}

func TestRangeRevisionBounds(t *testing.T) {
	s := rangeHistory(t)
	for _, end := range []string{"", "\x00", "z"} {
		if _, err := s.Range([]byte("a"), []byte(end), RangeOptions{Rev: 11}); !errors.Is(err, ErrFutureRev) {
			t.Fatalf("end %q rev 11: %v, want ErrFutureRev", end, err)
		}
	}
	if err := s.Compact(5); err != nil {
		t.Fatal(err)
	}
	for _, end := range []string{"", "\x00", "z"} {
		_, err := s.Range([]byte("a"), []byte(end), RangeOptions{Rev: 4})
		if !errors.Is(err, ErrCompacted) {
			t.Fatalf("end %q rev 4: %v, want ErrCompacted", end, err)
		}
		if err.Error() != "mvcc: required revision has been compacted" {
			t.Fatalf("error string %q", err)
		}
	}
	// The floor itself and everything above read as before.
	res, err := s.Range(nil, []byte("\x00"), RangeOptions{Rev: 5})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := kvStrs(res.KVs), []string{"a=22/1/3/2", kvB, "c=3/2/2/1"}; !slices.Equal(got, want) {
		t.Fatalf("at floor: %q, want %q", got, want)
	}
	res, _ = s.Range(nil, []byte("\x00"), RangeOptions{Rev: 6, CountOnly: true})
	if res.Count != 4 {
		t.Fatalf("count at 6: %d", res.Count)
	}
	if _, err := s.Range([]byte("a"), nil, RangeOptions{Rev: 10}); err != nil {
		t.Fatal(err)
	}
}

// etcd sorts by a target without an order only the first limit+1 keys: the
// page, not the range. Kubernetes never asks for this; etcdctl users can.
func TestRangeSortTargetWithoutOrderSortsPage(t *testing.T) {
	s := New()
	apply(t, s,
		[]op{put("a", "1")}, []op{put("a", "2")}, []op{put("a", "3")},
		[]op{put("b", "1")}, []op{put("b", "2")},
		[]op{put("c", "1")},
	)
	res, err := s.Range([]byte("a"), []byte{0}, RangeOptions{Rev: 6, Limit: 1, SortTarget: pb.RangeRequest_VERSION})
	if err != nil {
		t.Fatal(err)
	}
	if got := kvStrs(res.KVs); !slices.Equal(got, []string{"b=2/4/5/2"}) || res.Count != 3 || !res.More {
		t.Fatalf("got %q count %d more %v", got, res.Count, res.More)
	}
	// With an explicit order etcd sorts the whole range.
	res, _ = s.Range([]byte("a"), []byte{0}, RangeOptions{Rev: 6, Limit: 1, SortTarget: pb.RangeRequest_VERSION, SortOrder: pb.RangeRequest_ASCEND})
	if got := kvStrs(res.KVs); !slices.Equal(got, []string{"c=1/6/6/1"}) {
		t.Fatalf("explicit order: %q", got)
	}
}
