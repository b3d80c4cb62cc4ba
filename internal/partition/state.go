package partition

import (
	"slices"
	"sort"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/protocol"
)

// This file is the state access API's side of the core: reads of applied
// state, and operator mutations applied in the address's mailbox order.

// AckMode is when the caller of a mutation hears back.
type AckMode int

const (
	// AckCommitted answers once the commit carrying the mutation is durable.
	AckCommitted AckMode = iota
	// AckApplied answers once the mutation is applied (visible to reads and
	// to the next invocation); a crash before the next commit can lose it.
	AckApplied
	// AckAccepted answered when the mutation was made durable in the inbox;
	// its receipt moves on through the store.
	AckAccepted
)

// MutationOp is what a mutation does.
type MutationOp int

const (
	// OpPut sets or overwrites one entry.
	OpPut MutationOp = iota
	// OpDelete drops one entry.
	OpDelete
	// OpDeleteAll drops every entry of the address.
	OpDeleteAll
	// OpRestore sets the address's entries (or the one named by State)
	// back to Image (history.go).
	OpRestore
)

// Mutation is an operator's change to one address's state.
type Mutation struct {
	// ID names the mutation (its receipt); unique, chosen by the API.
	ID string
	// Request correlates the reply for AckApplied and AckCommitted; 0 when
	// nobody waits (a durable mutation replayed after a restart).
	Request uint64
	Addr    address.Address
	// State is the entry's name; empty for OpDeleteAll.
	State string
	Op    MutationOp
	// Typename is the type the caller wants to store; empty means the
	// registered one, else the existing value's.
	Typename string
	Value    []byte
	// IfMatch, when non-zero, requires the entry's current version.
	IfMatch uint64
	// IfNoneMatch requires the entry to have no value.
	IfNoneMatch bool
	Ack         AckMode
	Principal   string
	Reason      string
	// Reverts names the mutation this one undoes, for the audit log.
	Reverts string
	// IfMatchTags, when set, is an If-Match header: the mutation applies
	// only when it matches the entry (RFC 9110 §13.1.1). It holds with
	// IfMatch, not instead of it.
	IfMatchTags *Condition
	// IfNoneMatchTags, when set, is an If-None-Match header: the mutation
	// applies only when it does not match the entry (RFC 9110 §13.1.2).
	IfNoneMatchTags *Condition
	// Image is what OpRestore sets: for a whole address (State empty) every
	// entry it should hold (the others are deleted); for one entry, that
	// entry (absent from Image: deleted).
	Image []RestoreEntry
	// Repair is set for an operation on the inbox (repair.go).
	Repair *MessageRepair
}

// Condition is an If-Match or If-None-Match header as the core evaluates
// it: at the mutation's turn in its mailbox, against the entry as it is
// then, not as it was when the request arrived.
type Condition struct {
	// Any is "*": it matches an entry that has a value.
	Any bool
	// Versions are the versions of the listed entity tags that can match.
	// The API leaves out the tags that cannot (a weak tag in If-Match, a
	// tag that names no version the runtime issues), so a Condition with
	// neither Any nor Versions matches nothing.
	Versions []uint64
}

// Matches reports whether the condition matches an entry: one with a value
// (exists) at version, or none.
func (c *Condition) Matches(exists bool, version uint64) bool {
	return exists && (c.Any || slices.Contains(c.Versions, version))
}

// RejectCode says why a mutation was not applied.
type RejectCode int

const (
	// Applied: not rejected.
	Applied RejectCode = iota
	// RejectPrecondition: If-Match or If-None-Match did not hold.
	RejectPrecondition
	// RejectTypeConflict: the typename differs from the registered one.
	RejectTypeConflict
	// RejectNoTypename: no typename was given, registered or stored.
	RejectNoTypename
	// RejectNotFound: a delete of an entry (or address) with no value.
	RejectNotFound
)

// Receipt is the outcome of a mutation as the core decided it.
type Receipt struct {
	Mutation string
	Request  uint64
	Addr     address.Address
	State    string
	Ack      AckMode
	Reject   RejectCode
	Reason   string
	// Checkpoint is the commit that carries the mutation (and this receipt).
	Checkpoint uint64
	// Version is the entry's version after the mutation (0: no value);
	// PreviousVersion before it. On a rejection Version is the current one.
	Version, PreviousVersion uint64
	// At is when it was applied (unix ms).
	At int64
	// Partition is the partition whose commit Checkpoint is: the
	// address's, or for a delayed message the sender's, which holds it.
	Partition int
	// Unstored marks a partition's answer to its share of a type-level
	// pause or resume (Config.OwnTypePauses) that is not the type's
	// receipt: it is answered once its commit is durable, like a
	// receipt, and never stored (TypeOwner's is the one receipt).
	Unstored bool
}

