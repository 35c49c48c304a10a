package replica

import (
	"context"
	"errors"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/engine"
	"github.com/netsy-io/netsy/internal/peer"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// ForwardKV is the etcd KV service a ForwardServer evaluates forwarded
// writes with: the peer port's (validation, the local-only Backend, and
// etcd's error table), so a write answers on the stream exactly as the
// same etcd call to the peer port does.
type ForwardKV interface {
	Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error)
	DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error)
	Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error)
}

// ForwardServerConfig configures a ForwardServer.
type ForwardServerConfig struct {
	KV ForwardKV
	// Committed is the engine's commit index, said with every answer
	// (CommitIndexTrailer's number).
	Committed func() uint64
	Clock     clock.Clock
}

// ForwardServer is the Primary's side of the Forward stream, served on
// the peer port. Each request of a batch is evaluated at once, all of
// them concurrently (they group-commit together, as separate etcd calls
// do), with its request id handed to the engine; replies go out, one
// sender at a time (replyQueue), as many in a message as are ready. A
// node that is not the Active Primary refuses every request unevaluated
// (etcd's "not leader"), as the etcd call would.
type ForwardServer struct {
	netsyv1.UnsafeForwardServer
	cfg ForwardServerConfig
	// withID hands a request id to the engine (tests watch it).
	withID func(context.Context, engine.RequestID) context.Context
	// workerSends counts the reply messages workers sent themselves
	// (replyQueue.add; tests read it).
	workerSends atomic.Int64
}

var _ netsyv1.ForwardServer = (*ForwardServer)(nil)

// maxIdleForwardWorkers bounds the idle workers one Forward stream keeps.
// It is sized for the writes one forwarding node has in flight under load
// (a third of 256 clients each, in the 3-node put-256 run): with 32, each
// group commit's writes beyond it started workers afresh, whose stacks
// grew again through the write path (newstack and newproc were 1.9% of
// the Primary's CPU there).
const maxIdleForwardWorkers = 128

// NewForwardServer returns a ForwardServer; cfg.KV and cfg.Committed must
// be set.
func NewForwardServer(cfg ForwardServerConfig) *ForwardServer {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	return &ForwardServer{cfg: cfg, withID: engine.WithRequestID}
}

// Forward serves one stream until the forwarding node ends it or it
// breaks; it returns once every request it took has been answered (or
// its answer dropped with the stream) and its goroutines have ended.
func (s *ForwardServer) Forward(stream netsyv1.Forward_ForwardServer) error {
	ctx := stream.Context()
	out := &replyQueue{wake: make(chan struct{}, 1), stream: stream, workerSends: &s.workerSends}
	sent := make(chan error, 1)
	go func() { sent <- out.run() }()
	// Each request is evaluated on a worker of the stream's: an idle one
	// if any (the unbuffered send finds it), else a new one. Up to
	// maxIdleForwardWorkers idle workers stay for the stream's life, so
	// their stacks, grown by the write path, are reused, as the etcd
	// calls' server workers are (etcdapi's streamWorkers); the rest end
	// once their request is answered, so a burst does not pin a
	// goroutine per write for as long as the connection lives.
	jobs := make(chan *netsyv1.ForwardRequest)
	var workers sync.WaitGroup
	var idle atomic.Int32
	var err error
	for {
		batch, rerr := stream.Recv()
		if rerr != nil {
			if !errors.Is(rerr, io.EOF) {
				err = rerr
			}
			break
		}
		for _, r := range batch.Requests {
			select {
			case jobs <- r:
				continue
			default:
			}
			workers.Add(1)
			// r goes in as an argument: a closure capturing the loop's
			// variable (and assigning it) would move it to the heap on
			// every iteration, one allocation per request even when an
			// idle worker takes it (BenchmarkForwardedPuts).
			go func(r *netsyv1.ForwardRequest) {
				defer workers.Done()
				for {
					out.add(s.eval(ctx, r))
					if idle.Add(1) > maxIdleForwardWorkers {
						idle.Add(-1)
						return
					}
					var ok bool
					r, ok = <-jobs
					idle.Add(-1)
					if !ok {
						return
					}
				}
			}(r)
		}
	}
	close(jobs)
	workers.Wait()
	out.close()
	if serr := <-sent; err == nil {
		err = serr
	}
	return err
}

