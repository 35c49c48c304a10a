package s3lect

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/objstore"
)

// Key is the lock object's key in the bucket.
const Key = "leader/elector.json"

// Defaults for Config fields left zero.
const (
	DefaultLease = 15 * time.Second
	DefaultRenew = 5 * time.Second
	DefaultPoll  = time.Second
)

// HolderFraction is the part of a Lease, counted on the holder's own clock
// from the moment it sent its last successful write, during which the holder
// may act. An observer waits a whole Lease on its own clock, so the holder
// stops first as long as the observer's clock runs at most 1/HolderFraction
// (1.25) times as fast as the holder's.
const HolderFraction = 0.8

// ErrClosed is returned by Resign after Close.
var ErrClosed = errors.New("s3lect: election closed")

// Config configures an Election.
type Config struct {
	Store objstore.Store
	// NodeID is written as holder_id; required.
	NodeID string
	// PeerAddr is written as holder_addr, for nodes that want to reach the
	// Elector.
	PeerAddr string
	// Lease is how long a lock that does not change stays live for an
	// observer (default 15 s).
	Lease time.Duration
	// Renew is how often the holder rewrites the lock (default 5 s); at
	// most Lease/2.
	Renew time.Duration
	// Poll is how often a node without fresh evidence of a live holder
	// reads the lock (default 1 s).
	Poll time.Duration
	// Observer nodes follow the lock but never acquire it (netsyctl, tests).
	Observer bool
	// MinTerm, if set, returns the highest Elector term this node has seen
	// anywhere (for example in cluster state); a new lock never gets a term
	// at or below it. It is called from the election's goroutine and must
	// not block.
	MinTerm func() uint64
	Clock   clock.Clock
	// Logger is named by the caller (the node passes logger.Named("s3lect")).
	Logger hclog.Logger
}

// setDefaults fills zero fields and validates the result.
func (c *Config) setDefaults() error {
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.Renew == 0 {
		c.Renew = DefaultRenew
	}
	if c.Poll == 0 {
		c.Poll = DefaultPoll
	}
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	return c.Validate()
}

// Validate reports the first field that is missing or out of range. Zero
// durations are errors here; New fills them with the defaults first.
func (c Config) Validate() error {
	switch {
	case c.Store == nil:
		return errors.New("s3lect: Config.Store is nil")
	case c.NodeID == "":
		return errors.New("s3lect: Config.NodeID is empty")
	case c.Lease <= 0:
		return fmt.Errorf("s3lect: Config.Lease %v is not positive", c.Lease)
	case c.Renew <= 0 || c.Renew > c.Lease/2:
		return fmt.Errorf("s3lect: Config.Renew %v must be positive and at most Lease/2 (%v)", c.Renew, c.Lease/2)
	case c.Poll <= 0:
		return fmt.Errorf("s3lect: Config.Poll %v is not positive", c.Poll)
	}
	return nil
}

// Holder is what a node knows of the lock: who holds it and at which write.
type Holder struct {
	NodeID   string
	PeerAddr string
	// Term grows by one with every acquisition; renewals keep it.
	Term uint64
	// Counter grows with every write of the lock, by anyone.
	Counter uint64
	// Released means the holder resigned: nobody is Elector until the next
	// acquisition.
	Released bool
	// LeaseMillis is the holder's Lease in milliseconds.
	LeaseMillis int64
}

// Leadership is one acquisition of the lock by this node.
type Leadership struct {
	Term uint64
	// Ctx is cancelled the moment this node may no longer act as Elector:
	// its validity ran out, someone else wrote the lock, it resigned, or
	// the Election was closed. Check it before every action.
	Ctx context.Context

	v *validity
}

// Valid reports whether this node may act as Elector at this instant: Ctx
// is live and, by this node's clock, the validity of its last successful
// write has not run out. Ctx alone lags when the process was stopped
// (SIGSTOP, a long GC or a starved VM): on resume, other goroutines may
// run before the election's own notices the validity is gone. Check Valid
// right before an action another node relies on, such as answering a
// heartbeat (which renews a Primary's lease).
func (l Leadership) Valid() bool {
	if l.Ctx == nil || l.Ctx.Err() != nil {
		return false
	}
	return l.v == nil || l.v.valid()
}

// validity is one leadership's deadline, kept current by the election's
// goroutine (renewals move it) and read by the Elector's.
type validity struct {
	clk   clock.Clock
	mu    sync.Mutex
	until time.Time
}

func (v *validity) set(t time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.until = t
}

func (v *validity) valid() bool {
	v.mu.Lock()
	until := v.until
	v.mu.Unlock()
	return v.clk.Now().Before(until)
}
