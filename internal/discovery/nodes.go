package discovery

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/netsy-io/netsy/internal/objstore"
)

// NodesPrefix is the key prefix of the registration files.
const NodesPrefix = "nodes/"

const (
	nodeSuffix = ".json"
	// MaxNodeIDLen is the longest node id in bytes. It keeps the id usable
	// as a DNS label, a metric label and one object-key segment.
	MaxNodeIDLen = 63
	// registrationVersion is the format version of nodes/{id}.json.
	registrationVersion = 1
	// registerAttempts bounds Register's create/read loop, which only
	// repeats while the file is deleted and recreated under it.
	registerAttempts = 3
)

var (
	// ErrInvalidNodeID means a node id breaks the rules of ValidateNodeID.
	ErrInvalidNodeID = errors.New("invalid node id")
	// ErrConflict means a registration file for this node id already holds
	// other addresses: another process uses the id, or the node moved.
	ErrConflict = errors.New("conflicting node registration")
	// ErrClusterMismatch means an object in the bucket belongs to a cluster
	// with another id than the one this node was started with.
	ErrClusterMismatch = errors.New("cluster id mismatch")
	// ErrCorrupt means an object owned by this package cannot be decoded or
	// breaks its own rules. It is never repaired silently.
	ErrCorrupt = errors.New("corrupt discovery object")
)

// Registration is what a node advertises about itself in nodes/{id}.json.
type Registration struct {
	NodeID     string
	ClusterID  string
	PeerAddr   string
	ClientURLs []string
	HTTPAddr   string
	// Name is the node's etcd member name (--name); empty means NodeID.
	// A node may change it at the same addresses (see Register).
	Name string
	// RegisteredAt is informational (written if non-zero, never compared);
	// the caller fills it from its clock.
	RegisteredAt time.Time
}

// sameAddresses reports whether two registrations advertise the same node
// at the same place; RegisteredAt does not count.
func (r Registration) sameAddresses(o Registration) bool {
	return r.NodeID == o.NodeID && r.ClusterID == o.ClusterID && r.PeerAddr == o.PeerAddr &&
		slices.Equal(r.ClientURLs, o.ClientURLs) && r.HTTPAddr == o.HTTPAddr
}

// MemberName is the etcd member name: Name, else the node id.
func (r Registration) MemberName() string {
	if r.Name != "" {
		return r.Name
	}
	return r.NodeID
}

// addrs renders the advertised addresses for error messages.
func (r Registration) addrs() string {
	return fmt.Sprintf("peer %q, client urls %q, http %q", r.PeerAddr, r.ClientURLs, r.HTTPAddr)
}

// NodeKey is the object key of nodeID's registration file.
func NodeKey(nodeID string) string { return NodesPrefix + nodeID + nodeSuffix }

// ValidateNodeID reports whether id can name a node: 1 to MaxNodeIDLen
// bytes of ASCII letters, digits, '.', '-' and '_', starting with a letter
// or digit (so it is one safe object-key segment, and "netsyctl deregister
// ID" never reads it as a flag).
func ValidateNodeID(id string) error {
	bad := func(why string) error { return fmt.Errorf("%w %q: %s", ErrInvalidNodeID, id, why) }
	if id == "" {
		return fmt.Errorf("%w: empty (set --node-id)", ErrInvalidNodeID)
	}
	if len(id) > MaxNodeIDLen {
		return bad(fmt.Sprintf("longer than %d bytes", MaxNodeIDLen))
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		switch {
		case i == 0 && !alnum:
			return bad("must start with a letter or digit")
		case !alnum && c != '.' && c != '-' && c != '_':
			return bad(fmt.Sprintf("character %q at byte %d is not allowed (use letters, digits, '.', '-', '_')", c, i))
		}
	}
	return nil
}

func validateClusterID(id string) error {
	if id == "" {
		return errors.New("empty cluster id (set --cluster-id)")
	}
	return nil
}

func (r Registration) validate() error {
	if err := ValidateNodeID(r.NodeID); err != nil {
		return err
	}
	if err := validateClusterID(r.ClusterID); err != nil {
		return fmt.Errorf("node %s: %w", r.NodeID, err)
	}
	if r.PeerAddr == "" {
		return fmt.Errorf("node %s: empty peer address", r.NodeID)
	}
	return nil
}

// registrationJSON is the body of nodes/{id}.json.
type registrationJSON struct {
	Version      int      `json:"version"`
	NodeID       string   `json:"node_id"`
	ClusterID    string   `json:"cluster_id"`
	PeerAddr     string   `json:"peer_addr"`
	ClientURLs   []string `json:"client_urls"`
	HTTPAddr     string   `json:"http_addr"`
	Name         string   `json:"name,omitempty"`
	RegisteredAt string   `json:"registered_at,omitempty"`
}

