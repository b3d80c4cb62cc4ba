package engine

import (
	"context"
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
	ids := make([]uint64, len(parts))
	chs := make([]chan partition.Reply, len(parts))
	for i, p := range parts {
		id, ch, err := e.ask(p, 0, func(id uint64) partition.Event {
			q := ev
			q.Request = id
			return q
		})
		if err != nil {
			for _, id := range ids[:i] {
				e.waiters.drop(id)
			}
			return nil, err
		}
		ids[i], chs[i] = id, ch
	}
	out := make([]inspection, len(parts))
	for i, p := range parts {
		r, err := e.await(ctx, ids[i], chs[i])
		if err != nil {
			for _, id := range ids[i+1:] {
				e.waiters.drop(id)
			}
			return nil, err
		}
		if r.Inspection == nil {
			return nil, fmt.Errorf("engine: partition %d answered an inspection without one", p.id)
		}
		out[i] = inspection{Inspection: r.Inspection, part: p.id}
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
}

// Pause sets or lifts a pause in the mailbox order of the partitions it
// concerns, and returns its receipt once the commit that records it is
// durable (a resume of something not paused has a rejected receipt). A
// type-level change is applied by every partition before Pause returns:
// after a pause, no new invocation of the type starts anywhere. It is not
// refused for a full queue: holding an address is what an overloaded
// runtime needs.
func (e *Engine) Pause(ctx context.Context, r PauseRequest) (partition.Receipt, error) {
	if e.closed.Load() {
		return partition.Receipt{}, ErrClosed
	}
	ev := partition.SetPause{Addr: r.Addr, Resume: r.Resume, Mutation: r.Mutation, Principal: r.Principal,
		Reason: r.Reason, ExpiresAt: r.ExpiresAt}
	var targets []*part
	owner := 0
	if r.Addr.ID == "" {
		// Every partition applies a type-level change: with
		// Options.Owned, all of them must be owned here.
		for i := 0; i < e.n; i++ {
			p, err := e.owner(i)
			if err != nil {
				return partition.Receipt{}, err
			}
			targets = append(targets, p)
		}
		owner = partition.TypeOwner(r.Addr.Type, e.n)
	} else {
		p, err := e.partOf(r.Addr)
		if err != nil {
			return partition.Receipt{}, err
		}
		targets = []*part{p}
	}
	ids := make([]uint64, len(targets))
	chs := make([]chan partition.Reply, len(targets))
	for i, p := range targets {
		id, ch, err := e.ask(p, 0, func(id uint64) partition.Event {
			q := ev
			q.Request = id
			return q
		})
		if err != nil {
			for _, id := range ids[:i] {
				e.waiters.drop(id)
			}
			return partition.Receipt{}, err
		}
		ids[i], chs[i] = id, ch
	}
	var rc partition.Receipt
	for i := range targets {
		rep, err := e.await(ctx, ids[i], chs[i])
		if err != nil {
			for _, id := range ids[i+1:] {
				e.waiters.drop(id)
			}
			return partition.Receipt{}, err
		}
		if i == owner {
			if rep.Receipt == nil {
				return partition.Receipt{}, fmt.Errorf("engine: pause %s got no receipt", r.Mutation)
			}
			rc = *rep.Receipt
		}
	}
	return rc, nil
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
// gets its addresses' pauses and every type-level one.
func loadPauses(db *store.DB, partitions int) ([][]partition.PauseWrite, error) {
	out := make([][]partition.PauseWrite, partitions)
	err := db.ScanPauses(func(a address.Address, p *protocol.Pause) error {
		w := partition.PauseWrite{Addr: a, Pause: pauseFromProto(p)}
		if a.ID == "" {
			for i := range out {
				out[i] = append(out[i], w)
			}
			return nil
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

// encodePauses writes a commit's pause changes.
func encodePauses(b *store.Batch, ws []partition.PauseWrite) {
	for _, w := range ws {
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
