package partition

import (
	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/protocol"
)

// Entry is one state value as the store keeps it.
type Entry struct {
	// Typename is the type the function registered for this state.
	Typename string
	// Value is the exact bytes; it may be empty (a proto3 zero such as int 0).
	Value []byte
	// Version changes on every write of the entry; never reused.
	Version uint64
	// ExpiresAt is the unix millisecond at which the value expires; 0 never.
	ExpiresAt int64
}

// expired reports whether e is past its TTL at now. Expired values are
// never returned (StateFun's NeverReturnExpired).
func (e Entry) expired(now int64) bool { return e.ExpiresAt != 0 && e.ExpiresAt <= now }

// ExpireMode is when a state's TTL clock restarts.
type ExpireMode int32

// The modes match ExpirationSpec.ExpireMode on the wire.
const (
	ExpireNone        ExpireMode = 0
	ExpireAfterWrite  ExpireMode = 1
	ExpireAfterInvoke ExpireMode = 2
)

// Spec is one state a function type has declared (learned from an
// IncompleteInvocationContext and persisted per function type).
type Spec struct {
	Name     string
	Typename string
	Mode     ExpireMode
	// TTL is the expiration in milliseconds; 0 when Mode is ExpireNone.
	TTL int64
}

// Reader is the committed state the core reads through. Its methods are
// called only from within Step. An error makes the partition inoperable.
type Reader interface {
	StateReader
	// Timers calls fn with the partition's durable delayed messages whose
	// key comes after after (from the first when nil), in key order (due,
	// then id), until fn returns false.
	Timers(after *TimerKey, fn func(Timer) bool) error
	// TimerByToken returns the key of the partition's durable delayed
	// message that the function with id sender scheduled with
	// cancellation token token, if any.
	TimerByToken(sender, token string) (TimerKey, bool, error)
}

// StateReader is the part of a Reader that reads state: what ReadFrom
// needs.
type StateReader interface {
	// State returns the durable entry of one state of one address.
	State(a address.Address, state string) (Entry, bool, error)
	// Specs returns the states registered for a function type, in
	// registration order.
	Specs(t address.TypeName) ([]Spec, error)
	// AddressState returns every durable entry of one address by state name
	// (expired ones included; the core filters them).
	AddressState(a address.Address) (map[string]Entry, error)
}

// InboxKey names one durable message in a partition's inbox. Seq is
// allocated by the producing source, so (Source, Seq) is unique.
type InboxKey struct {
	Partition int
	Source    uint32
	Seq       uint64
}

// SourceIngress is the InboxKey.Source of messages that came from an ingress.
const SourceIngress = ^uint32(0)

// SourceMessages is the InboxKey.Source of messages (and state mutation
// commands) that came through the cluster's messages topic; Seq is the
// record's offset in the topic's partition.
const SourceMessages = ^uint32(0) - 1

// TimerKey names one pending delayed message of a partition.
type TimerKey struct {
	Partition int
	Due       int64
	ID        uint64
}

// Timer is a pending delayed message. Env.Caller is the sender, whose id
// scopes the cancellation token.
type Timer struct {
	Key TimerKey
	Env *protocol.Envelope
}

// RemovedTimer is a delayed message a commit deletes (it fired or was
// cancelled): its key, and the id of its sender and its cancellation
// token (empty when it had none), whose entry in the store's index by
// token goes with it.
type RemovedTimer struct {
	Key           TimerKey
	Sender, Token string
}

// Event is an input to Step.
type Event interface{ isEvent() }

// MessageArrived is a durable message for an address of this partition,
// or a durable operator mutation (Mutation set, Env unused).
type MessageArrived struct {
	Key      InboxKey
	Env      *protocol.Envelope
	Mutation *Mutation
}

// ResultArrived is the outcome of an Invocation: a response, or the error
// of the attempt (after which the core retries with backoff).
type ResultArrived struct {
	Addr     address.Address
	Request  uint64
	Response *protocol.FromFunction
	Err      error
}

// CommitDurable says the commit with this id (and every earlier one) is
// durable.
type CommitDurable struct{ ID uint64 }

// Tick only advances time: due timers fire and backoffs end.
type Tick struct{}

