package engine

import (
	"context"
	"sync"

	"github.com/statefun-go/statefun/internal/engine/committer"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// egressPopper hands out durable egress records, each at most once.
type egressPopper struct {
	db     *store.DB
	submit func(committer.Request) error

	mu     sync.Mutex
	queues map[string]*egressQueue
}

// egressQueue remembers where the last pop of one route ended, so a pop
// does not wade through deleted records; records up to cursor are claimed.
type egressQueue struct {
	mu     sync.Mutex
	cursor uint64
}

func newEgressPopper(db *store.DB, submit func(committer.Request) error) *egressPopper {
	return &egressPopper{db: db, submit: submit, queues: map[string]*egressQueue{}}
}

func (ep *egressPopper) queue(egress, route string) *egressQueue {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	k := egress + "\x00" + route
	q := ep.queues[k]
	if q == nil {
		q = &egressQueue{}
		ep.queues[k] = q
	}
	return q
}

// PopEgress removes and returns the oldest durable record of one egress
// route (a playground topic), or ok=false when there is none. It returns once
// the removal is durable, so a record is handed out at most once: a caller
// that stops waiting (ctx) or never receives the answer loses the record.
// No lock is held while the removal is synced, so concurrent pops of one
// route share a group commit.
func (e *Engine) PopEgress(ctx context.Context, egress, route string) (rec *protocol.EgressRecord, ok bool, err error) {
	if e.closed.Load() {
		return nil, false, ErrClosed
	}
	q := e.egress.queue(egress, route)
	q.mu.Lock()
	seq, rec, ok, err := e.db.NextEgress(egress, route, q.cursor)
	if err != nil || !ok {
		q.mu.Unlock()
		return nil, false, err
	}
	q.cursor = seq // claimed: the next pop starts after it
	q.mu.Unlock()

	req := &popReq{e: e, egress: egress, route: route, seq: seq, done: make(chan error, 1)}
	if err := e.egress.submit(req); err != nil {
		q.unclaim(seq)
		return nil, false, err
	}
	select {
	case err := <-req.done:
		if err != nil {
			q.unclaim(seq)
			return nil, false, err
		}
		return rec, true, nil
	case <-ctx.Done():
		// The removal goes ahead: the record is gone for this caller.
		return nil, false, ctx.Err()
	}
}

// unclaim lets the next pop find seq again: its removal failed.
func (q *egressQueue) unclaim(seq uint64) {
	q.mu.Lock()
	if q.cursor >= seq {
		q.cursor = seq - 1
	}
	q.mu.Unlock()
}
