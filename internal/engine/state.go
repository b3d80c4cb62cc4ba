package engine

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
)

// This file is the engine's side of the state access API: reads and
// mutations go through the mailbox of the partition that owns the address.

// waiters routes replies and durable receipts to the callers waiting on them.
type waiters struct {
	mu   sync.Mutex
	next uint64
	m    map[uint64]waiter
	// changed is closed and replaced whenever receipts became durable, so
	// long-polls of a receipt wake up and look again.
	changed chan struct{}
}

// waiter is one caller waiting on a partition's reply.
type waiter struct {
	ch        chan partition.Reply
	partition int
}

func newWaiters() *waiters {
	return &waiters{m: map[uint64]waiter{}, changed: make(chan struct{})}
}

// add registers a caller waiting on partition p.
func (w *waiters) add(p int) (uint64, chan partition.Reply) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.next++
	ch := make(chan partition.Reply, 1)
	w.m[w.next] = waiter{ch: ch, partition: p}
	return w.next, ch
}

// failPartition answers every caller waiting on partition p with err.
func (w *waiters) failPartition(p int, err error) {
	w.mu.Lock()
	var chs []chan partition.Reply
	for id, wt := range w.m {
		if wt.partition == p {
			delete(w.m, id)
			chs = append(chs, wt.ch)
		}
	}
	w.mu.Unlock()
	for _, ch := range chs {
		ch <- partition.Reply{Err: err}
	}
}

func (w *waiters) drop(id uint64) {
	w.mu.Lock()
	delete(w.m, id)
	w.mu.Unlock()
}

func (w *waiters) deliver(r partition.Reply) {
	w.mu.Lock()
	wt, ok := w.m[r.Request]
	delete(w.m, r.Request)
	w.mu.Unlock()
	if ok {
		wt.ch <- r
	}
}

func (w *waiters) receiptsChanged() {
	w.mu.Lock()
	close(w.changed)
	w.changed = make(chan struct{})
	w.mu.Unlock()
}

func (w *waiters) watch() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed
}

// partOf returns the part that owns an address and takes work, or
// ErrMoved (cluster mode).
func (e *Engine) partOf(a address.Address) (*part, error) {
	return e.owner(address.Partition(a.ID, e.n))
}

func (e *Engine) await(ctx context.Context, id uint64, ch chan partition.Reply) (partition.Reply, error) {
	select {
	case r := <-ch:
		return r, r.Err
	case <-ctx.Done():
		e.waiters.drop(id)
		return partition.Reply{}, ctx.Err()
	case <-e.ctx.Done():
		e.waiters.drop(id)
		return partition.Reply{}, e.stopErr(nil)
	}
}

// Read returns the applied entries of an address (one state, or all when
// state is empty) and the states its type registered. It never waits behind
// an invocation in flight.
func (e *Engine) Read(ctx context.Context, a address.Address, state string) (partition.Reply, error) {
	if e.closed.Load() {
		return partition.Reply{}, ErrClosed
	}
	p, err := e.partOf(a)
	if err != nil {
		return partition.Reply{}, err
	}
	// Wall time, not Options.Now: that is the partitions' clock, which a
	// test may hold still (or stall) while requests queue.
	start := time.Now()
	if rep, ok := e.readStore(p, a, state); ok {
		if rep.Err != nil {
			return partition.Reply{}, rep.Err
		}
		e.m.observeStateRequest("read", time.Since(start))
		return rep, nil
	}
	// A read queues behind no message: only reads flooding the mailbox
	// are refused, not those of a partition whose backlog is full.
	if p.mailboxFull() {
		return partition.Reply{}, ErrBusy
	}
	e.m.stateReads.WithLabelValues("mailbox").Inc()
	id, ch, err := e.ask(p, 0, func(id uint64) partition.Event { return partition.ReadState{Request: id, Addr: a, State: state} })
	if err != nil {
		return partition.Reply{}, err
	}
	rep, err := e.await(ctx, id, ch)
	if err == nil {
		e.m.observeStateRequest("read", time.Since(start))
	}
	return rep, err
}

// readStore answers a read from the store on the caller's goroutine when
// everything applied to a is durable (pendingwrites.go); ok is false when
// the read must take its turn in the partition's mailbox.
func (e *Engine) readStore(p *part, a address.Address, state string) (rep partition.Reply, ok bool) {
	if !p.pending.clean(a) {
		return partition.Reply{}, false
	}
	e.m.stateReads.WithLabelValues("store").Inc()
	return partition.ReadFrom(durableReader{storeReader{db: e.db}, e.specs}, p.now().UnixMilli(), a, state), true
}

