package mvcc

import "errors"

// Errors carry etcd's strings: clients match them.
var (
	ErrCompacted = errors.New("mvcc: required revision has been compacted")
	ErrFutureRev = errors.New("mvcc: required revision is a future revision")
	// ErrClosed is Err after Close: spilled values are gone.
	ErrClosed = errors.New("mvcc: store closed")
)
