package storetest

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/objstore"
)

// NewStore returns an empty store isolated from every other store it returned.
// Run closes each store when its subtest ends.
type NewStore func(t *testing.T) objstore.Store

// Run runs the conformance suite against the stores newStore returns.
func Run(t *testing.T, newStore NewStore) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s objstore.Store)
	}{
		{"GetMissing", testGetMissing},
		{"PutIfAbsentGet", testPutIfAbsentGet},
		{"PutIfAbsentExisting", testPutIfAbsentExisting},
		{"EmptyBody", testEmptyBody},
		{"PutIfMatch", testPutIfMatch},
		{"PutIfMatchStale", testPutIfMatchStale},
		{"PutIfMatchMissing", testPutIfMatchMissing},
		{"PutIfMatchAfterDelete", testPutIfMatchAfterDelete},
		{"PutIfMatchEmptyETag", testPutIfMatchEmptyETag},
		{"ETagChangesOnEveryWrite", testETagChanges},
		{"ETagIsContentHash", testETagIsContentHash},
		{"DeleteIdempotent", testDeleteIdempotent},
		{"BodiesDoNotAlias", testNoAlias},
		{"InvalidKeys", testInvalidKeys},
		{"UnusualKeys", testUnusualKeys},
		{"ListOrderAndPrefix", testList},
		{"ListPaging", testListPaging},
		{"ListInfo", testListInfo},
		{"LargeBody", testLargeBody},
		{"RacePutIfAbsent", testRacePutIfAbsent},
		{"RacePutIfMatch", testRacePutIfMatch},
		{"ContextCanceled", testContextCanceled},
		{"GetReaderMissing", testGetReaderMissing},
		{"PutIfAbsentFromGet", testPutIfAbsentFromGet},
		{"PutIfAbsentFromEmpty", testPutIfAbsentFromEmpty},
		{"PutIfAbsentFromExisting", testPutIfAbsentFromExisting},
		{"PutIfAbsentFromWrongSize", testPutIfAbsentFromWrongSize},
		{"PutIfAbsentFromReaderFails", testPutIfAbsentFromReaderFails},
		{"PutIfAbsentFromReaderFailsLater", testPutIfAbsentFromReaderFailsLater},
		{"RacePutIfAbsentFrom", testRacePutIfAbsentFrom},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("close: %v", err)
				}
			})
			tc.fn(t, s)
		})
	}
}

func ctxFor(t *testing.T) context.Context {
	// A generous bound so a hung backend fails the test instead of the whole binary.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func mustPutIfAbsent(t *testing.T, s objstore.Store, key string, body []byte) string {
	t.Helper()
	etag, err := s.PutIfAbsent(ctxFor(t), key, body)
	if err != nil {
		t.Fatalf("PutIfAbsent(%q): %v", key, err)
	}
	if etag == "" {
		t.Fatalf("PutIfAbsent(%q) returned an empty etag", key)
	}
	return etag
}

func mustGet(t *testing.T, s objstore.Store, key string) ([]byte, string) {
	t.Helper()
	body, etag, err := s.Get(ctxFor(t), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return body, etag
}

func expectBody(t *testing.T, s objstore.Store, key string, want []byte, wantETag string) {
	t.Helper()
	body, etag := mustGet(t, s, key)
	if !bytes.Equal(body, want) {
		t.Fatalf("Get(%q) body = %.40q (len %d), want %.40q (len %d)", key, body, len(body), want, len(want))
	}
	if wantETag != "" && etag != wantETag {
		t.Fatalf("Get(%q) etag = %q, want %q", key, etag, wantETag)
	}
}

func expectErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: err = %v, want %v", what, err, want)
	}
}

func expectMissing(t *testing.T, s objstore.Store, key string) {
	t.Helper()
	_, _, err := s.Get(ctxFor(t), key)
	expectErr(t, fmt.Sprintf("Get(%q)", key), err, objstore.ErrNotFound)
}

func testGetMissing(t *testing.T, s objstore.Store) {
	body, etag, err := s.Get(ctxFor(t), "nope/missing")
	expectErr(t, "Get missing", err, objstore.ErrNotFound)
	if errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Fatalf("Get missing also matches ErrPreconditionFailed: %v", err)
	}
	if body != nil || etag != "" {
		t.Fatalf("Get missing returned body %q etag %q", body, etag)
	}
}