// Mutate applies an operator mutation in the address's mailbox order and
// returns its receipt when m.Ack says: at once for AckAccepted (the
// mutation is durable in the inbox), when applied for AckApplied, when the
// commit carrying it is durable for AckCommitted. It returns ErrBusy when
// the partition's queue is full.
func (e *Engine) Mutate(ctx context.Context, m partition.Mutation) (partition.Receipt, error) {
	if err := e.writable(); err != nil {
		return partition.Receipt{}, err
	}
	start := time.Now()
	pm, err := e.mutate(m)
	if err != nil {
		return partition.Receipt{}, err
	}
	rc, err := pm.wait(ctx)
	if err == nil {
		e.m.observeStateRequest(ackKind(m.Ack), time.Since(start))
	}
	return rc, err
}

// ackKind names an ack mode as the API's ?ack= does, for metrics.
func ackKind(a partition.AckMode) string {
	switch a {
	case AckApplied:
		return "applied"
	case AckAccepted:
		return "accepted"
	default:
		return "committed"
	}
}

// mutationSize is what a mutation holds in memory, roughly.
func mutationSize(m partition.Mutation) int {
	return len(m.ID) + len(m.Addr.ID) + len(m.State) + len(m.Typename) + len(m.Value) + len(m.Principal) + len(m.Reason) + len(m.Reverts)
}

// AckAccepted and the other modes, re-exported for callers of Mutate.
const (
	AckCommitted = partition.AckCommitted
	AckApplied   = partition.AckApplied
	AckAccepted  = partition.AckAccepted
)

// pendingMutation is a mutation handed to its partition (or, accepted, to
// the committer) whose caller has not heard back yet.
type pendingMutation struct {
	e  *Engine
	m  partition.Mutation
	id uint64
	ch chan partition.Reply // AckApplied, AckCommitted
	// req is the inbox write of an AckAccepted mutation, at its time.
	req *ingressReq
	at  int64
}

// mutate admits a mutation and starts it.
func (e *Engine) mutate(m partition.Mutation) (*pendingMutation, error) {
	if e.closed.Load() {
		return nil, ErrClosed
	}
	if err := e.admit(); err != nil {
		return nil, err
	}
	p, err := e.partOf(m.Addr)
	if err != nil {
		return nil, err
	}
	if e.full(p) {
		return nil, ErrBusy
	}
	if m.Ack == AckAccepted {
		return e.accept(p, m)
	}
	id, ch, err := e.ask(p, mutationSize(m), func(id uint64) partition.Event {
		m.Request = id
		return partition.Mutate{Mutation: &m}
	})
	if err != nil {
		return nil, err
	}
	return &pendingMutation{e: e, m: m, id: id, ch: ch}, nil
}

// accept makes a mutation durable in the target's inbox, with an accepted
// receipt, then hands it to the partition.
func (e *Engine) accept(p *part, m partition.Mutation) (*pendingMutation, error) {
	req := e.newIngressReq(p, &protocol.Envelope{Mutation: mutationToProto(m)})
	now := e.opts.Now().UnixMilli()
	req.receipt = &protocol.Receipt{Mutation: m.ID, Status: "accepted", At: now, Target: toProtoAddr(m.Addr), State: m.State}
	if err := e.submit(req); err != nil {
		return nil, err
	}
	return &pendingMutation{e: e, m: m, req: req, at: now}, nil
}

// wait returns the receipt when the mutation's ack mode says.
func (pm *pendingMutation) wait(ctx context.Context) (partition.Receipt, error) {
	if pm.req != nil {
		select {
		case err := <-pm.req.done:
			return pm.accepted(err)
		case <-ctx.Done():
			return partition.Receipt{}, ctx.Err()
		}
	}
	r, err := pm.e.await(ctx, pm.id, pm.ch)
	return pm.receipt(r, err)
}

// poll is wait without blocking: done is false while the answer is not in.
func (pm *pendingMutation) poll() (rc partition.Receipt, done bool, err error) {
	if pm.req != nil {
		select {
		case err := <-pm.req.done:
			rc, err := pm.accepted(err)
			return rc, true, err
		default:
			return partition.Receipt{}, false, nil
		}
	}
	select {
	case r := <-pm.ch:
		rc, err := pm.receipt(r, r.Err)
		return rc, true, err
	default:
		if pm.e.ctx.Err() != nil {
			pm.e.waiters.drop(pm.id)
			return partition.Receipt{}, true, pm.e.stopErr(nil)
		}
		return partition.Receipt{}, false, nil
	}
}

