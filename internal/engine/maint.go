package engine

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"math/bits"
	"runtime"
	"strconv"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/netsy-io/netsy/internal/datafile"
	"github.com/netsy-io/netsy/internal/mvcc"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// Version is the etcd server version Netsy reports. kube-apiserver enables
// consistent reads from its watch cache only for etcd >= 3.5.13, and Netsy
// implements the 3.6 API it checks for.
const Version = "3.6.10"

// storageVersion is the etcd storage schema version reported by Status.
const storageVersion = "3.6.0"

// Status reports the node's state in etcd's terms: the log index stands in
// for the raft index and the primary term for the raft term, as in the
// header (Identity). The engine knows no other member, so it names itself
// leader; a cluster's Backend names the Primary.
func (e *Engine) Status(context.Context) (*pb.StatusResponse, error) {
	total, inUse := e.Space()
	idx := e.committedIdx.Load()
	_, _, term := e.Identity()
	resp := &pb.StatusResponse{
		Header:           &pb.ResponseHeader{Revision: e.committedRev.Load()},
		Version:          Version,
		DbSize:           total,
		DbSizeInUse:      inUse,
		DbSizeQuota:      e.cfg.QuotaBackendBytes,
		Leader:           e.cfg.MemberID,
		RaftIndex:        idx,
		RaftTerm:         term,
		RaftAppliedIndex: idx,
		StorageVersion:   storageVersion,
	}
	if f := e.failed.Load(); f != nil {
		resp.Errors = append(resp.Errors, (*f).Error())
	}
	// As etcd, every active alarm is one of Status's errors (etcdctl
	// endpoint status shows them).
	for _, a := range e.Alarms(pb.AlarmType_NONE) {
		resp.Errors = append(resp.Errors, a.String())
	}
	return resp, nil
}

// Hash hashes the whole committed history.
func (e *Engine) Hash(context.Context) (*pb.HashResponse, error) {
	rev := e.committedRev.Load()
	h, _, err := e.hashAt(rev)
	if err != nil {
		return nil, err
	}
	return &pb.HashResponse{Header: &pb.ResponseHeader{Revision: rev}, Hash: h}, nil
}

// HashKV hashes history up to rev (0 = committed revision).
func (e *Engine) HashKV(_ context.Context, rev int64) (*pb.HashKVResponse, error) {
	cur := e.committedRev.Load()
	if rev == 0 {
		rev = cur
	}
	h, compactRev, err := e.hashAt(rev)
	if err != nil {
		return nil, err
	}
	return &pb.HashKVResponse{Header: &pb.ResponseHeader{Revision: cur}, Hash: h, CompactRevision: compactRev, HashRevision: rev}, nil
}

func (e *Engine) hashAt(rev int64) (uint32, int64, error) {
	if rev <= 0 {
		return 0, e.compactRev.Load(), nil
	}
	return e.store.HashKV(rev)
}

