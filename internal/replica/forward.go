package replica

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/engine"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// The Forward stream is the replica's side of forwarding writes: one
// long-lived stream per connection to a Primary carries every Put,
// DeleteRange and write Txn this node forwards, instead of an etcd call
// (an HTTP/2 stream, its headers, trailers and interceptors) per write.
// Whatever is queued when the stream is free to send goes out as one
// message, so a lone write waits for nothing and a busy node sends few
// messages.

var (
	// errNotSent: the write never left this node (the stream could not
	// be opened, or broke while the write waited for its turn), so the
	// Primary never saw it and it may go again (notEvaluated).
	errNotSent = errors.New("the write was not sent to the Primary")
	// errUseUnary: the Primary does not serve the Forward stream (an
	// older version, in a rolling upgrade), or this Backend is closed: the
	// write goes as an etcd call of its own. Never returned to write().
	errUseUnary = errors.New("the Primary does not serve the Forward stream")
)

// maxForwardBatchBytes bounds the requests (or replies) one Forward
// message carries, well under peer.MaxMessageBytes: a request alone is
// bounded by --max-request-bytes, a batch of them is not.
const maxForwardBatchBytes = 8 << 20

// forwarder owns a Backend's Forward streams, one per Primary connection,
// each opened on the first write that needs it and dropped when it
// breaks. Close ends them all.
type forwarder struct {
	clk    clock.Clock
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	streams map[*grpc.ClientConn]*fstream
	// legacy is the Primary term at which a connection's node answered
	// Unimplemented: writes to it at that term go as etcd calls. A
	// restarted (perhaps upgraded) process is Primary only at a newer
	// term, and is asked again.
	legacy map[*grpc.ClientConn]uint64

	// calls recycles answered calls (newCall).
	calls sync.Pool

	// opened counts the streams opened (tests and benchmarks read it).
	opened atomic.Int64
	// writerSends counts the messages writers sent themselves
	// (sendQueued; tests read it).
	writerSends atomic.Int64
	// beforeSend, when set (tests only), runs on a stream's send
	// goroutine each time it is about to take the queue.
	beforeSend func()
}

func newForwarder(clk clock.Clock) *forwarder {
	ctx, cancel := context.WithCancel(context.Background())
	return &forwarder{clk: clk, ctx: ctx, cancel: cancel,
		streams: map[*grpc.ClientConn]*fstream{}, legacy: map[*grpc.ClientConn]uint64{}}
}

// close ends every stream (their writes in flight fail as if the
// connection broke) and waits for their goroutines.
func (f *forwarder) close() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	f.cancel()
	f.wg.Wait()
}

// fcall is one write on a stream: its request, and where its reply goes.
type fcall struct {
	req  *netsyv1.ForwardRequest
	size int
	done chan fresult
	// gone is the caller's ctx.Done(): a write whose caller gave up
	// before it was sent is not sent (as an etcd call would not be).
	gone <-chan struct{}
	// deadline is the caller's (zero: none); the request's timeout_ms is
	// what is left of it when the request is sent.
	deadline time.Time
	// pool is where release returns c.
	pool *sync.Pool
}

type fresult struct {
	reply *netsyv1.ForwardReply
	err   error
}

// do sends req (its seq is the stream's to set) to the Primary behind
// conn, at primary term term, and waits for the reply. Its errors are
// errUseUnary (send it as an etcd call instead), errNotSent (it never left
// this node), ctx's error, or a lost stream's (the outcome is unknown).
func (f *forwarder) do(ctx context.Context, conn *grpc.ClientConn, term uint64, req *netsyv1.ForwardRequest) (*netsyv1.ForwardReply, error) {
	c := f.newCall()
	c.req, c.size, c.gone = req, len(req.Request)+48, ctx.Done()
	c.deadline, _ = ctx.Deadline()
	f.mu.Lock()
	if t, ok := f.legacy[conn]; f.closed || (ok && t == term) {
		f.mu.Unlock()
		c.release()
		return nil, errUseUnary
	}
	s := f.streams[conn]
	send := false
	if s != nil {
		var ok bool
		ok, send = s.enqueue(c)
		if !ok {
			s = nil
		}
	}
	if s == nil {
		f.open(conn, term, c)
	}
	f.mu.Unlock()
	if send {
		s.sendQueued()
	}
	select {
	case r := <-c.done:
		// Whoever answered c took it off the stream first (receive,
		// broken): nothing refers to it any more.
		c.release()
		return r.reply, r.err
	case <-ctx.Done():
		// The write stays in flight; its reply, when it comes, is
		// dropped (done has room for it), and c is not reused.
		return nil, ctx.Err()
	}
}

