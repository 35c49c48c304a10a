package mvcc

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/netsy-io/netsy/proto/netsyv1"
)

// Restore lets go of each decoded version once it holds it, so a restart's
// peak heap is not the store plus the whole decoded snapshot; what the
// store holds is unchanged.
func TestRestoreReleasesEachDecodedVersion(t *testing.T) {
	s, err := Open(Options{SpillDir: filepath.Join(t.TempDir(), "values")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	val := bytes.Repeat([]byte("x"), 300)
	var versions []*netsyv1.KeyVersion
	for i := range 100 {
		versions = append(versions, &netsyv1.KeyVersion{Key: []byte(fmt.Sprintf("k%03d", i)), Value: val,
			CreateRevision: int64(i) + 2, ModRevision: int64(i) + 2, Version: 1})
	}
	if err := s.Restore(101, 0, versions); err != nil {
		t.Fatal(err)
	}
	for i, v := range versions {
		if v != nil {
			t.Fatalf("version %d is still referenced by the caller's slice after Restore", i)
		}
	}
	r, err := s.Range([]byte("k050"), nil, RangeOptions{Rev: 101})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.KVs) != 1 || !bytes.Equal(r.KVs[0].Value, val) || r.KVs[0].ModRevision != 52 {
		t.Fatalf("k050 after restore: %v", r.KVs)
	}
}
