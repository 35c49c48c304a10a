package etcdapi

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/mvcc"
)

// Watch IDs with a meaning on the wire: 0 in a create request asks the
// server to choose; -1 in a response is "no watcher" (a stream-wide progress
// notification, or a create that failed).
const (
	autoWatchID    = 0
	invalidWatchID = -1
)

// etcd's reasons for refusing a create; clients may show or match them.
const (
	reasonEmptyRange  = "mvcc: watcher range is empty"
	reasonDuplicateID = "mvcc: duplicate watch ID provided on the WatchStream"
)

type watchServer struct{ s *Server }

var _ pb.WatchServer = (*watchServer)(nil)

// Watch runs one stream: a receive goroutine hands requests to the stream
// loop, which alone owns the watchers and alone sends.
func (w *watchServer) Watch(stream pb.Watch_WatchServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	recv := stream.Recv
	if h := w.s.hooks; h != nil && h.watchRecv != nil {
		recv = func() (*pb.WatchRequest, error) {
			r, err := stream.Recv()
			if err == nil {
				h.watchRecv(r)
			}
			return r, err
		}
	}
	// The receive goroutine gives up handing over only once the loop has
	// left (quit), not when the client leaves (ctx): the Recv error it
	// then has is how the loop learns the client left.
	quit := make(chan struct{})
	defer close(quit)
	rxc := watchRecvLoop(quit, recv)
	ws := &watchStream{
		s:        w.s,
		stream:   stream,
		watchers: make(map[int64]*watcher),
	}
	w.s.watchStreams.Add(1)
	defer func() {
		w.s.watchStreams.Add(-1)
		w.s.watchers.Add(-int64(len(ws.order)))
	}()
	return ws.run(ctx, rxc)
}

// watchRecv is what a Watch stream's receive goroutine hands its loop: a
// request, or the error that ended receiving (io.EOF: the client closed
// its side).
type watchRecv struct {
	req *pb.WatchRequest
	err error
}

