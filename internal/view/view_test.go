package view

import (
	"testing"

	"github.com/netsy-io/netsy/proto/netsyv1"
)

func state(elector string, term, version uint64, primary string) *netsyv1.ClusterState {
	cs := &netsyv1.ClusterState{Elector: &netsyv1.NodeInfo{NodeId: elector}, ElectorTerm: term, Version: version}
	if primary != "" {
		cs.Primary = &netsyv1.NodeInfo{NodeId: primary}
	}
	return cs
}

func TestOfferRules(t *testing.T) {
	v := New(nil)
	ch, stop := v.Subscribe()
	defer stop()
	if ok, _ := v.Offer(state("a", 2, 1, "p"), "push"); !ok {
		t.Fatal("first state refused")
	}
	if got := <-ch; got.Primary.NodeId != "p" {
		t.Fatalf("subscriber got %v", got)
	}
	if ok, _ := v.Offer(state("b", 1, 9, "q"), "push"); ok {
		t.Fatal("a state from an older Elector term was taken")
	}
	if ok, _ := v.Offer(state("a", 2, 0, "q"), "push"); ok {
		t.Fatal("an older version of the same term was taken")
	}
	if ok, cur := v.Offer(state("c", 2, 5, "q"), "push"); ok || cur.Elector.NodeId != "a" {
		t.Fatal("a second Elector with the same term was taken")
	}
	if ok, _ := v.Offer(state("c", 3, 0, ""), "heartbeat"); !ok {
		t.Fatal("a newer Elector term was refused")
	}
	if v.ElectorTerm() != 3 || v.Current().Primary != nil {
		t.Fatalf("view %v", v.Current())
	}
	select {
	case got := <-ch:
		if got.ElectorTerm != 3 {
			t.Fatalf("subscriber holds %v, want the newest", got)
		}
	default:
		t.Fatal("subscriber not told")
	}
}