// newCall is a call from f.calls, which recycles the calls (and their
// reply channels) of writes that got their answer: one of each per
// forwarded write was most of the forwarding node's own allocations per
// write (BenchmarkForwardedPuts). The pool is the forwarder's, not the
// process's: a channel belongs to the synctest bubble that made it.
func (f *forwarder) newCall() *fcall {
	if c, ok := f.calls.Get().(*fcall); ok {
		return c
	}
	return &fcall{pool: &f.calls, done: make(chan fresult, 1)}
}

// release returns c, answered and taken off its stream (or never queued),
// to its pool.
func (c *fcall) release() {
	pool, done := c.pool, c.done
	*c = fcall{pool: pool, done: done}
	pool.Put(c)
}

// open starts a stream to conn with first queued on it (before its
// goroutine starts, so however the stream ends, first learns it); f.mu is
// held.
func (f *forwarder) open(conn *grpc.ClientConn, term uint64, first *fcall) {
	ctx, cancel := context.WithCancel(f.ctx)
	s := &fstream{f: f, conn: conn, term: term, ctx: ctx, cancel: cancel,
		sent: map[uint64]*fcall{}, wake: make(chan struct{}, 1)}
	s.enqueue(first)
	f.streams[conn] = s
	f.opened.Add(1)
	f.wg.Add(1)
	go s.run()
}

// fstream is one Forward stream: whoever is its sender (run, or a writer
// in sendQueued; one at a time, by sending) alone calls Send, its
// receive goroutine alone calls Recv.
type fstream struct {
	f      *forwarder
	conn   *grpc.ClientConn
	term   uint64
	ctx    context.Context
	cancel context.CancelFunc
	wake   chan struct{}

	mu    sync.Mutex
	err   error // set once the stream broke: it takes no more writes
	next  uint64
	queue []*fcall          // waiting to be sent
	sent  map[uint64]*fcall // sent, waiting for their reply, by seq
	// stream is the open stream (nil until run opened it); sending says
	// a goroutine is sending on it (run's, or a writer's: sendQueued),
	// and whoever sends takes the queue until it is empty, so a write
	// queued meanwhile needs nobody woken.
	stream  netsyv1.Forward_ForwardClient
	sending bool
}

// enqueue queues c for the next message, unless the stream broke (ok
// false). send says the caller is to send it itself (sendQueued): the
// stream is open, nobody sends on it and nothing is in flight, so the
// write goes out from its
// own goroutine instead of waking run's (one goroutine hop less on every
// forwarded write that finds the stream idle, as a lone client's always
// does).
func (s *fstream) enqueue(c *fcall) (ok, send bool) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return false, false
	}
	s.next++
	c.req.Seq = s.next
	s.queue = append(s.queue, c)
	if s.sending {
		// The sender takes it before it stops.
		s.mu.Unlock()
		return true, false
	}
	if s.stream != nil && s.f.beforeSend == nil && len(s.sent) == 0 && c.size <= maxWriterBatchBytes {
		// Nothing is in flight: the Primary read (and answered) all
		// this stream sent, so its flow-control window is open and a
		// send of up to maxWriterBatchBytes does not block: the writer
		// is back to waiting for its reply (or its client's deadline)
		// at once, as when the stream's goroutine sent.
		s.sending = true
		s.mu.Unlock()
		return true, true
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return true, false
}

// maxWriterBatchBytes bounds the message a writer sends itself: two of
// them fit, with what the Primary read but did not yet acknowledge, in
// the stream's flow-control window (peer.streamWindowBytes, 4 MiB), so a
// writer's send never waits for the Primary to read.
const maxWriterBatchBytes = 1 << 20

// maxWriterSends is how many messages a writer that became the sender
// (sendQueued) sends before it hands the queue to run's goroutine: its
// own reply may be back by then, and it should not wait on others'
// writes under a steady load.
const maxWriterSends = 2

