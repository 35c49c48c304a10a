package objwal

import (
	"errors"
	"fmt"
	"testing"

	"github.com/netsy-io/netsy/internal/objstore"
	"github.com/netsy-io/netsy/internal/objstore/faulty"
)

// A bucket that is missing or refuses the credentials will not heal by
// retrying: Open must fail on the first answer, naming the cause, instead
// of backing off for its full retry budget.
func TestOpenFailsAtOnceOnMisconfiguredStore(t *testing.T) {
	e := newEnv(t)
	n := e.node("", ModeSync, nil)
	cause := fmt.Errorf("%w: credentials rejected: InvalidAccessKeyId", objstore.ErrMisconfigured)
	n.store.Inject(faulty.Rule{Ops: faulty.All, Err: cause})
	_, err := n.tryOpen()
	if !errors.Is(err, objstore.ErrMisconfigured) {
		t.Fatalf("open err = %v, want ErrMisconfigured", err)
	}
	if calls := n.store.Calls(faulty.All); calls != 1 {
		t.Fatalf("open made %d store calls, want 1 (no retries)", calls)
	}
}
