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
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/config"
	"github.com/netsy-io/netsy/internal/engine"
	"github.com/netsy-io/netsy/internal/etcdapi"
	"github.com/netsy-io/netsy/internal/objstore"
	objopen "github.com/netsy-io/netsy/internal/objstore/open"
	"github.com/netsy-io/netsy/internal/objwal"
	"github.com/netsy-io/netsy/internal/vfs"
	"github.com/netsy-io/netsy/internal/wal"
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
	http     *http.Server
	client   net.Listener
	httpL    net.Listener
	ready    atomic.Bool

	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// durabilityMode maps replication.quorum onto a single node: quorum 0, and
// a static quorum that no replica can meet, acknowledge once the entry is
// in object storage; majority of one node is the node itself, so the local
// fsync suffices and chunks upload in the background.
func durabilityMode(quorum int) objwal.Mode {
	if quorum == -1 {
		return objwal.ModeAsync
	}
	return objwal.ModeSync
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
	n := &Node{cfg: cfg, log: logger, clock: clk}
	warnQuorum(cfg, logger)
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	if n.lock, err = lockDir(cfg.DataDir); err != nil {
		return nil, err
	}
	id, err := loadIdentity(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	storageURL, err := cfg.StorageURL()
	if err != nil {
		return nil, err
	}
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
	mode := durabilityMode(cfg.Quorum)
	n.objlog, err = objwal.Open(ctx, objwal.Options{
		Store:  n.store,
		WALDir: filepath.Join(cfg.DataDir, "wal"),
		FS:     deps.FS,
		Mode:   mode,
		// A single node in async mode acknowledges on its local fsync.
		AckOnFsync:   mode == objwal.ModeAsync,
		SnapshotKeep: cfg.SnapshotKeep,
		Clock:        clk,
		Logger:       logger.Named("objwal"),
	})
	if err != nil {
		return nil, fmt.Errorf("open log (storage %s): %w", storageURL, err)
	}
	clientURL := "http://" + cfg.ClientAddr
	spillDir := ""
	if cfg.ValueSpillMin > 0 {
		spillDir = filepath.Join(cfg.DataDir, "values")
	}
	n.eng, err = engine.Open(engine.Config{
		Storage:         n.objlog,
		SnapshotEntries: uint64(cfg.SnapshotEveryRevisions),
		SpillDir:        spillDir,
		SpillMin:        cfg.ValueSpillMin,
		Clock:           clk,
		Logger:          logger,
		ClusterID:       id.ClusterID,
		MemberID:        id.MemberID,
		Members: func() []*pb.Member {
			return []*pb.Member{{ID: id.MemberID, Name: cfg.Name, PeerURLs: []string{clientURL}, ClientURLs: []string{clientURL}}}
		},
	})
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

	n.client, err = net.Listen("tcp", cfg.ClientAddr)
	if err != nil {
		return nil, fmt.Errorf("listen on --client-addr %s: %w", cfg.ClientAddr, err)
	}
	n.httpL, err = net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("listen on --http-addr %s: %w", cfg.HTTPAddr, err)
	}
	n.api = etcdapi.New(etcdapi.Config{
		Backend:                n.eng,
		Clock:                  clk,
		Logger:                 logger,
		ProgressNotifyInterval: cfg.ProgressNotifyInterval,
		MaxRequestBytes:        cfg.MaxRequestBytes,
	})
	n.grpc = n.api.NewGRPCServer()
	n.http = &http.Server{Handler: n.httpHandler(), ReadHeaderTimeout: 10 * time.Second}

	n.wg.Add(2)
	go func() {
		defer n.wg.Done()
		if err := n.grpc.Serve(n.client); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			n.log.Error("client API stopped", "error", err)
		}
	}()
	go func() {
		defer n.wg.Done()
		if err := n.http.Serve(n.httpL); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("http server stopped", "error", err)
		}
	}()
	n.ready.Store(true)
	n.log.Info("serving", "client_addr", n.client.Addr().String(), "http_addr", n.httpL.Addr().String(),
		"data_dir", cfg.DataDir, "storage", storageURL, "quorum", cfg.Quorum, "rev", n.eng.CurrentRevision(), "member_id", fmt.Sprintf("%x", id.MemberID))
	return n, nil
}

// ClientAddr is the address the client API listens on.
func (n *Node) ClientAddr() string { return n.client.Addr().String() }

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
	reg.MustRegister(objwalCollector{n.objlog})
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	addProbes(mux)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := n.eng.Failed(); err != nil {
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

// notReady says why the node should not get client traffic, or nil: it
// is starting or stopping, or it was deposed and serves only serializable
// reads.
func (n *Node) notReady() error {
	if !n.ready.Load() {
		return errors.New("starting or stopping")
	}
	return n.eng.Deposed()
}

// Close stops serving and shuts down in dependency order: in-flight client
// requests get a bounded time to finish, then the engine answers or fails
// every pending write, then the log flushes what it was given.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		n.ready.Store(false)
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
		if n.http != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = n.http.Shutdown(ctx)
			cancel()
		}
		n.wg.Wait()
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