// Snapshot writes the committed state as a snapshot data file.
func (e *Engine) Snapshot(ctx context.Context, w io.Writer) (int64, error) {
	o := &snapshotOp{}
	if err := e.submit(ctx, o); err != nil {
		// A snapshot captured before the failure is released by the
		// collector (captureSnapshot); the loop may still be writing o.
		return 0, err
	}
	defer o.snap.Release()
	cw := &countingWriter{w: w}
	if err := datafile.EncodeSnapshot(cw, o.snap); err != nil {
		return cw.n, fmt.Errorf("encode snapshot: %w", err)
	}
	return cw.n, nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// MemberList lists the cluster's members.
func (e *Engine) MemberList(context.Context) (*pb.MemberListResponse, error) {
	resp := &pb.MemberListResponse{Header: &pb.ResponseHeader{Revision: e.committedRev.Load()}}
	if e.cfg.Members != nil {
		resp.Members = e.cfg.Members()
	}
	return resp, nil
}

// Capture reads a spilled value in place for the encoder.
var _ datafile.Viewer = (*mvcc.Capture)(nil)

// captureSnapshot copies the applied state (pending entries included) in
// the loop; it may be saved only once its index is durable. Values the
// store spilled stay in its files until the snapshot is encoded: whoever
// ends up holding the snapshot releases it (datafile.Snapshot.Release).
func (e *Engine) captureSnapshot() *datafile.Snapshot {
	c := e.store.Capture()
	s := &datafile.Snapshot{
		Header: &netsyv1.SnapshotHeader{
			Index:           e.lastIdx,
			Revision:        e.lastRev,
			CompactRevision: e.store.CompactRev(),
		},
		Source: c,
	}
	s.Leases = e.lease.snapshot()
	// The snapshot covers the pending entries: their alarm changes too.
	s.Header.Alarms = e.alarmsAhead()
	s.Header.KeyVersions = int64(c.Len())
	s.Header.Leases = int64(len(s.Leases))
	// Should a holder drop the snapshot without releasing it (a client
	// that stopped waiting for its Snapshot RPC), the collector does.
	runtime.AddCleanup(s, func(c *mvcc.Capture) { c.Release() }, c)
	return s
}

// maybeSnapshot starts a local snapshot once the log crosses this node's
// next snapshot point (snapshotDue); it is saved in the background after
// its index is durable.
func (e *Engine) maybeSnapshot() {
	if e.snapshotting || !e.snapshotDue() {
		return
	}
	snap := e.captureSnapshot()
	e.snapshotting = true
	e.sinceSnap = 0
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		defer func() { e.snapDone <- struct{}{} }()
		for e.committedIdx.Load() < snap.Header.Index {
			ch := e.CommitNotify()
			if e.committedIdx.Load() >= snap.Header.Index {
				break
			}
			select {
			case <-ch:
			case <-e.ctx.Done():
				snap.Release()
				return
			}
		}
		// The storage releases snap.
		if err := e.cfg.Storage.SaveSnapshot(snap); err != nil {
			e.log.Error("save snapshot", "index", snap.Header.Index, "error", err)
			return
		}
		e.log.Debug("snapshot saved", "index", snap.Header.Index, "rev", snap.Header.Revision, "versions", snap.Len())
	}()
}

// defaultSnapshotEntries is Config.SnapshotEntries when it is not set.
const defaultSnapshotEntries = 100000

// snapshotDue reports whether a snapshot is due: when index + phase
// crosses a multiple of SnapshotEntries (N) between the last snapshot and
// the last entry. Every node of a cluster applies the same log, and with
// one N they used to snapshot at the same indexes, so at 1 M keys three
// processes encoded a million versions at once on the cores the write
// path needed (a missed quorum deadline in the scale-1m run); with a phase
// per node (SnapshotPhase) they take turns. Snapshots stay N entries
// apart, and the first after a start or a loaded snapshot comes within N
// entries; one still running when the next point passes delays that one
// until it is done, as before.
func (e *Engine) snapshotDue() bool {
	n := e.cfg.SnapshotEntries
	// sinceSnap counts the entries since the last snapshot, taken or
	// loaded, so the last one was at lastIdx - sinceSnap.
	since := min(e.sinceSnap, e.lastIdx)
	if since == 0 {
		return false
	}
	p := e.cfg.SnapshotPhase % n
	return (e.lastIdx+p)/n > (e.lastIdx-since+p)/n
}

// SnapshotPhase is the phase (see Config.SnapshotPhase) that spreads the
// snapshots of a cluster's nodes over the interval every, derived from
// the node's ID alone, so nodes need not agree on anything: IDs that end
// in a number (n1, n2, n3; a StatefulSet's netsy-0, netsy-1) take that
// number, any other ID a hash of it, and the number is spread by the
// golden ratio, which keeps consecutive numbers far apart for any count of
// nodes (0.62, 0.24 and 0.85 of the interval for 1, 2 and 3).
func SnapshotPhase(nodeID string, every uint64) uint64 {
	if every == 0 {
		every = defaultSnapshotEntries
	}
	end := len(nodeID)
	for end > 0 && nodeID[end-1] >= '0' && nodeID[end-1] <= '9' {
		end--
	}
	k, err := strconv.ParseUint(nodeID[end:], 10, 64)
	if end == len(nodeID) || err != nil {
		h := fnv.New64a()
		h.Write([]byte(nodeID))
		k = h.Sum64()
	}
	// k/phi as a fraction of 2^64, times every.
	hi, _ := bits.Mul64(k*0x9E3779B97F4A7C15, every)
	return hi
}
