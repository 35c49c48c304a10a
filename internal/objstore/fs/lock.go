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
	// createTemp calls create, which makes a new temp file, and claims
	// the file as a live writer's until release is called (after it is
	// closed). A sweep never sees the file unclaimed.
	createTemp(create func() (vfs.File, error)) (f vfs.File, release func(), err error)
	// sweep removes the temp files at paths that no live writer claims.
	sweep(paths []string) error
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
// its own flock, which closing it (or the process dying) lets go. A
// writer holds locks/sweep.lock shared from creating its temp file to
// locking it, and a sweep holds it exclusively, so that a sweep cannot
// take a file created a moment before for an orphan.
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
	if err := flockWait(lf, syscall.LOCK_EX); err != nil {
		lf.Close()
		<-sem
		return nil, fmt.Errorf("lock: %w", err)
	}
	return func() {
		lf.Close() // closing the descriptor releases the flock
		<-sem
	}, nil
}

func (l *flockLocker) createTemp(create func() (vfs.File, error)) (vfs.File, func(), error) {
	sl, err := l.holdSweepLock(syscall.LOCK_SH)
	if err != nil {
		return nil, nil, err
	}
	defer sl.Close()
	f, err := create()
	if err != nil {
		return nil, nil, err
	}
	of, ok := f.(*os.File)
	if !ok {
		err = fmt.Errorf("%s is a %T, not an *os.File", f.Name(), f)
	} else {
		err = tryFlock(of)
	}
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, nil, fmt.Errorf("lock temp file: %w", err)
	}
	return f, func() {}, nil // closing f releases its flock
}

func (l *flockLocker) sweep(paths []string) error {
	sl, err := l.holdSweepLock(syscall.LOCK_EX)
	if err != nil {
		return err
	}
	defer sl.Close()
	for _, path := range paths {
		if err := sweepOne(path); err != nil {
			return err
		}
	}
	return nil
}

func sweepOne(path string) error {
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

// holdSweepLock returns locks/sweep.lock flock'd as how says; closing it
// lets go.
func (l *flockLocker) holdSweepLock(how int) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(l.dir, "sweep.lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := flockWait(f, how); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock: %w", err)
	}
	return f, nil
}

func (l *flockLocker) close() {}

// tryFlock takes f's exclusive flock if no descriptor holds it, without
// waiting: how temp files tell a live writer from an orphan.
func tryFlock(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}

// flockWait takes f's flock as how says (LOCK_EX or LOCK_SH), waiting as
// long as it takes.
func flockWait(f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how)
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
	// sweeping is held for reading from creating a temp file to claiming
	// it, and for writing by a sweep, as flockLocker's sweep.lock is.
	sweeping sync.RWMutex
	mu       sync.Mutex
	live     map[string]bool // temp files claimed by a writer
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

func (l *memLocker) createTemp(create func() (vfs.File, error)) (vfs.File, func(), error) {
	l.t.sweeping.RLock()
	defer l.t.sweeping.RUnlock()
	f, err := create()
	if err != nil {
		return nil, nil, err
	}
	name := f.Name()
	l.t.mu.Lock()
	defer l.t.mu.Unlock()
	l.t.live[name] = true
	return f, func() {
		l.t.mu.Lock()
		defer l.t.mu.Unlock()
		delete(l.t.live, name)
	}, nil
}

func (l *memLocker) sweep(paths []string) error {
	l.t.sweeping.Lock()
	defer l.t.sweeping.Unlock()
	for _, path := range paths {
		l.t.mu.Lock()
		live := l.t.live[path]
		l.t.mu.Unlock()
		if live {
			continue
		}
		if err := l.fsys.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
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
