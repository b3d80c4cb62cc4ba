package cycle

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Txn is the open transaction of a Machine, from Begin to Finish. The
// shell reports what happens in it — records polled, requests taken and
// encoded, records Kafka refused, the membership check — and asks how to
// end it.
//
// The order of a cycle, and the shell's part in it:
//
//	Begin → Polled / EngineRefused (records handed to the engine)
//	      → Discard, if the cycle found nothing to do
//	      → PollFor (while polling: how much longer), Committing
//	      → Began (the Kafka transaction began)
//	      → Take (each request: encode it or fail it as moved)
//	      → RouteFailed, EncodeFailed, LogFailed, Refused, Produced, Unsettled
//	      → MustCheckMember → MemberChecked
//	      → HowToEnd → (the shell ends the Kafka transaction) → Finish
type Txn struct {
	m        *Machine
	member   string // the group member the node was at Begin
	gen      int32  // and its generation
	abort    Reason
	touched  map[int32]bool // partitions with records polled or requests taken
	culprits map[int32]bool // partitions whose own work made it abort
	records  int            // records produced
	moves    bool           // the group revoked or lost partitions meanwhile
	polled   bool           // records were polled: End commits their offsets
	ended    bool
	fenceErr error     // why MustCheckMember or MemberChecked fenced it
	start    time.Time // when its Kafka transaction began (Committing)
	asked    bool      // PollFor was called in it
	backlog  bool      // work waited at its first PollFor
}

// Began records the group member id and generation the node is when the
// Kafka transaction begins (empty and -1 outside the group):
// MustCheckMember compares them with the ones it is at the end.
func (t *Txn) Began(member string, gen int32) { t.member, t.gen = member, gen }

// Idle reports whether nothing happened in the transaction: no records
// polled, no request taken.
func (t *Txn) Idle() bool { return !t.polled && len(t.touched) == 0 }

// Discard closes the transaction with no decision following: it found
// nothing to do, or the node stops (its requests failed as stopped, the
// Kafka transaction left to the coordinator).
func (t *Txn) Discard() {
	t.ended = true
	if t.m.txn == t {
		t.m.txn = nil
	}
}

// Abort returns why the transaction aborts, NoReason while it may commit.
func (t *Txn) Abort() Reason { return t.abort }

func (t *Txn) abortFor(r Reason) {
	if t.abort == NoReason {
		t.abort = r
	}
}

// Polled records that records of the messages topic were polled for
// partition p. It returns whether to hand them to the engine: only for a
// serving partition, while the transaction may commit. Records for a
// partition that is not serving abort the transaction (their offsets must
// not commit; the abort rewinds them to be polled again).
func (t *Txn) Polled(p int32) (hand bool) {
	t.polled = true
	t.touched[p] = true
	if t.abort != NoReason {
		return false
	}
	if !t.m.IsServing(p) {
		t.abortFor(Unowned)
		return false
	}
	return true
}

// PolledIngress records that ingress records were polled: End commits
// their offsets.
func (t *Txn) PolledIngress() { t.polled = true }

// EngineRefused records that the engine refused partition p's polled
// records: the transaction aborts, so that they are polled again.
func (t *Txn) EngineRefused(p int32) { t.abortFor(EngineRefused) }

// Take decides about a request of partition p taken from the queue: encode
// it into p's overlay (true), or fail it as moved (false, with why), since
// the core that made it is gone and a write into a partition this node
// does not serve would reach another owner's changelog.
func (t *Txn) Take(p int32) (encode bool, why string) {
	if !t.m.IsServing(p) {
		return false, t.m.describe(p)
	}
	t.touched[p] = true
	return true, ""
}

// MayEncode reports whether the shell should go on encoding requests and
// routing records: not once the transaction aborts.
func (t *Txn) MayEncode() bool { return t.abort == NoReason }

// RouteFailed records that an ingress record could not be routed.
func (t *Txn) RouteFailed() { t.abortFor(IngressFailed) }

// EncodeFailed records that a request of partition p failed to encode:
// the transaction aborts and p's rebuild backs off.
func (t *Txn) EncodeFailed(p int32) {
	t.abortFor(EncodeFailed)
	t.culprits[p] = true
}

// LogFailed records that partition p's overlay could not become changelog
// records.
func (t *Txn) LogFailed(p int32) { t.abortFor(EncodeFailed) }

// Unsettled records that the Kafka client had not settled the partitions
// of a topic the transaction produced to once its records were flushed:
// the transaction aborts rather than risk a commit that leaves them out.
func (t *Txn) Unsettled() { t.abortFor(Unsettled) }

// Produced counts records produced in the transaction.
func (t *Txn) Produced(n int) { t.records += n }

// Refused records that Kafka refused a record of the transaction, made by
// partition from (-1: by none, e.g. ingress routing): the transaction
// aborts and from's rebuild backs off.
func (t *Txn) Refused(from int32) {
	t.abortFor(ProduceRefused)
	if from >= 0 {
		t.culprits[from] = true
	}
}

// MovesHeard records that the group revoked or lost partitions of this
// node while the transaction was open (the shell heard it and has not
// acted on it yet).
func (t *Txn) MovesHeard() { t.moves = true }

