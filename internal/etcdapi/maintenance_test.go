package etcdapi

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/snapshot"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

func TestMaintenance(t *testing.T) {
	e := newEnv(t, nil)
	cli := e.client()
	ctx := testCtx(t)
	e.put("a", "1")

	st, err := cli.Status(ctx, e.addr)
	if err != nil || st.Version != "3.6.10" || st.Leader != testMemberID || st.Header.Revision != 1 || st.Header.ClusterId != testClusterID {
		t.Fatalf("status %+v %v", st, err)
	}
	al, err := cli.AlarmList(ctx)
	if err != nil || len(al.Alarms) != 0 || al.Header.MemberId != testMemberID {
		t.Fatalf("alarm list %+v %v", al, err)
	}
	if _, err := cli.AlarmDisarm(ctx, &clientv3.AlarmMember{MemberID: testMemberID, Alarm: pb.AlarmType_NOSPACE}); err != nil {
		t.Fatalf("alarm disarm: %v", err)
	}
	mc := pb.NewMaintenanceClient(e.conn())
	if _, err := mc.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, Alarm: pb.AlarmType_CORRUPT}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("alarm activate CORRUPT: %v", err)
	}
	if _, err := cli.Defragment(ctx, e.addr); err != nil {
		t.Fatalf("defragment: %v", err)
	}
	if h, err := cli.HashKV(ctx, e.addr, 9); err != nil || h.Hash != 9 || h.Header.MemberId != testMemberID {
		t.Fatalf("hashkv %+v %v", h, err)
	}
	if h, err := mc.Hash(ctx, &pb.HashRequest{}); err != nil || h.Hash != 42 {
		t.Fatalf("hash %+v %v", h, err)
	}
	if _, err := cli.Downgrade(ctx, clientv3.DowngradeValidate, "3.5.0"); status.Code(err) != codes.Unimplemented {
		t.Fatalf("downgrade: %v", err)
	}
}

func TestCluster(t *testing.T) {
	e := newEnv(t, nil)
	cli := e.client()
	ctx := testCtx(t)
	ml, err := cli.MemberList(ctx)
	if err != nil || len(ml.Members) != 1 || ml.Members[0].ID != testMemberID || ml.Header.ClusterId != testClusterID {
		t.Fatalf("member list %+v %v", ml, err)
	}
	_, err = cli.MemberAdd(ctx, []string{"http://127.0.0.1:2380"})
	if s := status.Convert(err); s.Code() != codes.Unimplemented || s.Message() != status.Convert(errMemberAdd).Message() {
		t.Fatalf("member add: %v", err)
	}
	if _, err := cli.MemberUpdate(ctx, 1, []string{"http://127.0.0.1:2380"}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("member update: %v", err)
	}
	if _, err := cli.MemberPromote(ctx, 1); status.Code(err) != codes.Unimplemented {
		t.Fatalf("member promote: %v", err)
	}
}

// MemberRemove and MoveLeader reach the Backend with the member id the
// client named, and the Backend's refusal reaches the client as it is.
func TestMemberRemoveAndMoveLeaderReachTheBackend(t *testing.T) {
	e := newEnv(t, nil)
	cli := e.client()
	ctx := testCtx(t)
	rm, err := cli.MemberRemove(ctx, 0xb2)
	if err != nil || len(rm.Members) != 1 || rm.Members[0].ID != testMemberID || rm.Header.MemberId != testMemberID {
		t.Fatalf("member remove: %+v %v", rm, err)
	}
	ml, err := cli.MoveLeader(ctx, 0xc3)
	if err != nil || ml.Header.MemberId != testMemberID {
		t.Fatalf("move leader: %+v %v", ml, err)
	}
	if _, err := cli.MoveLeader(ctx, 0); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("move leader to member 0: %v", err)
	}
	refusal := status.Error(codes.FailedPrecondition, "netsy: member remove: member b2 stays: why")
	e.b.mu.Lock()
	e.b.memberErr = refusal
	e.b.mu.Unlock()
	if _, err := cli.MemberRemove(ctx, 0xb2); status.Code(err) != codes.FailedPrecondition || status.Convert(err).Message() != status.Convert(refusal).Message() {
		t.Fatalf("refused member remove: %v", err)
	}
	if _, err := cli.MoveLeader(ctx, 0xc3); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("refused move leader: %v", err)
	}
	e.b.mu.Lock()
	defer e.b.mu.Unlock()
	if !slices.Equal(e.b.removed, []uint64{0xb2, 0xb2}) || !slices.Equal(e.b.moved, []uint64{0xc3, 0xc3}) {
		t.Fatalf("backend saw removes %x, moves %x", e.b.removed, e.b.moved)
	}
}