// SpecsKnown tells the core that another partition registered states of a
// function type, so this one needs no negotiation round trip to learn them.
type SpecsKnown struct {
	Type  address.TypeName
	Specs []Spec
}

func (MessageArrived) isEvent() {}
func (ResultArrived) isEvent()  {}
func (CommitDurable) isEvent()  {}
func (Tick) isEvent()           {}
func (SpecsKnown) isEvent()     {}

// Invocation is a request to send to the function at Addr now. Its result
// must come back as a ResultArrived with the same Addr and Request.
type Invocation struct {
	Addr    address.Address
	Request uint64
	// Attempt is 0 for the first try of a batch, then counts retries.
	Attempt int
	Body    *protocol.ToFunction
}

// Produced is a message written to an inbox by a commit.
type Produced struct {
	Key InboxKey
	Env *protocol.Envelope
	// Deliver is set on a message for this partition's own address that
	// the core did not queue (Config.MaxQueued): the shell delivers it
	// once the commit is durable, as it delivers those for other
	// partitions, and it comes back as a MessageArrived. A message for
	// another partition is always delivered by the shell.
	Deliver bool
}

// Egress is a record for an egress, routed (e.g. to a playground topic).
type Egress struct {
	// Egress is the egress identifier, "namespace/type".
	Egress string
	Route  string
	Record *protocol.EgressRecord
}

// StateWrite is the last write of one entry in a commit: Entry, or a
// deletion when Delete is set.
type StateWrite struct {
	Addr   address.Address
	State  string
	Entry  Entry
	Delete bool
	// Cause is what made the change (the last one, when the commit changes
	// the entry more than once); nil for a write that changes no value (a
	// TTL restart), which the history does not record. At is when (unix ms).
	Cause *Cause
	At    int64
}

// Commit is one atomic, durable step of a partition. The committer must
// apply it in this order: Produced, Timers, State, Specs, Meta, then the
// deletions (Consumed, TimersRemoved) — a message produced and consumed
// within the same commit is then gone.
type Commit struct {
	// ID is the partition's commit id (the state API's checkpoint id).
	ID uint64
	// VersionSeq is the partition's version counter after this commit.
	VersionSeq uint64

	State         []StateWrite
	Produced      []Produced
	Consumed      []InboxKey
	TimersAdded   []Timer
	TimersRemoved []RemovedTimer
	Egress        []Egress
	// Receipts are the outcomes of the operator mutations in this commit;
	// Audit their per-entry records with before-images.
	Receipts []Receipt
	Audit    []AuditRecord
	// Specs holds the full new spec list of each type whose specs changed.
	// The shell publishes them to the other partitions at once, so that
	// they need no round trip of their own to learn them.
	Specs map[address.TypeName][]Spec
	// Pauses set or lift pauses (pause.go), in order.
	Pauses []PauseWrite
	// DeadLetters are the messages skipped out of an inbox (repair.go);
	// Rewritten the inbox messages an operator edited, each to be written
	// again under its key.
	DeadLetters []MessageDeadLetter
	Rewritten   []Produced
}

// Empty reports whether the commit writes nothing.
func (c *Commit) Empty() bool {
	return len(c.State) == 0 && len(c.Produced) == 0 && len(c.Consumed) == 0 &&
		len(c.TimersAdded) == 0 && len(c.TimersRemoved) == 0 && len(c.Egress) == 0 && len(c.Specs) == 0 &&
		len(c.Receipts) == 0 && len(c.Audit) == 0 && len(c.Pauses) == 0 && len(c.DeadLetters) == 0 && len(c.Rewritten) == 0
}

// Failure is an attempt that did not succeed, for logs and metrics. The
// core has already scheduled the retry at RetryAt.
type Failure struct {
	Addr    address.Address
	Attempt int
	// Violation is set when the function answered but broke the protocol
	// (its effects were refused as a whole).
	Violation bool
	Err       error
	// RetryAt is when the retry goes out; 0 when Paused.
	RetryAt int64
	// Paused is set when the poison policy paused the address instead.
	Paused bool
}

// Ready is the effects of the steps since the last Ready.
type Ready struct {
	Invocations []Invocation
	// Commit is nil when there is nothing to write.
	Commit   *Commit
	Failures []Failure
	// Replies answer reads and AckApplied mutations; they may go out at once.
	Replies []Reply
}
