package etcdapi

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/netsy-io/netsy/internal/clock"
)

// Defaults match etcd's so clients tuned for etcd behave the same.
const (
	DefaultProgressNotifyInterval = 5 * time.Second
	DefaultMaxRequestBytes        = 1536 * 1024 // etcd --max-request-bytes
	DefaultMaxTxnOps              = 128         // etcd --max-txn-ops
	DefaultWatchBatchEvents       = 1000
	DefaultWatchResponseCost      = 20 * time.Microsecond

	// grpcOverheadBytes is the room etcd leaves above MaxRequestBytes for the
	// gRPC frame, so a request right at the limit is rejected with etcd's
	// "request is too large" rather than a transport error.
	grpcOverheadBytes = 512 * 1024

	// streamWorkers is sized for the client concurrency writes see: each
	// write holds its worker until the entry is durable.
	streamWorkers = 256

	// connWindowBytes is the fixed HTTP/2 flow-control window of a client
	// connection: the largest window gRPC's bandwidth-delay probing would
	// have grown it to. The server hands connection-level credit back as
	// it reads, so it bounds bytes in flight, not memory held.
	connWindowBytes = 16 << 20
)

// Config configures the client-port servers.
type Config struct {
	Backend Backend
	Clock   clock.Clock
	Logger  hclog.Logger
	// ProgressNotifyInterval is how often watchers created with
	// progress_notify get an empty response when nothing else was sent.
	ProgressNotifyInterval time.Duration
	// MaxRequestBytes bounds the encoded size of a write request and the
	// size at which watch responses of fragment-enabled watchers are split.
	MaxRequestBytes int
	// MaxTxnOps bounds the operations of one txn level, counted as etcd does.
	MaxTxnOps int
	// WatchBatchEvents bounds how many events one Backend.Events read returns
	// (whole revisions, so a batch may exceed it), capping the memory a
	// catching-up watcher holds.
	WatchBatchEvents int
	// WatchResponseCost paces busy watch streams (see startHold): the
	// server budgets one event response per WatchResponseCost, and streams
	// that keep it busier wait briefly so that several revisions go out in
	// one response per watcher. Negative disables pacing.
	WatchResponseCost time.Duration
}