func testPutIfAbsentGet(t *testing.T, s objstore.Store) {
	etag := mustPutIfAbsent(t, s, "a/b/c.json", []byte(`{"v":1}`))
	expectBody(t, s, "a/b/c.json", []byte(`{"v":1}`), etag)
	if strings.ContainsAny(etag, `"`) {
		t.Fatalf("etag %q carries quotes", etag)
	}
	// A second Get returns the same ETag: it names the content, not the read.
	if _, etag2 := mustGet(t, s, "a/b/c.json"); etag2 != etag {
		t.Fatalf("etag changed between reads: %q then %q", etag, etag2)
	}
}

func testPutIfAbsentExisting(t *testing.T, s objstore.Store) {
	etag := mustPutIfAbsent(t, s, "k", []byte("first"))
	_, err := s.PutIfAbsent(ctxFor(t), "k", []byte("second"))
	expectErr(t, "PutIfAbsent existing", err, objstore.ErrPreconditionFailed)
	// Same bytes as the existing object must be refused too: create-only is
	// about the key, not the content.
	_, err = s.PutIfAbsent(ctxFor(t), "k", []byte("first"))
	expectErr(t, "PutIfAbsent existing same body", err, objstore.ErrPreconditionFailed)
	expectBody(t, s, "k", []byte("first"), etag)
}

func testEmptyBody(t *testing.T, s objstore.Store) {
	etag := mustPutIfAbsent(t, s, "empty", nil)
	body, got := mustGet(t, s, "empty")
	if len(body) != 0 || got != etag {
		t.Fatalf("Get empty = %q, %q; want empty body, etag %q", body, got, etag)
	}
	infos, err := s.List(ctxFor(t), "empty", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].Size != 0 {
		t.Fatalf("List empty = %+v", infos)
	}
	etag2, err := s.PutIfMatch(ctxFor(t), "empty", []byte("now full"), etag)
	if err != nil {
		t.Fatalf("PutIfMatch over empty: %v", err)
	}
	expectBody(t, s, "empty", []byte("now full"), etag2)
}

func testPutIfMatch(t *testing.T, s objstore.Store) {
	e1 := mustPutIfAbsent(t, s, "cas", []byte("v1"))
	e2, err := s.PutIfMatch(ctxFor(t), "cas", []byte("v2"), e1)
	if err != nil {
		t.Fatalf("PutIfMatch: %v", err)
	}
	if e2 == "" || e2 == e1 {
		t.Fatalf("PutIfMatch etag = %q after %q", e2, e1)
	}
	expectBody(t, s, "cas", []byte("v2"), e2)
	e3, err := s.PutIfMatch(ctxFor(t), "cas", []byte("v3"), e2)
	if err != nil {
		t.Fatalf("second PutIfMatch: %v", err)
	}
	expectBody(t, s, "cas", []byte("v3"), e3)
}

func testPutIfMatchStale(t *testing.T, s objstore.Store) {
	e1 := mustPutIfAbsent(t, s, "cas", []byte("v1"))
	e2, err := s.PutIfMatch(ctxFor(t), "cas", []byte("v2"), e1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.PutIfMatch(ctxFor(t), "cas", []byte("v3"), e1)
	expectErr(t, "PutIfMatch stale etag", err, objstore.ErrPreconditionFailed)
	_, err = s.PutIfMatch(ctxFor(t), "cas", []byte("v3"), "0123456789abcdef0123456789abcdef")
	expectErr(t, "PutIfMatch made-up etag", err, objstore.ErrPreconditionFailed)
	expectBody(t, s, "cas", []byte("v2"), e2)
}

func testPutIfMatchMissing(t *testing.T, s objstore.Store) {
	// Pinned choice (see package objstore): a missing key fails the
	// precondition; it is not reported as ErrNotFound.
	_, err := s.PutIfMatch(ctxFor(t), "never/existed", []byte("x"), "0123456789abcdef0123456789abcdef")
	expectErr(t, "PutIfMatch missing key", err, objstore.ErrPreconditionFailed)
	if errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("PutIfMatch missing key also matches ErrNotFound: %v", err)
	}
	expectMissing(t, s, "never/existed")
}

