package primary

import (
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/netsy-io/netsy/internal/clock"
)

// hostClock models a real host's clock over a Fake, reading for reading:
// Now returns real time.Time values that carry Go's monotonic reading
// (moved by Advance only) and a wall reading (moved by Advance and by
// StepWall), as time.Now does on a host whose clock NTP or an operator
// stepped. So code that keeps a Now reading as a time.Time measures
// correctly, and code that turns it into UnixNano (or Unix, or Round(0))
// sees the step, exactly as in production. Timers are the Fake's.
type hostClock struct {
	*clock.Fake
	base  time.Time // a real reading with a monotonic part
	epoch time.Time // the Fake's Now when base was taken
}

func newHostClock(t *testing.T, f *clock.Fake) *hostClock {
	t.Helper()
	c := &hostClock{Fake: f, base: clock.Real().Now(), epoch: f.Now()}
	// The model rests on time.Time's layout (a wall word, then the
	// monotonic reading); make sure it still holds before trusting it.
	r := withWall(c.base, -30*time.Second)
	if r.UnixNano() != c.base.UnixNano()-int64(30*time.Second) || r.Sub(c.base) != 0 || !strings.Contains(r.String(), "m=") {
		t.Fatalf("hostClock cannot model a wall step on this Go version: %v from %v", r, c.base)
	}
	return c
}

// withWall is t with its wall reading moved by d and its monotonic reading
// kept.
func withWall(t time.Time, d time.Duration) time.Time {
	type layout struct {
		wall uint64
		ext  int64 // the monotonic reading, when the wall word says so
		loc  *time.Location
	}
	r := t.Add(d)
	(*layout)(unsafe.Pointer(&r)).ext = (*layout)(unsafe.Pointer(&t)).ext
	return r
}

func (c *hostClock) Now() time.Time {
	mono := c.Fake.Now().Sub(c.epoch)
	return withWall(c.base.Add(mono), c.Fake.Wall().Sub(c.Fake.Now()))
}

func (c *hostClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

func (c *hostClock) Wall() time.Time { return c.Now().Round(0) }
