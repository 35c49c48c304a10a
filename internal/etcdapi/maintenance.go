package etcdapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

type maintenanceServer struct{ s *Server }

var _ pb.MaintenanceServer = (*maintenanceServer)(nil)

// Alarm serves the cluster's alarms as etcd does: GET lists them (`etcdctl
// alarm list`), DEACTIVATE clears one (`etcdctl alarm disarm` sends one per
// listed alarm) and refuses nothing: the next write over the quota raises
// NOSPACE again. ACTIVATE raises NOSPACE as etcd lets a client do; CORRUPT
// is refused (InvalidArgument), since nothing in Netsy would act on it and
// an operator must not believe it is enforced.
func (m *maintenanceServer) Alarm(ctx context.Context, r *pb.AlarmRequest) (*pb.AlarmResponse, error) {
	switch r.Action {
	case pb.AlarmRequest_GET, pb.AlarmRequest_ACTIVATE, pb.AlarmRequest_DEACTIVATE:
	default:
		return nil, status.Errorf(codes.InvalidArgument, "netsy: unknown alarm action %d", r.Action)
	}
	resp, err := m.s.b.Alarm(ctx, r)
	if err != nil {
		return nil, toGRPCError(err)
	}
	resp.Header = m.s.header(resp.Header)
	return resp, nil
}

func (m *maintenanceServer) Status(ctx context.Context, _ *pb.StatusRequest) (*pb.StatusResponse, error) {
	resp, err := m.s.b.Status(ctx)
	if err != nil {
		return nil, toGRPCError(err)
	}
	resp.Header = m.s.header(resp.Header)
	return resp, nil
}

// Defragment succeeds without doing anything: there is no file to
// defragment, and operators' maintenance scripts call it routinely.
func (m *maintenanceServer) Defragment(context.Context, *pb.DefragmentRequest) (*pb.DefragmentResponse, error) {
	return &pb.DefragmentResponse{Header: m.s.header(nil)}, nil
}

func (m *maintenanceServer) Hash(ctx context.Context, _ *pb.HashRequest) (*pb.HashResponse, error) {
	resp, err := m.s.b.Hash(ctx)
	if err != nil {
		return nil, toGRPCError(err)
	}
	resp.Header = m.s.header(resp.Header)
	return resp, nil
}

func (m *maintenanceServer) HashKV(ctx context.Context, r *pb.HashKVRequest) (*pb.HashKVResponse, error) {
	resp, err := m.s.b.HashKV(ctx, r.Revision)
	if err != nil {
		return nil, toGRPCError(err)
	}
	resp.Header = m.s.header(resp.Header)
	return resp, nil
}

// MoveLeader hands the Primary role to the target member, as `netsyctl
// handoff --to` does, and answers once it serves as the Primary. Any node
// takes it, not only the Primary (etcdctl sends it to the leader's
// endpoint).
func (m *maintenanceServer) MoveLeader(ctx context.Context, r *pb.MoveLeaderRequest) (*pb.MoveLeaderResponse, error) {
	if r.TargetID == 0 {
		return nil, status.Error(codes.InvalidArgument, "netsy: move-leader needs the target's member id (etcdctl member list shows them, in hex)")
	}
	if err := m.s.b.MoveLeader(ctx, r.TargetID); err != nil {
		return nil, toGRPCError(err)
	}
	return &pb.MoveLeaderResponse{Header: m.s.header(nil)}, nil
}

func (m *maintenanceServer) Downgrade(context.Context, *pb.DowngradeRequest) (*pb.DowngradeResponse, error) {
	return nil, errDowngrade
}

const (
	snapshotChunk = 32 * 1024
	// snapshotAlign is the size etcdctl expects the snapshot body to be a
	// multiple of: it accepts a download only if len%512 == sha256.Size.
	snapshotAlign = 512
)

// Snapshot streams the data file Backend.Snapshot writes, framed so that
// `etcdctl snapshot save` accepts it (see snapshotTrailer).
func (m *maintenanceServer) Snapshot(_ *pb.SnapshotRequest, stream pb.Maintenance_SnapshotServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	go func() {
		select {
		case <-m.s.stopc:
			cancel()
		case <-ctx.Done():
		}
	}()

	version := ""
	if st, err := m.s.b.Status(ctx); err == nil {
		version = st.StorageVersion
		if version == "" {
			version = st.Version
		}
	}

	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := m.s.b.Snapshot(ctx, pw)
		pw.CloseWithError(err) // nil closes with io.EOF
		done <- err
	}()
	err := m.sendSnapshot(stream, pr, version)
	// Unblock and reap the writer whatever happened to the stream.
	pr.CloseWithError(errors.New("snapshot stream ended"))
	cancel()
	if werr := <-done; err == nil && werr != nil {
		err = werr
	}
	if err != nil {
		if m.s.isStopped() {
			return errStopped
		}
		return toGRPCError(err)
	}
	return nil
}