func testPutIfMatchAfterDelete(t *testing.T, s objstore.Store) {
	e1 := mustPutIfAbsent(t, s, "gone", []byte("v1"))
	if err := s.Delete(ctxFor(t), "gone"); err != nil {
		t.Fatal(err)
	}
	_, err := s.PutIfMatch(ctxFor(t), "gone", []byte("v2"), e1)
	expectErr(t, "PutIfMatch after delete", err, objstore.ErrPreconditionFailed)
	expectMissing(t, s, "gone")
	// The key can be created again afterwards.
	e3 := mustPutIfAbsent(t, s, "gone", []byte("v3"))
	expectBody(t, s, "gone", []byte("v3"), e3)
}

func testPutIfMatchEmptyETag(t *testing.T, s objstore.Store) {
	mustPutIfAbsent(t, s, "k", []byte("v1"))
	if _, err := s.PutIfMatch(ctxFor(t), "k", []byte("v2"), ""); err == nil {
		t.Fatal("PutIfMatch with empty etag succeeded")
	}
	if _, err := s.PutIfMatch(ctxFor(t), "missing", []byte("v2"), ""); err == nil {
		t.Fatal("PutIfMatch with empty etag on a missing key succeeded")
	}
	expectBody(t, s, "k", []byte("v1"), "")
	expectMissing(t, s, "missing")
}

func testETagChanges(t *testing.T, s objstore.Store) {
	seen := map[string]int{}
	etag := mustPutIfAbsent(t, s, "counter", []byte("write 0"))
	seen[etag] = 0
	for i := 1; i <= 10; i++ {
		next, err := s.PutIfMatch(ctxFor(t), "counter", fmt.Appendf(nil, "write %d", i), etag)
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		if j, dup := seen[next]; dup {
			t.Fatalf("write %d reused the etag of write %d: %q", i, j, next)
		}
		seen[next] = i
		etag = next
	}
}

func testETagIsContentHash(t *testing.T, s objstore.Store) {
	// Documented so callers know why CAS bodies must be unique: equal bodies
	// share an ETag, so a stale If-Match succeeds after an A→B→A sequence.
	a := mustPutIfAbsent(t, s, "one", []byte("same bytes"))
	b := mustPutIfAbsent(t, s, "two", []byte("same bytes"))
	if a != b {
		t.Fatalf("equal bodies got different etags %q and %q", a, b)
	}
	if sum := md5.Sum([]byte("same bytes")); a != hex.EncodeToString(sum[:]) {
		t.Fatalf("etag %q is not the hex MD5 of the body %x", a, sum)
	}
	bb, err := s.PutIfMatch(ctxFor(t), "one", []byte("other bytes"), a)
	if err != nil {
		t.Fatal(err)
	}
	back, err := s.PutIfMatch(ctxFor(t), "one", []byte("same bytes"), bb)
	if err != nil {
		t.Fatal(err)
	}
	if back != a {
		t.Fatalf("A→B→A: etag %q, want the original %q", back, a)
	}
}

