package roles

import (
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/netsy-io/netsy/proto/netsyv1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A heartbeat answer renews the Primary's lease only when the view took
// its Cluster State and it names this node Primary at the term it holds.
func TestLeaseRenewedOnlyByAnAnswerNamingThisNodeAtItsTerm(t *testing.T) {
	named := func(id string, term uint64) *netsyv1.ClusterState {
		return &netsyv1.ClusterState{Primary: &netsyv1.NodeInfo{NodeId: id}, PrimaryTerm: term}
	}
	for _, tc := range []struct {
		name     string
		accepted bool
		cs       *netsyv1.ClusterState
		held     uint64
		want     bool
	}{
		{"names this node at its term", true, named("n1", 3), 3, true},
		{"not accepted by the view", false, named("n1", 3), 3, false},
		{"names another node", true, named("n2", 3), 3, false},
		{"names this node at another term", true, named("n1", 4), 3, false},
		{"names no Primary", true, &netsyv1.ClusterState{}, 3, false},
		{"no Cluster State", true, nil, 0, false},
	} {
		if got := renewsLease("n1", tc.accepted, tc.cs, tc.held); got != tc.want {
			t.Errorf("%s: renews %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A deposition ends only once the Elector names a Primary at a later term
// than the one lost: another node, or this one Active at a later term.
func TestDepositionEndsAtALaterTermOnly(t *testing.T) {
	d := &Deposition{Term: 3}
	other, self := &netsyv1.NodeInfo{NodeId: "n2"}, &netsyv1.NodeInfo{NodeId: "n1"}
	for _, tc := range []struct {
		name   string
		p      *netsyv1.NodeInfo
		term   uint64
		active bool
		held   uint64
		want   bool
	}{
		{"no Primary", nil, 4, false, 3, false},
		{"another node at the lost term", other, 3, false, 3, false},
		{"another node at a later term", other, 4, false, 3, true},
		{"this node named, not Active yet", self, 4, false, 4, false},
		{"this node Active at the lost term", self, 4, true, 3, false},
		{"this node Active at a later term", self, 4, true, 4, true},
	} {
		if got := depositionOver(d, "n1", tc.p, tc.term, tc.active, tc.held); got != tc.want {
			t.Errorf("%s: over %v, want %v", tc.name, got, tc.want)
		}
	}
	var c core = newCore("n1")
	c.fenced(errors.New("fenced"), 3, time.Unix(1, 0))
	c.reconsider(other, 3, false, 3)
	if c.deposed == nil {
		t.Fatal("the deposition ended at the lost term")
	}
	c.reconsider(other, 4, false, 3)
	if c.deposed != nil {
		t.Fatal("the deposition did not end when another node was named at a later term")
	}
}
