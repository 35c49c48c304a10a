package discovery

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"

	"github.com/netsy-io/netsy/internal/objstore"
)

// MembersKey is the object key of the members file.
const MembersKey = "members.json"

const (
	membersVersion = 1
	// updateAttempts bounds how often Update re-runs fn after losing the
	// precondition. Losing means another Elector wrote in between, which
	// lasts only until s3lect has settled on one; a caller that gets the
	// error retries on its own schedule.
	updateAttempts = 5
	// maxMemberID: member ids are 63-bit so they stay positive in any
	// signed 64-bit representation a client may use.
	maxMemberID = 1<<63 - 1
	// idAttempts bounds Assign's search for an unused id. With a working
	// random source the first draw is free except with probability
	// (members / 2^63); needing this many means the source is broken.
	idAttempts = 1000
)

// Members is the content of members.json.
type Members struct {
	ClusterID string
	// Counter is bumped by every write so no two bodies are equal.
	Counter uint64
	// PrimaryTerm is the highest Primary term ever assigned.
	PrimaryTerm uint64
	// ElectorTerm is the highest Elector (s3lect) term that has written the
	// file; the writer raises it, Update only checks it never falls.
	ElectorTerm uint64
	// IDs maps node id to member id. Entries are never removed or changed.
	IDs map[string]uint64

	// newID draws a candidate member id; nil means crypto/rand. Tests set
	// it to force collisions.
	newID func() uint64
}

// clone returns a deep copy.
func (m Members) clone() Members {
	m.IDs = maps.Clone(m.IDs)
	if m.IDs == nil {
		m.IDs = make(map[string]uint64)
	}
	return m
}

// sameContent reports whether m and o would be the same file apart from
// the write counter.
func (m Members) sameContent(o Members) bool {
	return m.ClusterID == o.ClusterID && m.PrimaryTerm == o.PrimaryTerm &&
		m.ElectorTerm == o.ElectorTerm && maps.Equal(m.IDs, o.IDs)
}

func randomMemberID() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return binary.BigEndian.Uint64(b[:]) >> 1
}

// Assign returns nodeID's member id, allocating a new random one, unique in
// m, if the node has none yet; changed reports an allocation. The caller
// validates nodeID (Update rejects invalid ids before writing). It panics
// if the random source keeps returning used ids, which only a broken
// source does.
func (m *Members) Assign(nodeID string) (memberID uint64, changed bool) {
	if id, ok := m.IDs[nodeID]; ok {
		return id, false
	}
	if m.IDs == nil {
		m.IDs = make(map[string]uint64)
	}
	used := make(map[uint64]bool, len(m.IDs))
	for _, id := range m.IDs {
		used[id] = true
	}
	draw := m.newID
	if draw == nil {
		draw = randomMemberID
	}
	for range idAttempts {
		id := draw() & maxMemberID
		if id != 0 && !used[id] {
			m.IDs[nodeID] = id
			return id, true
		}
	}
	panic("discovery: the member id source keeps returning ids already in use")
}

// validate checks the rules every members.json obeys.
func (m Members) validate() error {
	if err := validateClusterID(m.ClusterID); err != nil {
		return err
	}
	seen := make(map[uint64]string, len(m.IDs))
	for node, id := range m.IDs {
		if err := ValidateNodeID(node); err != nil {
			return err
		}
		if id == 0 || id > maxMemberID {
			return fmt.Errorf("node %s: member id %x is not a non-zero 63-bit value", node, id)
		}
		if other, dup := seen[id]; dup {
			return fmt.Errorf("nodes %s and %s share member id %x", min(node, other), max(node, other), id)
		}
		seen[id] = node
	}
	return nil
}

// checkTransition checks that next may follow prev: what was written once
// stays written.
func checkTransition(prev, next Members) error {
	if next.ClusterID != prev.ClusterID {
		return fmt.Errorf("cluster id may not change (%q to %q)", prev.ClusterID, next.ClusterID)
	}
	if next.PrimaryTerm < prev.PrimaryTerm {
		return fmt.Errorf("primary term may not go back (%d to %d)", prev.PrimaryTerm, next.PrimaryTerm)
	}
	if next.ElectorTerm < prev.ElectorTerm {
		return fmt.Errorf("elector term may not go back (%d to %d)", prev.ElectorTerm, next.ElectorTerm)
	}
	for node, id := range prev.IDs {
		got, ok := next.IDs[node]
		if !ok {
			return fmt.Errorf("member id %x of node %s may not be removed", id, node)
		}
		if got != id {
			return fmt.Errorf("member id of node %s may not change (%x to %x)", node, id, got)
		}
	}
	return next.validate()
}

