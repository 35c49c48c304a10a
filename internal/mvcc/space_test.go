package mvcc

import "testing"

// InUse counts keys, values and bookkeeping of every version held, so it
// grows with history and compaction gives it back; Total adds nothing
// without spill files.
func TestInUseGrowsWithHistoryAndShrinksWithCompaction(t *testing.T) {
	s := New()
	for rev := int64(1); rev <= 100; rev++ {
		s.Put(rev, []byte("key"), make([]byte, 1000), 0)
	}
	st := s.Stats()
	if want := int64(3 + 100*1000 + 100*VersionOverhead + KeyOverhead); st.InUse() != want {
		t.Fatalf("in use %d, want %d", st.InUse(), want)
	}
	if st.Total() != st.InUse() {
		t.Fatalf("total %d without spill files, in use %d", st.Total(), st.InUse())
	}
	if err := s.Compact(100); err != nil {
		t.Fatal(err)
	}
	// The floor's event keeps the version it replaced (see Compact).
	if got, want := s.Stats().InUse(), int64(3+2*1000+2*VersionOverhead+KeyOverhead); got != want {
		t.Fatalf("in use after compaction %d, want %d", got, want)
	}
}
