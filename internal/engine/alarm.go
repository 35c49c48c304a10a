package engine

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/netsy-io/netsy/internal/mvcc"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// The space quota and its alarm, as etcd's: a write that would take the
// store past the quota is refused and raises NOSPACE; while NOSPACE is
// active every write that adds data (a put, a txn with a put, a lease
// grant) is refused, and deletes, compactions and reads go on. Disarming
// refuses nothing: the next write over the quota raises it again.
//
// Alarms are state of the log, not of a node: raising or clearing one is a
// logged entry (Entry.alarm) and a snapshot carries the active ones
// (SnapshotHeader.alarms). So every node lists the same alarms as it
// applies the log, a new Primary inherits them with the history, and a
// restart restores them, with no second source of truth to reconcile.
// Re-deriving the alarm on each Primary from its own measure would lose
// an operator's ACTIVATE and the raiser's member id, and a replica would
// list nothing until the next refused write.

// leaseCost is what a lease grant counts against the quota, as etcd's.
const leaseCost = 64

// alarmSet is the committed alarm state: the loop changes it as alarm
// entries commit (or are applied by a follower), API goroutines read it.
type alarmSet struct {
	mu   sync.Mutex
	list []*netsyv1.Alarm
}

// apply returns the list after change c; it never modifies list.
func applyAlarm(list []*netsyv1.Alarm, c *netsyv1.AlarmChange) []*netsyv1.Alarm {
	i := slices.IndexFunc(list, func(a *netsyv1.Alarm) bool { return a.MemberId == c.MemberId && a.Type == c.Type })
	switch {
	case c.Activate && i < 0:
		out := append(slices.Clone(list), &netsyv1.Alarm{MemberId: c.MemberId, Type: c.Type})
		slices.SortFunc(out, func(a, b *netsyv1.Alarm) int {
			if a.MemberId != b.MemberId {
				return cmp.Compare(a.MemberId, b.MemberId)
			}
			return int(a.Type - b.Type)
		})
		return out
	case !c.Activate && i >= 0:
		return slices.Delete(slices.Clone(list), i, i+1)
	}
	return list
}

func (s *alarmSet) apply(c *netsyv1.AlarmChange) {
	if c == nil {
		return
	}
	s.mu.Lock()
	s.list = applyAlarm(s.list, c)
	s.mu.Unlock()
}

func (s *alarmSet) restore(list []*netsyv1.Alarm) {
	s.mu.Lock()
	s.list = slices.Clone(list)
	s.mu.Unlock()
}

// get returns the active alarms; the slice and its elements are shared
// and must not be modified.
func (s *alarmSet) get() []*netsyv1.Alarm {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.list
}

// alarmsAhead is the alarm state once every pending entry commits: what
// the writer judges new requests by. Only the loop calls it.
func (e *Engine) alarmsAhead() []*netsyv1.Alarm {
	list := e.alarms.get()
	if e.pendingAlarms == 0 {
		// Every write asks (checkQuota): walking hundreds of pending
		// entries for the one in a million that changes an alarm made
		// each batch quadratic in its size.
		return list
	}
	for _, pe := range e.pending {
		if c := pe.entry.Alarm; c != nil {
			list = applyAlarm(list, c)
		}
	}
	return list
}

func hasAlarm(list []*netsyv1.Alarm, typ pb.AlarmType) bool {
	return slices.ContainsFunc(list, func(a *netsyv1.Alarm) bool { return a.Type == int32(typ) })
}

// Alarms lists the active alarms of type typ (pb.AlarmType_NONE: all), as
// this node has applied them.
func (e *Engine) Alarms(typ pb.AlarmType) []*pb.AlarmMember {
	var out []*pb.AlarmMember
	for _, a := range e.alarms.get() {
		if typ == pb.AlarmType_NONE || a.Type == int32(typ) {
			out = append(out, &pb.AlarmMember{MemberID: a.MemberId, Alarm: pb.AlarmType(a.Type)})
		}
	}
	return out
}

// Space reports the store's size in etcd's two measures: total is what it
// holds (dropped values not yet reclaimed from the spill files included),
// inUse what its data takes (see mvcc.Stats.InUse), the quota's measure.
func (e *Engine) Space() (total, inUse int64) {
	st := e.store.Stats()
	return st.Total(), st.InUse()
}

// QuotaBackendBytes is the space quota (0: none).
func (e *Engine) QuotaBackendBytes() int64 { return e.cfg.QuotaBackendBytes }

// memberID is the member id this node raises alarms under.
func (e *Engine) memberID() uint64 {
	if e.cfg.Member != nil {
		if id := e.cfg.Member(); id != 0 {
			return id
		}
	}
	return e.cfg.MemberID
}

