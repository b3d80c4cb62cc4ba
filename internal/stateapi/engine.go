package stateapi

import (
	"context"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// Engine is what the API needs of the runtime, and all it may use: the
// embedded engine implements it, and so can a clustered one. Errors that
// wrap engine.ErrBusy or engine.ErrClosed answer 503.
type Engine interface {
	// Read returns the applied entries of an address (one state, or all
	// when state is empty) and the states its type registered.
	Read(ctx context.Context, a address.Address, state string) (partition.Reply, error)
	// Mutate applies an operator mutation in the address's mailbox order
	// and returns its receipt when m.Ack says.
	Mutate(ctx context.Context, m partition.Mutation) (partition.Receipt, error)
	// Receipt returns the durable receipt of a mutation.
	Receipt(id string) (*protocol.Receipt, bool, error)
	// WaitReceipt returns a mutation's receipt once it is final, or the
	// latest one when ctx ends first.
	WaitReceipt(ctx context.Context, id string) (*protocol.Receipt, bool, error)
	// AuditOf returns the audit records of one mutation, written at at.
	AuditOf(id string, at int64) ([]*protocol.AuditRecord, error)
	// ScanAudit calls fn with the audit records that pass the filter, in
	// time order, until fn returns false. A filter naming an address or a
	// principal is served from an index, not by scanning the whole log.
	ScanAudit(f store.AuditFilter, fn func(*protocol.AuditRecord) bool) error
	// SpecsOf returns the registered states of a function type.
	SpecsOf(t address.TypeName) []partition.Spec
	// KnownTypes returns every function type with registered states.
	KnownTypes() []address.TypeName
	// ScanIDs calls fn with the ids of type t holding durable state, in
	// order, starting with prefix and after after, until fn returns false.
	ScanIDs(t address.TypeName, prefix, after string, fn func(id string) bool) error
	// ScanTypes calls fn with every function type holding durable state
	// until fn returns false.
	ScanTypes(fn func(t address.TypeName) bool) error
	// ScanIngressDeadLetters calls fn with the stored dead letters of the
	// ingresses that f selects, in the order they were stored, until fn
	// returns false.
	ScanIngressDeadLetters(f store.DeadLetterFilter, fn func(store.DeadLetter) bool) error
	// IngressDeadLetterPartition returns the partition whose changelog
	// holds an ingress dead letter in cluster mode (its owner answers for
	// it when a listing is gathered from every node).
	IngressDeadLetterPartition(d *store.DeadLetter) int
	// Repairer: failing addresses, inboxes, pauses (repair.go).
	Repairer
	// History calls fn with the durable history records of one entry,
	// newest first (or oldest first), after the commit after (0: from the
	// start), until fn returns false.
	History(a address.Address, state string, oldestFirst bool, after uint64, fn func(store.HistoryRecord) bool) error
	// HistoryAt returns what an address's entries (or one entry) held at a
	// point of its partition's past, and whether that is all of them.
	HistoryAt(a address.Address, state string, p store.Point) ([]store.PastEntry, bool, error)
	// PartitionOf returns the partition that owns an address.
	PartitionOf(a address.Address) int
	// WaitDurable waits until commit min of partition p is durable, or ctx
	// ends; it returns the partition's durable commit and whether it
	// reached min.
	WaitDurable(ctx context.Context, p int, min uint64) (uint64, bool, error)
	// InboxRepairer: skip, edit, cancel, delete an address, message dead
	// letters (inboxrepair.go).
	InboxRepairer
	// Overviewer: queued messages and state sizes per type (overview.go).
	Overviewer
}
