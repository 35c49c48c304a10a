package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"

	"github.com/netsy-io/netsy/internal/backup"
	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/clusterview"
	"github.com/netsy-io/netsy/internal/config"
	"github.com/netsy-io/netsy/internal/engine"
	"github.com/netsy-io/netsy/internal/etcdapi"
	"github.com/netsy-io/netsy/internal/objstore"
	objopen "github.com/netsy-io/netsy/internal/objstore/open"
	"github.com/netsy-io/netsy/internal/objwal"
	"github.com/netsy-io/netsy/internal/peer"
	"github.com/netsy-io/netsy/internal/portmux"
	"github.com/netsy-io/netsy/internal/replica"
	"github.com/netsy-io/netsy/internal/roles"
	"github.com/netsy-io/netsy/internal/vfs"
	"github.com/netsy-io/netsy/internal/wal"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// Node is one running netsy process.
type Node struct {
	cfg   config.Config
	log   hclog.Logger
	clock clock.Clock

	lock     *os.File
	store    objstore.Store
	ownStore bool // opened here, so closed here
	objlog   *objwal.Log
	eng      *engine.Engine
	api      *etcdapi.Server
	grpc     *grpc.Server
	pool     *peer.Pool
	tls      *nodeTLS
	roles    *roles.Roles
	peerL    net.Listener
	peerAPI  *etcdapi.Server
	peerGRPC *grpc.Server
	// peerServing runs the peer server.
	peerServing *peer.Serving
	metrics     nodeMetrics // what the node measures itself (etcdmetrics.go)
	http        *http.Server
	client      net.Listener
	httpL       net.Listener
	// The client port is shared: clientMux hands gRPC connections to grpc
	// and HTTP ones to gwHTTP, which serves etcd's JSON gateway.
	clientMux *portmux.Mux
	gw        *etcdapi.Gateway
	gwHTTP    *http.Server
	ready     atomic.Bool
	// rolesP is roles for the engine's OnDeposed, which may run before
	// the roles exist (a follower's engine then has no Primary to tell).
	rolesP atomic.Pointer[roles.Roles]
	// dirWatch notices the data directory deleted under the node.
	dirWatch *dataDirWatch

	// apiBackend is api's Backend: it owns the Forward streams.
	apiBackend *replica.Backend

	// scratch is a directory under the data directory that only this run
	// uses (a read-only node's spilled values), removed at close.
	scratch string

	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// Start opens the data directory, reconciles with object storage, recovers
// state and starts serving. ctx bounds start-up only.
func Start(ctx context.Context, cfg config.Config, logger hclog.Logger, clk clock.Clock) (*Node, error) {
	return StartWith(ctx, cfg, logger, Deps{Clock: clk})
}

// Deps replace what a node would otherwise build for itself: tests inject
// a fake clock, an object store they control and a disk that can lose
// power. Zero values take the real thing.
type Deps struct {
	Clock clock.Clock
	// Store is used instead of opening --storage. The node does not close
	// it: the caller may hand it to the node's next incarnation.
	Store objstore.Store
	// FS holds the local log (<data-dir>/wal) instead of the real disk.
	FS vfs.FS
	// Network carries the peer protocol instead of TCP (an in-memory
	// network for tests of a whole cluster in one process).
	Network peer.Network
	// WaitReady makes StartWith return only once the node knows the
	// Primary and can serve.
	WaitReady bool
}

// StartWith is Start with injected dependencies.
func StartWith(ctx context.Context, cfg config.Config, logger hclog.Logger, deps Deps) (_ *Node, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	clk := deps.Clock
	if clk == nil {
		clk = clock.Real()
	}
	if cfg.ReadOnly() {
		return startReadOnly(ctx, cfg, logger, deps, clk)
	}
	n, storageURL, err := startBase(cfg, logger, clk)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	network := deps.Network
	if network == nil {
		network = peer.TCP()
	}
	// Listen first: the addresses a node advertises are the ones it got
	// (a port 0 in a test becomes a real port). Serving starts later.
	n.peerL, err = network.Listen(cfg.PeerAddr)
	if err != nil {
		return nil, fmt.Errorf("listen on --peer-addr %s: %w", cfg.PeerAddr, err)
	}
	n.client, err = net.Listen("tcp", cfg.ClientAddr)
	if err != nil {
		return nil, fmt.Errorf("listen on --client-addr %s: %w", cfg.ClientAddr, err)
	}
	n.httpL, err = net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("listen on --http-addr %s: %w", cfg.HTTPAddr, err)
	}
	cfg.PeerAddr, cfg.ClientAddr, cfg.HTTPAddr = n.peerL.Addr().String(), n.client.Addr().String(), n.httpL.Addr().String()
	n.cfg = cfg
	if deps.Store != nil {
		n.store = deps.Store
	} else {
		n.store, err = objopen.Open(ctx, storageURL, objopen.Options{
			S3Endpoint:  cfg.S3Endpoint,
			S3Region:    cfg.S3Region,
			S3PathStyle: cfg.S3PathStyle,
		})
		if err != nil {
			return nil, fmt.Errorf("--storage: %w", err)
		}
		n.ownStore = true
	}
	n.metrics.store = newStoreMetrics()
	n.store = instrumentStore(n.store, n.metrics.store, clk)
	n.pool = peer.NewPool(network, n.tls.peerDialOptions()...)
	others, err := checkRegistration(ctx, cfg, n.store, clk, probeNode(n.pool, clk, cfg.HeartbeatInterval), logger)
	if err != nil {
		return nil, fmt.Errorf("register node %s in %s: %w", cfg.NodeID, storageURL, err)
	}
	alone := others == 0
	warnQuorum(cfg, others, logger)
	ackOnFsync := cfg.Quorum == -1 && alone
	// A branch's first node builds the state at the branch's revision
	// from its parent's objects and makes it this store's own first
	// snapshot; on any other store this is one GET that finds no manifest.
	if _, err := backup.StartBranch(ctx, backup.BranchStart{
		Store: n.store, URL: storageURL, DataDir: cfg.DataDir, Clock: clk, Logger: logger.Named("branch"),
		OpenParent: func(ctx context.Context, url string) (objstore.Store, error) {
			return objopen.Open(ctx, url, objopen.Options{S3Endpoint: cfg.S3Endpoint, S3Region: cfg.S3Region, S3PathStyle: cfg.S3PathStyle})
		},
	}); err != nil {
		return nil, fmt.Errorf("start the branch in %s: %w", storageURL, err)
	}
	n.objlog, err = objwal.Open(ctx, objwal.Options{
		Store:    n.store,
		WALDir:   filepath.Join(cfg.DataDir, "wal"),
		FS:       deps.FS,
		Mode:     objwal.ModeSync,
		Follower: true,
		// Alone with majority quorum, a node acknowledged on its local
		// fsync: a local entry the bucket contradicts was acknowledged,
		// and so may be an entry after damage in the local log. Any other
		// node's acknowledged entries are in the bucket or on a quorum of
		// replicas, so its log is cut at damage and the rest fetched back.
		AckOnFsync:   ackOnFsync,
		CutDamage:    !ackOnFsync,
		SnapshotKeep: cfg.SnapshotKeep,
		Retention:    cfg.Retention,
		Clock:        clk,
		Logger:       logger.Named("objwal"),
	})
	if err != nil {
		if d := (*wal.DamageError)(nil); ackOnFsync && errors.As(err, &d) {
			return nil, refuseDamagedLog(cfg.DataDir, d, err)
		}
		return nil, fmt.Errorf("open log (storage %s): %w", storageURL, err)
	}
	spillDir := ""
	if cfg.ValueSpillMin > 0 {
		spillDir = filepath.Join(cfg.DataDir, "values")
	}
	n.pool = peer.NewPool(network, n.tls.peerDialOptions()...)
	n.eng, err = engine.Open(engine.Config{
		Storage:         n.objlog,
		SnapshotEntries: uint64(cfg.SnapshotEveryRevisions),
		// Each node snapshots at its own phase of the interval, so the
		// nodes of a cluster never all encode the whole state at once.
		SnapshotPhase: engine.SnapshotPhase(cfg.NodeID, uint64(cfg.SnapshotEveryRevisions)),
		SpillDir:      spillDir,
		SpillMin:      cfg.ValueSpillMin,
		Clock:         clk,
		Logger:        logger,
		ClusterID:     roles.ClusterIDHash(cfg.ClusterID),
		Follower:      true,
		// The space quota; the NOSPACE alarm is raised under the member
		// id the Elector gave this node.
		QuotaBackendBytes: cfg.QuotaBytes(),
		Member: func() uint64 {
			if r := n.rolesP.Load(); r != nil {
				return r.MemberID()
			}
			return 0
		},
		OnDeposed: func(err error) {
			if r := n.rolesP.Load(); r != nil {
				r.EngineDeposed(err)
			}
		},
	})
	if errors.Is(err, engine.ErrQuotaTooSmall) {
		return nil, fmt.Errorf("--quota-backend-bytes: %w", err)
	}
	if err != nil {
		return nil, fmt.Errorf("open engine: %w", err)
	}
	// A new log preallocates its first segment (64 MiB of zeros) while
	// the engine recovers; serve once it is done, so that the first write
	// does not wait for it (Kubernetes' compactor test allows 100 ms).
	select {
	case <-n.objlog.WALPrepared():
	case <-ctx.Done():
		return nil, fmt.Errorf("preallocate the log's first segment: %w", ctx.Err())
	}
	r, err := roles.New(roles.Config{
		Node:   cfg,
		Clock:  clk,
		Store:  n.store,
		Engine: n.eng,
		Log:    n.objlog,
		// Follow streams, and every call to another node's Elector and
		// Node services, go over the peer pool (TLS and all).
		Conn:      n.pool.Conn,
		Transport: roles.GRPCTransport{Conn: n.pool.Conn},
		Logger:    logger,
	})
	if err != nil {
		return nil, err
	}
	n.roles = r
	n.rolesP.Store(r)
	// Not ctx: it bounds start-up only; Close stops the roles.
	r.Start(context.Background())

	// The peer port: the netsy peer services, and the etcd API over the
	// local engine only, for requests other nodes forward to this one
	// while it is the Primary (a forwarded request is never forwarded
	// again).
	n.peerAPI = etcdapi.New(etcdapi.Config{
		Backend:         replica.NewBackend(replica.BackendConfig{Local: n.eng, Roles: r, Clock: clk}),
		Clock:           clk,
		Logger:          logger.Named("peer"),
		MaxRequestBytes: cfg.MaxRequestBytes,
	})
	peerOpts := append(peer.ServerOptions(),
		grpc.ChainUnaryInterceptor(replica.CommitIndexInterceptor(n.eng.CommittedIndex)))
	n.metrics.peerGRPC = newPeerGRPCMetrics()
	peerOpts = append(peerOpts, grpcMetricsOptions(n.metrics.peerGRPC)...)
	n.peerGRPC = n.peerAPI.NewGRPCServer(append(peerOpts, n.tls.peerServerOptions()...)...)
	r.RegisterPeerServices(n.peerGRPC)
	// Writes other nodes forward while this one is the Primary come on
	// one stream per node, answered through the peer port's KV service.
	netsyv1.RegisterForwardServer(n.peerGRPC, replica.NewForwardServer(replica.ForwardServerConfig{
		KV: n.peerAPI.KV(), Committed: n.eng.CommittedIndex, Clock: clk,
	}))
	n.metrics.peerGRPC.InitializeMetrics(n.peerGRPC)
	n.peerServing = peer.Serve(n.peerGRPC, n.peerL)

	n.apiBackend = replica.NewBackend(replica.BackendConfig{
		Local: n.eng, Roles: r, Clock: clk,
		Conn: n.pool.Conn,
	})
	n.api = etcdapi.New(etcdapi.Config{
		Backend:                n.apiBackend,
		Clock:                  clk,
		Logger:                 logger,
		ProgressNotifyInterval: cfg.ProgressNotifyInterval,
		MaxRequestBytes:        cfg.MaxRequestBytes,
	})
	n.metrics.grpc = newGRPCMetrics(cfg.Metrics)
	n.grpc = n.api.NewGRPCServer(append(n.tls.clientServerOptions(logger, clk), grpcMetricsOptions(n.metrics.grpc)...)...)
	n.metrics.grpc.InitializeMetrics(n.grpc)
	n.http = &http.Server{Handler: n.httpHandler(), ReadHeaderTimeout: 10 * time.Second}
	if err := n.serve(); err != nil {
		return nil, err
	}
	n.watchDataDir(deps.FS)
	n.ready.Store(true)
	n.log.Info("serving", "node_id", cfg.NodeID, "cluster_id", cfg.ClusterID, "client_addr", n.client.Addr().String(),
		"peer_addr", n.peerL.Addr().String(), "http_addr", n.httpL.Addr().String(),
		"data_dir", cfg.DataDir, "storage", storageURL, "quorum", cfg.Quorum, "rev", n.eng.CurrentRevision())
	if deps.WaitReady {
		if err := n.waitReady(ctx); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// serveGateway shares the client port: the gRPC server gets the gRPC
// connections (n.clientMux.GRPC) and etcd's JSON gateway the HTTP ones,
// both held to the client port's TLS (internal/portmux).
func (n *Node) serveGateway() error {
	n.clientMux = portmux.New(n.client, portmux.Options{TLS: n.tls.client, Clock: n.clock, Logger: n.log.Named("tls")})
	gw, err := n.api.NewGateway(n.tls.requestLogOptions(n.log, n.clock)...)
	if err != nil {
		return err
	}
	n.gw = gw
	n.gwHTTP = &http.Server{Handler: gw, ReadHeaderTimeout: 10 * time.Second}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		if err := n.gwHTTP.Serve(n.clientMux.HTTP()); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("JSON gateway stopped", "error", err)
		}
	}()
	n.clientMux.Start()
	return nil
}

