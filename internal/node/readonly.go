package node

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/netsy-io/netsy/internal/backup"
	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/config"
	"github.com/netsy-io/netsy/internal/engine"
	"github.com/netsy-io/netsy/internal/etcdapi"
	objopen "github.com/netsy-io/netsy/internal/objstore/open"
	"github.com/netsy-io/netsy/internal/roles"
)

// readOnlySpill is the scratch directory of a read-only node's spilled
// values, under its data directory; it is emptied at start and at close.
const readOnlySpill = "read-only-values"

// startReadOnly starts a node that serves the state at cfg.ReadOnlyAt,
// rebuilt from the bucket by backup.OpenAt, and refuses every write.
//
// It opens only what reading needs: the store (read, never written), the
// client port and the HTTP port. No s3lect, no registration, no claim of
// the log, no uploads, no GC and no peer port: the cluster never learns
// it exists, and the bucket is left exactly as it was. The data
// directory is locked (a normal node cannot start on it meanwhile) and
// holds only scratch: spilled values, removed again at close.
func startReadOnly(ctx context.Context, cfg config.Config, logger hclog.Logger, deps Deps, clk clock.Clock) (_ *Node, err error) {
	n, storageURL, err := startBase(cfg, logger, clk)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	if n.client, err = net.Listen("tcp", cfg.ClientAddr); err != nil {
		return nil, fmt.Errorf("listen on --client-addr %s: %w", cfg.ClientAddr, err)
	}
	if n.httpL, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
		return nil, fmt.Errorf("listen on --http-addr %s: %w", cfg.HTTPAddr, err)
	}
	cfg.ClientAddr, cfg.HTTPAddr = n.client.Addr().String(), n.httpL.Addr().String()
	n.cfg = cfg
	if deps.Store != nil {
		n.store = deps.Store
	} else {
		n.store, err = objopen.Open(ctx, storageURL, objopen.Options{
			S3Endpoint: cfg.S3Endpoint, S3Region: cfg.S3Region, S3PathStyle: cfg.S3PathStyle,
		})
		if err != nil {
			return nil, fmt.Errorf("--storage: %w", err)
		}
		n.ownStore = true
	}
	if !cfg.ReadOnlyAtTime.IsZero() {
		p, err := backup.RevisionAtTime(ctx, n.store, cfg.ReadOnlyAtTime, clk.Wall())
		if err != nil {
			return nil, fmt.Errorf("--read-only-at: %w", err)
		}
		logger.Named("read-only").Info("the time is a revision", "time", cfg.ReadOnlyAtTime, "rev", p.Revision, "committed", p.Time)
		cfg.ReadOnlyAt, cfg.ReadOnlyAtTime = p.Revision, time.Time{}
		n.cfg = cfg
	}
	spill := ""
	if cfg.ValueSpillMin > 0 {
		spill = filepath.Join(cfg.DataDir, readOnlySpill)
		// Left by a read-only node that did not close: scratch only.
		if err := os.RemoveAll(spill); err != nil {
			return nil, fmt.Errorf("clear %s: %w", spill, err)
		}
		if err := os.MkdirAll(spill, 0o755); err != nil {
			return nil, err
		}
		n.scratch = spill
	}
	memberID := roles.ClusterIDHash("read-only/" + cfg.NodeID)
	self := &pb.Member{ID: memberID, Name: cfg.MemberName(), ClientURLs: []string{cfg.AdvertiseClientURL()}}
	start := clk.Now()
	rlog := logger.Named("read-only")
	rlog.Info("rebuilding the state from the bucket", "rev", cfg.ReadOnlyAt, "storage", storageURL)
	var logged time.Time
	st, err := backup.OpenAt(ctx, backup.At{
		From: n.store, FromURL: storageURL, Revision: cfg.ReadOnlyAt, SpillDir: spill,
		Clock: clk, Logger: rlog,
		// A long replay says how far it is, every few seconds.
		Progress: func(p backup.Progress) {
			if p.Done || clk.Since(logged) < 5*time.Second {
				return
			}
			logged = clk.Now()
			rlog.Info("replaying", "from_rev", p.From, "rev", p.Revision, "to_rev", p.To, "entries", p.Entries, "elapsed", p.Elapsed)
		},
		ClusterID: roles.ClusterIDHash(cfg.ClusterID), MemberID: memberID,
		Members: func() []*pb.Member { return []*pb.Member{self} },
	})
	if err != nil {
		return nil, fmt.Errorf("--read-only-at %d: %w", cfg.ReadOnlyAt, err)
	}
	n.eng = st.Engine
	n.api = etcdapi.New(etcdapi.Config{
		Backend:                readOnlyBackend{Engine: st.Engine, rev: st.Revision},
		Clock:                  clk,
		Logger:                 logger,
		ProgressNotifyInterval: cfg.ProgressNotifyInterval,
		MaxRequestBytes:        cfg.MaxRequestBytes,
	})
	n.grpc = n.api.NewGRPCServer(n.tls.clientServerOptions(logger, clk)...)
	n.http = &http.Server{Handler: n.readOnlyHTTPHandler(), ReadHeaderTimeout: 10 * time.Second}
	if err := n.serve(); err != nil {
		return nil, err
	}
	n.ready.Store(true)
	n.log.Info("serving read-only", "rev", st.Revision, "window", st.Window.String(), "base_snapshot_rev", st.BaseRevision,
		"entries_replayed", st.Replayed, "took", clk.Since(start), "client_addr", n.client.Addr().String(),
		"http_addr", n.httpL.Addr().String(), "storage", storageURL)
	return n, nil
}

