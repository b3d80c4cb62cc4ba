package partition

import (
	"fmt"
	"sort"
	"strings"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/protocol"
)

// This file is the repair side of the core for what an address's inbox
// holds: an operator skips a message (it moves to the message dead
// letters), edits one, cancels a queued or a delayed message, deletes an
// address entirely, and reverts a cancel or a delete. The operations on
// messages and the address are mutations (Mutation.Repair set): they apply
// at their turn in the address's mailbox, when nothing of it is in flight,
// like every operator mutation. Delayed messages are held by their
// sender's partition, not their target's mailbox, so a cancel of one (and
// its revert) is a DelayedRepair applied at once by that partition.

// The audit log's operations of the repair loop, numbered away from the
// entry operations and the pauses; stored in protocol.AuditRecord.op.
const (
	// OpSkipMessage moves a message from an inbox to the message dead
	// letters.
	OpSkipMessage MutationOp = 20
	// OpEditMessage replaces the argument of a message in an inbox.
	OpEditMessage MutationOp = 21
	// OpCancelMessage drops a message from an inbox.
	OpCancelMessage MutationOp = 22
	// OpCancelDelayed drops a pending delayed message.
	OpCancelDelayed MutationOp = 23
	// OpDeleteAddress drops every entry, message and delayed message of an
	// address.
	OpDeleteAddress MutationOp = 24
	// OpReinstate puts back what a cancel or a delete of an address took
	// away (the revert of one).
	OpReinstate MutationOp = 25
	// OpResendMessage is a message dead letter sent again, as a new
	// message: written by the shell when the target is in the dead
	// letter's partition, applied by the target's core (Repair.Messages,
	// Reverts the dead letter's id) when a cluster node sends it to
	// another partition's owner as a command.
	OpResendMessage MutationOp = 26
)

// RejectConflict: the operation does not fit what the address is doing
// now (a delete of an address that is not paused).
const RejectConflict RejectCode = 10

// MessageRepair is what a repair mutation acts on.
type MessageRepair struct {
	// Key names the message (OpSkipMessage, OpEditMessage,
	// OpCancelMessage); nil names the head of the inbox: the first message
	// of the failed batch, or, of a paused address with none, the first
	// queued message.
	Key *InboxKey
	// Argument replaces the message's argument (OpEditMessage).
	Argument *protocol.TypedValue
	// Entries, Messages and Timers are what OpReinstate puts back: the
	// entries (each must have no value now), the messages (queued as new
	// messages at the end of the inbox) and the delayed messages (due at
	// their time, under their token, which must not be pending again).
	Entries  []StateEntry
	Messages []*protocol.Envelope
	Timers   []Timer
}

// MessageDeadLetter is a message an operator skipped, written to the store
// in the commit that takes it out of the inbox.
type MessageDeadLetter struct {
	// ID is the skip's mutation id.
	ID  string
	At  int64
	Key InboxKey
	// Env is the message: its target, caller and argument.
	Env       *protocol.Envelope
	Principal string
	Reason    string
	// Attempts and LastError describe the failed batch the message was
	// in (0 and empty for a message that was only queued).
	Attempts  int
	LastError string
}

// DelayedRepair cancels a pending delayed message of this partition, or
// puts back delayed messages a cancel took (Reinstate). It applies at once
// and answers with a receipt once its commit is durable (AckCommitted).
type DelayedRepair struct {
	Request uint64
	// Mutation, Principal, Reason and Reverts name it in the audit log.
	Mutation, Principal, Reason, Reverts string
	// Addr is the address the delayed message is for.
	Addr address.Address
	// TimerID names the delayed message by its timer id (as the inbox
	// lists it); when 0, Sender and Token do.
	TimerID uint64
	Sender  address.Address
	Token   string
	// Reinstate, when set, puts these delayed messages back instead.
	Reinstate []Timer
}

func (DelayedRepair) isEvent() {}