// eval answers one forwarded request.
func (s *ForwardServer) eval(ctx context.Context, r *netsyv1.ForwardRequest) *netsyv1.ForwardReply {
	ctx = s.withID(ctx, engine.RequestID{Member: r.RequestMember, Seq: r.RequestSeq})
	if r.TimeoutMs > 0 {
		var cancel context.CancelFunc
		ctx, cancel = clock.WithTimeout(ctx, s.cfg.Clock, time.Duration(r.TimeoutMs)*time.Millisecond)
		defer cancel()
	}
	var resp etcdMarshaler
	var err error
	switch r.Kind {
	case netsyv1.ForwardKind_FORWARD_PUT:
		req := &pb.PutRequest{}
		if err = req.Unmarshal(r.Request); err == nil {
			resp, err = nonNil(s.cfg.KV.Put(ctx, req))
		}
	case netsyv1.ForwardKind_FORWARD_DELETE_RANGE:
		req := &pb.DeleteRangeRequest{}
		if err = req.Unmarshal(r.Request); err == nil {
			resp, err = nonNil(s.cfg.KV.DeleteRange(ctx, req))
		}
	case netsyv1.ForwardKind_FORWARD_TXN:
		req := &pb.TxnRequest{}
		if err = req.Unmarshal(r.Request); err == nil {
			resp, err = nonNil(s.cfg.KV.Txn(ctx, req))
		}
	default:
		err = status.Errorf(codes.Unimplemented, "netsy: a forwarded request of kind %v", r.Kind)
	}
	reply := &netsyv1.ForwardReply{Seq: r.Seq}
	if err == nil {
		reply.Response, err = resp.Marshal()
	}
	if err != nil {
		reply.Response, reply.Status = nil, encodeStatus(err)
		return reply
	}
	if len(reply.Response)+64 > peer.MaxMessageBytes {
		// The write is applied but its answer does not fit a peer
		// message (a txn with a huge range; the etcd call's would not
		// have fitted either). Aborted is an unknown outcome to the
		// forwarding node, which finds the write in its own log by
		// request id and rebuilds the answer there (see resolve), where
		// the client port's larger limit applies.
		reply.Response = nil
		reply.Status = encodeStatus(status.Error(codes.Aborted, "netsy: the forwarded write's response is larger than a peer message"))
		return reply
	}
	// As CommitIndexInterceptor: read after the write, so it covers it.
	reply.CommitIndex = s.cfg.Committed()
	return reply
}

// nonNil keeps a nil response out of an interface (a typed nil would not
// be nil there).
func nonNil[T interface {
	comparable
	etcdMarshaler
}](resp T, err error) (etcdMarshaler, error) {
	var zero T
	if err == nil && resp == zero {
		return nil, status.Error(codes.Internal, "netsy: the Primary evaluated the write to no response")
	}
	return resp, err
}

// replyQueue is the replies of one stream waiting to be sent. One
// goroutine at a time sends (sending): a worker whose reply finds nobody
// sending sends it itself, instead of waking the stream's send goroutine
// (run), which sends what a worker handed back and the rest at the end.
type replyQueue struct {
	wake   chan struct{}
	stream netsyv1.Forward_ForwardServer
	// workerSends counts the messages workers sent (tests read it).
	workerSends *atomic.Int64

	mu      sync.Mutex
	queue   []*netsyv1.ForwardReply
	closed  bool
	sending bool
	err     error // the first failed send's
}

// add queues r, and sends it (with whatever else is queued by then) when
// nobody sends: one goroutine hop less per reply on a stream that is not
// busy, as a lone client's forwarded writes always find it.
func (q *replyQueue) add(r *netsyv1.ForwardReply) {
	q.mu.Lock()
	q.queue = append(q.queue, r)
	if q.sending {
		// The sender takes it before it stops.
		q.mu.Unlock()
		return
	}
	q.sending = true
	q.mu.Unlock()
	// The replies of one group commit are readied together: let the
	// workers already runnable add theirs first, so they share this
	// message (they see a sender, and wake nobody).
	runtime.Gosched()
	for range maxWriterSends {
		if !q.sendOnce() {
			return
		}
		if q.workerSends != nil {
			q.workerSends.Add(1)
		}
	}
	// A worker owes its stream no more than that: run sends the rest.
	q.mu.Lock()
	q.sending = false
	more := len(q.queue) > 0
	q.mu.Unlock()
	if more {
		q.poke()
	}
}

func (q *replyQueue) poke() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// close makes run return once it has sent what is queued; every worker
// has returned from add by then.
func (q *replyQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.poke()
}

// sendOnce takes what is queued, up to maxForwardBatchBytes (at least one
// reply), and sends it as one message; after a failed send it drops what
// it takes (the stream is broken: Recv ends the handler). It reports
// whether the caller is still the sender: false when the queue was empty,
// and then sending is cleared.
func (q *replyQueue) sendOnce() bool {
	q.mu.Lock()
	n, size := 0, 0
	for n < len(q.queue) {
		sz := len(q.queue[n].Response) + len(q.queue[n].Status) + 32
		if n > 0 && size+sz > maxForwardBatchBytes {
			break
		}
		size += sz
		n++
	}
	if n == 0 {
		q.sending = false
		closed := q.closed
		q.mu.Unlock()
		if closed {
			// run may have seen this sender and waited for it.
			q.poke()
		}
		return false
	}
	batch := q.queue[:n:n]
	q.queue = q.queue[n:]
	if len(q.queue) == 0 {
		q.queue = nil
	}
	err := q.err
	q.mu.Unlock()
	if err == nil {
		if err := q.stream.Send(&netsyv1.ForwardReplies{Replies: batch}); err != nil {
			q.mu.Lock()
			q.err = err
			q.mu.Unlock()
		}
	}
	return true
}

// run sends what workers hand back, until the queue is closed and empty;
// it returns the first failed send's error.
func (q *replyQueue) run() error {
	for range q.wake {
		// As add: let the workers already runnable add theirs first. No
		// timer: nothing waits for a reply that is not ready.
		runtime.Gosched()
		q.mu.Lock()
		if !q.sending {
			q.sending = true
			q.mu.Unlock()
			for q.sendOnce() {
			}
			q.mu.Lock()
		}
		done := q.closed && !q.sending && len(q.queue) == 0
		err := q.err
		q.mu.Unlock()
		if done {
			return err
		}
	}
	return nil
}