func (pm *pendingMutation) accepted(err error) (partition.Receipt, error) {
	if err != nil {
		return partition.Receipt{}, err
	}
	return partition.Receipt{Mutation: pm.m.ID, Ack: AckAccepted, At: pm.at}, nil
}

func (pm *pendingMutation) receipt(r partition.Reply, err error) (partition.Receipt, error) {
	if err != nil {
		return partition.Receipt{}, err
	}
	if r.Receipt == nil {
		return partition.Receipt{}, fmt.Errorf("engine: mutation %s got no receipt", pm.m.ID)
	}
	return *r.Receipt, nil
}

// WaitReceipt returns the receipt of a mutation once it is final
// (committed or rejected) and durable, or the latest durable one when ctx
// ends first.
func (e *Engine) WaitReceipt(ctx context.Context, id string) (*protocol.Receipt, bool, error) {
	for {
		changed := e.waiters.watch()
		r, ok, err := e.db.Receipt(id)
		if err != nil {
			return nil, false, err
		}
		if ok && r.GetStatus() != "accepted" {
			return e.durableReceipt(ctx, r)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return r, ok, nil
		case <-e.ctx.Done():
			return r, ok, e.stopErr(nil)
		}
	}
}

// durableReceipt returns r, a final receipt read from the store, once the
// commit that wrote it is durable. The committer writes a group, which
// the store shows at once, before its sync ends; a receipt read then says
// committed (or rejected) of a commit a crash can still take back, and
// the mutation would be applied again after the restart, perhaps with
// another outcome. The wait is the rest of one sync, as a rule. When ctx
// ends first, r is answered as what is durable: the mutation accepted.
//
// In cluster mode the store holds only what committed transactions wrote
// (the changelog is the log), so what it shows is durable.
func (e *Engine) durableReceipt(ctx context.Context, r *protocol.Receipt) (*protocol.Receipt, bool, error) {
	if e.slots != nil {
		return r, true, nil
	}
	p := address.Partition(r.GetTarget().GetId(), e.n)
	if r.Partition != nil {
		p = int(r.GetPartition())
	}
	_, reached, err := e.WaitDurable(ctx, p, r.GetCheckpoint())
	switch {
	case err != nil:
		return nil, false, err
	case !reached:
		return &protocol.Receipt{Mutation: r.GetMutation(), Status: "accepted", At: r.GetAt(), Target: r.GetTarget(),
			State: r.GetState(), Partition: r.Partition}, true, nil
	}
	return r, true, nil
}

// mutationToProto is the stored form of an accepted mutation: everything
// the core needs to apply it at its turn (mutation_test.go checks that no
// field of partition.Mutation is left out, but Request and Ack, which belong
// to the caller waiting in this process).
func mutationToProto(m partition.Mutation) *protocol.StateMutation {
	p := &protocol.StateMutation{
		Id: m.ID, Target: toProtoAddr(m.Addr), State: m.State, Op: int32(m.Op), Typename: m.Typename,
		Value: m.Value, IfMatch: m.IfMatch, IfNoneMatch: m.IfNoneMatch, Principal: m.Principal,
		Reason: m.Reason, Reverts: m.Reverts,
		IfMatchTags: conditionToProto(m.IfMatchTags), IfNoneMatchTags: conditionToProto(m.IfNoneMatchTags),
	}
	for _, e := range m.Image {
		p.Image = append(p.Image, &protocol.RestoreEntry{State: e.State, Absent: e.Absent, Typename: e.Typename, Value: e.Value, Version: e.Version})
	}
	if r := m.Repair; r != nil {
		p.Repair = &protocol.MessageRepair{Argument: r.Argument, Messages: r.Messages, Timers: timerImages(r.Timers)}
		if r.Key != nil {
			p.Repair.Key = &protocol.InboxKey{Partition: int32(r.Key.Partition), Source: r.Key.Source, Seq: r.Key.Seq}
		}
		for _, e := range r.Entries {
			p.Repair.Entries = append(p.Repair.Entries, &protocol.EntryImage{State: e.State, Typename: e.Entry.Typename,
				Value: e.Entry.Value, Version: e.Entry.Version, ExpiresAt: e.Entry.ExpiresAt})
		}
	}
	return p
}