// applyRepair carries out a repair mutation at its turn in the mailbox:
// nothing of the address is in flight.
func (c *Core) applyRepair(m *Mutation) error {
	rc := Receipt{Mutation: m.ID, Request: m.Request, Addr: m.Addr, Ack: m.Ack, Checkpoint: c.commitID + 1, At: c.now}
	switch m.Op {
	case OpSkipMessage, OpEditMessage, OpCancelMessage:
		c.repairMessage(m, rc)
	case OpDeleteAddress:
		return c.deleteAddress(m, rc)
	case OpReinstate:
		return c.reinstate(m, rc)
	case OpResendMessage:
		rec := AuditRecord{Mutation: m.ID, At: c.now, Principal: m.Principal, Reason: m.Reason, Reverts: m.Reverts, Addr: m.Addr, Op: m.Op,
			Messages: c.queueAgain(m.Addr, m.Repair.Messages)}
		c.pending.Audit = append(c.pending.Audit, rec)
		c.settle(rc)
	default:
		rc.Reject, rc.Reason = RejectConflict, "unknown repair operation"
		c.settle(rc)
	}
	return nil
}

// findMessage locates the message a repair names in a mailbox: in the
// batch that failed (waiting, not in flight) or among the queued messages.
func (c *Core) findMessage(a address.Address, mb *mailbox, key *InboxKey) (inBatch bool, i int, reason string) {
	if mb == nil {
		return false, -1, "the inbox is empty"
	}
	b := mb.inflight
	if b != nil && !b.waiting {
		return false, -1, "a batch of the address is in flight"
	}
	if key == nil {
		if b != nil {
			return true, 0, ""
		}
		if !c.paused(a) {
			return false, -1, "no batch of the address failed and it is not paused: name the message by its key"
		}
		for i, q := range mb.queue {
			if q.mut == nil {
				return false, i, ""
			}
		}
		return false, -1, "the inbox is empty"
	}
	if b != nil {
		for i, q := range b.msgs {
			if q.key == *key {
				return true, i, ""
			}
		}
	}
	for i, q := range mb.queue {
		if q.mut == nil && q.key == *key {
			return false, i, ""
		}
	}
	return false, -1, "no such message in the inbox of the address (processed already, or another address's)"
}

// repairMessage skips, edits or cancels one message of an inbox.
func (c *Core) repairMessage(m *Mutation, rc Receipt) {
	mb := c.mailboxes[m.Addr]
	inBatch, i, reason := c.findMessage(m.Addr, mb, m.Repair.Key)
	if i < 0 {
		rc.Reject, rc.Reason = RejectNotFound, reason
		c.settle(rc)
		return
	}
	b := mb.inflight
	var q queued
	if inBatch {
		q = b.msgs[i]
	} else {
		q = mb.queue[i]
	}
	env := &protocol.Envelope{Target: toProto(m.Addr), Caller: q.inv.GetCaller(), Argument: q.inv.GetArgument()}
	rec := AuditRecord{Mutation: m.ID, At: c.now, Principal: m.Principal, Reason: m.Reason, Reverts: m.Reverts,
		Addr: m.Addr, Op: m.Op, Messages: []*protocol.Envelope{env}}
	if m.Op == OpEditMessage {
		arg := m.Repair.Argument
		q.inv = &protocol.ToFunction_Invocation{Caller: q.inv.GetCaller(), Argument: arg}
		if inBatch {
			b.msgs[i] = q
		} else {
			mb.queue[i] = q
		}
		rec.Typename = arg.GetTypename()
		c.pending.Rewritten = append(c.pending.Rewritten, Produced{Key: q.key,
			Env: &protocol.Envelope{Target: env.Target, Caller: env.Caller, Argument: arg}})
		c.pending.Audit = append(c.pending.Audit, rec)
		c.settle(rc)
		return
	}
	if m.Op == OpSkipMessage {
		dl := MessageDeadLetter{ID: m.ID, At: c.now, Key: q.key, Env: env, Principal: m.Principal, Reason: m.Reason}
		if inBatch {
			dl.Attempts, dl.LastError = b.attempt, b.lastErr
		}
		c.pending.DeadLetters = append(c.pending.DeadLetters, dl)
	}
	c.pending.Consumed = append(c.pending.Consumed, q.key)
	c.pending.Audit = append(c.pending.Audit, rec)
	c.backlog--
	if inBatch {
		// The failed batch is dissolved: its other messages go back to the
		// head of the queue, in their order, and go out as a new batch
		// (attempt 0) when the address moves on. What failed was this
		// batch; the one without the message is another request.
		rest := append(b.msgs[:i:i], b.msgs[i+1:]...)
		mb.queue = append(rest, mb.queue...)
		if b.attempt > 0 {
			c.failing(m.Addr.Type, -1)
		}
		mb.inflight = nil
	} else {
		mb.queue = append(mb.queue[:i:i], mb.queue[i+1:]...)
	}
	c.settle(rc)
}

