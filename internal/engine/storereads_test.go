package engine

import (
	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// The engine's tests read what its commits wrote through these: the
// store's reads (Reads) on the engine under test, so a test reads as a
// client of the runtime would check.

func (e *Engine) Receipt(id string) (*protocol.Receipt, bool, error) { return e.Reads().Receipt(id) }

func (e *Engine) AuditOf(id string, at int64) ([]*protocol.AuditRecord, error) {
	return e.Reads().AuditOf(id, at)
}

func (e *Engine) ScanAudit(f store.AuditFilter, fn func(*protocol.AuditRecord) bool) error {
	return e.Reads().ScanAuditFiltered(f, fn)
}

func (e *Engine) ScanIDs(t address.TypeName, prefix, after string, fn func(id string) bool) error {
	return e.Reads().ScanIDs(t, prefix, after, fn)
}

func (e *Engine) MessageDeadLetter(id string) (*protocol.MessageDeadLetter, bool, error) {
	return e.Reads().MessageDeadLetter(id)
}

func (e *Engine) ScanMessageDeadLetters(after string, fn func(*protocol.MessageDeadLetter) bool) error {
	return e.Reads().ScanMessageDeadLetters(after, fn)
}

// IngressDeadLetterPartition is the partition whose changelog holds d in
// cluster mode, among this engine's partitions.
func (e *Engine) IngressDeadLetterPartition(d *store.DeadLetter) int {
	return IngressDeadLetterPartition(d.Partition, e.n)
}
