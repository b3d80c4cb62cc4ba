package engine

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// This file is the engine's side of the repair loop: what the partition
// cores hold for operators (failing addresses, inboxes, pauses), gathered
// across partitions through their mailboxes, and pauses set and lifted in
// the mailbox order of the partitions they concern.

// Failing returns the addresses whose batch is failing, of function type t
// (every type when t is zero), gathered across partitions in address
// order.
func (e *Engine) Failing(ctx context.Context, t address.TypeName) ([]partition.FailingAddress, error) {
	reps, err := e.inspectAll(ctx, partition.Inspect{Kind: partition.InspectFailing, Type: t})
	if err != nil {
		return nil, err
	}
	var out []partition.FailingAddress
	for _, r := range reps {
		out = append(out, r.Failing...)
	}
	sort.Slice(out, func(i, j int) bool { return addrLess(out[i].Addr, out[j].Addr) })
	return out, nil
}

// Pauses returns the pauses in force, of function type t (every type when
// t is zero): type-level ones (Addr.ID empty) and address-level ones, in
// address order.
func (e *Engine) Pauses(ctx context.Context, t address.TypeName) ([]partition.PauseWrite, error) {
	reps, err := e.inspectAll(ctx, partition.Inspect{Kind: partition.InspectPauses, Type: t})
	if err != nil {
		return nil, err
	}
	seen := map[address.Address]bool{}
	var out []partition.PauseWrite
	for _, r := range reps {
		for _, p := range r.Pauses {
			if !seen[p.Addr] { // every partition holds the type-level ones
				seen[p.Addr] = true
				out = append(out, p)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return addrLess(out[i].Addr, out[j].Addr) })
	return out, nil
}

// Inbox returns what the runtime holds for one address: its pause, the
// batch in flight or failing, the queued messages (from its partition) and
// the pending delayed messages for it (held by their senders' partitions,
// so every partition is asked). With Options.Owned the address's partition
// must be owned (else ErrMoved), and the delayed messages are those the
// owned partitions hold.
func (e *Engine) Inbox(ctx context.Context, a address.Address) (*partition.Inbox, error) {
	own := address.Partition(a.ID, e.n)
	if _, err := e.owner(own); err != nil {
		return nil, err
	}
	reps, err := e.inspectAll(ctx, partition.Inspect{Kind: partition.InspectInbox, Addr: a})
	if err != nil {
		return nil, err
	}
	var out *partition.Inbox
	for _, r := range reps {
		if r.part == own {
			out = r.Inbox
		}
	}
	if out == nil {
		return nil, movedErr(own)
	}
	if pt := e.part(own); pt != nil {
		out.PagedInPartition = int(pt.pg.waiting.Load())
	}
	for _, r := range reps {
		if r.part != own {
			out.Delayed = append(out.Delayed, r.Inbox.Delayed...)
		}
	}
	sort.Slice(out.Delayed, func(i, j int) bool {
		x, y := out.Delayed[i].Key, out.Delayed[j].Key
		if x.Due != y.Due {
			return x.Due < y.Due
		}
		if x.Partition != y.Partition {
			return x.Partition < y.Partition
		}
		return x.ID < y.ID
	})
	return out, nil
}

// inspection is one partition's answer to an inspection.
type inspection struct {
	*partition.Inspection
	part int
}

// inspectAll asks every partition (with Options.Owned, every partition
// owned now) and returns their answers in partition order. Inspections
// are reads: they are never refused for a full queue. A partition revoked
// while it is asked answers ErrMoved.
func (e *Engine) inspectAll(ctx context.Context, ev partition.Inspect) ([]inspection, error) {
	if e.closed.Load() {
		return nil, ErrClosed
	}
	parts := e.ownedParts()
	reps, err := e.askAll(ctx, parts, func(id uint64) partition.Event {
		q := ev
		q.Request = id
		return q
	})
	if err != nil {
		return nil, err
	}
	out := make([]inspection, len(parts))
	for i, p := range parts {
		if reps[i].Inspection == nil {
			return nil, fmt.Errorf("engine: partition %d answered an inspection without one", p.id)
		}
		out[i] = inspection{Inspection: reps[i].Inspection, part: p.id}
	}
	return out, nil
}

// PauseRequest pauses or resumes an address, or every address of a
// function type when Addr.ID is empty.
type PauseRequest struct {
	// Mutation names the operation: its receipt and audit record.
	Mutation  string
	Addr      address.Address
	Resume    bool
	Principal string
	Reason    string
	// ExpiresAt (unix ms), when non-zero, lifts the pause by itself.
	ExpiresAt int64
	// ChangedElsewhere, on a resume of a type given to PauseIn, says
	// partitions asked before lifted the type's pause: TypeOwner's receipt
	// is then committed even if it held none itself.
	ChangedElsewhere bool
}

// Pause sets or lifts a pause in the mailbox order of the partitions it
// concerns, and returns its receipt once the commit that records it is
// durable (a resume of something not paused has a rejected receipt). A
// type-level change is applied by every partition before Pause returns:
// after a pause, no new invocation of the type starts anywhere; with
// Options.Owned every partition must be owned here (PauseIn applies one to
// some of them). It is not refused for a full queue: holding an address is
// what an overloaded runtime needs.
func (e *Engine) Pause(ctx context.Context, r PauseRequest) (partition.Receipt, error) {
	if err := e.writable(); err != nil {
		return partition.Receipt{}, err
	}
	if e.closed.Load() {
		return partition.Receipt{}, ErrClosed
	}
	if r.Addr.ID == "" && e.opts.Owned {
		return e.pauseOwnedType(ctx, r)
	}
	ev := partition.SetPause{Addr: r.Addr, Resume: r.Resume, Mutation: r.Mutation, Principal: r.Principal,
		Reason: r.Reason, ExpiresAt: r.ExpiresAt}
	var targets []*part
	owner := 0
	if r.Addr.ID == "" {
		targets = e.parts
		owner = partition.TypeOwner(r.Addr.Type, e.n)
	} else {
		p, err := e.partOf(r.Addr)
		if err != nil {
			return partition.Receipt{}, err
		}
		targets = []*part{p}
	}
	reps, err := e.askAll(ctx, targets, func(id uint64) partition.Event {
		q := ev
		q.Request = id
		return q
	})
	if err != nil {
		return partition.Receipt{}, err
	}
	rep := reps[owner]
	if rep.Receipt == nil {
		return partition.Receipt{}, fmt.Errorf("engine: pause %s got no receipt", r.Mutation)
	}
	return *rep.Receipt, nil
}

// pauseOwnedType is Pause of a type with Options.Owned: every partition
// must be owned here, and PauseIn applies it, TypeOwner last.
func (e *Engine) pauseOwnedType(ctx context.Context, r PauseRequest) (partition.Receipt, error) {
	owner := partition.TypeOwner(r.Addr.Type, e.n)
	var others []int
	for i := 0; i < e.n; i++ {
		if _, err := e.owner(i); err != nil {
			return partition.Receipt{}, err
		}
		if i != owner {
			others = append(others, i)
		}
	}
	out, err := e.PauseIn(ctx, r, others)
	if err != nil {
		return partition.Receipt{}, err
	}
	if len(out.Moved) > 0 {
		return partition.Receipt{}, movedErr(out.Moved[0])
	}
	r.ChangedElsewhere = out.Changed
	out, err = e.PauseIn(ctx, r, []int{owner})
	if err != nil {
		return partition.Receipt{}, err
	}
	if len(out.Moved) > 0 || out.Receipt == nil {
		return partition.Receipt{}, movedErr(owner)
	}
	return *out.Receipt, nil
}

// PauseOutcome is what PauseIn did.
type PauseOutcome struct {
	// Applied are the partitions (of those asked) that hold the change in
	// a durable commit now.
	Applied []int
	// Moved are the partitions not owned here, or revoked (or rebuilt
	// after an aborted transaction) before their commit was durable: ask
	// their owner.
	Moved []int
	// Changed, for a resume, says some partition of Applied held the
	// type's pause and lifted it.
	Changed bool
	// Receipt is the type's receipt when TypeOwner was asked and applied
	// the change, now or before (then the stored receipt: a repeat of the
	// mutation id changes nothing and writes no second audit record).
	Receipt *partition.Receipt
}

// PauseIn applies a type-level pause or resume (r.Addr.ID empty) in the
// partitions parts, each in its mailbox order, and returns once each of
// them owned here holds it in a durable commit (cluster mode: committed
// to its changelog, so it moves with the partition). Each partition keeps
// its own record of the pause; TypeOwner's share also writes the type's
// receipt and audit record, so a caller applying a change across nodes
// asks TypeOwner last, once every other partition has it, with
// r.ChangedElsewhere set from their outcome. A repeat of a mutation id is
// harmless: another partition writes the same record again, and
// TypeOwner answers the stored receipt (or, while its first application
// is not durable yet, waits for it). Options.Owned only.
func (e *Engine) PauseIn(ctx context.Context, r PauseRequest, parts []int) (PauseOutcome, error) {
	if err := e.writable(); err != nil {
		return PauseOutcome{}, err
	}
	var out PauseOutcome
	switch {
	case !e.opts.Owned:
		return out, errors.New("engine: PauseIn needs Options.Owned (cluster mode); use Pause")
	case r.Addr.ID != "":
		return out, fmt.Errorf("engine: PauseIn applies a pause of a function type, not of the address %s", r.Addr)
	case r.Mutation == "":
		return out, errors.New("engine: PauseIn needs a mutation id")
	case e.closed.Load():
		return out, ErrClosed
	}
	owner := partition.TypeOwner(r.Addr.Type, e.n)
	ev := partition.SetPause{Addr: r.Addr, Resume: r.Resume, Mutation: r.Mutation, Principal: r.Principal,
		Reason: r.Reason, ExpiresAt: r.ExpiresAt, ChangedElsewhere: r.ChangedElsewhere}
	var targets []*part
	seen := map[int]bool{}
	for _, i := range parts {
		if i < 0 || i >= e.n {
			return PauseOutcome{}, fmt.Errorf("%w: %d (the application has %d)", ErrNoSuchPartition, i, e.n)
		}
		if seen[i] {
			continue
		}
		seen[i] = true
		p, err := e.owner(i)
		switch {
		case err != nil:
			out.Moved = append(out.Moved, i)
		case i == owner:
			rc, done, err := e.typeReceipt(ctx, p, r.Mutation)
			switch {
			case err != nil:
				return PauseOutcome{}, err
			case done:
				out.Applied, out.Receipt = append(out.Applied, i), rc
			default:
				targets = append(targets, p)
			}
		default:
			targets = append(targets, p)
		}
	}
	// Each is asked on its own: a partition revoked meanwhile is one to
	// ask elsewhere, not a failure of the others.
	ids := make([]uint64, len(targets))
	chs := make([]chan partition.Reply, len(targets))
	for i, p := range targets {
		id, ch, err := e.ask(p, 0, func(id uint64) partition.Event {
			q := ev
			q.Request = id
			return q
		})
		if err != nil {
			chs[i] = nil
			continue
		}
		ids[i], chs[i] = id, ch
	}
	for i, p := range targets {
		if chs[i] == nil {
			out.Moved = append(out.Moved, p.id)
			continue
		}
		rep, err := e.await(ctx, ids[i], chs[i])
		switch {
		case errors.Is(err, ErrMoved) || errors.Is(err, ErrAborted):
			out.Moved = append(out.Moved, p.id)
			continue
		case err != nil:
			for j := i + 1; j < len(targets); j++ {
				if chs[j] != nil {
					e.waiters.drop(ids[j])
				}
			}
			if p.id == owner {
				e.forgetTypePause(p, r.Mutation)
			}
			return PauseOutcome{}, err
		case rep.Receipt == nil:
			return PauseOutcome{}, fmt.Errorf("engine: pause %s: partition %d answered without a receipt", r.Mutation, p.id)
		}
		out.Applied = append(out.Applied, p.id)
		rc := *rep.Receipt
		if p.id == owner {
			// Its receipt is in the store now: a repeat finds it there.
			e.forgetTypePause(p, r.Mutation)
			out.Receipt = &rc
		} else if rc.Reject == partition.Applied {
			out.Changed = true
		}
	}
	sort.Ints(out.Applied)
	sort.Ints(out.Moved)
	return out, nil
}

// typeReceipt decides whether TypeOwner's part p takes a type-level pause
// or resume with mutation id m: false when m is new (it is marked taken),
// true with the receipt when m was applied before (stored, or taken by
// this assignment: then its receipt is waited for).
func (e *Engine) typeReceipt(ctx context.Context, p *part, m string) (*partition.Receipt, bool, error) {
	p.pauseMu.Lock()
	if !p.pauseIDs[m] {
		_, ok, err := e.db.Receipt(m)
		switch {
		case err != nil:
			p.pauseMu.Unlock()
			return nil, false, err
		case !ok:
			if p.pauseIDs == nil {
				p.pauseIDs = map[string]bool{}
			}
			p.pauseIDs[m] = true
			p.pauseMu.Unlock()
			return nil, false, nil
		}
	}
	p.pauseMu.Unlock()
	st, ok, err := e.WaitReceipt(ctx, m)
	switch {
	case err != nil:
		return nil, false, err
	case !ok || st.GetStatus() == "accepted":
		return nil, false, fmt.Errorf("engine: pause %s: its first application is not durable yet: %w", m, ctx.Err())
	}
	rc := partition.Receipt{Mutation: st.GetMutation(), Addr: fromProtoAddr(st.GetTarget()), Ack: partition.AckCommitted,
		Reject: partition.RejectCode(st.GetReject()), Reason: st.GetReason(), Checkpoint: st.GetCheckpoint(),
		At: st.GetAt(), Partition: p.id}
	return &rc, true, nil
}

// forgetTypePause drops a mutation id that TypeOwner's part took: once
// its receipt is durable (the store answers a repeat from then on), or
// when the caller stopped waiting before its outcome was known (it may be
// taken again).
func (e *Engine) forgetTypePause(p *part, m string) {
	p.pauseMu.Lock()
	delete(p.pauseIDs, m)
	p.pauseMu.Unlock()
}

// askAll posts the event mk makes (given its request id) to each of
// targets, then awaits their replies and returns them in order. When a
// post or an await fails, the waiters of the rest are dropped and the
// error returned.
func (e *Engine) askAll(ctx context.Context, targets []*part, mk func(id uint64) partition.Event) ([]partition.Reply, error) {
	ids := make([]uint64, len(targets))
	chs := make([]chan partition.Reply, len(targets))
	for i, p := range targets {
		id, ch, err := e.ask(p, 0, mk)
		if err != nil {
			for _, id := range ids[:i] {
				e.waiters.drop(id)
			}
			return nil, err
		}
		ids[i], chs[i] = id, ch
	}
	out := make([]partition.Reply, len(targets))
	for i := range targets {
		rep, err := e.await(ctx, ids[i], chs[i])
		if err != nil {
			for _, id := range ids[i+1:] {
				e.waiters.drop(id)
			}
			return nil, err
		}
		out[i] = rep
	}
	return out, nil
}

func addrLess(a, b address.Address) bool {
	if a.Type.Namespace != b.Type.Namespace {
		return a.Type.Namespace < b.Type.Namespace
	}
	if a.Type.Name != b.Type.Name {
		return a.Type.Name < b.Type.Name
	}
	return a.ID < b.ID
}

// loadPauses reads the pauses in force for the restore: each partition
// gets its addresses' pauses and the type-level ones it holds. In embedded
// mode that is every type-level record (TypeOwner writes one for all); in
// cluster mode (own) each partition's own copy alone, the one its
// changelog carries: a copy another partition wrote may be a stale cache
// of a partition that moved away.
func loadPauses(db *store.DB, partitions int, own bool) ([][]partition.PauseWrite, error) {
	out := make([][]partition.PauseWrite, partitions)
	err := db.ScanPauses(func(a address.Address, part int, p *protocol.Pause) error {
		w := partition.PauseWrite{Addr: a, Pause: pauseFromProto(p)}
		switch {
		case a.ID == "" && own:
			if part >= 0 && part < partitions {
				out[part] = append(out[part], w)
			}
			return nil
		case a.ID == "" && part < 0:
			for i := range out {
				out[i] = append(out[i], w)
			}
			return nil
		case a.ID == "":
			return nil // a cluster store's copy, which embedded mode does not read
		}
		i := address.Partition(a.ID, partitions)
		out[i] = append(out[i], w)
		return nil
	})
	return out, err
}

func pauseToProto(p *partition.Pause) *protocol.Pause {
	return &protocol.Pause{Mutation: p.Mutation, Principal: p.Principal, Reason: p.Reason,
		Since: p.Since, ExpiresAt: p.ExpiresAt, Auto: p.Auto}
}

func pauseFromProto(p *protocol.Pause) *partition.Pause {
	return &partition.Pause{Mutation: p.GetMutation(), Principal: p.GetPrincipal(), Reason: p.GetReason(),
		Since: p.GetSince(), ExpiresAt: p.GetExpiresAt(), Auto: p.GetAuto()}
}

// encodePauses writes a commit's pause changes; own is the committing
// partition in cluster mode, where a type-level pause is that partition's
// own copy (store.PutTypePause), else -1.
func encodePauses(b *store.Batch, ws []partition.PauseWrite, own int) {
	for _, w := range ws {
		switch {
		case w.Addr.ID == "" && own >= 0 && w.Pause == nil:
			b.DeleteTypePause(w.Addr.Type, own)
			continue
		case w.Addr.ID == "" && own >= 0:
			b.PutTypePause(w.Addr.Type, own, pauseToProto(w.Pause))
			continue
		}
		if w.Pause == nil {
			b.DeletePause(w.Addr)
		} else {
			b.PutPause(w.Addr, pauseToProto(w.Pause))
		}
	}
}

// repairGauges are the gauges of failing and paused addresses per
// function type, summed over the partitions' reports (partition.Health).
type repairGauges struct {
	failing     *prometheus.GaugeVec
	paused      *prometheus.GaugeVec
	pausedTypes *prometheus.GaugeVec

	mu     sync.Mutex
	byPart map[int]partition.Health
}

func newRepairGauges() *repairGauges {
	return &repairGauges{
		failing: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "statefun_failing_addresses", Help: "Addresses whose batch failed and has not succeeded yet (retrying, or paused), by function type.",
		}, []string{"function"}),
		paused: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "statefun_paused_addresses", Help: "Addresses paused on their own (by an operator or the poison policy), by function type.",
		}, []string{"function"}),
		pausedTypes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "statefun_paused_function_types", Help: "1 while every address of the function type is paused.",
		}, []string{"function"}),
		byPart: map[int]partition.Health{},
	}
}