// AuditRecord is one entry's change by a mutation, with its before-image.
type AuditRecord struct {
	Mutation  string
	At        int64
	Principal string
	Reason    string
	Reverts   string
	Addr      address.Address
	State     string
	Op        MutationOp
	// Before is the entry before the change; nil when it had no value.
	Before *Entry
	// Version is the version after the change, 0 for a deletion.
	Version uint64
	// Typename is the stored typename after a put.
	Typename string
	// Messages and Timers are the messages and delayed messages a repair
	// of the inbox took away or put back (repair.go).
	Messages []*protocol.Envelope
	Timers   []Timer
}

// Mutate is an operator mutation that needs no durability before it is
// applied (AckApplied, AckCommitted). Durable ones (AckAccepted) arrive as
// a MessageArrived whose Mutation is set.
type Mutate struct{ Mutation *Mutation }

// ReadState asks for the applied entries of an address: one state, or all
// of them when State is empty.
type ReadState struct {
	Request uint64
	Addr    address.Address
	State   string
}

func (Mutate) isEvent()    {}
func (ReadState) isEvent() {}

// StateEntry is one entry in a read's reply.
type StateEntry struct {
	State string
	Entry Entry
	// Spec is set when the function registered the state.
	Spec *Spec
}

// Reply answers a ReadState or an AckApplied mutation at once.
type Reply struct {
	Request uint64
	// Entries holds the values of a read, in state-name order.
	Entries []StateEntry
	// Specs are the states registered for the address's type.
	Specs   []Spec
	Receipt *Receipt
	// Inspection answers an Inspect (inspect.go).
	Inspection *Inspection
	Err        error
}

// read answers a ReadState: applied values (this core's writes not yet
// durable included), expired ones left out.
func (c *Core) read(r ReadState) {
	rep := ReadFrom(appliedReader{c}, c.now, r.Addr, r.State)
	rep.Request = r.Request
	c.ready.Replies = append(c.ready.Replies, rep)
}

// ReadFrom answers a read of one state of a (or all of them, state empty)
// from what r holds at now (unix ms): the entries with a live value, each
// with its spec when registered, and the type's specs. The core reads
// through its applied writes; the engine reads the durable store this way
// for an address with no applied write waiting for durability, without
// a turn in the partition's mailbox.
func ReadFrom(r StateReader, now int64, a address.Address, state string) Reply {
	var rep Reply
	specs, err := r.Specs(a.Type)
	if err != nil {
		rep.Err = err
		return rep
	}
	rep.Specs = specs
	entries, err := liveEntries(r, now, a, state)
	if err != nil {
		rep.Err = err
	}
	for _, e := range entries {
		se := e
		if i := indexSpec(specs, e.State); i >= 0 {
			s := specs[i]
			se.Spec = &s
		}
		rep.Entries = append(rep.Entries, se)
	}
	return rep
}

// appliedReader is the core's view: its applied writes over the durable
// store, and the specs it knows.
type appliedReader struct{ c *Core }

func (r appliedReader) State(a address.Address, state string) (Entry, bool, error) {
	return r.c.getRaw(a, state)
}

func (r appliedReader) Specs(t address.TypeName) ([]Spec, error) { return r.c.specsOf(t) }

func (r appliedReader) AddressState(a address.Address) (map[string]Entry, error) {
	all, err := r.c.r.AddressState(a)
	if err != nil {
		return nil, err
	}
	for k, o := range r.c.overlay {
		if k.addr != a {
			continue
		}
		if o.delete {
			delete(all, k.state)
		} else {
			all[k.state] = o.entry
		}
	}
	return all, nil
}

// entries returns the live entries of one state, or of every state of the
// address when state is empty.
func (c *Core) entries(a address.Address, state string) ([]StateEntry, error) {
	return liveEntries(appliedReader{c}, c.now, a, state)
}

// liveEntries returns the entries of one state (or all, state empty) of a
// that have a value at now, in state-name order.
func liveEntries(r StateReader, now int64, a address.Address, state string) ([]StateEntry, error) {
	if state != "" {
		e, ok, err := r.State(a, state)
		if err != nil || !ok || e.expired(now) {
			return nil, err
		}
		return []StateEntry{{State: state, Entry: e}}, nil
	}
	all, err := r.AddressState(a)
	if err != nil {
		return nil, err
	}
	out := make([]StateEntry, 0, len(all))
	for name, e := range all {
		if !e.expired(now) {
			out = append(out, StateEntry{State: name, Entry: e})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].State < out[j].State })
	return out, nil
}

// queueMutation puts a mutation in its address's mailbox order.
func (c *Core) queueMutation(key *InboxKey, m *Mutation) error {
	mb := c.mailbox(m.Addr)
	q := queued{mut: m, at: c.now}
	if key != nil {
		q.key, q.durable = *key, true
	}
	mb.queue = append(mb.queue, q)
	c.backlog++
	return c.advance(m.Addr, mb)
}