// TestAuth checks Netsy looks like an etcd with auth disabled: a client
// configured with credentials still connects and works.
func TestAuth(t *testing.T) {
	e := newEnv(t, nil)
	ctx := testCtx(t)
	cli := e.client(func(c *clientv3.Config) { c.Username, c.Password = "root", "secret" })
	if _, err := cli.Put(ctx, "a", "1"); err != nil {
		t.Fatalf("put with credentials configured: %v", err)
	}
	as, err := cli.AuthStatus(ctx)
	if err != nil || as.Enabled {
		t.Fatalf("auth status %+v %v", as, err)
	}
	if _, err := cli.Authenticate(ctx, "root", "secret"); !errors.Is(err, rpctypes.ErrAuthNotEnabled) {
		t.Fatalf("authenticate: %v", err)
	}
	if _, err := cli.UserAdd(ctx, "u", "p"); status.Code(err) != codes.Unimplemented {
		t.Fatalf("user add: %v", err)
	}
	if _, err := cli.AuthEnable(ctx); status.Code(err) != codes.Unimplemented {
		t.Fatalf("auth enable: %v", err)
	}
}

// TestUnsupportedSaysWhatIsTrue pins the refusals of what Netsy does not
// offer: none says a cluster is a single node, each names what does the
// job instead (a netsyctl command or a flag), and auth points at client
// certificates.
func TestUnsupportedSaysWhatIsTrue(t *testing.T) {
	e := newEnv(t, nil)
	cli := e.client()
	ctx := testCtx(t)
	_, addErr := cli.MemberAdd(ctx, []string{"http://127.0.0.1:2380"})
	_, updateErr := cli.MemberUpdate(ctx, 1, []string{"http://127.0.0.1:2380"})
	_, promoteErr := cli.MemberPromote(ctx, 1)
	_, userErr := cli.UserAdd(ctx, "u", "p")
	_, enableErr := cli.AuthEnable(ctx)
	for _, tc := range []struct {
		call  string
		err   error
		names []string
	}{
		{"member add", addErr, []string{"--storage", "--cluster-id", "--node-id", "--peer-addr", "netsyctl members"}},
		{"member update", updateErr, []string{"--advertise-peer", "--advertise-client", "netsyctl members"}},
		{"member promote", promoteErr, []string{"netsyctl handoff", "move-leader"}},
		{"user add", userErr, []string{"--client-cert-auth", "certificates"}},
		{"auth enable", enableErr, []string{"--client-cert-auth", "certificates"}},
	} {
		s := status.Convert(tc.err)
		if s.Code() != codes.Unimplemented {
			t.Errorf("%s: %v, want Unimplemented", tc.call, tc.err)
		}
		for _, want := range tc.names {
			if !strings.Contains(s.Message(), want) {
				t.Errorf("%s: %q does not name %q", tc.call, s.Message(), want)
			}
		}
		if strings.Contains(s.Message(), "single node") {
			t.Errorf("%s: %q says the cluster is a single node", tc.call, s.Message())
		}
	}
}

// Every refusal text in the package is true today: none says a cluster
// is one node, and each Unimplemented one names what to use instead.
func TestNoRefusalSaysTheClusterIsOneNode(t *testing.T) {
	for _, err := range []error{errMemberAdd, errMemberUpdate, errMemberPromote, errDowngrade, errAuth} {
		if m := status.Convert(err).Message(); strings.Contains(m, "single node") || strings.Contains(m, "one node") {
			t.Errorf("%q", m)
		}
	}
}

