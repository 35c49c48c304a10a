package datafile

import (
	"errors"
	"fmt"
)

var (
	// ErrCorrupt matches every CorruptError.
	ErrCorrupt = errors.New("corrupt data file")
	// ErrTornTail matches every TornTailError.
	ErrTornTail = errors.New("torn tail")
	// ErrUnsupportedVersion means the file was written by a newer format.
	ErrUnsupportedVersion = errors.New("unsupported data file version")
	// ErrUnsupportedCompression means the header names a compression this
	// build cannot read (zstd is reserved but not implemented yet).
	ErrUnsupportedCompression = errors.New("unsupported compression")
	// ErrUnsupportedFlags means the header sets flags this build does not know.
	ErrUnsupportedFlags = errors.New("unsupported header flags")
)

// CorruptError is damage that must not be repaired automatically: a bad
// header, a bad record followed by valid data, or any damage in a sealed
// file. Offset is where the damaged structure starts.
type CorruptError struct {
	Name   string
	Offset int64
	Reason string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("data file %s: corrupt at offset %d: %s", e.Name, e.Offset, e.Reason)
}

// Is lets callers test errors.Is(err, ErrCorrupt).
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// TornTailError is the damaged end of an unsealed file, as left by a crash
// during an append: every record before Offset is valid and nothing valid
// follows it. Only the owner of the file (the WAL, for its newest segment)
// may decide to truncate at Offset; for anyone else it is still an error.
type TornTailError struct {
	Name   string
	Offset int64
	Reason string
}

func (e *TornTailError) Error() string {
	return fmt.Sprintf("data file %s: torn tail at offset %d: %s", e.Name, e.Offset, e.Reason)
}

// Is lets callers test errors.Is(err, ErrTornTail).
func (e *TornTailError) Is(target error) bool { return target == ErrTornTail }

func corruptf(name string, off int64, format string, args ...any) error {
	return &CorruptError{Name: name, Offset: off, Reason: fmt.Sprintf(format, args...)}
}
