package s3lect

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// lockVersion is the only lock format this package reads or writes.
const lockVersion = 1

// lockBody is the lock object's JSON form.
type lockBody struct {
	Version    int    `json:"version"`
	HolderID   string `json:"holder_id"`
	HolderAddr string `json:"holder_addr"`
	Term       uint64 `json:"term"`
	LeaseMS    int64  `json:"lease_ms"`
	Counter    uint64 `json:"counter"`
	Released   bool   `json:"released"`
	// WrittenAt is the writer's wall clock, for people reading the bucket.
	// Nothing decides anything from it.
	WrittenAt time.Time `json:"written_at"`
}

func (b lockBody) holder() Holder {
	return Holder{
		NodeID:      b.HolderID,
		PeerAddr:    b.HolderAddr,
		Term:        b.Term,
		Counter:     b.Counter,
		Released:    b.Released,
		LeaseMillis: b.LeaseMS,
	}
}

func bodyOf(h Holder) lockBody {
	return lockBody{
		Version:    lockVersion,
		HolderID:   h.NodeID,
		HolderAddr: h.PeerAddr,
		Term:       h.Term,
		LeaseMS:    h.LeaseMillis,
		Counter:    h.Counter,
		Released:   h.Released,
	}
}

func (b lockBody) encode() []byte {
	out, err := json.Marshal(b)
	if err != nil {
		// Only strings, integers, a bool and a time: Marshal cannot fail
		// unless the time is out of JSON's range, which no clock produces.
		panic(fmt.Sprintf("s3lect: encode lock: %v", err))
	}
	return out
}

// parseLock decodes and checks a lock object's body.
func parseLock(data []byte) (lockBody, error) {
	var b lockBody
	if err := json.Unmarshal(data, &b); err != nil {
		return lockBody{}, err
	}
	switch {
	case b.Version != lockVersion:
		return lockBody{}, fmt.Errorf("version %d, want %d", b.Version, lockVersion)
	case b.HolderID == "":
		return lockBody{}, errors.New("empty holder_id")
	case b.Term == 0:
		return lockBody{}, errors.New("term 0")
	case b.Counter == 0:
		return lockBody{}, errors.New("counter 0")
	case b.LeaseMS < 0:
		return lockBody{}, fmt.Errorf("negative lease_ms %d", b.LeaseMS)
	}
	return b, nil
}