// watchRecvLoop receives requests until the stream fails, and hands them
// and the final error to the loop on one channel, until quit is closed.
// Requests and the error share it, and a failed stream's Recv reports the
// client going away, so the loop's select, which it enters after every
// commit, waits on fewer channels: each one is locked twice per wake-up.
// Recv returns once the handler has returned, so the goroutine ends with
// the stream.
func watchRecvLoop(quit <-chan struct{}, recv func() (*pb.WatchRequest, error)) <-chan watchRecv {
	rxc := make(chan watchRecv)
	go func() {
		for {
			req, err := recv()
			select {
			case rxc <- watchRecv{req: req, err: err}:
			case <-quit:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return rxc
}

type watcher struct {
	id  int64
	key []byte
	// end nil: key alone; empty and non-nil: every key >= key.
	end []byte

	prevKV, fragment, progress bool
	noPut, noDelete            bool

	// next is the first revision this watcher has not been sent.
	next int64
	// sent records an event response since the last progress tick: etcd
	// skips the periodic notification for a watcher that just got events.
	sent bool
}

func (w *watcher) matches(k []byte) bool {
	if w.end == nil {
		return bytes.Equal(k, w.key)
	}
	if bytes.Compare(k, w.key) < 0 {
		return false
	}
	return len(w.end) == 0 || bytes.Compare(k, w.end) < 0
}

type watchStream struct {
	s        *Server
	stream   pb.Watch_WatchServer
	watchers map[int64]*watcher
	// order is creation order, so responses of one batch go out
	// deterministically.
	order  []*watcher
	nextID int64

	pending []*pb.WatchRequest
	// progressN counts the watchers that asked for progress notifications:
	// without any, the progress ticker is not waited on.
	progressN int
	// progressAll is a RequestProgress waiting for every watcher to catch up.
	progressAll bool
	tick        bool

	// cur and hdr are the committed revision and response header of the
	// current iteration.
	cur int64
	hdr *pb.ResponseHeader

	// Pacing (Config.WatchResponseCost, startHold): responses counts the
	// event responses of the current pass; until holdUntil, newer
	// revisions wait for the hold timer and go out together.
	responses int
	// eventsSent counts the events of the current pass, for
	// Server.watchEventsSent.
	eventsSent int64
	holdUntil  time.Time
	// lastPass and lastTotal are when this stream's previous pass ended
	// and Server.watchResponses then.
	lastPass  time.Time
	lastTotal int64
	// debt is the budget this stream's account owes (negative: saved).
	debt      time.Duration
	holdTimer clock.Timer
	holdArmed bool

	cursors []int64    // scratch for sync
	sel     []eventSel // scratch for deliver
	enc     watchEncoder
}

// closedChan makes the loop's select non-blocking while watchers lag.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (ws *watchStream) run(ctx context.Context, rxc <-chan watchRecv) error {
	ticker := ws.s.cfg.Clock.NewTicker(ws.s.cfg.ProgressNotifyInterval)
	defer ticker.Stop()
	defer func() {
		if ws.holdTimer != nil {
			ws.holdTimer.Stop()
		}
	}()
	for {
		// CommitNotify before CurrentRevision: a commit between the two
		// closes the channel we hold, so it is never missed.
		notify := ws.s.b.CommitNotify()
		if err := ws.s.b.WatchErr(); err != nil {
			return toGRPCError(err)
		}
		ws.cur = ws.s.b.CurrentRevision()
		ws.hdr = ws.s.headerAt(ws.cur)

		for i, req := range ws.pending {
			if err := ws.handle(req); err != nil {
				return err
			}
			ws.pending[i] = nil
		}
		ws.pending = ws.pending[:0]

		synced, held := true, false
		if ws.lagging() {
			if d := ws.holdUntil.Sub(ws.s.cfg.Clock.Now()); d > 0 {
				synced, held = false, true
				ws.armHold(d)
			} else {
				var err error
				if synced, err = ws.sync(); err != nil {
					return err
				}
				ws.startHold()
			}
		}
		if synced && ws.progressAll {
			ws.progressAll = false
			// Like etcd, a stream without watchers has nobody to tell.
			if len(ws.order) > 0 {
				if err := ws.stream.Send(&pb.WatchResponse{Header: ws.hdr, WatchId: invalidWatchID}); err != nil {
					return err
				}
			}
		}
		if ws.tick {
			ws.tick = false
			if err := ws.progressTick(); err != nil {
				return err
			}
			if h := ws.s.hooks; h != nil && h.afterTick != nil {
				h.afterTick()
			}
		}

		wake := notify
		var holdC <-chan time.Time
		switch {
		case held:
			// The hold timer wakes the loop; commits until then wait.
			wake, holdC = nil, ws.holdTimer.C()
		case !synced:
			wake = closedChan
		}
		// Only channels that can matter now are waited on (a nil one is
		// skipped for free): ticks only while a watcher wants progress
		// notifications, the stream's end only once the receive
		// goroutine, which reports it otherwise, is gone.
		var tickC <-chan time.Time
		if ws.progressN > 0 {
			tickC = ticker.C()
		}
		var done <-chan struct{}
		if rxc == nil {
			done = ctx.Done()
		}
		select {
		case <-wake:
		case <-holdC:
			ws.holdArmed = false
		case rx := <-rxc:
			switch {
			case rx.err == io.EOF:
				// The client closed its side; keep delivering events
				// until it goes away, as etcd does.
				rxc = nil
			case rx.err != nil:
				return toGRPCError(rx.err)
			default:
				ws.pending = append(ws.pending, rx.req)
			}
		case <-tickC:
			ws.tick = true
		case <-done:
			return toGRPCError(ctx.Err())
		case <-ws.s.stopc:
			return errStopped
		}
	}
}

func (ws *watchStream) handle(req *pb.WatchRequest) error {
	switch {
	case req.GetCreateRequest() != nil:
		return ws.create(req.GetCreateRequest())
	case req.GetCancelRequest() != nil:
		return ws.cancel(req.GetCancelRequest().WatchId)
	case req.GetProgressRequest() != nil:
		ws.progressAll = true
	}
	// etcd ignores requests it does not understand rather than failing
	// the stream.
	return nil
}

func (ws *watchStream) create(cr *pb.WatchCreateRequest) error {
	key, end := cr.Key, cr.RangeEnd
	if len(key) == 0 {
		key = []byte{0} // the smallest key
	}
	switch {
	case len(end) == 0:
		end = nil
	case len(end) == 1 && end[0] == 0:
		end = []byte{} // "\x00": every key from key on
	}
	if len(end) > 0 && bytes.Compare(key, end) >= 0 {
		return ws.refuse(reasonEmptyRange)
	}

	id := cr.WatchId
	if id == autoWatchID {
		for ws.watchers[ws.nextID] != nil {
			ws.nextID++
		}
		id = ws.nextID
		ws.nextID++
	} else if ws.watchers[id] != nil {
		return ws.refuse(reasonDuplicateID)
	}

	next := cr.StartRevision
	switch {
	case next == 0:
		next = ws.cur + 1
	case next < 0:
		// Not meaningful; replay what history holds (or report
		// compaction) rather than invent a revision.
		next = 1
	}
	w := &watcher{
		id:       id,
		key:      key,
		end:      end,
		prevKV:   cr.PrevKv,
		fragment: cr.Fragment,
		progress: cr.ProgressNotify,
		next:     next,
	}
	for _, f := range cr.Filters {
		switch f {
		case pb.WatchCreateRequest_NOPUT:
			w.noPut = true
		case pb.WatchCreateRequest_NODELETE:
			w.noDelete = true
		}
	}
	ws.watchers[id] = w
	ws.order = append(ws.order, w)
	if w.progress {
		ws.progressN++
	}
	ws.s.watchers.Add(1)
	return ws.stream.Send(&pb.WatchResponse{Header: ws.hdr, WatchId: id, Created: true})
}

// refuse answers a create that could not be honoured the way etcd does: a
// created-and-canceled response for watch ID -1 with the reason.
func (ws *watchStream) refuse(reason string) error {
	return ws.stream.Send(&pb.WatchResponse{
		Header:       ws.hdr,
		WatchId:      invalidWatchID,
		Created:      true,
		Canceled:     true,
		CancelReason: reason,
	})
}

// cancel removes a watcher; an unknown ID gets no answer, as in etcd.
func (ws *watchStream) cancel(id int64) error {
	w := ws.watchers[id]
	if w == nil {
		return nil
	}
	ws.remove(w)
	return ws.stream.Send(&pb.WatchResponse{Header: ws.hdr, WatchId: id, Canceled: true})
}

func (ws *watchStream) remove(w *watcher) {
	delete(ws.watchers, w.id)
	if i := slices.Index(ws.order, w); i >= 0 {
		ws.order = slices.Delete(ws.order, i, i+1)
		ws.s.watchers.Add(-1)
		if w.progress {
			ws.progressN--
		}
	}
}

// Pacing bounds: maxWatchHold is the longest an event waits behind the
// previous response of its stream (and the most budget debt a stream
// carries), maxWatchCredit the budget a stream may save while under it,
// so commits bunched by chance are not held.
const (
	maxWatchHold   = 20 * time.Millisecond
	maxWatchCredit = 10 * time.Millisecond
)

// lagging reports whether a watcher has not been sent revision ws.cur.
func (ws *watchStream) lagging() bool {
	for _, w := range ws.order {
		if w.next <= ws.cur {
			return true
		}
	}
	return false
}

// startHold ends a pass that sent ws.responses event responses. Every
// response is a gRPC message its client decodes and dispatches, which
// costs more than the events in it, so the server as a whole budgets one
// response per WatchResponseCost. Each stream keeps an account of it: the
// time since its previous pass is paid in, the responses every stream
// sent meanwhile are charged. While the account is in debt, the stream
// holds for the debt (at most maxWatchHold): revisions committed
// meanwhile wait and go out together, one response per watcher, as
// etcd's watchers get batches once its send queues overflow. A server
// within its budget never holds a stream.
func (ws *watchStream) startHold() {
	n := int64(ws.responses)
	ws.responses = 0
	if n == 0 {
		return
	}
	now := ws.s.cfg.Clock.Now()
	total := ws.s.watchResponses.Add(n)
	since, last := total-ws.lastTotal, ws.lastPass
	ws.lastTotal, ws.lastPass = total, now
	cost := ws.s.cfg.WatchResponseCost
	if cost <= 0 || last.IsZero() {
		return
	}
	// Charge and payment cover the same interval and are settled together:
	// a long quiet spell on a server within budget leaves credit, however
	// many responses other streams sent meanwhile.
	debt := ws.debt + time.Duration(since)*cost - now.Sub(last)
	ws.debt = min(max(debt, -maxWatchCredit), maxWatchHold)
	if ws.debt > 0 {
		ws.holdUntil = now.Add(ws.debt)
	}
}

// armHold makes the hold timer fire in d, unless it is already armed.
func (ws *watchStream) armHold(d time.Duration) {
	switch {
	case ws.holdArmed:
		return
	case ws.holdTimer == nil:
		ws.holdTimer = ws.s.cfg.Clock.NewTimer(d)
	default:
		ws.holdTimer.Reset(d)
	}
	ws.holdArmed = true
}

// sync sends every watcher its events up to ws.cur, at most one Events read
// per distinct cursor, and reports whether all watchers are caught up.
func (ws *watchStream) sync() (bool, error) {
	// The server-wide count moves once per pass, not once per response:
	// every stream of a commit sends at once, on every core, and one
	// shared counter bumped per watcher bounces between them.
	defer func() {
		if ws.eventsSent > 0 {
			ws.s.watchEventsSent.Add(ws.eventsSent)
			ws.eventsSent = 0
		}
	}()
	cursors := ws.cursors[:0]
	for _, w := range ws.order {
		if w.next <= ws.cur && !slices.Contains(cursors, w.next) {
			cursors = append(cursors, w.next)
		}
	}
	slices.Sort(cursors)
	ws.cursors = cursors

	for _, c := range cursors {
		evs, next, err := ws.s.b.Events(c, ws.cur, ws.s.cfg.WatchBatchEvents)
		if errors.Is(err, mvcc.ErrCompacted) {
			if err := ws.compacted(c); err != nil {
				return false, err
			}
			continue
		}
		if err != nil {
			ws.s.log.Warn("watch events read failed", "rev", c, "error", err)
			return false, toGRPCError(err)
		}
		if next <= c {
			// A Backend contract violation; looping would spin.
			return false, status.Errorf(codes.Internal,
				"netsy: events from revision %d returned next revision %d", c, next)
		}
		// A watcher moved forward here may meet a later cursor of this
		// same pass and move on again; it never sees an event twice
		// because each read starts at its cursor.
		ws.enc.reset()
		for _, w := range ws.order {
			if w.next != c {
				continue
			}
			if err := ws.deliver(w, evs); err != nil {
				return false, err
			}
			w.next = next
		}
	}

	for _, w := range ws.order {
		if w.next <= ws.cur {
			return false, nil
		}
	}
	return true, nil
}

// compacted cancels the watchers at cursor c because history below the
// compaction floor is gone, with etcd's compacted response.
func (ws *watchStream) compacted(c int64) error {
	compactRev := ws.s.b.CompactRevision()
	for _, w := range slices.Clone(ws.order) {
		if w.next != c {
			continue
		}
		ws.remove(w)
		err := ws.stream.Send(&pb.WatchResponse{
			Header:          ws.hdr,
			WatchId:         w.id,
			CompactRevision: compactRev,
			Canceled:        true,
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// deliver sends w the events of evs it watches, all in one response so
// events of one revision are never split (fragmenting aside).
func (ws *watchStream) deliver(w *watcher, evs []*mvccpb.Event) error {
	sel := ws.sel[:0]
	for i, ev := range evs {
		if ev.Kv == nil || !w.matches(ev.Kv.Key) {
			continue
		}
		if (ev.Type == mvccpb.PUT && w.noPut) || (ev.Type == mvccpb.DELETE && w.noDelete) {
			continue
		}
		sel = append(sel, eventSel{i: i, prev: w.prevKV && ev.PrevKv != nil})
	}
	ws.sel = sel
	if len(sel) == 0 {
		return nil
	}
	w.sent = true
	ws.responses++
	ws.eventsSent += int64(len(sel))
	if !w.fragment {
		resp, err := ws.enc.response(ws.hdr, w.id, evs, sel)
		if err != nil {
			return status.Errorf(codes.Internal, "netsy: encode watch response: %v", err)
		}
		return ws.stream.SendMsg(resp)
	}
	out := make([]*mvccpb.Event, len(sel))
	for j, s := range sel {
		out[j] = s.event(evs)
	}
	resp := &pb.WatchResponse{Header: ws.hdr, WatchId: w.id, Events: out}
	return sendFragments(resp, ws.s.cfg.MaxRequestBytes, ws.stream.Send)
}

// progressTick sends the periodic notification to watchers that asked for
// it, are caught up and were sent nothing since the previous tick.
func (ws *watchStream) progressTick() error {
	for _, w := range ws.order {
		if w.progress && !w.sent && w.next > ws.cur {
			if err := ws.stream.Send(&pb.WatchResponse{Header: ws.hdr, WatchId: w.id}); err != nil {
				return err
			}
		}
		w.sent = false
	}
	return nil
}

// sendFragments splits a response bigger than maxBytes into responses of
// whole events, each under maxBytes unless it holds a single event, with
// Fragment set on all but the last; client/v3 joins them back.
func sendFragments(r *pb.WatchResponse, maxBytes int, send func(*pb.WatchResponse) error) error {
	if len(r.Events) < 2 || r.Size() < maxBytes {
		return send(r)
	}
	base := (&pb.WatchResponse{Header: r.Header, WatchId: r.WatchId, Fragment: true}).Size()
	evs := r.Events
	for len(evs) > 0 {
		n, size := 0, base
		for n < len(evs) {
			es := evs[n].Size()
			add := 1 + varintLen(uint64(es)) + es // field tag, length, body
			if n > 0 && size+add >= maxBytes {
				break
			}
			size += add
			n++
		}
		err := send(&pb.WatchResponse{
			Header:   r.Header,
			WatchId:  r.WatchId,
			Events:   evs[:n],
			Fragment: n < len(evs),
		})
		if err != nil {
			return err
		}
		evs = evs[n:]
	}
	return nil
}

func varintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}
