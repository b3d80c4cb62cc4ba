package partition

import (
	"fmt"
	"sort"
	"strconv"

	"github.com/statefun-go/statefun/internal/address"
)

// This file is the pause side of the core: an operator (or the poison
// policy) holds an address, or every address of a function type, so that
// nothing of it is invoked while its messages keep arriving, its due
// delayed messages join its inbox, and reads and mutations apply at once.

// Pause is a hold on an address, or on every address of a function type.
type Pause struct {
	// Mutation names the pause: its receipt and audit record.
	Mutation  string
	Principal string
	Reason    string
	// Since is when it took effect (unix ms).
	Since int64
	// ExpiresAt, when non-zero, is when it lifts by itself (unix ms).
	ExpiresAt int64
	// Auto is set for a pause of the poison policy (Config.PauseAfter,
	// Config.PauseOnViolation).
	Auto bool
}

// PauseWrite sets (Pause non-nil) or lifts (nil) a pause in a commit.
// Addr.ID is empty for a type-level pause: an address id is never empty.
type PauseWrite struct {
	Addr  address.Address
	Pause *Pause
}

// The audit log's operations of pauses. They are numbered away from the
// entry operations (OpPut…) so that new entry operations never collide
// with them; both are stored (protocol.AuditRecord.op).
const (
	// OpPause is a pause set on an address or a function type.
	OpPause MutationOp = 10
	// OpResume is a pause lifted: by an operator, or by its expiry.
	OpResume MutationOp = 11
)

// RuntimePrincipal is the principal of what the runtime does by itself:
// an automatic pause and the lifting of an expired one.
const RuntimePrincipal = "runtime"

// SetPause pauses or resumes an address, or every address of a function
// type when Addr.ID is empty. An address is paused while it or its type
// is. A type-level change goes to every partition; the partition that owns
// the type (TypeOwner) makes it durable and answers with a receipt once
// the commit is durable (AckCommitted), the others apply it at once and
// answer with an empty reply — or, with Config.OwnTypePauses, each records
// it in its own commit and answers with an Unstored receipt once that is
// durable (rejected RejectNotFound for a resume of what it did not hold).
type SetPause struct {
	Request uint64
	Addr    address.Address
	// Resume lifts the pause instead of setting one.
	Resume bool
	// Mutation, Principal and Reason name the operation in the audit log.
	Mutation  string
	Principal string
	Reason    string
	// ExpiresAt, when non-zero, lifts the pause by itself at that time.
	ExpiresAt int64
	// ChangedElsewhere, on a resume of a type, says other partitions
	// lifted the type's pause: TypeOwner then records the resume (receipt
	// and audit record) even if it held no pause itself, as happens when
	// an earlier pause reached only some partitions.
	ChangedElsewhere bool
}

func (SetPause) isEvent() {}

// TypeOwner is the partition that keeps the durable record of a
// type-level pause (every partition holds the pause itself).
func TypeOwner(t address.TypeName, partitions int) int {
	return address.Partition(t.String(), partitions)
}

// pauseRef is the expiry timer of a pause: it fires only if the pause it
// names is still the one in force.
type pauseRef struct {
	addr address.Address
	p    *Pause
}

// paused reports whether an address is held: by its own pause or by its
// type's.
func (c *Core) paused(a address.Address) bool {
	return c.pauses[a] != nil || c.typePauses[a.Type] != nil
}

// restorePause puts back a durable pause at New.
func (c *Core) restorePause(w PauseWrite) {
	p := *w.Pause
	c.holdPause(w.Addr, &p)
}

// holdPause records a pause in memory and schedules its expiry.
func (c *Core) holdPause(a address.Address, p *Pause) {
	if a.ID == "" {
		c.typePauses[a.Type] = p
	} else {
		if c.pauses[a] == nil {
			c.pausedByType[a.Type]++
		}
		c.pauses[a] = p
	}
	c.healthChanged = true
	if p.ExpiresAt != 0 {
		c.schedule(&timerItem{due: p.ExpiresAt, pause: &pauseRef{addr: a, p: p}})
	}
}

// dropPause forgets a pause; it reports whether there was one.
func (c *Core) dropPause(a address.Address) bool {
	if a.ID == "" {
		if c.typePauses[a.Type] == nil {
			return false
		}
		delete(c.typePauses, a.Type)
	} else {
		if c.pauses[a] == nil {
			return false
		}
		delete(c.pauses, a)
		if c.pausedByType[a.Type]--; c.pausedByType[a.Type] <= 0 {
			delete(c.pausedByType, a.Type)
		}
	}
	c.healthChanged = true
	return true
}

