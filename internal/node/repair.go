package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/netsy-io/netsy/internal/wal"
)

// refuseDamagedLog is the start-up error of a node that acknowledged
// writes on its local fsync alone and found its local log damaged: the
// entries after the damage may exist nowhere else, so the operator decides.
func refuseDamagedLog(dataDir string, d *wal.DamageError, err error) error {
	return fmt.Errorf("%w. This node acknowledges writes once they are fsync'd locally (--quorum -1 with no other node), "+
		"so the entries after offset %d may have been acknowledged and exist nowhere else, and it does not cut them off by itself. "+
		"Keep a copy of %s, then run `netsyctl repair %s`: it cuts the log there and prints the revisions it drops "+
		"(those object storage holds come back when the node starts)",
		err, d.Offset, dataDir, dataDir)
}

// RepairLog cuts the local log of the stopped node whose data directory
// is dataDir at its first damaged record, with everything after it (see
// wal.Repair), and reports what it dropped. It takes the directory's lock
// first, so a running node is never repaired under it.
func RepairLog(dataDir string) (*wal.Report, error) {
	walDir := filepath.Join(dataDir, "wal")
	if st, err := os.Stat(walDir); err != nil || !st.IsDir() {
		if err == nil {
			err = errors.New("not a directory")
		}
		return nil, fmt.Errorf("%s holds no local log (%s): %w", dataDir, walDir, err)
	}
	lock, err := lockDir(dataDir)
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	return wal.Repair(walDir, nil)
}
