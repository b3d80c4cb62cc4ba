// Package cycle is the commit cycle of a cluster-mode node as a
// deterministic state machine (docs/explanation/cluster.md, "The commit protocol"):
// which partitions the node serves, restores and rebuilds, and, for each
// transaction, what it takes, whether it must abort and why, whether the
// group membership must be checked before it ends, how it ends, and what
// follows from its outcome — decided without I/O, without a clock of its
// own (time arrives as an argument) and without goroutines.
//
// Two shells drive the same Machine: the node's Kafka session
// (internal/cluster/session), which does the Kafka and engine I/O each
// decision calls for, and the session's test double over an in-memory
// Kafka (internal/cluster/sessiontest), which the engine's cluster tests
// and the seeded simulation (internal/sim) run. So the simulation's
// crashes, aborts, revocations, membership losses and fences exercise the
// decisions production makes, not a copy of them.
//
// A Machine is used from one goroutine.
package cycle

import (
	"fmt"
	"slices"
	"time"
)

// Reason is why a transaction aborts. Its text is the label of
// statefun_cluster_aborts_total.
type Reason string

// The reasons a transaction aborts.
const (
	// NoReason: the transaction may commit.
	NoReason Reason = ""
	// Unowned: records were polled for a partition that is not serving.
	Unowned Reason = "unowned"
	// EngineRefused: the engine refused polled records.
	EngineRefused Reason = "engine"
	// IngressFailed: an ingress record could not be routed.
	IngressFailed Reason = "ingress"
	// EncodeFailed: a request, or a partition's changelog records, failed
	// to encode.
	EncodeFailed Reason = "encode"
	// ProduceRefused: Kafka refused a record of the transaction.
	ProduceRefused Reason = "produce"
	// Fenced: the node is no longer the group member it was when the
	// transaction began, or the group moved partitions meanwhile.
	Fenced Reason = "fence"
	// Group: End did not commit (a rebalance revoked partitions, or Kafka
	// refused the offset commit or EndTxn).
	Group Reason = "group"
	// Unconfirmed: ending failed with its outcome unknown; the shell
	// aborted what may still be open.
	Unconfirmed Reason = "unconfirmed"
	// Unsettled: the Kafka client had not yet taken in the partitions of
	// a topic the transaction produced to when it was to end, so a
	// commit could not be trusted to include their records.
	Unsettled Reason = "unsettled"
)

// Explain says what an abort for r means, for the errors of the requests
// the transaction carried.
func (r Reason) Explain() string {
	switch r {
	case Unowned:
		return "records were polled for a partition this node does not serve"
	case EngineRefused:
		return "the engine refused polled records"
	case IngressFailed:
		return "an ingress record could not be routed"
	case EncodeFailed:
		return "a request failed to encode"
	case ProduceRefused:
		return "Kafka refused a record of it"
	case Fenced:
		return "this node was no longer the group member it was when it began"
	case Group:
		return "a rebalance revoked partitions, or Kafka refused its offset commit or EndTxn"
	case Unconfirmed:
		return "ending it failed with its outcome unknown"
	case Unsettled:
		return "the Kafka client had not settled the partitions it produced to"
	}
	return string(r)
}

// countsTowardGiveUp reports whether an abort for r is Kafka refusing
// this node's commit itself, which moving its partitions may cure; a
// refused content (a record, an encoding) would be refused on any node.
func (r Reason) countsTowardGiveUp() bool { return r == Group || r == Fenced }

// Config configures a Machine.
type Config struct {
	// RebuildBackoff is the first wait before rebuilding a partition whose
	// own work aborted the transaction; it doubles with each such abort in
	// a row, up to MaxRebuildBackoff. Zero or negative: no wait.
	RebuildBackoff time.Duration
	// GiveUpAfter is how long commits may be refused in a row (Reason
	// Group or Fenced, none committing) before Finish returns ErrGaveUp.
	// Negative: never.
	GiveUpAfter time.Duration
	// Interval is the longest a cycle polls before its transaction begins
	// (PollFor); MinGap the shortest pause between one transaction's end
	// and the next one's begin while work waits. Zero or negative: their
	// defaults, DefaultInterval and DefaultMinGap.
	Interval time.Duration
	MinGap   time.Duration
}

// MaxRebuildBackoff bounds the wait before rebuilding a partition whose
// own work keeps aborting the transaction.
const MaxRebuildBackoff = 30 * time.Second