// stopGateway stops the JSON gateway and closes the client port. Its watch
// and keep-alive streams have ended with n.api.Close.
func (n *Node) stopGateway() {
	if n.gwHTTP != nil {
		ctx, cancel := clock.WithTimeout(context.Background(), n.clock, 2*time.Second)
		_ = n.gwHTTP.Shutdown(ctx)
		cancel()
		n.gwHTTP.Close()
	}
	if n.gw != nil {
		n.gw.Close()
	}
	if n.clientMux != nil {
		n.clientMux.Close()
	}
}

// waitReady waits until the node knows the Primary and can serve.
func (n *Node) waitReady(ctx context.Context) error {
	for {
		ch := n.roles.Changed()
		if n.notReady() == nil {
			return nil
		}
		select {
		case <-ch:
		case <-n.clock.After(20 * time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("wait for the node to be ready (%v): %w", n.notReady(), ctx.Err())
		}
	}
}

// ClientAddr is the address the client API listens on.
func (n *Node) ClientAddr() string { return n.client.Addr().String() }

// serve starts serving the client port (gRPC and the JSON gateway) and
// the HTTP port, in both start orders.
func (n *Node) serve() error {
	if err := n.serveGateway(); err != nil {
		return err
	}
	n.wg.Add(2)
	go func() {
		defer n.wg.Done()
		if err := n.grpc.Serve(n.clientMux.GRPC()); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			n.log.Error("client API stopped", "error", err)
		}
	}()
	go func() {
		defer n.wg.Done()
		if err := n.http.Serve(n.httpL); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("http server stopped", "error", err)
		}
	}()
	return nil
}