func encodeRegistration(r Registration) []byte {
	j := registrationJSON{
		Version:    registrationVersion,
		NodeID:     r.NodeID,
		ClusterID:  r.ClusterID,
		PeerAddr:   r.PeerAddr,
		ClientURLs: r.ClientURLs,
		HTTPAddr:   r.HTTPAddr,
		Name:       r.Name,
	}
	if j.ClientURLs == nil {
		j.ClientURLs = []string{}
	}
	if !r.RegisteredAt.IsZero() {
		j.RegisteredAt = r.RegisteredAt.UTC().Format(time.RFC3339Nano)
	}
	b, err := json.Marshal(j)
	if err != nil {
		panic(err) // strings and ints always marshal
	}
	return b
}

// decodeRegistration parses the registration file at key; every failure
// wraps ErrCorrupt and names key. Unknown fields are ignored: only the node
// itself ever writes the file, so a reader never drops what it does not
// know by rewriting it.
func decodeRegistration(key string, body []byte) (Registration, error) {
	corrupt := func(why string) error { return fmt.Errorf("%w: %s: %s", ErrCorrupt, key, why) }
	var j registrationJSON
	if err := decodeJSON(body, &j, false); err != nil {
		return Registration{}, corrupt(err.Error())
	}
	if j.Version != registrationVersion {
		return Registration{}, corrupt(fmt.Sprintf("format version %d, this netsy reads %d", j.Version, registrationVersion))
	}
	r := Registration{
		NodeID:     j.NodeID,
		ClusterID:  j.ClusterID,
		PeerAddr:   j.PeerAddr,
		ClientURLs: j.ClientURLs,
		HTTPAddr:   j.HTTPAddr,
		Name:       j.Name,
	}
	if err := r.validate(); err != nil {
		return Registration{}, corrupt(err.Error())
	}
	if NodeKey(r.NodeID) != key {
		return Registration{}, corrupt(fmt.Sprintf("holds node id %q, which belongs in %s", r.NodeID, NodeKey(r.NodeID)))
	}
	if j.RegisteredAt != "" {
		t, err := time.Parse(time.RFC3339Nano, j.RegisteredAt)
		if err != nil {
			return Registration{}, corrupt(fmt.Sprintf("registered_at: %v", err))
		}
		r.RegisteredAt = t
	}
	return r, nil
}

