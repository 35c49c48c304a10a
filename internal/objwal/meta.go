package objwal

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/netsy-io/netsy/internal/vfs"
)

const (
	metaFileName = "objwal.json"
	metaVersion  = 1
	// maxKnownSnapshots bounds the snapshot list kept in the metadata file.
	maxKnownSnapshots = 64
)

// metaState is what this node knows about its agreement with the bucket.
// It is a checkpoint: Seq and Index promise that the local log holds the
// bucket's history, durably, through Index, and that the chunks after Seq
// hold every entry after Index. Open starts listing there instead of at the
// beginning, and never truncates the local log at or below Index. The
// writer moves it along the chunks it uploaded (checkpoint); a follower to
// a point its local snapshot covers (advanceFollowerCheckpoint).
type metaState struct {
	Version int    `json:"version"`
	Seq     uint64 `json:"seq"`
	Index   uint64 `json:"index"`
	// Snapshots records the wal_seq of bucket snapshots whose header this
	// node has seen, so garbage collection need not download one to learn
	// which chunks it makes obsolete.
	Snapshots []snapRef `json:"snapshots,omitempty"`
}

type snapRef struct {
	Rev    int64  `json:"rev"`
	WalSeq uint64 `json:"wal_seq"`
}

func (m *metaState) clone() *metaState {
	c := *m
	c.Snapshots = slices.Clone(m.Snapshots)
	return &c
}

// knownWalSeq returns the wal_seq of the snapshot at rev, if known.
func (m *metaState) knownWalSeq(rev int64) (uint64, bool) {
	for _, s := range m.Snapshots {
		if s.Rev == rev {
			return s.WalSeq, true
		}
	}
	return 0, false
}

func (m *metaState) addSnapshot(rev int64, walSeq uint64) {
	if _, ok := m.knownWalSeq(rev); ok {
		return
	}
	m.Snapshots = append(m.Snapshots, snapRef{Rev: rev, WalSeq: walSeq})
	slices.SortFunc(m.Snapshots, func(a, b snapRef) int { return cmp.Compare(a.Rev, b.Rev) })
	if n := len(m.Snapshots); n > maxKnownSnapshots {
		m.Snapshots = slices.Delete(m.Snapshots, 0, n-maxKnownSnapshots)
	}
}

// readMeta and writeMeta are readMetaFS and writeMetaFS on the real
// disk, for tests that look at a node's file from outside.
func readMeta(path string) (*metaState, error) { return readMetaFS(vfs.OS(), path) }

func writeMeta(path string, m *metaState) error { return writeMetaFS(vfs.OS(), path, m) }

// readMetaFS returns nil, nil when the file does not exist.
func readMetaFS(fsys vfs.FS, path string) (*metaState, error) {
	b, err := fsys.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var m metaState
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("metadata file %s is damaged (%v); remove the wal directory to restore from object storage", path, err)
	}
	if m.Version != metaVersion {
		return nil, fmt.Errorf("metadata file %s has version %d, this build reads %d", path, m.Version, metaVersion)
	}
	return &m, nil
}

// writeMetaFS replaces the file atomically and durably: a crash leaves the
// old checkpoint or the new one, never a mix, and a checkpoint that
// vanished after a power cut could only send Open back to an older one.
func writeMetaFS(fsys vfs.FS, path string, m *metaState) error {
	m.Version = metaVersion
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := fsys.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fsys.Rename(tmp, path)
	}
	if err != nil {
		fsys.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := fsys.SyncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("sync directory of %s: %w", path, err)
	}
	return nil
}
