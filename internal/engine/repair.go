package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"google.golang.org/protobuf/proto"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// This file is the engine's side of the repair of an inbox: skip, edit and
// cancel a message, cancel a delayed message, delete an address, revert a
// cancel or a delete (partition/repair.go decides them in the mailbox
// order), and the message dead letters a skip leaves: read, and re-sent as
// new messages.

// Repair applies a repair mutation (m.Repair set: a skip, edit or cancel
// of a message, a delete of an address, a reinstate) in the address's
// mailbox order and returns its receipt once the commit that carries it is
// durable. Like a pause, it is not refused for a full queue: repairing
// an address is what an overloaded runtime needs.
func (e *Engine) Repair(ctx context.Context, m partition.Mutation) (partition.Receipt, error) {
	if err := e.writable(); err != nil {
		return partition.Receipt{}, err
	}
	if e.closed.Load() {
		return partition.Receipt{}, ErrClosed
	}
	if m.Repair == nil {
		return partition.Receipt{}, errors.New("engine: a repair without its MessageRepair")
	}
	if m.Op == partition.OpEditMessage {
		if err := partition.CheckDeliverable(e.opts.MaxBatchBytes, m.Addr.Type, nil, m.Repair.Argument); err != nil {
			return partition.Receipt{}, fmt.Errorf("%w: the edited message %v", ErrTooLarge, err)
		}
	}
	m.Ack = AckCommitted
	p, err := e.partOf(m.Addr)
	if err != nil {
		return partition.Receipt{}, err
	}
	id, ch, err := e.ask(p, 0, func(id uint64) partition.Event {
		m.Request = id
		return partition.Mutate{Mutation: &m}
	})
	if err != nil {
		return partition.Receipt{}, err
	}
	r, err := e.await(ctx, id, ch)
	if err != nil {
		return partition.Receipt{}, err
	}
	if r.Receipt == nil {
		return partition.Receipt{}, fmt.Errorf("engine: repair %s got no receipt", m.ID)
	}
	return *r.Receipt, nil
}

// ErrNoSuchPartition is returned by RepairDelayed for a timer key whose
// partition the application does not have.
var ErrNoSuchPartition = errors.New("engine: no such partition")

// RepairDelayed cancels a pending delayed message (by its timer, which
// names the partition holding it, or by its sender and token: the sender's
// partition holds it), or puts back the delayed messages a cancel took
// (ev.Reinstate, held by partition part). It returns the receipt once the
// commit is durable.
func (e *Engine) RepairDelayed(ctx context.Context, part int, ev partition.DelayedRepair) (partition.Receipt, error) {
	if err := e.writable(); err != nil {
		return partition.Receipt{}, err
	}
	if e.closed.Load() {
		return partition.Receipt{}, ErrClosed
	}
	if ev.TimerID == 0 && ev.Reinstate == nil {
		part = address.Partition(ev.Sender.ID, e.n)
	}
	if part < 0 || part >= e.n {
		return partition.Receipt{}, fmt.Errorf("%w: %d (the application has %d)", ErrNoSuchPartition, part, e.n)
	}
	p, err := e.owner(part)
	if err != nil {
		return partition.Receipt{}, err
	}
	id, ch, err := e.ask(p, 0, func(id uint64) partition.Event {
		ev.Request = id
		return ev
	})
	if err != nil {
		return partition.Receipt{}, err
	}
	r, err := e.await(ctx, id, ch)
	if err != nil {
		return partition.Receipt{}, err
	}
	if r.Receipt == nil {
		return partition.Receipt{}, fmt.Errorf("engine: repair %s got no receipt", ev.Mutation)
	}
	return *r.Receipt, nil
}

// encodeRepairs writes a commit's message dead letters and edited inbox
// messages (before its deletions: an edited message consumed in the same
// commit is then gone).
func (e *Engine) encodeRepairs(b *store.Batch, pt *part, cm *partition.Commit) error {
	for _, d := range cm.DeadLetters {
		b.PutMessageDeadLetter(&protocol.MessageDeadLetter{Id: d.ID, At: d.At, Envelope: d.Env, InboxKey: FormatInboxKey(d.Key),
			Principal: d.Principal, Reason: d.Reason, Attempts: int32(d.Attempts), LastError: d.LastError})
	}
	for _, p := range cm.Rewritten {
		k, ok := pt.arr.lookup(p.Key)
		if !ok {
			return fmt.Errorf("engine: partition %d edited message %s, which is not in its inbox", p.Key.Partition, FormatInboxKey(p.Key))
		}
		b.PutInbox(k, p.Env)
	}
	return nil
}

// FormatInboxKey renders an inbox key as the state API shows it:
// "<partition>/<source>/<seq>", source "ingress", "messages" (the cluster's
// messages topic, seq its offset) or the producing partition.
func FormatInboxKey(k partition.InboxKey) string {
	src := strconv.FormatUint(uint64(k.Source), 10)
	switch k.Source {
	case partition.SourceIngress:
		src = "ingress"
	case partition.SourceMessages:
		src = "messages"
	}
	return fmt.Sprintf("%d/%s/%d", k.Partition, src, k.Seq)
}

func timerImages(ts []partition.Timer) []*protocol.TimerImage {
	var out []*protocol.TimerImage
	for _, t := range ts {
		out = append(out, &protocol.TimerImage{Partition: int32(t.Key.Partition), Due: t.Key.Due, Id: t.Key.ID, Envelope: t.Env})
	}
	return out
}

// TimersFromImages is the inverse of the audit log's images of delayed
// messages.
func TimersFromImages(ts []*protocol.TimerImage) []partition.Timer {
	var out []partition.Timer
	for _, t := range ts {
		out = append(out, partition.Timer{Key: partition.TimerKey{Partition: int(t.GetPartition()), Due: t.GetDue(), ID: t.GetId()}, Env: t.GetEnvelope()})
	}
	return out
}

