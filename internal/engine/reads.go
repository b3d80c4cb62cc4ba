package engine

import (
	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// Reads is the engine's store, read-only: the committed records the state
// API reads beside the partitions (receipts, audit records, history, the
// types and ids holding state, state sizes, dead letters). Its methods are
// *store.DB's, by the same names, so either serves a reader interface;
// what it adds is that the dead-letter reads answer ErrClosed once the
// engine is closed, as the engine's own work does (the store is closed
// next).
//
// It returns committed records: it does not see what a partition applied
// and has not committed yet, and no read sees part of a commit (each scan
// runs on one Pebble iterator, docs/reference/storage.md). The committer
// writes a group before its sync ends, and Pebble shows a write at once,
// so the records of the group or two being synced are readable a sync
// early; a receipt is the exception, answered committed (or rejected)
// only once its commit is durable, since a client acts on it. What an
// address's entries hold now is not here: Engine.Read answers that, the
// latest applied value, from the store or in the partition's mailbox
// order while a write to the address is not durable yet.
type Reads struct {
	e *Engine
}

// Reads returns the engine's store, read-only (see Reads).
func (e *Engine) Reads() Reads { return Reads{e: e} }

// Receipt returns the durable receipt of a mutation (store.DB.Receipt). A
// final receipt whose commit is written and not yet synced is answered
// once the sync ends (Engine.durableReceipt).
func (r Reads) Receipt(id string) (*protocol.Receipt, bool, error) {
	rc, ok, err := r.e.db.Receipt(id)
	if err != nil || !ok || rc.GetStatus() == "accepted" {
		return rc, ok, err
	}
	return r.e.durableReceipt(r.e.ctx, rc)
}

// AuditOf returns the audit records of one mutation, written at at
// (store.DB.AuditOf).
func (r Reads) AuditOf(id string, at int64) ([]*protocol.AuditRecord, error) {
	return r.e.db.AuditOf(id, at)
}

// ScanAuditFiltered calls fn with the audit records that pass f, reading
// only what the store's indexes select (store.DB.ScanAuditFiltered).
func (r Reads) ScanAuditFiltered(f store.AuditFilter, fn func(*protocol.AuditRecord) bool) error {
	return r.e.db.ScanAuditFiltered(f, fn)
}

// ScanIDs lists the ids of function type t that hold durable state
// (store.DB.ScanIDs).
func (r Reads) ScanIDs(t address.TypeName, prefix, after string, fn func(id string) bool) error {
	return r.e.db.ScanIDs(t, prefix, after, fn)
}

// ScanTypes lists the function types that hold durable state
// (store.DB.ScanTypes).
func (r Reads) ScanTypes(fn func(t address.TypeName) bool) error { return r.e.db.ScanTypes(fn) }

// ScanHistory calls fn with the durable history records of one entry
// (store.DB.ScanHistory).
func (r Reads) ScanHistory(a address.Address, state string, oldestFirst bool, after uint64, fn func(store.HistoryRecord) bool) error {
	return r.e.db.ScanHistory(a, state, oldestFirst, after, fn)
}

// HistoryAt returns what the entries of an address (or one of them) held
// at a point of its partition's past (store.DB.HistoryAt).
func (r Reads) HistoryAt(a address.Address, state string, p store.Point) ([]store.PastEntry, bool, error) {
	return r.e.db.HistoryAt(a, state, p)
}

// StateStatsOf counts the ids, entries and bytes of a function type's
// durable state that keep accepts, reading at most maxKeys entries
// (store.DB.StateStatsOf).
func (r Reads) StateStatsOf(t address.TypeName, maxKeys int, keep func(id string) bool) (store.StateStats, error) {
	return r.e.db.StateStatsOf(t, maxKeys, keep)
}

// ScanDeadLetters calls fn with the stored Kafka ingress dead letters f
// selects, oldest first (store.DB.ScanDeadLetters); ErrClosed once the
// engine is closed.
func (r Reads) ScanDeadLetters(f store.DeadLetterFilter, fn func(store.DeadLetter) bool) error {
	if r.e.closed.Load() {
		return ErrClosed
	}
	return r.e.db.ScanDeadLetters(f, fn)
}

// MessageDeadLetter returns a skipped message by its skip's mutation id
// (store.DB.MessageDeadLetter); ErrClosed once the engine is closed.
func (r Reads) MessageDeadLetter(id string) (*protocol.MessageDeadLetter, bool, error) {
	if r.e.closed.Load() {
		return nil, false, ErrClosed
	}
	return r.e.db.MessageDeadLetter(id)
}

// ScanMessageDeadLetters calls fn with the skipped messages after the id
// after, oldest first (store.DB.ScanMessageDeadLetters); ErrClosed once
// the engine is closed.
func (r Reads) ScanMessageDeadLetters(after string, fn func(*protocol.MessageDeadLetter) bool) error {
	if r.e.closed.Load() {
		return ErrClosed
	}
	return r.e.db.ScanMessageDeadLetters(after, fn)
}

// Backup writes a consistent copy of the store to dir while the engine
// runs (store.DB.Backup).
func (r Reads) Backup(dir string, o store.BackupOptions) (*store.BackupManifest, error) {
	if r.e.closed.Load() {
		return nil, ErrClosed
	}
	return r.e.db.Backup(dir, o)
}