func TestHealth(t *testing.T) {
	e := newEnv(t, nil)
	r, err := healthpb.NewHealthClient(e.conn()).Check(testCtx(t), &healthpb.HealthCheckRequest{})
	if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health %+v %v", r, err)
	}
}

// TestSnapshotSave runs client/v3's `etcdctl snapshot save` code path,
// which rejects a download unless its size is 512*n + 32, and checks the
// framing: data, zero padding, SHA-256 of both.
func TestSnapshotSave(t *testing.T) {
	for _, size := range []int{0, 1, 511, 512, snapshotChunk, 3*snapshotChunk + 77} {
		e := newEnv(t, nil)
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(i*7 + 1)
		}
		e.b.snap = data

		path := filepath.Join(t.TempDir(), "snap.db")
		cfg := clientv3.Config{Endpoints: []string{e.addr}, Logger: zap.NewNop()}
		version, err := snapshot.SaveWithVersion(testCtx(t), zap.NewNop(), cfg, path)
		if err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		if version != "3.6.0" {
			t.Fatalf("version %q", version)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		body, sum := got[:len(got)-sha256.Size], got[len(got)-sha256.Size:]
		if want := sha256.Sum256(body); !bytes.Equal(sum, want[:]) {
			t.Fatalf("size %d: bad digest", size)
		}
		if !bytes.Equal(body[:size], data) || len(body)%512 != 0 || bytes.Count(body[size:], []byte{0}) != len(body)-size {
			t.Fatalf("size %d: body of %d bytes is not data plus zero padding", size, len(body))
		}
		if n, err := SnapshotDataSize(bytes.NewReader(got), int64(len(got))); err != nil || n != int64(size) {
			t.Fatalf("size %d: SnapshotDataSize = %d, %v", size, n, err)
		}
		got[0] ^= 1
		if _, err := SnapshotDataSize(bytes.NewReader(got), int64(len(got))); err == nil && size > 0 {
			t.Fatalf("size %d: damaged snapshot accepted", size)
		}
	}
}

// TestSnapshotRemainingBytes checks the wire: header and version first,
// RemainingBytes exact for the tail and 0 only on the digest.
func TestSnapshotRemainingBytes(t *testing.T) {
	e := newEnv(t, nil)
	e.b.snap = make([]byte, 2*snapshotChunk+100)
	ss, err := pb.NewMaintenanceClient(e.conn()).Snapshot(testCtx(t), &pb.SnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var msgs []*pb.SnapshotResponse
	for {
		r, err := ss.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, r)
	}
	if msgs[0].Header == nil || msgs[0].Header.MemberId != testMemberID || msgs[0].Version != "3.6.0" {
		t.Fatalf("first message %+v", msgs[0])
	}
	var total uint64
	for _, m := range msgs {
		total += uint64(len(m.Blob))
	}
	var sent uint64
	for i, m := range msgs {
		sent += uint64(len(m.Blob))
		if m.RemainingBytes > total-sent || (m.RemainingBytes == 0) != (i == len(msgs)-1) {
			t.Fatalf("message %d: remaining %d, actually %d", i, m.RemainingBytes, total-sent)
		}
	}
	if n := len(msgs); msgs[n-2].RemainingBytes != sha256.Size {
		t.Fatalf("padding message remaining %d", msgs[n-2].RemainingBytes)
	}
}

func TestSnapshotBackendError(t *testing.T) {
	e := newEnv(t, nil)
	e.b.setErr(rpctypes.ErrGRPCNoLeader)
	ss, err := pb.NewMaintenanceClient(e.conn()).Snapshot(testCtx(t), &pb.SnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		_, err = ss.Recv()
		if err != nil {
			break
		}
	}
	if !sameStatus(err, rpctypes.ErrGRPCNoLeader) {
		t.Fatalf("got %v", err)
	}
}
