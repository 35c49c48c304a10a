package clusterview

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/netsy-io/netsy/proto/netsyv1"
)

// NodeRef names a node and how to reach it.
type NodeRef struct {
	NodeID string `json:"node_id"`
	// MemberID is the node's etcd member id in hex, as etcdctl prints it.
	MemberID   string   `json:"member_id"`
	PeerAddr   string   `json:"peer_addr"`
	ClientURLs []string `json:"client_urls,omitempty"`
	HTTPAddr   string   `json:"http_addr,omitempty"`
}

// Where a node's row came from (NodeRow.Source).
const (
	// SourceElector: the Elector's record, built from the node's heartbeats.
	SourceElector = "elector"
	// SourceSelf: the answering node about itself.
	SourceSelf = "self"
	// SourceMember: a registered member nobody reported a state for.
	SourceMember = "member"
)

// NodeRow is one node of the cluster.
type NodeRow struct {
	NodeRef
	Elector bool `json:"elector"`
	Primary bool `json:"primary"`
	// Source is SourceElector, SourceSelf or SourceMember.
	Source string `json:"source"`
	// Health is Healthy, Degraded, Loading or Unknown; from the Elector it
	// is the Elector's judgement, not the node's own.
	Health string `json:"health"`
	// PrimaryState is Replica, Starting, Active, Draining or Unknown.
	PrimaryState      string `json:"primary_state"`
	LatestRevision    int64  `json:"latest_revision"`
	CommittedRevision int64  `json:"committed_revision"`
	// Lag is how many revisions the node's latest durable revision is
	// behind the Primary's; null when either is unknown.
	Lag *int64 `json:"lag"`
	// LastHeartbeatAgeMS is how long before the Elector answered it last
	// heard from the node, by the Elector's clock; null when it never did
	// or when the row is not the Elector's.
	LastHeartbeatAgeMS *int64 `json:"last_heartbeat_age_ms"`
	// LastHeartbeat is LastHeartbeatAgeMS for people ("120ms", "3.2s",
	// "never"); empty when the row is not the Elector's.
	LastHeartbeat string `json:"last_heartbeat,omitempty"`
	DegradedForMS int64  `json:"degraded_for_ms"`
	DegradedFor   string `json:"degraded_for,omitempty"`
	// DeregistrationWait says why a node Degraded for longer than the
	// deregistration timeout is still counted (object storage may lack
	// entries it acknowledged); empty otherwise or when the row is not the
	// Elector's.
	DeregistrationWait string `json:"deregistration_wait,omitempty"`
	// SeenPrimaryID and SeenPrimaryTerm are the roles as the node itself
	// last knew them: a node that missed a Cluster State push shows an
	// older term here than the view's.
	SeenPrimaryID   string `json:"seen_primary_id,omitempty"`
	SeenPrimaryTerm uint64 `json:"seen_primary_term"`
	// Replica is the Primary's record of this node as its replica; nil
	// when the Primary reported none (it is the Primary, or it does not
	// follow).
	Replica *ReplicaView `json:"replica,omitempty"`

	known bool // a heartbeat or the node's own state was seen
	// repl is the node's report as the Primary.
	repl *netsyv1.Replication
	// restoreRev and restoreMs are its report of the oldest restorable
	// point, as the Primary.
	restoreRev, restoreMs int64
}

// ReplicaView is what the Primary reports of one replica.
type ReplicaView struct {
	// DurableIndex is the highest log index the replica reported fsync'd.
	DurableIndex uint64 `json:"durable_index"`
	// LagEntries and LagMS are how far it is behind the Primary's log:
	// entries, and how long ago the first one it lacks was appended.
	LagEntries uint64 `json:"lag_entries"`
	LagMS      int64  `json:"lag_ms"`
	// Counted says it counts toward the write quorum now; NotCounted says
	// why not.
	Counted    bool   `json:"counted"`
	NotCounted string `json:"not_counted,omitempty"`
}

