//go:build e2e

package e2e

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/netsy-io/netsy/internal/testutil/lincheck"
)

// linClient draws one client's calls on keys prefix/0 .. prefix/keys-1
// (keys even): get, put, cas, delete on one key, and a transaction that puts
// or reads both keys of a fixed pair (2i, 2i+1), so the check stays
// partitioned by pair. It keeps the client's last read of each key, the
// expected value of its next cas there.
type linClient struct {
	rng    *rand.Rand
	prefix string
	keys   int
	last   map[string]string
}

func newLinClient(seed uint64, prefix string, keys int) *linClient {
	return &linClient{rng: rand.New(rand.NewPCG(seed, 7)), prefix: prefix, keys: keys, last: map[string]string{}}
}

// next returns the next call; value is unique to it.
func (c *linClient) next(value string) lincheck.Input {
	k := c.rng.IntN(c.keys)
	in := lincheck.Input{Key: fmt.Sprintf("%s/%d", c.prefix, k), Value: value}
	switch r := c.rng.IntN(100); {
	case r < 30:
		in.Op = lincheck.Get
	case r < 50:
		in.Op = lincheck.Put
	case r < 65:
		in.Op = lincheck.CAS
		in.Old = c.last[in.Key]
	case r < 75:
		in.Op = lincheck.Delete
	default:
		in.Op = lincheck.GetPair
		if r < 87 {
			in.Op = lincheck.PutPair
		}
		in.Key = fmt.Sprintf("%s/%d", c.prefix, k&^1)
		in.Key2 = fmt.Sprintf("%s/%d", c.prefix, k|1)
		in.Value2 = value
	}
	return in
}

// saw records what a successful call read.
func (c *linClient) saw(in lincheck.Input, out lincheck.Output) {
	switch in.Op {
	case lincheck.Get:
		c.last[in.Key] = out.Value
	case lincheck.GetPair:
		c.last[in.Key], c.last[in.Key2] = out.Value, out.Value2
	}
}

// TestLinearizability records a concurrent history of get, put, cas,
// delete and two-key transactions on a few keys from several clients and
// checks it with porcupine against a sequential model (lincheck).
func TestLinearizability(t *testing.T) {
	s := startServer(t)
	const (
		clients  = 5
		keys     = 4
		duration = 3 * time.Second
	)
	h := lincheck.NewHistory()
	done := make(chan struct{}, clients)
	stopAt := time.Now().Add(duration)
	for c := range clients {
		cli := newClient(t, s)
		lc := newLinClient(uint64(time.Now().UnixNano())+uint64(c), "lin", keys)
		go func() {
			defer func() { done <- struct{}{} }()
			for n := 0; time.Now().Before(stopAt); n++ {
				in := lc.next(fmt.Sprintf("c%d-%d", c, n))
				if out, err := h.Run(t.Context(), c, cli, in, 10*time.Second); err == nil {
					lc.saw(in, out)
				}
			}
		}()
	}
	for range clients {
		<-done
	}
	lincheck.Check(t, h.Ops())
}
