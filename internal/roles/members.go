package roles

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/netsy-io/netsy/internal/heartbeat"
	"github.com/netsy-io/netsy/internal/peer"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// activePoll is how often MoveLeader and WaitActive ask the new Primary
// whether it is Active yet: its Starting step (reconcile with the bucket,
// claim the next wal seq) takes a few object-storage round trips.
const activePoll = 20 * time.Millisecond

// MoveLeader is etcd's MoveLeader: it hands the Primary role to the
// registered node with member id memberID (a handoff to it, what
// `netsyctl handoff --to` asks) and returns once that node is the Active
// Primary. It refuses, changing nothing, a member id no node has, a node
// the Elector judges Degraded (the Elector would elect another node
// instead) and a handoff while another one runs. A node that already is
// the Primary is left as it is.
//
// Errors are gRPC status errors an etcd client can show as they are:
// NotFound for an unknown member, FailedPrecondition for a refusal,
// Unavailable while no Elector answers.
func (r *Roles) MoveLeader(ctx context.Context, memberID uint64) error {
	el, err := r.electorAPI()
	if err != nil {
		return clientErr("move-leader", err)
	}
	cs, err := el.ClusterState(ctx, true)
	if err != nil {
		return clientErr("move-leader", err)
	}
	target := memberStatus(cs, memberID)
	if target == nil {
		return status.Errorf(codes.NotFound,
			"netsy: move-leader: no registered node has member id %x (etcdctl member list or netsyctl members lists them)", memberID)
	}
	id := target.GetInfo().GetNodeId()
	if cs.GetPrimary().GetNodeId() == id {
		return r.WaitActive(ctx, cs.GetPrimary(), cs.GetPrimaryTerm())
	}
	if h := target.GetHealth(); h != netsyv1.HealthState_HEALTHY {
		return status.Errorf(codes.FailedPrecondition,
			"netsy: move-leader: member %x (node %s) is %s to the Elector, so it cannot take the Primary role; "+
				"netsyctl cluster-state shows why, and netsyctl handoff --to %s moves the role once it is Healthy", memberID, id, h, id)
	}
	if cs.GetPrimary() == nil {
		return status.Errorf(codes.FailedPrecondition,
			"netsy: move-leader: no Primary is elected right now, so there is nothing to hand off; netsyctl cluster-state shows why")
	}
	after, err := el.Handoff(ctx, id)
	if err != nil {
		return clientErr("move-leader to "+id, err)
	}
	p := after.GetPrimary()
	if p.GetNodeId() != id {
		// The handoff happened: say where the role went, not that
		// nothing changed.
		return status.Errorf(codes.Aborted,
			"netsy: move-leader: asked for member %x (node %s), but the Elector elected %s (primary term %d): netsyctl cluster-state --events shows why",
			memberID, id, p.GetNodeId(), after.GetPrimaryTerm())
	}
	return r.WaitActive(ctx, p, after.GetPrimaryTerm())
}

// WaitActive waits until node p answers that it is the Active Primary at
// term or a later one. A Primary the Elector has just named is Starting
// until it has reconciled with object storage; a handoff is over for a
// client only once it serves.
func (r *Roles) WaitActive(ctx context.Context, p *netsyv1.NodeInfo, term uint64) error {
	var last error
	for {
		n, err := r.node(p)
		if err == nil {
			var ns *netsyv1.NodeState
			if ns, err = n.NodeState(ctx); err == nil {
				st := ns.GetState()
				if st.GetPrimaryState() == netsyv1.PrimaryState_ACTIVE && st.GetPrimaryTerm() >= term {
					return nil
				}
				if st.GetPrimaryTerm() > term && st.GetPrimaryState() == netsyv1.PrimaryState_REPLICA {
					return status.Errorf(codes.Aborted, "netsy: node %s was the Primary at term %d but is a Replica at term %d: the role moved on",
						p.GetNodeId(), term, st.GetPrimaryTerm())
				}
				err = fmt.Errorf("it is %s at primary term %d", st.GetPrimaryState(), st.GetPrimaryTerm())
			}
		}
		last = err
		if err := r.clk.Sleep(ctx, activePoll); err != nil {
			return status.Errorf(status.FromContextError(err).Code(),
				"netsy: node %s was elected Primary at term %d but is not Active yet (%v)", p.GetNodeId(), term, last)
		}
	}
}