// checkQuota refuses p, a write of the given cost, while NOSPACE is
// active, or when it would take the store over the quota, in which case it
// logs the NOSPACE alarm first. The write itself is never logged: nothing
// refused here was acknowledged. A refusal is answered once the alarm is
// durable, so a client that was refused finds the alarm listed, as etcd
// raises it before answering. It reports whether it answered p; only the
// loop calls it.
func (e *Engine) checkQuota(p *proposal, cost int64) bool {
	if cost == 0 {
		return false
	}
	if hasAlarm(e.alarmsAhead(), pb.AlarmType_NOSPACE) {
		p.err = ErrNoSpace
		e.waitForLast(p)
		return true
	}
	q := e.cfg.QuotaBackendBytes
	if q <= 0 {
		return false
	}
	used := e.store.Stats().InUse()
	if used+cost <= q {
		return false
	}
	member := e.memberID()
	e.log.Warn("space quota exceeded: raising the NOSPACE alarm; writes that add data are refused until it is disarmed (compact, then etcdctl alarm disarm)",
		"in_use", used, "request", cost, "quota", q, "member", fmt.Sprintf("%x", member))
	ent := &netsyv1.Entry{Index: e.lastIdx + 1, Revision: e.store.Rev(),
		Alarm: &netsyv1.AlarmChange{Activate: true, MemberId: member, Type: int32(pb.AlarmType_NOSPACE)}}
	// p waits for the alarm entry with its answer set: finish keeps it.
	p.err = ErrNoSpace
	e.appendEntry(ent, p, nil)
	return true
}

// coster is an op that adds data; cost is what it counts against the
// quota, as etcd counts it (a txn: its costlier branch).
type coster interface{ cost() int64 }

func putCost(r *pb.PutRequest) int64 {
	return int64(mvcc.VersionOverhead + mvcc.KeyOverhead + len(r.Key) + len(r.Value))
}

func txnCost(r *pb.TxnRequest) int64 {
	return max(opsCost(r.Success), opsCost(r.Failure))
}

func opsCost(ops []*pb.RequestOp) int64 {
	var c int64
	for _, op := range ops {
		switch v := op.Request.(type) {
		case *pb.RequestOp_RequestPut:
			c += putCost(v.RequestPut)
		case *pb.RequestOp_RequestTxn:
			c += txnCost(v.RequestTxn)
		}
	}
	return c
}

func (o *putOp) cost() int64        { return putCost(o.req) }
func (o *txnOp) cost() int64        { return txnCost(o.req) }
func (o *leaseGrantOp) cost() int64 { return leaseCost }

// checkQuotaAtOpen refuses to start a store that already holds more than
// the quota: it could take no write, and the operator lowered the quota
// below the data by mistake or must raise it.
func (e *Engine) checkQuotaAtOpen() error {
	q := e.cfg.QuotaBackendBytes
	if q <= 0 {
		return nil
	}
	st := e.store.Stats()
	if used := st.InUse(); used > q {
		return fmt.Errorf("%w: the store holds %d bytes (%s: %d keys, %d versions, %d bytes of keys and values, in memory and spilled to files, plus their index) at revision %d, more than the quota of %d bytes (%s): set the quota to at least %d bytes",
			ErrQuotaTooSmall, used, humanBytes(used), st.IndexKeys, st.Versions, st.Bytes, e.lastRev, q, humanBytes(q), used)
	}
	return nil
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// alarmOp raises or clears an alarm on a client's request.
type alarmOp struct {
	req  *pb.AlarmRequest
	resp *pb.AlarmResponse
}

func (o *alarmOp) logs() bool { return true }
func (o *alarmOp) evaluate(e *Engine, p *proposal) {
	r := o.req
	o.resp = &pb.AlarmResponse{Header: &pb.ResponseHeader{Revision: e.store.Rev()}}
	if r.Alarm == pb.AlarmType_NONE {
		// etcd ignores an alarm of no type.
		e.waitForLast(p)
		return
	}
	c := &netsyv1.AlarmChange{Activate: r.Action == pb.AlarmRequest_ACTIVATE, MemberId: r.MemberID, Type: int32(r.Alarm)}
	ahead := e.alarmsAhead()
	present := slices.ContainsFunc(ahead, func(a *netsyv1.Alarm) bool { return a.MemberId == c.MemberId && a.Type == c.Type })
	if present || c.Activate {
		o.resp.Alarms = []*pb.AlarmMember{{MemberID: r.MemberID, Alarm: r.Alarm}}
	}
	if present == c.Activate {
		// Nothing changes; answer once what came before is durable.
		e.waitForLast(p)
		return
	}
	ent := &netsyv1.Entry{Index: e.lastIdx + 1, Revision: e.store.Rev(), Alarm: c}
	e.appendEntry(ent, p, nil)
}

// Alarm serves etcd's Alarm RPC: GET lists the alarms this node applied;
// ACTIVATE and DEACTIVATE are logged by the writer (ErrNotPrimary
// elsewhere). Only NOSPACE may be activated: Netsy has no applier for
// CORRUPT, and an alarm that changes nothing must not be shown as set.
func (e *Engine) Alarm(ctx context.Context, r *pb.AlarmRequest) (*pb.AlarmResponse, error) {
	switch r.Action {
	case pb.AlarmRequest_GET:
		return &pb.AlarmResponse{Header: &pb.ResponseHeader{Revision: e.committedRev.Load()}, Alarms: e.Alarms(r.Alarm)}, nil
	case pb.AlarmRequest_ACTIVATE:
		if r.Alarm != pb.AlarmType_NONE && r.Alarm != pb.AlarmType_NOSPACE {
			return nil, fmt.Errorf("%w: only NOSPACE can be activated, not %s", ErrAlarmNotSupported, r.Alarm)
		}
	case pb.AlarmRequest_DEACTIVATE:
	default:
		return nil, fmt.Errorf("%w: unknown alarm action %d", ErrAlarmNotSupported, r.Action)
	}
	o := &alarmOp{req: r}
	if err := e.submit(ctx, o); err != nil {
		return nil, err
	}
	return o.resp, nil
}
