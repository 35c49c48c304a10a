package fs_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/netsy-io/netsy/internal/objstore"
	"github.com/netsy-io/netsy/internal/objstore/fs"
	"github.com/netsy-io/netsy/internal/vfs"
	"github.com/netsy-io/netsy/internal/vfs/crashfs"
)

// TestPowerLoss puts the store on crashfs, writes to it from a few
// goroutines, pulls the power after a random number of disk changes (in
// Open too), and restarts it on what the disk kept, round after round,
// for many seeds. After every power loss each key must hold its last
// acknowledged version, body and ETag (or the version an operation cut
// short was writing, which was never acknowledged); Get, GetReader and
// List must agree and never fail on a half-written file; and Open must
// sweep the temp files the crash left behind, torn ones included.
//
// The disk may make a directory's entries durable before it is asked to
// (eagerFS), as a real one may; without that no temp file would outlive
// a crash. NETSY_FS_POWERLOSS_SEED replays one seed.
func TestPowerLoss(t *testing.T) {
	seeds := uint64(300)
	if testing.Short() {
		seeds = 50
	}
	base := uint64(time.Now().UnixNano())
	if env := os.Getenv("NETSY_FS_POWERLOSS_SEED"); env != "" {
		var err error
		if base, err = strconv.ParseUint(env, 10, 64); err != nil {
			t.Fatal(err)
		}
		seeds = 1
	}
	t.Logf("seeds %d to %d (replay one with NETSY_FS_POWERLOSS_SEED)", base, base+seeds-1)
	var total plStats
	for seed := base; seed < base+seeds && !t.Failed(); seed++ {
		total.add(powerLossSeed(t, seed))
	}
	t.Logf("%+v", total)
	if !t.Failed() && seeds >= 50 && (total.acked == 0 || total.cutInOpen == 0 || total.tornTemps == 0 || total.uncertain == 0) {
		t.Fatalf("the runs never reached a case they are meant to check: %+v", total)
	}
}

// plStats counts what the power losses of a run reached.
type plStats struct {
	crashes   int
	acked     int // operations acknowledged
	uncertain int // operations cut short
	cutInOpen int // power losses during Open
	orphans   int // temp files left in tmp/ by a crash
	tornTemps int // of which not whole
}

func (s *plStats) add(o plStats) {
	s.crashes += o.crashes
	s.acked += o.acked
	s.uncertain += o.uncertain
	s.cutInOpen += o.cutInOpen
	s.orphans += o.orphans
	s.tornTemps += o.tornTemps
}

// version is one state of a key: absent, or a body and its ETag.
type version struct {
	present bool
	body    []byte
	etag    string
}

func (v version) String() string {
	if !v.present {
		return "absent"
	}
	return fmt.Sprintf("%d bytes %q… etag %s", len(v.body), v.body[:min(len(v.body), 24)], v.etag)
}

var plKeys = []string{
	"members.json", "leader/elector.json", "nodes/n1.json",
	"wal/00000000000000000001", "wal/00000000000000000002", "wal/00000000000000000003",
	"snapshots/a/00000000000000000100", "snapshots/b/00000000000000000200",
}

const plRoot = "/data/objects"

func powerLossSeed(t *testing.T, seed uint64) plStats {
	var st plStats
	rng := rand.New(rand.NewPCG(seed, 1))
	disk := crashfs.New()
	// What each key may hold: the last acknowledged version, plus the one
	// an operation cut short was writing.
	may := make([][]version, len(plKeys))
	for i := range may {
		may[i] = []version{{}}
	}
	const rounds = 3
	for round := range rounds + 1 {
		eager := &eagerFS{FS: disk, rng: rand.New(rand.NewPCG(seed, uint64(round)+100))}
		cutFirst := round == 0 || rng.IntN(3) == 0
		if round == rounds {
			cutFirst = false
		}
		if cutFirst {
			disk.CutAfter(rng.IntN(150))
		} else {
			orphans, torn := tempFiles(t, disk)
			st.orphans += orphans
			st.tornTemps += torn
		}
		s, err := fs.OpenFS(eager, plRoot)
		if err != nil {
			if cutFirst && errors.Is(err, crashfs.ErrPowerLost) {
				st.cutInOpen++
				st.crashes++
				disk = disk.Crash(rng)
				continue
			}
			t.Fatalf("seed %d round %d: Open after a power loss: %v", seed, round, err)
		}
		if !cutFirst {
			now := verify(t, seed, round, s, disk, may)
			for i := range may {
				may[i] = []version{now[i]}
			}
			if round == rounds {
				s.Close()
				break
			}
			disk.CutAfter(rng.IntN(150))
		}
		acked, uncertain := writeUntilCut(t, seed, round, s, may)
		st.acked += acked
		st.uncertain += uncertain
		s.Close()
		st.crashes++
		disk = disk.Crash(rng)
	}
	return st
}