// deleteAddress drops every entry of a paused address, every message of
// its inbox and every delayed message this partition holds for it or that
// it sent (its cancellation tokens), in this one commit.
func (c *Core) deleteAddress(m *Mutation, rc Receipt) error {
	if !c.paused(m.Addr) {
		rc.Reject, rc.Reason = RejectConflict, "the address is not paused: pause it first, so that nothing of it is in flight and no message is invoked unseen"
		c.settle(rc)
		return nil
	}
	entries, err := c.entries(m.Addr, "")
	if err != nil {
		return err
	}
	var msgs []queued
	mb := c.mailboxes[m.Addr]
	if mb != nil {
		if b := mb.inflight; b != nil {
			msgs = append(msgs, b.msgs...)
		}
		for _, q := range mb.queue {
			if q.mut == nil {
				msgs = append(msgs, q)
			}
		}
	}
	timers, err := c.timersOf(m.Addr)
	if err != nil {
		return err
	}
	if len(entries) == 0 && len(msgs) == 0 && len(timers) == 0 {
		rc.Reject, rc.Reason = RejectNotFound, "the address holds nothing: no state, no message, no delayed message"
		c.settle(rc)
		return nil
	}
	for _, e := range entries {
		before := e.Entry
		c.write(m.Addr, e.State, Entry{}, true)
		c.audit(m, e.State, &before, 0, "")
	}
	rec := AuditRecord{Mutation: m.ID, At: c.now, Principal: m.Principal, Reason: m.Reason, Reverts: m.Reverts, Addr: m.Addr, Op: m.Op}
	for _, q := range msgs {
		c.pending.Consumed = append(c.pending.Consumed, q.key)
		rec.Messages = append(rec.Messages, &protocol.Envelope{Target: toProto(m.Addr), Caller: q.inv.GetCaller(), Argument: q.inv.GetArgument()})
		c.backlog--
	}
	if mb != nil {
		if b := mb.inflight; b != nil && b.attempt > 0 {
			c.failing(m.Addr.Type, -1)
		}
		mb.inflight = nil
		rest := mb.queue[:0:0]
		for _, q := range mb.queue {
			if q.mut != nil {
				rest = append(rest, q)
			}
		}
		mb.queue = rest
	}
	for _, it := range timers {
		c.dropTimer(it)
		rec.Timers = append(rec.Timers, *it.timer)
	}
	if len(rec.Messages) > 0 || len(rec.Timers) > 0 {
		c.pending.Audit = append(c.pending.Audit, rec)
	}
	c.settle(rc)
	return nil
}

// timersOf returns the delayed messages this partition holds for an
// address or that the address sent, by key: those in memory and those in
// the store past the window.
func (c *Core) timersOf(a address.Address) ([]*timerItem, error) {
	var out []*timerItem
	err := c.scanTimers(func(it *timerItem) bool {
		env := it.timer.Env
		if toAddress(env.GetTarget()) == a || (env.GetCaller() != nil && toAddress(env.GetCaller()) == a) {
			out = append(out, it)
		}
		return true
	})
	sort.Slice(out, func(i, j int) bool { return timerKeyLess(out[i].timer.Key, out[j].timer.Key) })
	return out, err
}