// sendQueued sends what is queued from a writer's goroutine, which
// enqueue made the sender; it hands over to run (and stops sending) when
// the queue is empty or after maxWriterSends messages.
func (s *fstream) sendQueued() {
	// As run does: let the writes already runnable queue theirs first, so
	// they share this message (they see a sender, and wake nobody).
	runtime.Gosched()
	for range maxWriterSends {
		if !s.sendOnce(maxWriterBatchBytes) {
			return
		}
		s.f.writerSends.Add(1)
	}
	s.mu.Lock()
	s.sending = false
	more := len(s.queue) > 0 && s.err == nil
	s.mu.Unlock()
	if more {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// sendOnce takes the queue and sends it as one message; it reports
// whether the caller is still the sender (false: the queue was empty, and
// sending is cleared, or the stream broke).
func (s *fstream) sendOnce(limit int) bool {
	reqs := s.take(limit)
	if len(reqs) == 0 {
		return false
	}
	if err := s.stream.Send(&netsyv1.ForwardBatch{Requests: reqs}); err != nil {
		if !errors.Is(err, io.EOF) {
			s.broken(err)
		}
		// On io.EOF the Primary ended the stream: Recv says why
		// (Unimplemented, from an older version) and ends it.
		return false
	}
	return true
}

// take moves what is queued (up to limit bytes, and at least one
// write) to sent and returns it as a batch; writes whose caller is gone
// are dropped. The caller is the sender: with nothing to send (or the
// stream broken) it no longer is.
func (s *fstream) take(limit int) []*netsyv1.ForwardRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	reqs := s.takeLocked(limit)
	if len(reqs) == 0 {
		s.sending = false
	}
	return reqs
}

func (s *fstream) takeLocked(limit int) []*netsyv1.ForwardRequest {
	if s.err != nil {
		return nil
	}
	var reqs []*netsyv1.ForwardRequest
	n, size := 0, 0
	for ; n < len(s.queue); n++ {
		c := s.queue[n]
		if len(reqs) > 0 && size+c.size > limit {
			break
		}
		select {
		case <-c.gone:
			continue
		default:
		}
		if reqs == nil {
			reqs = make([]*netsyv1.ForwardRequest, 0, len(s.queue)-n)
		}
		if !c.deadline.IsZero() {
			// As grpc-timeout does for a unary call: the Primary gives
			// up when the client would have, counted from the send (not
			// the queueing) and rounded up. At least 1 ms: 0 means none.
			left := c.deadline.Sub(s.f.clk.Now())
			c.req.TimeoutMs = max(int64((left+time.Millisecond-1)/time.Millisecond), 1)
		}
		size += c.size
		reqs = append(reqs, c.req)
		s.sent[c.req.Seq] = c
	}
	rest := copy(s.queue, s.queue[n:])
	clear(s.queue[rest:])
	s.queue = s.queue[:rest]
	return reqs
}

// run opens the stream and sends until it breaks or the forwarder closes.
func (s *fstream) run() {
	defer s.f.wg.Done()
	stream, err := netsyv1.NewForwardClient(s.conn).Forward(s.ctx)
	if err != nil {
		s.broken(err)
		return
	}
	s.mu.Lock()
	s.stream = stream
	s.mu.Unlock()
	s.f.wg.Add(1)
	go s.receive(stream)
	for {
		select {
		case <-s.wake:
		case <-s.ctx.Done():
			s.broken(s.ctx.Err())
			return
		}
		// Writes come in bursts (the clients a commit answered send
		// their next ones together): let those already runnable queue
		// theirs before taking the queue, so they share a message
		// instead of each one's wake-up running this goroutine. No
		// timer: a lone write waits for nothing.
		runtime.Gosched()
		s.mu.Lock()
		if s.sending || len(s.queue) == 0 {
			// A writer sends (and takes what was queued for this wake).
			s.mu.Unlock()
			continue
		}
		s.sending = true
		s.mu.Unlock()
		for {
			if s.f.beforeSend != nil {
				s.f.beforeSend()
			}
			if !s.sendOnce(maxForwardBatchBytes) {
				break
			}
		}
	}
}

// receive hands each reply to its write until the stream breaks.
func (s *fstream) receive(stream netsyv1.Forward_ForwardClient) {
	defer s.f.wg.Done()
	for {
		msg, err := stream.Recv()
		if err != nil {
			s.broken(err)
			return
		}
		s.mu.Lock()
		for _, r := range msg.Replies {
			if c := s.sent[r.Seq]; c != nil {
				delete(s.sent, r.Seq)
				c.done <- fresult{reply: r}
			}
		}
		s.mu.Unlock()
	}
}

// broken ends the stream with err: writes never sent fail as not sent,
// writes in flight with an error whose outcome is unknown (write()
// resolves them by request id, as a unary call lost in flight); both go
// as etcd calls when the Primary does not serve the stream.
func (s *fstream) broken(err error) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	s.err = err
	queued, sent := s.queue, s.sent
	s.queue, s.sent = nil, nil
	s.mu.Unlock()
	s.cancel()
	unimplemented := status.Code(err) == codes.Unimplemented
	f := s.f
	f.mu.Lock()
	if f.streams[s.conn] == s {
		delete(f.streams, s.conn)
	}
	if unimplemented {
		f.legacy[s.conn] = s.term
	}
	f.mu.Unlock()
	notSent := fmt.Errorf("%w: %v", errNotSent, err)
	// Not wrapped: the stream's status code (Canceled, Unavailable, ...)
	// must not pass for the Primary's answer to the write.
	lost := fmt.Errorf("the forward stream to the Primary broke with the write in flight: %v", err)
	if unimplemented {
		notSent, lost = errUseUnary, errUseUnary
	}
	for _, c := range queued {
		c.done <- fresult{err: notSent}
	}
	for _, c := range sent {
		c.done <- fresult{err: lost}
	}
}