// RestoreRetry is the wait before restoring a partition again after its
// restore failed.
const RestoreRetry = time.Second

// refusalBackoff is the wait before the rebuilds after the n-th
// transaction in a row Kafka refused to commit: none after the first (a
// rebalance aborts one, and the partitions must serve again at once), then
// 100 ms doubling up to 5 s. Without it a node whose every commit Kafka
// refuses at once would abort and rebuild a thousand times a second until
// it gives up.
func refusalBackoff(n int) time.Duration {
	if n <= 1 {
		return 0
	}
	d := 100 * time.Millisecond
	for i := 2; i < n && d < 5*time.Second; i++ {
		d *= 2
	}
	return min(d, 5*time.Second)
}

// Machine is one node's commit cycle. The zero value is not usable; call
// New.
type Machine struct {
	cfg   Config
	parts map[int32]*part
	gen   uint64 // the last restore generation handed out
	rearm bool   // a revocation was heard; End must run before the next one can be
	txn   *Txn   // the open transaction, if any
	give  giveUp
	// refused counts the transactions in a row Kafka refused to commit
	// (Reason Group or Fenced): their rebuilds back off (refusalBackoff).
	refused int
	// lastEnd is when the last transaction ended, lastDur how long it
	// took from its Committing: PollFor's gap follows them.
	lastEnd time.Time
	lastDur time.Duration
}

// part is a partition the group assigned to the node.
type part struct {
	serving bool   // restored and handed to the engine
	gen     uint64 // the generation of its current restore
	full    bool   // fetching paused: the engine's partition is full
	strikes int    // transactions in a row its own work aborted
}

// New returns a Machine that owns no partition.
func New(cfg Config) *Machine {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.MinGap <= 0 {
		cfg.MinGap = DefaultMinGap
	}
	return &Machine{cfg: cfg, parts: map[int32]*part{}, give: giveUp{after: cfg.GiveUpAfter}}
}

// Restore is a restore of a partition to start: after a wait, bring its
// store data to the end of its changelog, then report Restored with Gen.
type Restore struct {
	P   int32
	Gen uint64
	// After is the wait before the restore starts.
	After time.Duration
	// Retry: the previous restore of this generation failed.
	Retry bool
	// Strikes, for a rebuild its own work caused, counts the transactions
	// in a row its work aborted (After is the back-off); zero otherwise.
	Strikes int
}

// Drop is a partition the node stops serving or restoring.
type Drop struct {
	P int32
	// Serving: the engine serves it and must revoke it; otherwise its
	// restore is under way and must be cancelled.
	Serving bool
	// Full: its fetching was paused for a full queue.
	Full bool
}

// Assigned records partitions the group assigned to the node. A partition
// assigned again before its revocation was heard is dropped first. It
// returns those drops and the restores to start.
func (m *Machine) Assigned(ps []int32) (drops []Drop, restores []Restore) {
	for _, p := range ps {
		if d, ok := m.drop(p); ok {
			drops = append(drops, d)
		}
		m.parts[p] = &part{}
		restores = append(restores, m.restore(p, 0, false, 0))
	}
	return drops, restores
}

// Revoked records partitions the group revoked (lost: without a clean
// revocation) and returns the ones the node served or restored. Any
// revocation, even of none of these, must be followed by an End before
// the group transact session reports the next one (Rearm). A transaction
// open now must not commit without its membership checked (MovesHeard).
func (m *Machine) Revoked(ps []int32) []Drop {
	m.rearm = true
	if m.txn != nil && len(ps) > 0 {
		m.txn.MovesHeard()
	}
	var drops []Drop
	for _, p := range ps {
		if d, ok := m.drop(p); ok {
			drops = append(drops, d)
		}
	}
	return drops
}

func (m *Machine) drop(p int32) (Drop, bool) {
	pt := m.parts[p]
	if pt == nil {
		return Drop{}, false
	}
	delete(m.parts, p)
	return Drop{P: p, Serving: pt.serving, Full: pt.full}, true
}

func (m *Machine) restore(p int32, after time.Duration, retry bool, strikes int) Restore {
	pt := m.parts[p]
	if !retry {
		m.gen++
		pt.gen = m.gen
	}
	pt.serving = false
	return Restore{P: p, Gen: pt.gen, After: after, Retry: retry, Strikes: strikes}
}