// reinstate puts back what a cancel or a delete of an address took away,
// all of it or (when an entry has a value again, or a token is pending
// again) nothing.
func (c *Core) reinstate(m *Mutation, rc Receipt) error {
	r := m.Repair
	for _, e := range r.Entries {
		cur, ok, err := c.get(m.Addr, e.State)
		if err != nil {
			return err
		}
		if ok {
			rc.State, rc.Version = e.State, cur.Version
			rc.Reject, rc.Reason = RejectPrecondition, "entry "+e.State+" has a value again; nothing was put back"
			c.settle(rc)
			return nil
		}
	}
	if reason, err := c.tokensTaken(r.Timers); err != nil {
		return err
	} else if reason != "" {
		rc.Reject, rc.Reason = RejectPrecondition, reason
		c.settle(rc)
		return nil
	}
	for _, e := range r.Entries {
		c.versionSeq++
		ne := Entry{Typename: e.Entry.Typename, Value: e.Entry.Value, Version: c.versionSeq, ExpiresAt: e.Entry.ExpiresAt}
		c.write(m.Addr, e.State, ne, false)
		c.audit(m, e.State, nil, ne.Version, ne.Typename)
	}
	rec := AuditRecord{Mutation: m.ID, At: c.now, Principal: m.Principal, Reason: m.Reason, Reverts: m.Reverts, Addr: m.Addr, Op: m.Op,
		Messages: c.queueAgain(m.Addr, r.Messages)}
	rec.Timers = c.addTimersBack(r.Timers)
	if len(rec.Messages) > 0 || len(rec.Timers) > 0 {
		c.pending.Audit = append(c.pending.Audit, rec)
	}
	c.settle(rc)
	return nil
}

// queueAgain queues msgs (their callers and arguments) for a as new
// messages at the end of its inbox, and returns them as queued. A new
// message, not the old place: the messages behind that place may have run
// since, and the durable arrival order is the order a restart replays.
func (c *Core) queueAgain(a address.Address, msgs []*protocol.Envelope) []*protocol.Envelope {
	if len(msgs) == 0 {
		return nil
	}
	mb := c.mailbox(a)
	out := make([]*protocol.Envelope, 0, len(msgs))
	for _, env := range msgs {
		key := InboxKey{Partition: c.cfg.ID, Source: uint32(c.cfg.ID), Seq: c.outSeq}
		c.outSeq++
		e := &protocol.Envelope{Target: toProto(a), Caller: env.GetCaller(), Argument: env.GetArgument()}
		c.pending.Produced = append(c.pending.Produced, Produced{Key: key, Env: e})
		mb.queue = append(mb.queue, queued{key: key, at: c.now, inv: &protocol.ToFunction_Invocation{Caller: e.Caller, Argument: e.Argument}})
		c.backlog++
		out = append(out, e)
	}
	return out
}

// tokensTaken says which cancellation token of timers is pending again.
func (c *Core) tokensTaken(timers []Timer) (string, error) {
	for _, t := range timers {
		if tok := t.Env.GetCancellationToken(); tok != "" {
			if ok, err := c.tokenPending(t.Env.GetCaller().GetId(), tok); err != nil || ok {
				return "cancellation token " + tok + " of " + t.Env.GetCaller().GetId() + " is pending again; nothing was put back", err
			}
		}
	}
	return "", nil
}

// addTimersBack schedules delayed messages again, due at their time (at
// once when it has passed), under new timer ids of this partition.
func (c *Core) addTimersBack(timers []Timer) []Timer {
	var out []Timer
	for _, t := range timers {
		c.timerSeq++
		nt := Timer{Key: TimerKey{Partition: c.cfg.ID, Due: t.Key.Due, ID: c.timerSeq}, Env: t.Env}
		c.addTimer(nt, c.commitID+1)
		c.pending.TimersAdded = append(c.pending.TimersAdded, nt)
		out = append(out, nt)
	}
	return out
}