// durableHere reports whether this partition keeps the record of a pause
// of a, with its receipt and audit record: the address's partition, or
// the owner of a type-level pause.
func (c *Core) durableHere(a address.Address) bool {
	if a.ID == "" {
		return TypeOwner(a.Type, c.cfg.Partitions) == c.cfg.ID
	}
	return true
}

// shareHere reports whether this partition keeps its own record of a
// type-level pause of a without being its TypeOwner (Config.OwnTypePauses).
func (c *Core) shareHere(a address.Address) bool {
	return a.ID == "" && c.cfg.OwnTypePauses && !c.durableHere(a)
}

// setPause carries out a SetPause in the mailbox order of the partition.
func (c *Core) setPause(ev SetPause) error {
	rc := Receipt{Mutation: ev.Mutation, Request: ev.Request, Addr: ev.Addr, Ack: AckCommitted, Checkpoint: c.commitID + 1, At: c.now}
	durable, share := c.durableHere(ev.Addr), c.shareHere(ev.Addr)
	answer := func() {
		switch {
		case durable:
			c.settle(rc)
		case share:
			// Answered once this partition's record is durable, and never
			// stored: the type's receipt is TypeOwner's.
			rc.Unstored = true
			c.settle(rc)
		case ev.Request != 0:
			c.ready.Replies = append(c.ready.Replies, Reply{Request: ev.Request})
		}
	}
	if ev.Resume {
		dropped := c.dropPause(ev.Addr)
		if share {
			// Written whether or not it held one, so that the answer waits
			// for a commit: a repeat of a resume whose first commit is not
			// durable yet must not be answered before it is.
			c.writePause(ev.Addr, nil)
		}
		if !dropped && !(durable && ev.ChangedElsewhere) {
			rc.Reject, rc.Reason = RejectNotFound, "not paused"
			// A rejection writes no audit record: nothing changed.
			answer()
			return nil
		}
		if durable {
			c.recordPause(ev.Addr, nil, OpResume, ev.Mutation, ev.Principal, ev.Reason)
		}
		answer()
		return c.release(ev.Addr)
	}
	p := &Pause{Mutation: ev.Mutation, Principal: ev.Principal, Reason: ev.Reason, Since: c.now, ExpiresAt: ev.ExpiresAt}
	if cur := c.typePauses[ev.Addr.Type]; share && cur != nil && cur.Mutation == ev.Mutation {
		p = cur // a repeat of the pause in force: written again, unchanged
	} else {
		c.dropPause(ev.Addr) // a new pause replaces the one in force
		c.holdPause(ev.Addr, p)
	}
	switch {
	case durable:
		c.recordPause(ev.Addr, p, OpPause, ev.Mutation, ev.Principal, ev.Reason)
	case share:
		c.writePause(ev.Addr, p)
	}
	answer()
	// Mutations waiting behind an invocation no longer wait for later
	// messages: apply what can apply.
	return c.settleHeld(ev.Addr)
}

// writePause writes a pause change to the commit: a copy of p, or the
// lifting of a's pause when p is nil.
func (c *Core) writePause(a address.Address, p *Pause) {
	w := PauseWrite{Addr: a}
	if p != nil {
		cp := *p
		w.Pause = &cp
	}
	c.pending.Pauses = append(c.pending.Pauses, w)
}

// recordPause writes a pause change and its audit record to the commit.
func (c *Core) recordPause(a address.Address, p *Pause, op MutationOp, mutation, principal, reason string) {
	c.writePause(a, p)
	c.pending.Audit = append(c.pending.Audit, AuditRecord{
		Mutation: mutation, At: c.now, Principal: principal, Reason: reason, Addr: a, Op: op,
	})
}

// autoPause is the poison policy's pause of an address whose batch failed.
func (c *Core) autoPause(a address.Address, reason string) {
	id := c.runtimeID()
	p := &Pause{Mutation: id, Principal: RuntimePrincipal, Reason: reason, Since: c.now, Auto: true}
	c.dropPause(a)
	c.holdPause(a, p)
	c.recordPause(a, p, OpPause, id, RuntimePrincipal, reason)
}

// runtimeID names something the runtime does by itself (an automatic
// pause, an expiry) in the audit log: the millisecond in base 36 like an
// API mutation id, then the partition, the commit and a counter, so it is
// unique and sorts by time.
func (c *Core) runtimeID() string {
	c.autoSeq++
	return fmt.Sprintf("%s-runtime-p%d-%d-%d", strconv.FormatInt(max(c.now, 0), 36), c.cfg.ID, c.commitID+1, c.autoSeq)
}