// readOnlyHTTPHandler serves what a read-only node has: its revision and
// client API metrics, and probes that say it serves.
func (n *Node) readOnlyHTTPHandler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "netsy_committed_revision", Help: "Committed store revision."},
		func() float64 { return float64(n.eng.CurrentRevision()) }))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "netsy_read_only_revision", Help: "The revision a read-only node (--read-only-at) serves."},
		func() float64 { return float64(n.cfg.ReadOnlyAt) }))
	reg.MustRegister(n.api.Collectors()...)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	ok := func(w http.ResponseWriter, r *http.Request) {
		if !n.ready.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready: starting or stopping")
			return
		}
		fmt.Fprintf(w, "ok (read-only at revision %d)\n", n.cfg.ReadOnlyAt)
	}
	mux.HandleFunc("/healthz", ok)
	mux.HandleFunc("/readyz", ok)
	mux.HandleFunc("/livez", ok)
	return mux
}

// readOnlyBackend serves reads from an engine holding the state at rev
// and refuses every write before it reaches the engine, with an error
// that says why: etcd's FailedPrecondition, which clients do not retry.
type readOnlyBackend struct {
	*engine.Engine
	rev int64
}

var _ etcdapi.Backend = readOnlyBackend{}

func (b readOnlyBackend) refuse() error {
	return status.Errorf(codes.FailedPrecondition,
		"netsy: read-only at revision %d (--read-only-at): writes are refused", b.rev)
}

func (b readOnlyBackend) Put(context.Context, *pb.PutRequest) (*pb.PutResponse, error) {
	return nil, b.refuse()
}

func (b readOnlyBackend) DeleteRange(context.Context, *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	return nil, b.refuse()
}

// Txn serves transactions without writes; one that could write (in
// either branch) is refused whatever its compare would pick.
func (b readOnlyBackend) Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	if engine.IsWriteTxn(r) {
		return nil, b.refuse()
	}
	return b.Engine.Txn(ctx, r)
}

func (b readOnlyBackend) Compact(context.Context, *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	return nil, b.refuse()
}

func (b readOnlyBackend) LeaseGrant(context.Context, *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	return nil, b.refuse()
}

func (b readOnlyBackend) LeaseRevoke(context.Context, *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	return nil, b.refuse()
}

func (b readOnlyBackend) LeaseRenew(context.Context, int64) (int64, error) {
	return 0, b.refuse()
}

// Alarm lists the alarms active at the revision; raising or clearing one
// is a write.
func (b readOnlyBackend) Alarm(ctx context.Context, r *pb.AlarmRequest) (*pb.AlarmResponse, error) {
	if r.Action != pb.AlarmRequest_GET {
		return nil, b.refuse()
	}
	return b.Engine.Alarm(ctx, r)
}

// MemberRemove and MoveLeader change the cluster, which a read-only node
// is not part of.
func (b readOnlyBackend) MemberRemove(context.Context, uint64) (*pb.MemberRemoveResponse, error) {
	return nil, b.refuse()
}

func (b readOnlyBackend) MoveLeader(context.Context, uint64) error {
	return b.refuse()
}
