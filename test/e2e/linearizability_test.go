//go:build e2e

package e2e

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/netsy-io/netsy/internal/testutil/lincheck"
)

// TestLinearizability records a concurrent history of get, put and
// compare-and-swap on a few keys from several clients and checks it with
// porcupine against a sequential register model.
func TestLinearizability(t *testing.T) {
	s := startServer(t)
	const (
		clients  = 5
		keys     = 3
		duration = 3 * time.Second
	)
	h := lincheck.NewHistory()
	done := make(chan struct{}, clients)
	stopAt := time.Now().Add(duration)
	for c := range clients {
		cli := newClient(t, s)
		go func() {
			defer func() { done <- struct{}{} }()
			rng := rand.New(rand.NewPCG(uint64(c), uint64(time.Now().UnixNano())))
			last := map[string]string{} // this client's last read per key, for cas
			for n := 0; time.Now().Before(stopAt); n++ {
				key := fmt.Sprintf("lin/%d", rng.IntN(keys))
				in := lincheck.Input{Key: key, Value: fmt.Sprintf("c%d-%d", c, n)}
				switch r := rng.IntN(100); {
				case r < 40:
					in.Op = lincheck.Get
				case r < 75:
					in.Op = lincheck.Put
				default:
					in.Op = lincheck.CAS
					in.Old = last[key]
				}
				out, err := h.Run(t.Context(), c, cli, in, 10*time.Second)
				if err == nil && in.Op == lincheck.Get {
					last[key] = out.Value
				}
			}
		}()
	}
	for range clients {
		<-done
	}
	lincheck.Check(t, h.Ops())
}