func (c *Config) setDefaults() {
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.ProgressNotifyInterval <= 0 {
		c.ProgressNotifyInterval = DefaultProgressNotifyInterval
	}
	if c.MaxRequestBytes <= 0 {
		c.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if c.MaxTxnOps <= 0 {
		c.MaxTxnOps = DefaultMaxTxnOps
	}
	if c.WatchBatchEvents <= 0 {
		c.WatchBatchEvents = DefaultWatchBatchEvents
	}
	if c.WatchResponseCost == 0 {
		c.WatchResponseCost = DefaultWatchResponseCost
	}
}

// Server holds the etcd API services. It is safe for concurrent use.
type Server struct {
	cfg Config
	b   Backend
	log hclog.Logger

	// stopc is closed by Close so long-lived streams end and a graceful
	// gRPC stop can complete.
	stopc    chan struct{}
	stopOnce sync.Once

	// Gauges and counters, exported by Collectors.
	watchStreams     atomic.Int64
	watchers         atomic.Int64
	watchEventsSent  atomic.Int64
	watchResponses   atomic.Int64 // event responses, for watch pacing
	keepAliveStreams atomic.Int64
	ops              opCounts

	// hooks lets tests observe points of the watch loop that have no
	// externally visible effect. Nil in production.
	hooks *testHooks
}

type testHooks struct {
	// afterTick runs in the watch loop after a progress tick was handled.
	afterTick func()
	// watchRecv runs on the receive goroutine for each watch request,
	// before the stream loop sees it.
	watchRecv func(*pb.WatchRequest)
}

// New returns a Server over cfg.Backend, which must be set.
func New(cfg Config) *Server {
	if cfg.Backend == nil {
		panic("etcdapi: Config.Backend is nil")
	}
	cfg.setDefaults()
	return &Server{
		cfg:   cfg,
		b:     cfg.Backend,
		log:   cfg.Logger.Named("etcdapi"),
		stopc: make(chan struct{}),
	}
}

// ServerOptions are the gRPC options the client port needs: etcd's message
// size limits and a keepalive policy permissive enough for etcd clients
// (kube-apiserver pings every 30 s, also without active streams).
func (s *Server) ServerOptions() []grpc.ServerOption {
	maxRecv := s.cfg.MaxRequestBytes + grpcOverheadBytes
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxRecv),
		grpc.MaxSendMsgSize(math.MaxInt32),
		// Fixed flow-control windows turn off gRPC's bandwidth-delay
		// probing, which answered nearly every request that arrived while
		// no probe was out with a WINDOW_UPDATE and a PING (one more write
		// here, a read and a write on the client, one more read here): a
		// client writing one request at a time paid that on every write,
		// and the reader handed the probe to the writer goroutine before
		// the request to its handler
		// (TestSequentialPutsSendNoFlowControlPings). A stream's window is
		// the largest request: a unary request is buffered whole before
		// its handler runs anyway, and the largest one goes out without
		// waiting for a window update. A reply's headers, message and
		// trailers already leave in one write; a client writing one
		// request at a time still gets a second write per request, the
		// ack HTTP/2 requires of the PING its own bandwidth-delay probe
		// sends after each reply (grpc-go clients, etcd's included, probe
		// unless given fixed windows): only the client can turn that
		// off, and etcd's server answers the same pings (strace, 1 client:
		// netsy 3.0 writes a put, fsync'd log write included, etcd 3.35).
		grpc.StaticStreamWindowSize(int32(min(maxRecv, math.MaxInt32))),
		grpc.StaticConnWindowSize(max(connWindowBytes, int32(min(maxRecv, math.MaxInt32)))),
		grpc.MaxConcurrentStreams(math.MaxUint32),
		grpc.ForceServerCodecV2(newCodec()),
		// Reused handler goroutines keep their grown stacks; a fresh
		// goroutine per RPC spends a large share of the write path
		// growing its stack. Busy workers fall back to new goroutines.
		grpc.NumStreamWorkers(streamWorkers),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             5 * time.Second,
			PermitWithoutStream: true,
		}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time:    2 * time.Hour,
			Timeout: 20 * time.Second,
		}),
	}
}

// register adds every etcd service and a health service reporting SERVING
// to g, which must have been built with ServerOptions: the watch stream
// sends responses only its codec knows how to write.
func (s *Server) register(g *grpc.Server) {
	pb.RegisterKVServer(g, &kvServer{s})
	pb.RegisterWatchServer(g, &watchServer{s})
	pb.RegisterLeaseServer(g, &leaseServer{s})
	pb.RegisterMaintenanceServer(g, &maintenanceServer{s})
	pb.RegisterClusterServer(g, &clusterServer{s})
	pb.RegisterAuthServer(g, &authServer{s})
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(g, hs)
}

// KV is the KV service as NewGRPCServer serves it (validation, the
// Backend, etcd's error table, the header), for a caller that takes etcd
// requests over a transport of its own: the Primary's Forward stream
// (replica.ForwardServer) answers forwarded writes through it.
func (s *Server) KV() pb.KVServer { return &kvServer{s} }

// NewGRPCServer returns a gRPC server with ServerOptions, extra (TLS
// credentials, interceptors) and every service registered.
func (s *Server) NewGRPCServer(extra ...grpc.ServerOption) *grpc.Server {
	g := grpc.NewServer(append(s.ServerOptions(), extra...)...)
	s.register(g)
	return g
}

// Close ends every open watch, keep-alive and snapshot stream with etcd's
// "server stopped" (Unavailable, so clients reconnect elsewhere). Call it
// before grpc.Server.GracefulStop, which otherwise waits for watch streams
// that never end on their own.
func (s *Server) Close() {
	s.stopOnce.Do(func() { close(s.stopc) })
}

