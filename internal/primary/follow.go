package primary

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/netsy-io/netsy/internal/peer"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// followBatch is how many entries one EntryBatch carries at most.
const followBatch = 512

// FollowService serves Follow streams for the Primary role.
type FollowService struct {
	netsyv1.UnsafeFollowServer
	P *Primary
}

var _ netsyv1.FollowServer = (*FollowService)(nil)

// Follow serves one replica: see the package doc.
func (s *FollowService) Follow(stream netsyv1.Follow_FollowServer) error {
	p := s.P
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	start := first.GetStart()
	if start == nil {
		return status.Error(codes.InvalidArgument, "netsy: a Follow stream starts with FollowStart")
	}
	state, term := p.State()
	if state == netsyv1.PrimaryState_STARTING && start.PrimaryTerm == term {
		// Expected and brief (the preflight after an election): the
		// reason lets the replica come back soon, not with the backoff
		// a failing Primary gets.
		return peer.Error(codes.Unavailable, peer.ReasonPrimaryStarting, fmt.Sprintf("netsy: this node is still Starting as the Primary at term %d", term))
	}
	if state != netsyv1.PrimaryState_ACTIVE || start.PrimaryTerm != term {
		return status.Errorf(codes.FailedPrecondition, "netsy: this node is not the Active Primary at term %d (it is %s at term %d)", start.PrimaryTerm, state, term)
	}
	eng := p.cfg.Engine
	init := &netsyv1.Initial{
		CommittedIndex:    eng.CommittedIndex(),
		CommittedRevision: eng.CurrentRevision(),
		CompactRevision:   eng.CompactRevision(),
	}
	next := start.LastIndex + 1
	last, _, _ := eng.LastAppended()
	if start.LastIndex > 0 {
		t, ok := eng.EntryTerm(start.LastIndex)
		if start.LastIndex > last || !ok || t != start.LastTerm {
			// The replica's log diverges from ours somewhere after its own
			// commit point (or we cannot tell): cut it back there.
			cut := min(start.CommittedIndex, last)
			if ok && start.LastTerm != 0 && t != start.LastTerm {
				// Its last entry is provably not ours (a term of 0 means
				// the replica does not know it: its log ends at a
				// snapshot), so the cut goes below it even when the
				// replica reports it committed: such a replica applied
				// an entry no Primary committed (an ex-Primary that
				// counted its whole local log as committed on restart)
				// and rebuilds its state below the cut rather than keep
				// serving it.
				cut = min(cut, start.LastIndex-1)
			}
			if start.LastIndex > cut {
				init.Truncate, init.TruncateAfter = true, cut
				next = cut + 1
			}
		}
	}
	if next <= last {
		if ents, err := eng.ReadEntries(next, 1); err != nil || len(ents) == 0 || ents[0].Index != next {
			init.CatchUpFromStorage = true
			init.NextIndex = next
			p.log.Info("a replica is behind what this node holds; it catches up from object storage first",
				"replica", start.NodeId, "from", next)
			return stream.Send(&netsyv1.FollowResponse{PrimaryTerm: term, Msg: &netsyv1.FollowResponse_Initial{Initial: init}})
		}
	}
	init.NextIndex = next
	if err := stream.Send(&netsyv1.FollowResponse{PrimaryTerm: term, Msg: &netsyv1.FollowResponse_Initial{Initial: init}}); err != nil {
		return err
	}
	p.log.Debug("replica following", "replica", start.NodeId, "from", next, "primary_term", term)
	p.quorum.open(start.NodeId, term)
	defer p.quorum.closed(start.NodeId, term)

	ctx := stream.Context()
	recvErr := make(chan error, 1)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			// A receipt's heartbeat and a standalone one take one path.
			switch v := m.Msg.(type) {
			case *netsyv1.FollowRequest_Receipt:
				p.quorum.heard(start.NodeId, term, v.Receipt.Index, v.Receipt.Heartbeat)
			case *netsyv1.FollowRequest_Heartbeat:
				p.quorum.heard(start.NodeId, term, 0, v.Heartbeat)
			}
		}
	}()

	sentCommit := uint64(0)
	// compactions sent but not yet known committed, oldest first.
	type compaction struct {
		index uint64
		rev   int64
	}
	var compactions []compaction
	for {
		appended, committed := eng.AppendNotify(), eng.CommitNotify()
		if s, t := p.State(); s != netsyv1.PrimaryState_ACTIVE || t != term {
			return status.Errorf(codes.Unavailable, "netsy: this node stopped being the Primary at term %d", term)
		}
		ents, err := eng.ReadEntries(next, followBatch)
		if err != nil {
			return status.Errorf(codes.Internal, "netsy: read entries from %d: %v", next, err)
		}
		if len(ents) > 0 {
			if ents[0].Index != next {
				return status.Errorf(codes.Internal, "netsy: entries from %d start at %d", next, ents[0].Index)
			}
			batch, enc, err := p.batches.batch(ents)
			if err != nil {
				return status.Errorf(codes.Internal, "netsy: encode entries from %d: %v", next, err)
			}
			if c := eng.CommittedIndex(); c > sentCommit {
				batch.CommitIndex, sentCommit = c, c
			}
			msg := &netsyv1.FollowResponse{PrimaryTerm: term, Msg: &netsyv1.FollowResponse_Entries{Entries: batch}}
			err = stream.Send(msg)
			p.batches.done(enc)
			if err != nil {
				return err
			}
			next = ents[len(ents)-1].Index + 1
			for _, e := range ents {
				if e.CompactRevision > 0 {
					compactions = append(compactions, compaction{e.Index, e.CompactRevision})
				}
			}
		}
		if c := eng.CommittedIndex(); c > sentCommit {
			msg := &netsyv1.FollowResponse{PrimaryTerm: term, Msg: &netsyv1.FollowResponse_Commit{Commit: &netsyv1.Commit{Index: c, Revision: eng.CurrentRevision()}}}
			if err := stream.Send(msg); err != nil {
				return err
			}
			sentCommit = c
		}
		// Compaction is an entry of the log, which the replica applies when
		// a commit covers it; Compact then says the compaction is committed.
		for len(compactions) > 0 && compactions[0].index <= sentCommit {
			msg := &netsyv1.FollowResponse{PrimaryTerm: term, Msg: &netsyv1.FollowResponse_Compact{Compact: &netsyv1.Compact{Revision: compactions[0].rev}}}
			if err := stream.Send(msg); err != nil {
				return err
			}
			compactions = compactions[1:]
		}
		if len(ents) == followBatch {
			continue
		}
		select {
		case <-appended:
		case <-committed:
		case err := <-recvErr:
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-p.ctx.Done():
			return status.Error(codes.Unavailable, "netsy: server stopping")
		}
		// Appends and commits come in bursts (a group commit answers
		// writes whose clients write again at once): let the goroutines
		// already runnable append theirs before reading, so they share a
		// message (and the replica's one handoff to its engine) instead
		// of each one's wake-up sending one. No timer: nothing waits.
		runtime.Gosched()
	}
}

