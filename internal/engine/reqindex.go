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

// requestCtx is what a forwarded write's context says about it.
type requestCtx struct {
	id RequestID
}

// WithRequestID returns ctx carrying the id of the forwarded request it
// serves: the entry the write logs carries the id, and a request whose id
// is already logged is refused with ErrDuplicateRequest instead of being
// applied twice.
func WithRequestID(ctx context.Context, id RequestID) context.Context {
	if id.zero() {
		return ctx
	}
	return context.WithValue(ctx, requestIDKey{}, requestCtx{id: id})
}

func requestIDFrom(ctx context.Context) RequestID {
	rc, _ := ctx.Value(requestIDKey{}).(requestCtx)
	return rc.id
}

// LoggedRequest is what the engine knows of a committed entry that answered
// a forwarded request: enough to rebuild the response (the state before it
// is at Revision-1 when it changed keys).
type LoggedRequest struct {
	Index    uint64
	Revision int64
	// Ops are the key mutations the entry made, in order: the kind (put or
	// delete) and the key, without values.
	Ops []LoggedOp
	// TxnPath is the entry's txn_path (a Txn's branches).
	TxnPath []byte
}

// LoggedOp is one key mutation of a LoggedRequest.
type LoggedOp struct {
	Delete bool
	Key    []byte
}

// The request index bounds. A forwarding node asks about a request within
// its own wait bound after sending it (the replica Backend caps that at
// 30 s), and the index holds an id from when the entry was applied here,
// which is never earlier than the send: ten minutes covers any failover
// window with room to spare. The count bounds memory (about 100 bytes an
// id plus the keys): at 2000 forwarded writes a second, 2^18 ids are two
// minutes. An id dropped early is never answered "absent": Lookup reports
// from which index its answer is complete, and the asker does not resend
// a request that may be older.
const (
	reqIndexMaxCount = 1 << 18
	reqIndexMaxAge   = 10 * time.Minute
)

// reqIndex maps the request ids of recently committed entries to what they
// logged. The loop adds to it; Lookup reads it from any goroutine.
type reqIndex struct {
	clk clock.Clock
	mu  sync.Mutex
	ids map[RequestID]*reqItem
	// fifo holds the items in index order, oldest first (head is the
	// first live one).
	fifo []*reqItem
	head int
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
	at  time.Time
	req LoggedRequest
}

func newReqIndex(clk clock.Clock) *reqIndex {
	return &reqIndex{clk: clk, ids: make(map[RequestID]*reqItem), maxCount: reqIndexMaxCount, maxAge: reqIndexMaxAge}
}

// observe records a committed entry (only the loop calls it, in index
// order).
func (x *reqIndex) observe(ent *netsyv1.Entry) {
	x.mu.Lock()
	defer x.mu.Unlock()
	rid := ent.GetRequestId()
	if rid == nil {
		return
	}
	id := RequestID{Member: rid.Member, Seq: rid.Seq}
	if id.zero() {
		return
	}
	it := &reqItem{id: id, at: x.clk.Now(), req: LoggedRequest{Index: ent.Index, Revision: ent.Revision, TxnPath: ent.TxnPath}}
	for _, op := range ent.Ops {
		it.req.Ops = append(it.req.Ops, LoggedOp{Delete: op.Type == netsyv1.Op_DELETE, Key: op.Key})
	}
	x.ids[id] = it
	x.fifo = append(x.fifo, it)
	x.trim(it.at)
}

// trim drops the oldest ids past the bounds.
func (x *reqIndex) trim(now time.Time) {
	for x.head < len(x.fifo) {
		it := x.fifo[x.head]
		if len(x.fifo)-x.head <= x.maxCount && now.Sub(it.at) <= x.maxAge {
			break
		}
		if x.ids[it.id] == it {
			delete(x.ids, it.id)
		}
		x.dropped = max(x.dropped, it.req.Index)
		x.fifo[x.head] = nil
		x.head++
	}
	if x.head > 1024 && x.head*2 > len(x.fifo) {
		x.fifo = append([]*reqItem(nil), x.fifo[x.head:]...)
		x.head = 0
	}
}

// reset forgets everything and starts again after base, the index of the
// state the engine now starts from (a snapshot's, or 0): on open, and
// when the state is rebuilt or replaced (entries it had seen may be gone
// from the history, and those it will see start after base).
func (x *reqIndex) reset(base uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.ids = make(map[RequestID]*reqItem)
	x.fifo, x.head, x.from, x.dropped = nil, 0, base+1, 0
}

func (x *reqIndex) lookup(id RequestID) (LoggedRequest, bool, uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.trim(x.clk.Now())
	complete := max(x.from, x.dropped+1)
	if it, ok := x.ids[id]; ok {
		return it.req, true, complete
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
	_, ok, _ := e.reqs.lookup(id)
	return ok
}
