package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/vfs"
)

// dataDirCheckInterval is how often a running node checks that its data
// directory is still the one it opened.
const dataDirCheckInterval = time.Second

// ErrDataDirGone is the local log's permanent failure when the data
// directory was deleted or replaced under the running process.
var ErrDataDirGone = errors.New("the data directory was deleted or replaced under the running node")

// dataDirWatch notices a data directory deleted (rm -rf) or replaced
// under the running node. Open files keep working after their directory
// entries are gone, and fsync on them succeeds, so without it the node
// would go on acknowledging writes whose only local copy no restart can
// find. It compares the lock file the node holds with the one at
// <data-dir>/LOCK (same file, not only the same name) and checks that
// <data-dir>/wal still exists, on the injected clock.
type dataDirWatch struct {
	dir  string
	lock *os.File
	fs   vfs.FS // holds <data-dir>/wal
	clk  clock.Clock
	// lost is called once, with why, when the directory is gone; ctx ends
	// when the watch is stopped.
	lost func(ctx context.Context, err error)

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// check returns why the data directory is not the one the node opened,
// or nil.
func (w *dataDirWatch) check() error {
	held, err := w.lock.Stat()
	if err != nil {
		return fmt.Errorf("%w: stat the held lock file: %v", ErrDataDirGone, err)
	}
	if st, ok := held.Sys().(*syscall.Stat_t); ok && st.Nlink == 0 {
		// The file this process locked has no name left (a new file at
		// the same path may even reuse its inode number).
		return fmt.Errorf("%w: the lock file this process holds was deleted", ErrDataDirGone)
	}
	lockPath := filepath.Join(w.dir, "LOCK")
	now, err := os.Stat(lockPath)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrDataDirGone, lockPath, err)
	}
	if !os.SameFile(held, now) {
		return fmt.Errorf("%w: %s is another file than the one this process locked", ErrDataDirGone, lockPath)
	}
	walDir := filepath.Join(w.dir, "wal")
	if _, err := w.fs.Stat(walDir); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrDataDirGone, walDir, err)
	}
	return nil
}

// start checks every dataDirCheckInterval until the directory is gone
// (then calls lost once and stops) or stop, which also ends what lost
// does (a Primary's step-down on a node that is shutting down anyway).
func (w *dataDirWatch) start() {
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	t := w.clk.NewTicker(dataDirCheckInterval)
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C():
			}
			if err := w.check(); err != nil {
				w.lost(ctx, err)
				return
			}
		}
	}()
}

// stop ends the checks and waits for them.
func (w *dataDirWatch) stop() {
	if w.cancel != nil {
		w.cancel()
	}
	w.wg.Wait()
}

// dataDirLost is what a node does once its data directory is gone: its
// local log has failed for good, like a failed fsync. The engine refuses
// every write and Follow from now on (no acknowledgement, no receipt) and
// /healthz says why; the roles report Degraded, and an Active Primary
// steps down (draining to object storage what it can) so that the
// Elector elects another node instead of waiting on one that cannot
// write. The node keeps serving serializable reads and its HTTP port;
// restart it on a data directory that exists.
func dataDirLost(ctx context.Context, log hclog.Logger, fail func(error), stepDown func(context.Context) error, clk clock.Clock, err error) {
	log.Error("DATA DIRECTORY LOST: refusing writes and acknowledgements; an Active Primary steps down; restart the node", "error", err)
	fail(err)
	ctx, cancel := clock.WithTimeout(ctx, clk, leaveTimeout)
	defer cancel()
	if serr := stepDown(ctx); serr != nil {
		log.Warn("stepping down after the data directory was lost", "error", serr)
	}
}