// expire lifts a pause whose time ran out, if it is still in force.
func (c *Core) expire(r *pauseRef) error {
	cur := c.pauses[r.addr]
	if r.addr.ID == "" {
		cur = c.typePauses[r.addr.Type]
	}
	if cur != r.p {
		return nil // resumed or replaced meanwhile
	}
	c.dropPause(r.addr)
	switch {
	case c.durableHere(r.addr):
		c.recordPause(r.addr, nil, OpResume, c.runtimeID(), RuntimePrincipal, "pause "+r.p.Mutation+" expired")
	case c.shareHere(r.addr):
		c.writePause(r.addr, nil)
	}
	return c.release(r.addr)
}

// release moves the mailboxes a lifted pause held: a batch that failed is
// retried at once, queued messages go out in arrival order.
func (c *Core) release(a address.Address) error {
	for _, addr := range c.heldBy(a) {
		mb := c.mailboxes[addr]
		if mb == nil || c.paused(addr) {
			continue
		}
		if b := mb.inflight; b != nil && b.waiting {
			if err := c.send(addr, b); err != nil {
				return err
			}
			continue
		}
		if err := c.advance(addr, mb); err != nil {
			return err
		}
	}
	return nil
}

// settleHeld applies the mutations a newly paused address holds.
func (c *Core) settleHeld(a address.Address) error {
	for _, addr := range c.heldBy(a) {
		if mb := c.mailboxes[addr]; mb != nil {
			if err := c.advance(addr, mb); err != nil {
				return err
			}
		}
	}
	return nil
}

// heldBy returns the addresses with a mailbox that a pause of a covers,
// in id order (so that what a type's resume sends is deterministic).
func (c *Core) heldBy(a address.Address) []address.Address {
	if a.ID != "" {
		return []address.Address{a}
	}
	var out []address.Address
	for addr := range c.mailboxes {
		if addr.Type == a.Type {
			out = append(out, addr)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// policyPauses reports whether the poison policy pauses an address after
// this failure of its batch, and why.
func (c *Core) policyPauses(a address.Address, b *batch, err error, violation bool) (string, bool) {
	if violation && c.cfg.PauseOnViolation != nil && c.cfg.PauseOnViolation(a.Type) {
		return fmt.Sprintf("paused on a protocol violation (attempt %d): %v", b.attempt, err), true
	}
	if c.cfg.PauseAfter != nil {
		if n := c.cfg.PauseAfter(a.Type); n > 0 && b.attempt >= n {
			return fmt.Sprintf("paused after %d failed attempts: %v", b.attempt, err), true
		}
	}
	return "", false
}

// Health is what the shell exports as gauges: per function type, the
// addresses whose batch is failing and those paused on their own, and the
// types paused as a whole.
type Health struct {
	Failing     map[address.TypeName]int
	Paused      map[address.TypeName]int
	PausedTypes []address.TypeName
}

// TakeHealth returns the core's Health and true when it changed since the
// last call (false: the copy is not made).
func (c *Core) TakeHealth() (Health, bool) {
	if !c.healthChanged {
		return Health{}, false
	}
	c.healthChanged = false
	h := Health{Failing: map[address.TypeName]int{}, Paused: map[address.TypeName]int{}}
	for t, n := range c.failingByType {
		h.Failing[t] = n
	}
	for t, n := range c.pausedByType {
		h.Paused[t] = n
	}
	for t := range c.typePauses {
		h.PausedTypes = append(h.PausedTypes, t)
	}
	sort.Slice(h.PausedTypes, func(i, j int) bool { return h.PausedTypes[i].String() < h.PausedTypes[j].String() })
	return h, true
}

// failing counts a batch's move into or out of failing (attempt > 0).
func (c *Core) failing(t address.TypeName, delta int) {
	c.healthChanged = true
	if c.failingByType[t] += delta; c.failingByType[t] <= 0 {
		delete(c.failingByType, t)
	}
}

// applyHeldMutations applies every mutation queued for an address that is
// paused or whose batch waits out a backoff, wherever it is in the queue:
// nothing of the address is in flight, so there is nothing to wait for.
func (c *Core) applyHeldMutations(mb *mailbox) error {
	if !slicesContainsMut(mb.queue) {
		return nil
	}
	rest := mb.queue[:0:0]
	var muts []queued
	for _, q := range mb.queue {
		if q.mut != nil {
			muts = append(muts, q)
		} else {
			rest = append(rest, q)
		}
	}
	mb.queue = rest
	for _, q := range muts {
		c.backlog--
		if err := c.applyMutation(q); err != nil {
			return err
		}
	}
	return nil
}

func slicesContainsMut(qs []queued) bool {
	for _, q := range qs {
		if q.mut != nil {
			return true
		}
	}
	return false
}
