package partition

import (
	"sort"

	"github.com/statefun-go/statefun/internal/address"
)

// This file answers an operator's questions about what the core holds:
// which addresses are failing, what one address's inbox holds, what is
// paused. Like reads of state, the questions go through the partition's
// mailbox, so the answer is a consistent picture at one point of it.

// Inspect asks what the core holds. Kind says what; the answer is a Reply
// whose Inspection is set.
type Inspect struct {
	Request uint64
	Kind    InspectKind
	// Type filters InspectFailing and InspectPauses (zero: every type).
	Type address.TypeName
	// Addr is the address of InspectInbox.
	Addr address.Address
}

func (Inspect) isEvent() {}

// InspectKind is what an Inspect asks for.
type InspectKind int

const (
	// InspectFailing lists the addresses whose batch is failing.
	InspectFailing InspectKind = iota
	// InspectInbox describes one address's inbox. Every partition answers
	// with the delayed messages it holds for the address; the address's
	// own partition with the rest.
	InspectInbox
	// InspectPauses lists the pauses in force.
	InspectPauses
	// InspectQueued counts the messages each function type holds in this
	// partition's mailboxes.
	InspectQueued
)

// Inspection is the answer of an Inspect.
type Inspection struct {
	Failing []FailingAddress
	Inbox   *Inbox
	Pauses  []PauseWrite
	// Queued counts, per function type, the messages not processed yet:
	// queued, parked, or in a batch in flight or waiting (operator
	// mutations waiting their turn are not messages and not counted).
	Queued map[address.TypeName]int
}

// FailingAddress is an address whose batch failed at least once and has
// not succeeded yet.
type FailingAddress struct {
	Addr address.Address
	// Since is when the batch first failed.
	Since int64
	// Attempts counts the failed attempts.
	Attempts int
	// RetryAt is when the next attempt goes out; 0 while an attempt is in
	// flight or the address is paused.
	RetryAt   int64
	LastError string
	Violation bool
	// Messages is how many messages the failing batch holds; Queued how
	// many wait behind it.
	Messages, Queued int
	Paused           bool
}

// Inbox is what the core holds for one address.
type Inbox struct {
	Addr address.Address
	// Pause is the address's own pause, TypePause its type's.
	Pause, TypePause *Pause
	// Inflight is the batch in flight or waiting out a backoff.
	Inflight *InflightBatch
	// Queued are the messages (and durable mutations) waiting, oldest
	// first.
	Queued []InboxMessage
	// Delayed are the pending delayed messages for the address, by due
	// time.
	Delayed []DelayedMessage
	// PagedInPartition is set by the shell: the messages of the address's
	// partition that wait in the store, past the partition's bound in
	// memory, and are not in Queued (the core does not hold them).
	PagedInPartition int
}

// InflightBatch is the batch of an address that was sent (or failed and
// waits to be sent again).
type InflightBatch struct {
	Messages []InboxMessage
	// Attempt counts the failed attempts (0: the first is in flight).
	Attempt int
	// Waiting is set while the batch sits out a backoff or a pause.
	Waiting   bool
	Since     int64
	RetryAt   int64
	LastError string
	Violation bool
}

// InboxMessage is one message of an inbox.
type InboxMessage struct {
	Key InboxKey
	// Mutation is set for an accepted operator mutation waiting its turn
	// (the other fields are then empty).
	Mutation string
	Typename string
	// Caller is nil for a message from an ingress.
	Caller *address.Address
	// Size is the argument's value in bytes.
	Size int
	// Value is the argument's value: the core's own bytes, to be read and
	// never changed (the state API shows a bounded prefix).
	Value []byte
	// ArrivedAt is when the core got it: its arrival, or the restart that
	// replayed it.
	ArrivedAt int64
}

// DelayedMessage is a pending delayed message.
type DelayedMessage struct {
	Key TimerKey
	// Sender scopes the cancellation token.
	Sender   *address.Address
	Token    string
	Typename string
	Size     int
}

// inspect answers an Inspect. An error is the Reader's (the delayed
// messages of an inbox past the window are read from the store).
func (c *Core) inspect(ev Inspect) error {
	in := &Inspection{}
	switch ev.Kind {
	case InspectFailing:
		in.Failing = c.failingAddresses(ev.Type)
	case InspectInbox:
		var err error
		if in.Inbox, err = c.inbox(ev.Addr); err != nil {
			return err
		}
	case InspectPauses:
		in.Pauses = c.pausesOf(ev.Type)
	case InspectQueued:
		in.Queued = c.queuedByType()
	}
	c.ready.Replies = append(c.ready.Replies, Reply{Request: ev.Request, Inspection: in})
	return nil
}

