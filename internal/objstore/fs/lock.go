package fs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"syscall"

	"github.com/netsy-io/netsy/internal/vfs"
)

// locker is how the writers of one root keep out of each other's way, and
// how a sweep tells a live writer's temp file from an orphan.
type locker interface {
	// lock holds a key stripe's lock until unlock is called; waiting ends
	// with ctx's error when ctx ends first.
	lock(ctx context.Context, stripe int) (unlock func(), err error)
	// claim marks f, a temp file just created, as a live writer's until
	// release is called (after f is closed).
	claim(f vfs.File) (release func(), err error)
	// sweep removes the temp file at path unless a live writer claims it.
	sweep(path string) error
	close()
}

// acquire takes sem, or gives up when ctx ends.
func acquire(ctx context.Context, sem chan struct{}) error {
	select {
	case sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	// Checked again after waiting: a caller that gave up must not write.
	if err := ctx.Err(); err != nil {
		<-sem
		return err
	}
	return nil
}

func newSems() *[stripes]chan struct{} {
	var sems [stripes]chan struct{}
	for i := range sems {
		sems[i] = make(chan struct{}, 1)
	}
	return &sems
}

// flockLocker locks on the real disk: flock on locks/<nn>.lock excludes
// the writers of other processes, and a temp file is claimed by holding
// its own flock, which closing it (or the process dying) lets go.
type flockLocker struct {
	dir string
	// sems serialize writers of one stripe inside this process so waiting
	// honours context cancellation; flock alone would block uninterruptibly.
	sems *[stripes]chan struct{}
}

func newFlockLocker(dir string) *flockLocker { return &flockLocker{dir: dir, sems: newSems()} }

func (l *flockLocker) lock(ctx context.Context, stripe int) (func(), error) {
	sem := l.sems[stripe]
	if err := acquire(ctx, sem); err != nil {
		return nil, err
	}
	lf, err := os.OpenFile(filepath.Join(l.dir, fmt.Sprintf("%03d.lock", stripe)), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		<-sem
		return nil, err
	}
	if err := flock(lf); err != nil {
		lf.Close()
		<-sem
		return nil, fmt.Errorf("lock: %w", err)
	}
	return func() {
		lf.Close() // closing the descriptor releases the flock
		<-sem
	}, nil
}

func (l *flockLocker) claim(f vfs.File) (func(), error) {
	of, ok := f.(*os.File)
	if !ok {
		return nil, fmt.Errorf("%s is a %T, not an *os.File", f.Name(), f)
	}
	if err := tryFlock(of); err != nil {
		return nil, err
	}
	return func() {}, nil // closing f released the flock
}

func (l *flockLocker) sweep(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // installed or removed meanwhile
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if tryFlock(f) != nil {
		return nil // a live writer's
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func (l *flockLocker) close() {}

// tryFlock takes f's exclusive flock if no descriptor holds it, without
// waiting: how temp files tell a live writer from an orphan.
func tryFlock(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}

func flock(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// memTable is the in-memory stand-in for the kernel's flock table, for
// one root on one file system other than the real disk: the Stores of
// this process open on it share it, as processes share the kernel's.
// Nothing outside the process can see it.
type memTable struct {
	refs int // Stores holding it; guarded by memTables.mu
	sems *[stripes]chan struct{}
	mu   sync.Mutex
	live map[string]bool // temp files claimed by a writer
}

type memKey struct {
	fsys vfs.FS
	root string
}

var memTables = struct {
	mu sync.Mutex
	m  map[memKey]*memTable
}{m: map[memKey]*memTable{}}

// memLocker locks through the memTable of its file system and root.
type memLocker struct {
	fsys vfs.FS
	key  memKey
	t    *memTable
}

func openMemLocker(fsys vfs.FS, root string) (*memLocker, error) {
	if !reflect.TypeOf(fsys).Comparable() {
		return nil, fmt.Errorf("file system %T is not comparable, so Stores on it cannot share locks", fsys)
	}
	key := memKey{fsys, root}
	memTables.mu.Lock()
	defer memTables.mu.Unlock()
	t := memTables.m[key]
	if t == nil {
		t = &memTable{sems: newSems(), live: map[string]bool{}}
		memTables.m[key] = t
	}
	t.refs++
	return &memLocker{fsys: fsys, key: key, t: t}, nil
}

func (l *memLocker) lock(ctx context.Context, stripe int) (func(), error) {
	sem := l.t.sems[stripe]
	if err := acquire(ctx, sem); err != nil {
		return nil, err
	}
	return func() { <-sem }, nil
}

func (l *memLocker) claim(f vfs.File) (func(), error) {
	name := f.Name()
	l.t.mu.Lock()
	defer l.t.mu.Unlock()
	l.t.live[name] = true
	return func() {
		l.t.mu.Lock()
		defer l.t.mu.Unlock()
		delete(l.t.live, name)
	}, nil
}

func (l *memLocker) sweep(path string) error {
	l.t.mu.Lock()
	defer l.t.mu.Unlock()
	if l.t.live[path] {
		return nil
	}
	if err := l.fsys.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func (l *memLocker) close() {
	memTables.mu.Lock()
	defer memTables.mu.Unlock()
	if l.t.refs--; l.t.refs == 0 {
		delete(memTables.m, l.key)
	}
}