// tempFiles counts the temp files on disk, and those not holding a whole
// object file.
func tempFiles(t *testing.T, disk *crashfs.FS) (all, torn int) {
	t.Helper()
	entries, err := disk.ReadDir(plRoot + "/tmp")
	if errors.Is(err, os.ErrNotExist) {
		return 0, 0
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := disk.ReadFile(filepath.Join(plRoot, "tmp", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		all++
		if _, isObject, err := fs.ObjectBody(data); !isObject || err != nil {
			torn++
		}
	}
	return all, torn
}

// verify checks that s holds one of the versions each key may hold, and
// that every way of reading says the same; it returns what each key holds.
func verify(t *testing.T, seed uint64, round int, s *fs.Store, disk *crashfs.FS, may [][]version) []version {
	t.Helper()
	ctx := t.Context()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d round %d: %s", seed, round, fmt.Sprintf(format, args...))
	}
	now := make([]version, len(plKeys))
	for i, key := range plKeys {
		body, etag, err := s.Get(ctx, key)
		switch {
		case errors.Is(err, objstore.ErrNotFound):
		case err != nil:
			fail("Get %s: %v", key, err)
		default:
			now[i] = version{present: true, body: body, etag: etag}
		}
		if !slices.ContainsFunc(may[i], func(v version) bool {
			return v.present == now[i].present && bytes.Equal(v.body, now[i].body) && v.etag == now[i].etag
		}) {
			fail("%s holds %v; it may hold only %v", key, now[i], may[i])
		}
		if !now[i].present {
			continue
		}
		sum := md5.Sum(body)
		if etag != hex.EncodeToString(sum[:]) {
			fail("%s: ETag %s is not the MD5 of its body", key, etag)
		}
		rc, etag2, err := s.GetReader(ctx, key)
		if err != nil {
			fail("GetReader %s: %v", key, err)
		}
		streamed, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || etag2 != etag || !bytes.Equal(streamed, body) {
			fail("GetReader %s: %d bytes, etag %s, %v; Get said %d bytes, etag %s", key, len(streamed), etag2, err, len(body), etag)
		}
	}
	var want []objstore.ObjectInfo
	for i, key := range plKeys {
		if now[i].present {
			want = append(want, objstore.ObjectInfo{Key: key, Size: int64(len(now[i].body)), ETag: now[i].etag})
		}
	}
	slices.SortFunc(want, func(a, b objstore.ObjectInfo) int { return strings.Compare(a.Key, b.Key) })
	var got []objstore.ObjectInfo
	for after := ""; ; {
		page, err := s.List(ctx, "", after, 3)
		if err != nil {
			fail("List: %v", err)
		}
		if len(page) == 0 {
			break
		}
		got = append(got, page...)
		after = page[len(page)-1].Key
	}
	if !slices.EqualFunc(got, want, func(a, b objstore.ObjectInfo) bool {
		return a.Key == b.Key && a.Size == b.Size && a.ETag == b.ETag
	}) {
		fail("List = %v\nGet found %v", got, want)
	}
	if entries, err := disk.ReadDir(plRoot + "/tmp"); err != nil || len(entries) != 0 {
		fail("tmp/ after Open holds %v, %v; want it swept", entries, err)
	}
	return now
}

// writeUntilCut runs 1 to 3 writers, each owning some of the keys, until
// the power goes; it records each key's acknowledged version in may and
// adds the version of an operation cut short.
func writeUntilCut(t *testing.T, seed uint64, round int, s *fs.Store, may [][]version) (acked, uncertain int) {
	writers := 1 + int(seed%3)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, u := writer(t, seed, round, w, writers, s, may)
			mu.Lock()
			acked += a
			uncertain += u
			mu.Unlock()
		}()
	}
	wg.Wait()
	return acked, uncertain
}