func (g *repairGauges) collectors() []prometheus.Collector {
	return []prometheus.Collector{g.failing, g.paused, g.pausedTypes}
}

// report takes a partition's new Health and sets the sums.
func (g *repairGauges) report(p int, h partition.Health) {
	g.mu.Lock()
	defer g.mu.Unlock()
	old := g.byPart[p]
	g.byPart[p] = h
	touched := map[address.TypeName]bool{}
	for _, m := range []map[address.TypeName]int{old.Failing, old.Paused, h.Failing, h.Paused} {
		for t := range m {
			touched[t] = true
		}
	}
	for _, t := range old.PausedTypes {
		touched[t] = true
	}
	for _, t := range h.PausedTypes {
		touched[t] = true
	}
	for t := range touched {
		var failing, paused int
		typePaused := false
		for _, ph := range g.byPart {
			failing += ph.Failing[t]
			paused += ph.Paused[t]
			for _, pt := range ph.PausedTypes {
				typePaused = typePaused || pt == t
			}
		}
		g.failing.WithLabelValues(t.String()).Set(float64(failing))
		g.paused.WithLabelValues(t.String()).Set(float64(paused))
		v := 0.0
		if typePaused {
			v = 1
		}
		g.pausedTypes.WithLabelValues(t.String()).Set(v)
	}
}