// ReplicationView is the Primary's account of quorum commit.
type ReplicationView struct {
	Quorum         int32  `json:"quorum"`
	ReplicasNeeded uint32 `json:"replicas_needed"`
	// Fallback says writes are acknowledged through object storage now,
	// and FallbackReason why.
	Fallback       bool   `json:"fallback"`
	FallbackReason string `json:"fallback_reason,omitempty"`
	// Fallbacks counts the times the Primary fell back since it became
	// Active.
	Fallbacks uint64 `json:"fallbacks"`
}

// RestoreView is the oldest point a restore from object storage can
// rebuild, as the Primary's last garbage collection (--retention,
// --snapshot-keep) left the bucket.
type RestoreView struct {
	OldestRevision int64 `json:"oldest_revision"`
	// OldestTime is its commit time, RFC 3339 in UTC with milliseconds;
	// empty when unknown.
	OldestTime string `json:"oldest_time,omitempty"`
}

// EventRow is one logged role change.
type EventRow struct {
	// Time is RFC 3339 in UTC with milliseconds.
	Time        string `json:"time"`
	Kind        string `json:"kind"`
	Node        string `json:"node"`
	ElectorTerm uint64 `json:"elector_term"`
	PrimaryTerm uint64 `json:"primary_term"`
	Revision    int64  `json:"revision"`
	Detail      string `json:"detail,omitempty"`
	Reporter    string `json:"reporter"`

	nanos int64
}

// View is the cluster as one answer described it.
type View struct {
	ClusterID string `json:"cluster_id"`
	// ViaNode is the node whose own state came with the Cluster State:
	// the node serving the HTTP request, or the one netsyctl asked first.
	ViaNode string `json:"via_node,omitempty"`
	// Note says whose view this is when it is not the Elector's; callers
	// set it (FromProto cannot tell).
	Note            string   `json:"note,omitempty"`
	Elector         *NodeRef `json:"elector"`
	ElectorTerm     uint64   `json:"elector_term"`
	Primary         *NodeRef `json:"primary"`
	PrimaryTerm     uint64   `json:"primary_term"`
	RegisteredNodes uint32   `json:"registered_nodes"`
	// Replication is the Primary's account of quorum commit, from its last
	// heartbeat; nil when none is known.
	Replication *ReplicationView `json:"replication,omitempty"`
	// Restore is the oldest point a restore from object storage can
	// rebuild, from the Primary's last heartbeat; nil when none is known.
	Restore *RestoreView `json:"restore,omitempty"`
	// Version counts the Elector's changes within its term.
	Version uint64    `json:"version"`
	Nodes   []NodeRow `json:"nodes"`
	// Events are oldest first.
	Events []EventRow `json:"events,omitempty"`
}