// target is where and how write() sends a request: the Primary's
// connection, its term, and the request id (named: the request carries
// one).
type target struct {
	conn  *grpc.ClientConn
	term  uint64
	id    engine.RequestID
	named bool
}

// remoteFunc sends a request to the Primary behind to.conn and returns
// its answer and, with a successful one, the Primary's commit index after
// it (hasCommit: the Primary said).
type remoteFunc[T any] func(ctx context.Context, to target) (resp T, commit uint64, hasCommit bool, err error)

// unary sends a request as an etcd (or Node) call of its own: the request
// id goes in RequestIDHeader, the commit index comes back in
// CommitIndexTrailer (CommitIndexInterceptor).
func unary[T any](call func(context.Context, *grpc.ClientConn, ...grpc.CallOption) (T, error)) remoteFunc[T] {
	return func(ctx context.Context, to target) (T, uint64, bool, error) {
		if to.named {
			ctx = metadata.AppendToOutgoingContext(ctx, RequestIDHeader, formatRequestID(to.id))
		}
		var trailer metadata.MD
		resp, err := call(ctx, to.conn, grpc.Trailer(&trailer))
		idx, perr := strconv.ParseUint(firstOf(trailer.Get(CommitIndexTrailer)), 10, 64)
		return resp, idx, perr == nil, err
	}
}

// etcdMarshaler and etcdResponse are the etcd messages' own (generated)
// codec.
type etcdMarshaler interface{ Marshal() ([]byte, error) }
type etcdResponse interface{ Unmarshal([]byte) error }

// streamed sends a named request (Put, DeleteRange, write Txn) over the
// Backend's Forward stream to the Primary, and as the etcd call call when
// the Primary does not serve the stream. Its answers are the unary
// call's: the Primary's gRPC error rebuilt from its status (code, message,
// details), or the response and the commit index.
func streamed[T etcdResponse](b *Backend, kind netsyv1.ForwardKind, req etcdMarshaler, newResp func() T, call func(context.Context, *grpc.ClientConn, ...grpc.CallOption) (T, error)) remoteFunc[T] {
	return func(ctx context.Context, to target) (T, uint64, bool, error) {
		var zero T
		if !to.named || b.fwd == nil {
			return unary(call)(ctx, to)
		}
		data, err := req.Marshal()
		if err != nil {
			return zero, 0, false, status.Errorf(codes.InvalidArgument, "marshal the forwarded request: %v", err)
		}
		reply, err := b.fwd.do(ctx, to.conn, to.term, &netsyv1.ForwardRequest{
			RequestMember: to.id.Member, RequestSeq: to.id.Seq, Kind: kind, Request: data})
		switch {
		case errors.Is(err, errUseUnary):
			return unary(call)(ctx, to)
		case err != nil:
			return zero, 0, false, err
		case len(reply.Status) > 0:
			return zero, 0, false, decodeStatus(reply.Status)
		}
		resp := newResp()
		if err := resp.Unmarshal(reply.Response); err != nil {
			// The Primary answered, but not legibly: its outcome is
			// unknown here (Internal), and resolved by request id.
			return zero, 0, false, status.Errorf(codes.Internal, "unmarshal the Primary's response: %v", err)
		}
		return resp, reply.CommitIndex, true, nil
	}
}

// decodeStatus is the gRPC error a ForwardReply's status stands for.
func decodeStatus(b []byte) error {
	var sp spb.Status
	if err := proto.Unmarshal(b, &sp); err != nil {
		return status.Errorf(codes.Internal, "decode the Primary's error: %v", err)
	}
	if err := status.FromProto(&sp).Err(); err != nil {
		return err
	}
	return status.Error(codes.Internal, "the Primary answered with neither a response nor an error")
}

// encodeStatus is err's status, as a ForwardReply carries it.
func encodeStatus(err error) []byte {
	b, merr := proto.Marshal(status.Convert(err).Proto())
	if merr != nil {
		b, _ = proto.Marshal(status.New(codes.Internal, err.Error()).Proto())
	}
	return b
}
