package objwal

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/objstore/faulty"
	"github.com/netsy-io/netsy/internal/objstore/s3"
	"github.com/netsy-io/netsy/internal/testutil/miniotest"
	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

// minioEnv is a bucket prefix on a real MinIO, with the real clock.
func minioEnv(t *testing.T, srv *miniotest.Server, prefix string) *env {
	t.Helper()
	st, err := s3.Open(t.Context(), s3.Options{
		Bucket: srv.Bucket, Prefix: prefix, Endpoint: srv.Endpoint, Region: srv.Region,
		PathStyle: true, AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &env{t: t, clk: clock.Real(), inner: st}
}

// TestMinIO runs the protocol's key cases against a real MinIO: its
// conditional writes, ETags and listing are what the fence relies on.
func TestMinIO(t *testing.T) {
	srv := miniotest.Start(t)

	t.Run("group commit, snapshot and restore", func(t *testing.T) {
		e := minioEnv(t, srv, "restore")
		a := e.node("", ModeSync, nil).open()
		const total = 2000
		start := wall.Now()
		a.appendRange(1, total, "a")
		if err := a.rec.wait(t, total); err != nil {
			t.Fatal(err)
		}
		s := a.l.Stats()
		t.Logf("%d entries appended back to back: durable in %v, %d PUTs, %.1f entries per PUT",
			total, wall.Since(start).Round(time.Millisecond), s.Puts, float64(s.Entries)/float64(s.Puts))
		if err := a.l.SaveSnapshot(snapshotAt(1500)); err != nil {
			t.Fatal(err)
		}
		a.nextSnapshot()
		a.appendRange(total+1, total+10, "a")
		if err := a.rec.wait(t, total+10); err != nil {
			t.Fatal(err)
		}
		a.close()
		history(t, e.inner)

		b := e.node("", ModeSync, nil).open()
		idx, got := b.replay()
		if idx != 1500 {
			t.Fatalf("restored snapshot %d, want 1500", idx)
		}
		checkEntries(t, got, 1501, total+10, tag("a"))
	})

	t.Run("fencing", func(t *testing.T) {
		e := minioEnv(t, srv, "fencing")
		a := e.node("", ModeSync, nil)
		g := newGate(a.store, walPrefix)
		g.armed = false
		a.opts.Store = g
		a.open()
		a.appendRange(1, 5, "a")
		if err := a.rec.wait(t, 5); err != nil {
			t.Fatal(err)
		}
		g.arm()
		a.appendRange(6, 8, "a")
		<-g.entered // a's upload of 6..8 is in flight
		b := e.node("", ModeSync, nil).open()
		close(g.release)
		if err := a.rec.wait(t, 6); !isFenced(err) {
			t.Fatalf("a after b's claim: %v, want ErrFenced", err)
		}
		if idx, _ := a.rec.get(); idx != 5 {
			t.Fatalf("a reported %d durable, want 5", idx)
		}
		b.appendRange(6, 8, "b")
		if err := b.rec.wait(t, 8); err != nil {
			t.Fatal(err)
		}
		hist, _ := history(t, e.inner)
		if len(hist) != 8 || string(hist[6].Ops[0].Value) != "b-6" {
			t.Fatalf("bucket history: %d entries, entry 6 = %v", len(hist), hist[6])
		}
	})

	t.Run("lost response", func(t *testing.T) {
		e := minioEnv(t, srv, "lost")
		n := e.node("", ModeSync, nil).open()
		n.store.Inject(faulty.Rule{Ops: faulty.PutIfAbsent, KeyPrefix: walPrefix, Err: faulty.ErrInjected, AfterCall: true, Count: 1})
		n.appendRange(1, 1, "a")
		if err := n.rec.wait(t, 1); err != nil {
			t.Fatal(err)
		}
		if s := n.l.Stats(); s.Retries != 1 || s.Puts != 1 {
			t.Fatalf("stats %+v: want one retry recognised as our own write", s)
		}
		if _, seqs := history(t, e.inner); len(seqs) != 2 {
			t.Fatalf("chunks %v: want the claim and one chunk", seqs)
		}
	})

	t.Run("corrupt chunk", func(t *testing.T) {
		e := minioEnv(t, srv, "corrupt")
		a := e.node("", ModeSync, nil).open()
		for i := uint64(1); i <= 3; i++ {
			a.appendRange(i, i, "a")
			if err := a.rec.wait(t, i); err != nil {
				t.Fatal(err)
			}
		}
		a.close()
		body, etag, err := e.inner.Get(t.Context(), walKey(3))
		if err != nil {
			t.Fatal(err)
		}
		body[len(body)/2] ^= 1
		if _, err := e.inner.PutIfMatch(t.Context(), walKey(3), body, etag); err != nil {
			t.Fatal(err)
		}
		_, err = e.node("", ModeSync, nil).tryOpen()
		if err == nil || !strings.Contains(err.Error(), walKey(3)) {
			t.Fatalf("Open = %v, want an error naming %s", err, walKey(3))
		}
	})

	// A follower's checkpoint search reads a chunk's first record and
	// abandons the rest of the body (hundreds of KiB here) mid-transfer.
	t.Run("follower checkpoint search", func(t *testing.T) {
		e := minioEnv(t, srv, "firsts")
		b := e.node("", ModeSync, func(o *Options) { o.Follower = true }).open()
		rnd := rand.New(rand.NewPCG(3, 4))
		const chunks, per = 12, 300
		for c := uint64(1); c <= chunks; c++ {
			var es []*netsyv1.Entry
			for i := (c-1)*per + 1; i <= c*per; i++ {
				ent := entry(i, "a")
				ent.Ops[0].Value = make([]byte, 1024)
				for j := range ent.Ops[0].Value {
					ent.Ops[0].Value[j] = byte(rnd.Uint32())
				}
				es = append(es, ent)
			}
			body, err := encodeEntries(nil, es)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.inner.PutIfAbsent(t.Context(), walKey(c), body); err != nil {
				t.Fatal(err)
			}
		}
		for round := range 2 { // the second from what the first learned
			for c := uint64(2); c <= chunks; c++ {
				seq, first, err := b.l.lastChunkStartingBy(0, c*per-uint64(round))
				if err != nil {
					t.Fatal(err)
				}
				if seq != c || first != (c-1)*per+1 {
					t.Fatalf("round %d: search in chunk %d found chunk %d starting at %d", round, c, seq, first)
				}
			}
		}
	})
}

// BenchmarkSyncAppendMinIO measures sync-mode durability against a real
// MinIO: P producers each append an entry and wait for it to be durable
// before the next, as clients of the engine do, through one feeder that
// calls Append (the engine's write loop). Run it by hand:
//
//	go test -run '^$' -bench SyncAppendMinIO -benchtime 3000x ./internal/objwal
func BenchmarkSyncAppendMinIO(b *testing.B) {
	srv := miniotest.Start(b)
	for _, producers := range []int{1, 16, 64, 256} {
		b.Run(fmt.Sprintf("producers=%d", producers), func(b *testing.B) {
			st, err := s3.Open(b.Context(), s3.Options{
				Bucket: srv.Bucket, Prefix: fmt.Sprintf("bench-%d-%d", producers, b.N), Endpoint: srv.Endpoint,
				Region: srv.Region, PathStyle: true, AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey,
			})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			rec := newSyncRec()
			l, err := Open(b.Context(), Options{Store: st, WALDir: b.TempDir(), OnSync: rec.onSync, Mode: ModeSync})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			reqs := make(chan chan uint64)
			feederDone := make(chan error, 1)
			go func() {
				next := uint64(1)
				for reply := range reqs {
					if err := l.Append(entry(next, "bench")); err != nil {
						feederDone <- err
						for range reqs {
						}
						return
					}
					reply <- next
					next++
				}
				feederDone <- nil
			}()
			waitDurable := func(idx uint64) error {
				for {
					rec.mu.Lock()
					done, err, ch := rec.index >= idx, rec.err, rec.changed
					rec.mu.Unlock()
					if done || err != nil {
						return err
					}
					<-ch
				}
			}
			var wg sync.WaitGroup
			errs := make(chan error, producers)
			per := b.N / producers
			if per == 0 {
				per = 1
			}
			b.ResetTimer()
			start := wall.Now()
			for range producers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					reply := make(chan uint64)
					for range per {
						reqs <- reply
						if err := waitDurable(<-reply); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			elapsed := wall.Since(start)
			b.StopTimer()
			close(reqs)
			if err := <-feederDone; err != nil {
				b.Fatal(err)
			}
			close(errs)
			for err := range errs {
				b.Fatal(errors.Join(err))
			}
			s := l.Stats()
			b.ReportMetric(float64(per*producers)/elapsed.Seconds(), "appends/s")
			b.ReportMetric(float64(s.Entries)/float64(max(s.Puts, 1)), "entries/PUT")
		})
	}
}

// wall times the MinIO tests and benchmarks, which run on real time.
var wall = clock.Real()