// repairDelayed cancels a pending delayed message, or puts back the ones
// a cancel took.
func (c *Core) repairDelayed(ev DelayedRepair) error {
	rc := Receipt{Mutation: ev.Mutation, Request: ev.Request, Addr: ev.Addr, Ack: AckCommitted, Checkpoint: c.commitID + 1, At: c.now}
	rec := AuditRecord{Mutation: ev.Mutation, At: c.now, Principal: ev.Principal, Reason: ev.Reason, Reverts: ev.Reverts, Addr: ev.Addr}
	if ev.Reinstate != nil {
		if reason, err := c.tokensTaken(ev.Reinstate); err != nil {
			return err
		} else if reason != "" {
			rc.Reject, rc.Reason = RejectPrecondition, reason
			c.settle(rc)
			return nil
		}
		rec.Op, rec.Timers = OpReinstate, c.addTimersBack(ev.Reinstate)
		c.pending.Audit = append(c.pending.Audit, rec)
		c.settle(rc)
		return nil
	}
	it, err := c.findDelayed(ev)
	if err != nil {
		return err
	}
	if it == nil || toAddress(it.timer.Env.GetTarget()) != ev.Addr {
		rc.Reject, rc.Reason = RejectNotFound, "no such delayed message pending for the address (delivered already, cancelled, or another address's)"
		c.settle(rc)
		return nil
	}
	c.dropTimer(it)
	rec.Op, rec.Timers = OpCancelDelayed, []Timer{*it.timer}
	c.pending.Audit = append(c.pending.Audit, rec)
	c.settle(rc)
	return nil
}

// findDelayed finds the pending delayed message a DelayedRepair names: by
// timer id (in memory, else by a scan of the store past the window), or by
// its sender and token (one point read of the store's index).
func (c *Core) findDelayed(ev DelayedRepair) (*timerItem, error) {
	if ev.TimerID != 0 {
		if it := c.pendingT[ev.TimerID]; it != nil {
			return it, nil
		}
		var found *timerItem
		err := c.scanTimers(func(it *timerItem) bool {
			if it.timer.Key.ID == ev.TimerID {
				found = it
			}
			return found == nil
		})
		return found, err
	}
	it, key, ok, err := c.tokenTimer(ev.Sender.ID, ev.Token)
	if err != nil || !ok {
		return nil, err
	}
	if it == nil {
		// Past the window: read it, for its sender and the audit record.
		if it, err = c.unloadedAt(key); err != nil || it == nil {
			return nil, err
		}
	}
	if s := it.timer.Env.GetCaller(); s == nil || toAddress(s) != ev.Sender {
		return nil, nil
	}
	return it, nil
}

// repairOpNames name the repair operations for scripts and logs.
var repairOpNames = map[MutationOp]string{
	OpSkipMessage: "skip", OpEditMessage: "edit", OpCancelMessage: "cancel", OpCancelDelayed: "cancel-delayed",
	OpDeleteAddress: "delete-address", OpReinstate: "reinstate", OpResendMessage: "resend",
}

// describeRepairAudit renders the audit record of a repair of the inbox.
func describeRepairAudit(a AuditRecord) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  audit %s %s %s by %s", a.Mutation, a.Addr, repairOpNames[a.Op], a.Principal)
	if a.Reverts != "" {
		fmt.Fprintf(&b, " reverts %s", a.Reverts)
	}
	fmt.Fprintf(&b, ": %s\n", a.Reason)
	for _, m := range a.Messages {
		fmt.Fprintf(&b, "    message %s from %s\n", DescribeValue(m.GetArgument()), describeCaller(m.GetCaller()))
	}
	if a.Op == OpEditMessage {
		fmt.Fprintf(&b, "    now typename %s\n", a.Typename)
	}
	for _, t := range a.Timers {
		fmt.Fprintf(&b, "    delayed due=%d id=%d -> %s token=%q: %s\n", t.Key.Due, t.Key.ID, describeAddr(t.Env.GetTarget()), t.Env.GetCancellationToken(), DescribeValue(t.Env.GetArgument()))
	}
	return b.String()
}