// MustCheckMember decides, once every record is produced and flushed,
// whether the group coordinator must confirm the node's membership before
// the transaction ends. Only a transaction that may commit, produced
// records and commits no offsets needs it: End commits offsets with the
// generation that fences a zombie, and nothing fences a transaction
// without them; it would write into changelogs of partitions the group may
// have given to another node while this one stalled. Checking after the
// records are in the log means a new owner's restore waits for this
// transaction to end.
//
// now and nowGen are the member and generation the node is now: a node
// that lost its partitions and rejoined under a new member id would pass a
// heartbeat while the transaction carries work of partitions the group
// gave to another node meanwhile, so a change since Begin, or a revocation
// heard, aborts without asking.
func (t *Txn) MustCheckMember(now string, nowGen int32) (check bool, member string, gen int32) {
	if t.abort != NoReason || t.records == 0 || t.polled {
		return false, "", 0
	}
	switch {
	case t.member == "" || t.gen < 0:
		t.fence(errors.New("not a member of the group when the transaction began"))
	case now != t.member || nowGen != t.gen:
		t.fence(fmt.Errorf("the group moved on since the transaction began (member %s generation %d, now %s generation %d)", t.member, t.gen, now, nowGen))
	case t.moves:
		t.fence(errors.New("the group revoked or lost partitions of this node during the transaction"))
	default:
		return true, t.member, t.gen
	}
	return false, "", 0
}

// FenceErr is the reason MustCheckMember or MemberChecked fenced the
// transaction, for the shell's log line; nil if they did not.
func (t *Txn) FenceErr() error { return t.fenceErr }

func (t *Txn) fence(err error) {
	t.abortFor(Fenced)
	t.fenceErr = err
}

// MemberChecked records the coordinator's answer to the membership check
// (a heartbeat with the member and generation of Begin): any error
// aborts.
func (t *Txn) MemberChecked(err error) {
	if err != nil {
		t.fence(err)
	}
}

// End is how to end the Kafka transaction.
type End int

// The ways to end a transaction.
const (
	// EndAbort: the group transact session's End, aborting.
	EndAbort End = iota
	// EndCommit: the group transact session's End, trying to commit with
	// the polled offsets (and any startup positions); it reports whether
	// it committed.
	EndCommit
	// EndWithoutOffsets: the client's EndTransaction, committing a
	// transaction that commits no offsets.
	EndWithoutOffsets
)

// HowToEnd decides how to end the transaction; starts says startup
// positions of ingress partitions wait to be committed with it. An End of
// the group transact session rearms its revocation callbacks, so Rearm is
// cleared by it.
func (t *Txn) HowToEnd(starts bool) End {
	if t.abort == NoReason && !starts && !t.polled {
		return EndWithoutOffsets
	}
	t.m.rearm = false
	if t.abort != NoReason {
		return EndAbort
	}
	return EndCommit
}

// Outcome is how the Kafka transaction ended.
type Outcome int

// The outcomes of ending a transaction.
const (
	// Committed: Kafka committed it.
	Committed Outcome = iota
	// NotCommitted: Kafka aborted it, or it was ended as an abort.
	NotCommitted
	// OutcomeUnknown: ending failed without saying what happened, and the
	// shell then aborted what may still be open.
	OutcomeUnknown
)

// Result is what follows from a transaction's end.
type Result struct {
	// Committed: the overlays go to the store, the requests are durable.
	Committed bool
	// Reason is why it aborted (Group when End alone did not commit).
	Reason Reason
	// Touched are the partitions the transaction touched, in order.
	Touched []int32
	// Rebuild are the restores of partitions an abort leaves behind their
	// cores (the cores moved past work that will never commit), in order;
	// the shell revokes each from the engine, pauses its fetching and
	// restores it.
	Rebuild []Restore
	// Warn is a warning to log: commits have been refused for a while.
	Warn string
	// GiveUp, when not nil, wraps ErrGaveUp: the node must give its
	// partitions up and stop.
	GiveUp error
}

// Finish closes the transaction with its outcome, at time now.
func (t *Txn) Finish(o Outcome, now time.Time) Result {
	if t.ended {
		panic("cycle: Finish twice")
	}
	t.ended = true
	m := t.m
	m.txn = nil
	m.lastEnd = now
	m.lastDur = 0
	if !t.start.IsZero() && now.After(t.start) {
		m.lastDur = now.Sub(t.start)
	}
	touched := make([]int32, 0, len(t.touched))
	for p := range t.touched {
		touched = append(touched, p)
	}
	slices.Sort(touched)
	res := Result{Touched: touched}
	switch {
	case o == OutcomeUnknown:
		t.abortFor(Unconfirmed)
	case o == NotCommitted:
		t.abortFor(Group)
	case t.abort != NoReason:
		panic(fmt.Sprintf("cycle: a transaction aborting for %q reported committed", t.abort))
	}
	if t.abort == NoReason {
		res.Committed = true
		m.refused = 0
		for _, p := range touched {
			if pt := m.parts[p]; pt != nil {
				pt.strikes = 0
			}
		}
		m.give.committed()
		return res
	}
	res.Reason = t.abort
	var refusedWait time.Duration
	if t.abort.countsTowardGiveUp() {
		m.refused++
		refusedWait = refusalBackoff(m.refused)
	}
	for _, p := range touched {
		pt := m.parts[p]
		if pt == nil || !pt.serving {
			continue
		}
		pt.full = false
		wait := refusedWait
		strikes := 0
		if t.culprits[p] {
			pt.strikes++
			strikes = pt.strikes
			wait = max(wait, rebuildBackoff(pt.strikes, m.cfg.RebuildBackoff))
		}
		res.Rebuild = append(res.Rebuild, m.restore(p, wait, false, strikes))
	}
	if t.abort.countsTowardGiveUp() {
		res.Warn, res.GiveUp = m.give.aborted(now, t.abort)
	}
	return res
}

// rebuildBackoff is the wait before the n-th rebuild in a row of a
// partition whose own work aborted the transaction: first, doubling, at
// most MaxRebuildBackoff.
func rebuildBackoff(n int, first time.Duration) time.Duration {
	if n <= 0 || first <= 0 {
		return 0
	}
	d := first
	for i := 1; i < n && d < MaxRebuildBackoff; i++ {
		d *= 2
	}
	return min(d, MaxRebuildBackoff)
}
