package engine

import (
	"slices"
	"sync"
	"sync/atomic"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/netsy-io/netsy/proto/netsyv1"
)

// feedEntries is how many of the newest entries the writer keeps in memory
// for replicas; a replica further behind reads from the storage.
const feedEntries = 16384

// feed holds the newest entries the writer appended, durable or not, in
// index order, so Follow streams can send an entry before it is durable
// here (a Primary's own fsync runs beside the sending).
type feed struct {
	mu   sync.Mutex
	ents []*netsyv1.Entry // dense indices; ents[0] is the oldest kept
	// notify fires once per pass of the loop that added entries (see
	// publish), not once per entry, so a batch of writes costs each
	// Follow stream one wake-up and the loop at most one channel.
	notify signal
	added  bool
	// watches are the standing watchers (WatchAppends) publish pokes.
	watches []*appendWatch

	// events is the newest Events read, for the watch streams (see
	// eventsCache).
	events eventsCache
}

// eventsCache keeps the newest Events read for the other watch streams a
// commit wakes. Every client Watch stream has its own loop, and a commit
// wakes them all at once to read the same revisions from the same cursor
// (ten streams in the watch-latency benchmark's shape): the first read of
// the store is shared, instead of each stream taking the store's lock and
// building and resolving the same events again. The events are shared and
// never modified (the Backend contract says so).
//
// A read is kept for one commit notification generation (gen: the fires
// of the engine's commit signal, each commit, compaction, restore or role
// change that moves the committed revision): every read up to the next
// notification may share it. One that gets a read from just before a
// compaction or a restore in the same generation sees what an Events call
// that ran a moment earlier would have, which it could have anyway.
type eventsCache struct {
	mu       sync.Mutex
	valid    bool
	gen      uint64
	from, to int64
	limit    int
	evs      []*mvccpb.Event
	next     int64
}

func (c *eventsCache) get(gen uint64, from, to int64, limit int) ([]*mvccpb.Event, int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.valid || c.gen != gen || c.from != from || c.to != to || c.limit != limit {
		return nil, 0, false
	}
	return c.evs, c.next, true
}

func (c *eventsCache) put(gen uint64, from, to int64, limit int, evs []*mvccpb.Event, next int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// A slow reader from an older generation must not evict a newer read.
	if c.valid && c.gen > gen {
		return
	}
	c.valid, c.gen, c.from, c.to, c.limit, c.evs, c.next = true, gen, from, to, limit, evs, next
}

// drop forgets the kept read: the store is about to be replaced (a
// rebuild), and a stream must not be served the old history from here
// until the commit signal fires.
func (c *eventsCache) drop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.valid, c.evs = false, nil
}

// appendWatch is one WatchAppends: a channel its owner made once, and
// whether it wants pokes now.
type appendWatch struct {
	ch chan<- struct{}
	on *atomic.Bool
}

func newFeed() *feed { return &feed{} }

// add appends e, which must follow the last entry (or start a new run).
func (f *feed) add(e *netsyv1.Entry) {
	f.mu.Lock()
	if n := len(f.ents); n > 0 && f.ents[n-1].Index+1 != e.Index {
		f.ents = f.ents[:0]
	}
	if len(f.ents) >= feedEntries {
		// Drop the oldest quarter at once, so trimming is rare.
		k := feedEntries / 4
		clear(f.ents[:k])
		f.ents = append(f.ents[:0], f.ents[k:]...)
	}
	f.ents = append(f.ents, e)
	f.added = true
	f.mu.Unlock()
}

// publish wakes whoever waits (wait) if entries were added since the
// last publish. The loop calls it before it waits for more work.
func (f *feed) publish() {
	f.mu.Lock()
	if f.added {
		f.added = false
		f.notify.fire()
		for _, w := range f.watches {
			if w.on.Load() {
				// A full buffer already holds a poke its owner has not
				// taken: it reads the log after taking it, so one is
				// enough, and the loop never blocks on a watcher.
				select {
				case w.ch <- struct{}{}:
				default:
				}
			}
		}
	}
	f.mu.Unlock()
}

// truncate drops the entries after index (a rollback).
func (f *feed) truncate(index uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.ents)
	for n > 0 && f.ents[n-1].Index > index {
		n--
	}
	clear(f.ents[n:])
	f.ents = f.ents[:n]
}

// read returns up to max entries from index from on. ok is false when from
// is older than the oldest entry kept (the caller reads the storage).
func (f *feed) read(from uint64, max int) (ents []*netsyv1.Entry, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.ents) == 0 {
		return nil, true
	}
	first, last := f.ents[0].Index, f.ents[len(f.ents)-1].Index
	switch {
	case from < first:
		return nil, false
	case from > last:
		return nil, true
	}
	i := int(from - first)
	j := min(len(f.ents), i+max)
	return append([]*netsyv1.Entry(nil), f.ents[i:j]...), true
}

// term returns the term of the entry at index, if kept.
func (f *feed) term(index uint64) (int64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.ents) == 0 || index < f.ents[0].Index || index > f.ents[len(f.ents)-1].Index {
		return 0, false
	}
	return f.ents[index-f.ents[0].Index].Term, true
}

// watch adds a standing watcher until the returned function is called.
func (f *feed) watch(ch chan<- struct{}, on *atomic.Bool) (stop func()) {
	w := &appendWatch{ch: ch, on: on}
	f.mu.Lock()
	f.watches = append(f.watches, w)
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.watches = slices.DeleteFunc(f.watches, func(x *appendWatch) bool { return x == w })
	}
}

// WatchAppends is AppendNotify for one goroutine that waits on appends
// over and over (the Primary's quorum): after each pass of the loop that
// appended, while on holds true, ch (which must be buffered) is poked if
// it has room. Unlike AppendNotify it costs no channel per wake-up, and
// nothing at all while on is false. No poke is lost between a check and
// a wait: a watcher that reads LastAppended and then waits on ch finds a
// poke for any pass published after that read (it stays in the buffer).
// The watch lasts until stop is called.
func (e *Engine) WatchAppends(ch chan<- struct{}, on *atomic.Bool) (stop func()) {
	if cap(ch) == 0 {
		panic("engine: WatchAppends needs a buffered channel")
	}
	return e.feed.watch(ch, on)
}

func (f *feed) wait() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.notify.wait()
}

// signal is a channel closed when an event happens, for any number of
// waiters. It is made only when someone asks for it (wait), so an event
// nobody waits for (the durable index of a writer no replica watches, a
// commit with no watcher) costs no allocation. Its owner's lock guards ch;
// gen, which counts the fires, may be read without it.
type signal struct {
	ch  chan struct{}
	gen atomic.Uint64
}

// wait returns a channel closed at the next fire.
func (s *signal) wait() <-chan struct{} {
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

// fire closes the channel waiters hold, if any.
func (s *signal) fire() {
	s.gen.Add(1)
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}