func (c *Core) failingAddresses(t address.TypeName) []FailingAddress {
	var out []FailingAddress
	for a, mb := range c.mailboxes {
		b := mb.inflight
		if b == nil || b.attempt == 0 || (t != address.TypeName{} && a.Type != t) {
			continue
		}
		f := FailingAddress{Addr: a, Since: b.since, Attempts: b.attempt, LastError: b.lastErr,
			Violation: b.violation, Messages: len(b.msgs), Queued: len(mb.queue), Paused: c.paused(a)}
		if b.waiting && !f.Paused {
			f.RetryAt = b.retryAt
		}
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return addrLess(out[i].Addr, out[j].Addr) })
	return out
}

// queuedByType counts the messages of every mailbox by function type. It
// visits the mailboxes, which exist only for addresses with something
// queued or in flight, not every address of the store.
func (c *Core) queuedByType() map[address.TypeName]int {
	out := map[address.TypeName]int{}
	count := func(a address.Address, qs []queued) {
		for _, q := range qs {
			if q.mut == nil {
				out[a.Type]++
			}
		}
	}
	for a, mb := range c.mailboxes {
		count(a, mb.queue)
		if mb.inflight != nil {
			count(a, mb.inflight.msgs)
		}
	}
	return out
}

func (c *Core) inbox(a address.Address) (*Inbox, error) {
	in := &Inbox{Addr: a, Pause: c.pauses[a], TypePause: c.typePauses[a.Type]}
	if mb := c.mailboxes[a]; mb != nil {
		if b := mb.inflight; b != nil {
			ib := &InflightBatch{Attempt: b.attempt, Waiting: b.waiting, Since: b.since, LastError: b.lastErr, Violation: b.violation}
			if b.waiting && !c.paused(a) {
				ib.RetryAt = b.retryAt
			}
			for _, q := range b.msgs {
				ib.Messages = append(ib.Messages, inboxMessage(q))
			}
			in.Inflight = ib
		}
		for _, q := range mb.queue {
			in.Queued = append(in.Queued, inboxMessage(q))
		}
	}
	// The delayed messages past the window are read from the store: an
	// operator's look at one address costs a scan of the partition's.
	err := c.scanTimers(func(it *timerItem) bool {
		t := it.timer
		if toAddress(t.Env.GetTarget()) != a {
			return true
		}
		d := DelayedMessage{Key: t.Key, Token: t.Env.GetCancellationToken(), Typename: t.Env.GetArgument().GetTypename(), Size: len(t.Env.GetArgument().GetValue())}
		if s := t.Env.GetCaller(); s != nil {
			sa := toAddress(s)
			d.Sender = &sa
		}
		in.Delayed = append(in.Delayed, d)
		return true
	})
	sort.Slice(in.Delayed, func(i, j int) bool { return timerKeyLess(in.Delayed[i].Key, in.Delayed[j].Key) })
	return in, err
}

func inboxMessage(q queued) InboxMessage {
	m := InboxMessage{Key: q.key, ArrivedAt: q.at}
	if q.mut != nil {
		m.Mutation = q.mut.ID
		return m
	}
	m.Typename = q.inv.GetArgument().GetTypename()
	m.Value = q.inv.GetArgument().GetValue()
	m.Size = len(m.Value)
	if cl := q.inv.GetCaller(); cl != nil {
		ca := toAddress(cl)
		m.Caller = &ca
	}
	return m
}

// pausesOf lists the pauses in force, of one type or of all: type-level
// ones (Addr.ID empty) and those of this partition's addresses.
func (c *Core) pausesOf(t address.TypeName) []PauseWrite {
	var out []PauseWrite
	all := t == address.TypeName{}
	for tt, p := range c.typePauses {
		if all || tt == t {
			cp := *p
			out = append(out, PauseWrite{Addr: address.Address{Type: tt}, Pause: &cp})
		}
	}
	for a, p := range c.pauses {
		if all || a.Type == t {
			cp := *p
			out = append(out, PauseWrite{Addr: a, Pause: &cp})
		}
	}
	sort.Slice(out, func(i, j int) bool { return addrLess(out[i].Addr, out[j].Addr) })
	return out
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

func timerKeyLess(a, b TimerKey) bool {
	if a.Due != b.Due {
		return a.Due < b.Due
	}
	return a.ID < b.ID
}
