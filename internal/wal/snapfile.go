package wal

import (
	"fmt"
	"path/filepath"

	"github.com/netsy-io/netsy/internal/vfs"
)

// OpenSnapshot opens the local snapshot file saved for index, as it is on
// disk, so it can be copied elsewhere (uploaded) without being decoded and
// re-encoded in memory. The caller closes the file; it stays readable even
// if a later SaveSnapshot prunes it meanwhile.
func (w *WAL) OpenSnapshot(index uint64) (f vfs.File, size int64, err error) {
	w.snapMu.Lock()
	defer w.snapMu.Unlock()
	path := filepath.Join(w.snapDir, snapName(index))
	f, err = w.fs.Open(path)
	if err != nil {
		return nil, 0, fmt.Errorf("open snapshot %d: %w", index, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("open snapshot %d: %w", index, err)
	}
	return f, st.Size(), nil
}