// Collectors returns the metrics of the client API for the caller to
// register: open watch and keep-alive streams, watchers, events sent.
func (s *Server) Collectors() []prometheus.Collector {
	gauge := func(name, help string, v *atomic.Int64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help},
			func() float64 { return float64(v.Load()) })
	}
	counter := func(name, help string, v *atomic.Int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(v.Load()) })
	}
	return []prometheus.Collector{
		gauge("netsy_watch_streams", "Open Watch streams.", &s.watchStreams),
		gauge("netsy_watchers", "Watchers across all Watch streams.", &s.watchers),
		gauge("netsy_lease_keepalive_streams", "Open LeaseKeepAlive streams.", &s.keepAliveStreams),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "netsy_watch_events_sent_total",
			Help: "Events sent to watchers.",
		}, func() float64 { return float64(s.watchEventsSent.Load()) }),
		// etcd's names for the same numbers and for the operations served
		// (opCounts says how they are counted).
		gauge("etcd_debugging_mvcc_watcher_total", "Total number of watchers.", &s.watchers),
		gauge("etcd_debugging_mvcc_watch_stream_total", "Total number of watch streams.", &s.watchStreams),
		counter("etcd_mvcc_range_total", "Total number of ranges seen by this member.", &s.ops.ranges),
		counter("etcd_mvcc_put_total", "Total number of puts seen by this member.", &s.ops.puts),
		counter("etcd_mvcc_delete_total", "Total number of deletes seen by this member.", &s.ops.deletes),
		counter("etcd_mvcc_txn_total", "Total number of txns seen by this member.", &s.ops.txns),
	}
}

// opCounts counts the key-value operations this server answered with
// success, as etcd's mvcc layer counts them: every range, put and delete,
// those inside a txn's executed branches included, and a txn once when it
// executed more than one operation. A request forwarded to the Primary
// counts on the node the client sent it to (the Primary's peer-port server
// is not exported), so the sum over a cluster is what its clients did.
type opCounts struct {
	ranges, puts, deletes, txns atomic.Int64
}

// txn counts the operations of a txn that succeeded.
func (c *opCounts) txn(r *pb.TxnRequest, resp *pb.TxnResponse) {
	var n [3]int64 // ranges, puts, deletes
	countTxn(r, resp, &n)
	c.ranges.Add(n[0])
	c.puts.Add(n[1])
	c.deletes.Add(n[2])
	if n[0]+n[1]+n[2] > 1 {
		c.txns.Add(1)
	}
}

// countTxn adds up the operations of the branch resp says ran.
func countTxn(r *pb.TxnRequest, resp *pb.TxnResponse, n *[3]int64) {
	ops := r.GetFailure()
	if resp.GetSucceeded() {
		ops = r.GetSuccess()
	}
	for i, op := range ops {
		switch v := op.Request.(type) {
		case *pb.RequestOp_RequestRange:
			n[0]++
		case *pb.RequestOp_RequestPut:
			n[1]++
		case *pb.RequestOp_RequestDeleteRange:
			n[2]++
		case *pb.RequestOp_RequestTxn:
			if i < len(resp.GetResponses()) {
				countTxn(v.RequestTxn, resp.Responses[i].GetResponseTxn(), n)
			}
		}
	}
}

// header fills the identity fields of h (allocating it if needed) and, if
// the Backend left it zero, the revision.
func (s *Server) header(h *pb.ResponseHeader) *pb.ResponseHeader {
	if h == nil {
		h = &pb.ResponseHeader{}
	}
	h.ClusterId, h.MemberId, h.RaftTerm = s.b.Identity()
	if h.Revision == 0 {
		h.Revision = s.b.CurrentRevision()
	}
	return h
}

// headerAt returns a filled header for revision rev.
func (s *Server) headerAt(rev int64) *pb.ResponseHeader {
	h := &pb.ResponseHeader{Revision: rev}
	h.ClusterId, h.MemberId, h.RaftTerm = s.b.Identity()
	return h
}
