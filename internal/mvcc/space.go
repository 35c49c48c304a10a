package mvcc

// The store's bookkeeping beyond key and value bytes, measured on amd64
// with Go 1.25 (heap growth over 500k puts of 22-byte keys and 32-byte
// values, after a collection): about 140 bytes per version of an existing
// key (the KeyValue, its history and revision-log slots) and about 110
// more per new key (the index node, the map entry, the key's history
// header). Rounded up, they make InUse an estimate of the heap the data
// really takes, not of its bytes on the wire.
const (
	VersionOverhead = 144
	KeyOverhead     = 112
)

// InUse is the space the store's data takes: every key and every version's
// value (in memory or spilled), plus the bookkeeping per version and per
// key. Compaction lowers it; nothing else the store does outside a write
// does. This is the measure of the space quota and of etcd's
// db_total_size_in_use_in_bytes.
func (st Stats) InUse() int64 {
	return st.Bytes + st.Versions*VersionOverhead + st.IndexKeys*KeyOverhead
}

// Total is InUse plus the spill-file bytes of values that compaction or
// rollback dropped and a spill rewrite has not reclaimed yet: everything
// the store holds, as etcd's db_total_size_in_bytes counts free pages.
func (st Stats) Total() int64 { return st.InUse() + st.SpillGarbage }
