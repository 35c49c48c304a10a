package node

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// identity is the node's durable etcd identity, created on first start.
type identity struct {
	ClusterID uint64 `json:"cluster_id"`
	MemberID  uint64 `json:"member_id"`
}

func randomID() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	id := binary.BigEndian.Uint64(b[:]) >> 1
	if id == 0 {
		id = 1
	}
	return id
}

func loadIdentity(dir string) (identity, error) {
	path := filepath.Join(dir, "identity.json")
	b, err := os.ReadFile(path)
	if err == nil {
		var id identity
		if err := json.Unmarshal(b, &id); err != nil || id.ClusterID == 0 || id.MemberID == 0 {
			return identity{}, fmt.Errorf("identity file %s is corrupt (remove it only if the data directory is empty): %v", path, err)
		}
		return id, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return identity{}, fmt.Errorf("read identity: %w", err)
	}
	id := identity{ClusterID: randomID(), MemberID: randomID()}
	b, _ = json.Marshal(id)
	if err := writeFileSync(path, b); err != nil {
		return identity{}, fmt.Errorf("write identity: %w", err)
	}
	return id, nil
}

// writeFileSync writes a file atomically and durably.
func writeFileSync(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// lockDir takes an exclusive lock on the data directory so two processes
// can never write the same log.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("data directory %s is in use by another netsy process: %w", dir, err)
	}
	return f, nil
}
