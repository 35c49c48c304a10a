package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/netsy-io/netsy/internal/config"
	"github.com/netsy-io/netsy/internal/objwal"
	"github.com/netsy-io/netsy/internal/vfs"
)

// addProbes registers the probes that need nothing but the process,
// failed and /healthz: /livez, and etcd's /health for tools written
// against etcd. failed says why the node's log failed for good, or nil.
func addProbes(mux *http.ServeMux, failed func() error) {
	// /livez is what a liveness probe asks: 503 only when the local log
	// failed for good (an fsync failure, the data directory deleted),
	// which a restart mends by rebuilding from object storage. A node
	// merely waiting for its bucket, or deposed, stays alive: restarting
	// it would not bring the bucket back and costs its cached state.
	mux.HandleFunc("/livez", func(w http.ResponseWriter, r *http.Request) {
		if err := failed(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "failed: %v\n", err)
			return
		}
		w.Write([]byte("ok\n"))
	})
	// /health is /healthz in etcd's shape, so it follows whatever
	// /healthz decides: {"health":"true","reason":""} with 200, or
	// {"health":"false","reason":...} with 503.
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {
		rec := &recorder{header: http.Header{}, code: http.StatusOK}
		hz := r.Clone(r.Context())
		hz.URL = &url.URL{Path: "/healthz"}
		hz.RequestURI = "/healthz"
		h, _ := mux.Handler(hz)
		h.ServeHTTP(rec, hz)
		resp := etcdHealth{Health: "true"}
		code := http.StatusOK
		if rec.code != http.StatusOK {
			resp = etcdHealth{Health: "false", Reason: strings.TrimSpace(rec.body.String())}
			code = http.StatusServiceUnavailable
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(resp)
	})
}

// unhealthy says why /healthz (and etcd's /health) is 503, or nil: the
// local log failed for good (an fsync failure, the data directory
// deleted), the node was deposed as Primary, or writes fail now because
// object storage does not take them (the log refuses new entries once the
// oldest one has waited for upload too long: the bucket is unreachable
// under --quorum 0, or in a fallback to it, or too slow). The last clears
// by itself once the backlog is uploaded.
func (n *Node) unhealthy() error {
	if err := n.eng.Failed(); err != nil {
		return err
	}
	if err := n.roles.DepositionReason(); err != nil {
		return err
	}
	// A fence is a deposition, which the roles report (with what the node
	// does about it) once they have heard of it; the log forgets it when
	// it releases the writer role.
	if err := n.objlog.Backpressure(); err != nil && !errors.Is(err, objwal.ErrFenced) {
		return fmt.Errorf("writes fail: %w", err)
	}
	return nil
}

// watchDataDir starts checking that the data directory is still the one
// this process opened (dataDirWatch); fsys holds its wal directory.
func (n *Node) watchDataDir(fsys vfs.FS) {
	n.dirWatch = &dataDirWatch{
		dir: n.cfg.DataDir, lock: n.lock, fs: vfs.OrOS(fsys), clk: n.clock,
		lost: func(ctx context.Context, err error) {
			dataDirLost(ctx, n.log, func(err error) { n.eng.OnSync(0, err) }, n.roles.LogLost, n.clock, err)
		},
	}
	n.dirWatch.start()
}

// etcdHealth is the body of etcd's /health.
type etcdHealth struct {
	Health string `json:"health"`
	Reason string `json:"reason"`
}

// recorder captures a handler's answer in memory.
type recorder struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) Write(b []byte) (int, error) { return r.body.Write(b) }
func (r *recorder) WriteHeader(code int)        { r.code = code }

// warnQuorum says at start-up what durability a static --quorum the
// cluster cannot meet really gives: with fewer other nodes registered than
// the replicas it asks for, writes fall back to acknowledging once the
// entry is in object storage, as --quorum 0, until enough replicas follow.
func warnQuorum(cfg config.Config, others int, log hclog.Logger) {
	switch {
	case cfg.Quorum <= 0 || cfg.Quorum <= others:
	case others == 0:
		log.Warn("--quorum asks for replicas this node does not have: every write is acknowledged only once it is in object storage, as with --quorum 0",
			"quorum", cfg.Quorum, "replicas", 0)
	default:
		log.Warn("--quorum asks for more replicas than other nodes are registered: until enough of them follow, every write is acknowledged only once it is in object storage, as with --quorum 0",
			"quorum", cfg.Quorum, "other_nodes", others)
	}
}
