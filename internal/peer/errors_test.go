package peer

import (
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestReasonCrossesTheWireForm(t *testing.T) {
	local := &CodedError{C: codes.Unavailable, R: ReasonNotLoaded, Msg: "elector: still loading"}
	wrapped := fmt.Errorf("heartbeat: %w", local)
	if got := ReasonOf(wrapped); got != ReasonNotLoaded {
		t.Fatalf("ReasonOf(local, wrapped) = %q, want %q", got, ReasonNotLoaded)
	}
	if status.Code(local) != codes.Unavailable {
		t.Fatalf("status.Code(local) = %v", status.Code(local))
	}
	// What a client receives is a status rebuilt from its proto form.
	wire := status.FromProto(status.Convert(local).Proto()).Err()
	if got := ReasonOf(wire); got != ReasonNotLoaded {
		t.Fatalf("ReasonOf(wire) = %q, want %q", got, ReasonNotLoaded)
	}
	if got := ReasonOf(Error(codes.FailedPrecondition, ReasonNotElector, "not the Elector")); got != ReasonNotElector {
		t.Fatalf("ReasonOf(Error) = %q", got)
	}
	for _, err := range []error{nil, fmt.Errorf("plain"), status.Error(codes.Unavailable, "not the Elector")} {
		if got := ReasonOf(err); got != "" {
			t.Fatalf("ReasonOf(%v) = %q, want none (text never counts)", err, got)
		}
	}
}