func testDeleteIdempotent(t *testing.T, s objstore.Store) {
	if err := s.Delete(ctxFor(t), "never/existed"); err != nil {
		t.Fatalf("Delete missing: %v", err)
	}
	mustPutIfAbsent(t, s, "d/x", []byte("x"))
	mustPutIfAbsent(t, s, "d/y", []byte("y"))
	for i := range 2 {
		if err := s.Delete(ctxFor(t), "d/x"); err != nil {
			t.Fatalf("Delete #%d: %v", i, err)
		}
	}
	expectMissing(t, s, "d/x")
	expectBody(t, s, "d/y", []byte("y"), "")
	infos, err := s.List(ctxFor(t), "d/", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := keysOf(infos); !slices.Equal(got, []string{"d/y"}) {
		t.Fatalf("List after delete = %q", got)
	}
}

func testNoAlias(t *testing.T, s objstore.Store) {
	body := []byte("original")
	etag := mustPutIfAbsent(t, s, "alias", body)
	body[0] = 'X'
	got, _ := mustGet(t, s, "alias")
	got[0] = 'Y'
	expectBody(t, s, "alias", []byte("original"), etag)
}

func testInvalidKeys(t *testing.T, s objstore.Store) {
	bad := []string{
		"", "/lead", "trail/", "dou//ble", ".", "..", "a/./b", "a/../b", "nul\x00", "tab\tkey", "bad\xffutf8",
		strings.Repeat("k", objstore.MaxKeyLen+1), strings.Repeat("s", objstore.MaxSegmentLen+1),
	}
	ctx := ctxFor(t)
	for _, key := range bad {
		if _, _, err := s.Get(ctx, key); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("Get(%q): err = %v, want ErrInvalidKey", key, err)
		}
		if _, err := s.PutIfAbsent(ctx, key, []byte("x")); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("PutIfAbsent(%q): err = %v, want ErrInvalidKey", key, err)
		}
		if _, _, err := s.GetReader(ctx, key); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("GetReader(%q): err = %v, want ErrInvalidKey", key, err)
		}
		if _, err := s.PutIfAbsentFrom(ctx, key, bytes.NewReader([]byte("x")), 1); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("PutIfAbsentFrom(%q): err = %v, want ErrInvalidKey", key, err)
		}
		if _, err := s.PutIfMatch(ctx, key, []byte("x"), "etag"); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("PutIfMatch(%q): err = %v, want ErrInvalidKey", key, err)
		}
		if err := s.Delete(ctx, key); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("Delete(%q): err = %v, want ErrInvalidKey", key, err)
		}
	}
	infos, err := s.List(ctx, "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 0 {
		t.Fatalf("invalid keys left objects behind: %q", keysOf(infos))
	}
}

// unusualKeys are valid keys that exercise escaping and ordering: the fs
// backend maps them to paths, S3 to URLs.
var unusualKeys = []string{
	"with space/x", "plus+sign", "percent%2Fslash", "question?mark", "hash#tag", "amp&eq=1",
	"ünïcödé/ключ", "emoji/😀", "dots.../.hidden", "trailing.dot.", "x.obj", "x.dir/x.lock", "x.tmp",
	"UPPER/lower", "tilde~", "paren(1)", "semi;colon", "comma,key", "at@sign", "star*", "quote'single",
	strings.Repeat("s", objstore.MaxSegmentLen) + "/" + strings.Repeat("t", 100),
}