// startBase begins what both start orders (a node, and a read-only node)
// share: the data directory created and locked, the storage URL and the
// TLS settings. On an error it has closed what it began.
func startBase(cfg config.Config, logger hclog.Logger, clk clock.Clock) (_ *Node, storageURL string, err error) {
	n := &Node{cfg: cfg, log: logger, clock: clk}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, "", fmt.Errorf("create data dir: %w", err)
	}
	if n.lock, err = lockDir(cfg.DataDir); err != nil {
		return nil, "", err
	}
	if storageURL, err = cfg.StorageURL(); err != nil {
		return nil, "", err
	}
	if n.tls, err = newNodeTLS(cfg, clk, logger); err != nil {
		return nil, "", err
	}
	return n, storageURL, nil
}

// HTTPAddr is the address of the health and metrics endpoint.
func (n *Node) HTTPAddr() string { return n.httpL.Addr().String() }

func (n *Node) httpHandler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "netsy_committed_revision", Help: "Committed store revision."},
		func() float64 { return float64(n.eng.CurrentRevision()) }))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "netsy_compact_revision", Help: "Compaction floor revision."},
		func() float64 { return float64(n.eng.CompactRevision()) }))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "netsy_committed_index", Help: "Last durable log index."},
		func() float64 { return float64(n.eng.CommittedIndex()) }))
	reg.MustRegister(n.api.Collectors()...)
	reg.MustRegister(n.api.SpaceCollector())
	reg.MustRegister(objwalCollector{n.objlog})
	reg.MustRegister(restoreCollector{n.objlog})
	reg.MustRegister(n.tls.collector())
	reg.MustRegister(n.roles.Collectors()...)
	reg.MustRegister(n.etcdCollectors()...)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	addProbes(mux, n.eng.Failed)
	mux.Handle("/cluster/state", clusterview.StateHandler(n.clusterState))
	mux.Handle("/cluster/leader", clusterview.LeaderHandler(n.clusterState))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := n.unhealthy(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "unhealthy: %v\n", err)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := n.notReady(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: %v\n", err)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// clusterState is the Elector's full view (asked of it, or of this node's
// own Elector), and this node's own state; when the Elector does not
// answer, only the latter (which holds this node's view).
func (n *Node) clusterState(ctx context.Context) (*netsyv1.ClusterState, *netsyv1.NodeState, error) {
	ctx, cancel := clock.WithTimeout(ctx, n.clock, 2*time.Second)
	defer cancel()
	cs, self := n.roles.ClusterState(ctx)
	return cs, self, nil
}

// notReady says why the node should not get client traffic, or nil: it
// is starting or stopping, it does not know the Primary yet, or it cannot
// serve from the Primary's history yet.
func (n *Node) notReady() error {
	switch {
	case !n.ready.Load():
		return errors.New("starting or stopping")
	case n.eng.Deposed() != nil:
		return n.eng.Deposed()
	case n.eng.Failed() != nil:
		return n.eng.Failed()
	}
	return n.roles.Ready()
}

// leaveTimeout bounds a graceful leave: handoff or drain, deregistration
// and resigning the Elector lock.
const leaveTimeout = 15 * time.Second

// leave takes this node out of the cluster gracefully (roles.Leave): a
// Primary hands its role off or drains, the node turns Degraded,
// deregisters and deletes its registration, and an Elector resigns its
// lock so another node takes over at once.
func (n *Node) leave() {
	ctx, cancel := clock.WithTimeout(context.Background(), n.clock, leaveTimeout)
	defer cancel()
	n.roles.Leave(ctx)
}

// Close leaves the cluster gracefully, stops serving and shuts down in
// dependency order: in-flight client requests get a bounded time to
// finish, then the roles stop, then the engine answers or fails every
// pending write, then the log flushes what it was given.
func (n *Node) Close() error { return n.shutdown(true) }

// shutdown stops the node; without graceful it skips leaving the cluster
// (what a crash or power loss does, for tests).
func (n *Node) shutdown(graceful bool) error {
	n.closeOnce.Do(func() {
		n.ready.Store(false)
		if n.dirWatch != nil {
			n.dirWatch.stop()
		}
		if graceful && n.roles != nil && n.peerServing != nil {
			n.leave()
		}
		if n.api != nil {
			// Long-lived watch and keep-alive streams end here, so the
			// graceful stop below only waits for unary requests.
			n.api.Close()
		}
		if n.grpc != nil {
			done := make(chan struct{})
			go func() { n.grpc.GracefulStop(); close(done) }()
			select {
			case <-done:
			case <-n.clock.After(5 * time.Second):
				n.grpc.Stop()
				<-done
			}
		}
		n.stopGateway()
		if n.apiBackend != nil {
			// No client request is left: end the Forward streams.
			n.apiBackend.Close()
		}
		if n.http != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = n.http.Shutdown(ctx)
			cancel()
		} else if n.httpL != nil {
			n.httpL.Close()
		}
		if n.clientMux == nil && n.client != nil {
			n.client.Close()
		}
		n.wg.Wait()
		if n.peerAPI != nil {
			n.peerAPI.Close()
		}
		if n.peerServing != nil {
			n.peerServing.Close()
		} else if n.peerL != nil {
			n.peerL.Close()
		}
		if n.roles != nil {
			n.roles.Close()
		}
		if n.pool != nil {
			n.pool.Close()
		}
		if n.eng != nil {
			n.eng.Close()
		}
		if n.objlog != nil {
			if err := n.objlog.Close(); err != nil {
				n.closeErr = fmt.Errorf("close log: %w", err)
			}
		}
		if n.store != nil && n.ownStore {
			n.store.Close()
		}
		if n.scratch != "" {
			os.RemoveAll(n.scratch)
		}
		if n.lock != nil {
			n.lock.Close()
		}
	})
	return n.closeErr
}

