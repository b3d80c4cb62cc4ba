package stateapi

import (
	"context"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// The API has two dependencies, each all it may use of the runtime:
// Engine, the partitions, asked for what only the partition that owns an
// address can answer or change, in its mailbox order; and Store, the
// committed records read directly. A read that must see what a partition
// applied goes to Engine; a listing, a receipt, the audit log and the
// history read Store, and see what is committed (a receipt: durable).

// Engine is what the API asks of the partitions (the embedded
// *engine.Engine implements it). Errors that wrap engine.ErrBusy or
// engine.ErrClosed answer 503; engine.ErrMoved (cluster mode: the
// partition is not this node's) answers 503 naming the owner, or sends
// the request there.
type Engine interface {
	// Read returns the entries of an address (one state, or all when state
	// is empty) and the states its type registered: the latest applied
	// value, including what a mutation applied and did not commit yet,
	// never part of an invocation's batch in flight, and without waiting
	// behind a function call.
	Read(ctx context.Context, a address.Address, state string) (partition.Reply, error)
	// Mutate applies an operator mutation in the address's mailbox order
	// and returns its receipt when m.Ack says: accepted once durable in
	// the inbox, applied once the partition applied it, committed once the
	// commit carrying it is durable. It is refused (engine.ErrBusy) when
	// the partition's queue is full.
	Mutate(ctx context.Context, m partition.Mutation) (partition.Receipt, error)
	// WaitReceipt returns a mutation's durable receipt once it is final
	// (committed or rejected), or the latest one when ctx ends first.
	WaitReceipt(ctx context.Context, id string) (*protocol.Receipt, bool, error)
	// SpecsOf returns the states a function type registered.
	SpecsOf(t address.TypeName) []partition.Spec
	// KnownTypes returns every function type with registered states.
	KnownTypes() []address.TypeName
	// WaitDurable waits until commit min of partition p (and every one
	// before it) is durable, or ctx ends; it returns the partition's
	// durable commit and whether it reached min.
	WaitDurable(ctx context.Context, p int, min uint64) (uint64, bool, error)
	// Repairer: failing addresses, inboxes, pauses, and P (repair.go).
	Repairer
	// InboxRepairer: skip, edit, cancel, delete an address, re-send a
	// message dead letter (inboxrepair.go).
	InboxRepairer
	// Overviewer: queued messages per type (overview.go).
	Overviewer
}

// Store is what the API reads of the store directly (the engine's
// engine.Reads, or a *store.DB). Every read returns committed records
// only, and none sees part of a commit. A commit is readable as soon as
// it is written, while its sync is under way: the records of the last
// group or two may not have reached the disk yet. Receipts are the
// exception, and say committed only once that is durable (engine.Reads).
type Store interface {
	// Receipt returns the receipt of a mutation; a final one (committed
	// or rejected) only once the commit that wrote it is durable.
	Receipt(id string) (*protocol.Receipt, bool, error)
	// AuditOf returns the audit records of one mutation, written at at.
	AuditOf(id string, at int64) ([]*protocol.AuditRecord, error)
	// ScanAuditFiltered calls fn with the audit records that pass the
	// filter, in time order (newest first with f.Newest), until fn
	// returns false. A filter naming an address or a principal is served
	// from an index, not by scanning the whole log.
	ScanAuditFiltered(f store.AuditFilter, fn func(*protocol.AuditRecord) bool) error
	// ScanIDs calls fn with the ids of type t holding durable state, in
	// order, starting with prefix and after after, until fn returns false.
	ScanIDs(t address.TypeName, prefix, after string, fn func(id string) bool) error
	// ScanTypes calls fn with every function type holding durable state
	// until fn returns false.
	ScanTypes(fn func(t address.TypeName) bool) error
	// ScanState calls fn with the durable state entries of type t, values
	// included, in key order after the cursor after, until fn returns
	// false (export.go).
	ScanState(t address.TypeName, prefix string, after *store.StateCursor, fn func(id, state string, e store.Entry) bool) error
	// ScanHistory calls fn with the durable history records of one entry,
	// newest first (or oldest first), after the commit after (0: from the
	// start), until fn returns false.
	ScanHistory(a address.Address, state string, oldestFirst bool, after uint64, fn func(store.HistoryRecord) bool) error
	// HistoryAt returns what an address's entries (or one entry) held at a
	// point of its partition's past, and whether that is all of them.
	HistoryAt(a address.Address, state string, p store.Point) ([]store.PastEntry, bool, error)
	// StateStatsOf counts a type's ids, entries and bytes of durable state
	// whose ids keep accepts (nil: all), reading at most maxKeys entries:
	// past the cap the counts are lower bounds.
	StateStatsOf(t address.TypeName, maxKeys int, keep func(id string) bool) (store.StateStats, error)
	// ScanDeadLetters calls fn with the stored dead letters of the Kafka
	// ingresses that f selects, in the order they were stored, until fn
	// returns false.
	ScanDeadLetters(f store.DeadLetterFilter, fn func(store.DeadLetter) bool) error
	// MessageDeadLetter returns a skipped message by its skip's id.
	MessageDeadLetter(id string) (*protocol.MessageDeadLetter, bool, error)
	// ScanMessageDeadLetters calls fn with the skipped messages after the
	// id after, oldest first, until fn returns false.
	ScanMessageDeadLetters(after string, fn func(*protocol.MessageDeadLetter) bool) error
}

// partitionOf returns the partition that owns an address; for a function
// type (an empty id) the partition that keeps the receipts and audit
// records of its type-level pauses (partition.TypeOwner).
func (s *Server) partitionOf(a address.Address) int {
	if a.ID == "" {
		return partition.TypeOwner(a.Type, s.eng.Partitions())
	}
	return address.Partition(a.ID, s.eng.Partitions())
}
