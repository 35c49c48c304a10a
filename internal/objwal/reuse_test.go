package objwal

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/netsy-io/netsy/internal/objstore"
	"github.com/netsy-io/netsy/internal/objstore/faulty"
	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

// bodyRecorder remembers every chunk body offered to the store: a copy of
// each attempt, and the caller's slice of the latest one, to see whether
// the caller changed it before its next attempt.
type bodyRecorder struct {
	objstore.Store
	mu       sync.Mutex
	attempts map[string][][]byte
	held     map[string][]byte
	bad      []string
}

func (r *bodyRecorder) PutIfAbsent(ctx context.Context, key string, body []byte) (string, error) {
	r.mu.Lock()
	if strings.HasPrefix(key, walPrefix) {
		if prev, ok := r.held[key]; ok {
			if last := r.attempts[key][len(r.attempts[key])-1]; !bytes.Equal(prev, last) {
				r.bad = append(r.bad, key+": the body of a failed attempt changed before the retry")
			}
		}
		if n := len(r.attempts[key]); n > 0 && !bytes.Equal(r.attempts[key][n-1], body) {
			r.bad = append(r.bad, key+": a retry carried other bytes")
		}
		r.attempts[key] = append(r.attempts[key], bytes.Clone(body))
		r.held[key] = body
	}
	r.mu.Unlock()
	return r.Store.PutIfAbsent(ctx, key, body)
}

// A chunk whose PUT keeps failing is retried with its own bytes while
// appends go on, and once the store is back every chunk holds exactly its
// entries: the buffers the uploader reuses (a batch's frames, a sealed
// body) are never handed to Append or the next chunk while a chunk still
// needs them.
func TestRetriedChunkKeepsItsBytesWhileAppendsGoOn(t *testing.T) {
	e := newEnv(t)
	rec := &bodyRecorder{attempts: map[string][][]byte{}, held: map[string][]byte{}}
	// Tags of many lengths, so that frames never line up from one buffer
	// to the next.
	tagOf := func(i uint64) string { return strings.Repeat("v", int(i*7%23)) }
	n := e.node("", ModeAsync, func(o *Options) {
		o.ChunkMaxBytes = 300 // a few entries a chunk: the buffers go round
		rec.Store = o.Store
		o.Store = rec
	}).open()
	appendRange := func(from, to uint64) {
		for i := from; i <= to; i++ {
			if err := n.l.Append(entry(i, tagOf(i))); err != nil {
				t.Fatalf("append %d: %v", i, err)
			}
		}
		if err := n.rec.wait(t, to); err != nil {
			t.Fatal(err)
		}
	}
	// Waits for the chunks due by size; the rest would wait for its age.
	uploadedTo := func(last uint64) {
		for n.l.Stats().Uploaded < last {
			if p := n.nextPut(); p.err != nil {
				t.Fatalf("upload of %s: %v", walKey(p.seq), p.err)
			}
		}
	}

	appendRange(1, 40)
	uploadedTo(30)
	fail := n.store.Fail(faulty.PutIfAbsent, walPrefix)
	appendRange(41, 60)
	failed := n.nextPut()
	for failed.err == nil {
		// Only a PUT already under way when the outage began, of
		// entries appended before it, may still succeed.
		if up := n.l.Stats().Uploaded; up > 40 {
			t.Fatalf("upload of %s succeeded during the outage (uploaded through %d)", walKey(failed.seq), up)
		}
		failed = n.nextPut()
	}
	// Appends go on while the chunk waits for its retries.
	for round := uint64(0); round < 4; round++ {
		appendRange(61+round*10, 70+round*10)
		e.blockUntil(1) // the backoff timer
		e.fake.Advance(maxBackoff)
		if p := n.nextPut(); p.err == nil || p.seq != failed.seq {
			t.Fatalf("attempt during the outage: %s, %v; want %s failing", walKey(p.seq), p.err, walKey(failed.seq))
		}
	}
	fail.Stop()
	e.blockUntil(1)
	e.fake.Advance(maxBackoff)
	uploadedTo(90)
	n.close() // uploads the rest

	rec.mu.Lock()
	bad, attempts := rec.bad, len(rec.attempts[walKey(failed.seq)])
	rec.mu.Unlock()
	if len(bad) > 0 {
		t.Fatalf("chunk bodies were changed under the store: %v", bad)
	}
	if attempts < 6 {
		t.Fatalf("%s was attempted %d times, want the failures and the retry that worked", walKey(failed.seq), attempts)
	}
	got, _ := history(t, e.inner)
	entries := make([]*netsyv1.Entry, 0, len(got))
	for i := uint64(1); i <= uint64(len(got)); i++ {
		entries = append(entries, got[i])
	}
	checkEntries(t, entries, 1, 100, tagOf)
}
