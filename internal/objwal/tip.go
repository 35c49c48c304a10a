package objwal

import (
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/proto"

	"github.com/netsy-io/netsy/internal/datafile"
	"github.com/netsy-io/netsy/internal/objstore"
	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

// DurableTip returns the highest log index the bucket holds durably: the
// last entry of the newest wal/ chunk that carries entries, or the index of
// the newest snapshot, whichever is higher; 0 if it holds neither. It needs
// no open Log (the Elector and netsyctl call it), makes one attempt per
// call, and reads only what it must: the wal/ listing, chunks from the
// newest back to the first that is not an empty claim, and the first
// record (the header) of the newest snapshot.
//
// The answer is a lower bound while a writer is uploading (a chunk may land
// right after the listing), never an overstatement: every object it counts
// was created with PutIfAbsent and is complete. A chunk or snapshot it
// cannot read or decode is an error naming the object, so a caller that
// must not overstate what the bucket holds never guesses past damage.
func DurableTip(ctx context.Context, store objstore.Store) (uint64, error) {
	var chunks []string
	if err := listKeys(ctx, store, walPrefix, func(key string) error {
		if parseSeq(key) == 0 {
			return fmt.Errorf("list %s: %q is not a wal chunk key", walPrefix, key)
		}
		chunks = append(chunks, key)
		return nil
	}); err != nil {
		return 0, fmt.Errorf("durable tip: %w", err)
	}
	var tip uint64
	// Claims are empty chunks: the newest with entries holds the tip.
	for i := len(chunks) - 1; i >= 0; i-- {
		key := chunks[i]
		body, _, err := store.Get(ctx, key)
		if errors.Is(err, objstore.ErrNotFound) {
			continue // garbage-collected after the listing: an older one holds less
		}
		if err != nil {
			return 0, fmt.Errorf("durable tip: get %s: %w", key, err)
		}
		_, f, err := datafile.DecodeChunk(key, body)
		if err != nil {
			return 0, fmt.Errorf("durable tip: chunk %s: %w", key, err)
		}
		if f.Records > 0 {
			tip = f.LastIndex
			break
		}
	}
	var newest string
	if err := listKeys(ctx, store, snapPrefix, func(key string) error {
		if parseNum(key, snapPrefix) == 0 {
			return fmt.Errorf("list %s: %q is not a snapshot key", snapPrefix, key)
		}
		newest = key
		return nil
	}); err != nil {
		return 0, fmt.Errorf("durable tip: %w", err)
	}
	if newest == "" {
		return tip, nil
	}
	idx, err := snapshotIndex(ctx, store, newest)
	if errors.Is(err, objstore.ErrNotFound) {
		// Garbage-collected after the listing: a newer one replaced it,
		// and every chunk up to that one's index was in the bucket first.
		return tip, nil
	}
	if err != nil {
		return 0, fmt.Errorf("durable tip: %w", err)
	}
	return max(tip, idx), nil
}

// listKeys calls fn with every key under prefix, in order, one attempt
// per page.
func listKeys(ctx context.Context, store objstore.Store, prefix string, fn func(key string) error) error {
	return listPages(ctx, "", func(ctx context.Context, after string) ([]objstore.ObjectInfo, error) {
		page, err := store.List(ctx, prefix, after, listPage)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", prefix, err)
		}
		return page, nil
	}, func(o objstore.ObjectInfo) (bool, error) { return true, fn(o.Key) })
}

// firstSnapshotHeader checks that dr is a snapshot and decodes its first
// record, the snapshot header.
func firstSnapshotHeader(key string, dr *datafile.Reader) (*netsyv1.SnapshotHeader, error) {
	if k := dr.Header().Kind; k != datafile.KindSnapshot {
		return nil, fmt.Errorf("data file %s: a %s is not a snapshot", key, k)
	}
	payload, err := dr.Next()
	if err == io.EOF {
		return nil, fmt.Errorf("data file %s: no snapshot header", key)
	}
	if err != nil {
		return nil, err
	}
	rec := &netsyv1.SnapshotRecord{}
	if err := proto.Unmarshal(payload, rec); err != nil {
		return nil, fmt.Errorf("data file %s: decode the first record: %w", key, err)
	}
	h := rec.GetHeader()
	if h == nil {
		return nil, fmt.Errorf("data file %s: the first record is not a snapshot header", key)
	}
	return h, nil
}

// snapshotIndex reads the header record of the snapshot at key, and no
// more, and returns its log index.
func snapshotIndex(ctx context.Context, store objstore.Store, key string) (uint64, error) {
	h, err := snapshotHeader(ctx, store, key)
	if err != nil {
		return 0, err
	}
	return h.Index, nil
}

// snapshotHeader reads the header record of the snapshot at key, and no
// more: the rest of the body is abandoned unread (and unverified).
func snapshotHeader(ctx context.Context, store objstore.Store, key string) (*netsyv1.SnapshotHeader, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // abandons the rest of the body
	rc, _, err := store.GetReader(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	defer rc.Close()
	dr, err := datafile.NewReader(key, rc)
	if err != nil {
		return nil, err
	}
	h, err := firstSnapshotHeader(key, dr)
	if err != nil {
		return nil, err
	}
	if snapKey(h.Revision) != key {
		return nil, fmt.Errorf("snapshot %s: header says revision %d", key, h.Revision)
	}
	return h, nil
}
