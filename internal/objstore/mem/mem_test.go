package mem_test

import (
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/objstore"
	"github.com/netsy-io/netsy/internal/objstore/mem"
	"github.com/netsy-io/netsy/internal/objstore/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) objstore.Store { return mem.New(clock.Real()) })
}

func TestRefusesNestedKeys(t *testing.T) {
	s := mem.New(clock.Real())
	ctx := t.Context()
	if _, err := s.PutIfAbsent(ctx, "a/b", []byte("x")); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "a/b/c"} {
		if _, err := s.PutIfAbsent(ctx, k, []byte("x")); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("PutIfAbsent(%q) next to a/b = %v, want ErrInvalidKey", k, err)
		}
	}
	for _, k := range []string{"a-b", "a/bc", "ab/c", "a/c/d"} {
		if _, err := s.PutIfAbsent(ctx, k, []byte("x")); err != nil {
			t.Errorf("PutIfAbsent(%q): %v", k, err)
		}
	}
}

func TestLastModifiedFromClock(t *testing.T) {
	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	clk := clock.NewFake(start)
	s := mem.New(clk)
	ctx := t.Context()
	etag, err := s.PutIfAbsent(ctx, "k", []byte("1"))
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	if _, err := s.PutIfMatch(ctx, "k", []byte("2"), etag); err != nil {
		t.Fatal(err)
	}
	infos, err := s.List(ctx, "", "", 0)
	if err != nil || len(infos) != 1 || !infos[0].LastModified.Equal(start.Add(time.Minute)) {
		t.Fatalf("List = %+v, %v; want LastModified %v", infos, err, start.Add(time.Minute))
	}
}