func writer(t *testing.T, seed uint64, round, w, writers int, s *fs.Store, may [][]version) (acked, uncertain int) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, uint64(round*10+w)))
	var mine []int
	for i := range plKeys {
		if i%writers == w {
			mine = append(mine, i)
		}
	}
	for n := 0; ; n++ {
		i := mine[rng.IntN(len(mine))]
		key := plKeys[i]
		if len(may[i]) > 1 {
			// An operation was cut short before the last power loss, and
			// Open ran under the next cut, before verify could look.
			body, etag, err := s.Get(ctx, key)
			now := version{present: err == nil, body: body, etag: etag}
			switch {
			case errors.Is(err, crashfs.ErrPowerLost):
				return acked, uncertain
			case err != nil && !errors.Is(err, objstore.ErrNotFound):
				t.Errorf("seed %d round %d: Get %s: %v", seed, round, key, err)
				return acked, uncertain
			case !slices.ContainsFunc(may[i], func(v version) bool {
				return v.present == now.present && bytes.Equal(v.body, now.body) && v.etag == now.etag
			}):
				t.Errorf("seed %d round %d: %s holds %v; it may hold only %v", seed, round, key, now, may[i])
				return acked, uncertain
			}
			may[i] = []version{now}
		}
		cur := may[i][0] // the writer owns key: its state is known
		body := newBody(rng, fmt.Sprintf("seed %d round %d writer %d op %d %s", seed, round, w, n, key))
		next := version{present: true, body: body}
		var err error
		var want error // the precondition failure expected, if any
		switch op := rng.IntN(10); {
		case op < 3:
			next.etag, err = s.PutIfAbsent(ctx, key, body)
			if cur.present {
				want = objstore.ErrPreconditionFailed
			}
		case op < 5:
			next.etag, err = s.PutIfAbsentFrom(ctx, key, bytes.NewReader(body), int64(len(body)))
			if cur.present {
				want = objstore.ErrPreconditionFailed
			}
		case op < 8:
			match := cur.etag
			if !cur.present || rng.IntN(4) == 0 {
				match = "0123456789abcdef0123456789abcdef" // stale or missing
				want = objstore.ErrPreconditionFailed
			}
			next.etag, err = s.PutIfMatch(ctx, key, body, match)
		case op < 9:
			next = version{}
			err = s.Delete(ctx, key)
		default:
			next = cur
			got, etag, gerr := s.Get(ctx, key)
			switch {
			case errors.Is(gerr, objstore.ErrNotFound):
				if cur.present {
					t.Errorf("seed %d round %d: Get %s: not found, want %v", seed, round, key, cur)
				}
			case gerr == nil && (!cur.present || !bytes.Equal(got, cur.body) || etag != cur.etag):
				t.Errorf("seed %d round %d: Get %s = %d bytes etag %s, want %v", seed, round, key, len(got), etag, cur)
			}
			err = gerr
			if errors.Is(err, objstore.ErrNotFound) {
				err = nil
			}
		}
		switch {
		case errors.Is(err, crashfs.ErrPowerLost):
			if want == nil && (next.present != cur.present || !bytes.Equal(next.body, cur.body)) {
				may[i] = append(may[i], version{present: next.present, body: next.body, etag: etagOf(next.body, next.present)})
				uncertain++
			}
			return acked, uncertain
		case want != nil:
			if !errors.Is(err, want) {
				t.Errorf("seed %d round %d: %s: %v, want %v", seed, round, key, err, want)
				return acked, uncertain
			}
		case err != nil:
			t.Errorf("seed %d round %d: %s: %v", seed, round, key, err)
			return acked, uncertain
		default:
			if next.present && next.etag != etagOf(next.body, true) {
				t.Errorf("seed %d round %d: %s: acknowledged with ETag %s, not the MD5 of the body", seed, round, key, next.etag)
			}
			may[i] = []version{next}
			acked++
		}
	}
}

func etagOf(body []byte, present bool) string {
	if !present {
		return ""
	}
	sum := md5.Sum(body)
	return hex.EncodeToString(sum[:])
}

// newBody is a unique body: mostly small, some spanning several pages and
// several writes of the copy loop, so a torn one is torn inside.
func newBody(rng *rand.Rand, tag string) []byte {
	var n int
	switch x := rng.IntN(10); {
	case x < 6:
		n = rng.IntN(100)
	case x < 9:
		n = 1000 + rng.IntN(10_000)
	default:
		n = 40_000 + rng.IntN(110_000)
	}
	b := make([]byte, len(tag)+n)
	copy(b, tag)
	var seed [32]byte
	for i := range 4 {
		binary.LittleEndian.PutUint64(seed[i*8:], rng.Uint64())
	}
	rand.NewChaCha8(seed).Read(b[len(tag):])
	return b
}

// eagerFS is crashfs with a disk that may make a directory's entries
// durable before it is asked to, as a real one may (ext4 commits a new
// name with its next journal commit): after a call that changes a
// directory, it syncs that directory at random.
type eagerFS struct {
	*crashfs.FS
	mu  sync.Mutex
	rng *rand.Rand
}

var _ vfs.FS = (*eagerFS)(nil)

func (e *eagerFS) maybeSync(dir string) {
	e.mu.Lock()
	now := e.rng.IntN(3) == 0
	e.mu.Unlock()
	if now {
		e.FS.SyncDir(dir) // fails once the power is off, as the disk would
	}
}

func (e *eagerFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := e.FS.OpenFile(name, flag, perm)
	if err == nil && flag&os.O_CREATE != 0 {
		e.maybeSync(filepath.Dir(name))
	}
	return f, err
}

func (e *eagerFS) Rename(oldpath, newpath string) error {
	err := e.FS.Rename(oldpath, newpath)
	if err == nil {
		e.maybeSync(filepath.Dir(oldpath))
		e.maybeSync(filepath.Dir(newpath))
	}
	return err
}

func (e *eagerFS) Remove(name string) error {
	err := e.FS.Remove(name)
	if err == nil {
		e.maybeSync(filepath.Dir(name))
	}
	return err
}
