package peer

import (
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Reason names why a peer refused a call. It crosses the wire in an
// errdetails.ErrorInfo of domain ErrorDomain, so a caller decides from it
// and the gRPC code, never from the message text (which is for people and
// may change).
type Reason string

// ErrorDomain is the ErrorInfo domain of every Reason.
const ErrorDomain = "peer.netsy.io"

const (
	// ReasonNotElector: the node called is not the Elector (it never was,
	// it resigned, or its lock ran out). The caller finds the Elector
	// again; it is not the caller's fault.
	ReasonNotElector Reason = "NOT_ELECTOR"
	// ReasonNotLoaded: the Elector has not finished loading members.json
	// and nodes/, so it has no authority yet. Retry.
	ReasonNotLoaded Reason = "ELECTOR_NOT_LOADED"
	// ReasonNotRegistered: the Elector does not know the calling node
	// (a new Elector, or the node was deregistered). Register again.
	ReasonNotRegistered Reason = "NOT_REGISTERED"
	// ReasonUnknownNode: the node named in the request is not registered.
	ReasonUnknownNode Reason = "UNKNOWN_NODE"
	// ReasonNotPrimary: the node called is not the Active Primary.
	ReasonNotPrimary Reason = "NOT_PRIMARY"
	// ReasonElectingSuccessor: the Elector refuses the heartbeat of the
	// Primary it is replacing (an election round that may elect its
	// successor is running): it vouches for no lease of the caller's, so
	// the caller's lease is not renewed. Not a fault of the Elector's.
	ReasonElectingSuccessor Reason = "ELECTING_SUCCESSOR"
	// ReasonNotDurable: the node to be deregistered is not answering and
	// object storage may lack entries it acknowledged (or either is
	// unknown), so removing it could lose acknowledged writes. Wait, or
	// deregister with force.
	ReasonNotDurable Reason = "NOT_DURABLE"
	// ReasonDuplicateRequest: the Primary refused a forwarded write whose
	// request id it already holds, pending or committed (its first
	// sending); it did not apply it again. The sender learns the outcome
	// from the log.
	ReasonDuplicateRequest Reason = "DUPLICATE_REQUEST"
	// ReasonPrimaryStarting: the node called is the Primary at the term
	// asked for but still Starting (its preflight: claiming object
	// storage, catching up); it turns Active or fails shortly. The
	// caller asks again soon rather than backing off as from a fault.
	ReasonPrimaryStarting Reason = "PRIMARY_STARTING"
)

// Error is a status error with code c carrying reason r.
func Error(c codes.Code, r Reason, msg string) error {
	return (&CodedError{C: c, R: r, Msg: msg}).GRPCStatus().Err()
}

// ReasonOf returns the Reason an error carries, or "" if it carries none.
// It looks through wrapping (errors.As on the gRPC status).
func ReasonOf(err error) Reason {
	if err == nil {
		return ""
	}
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) {
		return ""
	}
	for _, d := range se.GRPCStatus().Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == ErrorDomain {
			return Reason(info.Reason)
		}
	}
	return ""
}

// Coded is an error that knows its wire form: a local call returns it as
// is, and a server turns it into Error(Code(), Reason(), Error()) before
// it crosses the wire, so local and remote callers test it the same way
// (with ReasonOf, or errors.Is against the local sentinel before it was
// sent).
type Coded interface {
	error
	Code() codes.Code
	Reason() Reason
}

// CodedError is a sentinel-friendly Coded error.
type CodedError struct {
	C   codes.Code
	R   Reason
	Msg string
}

func (e *CodedError) Error() string    { return e.Msg }
func (e *CodedError) Code() codes.Code { return e.C }
func (e *CodedError) Reason() Reason   { return e.R }

// GRPCStatus makes a CodedError its own wire form: gRPC servers send it
// as the code with the ErrorInfo, and status.Code reads the code locally.
func (e *CodedError) GRPCStatus() *status.Status {
	st := status.New(e.C, e.Msg)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: string(e.R), Domain: ErrorDomain}); err == nil {
		st = d
	}
	return st
}

var _ Coded = (*CodedError)(nil)