// objwalCollector exports objwal.Log.Stats, read once per scrape so the
// counters in one scrape are consistent with each other.
type objwalCollector struct{ l *objwal.Log }

var (
	objwalPutsDesc    = prometheus.NewDesc("netsy_objwal_puts_total", "WAL chunks uploaded to object storage (the start-up claim not included).", nil, nil)
	objwalEntriesDesc = prometheus.NewDesc("netsy_objwal_entries_uploaded_total", "Log entries carried by uploaded WAL chunks.", nil, nil)
	objwalBytesDesc   = prometheus.NewDesc("netsy_objwal_bytes_uploaded_total", "Bytes of uploaded WAL chunks.", nil, nil)
	objwalRetriesDesc = prometheus.NewDesc("netsy_objwal_upload_retries_total", "Failed WAL chunk uploads that were retried.", nil, nil)
	objwalMaxDesc     = prometheus.NewDesc("netsy_objwal_max_entries_per_put", "Most entries one uploaded WAL chunk carried.", nil, nil)
	walFsyncDesc      = prometheus.NewDesc("netsy_wal_fsync_duration_seconds", "Duration of the local WAL's fsyncs (etcd's etcd_disk_wal_fsync_duration_seconds buckets).", nil, nil)
	walEntriesDesc    = prometheus.NewDesc("netsy_wal_fsync_entries_total", "Log entries made durable by the local WAL's fsyncs; per fsync, the group-commit size.", nil, nil)
)