// RestoreOutcome is what to do with a finished restore.
type RestoreOutcome int

// The outcomes of a restore.
const (
	// Stale: the partition was dropped or its restore started over since;
	// ignore the result.
	Stale RestoreOutcome = iota
	// RestoreAgain: the restore failed; start the returned one.
	RestoreAgain
	// Serve: hand the partition to the engine, then call Serving.
	Serve
)

// Restored records that the restore of partition p with generation gen
// ended, failed or not.
func (m *Machine) Restored(p int32, gen uint64, failed bool) (RestoreOutcome, Restore) {
	pt := m.parts[p]
	if pt == nil || pt.gen != gen || pt.serving {
		return Stale, Restore{}
	}
	if failed {
		return RestoreAgain, m.restore(p, RestoreRetry, true, 0)
	}
	return Serve, Restore{}
}

// Serving records that the engine took partition p, restored; full says
// its queue is full already (its fetching stays paused until Drained). It
// returns whether fetching of p may resume now.
func (m *Machine) Serving(p int32, full bool) (resume bool) {
	pt := m.parts[p]
	if pt == nil {
		return false
	}
	pt.serving = true
	pt.full = full
	return !full
}

// IsServing reports whether partition p is restored and served.
func (m *Machine) IsServing(p int32) bool {
	pt := m.parts[p]
	return pt != nil && pt.serving
}

// Restoring reports whether partition p's restore of generation gen is the
// one the Machine waits for.
func (m *Machine) Restoring(p int32, gen uint64) bool {
	pt := m.parts[p]
	return pt != nil && !pt.serving && pt.gen == gen
}

// Owned returns the partitions assigned to the node, serving or restoring,
// in order.
func (m *Machine) Owned() []int32 {
	ps := make([]int32, 0, len(m.parts))
	for p := range m.parts {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps
}

// Filled records that partition p's queue is full after records were
// handed to it. It returns whether fetching of p must pause now (it was
// not paused for that already).
func (m *Machine) Filled(p int32) (pause bool) {
	pt := m.parts[p]
	if pt == nil || pt.full {
		return false
	}
	pt.full = true
	return true
}

// Paused returns the partitions whose fetching is paused for a full
// queue, in order: the shell asks the engine which of them drained.
func (m *Machine) Paused() []int32 {
	var ps []int32
	for p, pt := range m.parts {
		if pt.full {
			ps = append(ps, p)
		}
	}
	slices.Sort(ps)
	return ps
}

// Drained records that paused partition p's queue is no longer full. It
// returns whether its fetching resumes now: not while it restores (its
// restore resumes it).
func (m *Machine) Drained(p int32) (resume bool) {
	pt := m.parts[p]
	if pt == nil || !pt.full {
		return false
	}
	pt.full = false
	return pt.serving
}

// Rearm reports whether a revocation was heard that no End has followed;
// the shell must end the group transact session's state before its next
// poll (no transaction is open then). It clears the flag.
func (m *Machine) Rearm() bool {
	r := m.rearm
	m.rearm = false
	return r
}

// Open returns the open transaction, or nil.
func (m *Machine) Open() *Txn { return m.txn }

// Begin opens the decisions of the next transaction, before its records
// are polled; Began records the group member the node is when the Kafka
// transaction begins. It panics if one is open: a Machine runs one
// transaction at a time.
func (m *Machine) Begin() *Txn {
	if m.txn != nil {
		panic("cycle: Begin with a transaction open")
	}
	m.txn = &Txn{m: m, member: "", gen: -1, touched: map[int32]bool{}, culprits: map[int32]bool{}}
	return m.txn
}

// describe names a partition's state, for errors.
func (m *Machine) describe(p int32) string {
	switch pt := m.parts[p]; {
	case pt == nil:
		return "is not assigned to this node"
	case !pt.serving:
		return "is restoring on this node"
	default:
		return "is served by this node"
	}
}

// Describe says, for a test's failure message, what the Machine holds.
func (m *Machine) Describe() string {
	s := ""
	for _, p := range m.Owned() {
		pt := m.parts[p]
		s += fmt.Sprintf("p%d(serving=%v gen=%d full=%v strikes=%d) ", p, pt.serving, pt.gen, pt.full, pt.strikes)
	}
	return fmt.Sprintf("%srearm=%v open=%v", s, m.rearm, m.txn != nil)
}
