package engine

import (
	"context"
	"sync"
	"time"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// RequestID names one client request a node forwarded to the Primary; the
// entry that answers it carries it (see netsyv1.Entry.request_id).
type RequestID struct {
	Member, Seq uint64
}

func (id RequestID) zero() bool { return id == RequestID{} }

type requestIDKey struct{}

// requestCtx is a forwarded write's context: its parent and the request's
// id in one allocation (context.WithValue would box the id in a second
// one, on every write of a Primary's local path).
type requestCtx struct {
	context.Context
	id RequestID
	// fresh says the id was made for this, the request's first sending
	// (WithNewRequestID).
	fresh bool
}

// Value answers for the request id and asks the parent for anything else
// (the context package finds its own cancel contexts through it, so a
// child of ctx is cancelled with it without a goroutine).
func (c *requestCtx) Value(key any) any {
	if _, ok := key.(requestIDKey); ok {
		return c
	}
	return c.Context.Value(key)
}

// WithRequestID returns ctx carrying the id of the forwarded request it
// serves: the entry the write logs carries the id, and a request whose id
// is already logged is refused with ErrDuplicateRequest instead of being
// applied twice.
func WithRequestID(ctx context.Context, id RequestID) context.Context {
	if id.zero() {
		return ctx
	}
	return &requestCtx{Context: ctx, id: id}
}

// WithNewRequestID is WithRequestID for the first sending of a request
// whose id the caller has just made (the replica Backend's local write on
// the Active Primary): no entry can carry it yet, so the engine skips the
// duplicate check (a lookup of the pending ids and of the request index,
// whose map the index then never fills on a node nobody forwards to). A
// request sent again must use WithRequestID.
func WithNewRequestID(ctx context.Context, id RequestID) context.Context {
	if id.zero() {
		return ctx
	}
	return &requestCtx{Context: ctx, id: id, fresh: true}
}

// requestIDFrom returns the request id ctx carries (zero for none) and
// whether it is new (WithNewRequestID).
func requestIDFrom(ctx context.Context) (RequestID, bool) {
	rc, _ := ctx.Value(requestIDKey{}).(*requestCtx)
	if rc == nil {
		return RequestID{}, false
	}
	return rc.id, rc.fresh
}

// LoggedRequest is what the engine knows of a committed entry that answered
// a forwarded request: enough to rebuild the response, with the history
// before it (at Before).
type LoggedRequest struct {
	Index    uint64
	Revision int64
	// Puts and Deletes count the entry's key mutations.
	Puts, Deletes int32
	// TxnPath is the entry's txn_path (a Txn's branches).
	TxnPath string
}

// Before is the revision of the state the entry was evaluated on.
func (r LoggedRequest) Before() int64 {
	if r.Puts+r.Deletes > 0 {
		return r.Revision - 1
	}
	return r.Revision
}

// The request index bounds. A forwarding node asks about a request within
// its own wait bound after sending it (the replica Backend's ForwardWait,
// 15 s), and the index holds an id from when the entry was applied here,
// never earlier than the send: the age bound, ten minutes, covers any
// failover window with room to spare. The count bounds memory (an id
// takes about 100 bytes: 13 MiB at the bound) and covers a 15 s window
// up to about 8700 forwarded writes a second. An id dropped early is never
// answered "absent": Lookup reports from which index its answer is
// complete, and the asker does not resend a request that may be older.
const (
	reqIndexMaxCount = 1 << 17
	reqIndexMaxAge   = 10 * time.Minute
)

// reqIndex maps the request ids of recently committed entries to what they
// logged. The loop adds to it; Lookup reads it from any goroutine.
type reqIndex struct {
	clk clock.Clock
	mu  sync.Mutex
	// ring holds the items in index order, oldest at head; ids maps an id
	// to its item's absolute position (pos - base is its ring offset).
	ring       []reqItem
	head, n    int
	ids        map[RequestID]uint64
	base, next uint64
	// mapped is the absolute position up to which (excluded) the items
	// are in ids. observe only fills the ring and lookup maps what came
	// since: a replica, which applies every forwarded write but is
	// asked about one only when its forwarder lost an answer, then skips
	// a map insertion and deletion per entry (a fifth of its apply CPU,
	// BenchmarkFollowBatch); the Primary asks on every forwarded write
	// and maps as it did.
	mapped uint64
	// from is the first index whose entries the index has seen: the one
	// after the state the engine started from (its snapshot, or nothing);
	// dropped is the highest index of an id it dropped.
	from, dropped uint64
	// maxCount and maxAge are the bounds (tests lower them).
	maxCount int
	maxAge   time.Duration
}

type reqItem struct {
	id  RequestID
	at  int64 // unix nanoseconds, by the engine's clock
	req LoggedRequest
}

func newReqIndex(clk clock.Clock) *reqIndex {
	return &reqIndex{clk: clk, ids: make(map[RequestID]uint64), maxCount: reqIndexMaxCount, maxAge: reqIndexMaxAge}
}

// observe records a committed entry (only the loop calls it, in index
// order).
func (x *reqIndex) observe(ent *netsyv1.Entry) {
	rid := ent.GetRequestId()
	if rid == nil {
		return
	}
	id := RequestID{Member: rid.Member, Seq: rid.Seq}
	if id.zero() {
		return
	}
	it := reqItem{id: id, req: LoggedRequest{Index: ent.Index, Revision: ent.Revision, TxnPath: string(ent.TxnPath)}}
	for _, op := range ent.Ops {
		if op.Type == netsyv1.Op_DELETE {
			it.req.Deletes++
		} else {
			it.req.Puts++
		}
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	now := x.clk.Now()
	it.at = now.UnixNano()
	if x.n == len(x.ring) {
		if x.n >= x.maxCount {
			x.dropOldest()
		} else {
			x.grow()
		}
	}
	x.ring[(x.head+x.n)%len(x.ring)] = it
	x.n++
	x.next++
	x.trim(now)
}

// catchUp maps the items observe added since the last lookup.
func (x *reqIndex) catchUp() {
	for pos := max(x.mapped, x.base); pos < x.next; pos++ {
		x.ids[x.ring[(x.head+int(pos-x.base))%len(x.ring)].id] = pos
	}
	x.mapped = x.next
}

// grow doubles the ring (up to maxCount), keeping the order.
func (x *reqIndex) grow() {
	size := min(max(2*len(x.ring), 1024), x.maxCount)
	r := make([]reqItem, size)
	for i := range x.n {
		r[i] = x.ring[(x.head+i)%len(x.ring)]
	}
	x.ring, x.head = r, 0
}

func (x *reqIndex) dropOldest() {
	it := &x.ring[x.head]
	if x.base < x.mapped {
		if pos, ok := x.ids[it.id]; ok && pos == x.base {
			delete(x.ids, it.id)
		}
	}
	x.dropped = max(x.dropped, it.req.Index)
	*it = reqItem{}
	x.head = (x.head + 1) % len(x.ring)
	x.n--
	x.base++
}

// trim drops the ids older than maxAge.
func (x *reqIndex) trim(now time.Time) {
	limit := now.Add(-x.maxAge).UnixNano()
	for x.n > 0 && x.ring[x.head].at < limit {
		x.dropOldest()
	}
}

// reset forgets everything and starts again after base, the index of the
// state the engine now starts from (a snapshot's, or 0): on open, and
// when the state is rebuilt or replaced (entries it had seen may be gone
// from the history, and those it will see start after base).
func (x *reqIndex) reset(base uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.ids = make(map[RequestID]uint64)
	x.ring, x.head, x.n, x.base, x.next, x.mapped = nil, 0, 0, 0, 0, 0
	x.from, x.dropped = base+1, 0
}

func (x *reqIndex) lookup(id RequestID) (LoggedRequest, bool, uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.trim(x.clk.Now())
	x.catchUp()
	complete := max(x.from, x.dropped+1)
	if pos, ok := x.ids[id]; ok {
		return x.ring[(x.head+int(pos-x.base))%len(x.ring)].req, true, complete
	}
	return LoggedRequest{}, false, complete
}

// LookupRequest reports whether a committed entry this node applied carries
// id. When it does not, completeFrom says from which log index on the
// answer is complete: an entry at or after it with that id would have been
// found. The answer is
// only as final as this node's applied state: ask it once the state covers
// a Primary's complete log.
func (e *Engine) LookupRequest(id RequestID) (req LoggedRequest, found bool, completeFrom uint64) {
	return e.reqs.lookup(id)
}

// duplicate reports whether id is already logged here: committed, or
// appended and waiting for durability. Only the loop calls it.
func (e *Engine) duplicate(id RequestID) bool {
	if _, ok := e.pendingIDs[id]; ok {
		return true
	}
	if e.freshN > 0 && id.Member == e.freshMember && e.pendingFresh(id) {
		return true
	}
	_, ok, _ := e.reqs.lookup(id)
	return ok
}

// pendingFresh reports whether a pending entry whose id was new when
// logged (see Engine.pendingIDs) carries id: a scan, as only the member
// that made those ids asks, for a request it sends again.
func (e *Engine) pendingFresh(id RequestID) bool {
	for i := range e.pending {
		pe := &e.pending[i]
		if !pe.freshID {
			continue
		}
		if r := pe.entry.GetRequestId(); r.Member == id.Member && r.Seq == id.Seq {
			return true
		}
	}
	return false
}
