package objwal

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/netsy-io/netsy/internal/objstore"
)

// spy sits between a Log and its bucket: it reports every Get of a wal
// key with its outcome, and holds one chosen call until released: a
// PutIfAbsent before it runs or after it landed (its answer is slow), or
// a Get before it runs.
type spy struct {
	objstore.Store
	gets  chan getCall
	guard context.Context // a hang fails the test

	mu      sync.Mutex
	op      string // "put-before", "put-after" or "get"
	key     string
	held    chan string
	release chan struct{}
}

type getCall struct {
	key   string
	found bool
}

func newSpy(t *testing.T, s objstore.Store) *spy {
	guard, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return &spy{Store: s, guard: guard, gets: make(chan getCall, 1000), held: make(chan string, 1)}
}

// hold holds the next op on key; close the returned channel to release it.
func (s *spy) hold(op, key string) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.op, s.key, s.release = op, key, make(chan struct{})
	return s.release
}

// wait holds the call if it is the one chosen.
func (s *spy) wait(ctx context.Context, op, key string) error {
	s.mu.Lock()
	hold := s.op == op && s.key == key
	release := s.release
	if hold {
		s.op, s.key = "", ""
	}
	s.mu.Unlock()
	if !hold {
		return nil
	}
	s.held <- key
	select {
	case <-release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *spy) PutIfAbsent(ctx context.Context, key string, body []byte) (string, error) {
	if err := s.wait(ctx, "put-before", key); err != nil {
		return "", err
	}
	etag, err := s.Store.PutIfAbsent(ctx, key, body)
	if err == nil {
		if err := s.wait(ctx, "put-after", key); err != nil {
			return "", err
		}
	}
	return etag, err
}

func (s *spy) Get(ctx context.Context, key string) ([]byte, string, error) {
	if err := s.wait(ctx, "get", key); err != nil {
		return nil, "", err
	}
	body, etag, err := s.Store.Get(ctx, key)
	if strings.HasPrefix(key, walPrefix) && (err == nil || isNotFound(err)) {
		s.gets <- getCall{key, err == nil}
	}
	return body, etag, err
}

// spiedWriter opens a sync-mode writer behind a spy with entries 1..3 in the
// bucket; it returns the seq its next chunk takes.
func (e *env) spiedWriter() (*node, *spy, uint64) {
	e.t.Helper()
	n := e.node("", ModeSync, nil)
	s := newSpy(e.t, n.store)
	n.opts.Store = s
	n.open()
	n.appendRange(1, 3, "a")
	if err := n.rec.wait(e.t, 3); err != nil {
		e.t.Fatal(err)
	}
	for len(s.gets) > 0 {
		<-s.gets
	}
	return n, s, n.l.Stats().Seq
}

func (s *spy) waitHeld(t *testing.T, key string) {
	t.Helper()
	select {
	case k := <-s.held:
		if k != key {
			t.Fatalf("held %s, want %s", k, key)
		}
	case <-s.guard.Done():
		t.Fatalf("waiting for the call on %s", key)
	}
}

// waitGet waits for a Get of key and checks whether it found the object.
func (s *spy) waitGet(t *testing.T, key string, found bool) {
	t.Helper()
	for {
		select {
		case g := <-s.gets:
			if g.key != key {
				continue
			}
			if g.found != found {
				t.Fatalf("get %s: found %v, want %v", key, g.found, found)
			}
			return
		case <-s.guard.Done():
			t.Fatalf("waiting for a get of %s", key)
		}
	}
}

// waitPut waits for n's upload of seq to succeed.
func (s *spy) waitPut(n *node, seq uint64) {
	n.t.Helper()
	for {
		select {
		case p := <-n.puts:
			if p.seq == seq && p.err == nil {
				return
			}
		case <-s.guard.Done():
			n.t.Fatalf("waiting for the upload of %s", walKey(seq))
		}
	}
}

func stillWriter(ctx context.Context, l *Log) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- l.StillWriter(ctx) }()
	return ch
}

