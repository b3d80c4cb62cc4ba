package engine

import (
	"context"
	"sync"

	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
)

// historyRecord is the stored history record of one state write of a
// commit: the entry after it (or its deletion) and its cause.
func historyRecord(w partition.StateWrite) *protocol.HistoryRecord {
	return new(encodeScratch).history(w)
}

// encodeScratch holds the records a partition commit's Encode hands to the
// store: the store marshals each at once and keeps only the bytes, so one
// set of records, reset for each write, serves every write of every
// commit. A committed write (its history record, audit record and receipt)
// and a function's state change (its history record and its cause) so
// allocate nothing for them. Owned by the goroutine that encodes requests
// (committer.Request's Encode runs on one goroutine at a time).
type encodeScratch struct {
	hist    protocol.HistoryRecord
	cause   protocol.HistoryCause
	msgs    []protocol.HistoryMessage
	msgPtrs []*protocol.HistoryMessage
	callers []protocol.Address
	audit   protocol.AuditRecord
	receipt protocol.Receipt
	target  protocol.Address
	// auditPart and receiptPart are the partition fields of audit and
	// receipt (optional fields, so pointers).
	auditPart, receiptPart uint32
}

// history returns w's history record, valid until the next call.
func (s *encodeScratch) history(w partition.StateWrite) *protocol.HistoryRecord {
	c := w.Cause
	n := len(c.Messages)
	if cap(s.msgs) < n {
		s.msgs = make([]protocol.HistoryMessage, n)
		s.msgPtrs = make([]*protocol.HistoryMessage, n)
		s.callers = make([]protocol.Address, n)
	}
	var msgs []*protocol.HistoryMessage
	if n > 0 {
		msgs = s.msgPtrs[:n]
	}
	for i, m := range c.Messages {
		s.msgs[i] = protocol.HistoryMessage{Typename: m.Typename}
		if m.Caller != nil {
			s.callers[i] = protocol.Address{Namespace: m.Caller.Type.Namespace, Type: m.Caller.Type.Name, Id: m.Caller.ID}
			s.msgs[i].Caller = &s.callers[i]
		}
		msgs[i] = &s.msgs[i]
	}
	s.cause = protocol.HistoryCause{Kind: int32(c.Kind), MessageCount: int32(c.MessageCount),
		Mutation: c.Mutation, Principal: c.Principal, Reason: c.Reason, Reverts: c.Reverts, Messages: msgs}
	s.hist = protocol.HistoryRecord{At: w.At, Deleted: w.Delete, Cause: &s.cause}
	if !w.Delete {
		s.hist.Version, s.hist.Typename, s.hist.Value, s.hist.ExpiresAt = w.Entry.Version, w.Entry.Typename, w.Entry.Value, w.Entry.ExpiresAt
	}
	return &s.hist
}

// auditRecord returns a's audit record, kept by partition p, valid until
// the next call.
func (s *encodeScratch) auditRecord(a partition.AuditRecord, p int) *protocol.AuditRecord {
	s.target = protocol.Address{Namespace: a.Addr.Type.Namespace, Type: a.Addr.Type.Name, Id: a.Addr.ID}
	s.audit = protocol.AuditRecord{}
	fillAudit(&s.audit, a, &s.target)
	s.auditPart = uint32(p)
	s.audit.Partition = &s.auditPart
	return &s.audit
}

// receiptRecord returns r's receipt, kept by partition p, valid until the
// next call.
func (s *encodeScratch) receiptRecord(r partition.Receipt, p int) *protocol.Receipt {
	s.target = protocol.Address{Namespace: r.Addr.Type.Namespace, Type: r.Addr.Type.Name, Id: r.Addr.ID}
	s.receipt = protocol.Receipt{}
	fillReceipt(&s.receipt, r, &s.target)
	s.receiptPart = uint32(p)
	s.receipt.Partition = &s.receiptPart
	return &s.receipt
}

// positions are the partitions' durable commit ids, for reads that must
// reflect at least a given commit (read your own repair).
type positions struct {
	mu      sync.Mutex
	durable []uint64
	// changed, made by the first get after a change, is closed and
	// cleared when a commit becomes durable: a commit with no one waiting
	// makes no channel.
	changed chan struct{}
}

func (ps *positions) set(p int, id uint64) {
	ps.mu.Lock()
	for len(ps.durable) <= p {
		ps.durable = append(ps.durable, 0)
	}
	if id > ps.durable[p] {
		ps.durable[p] = id
		ps.wake()
	}
	ps.mu.Unlock()
}

// wake wakes the callers waiting on changed. Under mu.
func (ps *positions) wake() {
	if ps.changed != nil {
		close(ps.changed)
		ps.changed = nil
	}
}

// moved wakes the callers of WaitDurable: a partition was revoked.
func (ps *positions) moved() {
	ps.mu.Lock()
	ps.wake()
	ps.mu.Unlock()
}

func (ps *positions) get(p int) (uint64, <-chan struct{}) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.changed == nil {
		ps.changed = make(chan struct{})
	}
	if p >= len(ps.durable) {
		return 0, ps.changed
	}
	return ps.durable[p], ps.changed
}

// WaitDurable waits until partition p's commit min (and every one before
// it) is durable, or ctx ends, and returns the partition's durable commit
// id then and whether it reached min. With Options.Owned it returns
// ErrMoved when p is not owned, or is revoked while it waits.
func (e *Engine) WaitDurable(ctx context.Context, p int, min uint64) (uint64, bool, error) {
	for {
		cur, changed := e.positions.get(p)
		if cur >= min {
			return cur, true, nil
		}
		if e.slots != nil && (p < 0 || p >= e.n || e.part(p) == nil) {
			return cur, false, movedErr(p)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return cur, false, nil
		case <-e.ctx.Done():
			return cur, false, e.stopErr(nil)
		}
	}
}