// batchCache encodes an entry batch once for every Follow stream that
// sends it. The streams of replicas that keep up wake on the same append
// and read the same entries; encoding them in each stream's send was
// most of what the Follow streams cost the Primary in the 3-node put-256
// profile (6 of its 8.5%), the same work once per replica
// (BenchmarkFollowBatchTwoReplicas). The encoded bytes come from a pool
// and go back to it once replaced and no stream still sends them, so
// sharing adds no allocation per batch either.
type batchCache struct {
	mu  sync.Mutex
	cur *encodedBatch
	// free recycles the bytes of batches no stream sends any more.
	free sync.Pool
	// encodes counts the batches encoded (tests read it).
	encodes atomic.Int64
}

// encodedBatch is one batch's entries, encoded.
type encodedBatch struct {
	// first, last and n identify the entries raw encodes: the engine
	// hands every reader the same *Entry for an index it holds, and an
	// entry is never changed once appended, so the same first and last
	// pointers and count are the same entries (another term's entries,
	// or ones read again from storage, are other pointers: a miss).
	first, last *netsyv1.Entry
	n           int
	raw         []byte
	// refs counts the streams sending it (batch to done); c.mu guards it.
	refs int
}

// batch returns an EntryBatch carrying ents as encoded bytes (its unknown
// fields, which a marshal copies out as they are and the replica decodes
// as its entries), encoding them only when the last batch encoded was
// other entries. Its CommitIndex is the caller's to set. The caller
// calls done with the returned encodedBatch once its send returned: the
// bytes may be reused after that.
func (c *batchCache) batch(ents []*netsyv1.Entry) (*netsyv1.EntryBatch, *encodedBatch, error) {
	first, last := ents[0], ents[len(ents)-1]
	c.mu.Lock()
	e := c.cur
	if e == nil || e.first != first || e.last != last || e.n != len(ents) {
		var buf []byte
		if b, ok := c.free.Get().(*[]byte); ok {
			buf = (*b)[:0]
		}
		// The batch without a commit index is the entries field alone.
		raw, err := proto.MarshalOptions{}.MarshalAppend(buf, &netsyv1.EntryBatch{Entries: ents})
		if err != nil {
			c.mu.Unlock()
			return nil, nil, err
		}
		if old := c.cur; old != nil && old.refs == 0 {
			c.recycleLocked(old)
		}
		e = &encodedBatch{first: first, last: last, n: len(ents), raw: raw}
		c.cur = e
		c.encodes.Add(1)
	}
	e.refs++
	c.mu.Unlock()
	b := &netsyv1.EntryBatch{}
	b.ProtoReflect().SetUnknown(protoreflect.RawFields(e.raw))
	return b, e, nil
}

// done says a stream's send of e returned: the send copied e's bytes
// into its own buffer, so e's may be reused once no stream sends them
// and a newer batch replaced e.
func (c *batchCache) done(e *encodedBatch) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.refs--
	if e.refs == 0 && c.cur != e {
		c.recycleLocked(e)
	}
}

// maxPooledBatch bounds the encoded batches kept for reuse: a rare huge
// batch is left to the collector rather than held.
const maxPooledBatch = 1 << 20

func (c *batchCache) recycleLocked(e *encodedBatch) {
	raw := e.raw
	e.raw, e.first, e.last = nil, nil, nil
	if cap(raw) <= maxPooledBatch {
		c.free.Put(&raw)
	}
}