func (c objwalCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{objwalPutsDesc, objwalEntriesDesc, objwalBytesDesc, objwalRetriesDesc, objwalMaxDesc, walFsyncDesc, walEntriesDesc} {
		ch <- d
	}
}

func (c objwalCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.l.Stats()
	ch <- prometheus.MustNewConstMetric(objwalPutsDesc, prometheus.CounterValue, float64(st.Puts))
	ch <- prometheus.MustNewConstMetric(objwalEntriesDesc, prometheus.CounterValue, float64(st.Entries))
	ch <- prometheus.MustNewConstMetric(objwalBytesDesc, prometheus.CounterValue, float64(st.Bytes))
	ch <- prometheus.MustNewConstMetric(objwalRetriesDesc, prometheus.CounterValue, float64(st.Retries))
	ch <- prometheus.MustNewConstMetric(objwalMaxDesc, prometheus.GaugeValue, float64(st.MaxEntries))

	ws := c.l.WALSyncStats()
	buckets := make(map[float64]uint64, len(ws.Buckets))
	for i, n := range ws.Buckets {
		buckets[wal.SyncBuckets[i].Seconds()] = n
	}
	ch <- prometheus.MustNewConstHistogram(walFsyncDesc, ws.Syncs, ws.Time.Seconds(), buckets)
	ch <- prometheus.MustNewConstMetric(walEntriesDesc, prometheus.CounterValue, float64(ws.Entries))
}