func (m *maintenanceServer) sendSnapshot(stream pb.Maintenance_SnapshotServer, r io.Reader, version string) error {
	h := sha256.New()
	var total int64
	first := true
	send := func(blob []byte, remaining int64) error {
		resp := &pb.SnapshotResponse{Blob: blob, RemainingBytes: uint64(remaining), Version: version}
		if first {
			// client/v3 takes the header and version from the first message.
			resp.Header = m.s.header(nil)
			first = false
		}
		return stream.Send(resp)
	}

	// Read one chunk ahead, so the last data chunk is known when it is sent
	// and RemainingBytes is exact for the tail. Earlier chunks report a
	// lower bound (the chunk read ahead plus the digest); the total is
	// unknown until Backend.Snapshot finishes, and clients read to EOF.
	// A new buffer per chunk: Send may keep the slice after it returns.
	cur, err := readChunk(r)
	for err == nil {
		next, nerr := readChunk(r)
		if nerr != nil && nerr != io.EOF {
			return nerr
		}
		total += int64(len(cur))
		h.Write(cur)
		remaining := int64(len(next)) + sha256.Size
		if nerr == io.EOF {
			remaining = padLen(total) + sha256.Size
		}
		if err := send(cur, remaining); err != nil {
			return err
		}
		cur, err = next, nerr
	}
	if err != io.EOF {
		return err
	}
	return m.sendTrailer(send, h, total)
}

// sendTrailer ends the stream the way etcdctl checks it: zero padding to a
// multiple of 512 bytes, then the SHA-256 of everything before it.
// Readers of a saved snapshot (netsyctl inspect, restore) drop the last 32
// bytes after checking them, then ignore trailing zero bytes after the data
// file's footer.
func (m *maintenanceServer) sendTrailer(send func([]byte, int64) error, h hash.Hash, total int64) error {
	if pad := padLen(total); pad > 0 {
		zeros := make([]byte, pad)
		h.Write(zeros)
		if err := send(zeros, sha256.Size); err != nil {
			return err
		}
	}
	return send(h.Sum(nil), 0)
}

// ErrSnapshotDigest means a saved snapshot has the shape of one with a
// digest trailer but the SHA-256 does not match: the file is damaged.
var ErrSnapshotDigest = errors.New("snapshot digest mismatch: the file is damaged")

// SnapshotDataSize checks the trailer of a snapshot saved from the Snapshot
// stream (by `etcdctl snapshot save` or netsyctl) held in r, size bytes
// long, and returns the length of the data file at its start. The zero
// padding is told apart from the data because a Netsy data file ends with
// its non-zero footer magic; a body ending in zero bytes would be
// misjudged.
func SnapshotDataSize(r io.ReaderAt, size int64) (int64, error) {
	if size < sha256.Size || (size-sha256.Size)%snapshotAlign != 0 {
		return 0, fmt.Errorf("snapshot of %d bytes has no digest trailer", size)
	}
	body := size - sha256.Size
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(r, 0, body)); err != nil {
		return 0, fmt.Errorf("read snapshot: %w", err)
	}
	var sum [sha256.Size]byte
	if _, err := r.ReadAt(sum[:], body); err != nil && err != io.EOF {
		return 0, fmt.Errorf("read snapshot digest: %w", err)
	}
	if !bytes.Equal(h.Sum(nil), sum[:]) {
		return 0, ErrSnapshotDigest
	}
	tail := make([]byte, min(body, snapshotAlign-1))
	if _, err := r.ReadAt(tail, body-int64(len(tail))); err != nil && err != io.EOF {
		return 0, fmt.Errorf("read snapshot: %w", err)
	}
	n := body
	for i := len(tail) - 1; i >= 0 && tail[i] == 0; i-- {
		n--
	}
	return n, nil
}

func padLen(n int64) int64 { return (snapshotAlign - n%snapshotAlign) % snapshotAlign }

// readChunk reads up to snapshotChunk bytes; io.EOF only with no bytes.
func readChunk(r io.Reader) ([]byte, error) {
	buf := make([]byte, snapshotChunk)
	n, err := io.ReadFull(r, buf)
	switch {
	case err == io.ErrUnexpectedEOF:
		return buf[:n], nil
	case err == io.EOF:
		return nil, io.EOF
	case err != nil:
		return nil, err
	}
	return buf[:n], nil
}

func (s *Server) isStopped() bool {
	select {
	case <-s.stopc:
		return true
	default:
		return false
	}
}