// mutationFromProto is the accepted mutation p stores; nobody waits for
// its answer (Request 0, AckAccepted).
func mutationFromProto(p *protocol.StateMutation) *partition.Mutation {
	m := &partition.Mutation{
		ID: p.GetId(), Addr: fromProtoAddr(p.GetTarget()), State: p.GetState(), Op: partition.MutationOp(p.GetOp()),
		Typename: p.GetTypename(), Value: p.GetValue(), IfMatch: p.GetIfMatch(), IfNoneMatch: p.GetIfNoneMatch(),
		Ack: AckAccepted, Principal: p.GetPrincipal(), Reason: p.GetReason(), Reverts: p.GetReverts(),
		IfMatchTags: conditionFromProto(p.GetIfMatchTags()), IfNoneMatchTags: conditionFromProto(p.GetIfNoneMatchTags()),
	}
	for _, e := range p.GetImage() {
		m.Image = append(m.Image, partition.RestoreEntry{State: e.GetState(), Absent: e.GetAbsent(), Typename: e.GetTypename(), Value: e.GetValue(), Version: e.GetVersion()})
	}
	if r := p.GetRepair(); r != nil {
		m.Repair = &partition.MessageRepair{Argument: r.GetArgument(), Messages: r.GetMessages(), Timers: TimersFromImages(r.GetTimers())}
		if k := r.GetKey(); k != nil {
			m.Repair.Key = &partition.InboxKey{Partition: int(k.GetPartition()), Source: k.GetSource(), Seq: k.GetSeq()}
		}
		for _, e := range r.GetEntries() {
			m.Repair.Entries = append(m.Repair.Entries, partition.StateEntry{State: e.GetState(), Entry: partition.Entry{
				Typename: e.GetTypename(), Value: e.GetValue(), Version: e.GetVersion(), ExpiresAt: e.GetExpiresAt()}})
		}
	}
	return m
}

func conditionToProto(c *partition.Condition) *protocol.Condition {
	if c == nil {
		return nil
	}
	return &protocol.Condition{Any: c.Any, Versions: c.Versions}
}

func conditionFromProto(p *protocol.Condition) *partition.Condition {
	if p == nil {
		return nil
	}
	return &partition.Condition{Any: p.GetAny(), Versions: p.GetVersions()}
}

func toProtoAddr(a address.Address) *protocol.Address {
	return &protocol.Address{Namespace: a.Type.Namespace, Type: a.Type.Name, Id: a.ID}
}

func fromProtoAddr(a *protocol.Address) address.Address {
	return address.Address{Type: address.TypeName{Namespace: a.GetNamespace(), Name: a.GetType()}, ID: a.GetId()}
}

// receiptToProto is the durable form of a receipt the core decided.
func receiptToProto(r partition.Receipt) *protocol.Receipt {
	p := &protocol.Receipt{}
	fillReceipt(p, r, toProtoAddr(r.Addr))
	return p
}

// fillReceipt sets the fields of p, a zero receipt, from r.
func fillReceipt(p *protocol.Receipt, r partition.Receipt, target *protocol.Address) {
	p.Mutation, p.Status, p.Reject, p.Reason = r.Mutation, "committed", int32(r.Reject), r.Reason
	p.Checkpoint, p.Version, p.PreviousVersion, p.At = r.Checkpoint, r.Version, r.PreviousVersion, r.At
	p.Target, p.State = target, r.State
	if r.Reject != partition.Applied {
		p.Status = "rejected"
	}
}

func auditToProto(a partition.AuditRecord) *protocol.AuditRecord {
	p := &protocol.AuditRecord{}
	fillAudit(p, a, toProtoAddr(a.Addr))
	return p
}

// fillAudit sets the fields of p, a zero audit record, from a.
func fillAudit(p *protocol.AuditRecord, a partition.AuditRecord, target *protocol.Address) {
	p.Mutation, p.At, p.Principal, p.Reason, p.Reverts = a.Mutation, a.At, a.Principal, a.Reason, a.Reverts
	p.Target, p.State, p.Op, p.Version, p.Typename = target, a.State, int32(a.Op), a.Version, a.Typename
	if b := a.Before; b != nil {
		p.HadBefore, p.BeforeTypename, p.BeforeValue, p.BeforeVersion, p.BeforeExpiresAt = true, b.Typename, b.Value, b.Version, b.ExpiresAt
	}
	p.Messages, p.Timers = a.Messages, timerImages(a.Timers)
}

// KnownTypes returns every function type with registered states.
func (e *Engine) KnownTypes() []address.TypeName { return e.specs.types() }

// SpecsOf returns the registered states of a function type.
func (e *Engine) SpecsOf(t address.TypeName) []partition.Spec { return e.specs.get(t) }
