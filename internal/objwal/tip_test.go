package objwal

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/datafile"
	"github.com/netsy-io/netsy/internal/objstore/faulty"
	"github.com/netsy-io/netsy/internal/objstore/mem"
	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

// The durable tip is the last entry of the newest chunk with entries (an
// empty claim after it adds nothing), or the newest snapshot's index when
// that is higher (its chunks were garbage-collected); damage is an error,
// never a guess.
func TestDurableTipReadsNewestChunkWithEntriesAndSnapshot(t *testing.T) {
	ctx := context.Background()
	s := mem.New(clock.NewFake(epoch))
	tip := func(want uint64) {
		t.Helper()
		got, err := DurableTip(ctx, s)
		if err != nil || got != want {
			t.Fatalf("DurableTip = %d, %v; want %d", got, err, want)
		}
	}
	tip(0)
	put := func(key string, body []byte) {
		t.Helper()
		if _, err := s.PutIfAbsent(ctx, key, body); err != nil {
			t.Fatal(err)
		}
	}
	chunk := func(from, to uint64) []byte {
		var es []*netsyv1.Entry
		for i := from; i <= to; i++ {
			es = append(es, entry(i, "a"))
		}
		b, err := datafile.EncodeChunk(es)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	claim, err := encodeChunk(nil, nil, datafile.AppendHeader(nil, datafile.KindChunk), nil)
	if err != nil {
		t.Fatal(err)
	}
	put(walKey(1), chunk(1, 3))
	put(walKey(2), chunk(4, 5))
	tip(5)
	put(walKey(3), claim)
	put(walKey(4), claim)
	tip(5)

	var snap bytes.Buffer
	if err := datafile.EncodeSnapshot(&snap, snapshotAt(9)); err != nil {
		t.Fatal(err)
	}
	put(snapKey(10), snap.Bytes())
	tip(9)
	put(walKey(5), chunk(10, 12))
	tip(12)

	put(walKey(6), []byte("not a chunk"))
	if _, err := DurableTip(ctx, s); err == nil || !strings.Contains(err.Error(), walKey(6)) {
		t.Fatalf("DurableTip over a damaged chunk = %v, want an error naming it", err)
	}
}

func TestDurableTipReportsStoreErrors(t *testing.T) {
	clk := clock.NewFake(epoch)
	s := faulty.New(mem.New(clk), clk)
	s.Fail(faulty.List, walPrefix)
	if _, err := DurableTip(context.Background(), s); err == nil || !strings.Contains(err.Error(), "list wal/") {
		t.Fatalf("DurableTip with the bucket unreachable = %v, want a listing error", err)
	}
}