func testUnusualKeys(t *testing.T, s objstore.Store) {
	etags := map[string]string{}
	for _, key := range unusualKeys {
		etags[key] = mustPutIfAbsent(t, s, key, []byte("body of "+key))
	}
	for _, key := range unusualKeys {
		expectBody(t, s, key, []byte("body of "+key), etags[key])
	}
	infos, err := s.List(ctxFor(t), "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(unusualKeys)
	slices.Sort(want)
	if got := keysOf(infos); !slices.Equal(got, want) {
		t.Fatalf("List = %q\nwant %q", got, want)
	}
	for _, key := range unusualKeys {
		if err := s.Delete(ctxFor(t), key); err != nil {
			t.Fatalf("Delete(%q): %v", key, err)
		}
		expectMissing(t, s, key)
	}
}

// listKeys are chosen so that byte order differs from a naive directory walk:
// '-' (0x2d) and '.' (0x2e) sort before '/' (0x2f) and '0' (0x30) after it.
// No key is a '/'-prefix of another: the contract forbids that layout
// because MinIO hides the deeper keys from List.
var listKeys = []string{
	"a-b", "a.b", "a/b-c", "a/b/c", "a/b/d/e", "a/b0", "a/c", "a0", "ab", "b",
	"wal/00000000000000000001", "wal/00000000000000000002", "wal/00000000000000000010",
	"z/u", "z/ü", "z/Z",
}

func putAll(t *testing.T, s objstore.Store, keys []string) {
	t.Helper()
	// Shuffled insertion so no backend can pass by remembering insertion order.
	shuffled := slices.Clone(keys)
	for i := len(shuffled) - 1; i > 0; i-- {
		j := int(randByte(t)) % (i + 1)
		shuffled[i], shuffled[j] = shuffled[j], shuffled[i]
	}
	for _, k := range shuffled {
		mustPutIfAbsent(t, s, k, []byte("v:"+k))
	}
}

func keysOf(infos []objstore.ObjectInfo) []string {
	out := make([]string, len(infos))
	for i, o := range infos {
		out[i] = o.Key
	}
	return out
}

// expected computes the contract's answer from a sorted key set.
func expected(sorted []string, prefix, startAfter string, limit int) []string {
	var out []string
	for _, k := range sorted {
		if strings.HasPrefix(k, prefix) && k > startAfter {
			out = append(out, k)
		}
	}
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}

func testList(t *testing.T, s objstore.Store) {
	putAll(t, s, listKeys)
	sorted := slices.Clone(listKeys)
	slices.Sort(sorted)
	cases := []struct {
		prefix, startAfter string
		limit              int
	}{
		{"", "", 0}, {"", "", 1}, {"", "", 5}, {"", "", 1000},
		{"a", "", 0}, {"a/", "", 0}, {"a/b", "", 0}, {"a/b/", "", 0}, {"a/b/c", "", 0}, {"a/b/d", "", 0},
		{"a/b", "a/b", 0}, {"a/", "a/b/c", 0}, {"a", "a-b", 0}, {"a", "a/", 0}, {"a", "a/b/d/e", 0},
		{"a/b/", "a/b/c", 0}, {"a/b/", "a/b/d", 0}, {"", "a/b", 3},
		{"", "a/b/c", 2}, {"", "a/", 0}, {"", "a/zzz", 0}, {"", "b", 0}, {"", "zz", 0},
		{"wal/", "", 0}, {"wal/", "wal/00000000000000000001", 1}, {"wal/0000000000000000000", "", 0},
		{"z/", "", 0}, {"z/", "z/u", 0}, {"nothing", "", 0}, {"a/b/d/e/f", "", 0}, {"", "\U0010ffff", 0},
		{"b", "a", 0}, {"a", "b", 0},
	}
	for _, c := range cases {
		infos, err := s.List(ctxFor(t), c.prefix, c.startAfter, c.limit)
		if err != nil {
			t.Fatalf("List(%q, %q, %d): %v", c.prefix, c.startAfter, c.limit, err)
		}
		got, want := keysOf(infos), expected(sorted, c.prefix, c.startAfter, c.limit)
		if !slices.Equal(got, want) {
			t.Errorf("List(%q, %q, %d) = %q\nwant %q", c.prefix, c.startAfter, c.limit, got, want)
		}
	}
}

func testListPaging(t *testing.T, s objstore.Store) {
	var keys []string
	for i := range 23 {
		keys = append(keys, fmt.Sprintf("p/%02d-x", i), fmt.Sprintf("p/%02d/sub", i))
	}
	putAll(t, s, keys)
	slices.Sort(keys)
	for _, page := range []int{1, 3, 7, 46, 100} {
		var got []string
		after := ""
		for {
			infos, err := s.List(ctxFor(t), "p/", after, page)
			if err != nil {
				t.Fatal(err)
			}
			if len(infos) > page {
				t.Fatalf("page %d returned %d entries", page, len(infos))
			}
			if len(infos) == 0 {
				break
			}
			got = append(got, keysOf(infos)...)
			after = infos[len(infos)-1].Key
		}
		if !slices.Equal(got, keys) {
			t.Fatalf("paging by %d = %q\nwant %q", page, got, keys)
		}
	}
}

func testListInfo(t *testing.T, s objstore.Store) {
	before := clock.Real().Now()
	bodies := map[string][]byte{"info/a": []byte("12345"), "info/b": make([]byte, 1000), "info/c/d": []byte("x")}
	etags := map[string]string{}
	for k, b := range bodies {
		etags[k] = mustPutIfAbsent(t, s, k, b)
	}
	// CAS one of them so List must report the replaced object's new metadata.
	newB := []byte("replaced, longer body")
	e, err := s.PutIfMatch(ctxFor(t), "info/a", newB, etags["info/a"])
	if err != nil {
		t.Fatal(err)
	}
	bodies["info/a"], etags["info/a"] = newB, e
	infos, err := s.List(ctxFor(t), "info/", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != len(bodies) {
		t.Fatalf("List = %+v", infos)
	}
	after := clock.Real().Now()
	for _, o := range infos {
		if o.Size != int64(len(bodies[o.Key])) {
			t.Errorf("%s: size %d, want %d", o.Key, o.Size, len(bodies[o.Key]))
		}
		if o.ETag != etags[o.Key] {
			t.Errorf("%s: list etag %q, put etag %q", o.Key, o.ETag, etags[o.Key])
		}
		// Loose bounds: server clocks and second-granular timestamps differ
		// from ours, but a zero or wildly wrong time is a bug.
		if o.LastModified.Before(before.Add(-time.Hour)) || o.LastModified.After(after.Add(time.Hour)) {
			t.Errorf("%s: LastModified %v outside [%v, %v]", o.Key, o.LastModified, before, after)
		}
	}
}

func randomBytes(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func randByte(t *testing.T) byte { return randomBytes(t, 1)[0] }

func testLargeBody(t *testing.T, s objstore.Store) {
	body := randomBytes(t, 5<<20+12345)
	etag := mustPutIfAbsent(t, s, "big/object", body)
	expectBody(t, s, "big/object", body, etag)
	infos, err := s.List(ctxFor(t), "big/", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].Size != int64(len(body)) || infos[0].ETag != etag {
		t.Fatalf("List big = %+v", infos)
	}
	body2 := randomBytes(t, 3<<20)
	etag2, err := s.PutIfMatch(ctxFor(t), "big/object", body2, etag)
	if err != nil {
		t.Fatal(err)
	}
	expectBody(t, s, "big/object", body2, etag2)
}

const racers = 8

// race runs fn in racers goroutines released together and returns each result.
func race(fn func(i int) (string, error)) ([]string, []error) {
	etags, errs := make([]string, racers), make([]error, racers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range racers {
		wg.Go(func() {
			<-start
			etags[i], errs[i] = fn(i)
		})
	}
	close(start)
	wg.Wait()
	return etags, errs
}

func oneWinner(t *testing.T, s objstore.Store, key string, etags []string, errs []error, body func(i int) []byte) {
	t.Helper()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("racers %d and %d both won", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, objstore.ErrPreconditionFailed):
			t.Fatalf("racer %d: unexpected error %v", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no racer won")
	}
	expectBody(t, s, key, body(winner), etags[winner])
}

func testRacePutIfAbsent(t *testing.T, s objstore.Store) {
	body := func(i int) []byte { return fmt.Appendf(nil, "racer %d", i) }
	for round := range 3 {
		key := fmt.Sprintf("race/absent/%d", round)
		etags, errs := race(func(i int) (string, error) { return s.PutIfAbsent(ctxFor(t), key, body(i)) })
		oneWinner(t, s, key, etags, errs, body)
	}
}

func testRacePutIfMatch(t *testing.T, s objstore.Store) {
	for round := range 3 {
		key := fmt.Sprintf("race/cas/%d", round)
		base := mustPutIfAbsent(t, s, key, []byte("base"))
		body := func(i int) []byte { return fmt.Appendf(nil, "round %d racer %d", round, i) }
		etags, errs := race(func(i int) (string, error) { return s.PutIfMatch(ctxFor(t), key, body(i), base) })
		oneWinner(t, s, key, etags, errs, body)
	}
}

func testContextCanceled(t *testing.T, s objstore.Store) {
	etag := mustPutIfAbsent(t, s, "c/exists", []byte("v1"))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s with canceled context: err = %v, want context.Canceled", what, err)
		}
	}
	_, _, err := s.Get(ctx, "c/exists")
	check("Get", err)
	_, err = s.PutIfAbsent(ctx, "c/new", []byte("x"))
	check("PutIfAbsent", err)
	_, err = s.PutIfMatch(ctx, "c/exists", []byte("v2"), etag)
	check("PutIfMatch", err)
	_, _, err = s.GetReader(ctx, "c/exists")
	check("GetReader", err)
	_, err = s.PutIfAbsentFrom(ctx, "c/streamed", bytes.NewReader([]byte("x")), 1)
	check("PutIfAbsentFrom", err)
	expectMissing(t, s, "c/streamed")
	check("Delete", s.Delete(ctx, "c/exists"))
	_, err = s.List(ctx, "c/", "", 0)
	check("List", err)
	// A call canceled before it started must not have written anything.
	expectMissing(t, s, "c/new")
	expectBody(t, s, "c/exists", []byte("v1"), etag)
}

// readAll reads key through GetReader.
func readAll(t *testing.T, s objstore.Store, key string) ([]byte, string) {
	t.Helper()
	rc, etag, err := s.GetReader(ctxFor(t), key)
	if err != nil {
		t.Fatalf("GetReader(%q): %v", key, err)
	}
	defer rc.Close()
	body, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("GetReader(%q): read: %v", key, err)
	}
	return body, etag
}

func testGetReaderMissing(t *testing.T, s objstore.Store) {
	rc, etag, err := s.GetReader(ctxFor(t), "nope/missing")
	expectErr(t, "GetReader missing", err, objstore.ErrNotFound)
	if rc != nil || etag != "" {
		t.Fatalf("GetReader missing returned a body or etag %q", etag)
	}
}

func testPutIfAbsentFromGet(t *testing.T, s objstore.Store) {
	body := randomBytes(t, 5<<20+12345)
	r := bytes.NewReader(body)
	// Left part-way through: the store reads the whole body regardless.
	if _, err := r.Seek(1000, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	etag, err := s.PutIfAbsentFrom(ctxFor(t), "big/streamed", r, int64(len(body)))
	if err != nil {
		t.Fatalf("PutIfAbsentFrom: %v", err)
	}
	if sum := md5.Sum(body); etag != hex.EncodeToString(sum[:]) {
		t.Fatalf("etag %q is not the hex MD5 of the body %x", etag, sum)
	}
	expectBody(t, s, "big/streamed", body, etag)
	got, getETag := readAll(t, s, "big/streamed")
	if !bytes.Equal(got, body) || getETag != etag {
		t.Fatalf("GetReader = %d bytes, etag %q; want %d bytes, etag %q", len(got), getETag, len(body), etag)
	}
	infos, err := s.List(ctxFor(t), "big/", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].Size != int64(len(body)) || infos[0].ETag != etag {
		t.Fatalf("List = %+v", infos)
	}
	// A streamed object is an ordinary object: CAS replaces it and
	// GetReader sees the new body.
	etag2, err := s.PutIfMatch(ctxFor(t), "big/streamed", []byte("small now"), etag)
	if err != nil {
		t.Fatal(err)
	}
	if got, e := readAll(t, s, "big/streamed"); string(got) != "small now" || e != etag2 {
		t.Fatalf("GetReader after PutIfMatch = %q, %q", got, e)
	}
}

func testPutIfAbsentFromEmpty(t *testing.T, s objstore.Store) {
	etag, err := s.PutIfAbsentFrom(ctxFor(t), "empty", bytes.NewReader(nil), 0)
	if err != nil {
		t.Fatalf("PutIfAbsentFrom empty: %v", err)
	}
	if got, e := readAll(t, s, "empty"); len(got) != 0 || e != etag {
		t.Fatalf("GetReader empty = %q, %q; want empty body, etag %q", got, e, etag)
	}
}

func testPutIfAbsentFromExisting(t *testing.T, s objstore.Store) {
	etag := mustPutIfAbsent(t, s, "k", []byte("first"))
	_, err := s.PutIfAbsentFrom(ctxFor(t), "k", bytes.NewReader([]byte("second")), 6)
	expectErr(t, "PutIfAbsentFrom existing", err, objstore.ErrPreconditionFailed)
	_, err = s.PutIfAbsentFrom(ctxFor(t), "k", bytes.NewReader([]byte("first")), 5)
	expectErr(t, "PutIfAbsentFrom existing same body", err, objstore.ErrPreconditionFailed)
	expectBody(t, s, "k", []byte("first"), etag)

	// And the other way round: a streamed create is a create.
	e2, err := s.PutIfAbsentFrom(ctxFor(t), "s", bytes.NewReader([]byte("streamed")), 8)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.PutIfAbsent(ctxFor(t), "s", []byte("other"))
	expectErr(t, "PutIfAbsent over a streamed object", err, objstore.ErrPreconditionFailed)
	expectBody(t, s, "s", []byte("streamed"), e2)
}

func testPutIfAbsentFromWrongSize(t *testing.T, s objstore.Store) {
	body := []byte("twelve bytes")
	for _, size := range []int64{0, 11, 13, -1} {
		_, err := s.PutIfAbsentFrom(ctxFor(t), "sized", bytes.NewReader(body), size)
		if err == nil || errors.Is(err, objstore.ErrPreconditionFailed) {
			t.Fatalf("PutIfAbsentFrom of %d bytes said to be %d: err = %v, want a body error", len(body), size, err)
		}
		expectMissing(t, s, "sized")
	}
}

// errBodyRead is what failingBody returns.
var errBodyRead = errors.New("storetest: body read failed")

// failingBody is a seekable body that fails the first read past failAt
// on every pass over it from the start, from the failFrom-th pass on. A
// backend may make more than one pass (the S3 SDK reads the body once to
// sign it and again to send it). It has no other methods (no WriteTo), so
// nothing can read around the failure.
type failingBody struct {
	r              *bytes.Reader
	failAt         int64
	failFrom, pass int
}

func newFailingBody(body []byte, failAt int64, failFrom int) *failingBody {
	return &failingBody{r: bytes.NewReader(body), failAt: failAt, failFrom: failFrom}
}

func (f *failingBody) Read(p []byte) (int, error) {
	pos := f.r.Size() - int64(f.r.Len())
	if pos == 0 && len(p) > 0 {
		f.pass++
	}
	if f.pass >= f.failFrom && pos+int64(len(p)) > f.failAt {
		if pos >= f.failAt {
			return 0, errBodyRead
		}
		p = p[:f.failAt-pos]
	}
	return f.r.Read(p)
}

func (f *failingBody) Seek(offset int64, whence int) (int64, error) { return f.r.Seek(offset, whence) }

func testPutIfAbsentFromReaderFails(t *testing.T, s objstore.Store) {
	body := randomBytes(t, 3<<20)
	fb := newFailingBody(body, 1<<20, 1)
	if _, err := s.PutIfAbsentFrom(ctxFor(t), "broken/body", fb, int64(len(body))); err == nil {
		t.Fatal("PutIfAbsentFrom with a body that fails half-way succeeded")
	}
	expectMissing(t, s, "broken/body")
	infos, err := s.List(ctxFor(t), "broken/", "", 0)
	if err != nil || len(infos) != 0 {
		t.Fatalf("List after a failed streamed create = %+v, %v", infos, err)
	}
	// Nothing was left to block a later create of the key.
	etag, err := s.PutIfAbsentFrom(ctxFor(t), "broken/body", bytes.NewReader(body), int64(len(body)))
	if err != nil {
		t.Fatalf("PutIfAbsentFrom after a failed one: %v", err)
	}
	expectBody(t, s, "broken/body", body, etag)
}

// testPutIfAbsentFromReaderFailsLater fails the body only on a second pass:
// a backend that reads it once succeeds, one that reads it again (to send
// it after signing) fails while sending. Either way the object is all or
// nothing.
func testPutIfAbsentFromReaderFailsLater(t *testing.T, s objstore.Store) {
	body := randomBytes(t, 3<<20)
	fb := newFailingBody(body, 1<<20, 2)
	etag, err := s.PutIfAbsentFrom(ctxFor(t), "late/body", fb, int64(len(body)))
	t.Logf("%d passes over the body; err = %v", fb.pass, err)
	if err != nil {
		expectMissing(t, s, "late/body")
		return
	}
	expectBody(t, s, "late/body", body, etag)
}

func testRacePutIfAbsentFrom(t *testing.T, s objstore.Store) {
	body := func(i int) []byte { return bytes.Repeat(fmt.Appendf(nil, "racer %d ", i), 8<<10) }
	for round := range 3 {
		key := fmt.Sprintf("race/streamed/%d", round)
		etags, errs := race(func(i int) (string, error) {
			b := body(i)
			return s.PutIfAbsentFrom(ctxFor(t), key, bytes.NewReader(b), int64(len(b)))
		})
		oneWinner(t, s, key, etags, errs, body)
	}
}