// membersJSON is the body of members.json. Member ids are hex strings,
// as etcd prints them.
type membersJSON struct {
	Version     int               `json:"version"`
	ClusterID   string            `json:"cluster_id"`
	Counter     uint64            `json:"counter"`
	PrimaryTerm uint64            `json:"primary_term"`
	ElectorTerm uint64            `json:"elector_term"`
	Members     map[string]string `json:"members"`
}

func encodeMembers(m Members) []byte {
	j := membersJSON{
		Version:     membersVersion,
		ClusterID:   m.ClusterID,
		Counter:     m.Counter,
		PrimaryTerm: m.PrimaryTerm,
		ElectorTerm: m.ElectorTerm,
		Members:     make(map[string]string, len(m.IDs)),
	}
	for node, id := range m.IDs {
		j.Members[node] = strconv.FormatUint(id, 16)
	}
	b, err := json.Marshal(j) // map keys are sorted: the body is deterministic
	if err != nil {
		panic(err)
	}
	return b
}

// decodeMembers parses members.json; every failure wraps ErrCorrupt.
// Unknown fields are refused, not ignored: the Elector rewrites the whole
// file, and dropping a field a newer netsy relies on would be a silent loss.
func decodeMembers(body []byte) (Members, error) {
	corrupt := func(why string) error { return fmt.Errorf("%w: %s: %s", ErrCorrupt, MembersKey, why) }
	var j membersJSON
	if err := decodeJSON(body, &j, true); err != nil {
		return Members{}, corrupt(err.Error())
	}
	if j.Version != membersVersion {
		return Members{}, corrupt(fmt.Sprintf("format version %d, this netsy reads %d", j.Version, membersVersion))
	}
	m := Members{
		ClusterID:   j.ClusterID,
		Counter:     j.Counter,
		PrimaryTerm: j.PrimaryTerm,
		ElectorTerm: j.ElectorTerm,
		IDs:         make(map[string]uint64, len(j.Members)),
	}
	for node, hex := range j.Members {
		if len(hex) == 0 || len(hex) > 16 {
			return Members{}, corrupt(fmt.Sprintf("node %s: member id %q is not 1 to 16 hex digits", node, hex))
		}
		id, err := strconv.ParseUint(hex, 16, 64)
		if err != nil {
			return Members{}, corrupt(fmt.Sprintf("node %s: member id %q is not hex", node, hex))
		}
		m.IDs[node] = id
	}
	if err := m.validate(); err != nil {
		return Members{}, corrupt(err.Error())
	}
	return m, nil
}

// MembersFile reads and writes members.json with compare-and-swap. It
// remembers the content and ETag of the last load or write, so an Update
// by the only writer costs one PUT. It is safe for concurrent use; calls
// are serialized, and a call waiting for its turn gives up when its ctx
// ends.
type MembersFile struct {
	s         objstore.Store
	clusterID string
	newID     func() uint64 // see Members.newID

	// turn holds a token while a call runs. A channel rather than a
	// mutex: a call holds it across store calls, and a waiter must be
	// able to give up (and, in tests on testing/synctest, be seen as
	// blocked).
	turn   chan struct{}
	loaded bool    // cur, etag and exists reflect the last load or write
	exists bool    // the file existed at the last load or write
	etag   string  // its ETag then
	cur    Members // its content then
}

// NewMembersFile returns a MembersFile for the cluster clusterID; nothing is
// read until Load or Update.
func NewMembersFile(s objstore.Store, clusterID string) *MembersFile {
	return &MembersFile{s: s, clusterID: clusterID, turn: make(chan struct{}, 1)}
}

// take waits for this caller's turn; the returned func ends it.
func (f *MembersFile) take(ctx context.Context) (func(), error) {
	select {
	case f.turn <- struct{}{}:
		return func() { <-f.turn }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("%s: %w", MembersKey, ctx.Err())
	}
}

// Load reads members.json. If it does not exist, Load returns empty Members
// of this cluster and exists false. A file of another cluster or one that
// cannot be decoded is an error naming the key.
func (f *MembersFile) Load(ctx context.Context) (Members, bool, error) {
	done, err := f.take(ctx)
	if err != nil {
		return Members{}, false, fmt.Errorf("load: %w", err)
	}
	defer done()
	if err := f.loadLocked(ctx); err != nil {
		return Members{}, false, err
	}
	return f.cur.clone(), f.exists, nil
}