// RemoveMember is etcd's MemberRemove: it deregisters the node with member
// id memberID with the Elector, under the rule `netsyctl deregister`
// (without --force) follows, and returns the members left. A node the
// Elector hears from is refused: it would register again at its next
// heartbeat (a node leaves by stopping; a graceful stop deregisters it).
func (r *Roles) RemoveMember(ctx context.Context, memberID uint64) ([]*netsyv1.NodeInfo, error) {
	el, err := r.electorAPI()
	if err != nil {
		return nil, clientErr("member remove", err)
	}
	cs, err := el.ClusterState(ctx, true)
	if err != nil {
		return nil, clientErr("member remove", err)
	}
	target := memberStatus(cs, memberID)
	if target == nil {
		return nil, status.Errorf(codes.NotFound,
			"netsy: member remove: no registered node has member id %x (etcdctl member list or netsyctl members lists them)", memberID)
	}
	id := target.GetInfo().GetNodeId()
	if target.GetHealth() == netsyv1.HealthState_HEALTHY {
		return nil, status.Errorf(codes.FailedPrecondition,
			"netsy: member remove: member %x (node %s) is running and Healthy: it would register again at its next heartbeat; "+
				"stop it instead (a graceful stop deregisters it), or remove it once it is stopped", memberID, id)
	}
	if err := el.Deregister(ctx, id); err != nil {
		if peer.ReasonOf(err) == peer.ReasonNotDurable {
			return nil, status.Errorf(codes.FailedPrecondition,
				"netsy: member remove: member %x (node %s) stays: %s; to remove it anyway, accepting that those entries may be lost: netsyctl deregister --force %s",
				memberID, id, errMessage(err), id)
		}
		return nil, clientErr("member remove "+id, err)
	}
	after, err := el.ClusterState(ctx, false)
	if err != nil {
		// Removed; the list is what is left of the one read before.
		var left []*netsyv1.NodeInfo
		for _, m := range cs.GetMembers() {
			if m.GetNodeId() != id {
				left = append(left, m)
			}
		}
		return left, nil
	}
	return after.GetMembers(), nil
}

// memberStatus finds the Elector's record of the node with memberID.
func memberStatus(cs *netsyv1.ClusterState, memberID uint64) *netsyv1.NodeStatus {
	if memberID == 0 {
		return nil
	}
	for _, n := range cs.GetNodes() {
		if n.GetInfo().GetMemberId() == memberID {
			return n
		}
	}
	return nil
}

// clientErr turns an error from the Elector into a status error an etcd
// client shows as it is, by the error's code and reason: no Elector (or
// one that has no authority yet) is Unavailable, so the client may retry;
// a refusal without a code of its own is FailedPrecondition.
func clientErr(what string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err).Err()
	}
	code := codes.FailedPrecondition
	if s, ok := status.FromError(err); ok && s.Code() != codes.Unknown {
		code = s.Code()
	}
	switch {
	case errors.Is(err, heartbeat.ErrNoElector),
		peer.ReasonOf(err) == peer.ReasonNotElector,
		peer.ReasonOf(err) == peer.ReasonNotLoaded:
		code = codes.Unavailable
	}
	return status.Errorf(code, "netsy: %s: %s", what, errMessage(err))
}

// errMessage is an error's text without a gRPC status prefix.
func errMessage(err error) string {
	if s, ok := status.FromError(err); ok {
		return s.Message()
	}
	return err.Error()
}
