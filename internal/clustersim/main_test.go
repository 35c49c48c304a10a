package clustersim

import (
	"flag"
	"math/rand/v2"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	flagSeed  = flag.Uint64("clustersim.seed", 0, "run only this chaos seed (0: all), with a trace on failure")
	flagTrace = flag.Bool("clustersim.trace", false, "print the trace of every seed run and named scenario")
)

// uniform draws from [lo, hi).
func uniform(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}

func joinLines(lines []string) string {
	out := ""
	for _, l := range lines {
		out += l + "\n"
	}
	return out
}