// FromProto builds the View of cs as the node that sent self sees it.
// Either may be nil: with cs nil the node's own view (self.cluster_state)
// is used. Rows come from cs.nodes (the Elector's records), then self for
// the answering node if the Elector did not list it, then cs.members for
// registered nodes nobody reported on, ordered by node id. Events are
// cs.events merged with self.events, duplicates dropped, oldest first.
func FromProto(cs *netsyv1.ClusterState, self *netsyv1.NodeState) View {
	if cs == nil {
		cs = self.GetClusterState()
	}
	v := View{
		ClusterID:       cs.GetClusterId(),
		Elector:         Ref(cs.GetElector()),
		ElectorTerm:     cs.GetElectorTerm(),
		Primary:         Ref(cs.GetPrimary()),
		PrimaryTerm:     cs.GetPrimaryTerm(),
		RegisteredNodes: cs.GetRegisteredNodes(),
		Version:         cs.GetVersion(),
		Nodes:           []NodeRow{},
	}
	if self != nil {
		v.ViaNode = selfID(self)
	}

	seen := map[string]bool{}
	for _, ns := range cs.GetNodes() {
		id := ns.GetInfo().GetNodeId()
		if id == "" || seen[id] {
			continue
		}
		seen[id] = true
		v.Nodes = append(v.Nodes, electorRow(ns))
	}
	if id := selfID(self); self != nil && id != "" && !seen[id] {
		seen[id] = true
		v.Nodes = append(v.Nodes, selfRow(self))
	}
	for _, m := range cs.GetMembers() {
		id := m.GetNodeId()
		if id == "" || seen[id] {
			continue
		}
		seen[id] = true
		v.Nodes = append(v.Nodes, NodeRow{NodeRef: *Ref(m), Source: SourceMember, Health: "Unknown", PrimaryState: "Unknown"})
	}
	slices.SortFunc(v.Nodes, func(a, b NodeRow) int { return strings.Compare(a.NodeID, b.NodeID) })

	var primary *NodeRow
	for i := range v.Nodes {
		r := &v.Nodes[i]
		r.Elector = v.Elector != nil && r.NodeID == v.Elector.NodeID
		r.Primary = v.Primary != nil && r.NodeID == v.Primary.NodeID
		if r.Primary {
			primary = r
		}
	}
	if primary != nil && primary.repl != nil {
		rep := primary.repl
		v.Replication = &ReplicationView{
			Quorum: rep.GetQuorum(), ReplicasNeeded: rep.GetReplicasNeeded(),
			Fallback: rep.GetFallback(), FallbackReason: rep.GetFallbackReason(), Fallbacks: rep.GetFallbacks(),
		}
		for _, rs := range rep.GetReplicas() {
			for i := range v.Nodes {
				if r := &v.Nodes[i]; r.NodeID == rs.GetNodeId() {
					r.Replica = &ReplicaView{
						DurableIndex: rs.GetDurableIndex(), LagEntries: rs.GetLagEntries(), LagMS: rs.GetLagMs(),
						Counted: rs.GetCounted(), NotCounted: rs.GetNotCountedReason(),
					}
				}
			}
		}
	}
	if primary != nil && primary.restoreRev > 0 {
		v.Restore = &RestoreView{OldestRevision: primary.restoreRev}
		if primary.restoreMs != 0 {
			v.Restore.OldestTime = FormatTime(primary.restoreMs * int64(time.Millisecond))
		}
	}
	if primary != nil && primary.known {
		for i := range v.Nodes {
			r := &v.Nodes[i]
			if !r.known {
				continue
			}
			lag := max(primary.LatestRevision-r.LatestRevision, 0)
			r.Lag = &lag
		}
	}

	v.Events = mergeEvents(cs.GetEvents(), self.GetEvents())
	return v
}

func selfID(self *netsyv1.NodeState) string {
	if id := self.GetInfo().GetNodeId(); id != "" {
		return id
	}
	return self.GetState().GetNodeId()
}

// Ref is ni as JSON, or nil when ni names no node.
func Ref(ni *netsyv1.NodeInfo) *NodeRef {
	if ni.GetNodeId() == "" {
		return nil
	}
	return &NodeRef{
		NodeID:     ni.GetNodeId(),
		MemberID:   MemberID(ni.GetMemberId()),
		PeerAddr:   ni.GetPeerAddr(),
		ClientURLs: slices.Clone(ni.GetClientUrls()),
		HTTPAddr:   ni.GetHttpAddr(),
	}
}

func electorRow(ns *netsyv1.NodeStatus) NodeRow {
	r := NodeRow{
		NodeRef:       *Ref(ns.GetInfo()),
		Source:        SourceElector,
		Health:        Health(ns.GetHealth()),
		PrimaryState:  "Unknown",
		LastHeartbeat: "never",
		DegradedForMS: ns.GetDegradedForMs(),

		DeregistrationWait: ns.GetDeregistrationWait(),
	}
	if age := ns.GetLastHeartbeatAgeMs(); age >= 0 {
		r.LastHeartbeatAgeMS = &age
		r.LastHeartbeat = FormatAge(time.Duration(age) * time.Millisecond)
	}
	if r.DegradedForMS > 0 {
		r.DegradedFor = FormatAge(time.Duration(r.DegradedForMS) * time.Millisecond)
	}
	if hb := ns.GetLast(); hb != nil {
		fillFromHeartbeat(&r, hb)
	}
	return r
}