// await moves the fake clock in small steps until ch answers: StillWriter
// waits on the clock for its own upload's outcome.
func (s *spy) await(e *env, ch <-chan error) error {
	e.t.Helper()
	for {
		select {
		case err := <-ch:
			return err
		case <-s.guard.Done():
			e.t.Fatal("waiting for StillWriter")
		default:
			e.fake.Advance(time.Millisecond)
			runtime.Gosched()
		}
	}
}

// The next seq free: still the writer.
func TestStillWriterNextSeqFree(t *testing.T) {
	e := newEnv(t)
	a, s, next := e.spiedWriter()
	if err := a.l.StillWriter(s.guard); err != nil {
		t.Fatal(err)
	}
	s.waitGet(t, walKey(next), false)
}

// The next seq taken by another writer (its claim): fenced. A follower is
// no writer to begin with.
func TestStillWriterNextSeqTaken(t *testing.T) {
	e := newEnv(t)
	a, s, next := e.spiedWriter()
	b := e.node("", ModeSync, nil).open()
	if got := b.l.Stats().Seq; got <= next {
		t.Fatalf("the new writer's next seq is %d; its claim should have taken %d", got, next)
	}
	if err := a.l.StillWriter(s.guard); !isFenced(err) {
		t.Fatalf("StillWriter: %v, want ErrFenced", err)
	}
	s.waitGet(t, walKey(next), true)

	f := e.node("", ModeSync, func(o *Options) { o.Follower = true }).open()
	if err := f.l.StillWriter(s.guard); err == nil || isFenced(err) {
		t.Fatalf("a follower: %v, want not the writer", err)
	}
}

// The next seq held by this log's own upload, landed but not yet
// answered: not fenced. StillWriter waits for the upload's outcome and
// checks the seq after it.
func TestStillWriterOwnUploadInFlight(t *testing.T) {
	e := newEnv(t)
	a, s, next := e.spiedWriter()
	release := s.hold("put-after", walKey(next))
	a.appendRange(4, 4, "a")
	s.waitHeld(t, walKey(next))

	res := stillWriter(s.guard, a.l)
	s.waitGet(t, walKey(next), true)
	close(release)
	s.waitPut(a, next)
	if err := s.await(e, res); err != nil {
		t.Fatalf("StillWriter with its own chunk at %s: %v", walKey(next), err)
	}
	s.waitGet(t, walKey(next+1), false)
}

// The upload of the next seq finished between StillWriter reading the seq
// and finding the object there: its own chunk, not fenced.
func TestStillWriterOwnUploadJustFinished(t *testing.T) {
	e := newEnv(t)
	a, s, next := e.spiedWriter()
	release := s.hold("get", walKey(next))
	res := stillWriter(s.guard, a.l)
	s.waitHeld(t, walKey(next))
	a.appendRange(4, 4, "a")
	s.waitPut(a, next)
	close(release)
	select {
	case err := <-res:
		if err != nil {
			t.Fatalf("StillWriter with its own chunk at %s: %v", walKey(next), err)
		}
	case <-s.guard.Done():
		t.Fatal("waiting for StillWriter")
	}
	s.waitGet(t, walKey(next), true)
	s.waitGet(t, walKey(next+1), false)
}

// An upload in flight does not make every chunk at its seq ours: another
// writer's claim there is found out when the upload is refused.
func TestStillWriterOwnUploadLosesTheSeq(t *testing.T) {
	e := newEnv(t)
	a, s, next := e.spiedWriter()
	release := s.hold("put-before", walKey(next))
	a.appendRange(4, 4, "a")
	s.waitHeld(t, walKey(next))
	e.node("", ModeSync, nil).open() // claims next

	res := stillWriter(s.guard, a.l)
	s.waitGet(t, walKey(next), true)
	close(release)
	if err := s.await(e, res); !isFenced(err) {
		t.Fatalf("StillWriter: %v, want ErrFenced", err)
	}
}