// restoreCollector exports the oldest point a restore from object storage
// can rebuild, as the last garbage collection this node ran as the Primary
// left the bucket; nothing before its first one (and never on a node that
// was not the Primary).
type restoreCollector struct{ l *objwal.Log }

var (
	restoreOldestRevDesc  = prometheus.NewDesc("netsy_restore_oldest_revision", "Oldest revision a restore from object storage can rebuild (the oldest snapshot --retention and --snapshot-keep kept, or the first entry while the bucket holds the whole history), as of this node's last garbage collection as the Primary.", nil, nil)
	restoreOldestTimeDesc = prometheus.NewDesc("netsy_restore_oldest_time_seconds", "Commit time (unix seconds) of netsy_restore_oldest_revision; absent while unknown.", nil, nil)
)

func (c restoreCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- restoreOldestRevDesc
	ch <- restoreOldestTimeDesc
}

func (c restoreCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.l.Stats()
	if st.RestoreOldestRevision == 0 {
		return
	}
	ch <- prometheus.MustNewConstMetric(restoreOldestRevDesc, prometheus.GaugeValue, float64(st.RestoreOldestRevision))
	if st.RestoreOldestTimeMs != 0 {
		ch <- prometheus.MustNewConstMetric(restoreOldestTimeDesc, prometheus.GaugeValue, float64(st.RestoreOldestTimeMs)/1000)
	}
}
