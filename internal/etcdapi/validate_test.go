package etcdapi

import (
	"slices"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// refOverlaps is a deliberately naive statement of etcd's overlap rule
// (lists and linear scans, no fast path) to check checkTxnOverlaps against.
func refOverlaps(r *pb.TxnRequest) error {
	for _, ops := range [][]*pb.RequestOp{r.GetSuccess(), r.GetFailure()} {
		if _, _, err := refBranch(ops); err != nil {
			return err
		}
	}
	return nil
}

type refRange struct{ lo, hi string }

func refBranch(ops []*pb.RequestOp) ([]string, []refRange, error) {
	var dels []refRange
	for _, op := range ops {
		d := op.GetRequestDeleteRange()
		if d == nil {
			continue
		}
		key, end := string(d.GetKey()), string(d.GetRangeEnd())
		switch {
		case end == "":
			dels = append(dels, refRange{key, key + "\x00"})
		case end == "\x00" || key >= end:
			// covers nothing for the check (etcd's behaviour)
		default:
			dels = append(dels, refRange{key, end})
		}
	}
	covered := func(k string) bool {
		for _, d := range dels {
			if d.lo <= k && k < d.hi {
				return true
			}
		}
		return false
	}
	var puts []string
	for _, op := range ops {
		t := op.GetRequestTxn()
		if t == nil {
			continue
		}
		thenP, thenD, err := refBranch(t.GetSuccess())
		if err != nil {
			return nil, nil, err
		}
		elseP, elseD, err := refBranch(t.GetFailure())
		if err != nil {
			return nil, nil, err
		}
		for _, k := range thenP {
			if slices.Contains(puts, k) || covered(k) {
				return nil, nil, rpctypes.ErrGRPCDuplicateKey
			}
			puts = append(puts, k)
		}
		for _, k := range elseP {
			if slices.Contains(puts, k) && !slices.Contains(thenP, k) {
				return nil, nil, rpctypes.ErrGRPCDuplicateKey
			}
			if covered(k) {
				return nil, nil, rpctypes.ErrGRPCDuplicateKey
			}
			puts = append(puts, k)
		}
		dels = append(dels, thenD...)
		dels = append(dels, elseD...)
	}
	for _, op := range ops {
		p := op.GetRequestPut()
		if p == nil {
			continue
		}
		k := string(p.GetKey())
		if slices.Contains(puts, k) || covered(k) {
			return nil, nil, rpctypes.ErrGRPCDuplicateKey
		}
		puts = append(puts, k)
	}
	return puts, dels, nil
}

func TestKeyRanges(t *testing.T) {
	rs := newKeyRanges([]keyRange{{"m", "p"}, {"a", "c"}, {"b", "d"}, {"d", "e"}, {"x", "x\x00"}})
	want := keyRanges{{"a", "e"}, {"m", "p"}, {"x", "x\x00"}}
	if !slices.Equal(rs, want) {
		t.Fatalf("coalesced to %v", rs)
	}
	for k, in := range map[string]bool{"a": true, "d": true, "dz": true, "e": false, "l": false, "m": true, "o": true, "p": false, "x": true, "x\x00": false, "": false, "z": false} {
		if rs.contains(k) != in {
			t.Errorf("contains(%q) = %v", k, !in)
		}
	}
	u := rs.union(keyRanges{{"c", "n"}, {"y", "z"}})
	if want := (keyRanges{{"a", "p"}, {"x", "x\x00"}, {"y", "z"}}); !slices.Equal(u, want) {
		t.Fatalf("union %v", u)
	}
}

// TestValidateNilParts feeds requests built in-process with nil pieces,
// which the wire never produces but a forwarding Backend could.
func TestValidateNilParts(t *testing.T) {
	for name, r := range map[string]*pb.TxnRequest{
		"nil op":         {Success: []*pb.RequestOp{nil}},
		"nil range":      {Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{}}}},
		"nil put":        {Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{}}}},
		"nil delete":     {Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestDeleteRange{}}}},
		"nil nested txn": {Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestTxn{}}, put("a", "")}},
		"nil compare":    {Compare: []*pb.Compare{nil}},
	} {
		t.Run(name, func(t *testing.T) {
			if err := validateTxn(r, DefaultMaxTxnOps, DefaultMaxRequestBytes); err == nil {
				t.Fatal("accepted")
			}
		})
	}
	if checkRange(nil) == nil || checkPut(nil) == nil || checkDelete(nil) == nil {
		t.Fatal("nil request accepted")
	}
}

func fuzzSeeds() []*pb.TxnRequest {
	return []*pb.TxnRequest{
		{Compare: []*pb.Compare{{Key: []byte("a"), Target: pb.Compare_MOD}}, Success: []*pb.RequestOp{put("a", "1")}, Failure: []*pb.RequestOp{get("a")}},
		{Success: []*pb.RequestOp{put("a", ""), put("a", "")}},
		{Success: []*pb.RequestOp{del("a", "c"), put("b", ""), del("a", "\x00")}},
		{Success: []*pb.RequestOp{put("a", ""), nested([]*pb.RequestOp{put("b", "")}, []*pb.RequestOp{put("b", ""), del("c", "d")})}},
		{Success: []*pb.RequestOp{nested([]*pb.RequestOp{del("a", "z")}, nil), nested([]*pb.RequestOp{put("q", "")}, nil)}},
		{Success: []*pb.RequestOp{nested(nil, []*pb.RequestOp{nested([]*pb.RequestOp{put("k", "")}, nil)}), put("k", "")}},
		{Success: []*pb.RequestOp{{}}, Failure: []*pb.RequestOp{del("", "")}},
	}
}

// FuzzValidateTxn decodes arbitrary bytes as a TxnRequest and validates it:
// it must never panic, and the fast overlap check must agree with the naive
// reference.
func FuzzValidateTxn(f *testing.F) {
	for _, r := range fuzzSeeds() {
		b, err := r.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var r pb.TxnRequest
		if r.Unmarshal(data) != nil {
			return
		}
		_ = validateTxn(&r, 8, 1<<16)
		got, want := checkTxnOverlaps(&r), refOverlaps(&r)
		if got != want {
			t.Fatalf("overlap check %v, reference %v, request %v", got, want, &r)
		}
	})
}
