package objwal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/netsy-io/netsy/internal/objstore"
)

// PinPrefix is where a parent bucket keeps the pins of its branches: one
// branches/{id}.json per branch that still reads the parent's objects.
// objwal owns the format because its garbage collection is what a pin
// holds back; package backup writes and deletes them.
const PinPrefix = "branches/"

// ErrBadPin means an object under PinPrefix does not decode as a pin.
var ErrBadPin = errors.New("not a branch pin")

// pinVersion is the only pin format there is.
const pinVersion = 1

var pinIDRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// Pin says which of a parent bucket's immutable objects a branch still
// reads: one snapshot (none: the log from its start) and the run of chunks
// FirstSeq..LastSeq (FirstSeq 0: no chunk). GC deletes neither while the
// pin exists.
type Pin struct {
	Version int `json:"version"`
	// ID names the branch; the pin's key is PinKey(ID).
	ID string `json:"id"`
	// Child is the branch's --storage URL, for people reading the bucket.
	Child string `json:"child"`
	// Revision is the revision the branch starts from.
	Revision int64 `json:"revision"`
	// Snapshot is the key of the snapshot the branch starts from.
	Snapshot string `json:"snapshot,omitempty"`
	FirstSeq uint64 `json:"first_seq,omitempty"`
	LastSeq  uint64 `json:"last_seq,omitempty"`
	// CreatedAt is informational (RFC 3339); nothing decides from it.
	CreatedAt string `json:"created_at,omitempty"`
}

// PinKey is the key of branch id's pin.
func PinKey(id string) string { return PinPrefix + id + ".json" }

// ValidPinID says whether id can name a branch: 1 to 63 lower-case
// letters, digits and '-', starting with a letter or digit (one safe key
// segment).
func ValidPinID(id string) bool { return pinIDRE.MatchString(id) }

// Keys lists the objects p holds back, snapshot first.
func (p Pin) Keys() []string {
	var keys []string
	if p.Snapshot != "" {
		keys = append(keys, p.Snapshot)
	}
	if p.FirstSeq > 0 {
		for s := p.FirstSeq; s <= p.LastSeq; s++ {
			keys = append(keys, walKey(s))
		}
	}
	return keys
}

// Encode is the body of p's object.
func (p Pin) Encode() []byte {
	p.Version = pinVersion
	b, _ := json.Marshal(p)
	return b
}

// DecodePin reads the body of the object key. A body that does not decode,
// another version, an id that does not match the key, or a chunk range
// that is not one, is an error naming the key.
func DecodePin(key string, body []byte) (Pin, error) {
	var p Pin
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return p, fmt.Errorf("branch pin %s: %w: %w", key, ErrBadPin, err)
	}
	switch {
	case p.Version != pinVersion:
		return p, fmt.Errorf("branch pin %s: version %d, want %d: %w", key, p.Version, pinVersion, ErrBadPin)
	case PinKey(p.ID) != key || !ValidPinID(p.ID):
		return p, fmt.Errorf("branch pin %s: id %q does not match its key: %w", key, p.ID, ErrBadPin)
	case p.Snapshot != "" && parseNum(p.Snapshot, snapPrefix) == 0:
		return p, fmt.Errorf("branch pin %s: %q is not a snapshot key: %w", key, p.Snapshot, ErrBadPin)
	case p.FirstSeq > p.LastSeq || p.FirstSeq == 0 && p.LastSeq != 0:
		return p, fmt.Errorf("branch pin %s: chunks %d..%d are not a range: %w", key, p.FirstSeq, p.LastSeq, ErrBadPin)
	}
	return p, nil
}

// ReadPins loads every pin in store. Any object under PinPrefix that does
// not decode is an error: garbage collection then deletes nothing rather
// than something a branch may read.
func ReadPins(ctx context.Context, store objstore.Store) ([]Pin, error) {
	var pins []Pin
	after := ""
	for {
		page, err := store.List(ctx, PinPrefix, after, listPage)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", PinPrefix, err)
		}
		for _, o := range page {
			body, _, err := store.Get(ctx, o.Key)
			if errors.Is(err, objstore.ErrNotFound) {
				continue // released between the listing and the read
			}
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", o.Key, err)
			}
			p, err := DecodePin(o.Key, body)
			if err != nil {
				return nil, err
			}
			pins = append(pins, p)
		}
		if len(page) < listPage {
			return pins, nil
		}
		after = page[len(page)-1].Key
	}
}

// pinned is what the pins of a bucket hold back from garbage collection.
type pinned struct {
	snaps map[string]bool
	// floor is the lowest pinned chunk seq (0: none): GC deletes no chunk
	// at or above it, so its floor never passes a pinned chunk and the
	// chunks a released pin held are found by the next GC.
	floor uint64
}

func pinsHold(pins []Pin) pinned {
	h := pinned{snaps: map[string]bool{}}
	for _, p := range pins {
		if p.Snapshot != "" {
			h.snaps[p.Snapshot] = true
		}
		if p.FirstSeq > 0 && (h.floor == 0 || p.FirstSeq < h.floor) {
			h.floor = p.FirstSeq
		}
	}
	return h
}