// applyMutation carries out one mutation at its turn in the mailbox.
func (c *Core) applyMutation(q queued) error {
	m := q.mut
	if q.durable {
		c.pending.Consumed = append(c.pending.Consumed, q.key)
	}
	// The cause first: a repair (delete-address, a revert) writes state
	// too, and its history records name the mutation.
	c.cause = mutationCause(m)
	defer func() { c.cause = nil }()
	if m.Repair != nil {
		return c.applyRepair(m)
	}
	rc := Receipt{Mutation: m.ID, Request: m.Request, Addr: m.Addr, State: m.State, Ack: m.Ack, Checkpoint: c.commitID + 1, At: c.now}
	reject := func(code RejectCode, reason string) error {
		rc.Reject, rc.Reason = code, reason
		c.settle(rc)
		return nil
	}
	if m.Op == OpRestore {
		return c.applyRestore(m, rc)
	}
	if m.Op == OpDeleteAll {
		entries, err := c.entries(m.Addr, "")
		if err != nil {
			return err
		}
		if len(entries) == 0 {
			return reject(RejectNotFound, "the address holds no state")
		}
		for _, e := range entries {
			before := e.Entry
			c.write(m.Addr, e.State, Entry{}, true)
			c.audit(m, e.State, &before, 0, "")
		}
		c.settle(rc)
		return nil
	}
	cur, exists, err := c.get(m.Addr, m.State)
	if err != nil {
		return err
	}
	if exists {
		rc.PreviousVersion, rc.Version = cur.Version, cur.Version
	}
	// A delete of an entry without a value is a 404 whatever the
	// conditions: RFC 9110 §13.2.1 has a server ignore preconditions when
	// the request would fail without them.
	if m.Op == OpDelete && !exists {
		return reject(RejectNotFound, "the entry has no value")
	}
	switch {
	case m.IfMatch != 0 && (!exists || cur.Version != m.IfMatch):
		return reject(RejectPrecondition, "If-Match: the entry's current version differs")
	case m.IfMatchTags != nil && !m.IfMatchTags.Matches(exists, cur.Version):
		if !exists {
			return reject(RejectPrecondition, "If-Match: the entry has no value")
		}
		return reject(RejectPrecondition, "If-Match: no listed entity tag matches the entry's current version")
	case m.IfNoneMatch && exists:
		return reject(RejectPrecondition, "If-None-Match: the entry has a value")
	case m.IfNoneMatchTags != nil && m.IfNoneMatchTags.Matches(exists, cur.Version):
		return reject(RejectPrecondition, "If-None-Match: a listed entity tag matches the entry's current version")
	}
	var before *Entry
	if exists {
		b := cur
		before = &b
	}
	if m.Op == OpDelete {
		c.write(m.Addr, m.State, Entry{}, true)
		rc.Version = 0
		c.audit(m, m.State, before, 0, "")
		c.settle(rc)
		return nil
	}
	specs, err := c.specsOf(m.Addr.Type)
	if err != nil {
		return err
	}
	typename := m.Typename
	var spec *Spec
	if i := indexSpec(specs, m.State); i >= 0 {
		spec = &specs[i]
	}
	switch {
	case spec != nil && typename == "":
		typename = spec.Typename
	case spec != nil && typename != spec.Typename:
		return reject(RejectTypeConflict, "the function registered "+m.State+" as "+spec.Typename+", not "+typename)
	case typename == "" && exists:
		typename = cur.Typename
	case typename == "":
		return reject(RejectNoTypename, "no typename: give one, or the function must register the state first")
	}
	c.versionSeq++
	e := Entry{Typename: typename, Value: m.Value, Version: c.versionSeq}
	if spec != nil && spec.Mode != ExpireNone {
		e.ExpiresAt = addSat(c.now, spec.TTL)
	}
	c.write(m.Addr, m.State, e, false)
	rc.Version = e.Version
	c.audit(m, m.State, before, e.Version, typename)
	c.settle(rc)
	return nil
}

func (c *Core) audit(m *Mutation, state string, before *Entry, version uint64, typename string) {
	c.pending.Audit = append(c.pending.Audit, AuditRecord{
		Mutation: m.ID, At: c.now, Principal: m.Principal, Reason: m.Reason, Reverts: m.Reverts,
		Addr: m.Addr, State: state, Op: m.Op, Before: before, Version: version, Typename: typename,
	})
}

// settle records a receipt in the commit (it becomes durable with the
// mutation) and answers an AckApplied caller at once.
func (c *Core) settle(rc Receipt) {
	rc.Partition = c.cfg.ID
	c.pending.Receipts = append(c.pending.Receipts, rc)
	if rc.Ack == AckApplied && rc.Request != 0 {
		r := rc
		c.ready.Replies = append(c.ready.Replies, Reply{Request: rc.Request, Receipt: &r})
	}
}
