// Package view keeps this node's view of the cluster's roles: the newest
// Cluster State it accepted, from Elector pushes and heartbeat answers.
//
// Rules it enforces:
//   - A state from an Elector term older than one already seen is
//     rejected: a deposed Elector cannot move this node's roles back.
//   - Within one Elector term, a state older (lower version) than the one
//     held is ignored, so a late push cannot undo a newer one.
//   - Two different Electors claiming the same term is a bug somewhere
//     (two lock holders at once); it is logged at error level, and the
//     first one's states are kept.
//
// It must never decide anything about roles itself: the primary and
// replica roles subscribe to what it accepts.
package view

import (
	"sync"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/netsy-io/netsy/proto/netsyv1"
)

// View is one node's view of the roles. It is safe for concurrent use.
type View struct {
	log hclog.Logger

	mu      sync.Mutex
	cur     *netsyv1.ClusterState
	maxTerm uint64 // highest Elector term seen
	subs    map[int]chan *netsyv1.ClusterState
	nextSub int
}

// New returns an empty view.
func New(logger hclog.Logger) *View {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &View{log: logger, subs: map[int]chan *netsyv1.ClusterState{}}
}

// Offer proposes a state; it reports whether the view took it, and the
// state the view holds afterwards.
func (v *View) Offer(cs *netsyv1.ClusterState, from string) (bool, *netsyv1.ClusterState) {
	if cs == nil || cs.Elector == nil {
		return false, v.Current()
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	cur := v.cur
	switch {
	case cs.ElectorTerm < v.maxTerm:
		v.log.Warn("rejected Cluster State from an older Elector term", "from", from, "elector", cs.Elector.NodeId,
			"elector_term", cs.ElectorTerm, "seen_term", v.maxTerm)
		return false, cur
	case cur != nil && cs.ElectorTerm == cur.ElectorTerm && cs.Elector.NodeId != cur.Elector.NodeId:
		v.log.Error("TWO ELECTORS claim the same term; keeping the first", "elector_term", cs.ElectorTerm,
			"kept", cur.Elector.NodeId, "rejected", cs.Elector.NodeId, "from", from)
		return false, cur
	case cur != nil && cs.ElectorTerm == cur.ElectorTerm && cs.Version < cur.Version:
		return false, cur
	case cur != nil && proto.Equal(cs, cur):
		return true, cur
	}
	v.cur = proto.Clone(cs).(*netsyv1.ClusterState)
	v.maxTerm = cs.ElectorTerm
	for _, ch := range v.subs {
		select {
		case <-ch:
		default:
		}
		ch <- v.cur
	}
	return true, v.cur
}

// Current returns the state held (nil before any), which must not be
// modified.
func (v *View) Current() *netsyv1.ClusterState {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.cur
}

// ElectorTerm is the highest Elector term seen.
func (v *View) ElectorTerm() uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.maxTerm
}

// Subscribe returns a channel that holds the newest accepted state (older
// ones are replaced, never queued), starting with the current one, and a
// function that ends the subscription.
func (v *View) Subscribe() (<-chan *netsyv1.ClusterState, func()) {
	v.mu.Lock()
	defer v.mu.Unlock()
	id := v.nextSub
	v.nextSub++
	ch := make(chan *netsyv1.ClusterState, 1)
	if v.cur != nil {
		ch <- v.cur
	}
	v.subs[id] = ch
	return ch, func() {
		v.mu.Lock()
		delete(v.subs, id)
		v.mu.Unlock()
	}
}