// decodeJSON decodes exactly one JSON value from body into v.
func decodeJSON(body []byte, v any, strict bool) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("not valid JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

// Prober asks the process listening at peerAddr which node it is (the
// node calls Node.GetNodeState through its peer pool). A nil error with
// the registration's node id means the process that wrote the
// registration is alive; any error, or another id, means it is gone. It
// must give up within a bounded time.
type Prober func(ctx context.Context, peerAddr string) (nodeID string, err error)

// Register makes sure nodes/{r.NodeID}.json advertises r. It creates the
// file if absent and accepts an existing one with the same node, cluster,
// addresses and member name as a no-op. An existing one that differs only
// in the member name is replaced, on the ETag it was read with: the node
// was restarted with another --name. Anything else is an error and the
// file is left as it is. It is RegisterTakingOver without a prober.
func Register(ctx context.Context, s objstore.Store, r Registration) error {
	_, err := RegisterTakingOver(ctx, s, r, nil)
	return err
}

// RegisterTakingOver is Register that also takes over a registration of
// the same node and cluster at other addresses when the process that wrote
// it is gone: probe is asked about the old peer address, and unless it
// answers as r.NodeID the file is replaced with PutIfMatch on the ETag that
// was read, so of two nodes racing to take it over one wins and the other
// reads the winner's registration (and, finding it alive, fails). It
// returns the registration it replaced, for the caller to log; nil if it
// replaced none (a rename is not a takeover). A nil probe takes nothing
// over. A registration whose peer address answers as r.NodeID is an
// ErrConflict: two processes claim one --node-id.
func RegisterTakingOver(ctx context.Context, s objstore.Store, r Registration, probe Prober) (replaced *Registration, err error) {
	if err := r.validate(); err != nil {
		return nil, fmt.Errorf("register: %w", err)
	}
	key := NodeKey(r.NodeID)
	body := encodeRegistration(r)
	for range registerAttempts {
		_, err := s.PutIfAbsent(ctx, key, body)
		if err == nil {
			return nil, nil
		}
		if !errors.Is(err, objstore.ErrPreconditionFailed) {
			return nil, fmt.Errorf("register %s: %w", key, err)
		}
		// The file exists: it is ours (a restart, or our own create whose
		// answer was lost) or somebody else's.
		got, etag, err := s.Get(ctx, key)
		if errors.Is(err, objstore.ErrNotFound) {
			continue // deregistered between the two calls: try again
		}
		if err != nil {
			return nil, fmt.Errorf("register %s: read existing registration: %w", key, err)
		}
		old, err := decodeRegistration(key, got)
		if err != nil {
			return nil, fmt.Errorf("register: %w (inspect it; if node %s is not running elsewhere, remove it with \"netsyctl deregister %s\")",
				err, r.NodeID, r.NodeID)
		}
		if old.ClusterID != r.ClusterID {
			return nil, fmt.Errorf("register: %w: %s belongs to cluster %q, but this node was started with --cluster-id %q; "+
				"two clusters must not share a bucket and prefix: fix --cluster-id or the storage location",
				ErrClusterMismatch, key, old.ClusterID, r.ClusterID)
		}
		takeover := false
		switch {
		case !old.sameAddresses(r):
			if probe == nil {
				return nil, fmt.Errorf("register: %w: %s already advertises node %s at %s, but this node advertises %s; "+
					"either another process is running with --node-id %s (give this one another id), "+
					"or the node moved: deregister it with \"netsyctl deregister %s\" first",
					ErrConflict, key, old.NodeID, old.addrs(), r.addrs(), r.NodeID, r.NodeID)
			}
			if id, perr := probe(ctx, old.PeerAddr); perr == nil && id == r.NodeID {
				return nil, fmt.Errorf("register: %w: %s advertises node %s at %s, and the process at peer address %s answers as node %s: "+
					"another process is running with --node-id %s (give this one another id, or stop that one first)",
					ErrConflict, key, old.NodeID, old.addrs(), old.PeerAddr, id, r.NodeID)
			}
			if err := ctx.Err(); err != nil {
				// A probe cut short by our own deadline proves nothing.
				return nil, fmt.Errorf("register %s: probe %s: %w", key, old.PeerAddr, err)
			}
			takeover = true
		case old.MemberName() == r.MemberName():
			return nil, nil
		}
		_, err = s.PutIfMatch(ctx, key, body, etag)
		if err == nil {
			if takeover {
				return &old, nil
			}
			return nil, nil
		}
		if !errors.Is(err, objstore.ErrPreconditionFailed) {
			if takeover {
				return nil, fmt.Errorf("register %s: take over the registration at %s: %w", key, old.addrs(), err)
			}
			return nil, fmt.Errorf("register %s: rename %q to %q: %w", key, old.MemberName(), r.MemberName(), err)
		}
		// Changed or deregistered since the read (another starter may
		// have taken it over first): look again.
	}
	return nil, fmt.Errorf("register %s: the file keeps changing under this node; is another process registering and deregistering node %s?",
		key, r.NodeID)
}

// Deregister deletes nodeID's registration file; a missing file is fine.
// The node's member id stays in members.json.
func Deregister(ctx context.Context, s objstore.Store, nodeID string) error {
	if err := ValidateNodeID(nodeID); err != nil {
		return fmt.Errorf("deregister: %w", err)
	}
	key := NodeKey(nodeID)
	if err := s.Delete(ctx, key); err != nil {
		return fmt.Errorf("deregister %s: %w", key, err)
	}
	return nil
}

// List reads every registration file under nodes/, in node id order. A file
// that cannot be decoded (or any other object under nodes/) is reported in
// errs, naming its key, and does not hide the others. err means the
// registrations could not be read at all (the listing or a read failed), so
// regs would be incomplete and are not returned. A file deleted between the
// listing and its read is a deregistration and is skipped.
//
// List does not filter by cluster id: the caller compares ClusterID with its
// own and decides what a foreign registration means.
func List(ctx context.Context, s objstore.Store) (regs []Registration, errs []error, err error) {
	objs, err := s.List(ctx, NodesPrefix, "", 0)
	if err != nil {
		return nil, nil, fmt.Errorf("list %s: %w", NodesPrefix, err)
	}
	for _, o := range objs {
		name, ok := strings.CutSuffix(strings.TrimPrefix(o.Key, NodesPrefix), nodeSuffix)
		if !ok || ValidateNodeID(name) != nil {
			errs = append(errs, fmt.Errorf("%w: %s: not a registration file (want %s{node_id}%s); remove it",
				ErrCorrupt, o.Key, NodesPrefix, nodeSuffix))
			continue
		}
		body, _, err := s.Get(ctx, o.Key)
		if errors.Is(err, objstore.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("list %s: read %s: %w", NodesPrefix, o.Key, err)
		}
		r, err := decodeRegistration(o.Key, body)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		regs = append(regs, r)
	}
	return regs, errs, nil
}