// ErrNoDeadLetter is returned by Resend for a dead letter that is not
// stored (never was, re-sent already, or removed by retention).
var ErrNoDeadLetter = errors.New("engine: no such message dead letter")

// ErrNotRoutable is returned by Resend for a target whose function type
// no endpoint serves, or that a wildcard endpoint's bound on its types
// refuses: the message could never be delivered.
var ErrNotRoutable = errors.New("engine: no endpoint serves the target's function type")

// ErrTooLarge is returned by Repair (an edit) and Resend for a message
// larger than a request to its target's endpoint carries: it could never
// be delivered (partition.CheckDeliverable).
var ErrTooLarge = errors.New("engine: the message is too large for its target's endpoint")

// ResendRequest re-sends a message dead letter.
type ResendRequest struct {
	// Mutation names the re-send: its receipt and audit record.
	Mutation string
	// DeadLetter is the skip's mutation id.
	DeadLetter string
	// Target, when set, receives the message instead of its address.
	Target    *address.Address
	Principal string
	Reason    string
}

// Resend sends a message dead letter again, as a new message at the end
// of its target's inbox (its address, or r.Target), with its caller and
// argument. One store batch writes the message, removes the dead letter
// and writes the audit record and receipt, so it is sent once. It returns
// once that batch is durable, with the message's new inbox key.
//
// In cluster mode a target in another partition than the dead letter's
// address is sent to through the messages topic (resendAcross): Resend
// then returns once the dead letter's removal and the command are
// committed, with a receipt whose Ack is AckAccepted and no inbox key; the
// target's owner applies the command and writes the receipt and audit
// record.
func (e *Engine) Resend(ctx context.Context, r ResendRequest) (partition.Receipt, partition.InboxKey, error) {
	if err := e.writable(); err != nil {
		return partition.Receipt{}, partition.InboxKey{}, err
	}
	if e.closed.Load() {
		return partition.Receipt{}, partition.InboxKey{}, ErrClosed
	}
	if err := e.admit(); err != nil {
		return partition.Receipt{}, partition.InboxKey{}, err
	}
	// Re-sends are rare operator actions: one at a time, so that two of
	// one dead letter send it once (the second finds it gone).
	e.resendMu.Lock()
	defer e.resendMu.Unlock()
	d, ok, err := e.db.MessageDeadLetter(r.DeadLetter)
	if err != nil {
		return partition.Receipt{}, partition.InboxKey{}, err
	}
	if !ok {
		return partition.Receipt{}, partition.InboxKey{}, ErrNoDeadLetter
	}
	env := &protocol.Envelope{Target: d.GetEnvelope().GetTarget(), Caller: d.GetEnvelope().GetCaller(), Argument: d.GetEnvelope().GetArgument()}
	if r.Target != nil {
		env.Target = toProtoAddr(*r.Target)
	}
	target := fromProtoAddr(env.Target)
	if e.opts.Routable != nil {
		if err := e.opts.Routable(target.Type); err != nil {
			return partition.Receipt{}, partition.InboxKey{}, fmt.Errorf("%w: %s: %w", ErrNotRoutable, target.Type, err)
		}
	}
	if err := partition.CheckDeliverable(e.opts.MaxBatchBytes, target.Type, env.Caller, env.Argument); err != nil {
		return partition.Receipt{}, partition.InboxKey{}, fmt.Errorf("%w: the message %v", ErrTooLarge, err)
	}
	if e.opts.Outbound != nil && address.Partition(d.GetEnvelope().GetTarget().GetId(), e.n) != address.Partition(target.ID, e.n) {
		return e.resendAcross(ctx, r, fromProtoAddr(d.GetEnvelope().GetTarget()), env)
	}
	p, err := e.partOf(target)
	if err != nil {
		return partition.Receipt{}, partition.InboxKey{}, err
	}
	now := e.opts.Now().UnixMilli()
	in := e.newIngressReq(p, env)
	key := in.key
	rc := partition.Receipt{Mutation: r.Mutation, Addr: target, Ack: AckCommitted, At: now}
	in.receipt = receiptToProto(rc)
	req := &resendReq{ingressReq: in,
		deadLetter: r.DeadLetter,
		audit: auditToProto(partition.AuditRecord{Mutation: r.Mutation, At: now, Principal: r.Principal, Reason: r.Reason,
			Reverts: r.DeadLetter, Addr: target, Op: partition.OpResendMessage, Messages: []*protocol.Envelope{env}})}
	if err := e.submitAndWait(ctx, req, req.done); err != nil {
		return partition.Receipt{}, partition.InboxKey{}, err
	}
	return rc, key, nil
}

// submitAndWait submits req and returns its outcome (done gets it), or
// ctx's error when ctx ends first: durable or not, the request is then on
// its way, and only the caller stops waiting.
func (e *Engine) submitAndWait(ctx context.Context, req Request, done <-chan error) error {
	if err := e.submit(req); err != nil {
		return err
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// resendReq is a message dead letter sent again: the message, the removal
// of the dead letter, the audit record and the receipt, in one batch.
type resendReq struct {
	*ingressReq
	deadLetter string
	audit      *protocol.AuditRecord
}

func (r *resendReq) Encode(b *store.Batch) error {
	if err := r.ingressReq.Encode(b); err != nil {
		return err
	}
	// (ingressReq.Encode counted the request as encoded.)
	b.DeleteMessageDeadLetter(r.deadLetter)
	r.audit.Partition = proto.Uint32(uint32(r.p.id))
	b.PutAudit(r.audit)
	return nil
}