func selfRow(self *netsyv1.NodeState) NodeRow {
	info := self.GetInfo()
	if info.GetNodeId() == "" {
		info = &netsyv1.NodeInfo{NodeId: selfID(self), MemberId: self.GetState().GetMemberId()}
	}
	r := NodeRow{NodeRef: *Ref(info), Source: SourceSelf, Health: "Unknown", PrimaryState: "Unknown"}
	if hb := self.GetState(); hb != nil {
		r.Health = Health(hb.GetHealth())
		fillFromHeartbeat(&r, hb)
	}
	return r
}

func fillFromHeartbeat(r *NodeRow, hb *netsyv1.Heartbeat) {
	r.known = true
	r.PrimaryState = PrimaryState(hb.GetPrimaryState())
	r.LatestRevision = hb.GetLatestRevision()
	r.CommittedRevision = hb.GetCommittedRevision()
	r.SeenPrimaryID = hb.GetPrimaryId()
	r.SeenPrimaryTerm = hb.GetPrimaryTerm()
	r.repl = hb.GetReplication()
	r.restoreRev, r.restoreMs = hb.GetRestoreOldestRevision(), hb.GetRestoreOldestTimeMs()
}

func mergeEvents(lists ...[]*netsyv1.Event) []EventRow {
	var out []EventRow
	seen := map[EventRow]bool{}
	for _, list := range lists {
		for _, e := range list {
			row := EventRow{
				Time:        FormatTime(e.GetTimeUnixNano()),
				Kind:        e.GetKind(),
				Node:        e.GetNodeId(),
				ElectorTerm: e.GetElectorTerm(),
				PrimaryTerm: e.GetPrimaryTerm(),
				Revision:    e.GetRevision(),
				Detail:      e.GetDetail(),
				Reporter:    e.GetReporter(),
				nanos:       e.GetTimeUnixNano(),
			}
			if seen[row] {
				continue
			}
			seen[row] = true
			out = append(out, row)
		}
	}
	slices.SortStableFunc(out, func(a, b EventRow) int {
		switch {
		case a.nanos < b.nanos:
			return -1
		case a.nanos > b.nanos:
			return 1
		}
		return 0
	})
	return out
}

// MemberID formats an etcd member id as etcdctl does: lowercase hex.
func MemberID(id uint64) string { return fmt.Sprintf("%x", id) }

// Health names a health state: Healthy, Degraded, Loading or Unknown.
func Health(h netsyv1.HealthState) string {
	switch h {
	case netsyv1.HealthState_LOADING:
		return "Loading"
	case netsyv1.HealthState_HEALTHY:
		return "Healthy"
	case netsyv1.HealthState_DEGRADED:
		return "Degraded"
	}
	return "Unknown"
}

// PrimaryState names a Primary life-cycle state: Replica, Starting,
// Active, Draining or Unknown.
func PrimaryState(s netsyv1.PrimaryState) string {
	switch s {
	case netsyv1.PrimaryState_REPLICA:
		return "Replica"
	case netsyv1.PrimaryState_STARTING:
		return "Starting"
	case netsyv1.PrimaryState_ACTIVE:
		return "Active"
	case netsyv1.PrimaryState_DRAINING:
		return "Draining"
	}
	return "Unknown"
}

// FormatAge prints a duration the way an operator reads an age: "120ms"
// below a second, "3.2s" below a minute, "4m05s" below an hour, then
// "2h03m". Each form truncates; it never rounds up into the next unit.
func FormatAge(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + FormatAge(-d)
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		tenths := d / (100 * time.Millisecond)
		return fmt.Sprintf("%d.%ds", tenths/10, tenths%10)
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", d/time.Minute, (d%time.Minute)/time.Second)
	}
	return fmt.Sprintf("%dh%02dm", d/time.Hour, (d%time.Hour)/time.Minute)
}

// FormatTime prints a Unix time in nanoseconds as RFC 3339 in UTC with
// milliseconds.
func FormatTime(unixNano int64) string {
	return time.Unix(0, unixNano).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}