func (f *MembersFile) loadLocked(ctx context.Context) error {
	f.loaded = false
	if err := validateClusterID(f.clusterID); err != nil {
		return fmt.Errorf("load %s: %w", MembersKey, err)
	}
	body, etag, err := f.s.Get(ctx, MembersKey)
	if errors.Is(err, objstore.ErrNotFound) {
		f.cur = Members{ClusterID: f.clusterID, IDs: map[string]uint64{}, newID: f.newID}
		f.exists, f.etag, f.loaded = false, "", true
		return nil
	}
	if err != nil {
		return fmt.Errorf("load %s: %w", MembersKey, err)
	}
	m, err := decodeMembers(body)
	if err != nil {
		return fmt.Errorf("load: %w (it is never replaced automatically: restore it from a backup, or fix it by hand)", err)
	}
	if m.ClusterID != f.clusterID {
		return fmt.Errorf("load: %w: %s belongs to cluster %q, but this node was started with --cluster-id %q; "+
			"two clusters must not share a bucket and prefix: fix --cluster-id or the storage location",
			ErrClusterMismatch, MembersKey, m.ClusterID, f.clusterID)
	}
	m.newID = f.newID
	f.cur, f.exists, f.etag, f.loaded = m, true, etag, true
	return nil
}

// Update applies fn to a copy of the current members and writes the
// result with a precondition: PutIfAbsent if the file did not exist,
// PutIfMatch on the ETag it was read with otherwise. Counter is bumped by
// Update; fn must not remove or change a member id, lower a term or change
// the cluster id (Update refuses to write such a result).
//
// Losing the precondition means another writer changed the file: Update
// reloads and runs fn again on the new content, at most a few times, and
// then returns an error wrapping objstore.ErrPreconditionFailed. fn may thus
// run more than once and must only change the Members it is given. An
// error from fn aborts the update and is returned as it is; if fn changes
// nothing, nothing is written and the current content is returned.
//
// An error from the store does not prove the write did not land; the next
// call reloads the file and sees either way.
func (f *MembersFile) Update(ctx context.Context, fn func(*Members) error) (Members, error) {
	done, err := f.take(ctx)
	if err != nil {
		return Members{}, fmt.Errorf("update: %w", err)
	}
	defer done()
	for attempt := 1; ; attempt++ {
		if !f.loaded {
			if err := f.loadLocked(ctx); err != nil {
				return Members{}, fmt.Errorf("update: %w", err)
			}
		}
		next := f.cur.clone()
		if err := fn(&next); err != nil {
			return Members{}, err
		}
		next.newID = f.newID
		if err := checkTransition(f.cur, next); err != nil {
			return Members{}, fmt.Errorf("update %s: refused: %w", MembersKey, err)
		}
		if next.sameContent(f.cur) {
			return f.cur.clone(), nil
		}
		next.Counter = f.cur.Counter + 1
		body := encodeMembers(next)
		var etag string
		var err error
		if f.exists {
			etag, err = f.s.PutIfMatch(ctx, MembersKey, body, f.etag)
		} else {
			etag, err = f.s.PutIfAbsent(ctx, MembersKey, body)
		}
		if err == nil {
			f.cur, f.exists, f.etag = next, true, etag
			return next.clone(), nil
		}
		f.loaded = false
		if !errors.Is(err, objstore.ErrPreconditionFailed) {
			return Members{}, fmt.Errorf("update %s: %w", MembersKey, err)
		}
		if attempt == updateAttempts {
			return Members{}, fmt.Errorf("update %s: lost the precondition %d times in a row; is another Elector writing? %w",
				MembersKey, attempt, err)
		}
	}
}

// NextPrimaryTerm raises PrimaryTerm by one in members.json and returns the
// new value. The Elector calls it, and waits for it to succeed, before it
// announces a new Primary, so no two Primaries are ever given the same
// term, even by two Electors.
func (f *MembersFile) NextPrimaryTerm(ctx context.Context) (uint64, error) {
	m, err := f.Update(ctx, func(m *Members) error {
		m.PrimaryTerm++
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("next primary term: %w", err)
	}
	return m.PrimaryTerm, nil
}
