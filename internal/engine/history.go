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
	r := &protocol.HistoryRecord{At: w.At, Deleted: w.Delete, Cause: causeToProto(w.Cause)}
	if !w.Delete {
		r.Version, r.Typename, r.Value, r.ExpiresAt = w.Entry.Version, w.Entry.Typename, w.Entry.Value, w.Entry.ExpiresAt
	}
	return r
}

func causeToProto(c *partition.Cause) *protocol.HistoryCause {
	p := &protocol.HistoryCause{Kind: int32(c.Kind), MessageCount: int32(c.MessageCount),
		Mutation: c.Mutation, Principal: c.Principal, Reason: c.Reason, Reverts: c.Reverts}
	for _, m := range c.Messages {
		hm := &protocol.HistoryMessage{Typename: m.Typename}
		if m.Caller != nil {
			hm.Caller = toProtoAddr(*m.Caller)
		}
		p.Messages = append(p.Messages, hm)
	}
	return p
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
