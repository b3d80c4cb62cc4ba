package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// egressPopper hands out durable egress records, each at most once.
type egressPopper struct {
	db     *store.DB
	submit func(Request) error

	mu     sync.Mutex
	queues map[string]*egressQueue
}

// egressQueue remembers where the last pop of one route ended, so a pop
// does not wade through deleted records; records up to cursor are claimed.
// read is the highest position a cursor read handed out since the start:
// an acknowledgement beyond it would remove records nobody read.
type egressQueue struct {
	mu     sync.Mutex
	cursor uint64
	read   uint64
}

// ErrNotRead is returned by AckEgress for a position beyond what reads have
// handed out (since the runtime started) while unread records lie at or
// below it: acknowledging it would remove records no consumer has seen.
// The consumer reads again and acknowledges what it got.
var ErrNotRead = errors.New("engine: the position was not read yet")

func newEgressPopper(db *store.DB, submit func(Request) error) *egressPopper {
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
	q, req, rec, err := e.claimPop(egress, route)
	if err != nil || req == nil {
		return nil, false, err
	}
	select {
	case err := <-req.done:
		if err != nil {
			q.unclaim(req.seq)
			return nil, false, err
		}
		return rec, true, nil
	case <-ctx.Done():
		// The removal goes ahead: the record is gone for this caller.
		return nil, false, ctx.Err()
	}
}

// claimPop claims the oldest record of a route that no other pop holds and
// submits its removal to the committer; the caller waits on req.done.
// req is nil when the route has no record. The queue's lock is held only
// while claiming, never across the synced commit.
func (e *Engine) claimPop(egress, route string) (q *egressQueue, req *popReq, rec *protocol.EgressRecord, err error) {
	if e.closed.Load() {
		return nil, nil, nil, ErrClosed
	}
	if e.opts.Owned {
		return nil, nil, nil, ErrPlaygroundEgress
	}
	q = e.egress.queue(egress, route)
	q.mu.Lock()
	seq, rec, ok, err := e.db.NextEgress(egress, route, q.cursor)
	if err != nil || !ok {
		q.mu.Unlock()
		return q, nil, nil, err
	}
	q.cursor = seq // claimed: the next pop starts after it
	q.mu.Unlock()

	req = &popReq{halt: e.halt, egress: egress, route: route, seq: seq, done: make(chan error, 1)}
	if err := e.egress.submit(req); err != nil {
		q.unclaim(seq)
		return q, nil, nil, err
	}
	return q, req, rec, nil
}

// unclaim lets the next pop find seq again: its removal failed.
func (q *egressQueue) unclaim(seq uint64) {
	q.mu.Lock()
	if q.cursor >= seq {
		q.cursor = seq - 1
	}
	q.mu.Unlock()
}

// ReadEgress returns the first durable record of one egress route whose
// position is greater than after (0: the oldest), without removing it, and
// ok=false when there is none. Records a pop is removing are skipped. The
// position is the record's sequence number: it grows with every record
// written and is never given twice. Reading is free of side effects but
// one: AckEgress accepts positions up to the highest one read.
func (e *Engine) ReadEgress(ctx context.Context, egress, route string, after uint64) (pos uint64, rec *protocol.EgressRecord, ok bool, err error) {
	if e.closed.Load() {
		return 0, nil, false, ErrClosed
	}
	if e.opts.Owned {
		return 0, nil, false, ErrPlaygroundEgress
	}
	if err := ctx.Err(); err != nil {
		return 0, nil, false, err
	}
	q := e.egress.queue(egress, route)
	q.mu.Lock()
	defer q.mu.Unlock()
	pos, rec, ok, err = e.db.NextEgress(egress, route, max(after, q.cursor))
	if err != nil || !ok {
		return 0, nil, false, err
	}
	if err := e.db.SyncWAL(); err != nil { // see ReadEgressBatch
		return 0, nil, false, err
	}
	q.read = max(q.read, pos)
	return pos, rec, true, nil
}

// EgressItem is one record ReadEgressBatch hands out, with its position.
type EgressItem struct {
	Pos    uint64
	Record *protocol.EgressRecord
}

// ReadEgressBatch is ReadEgress for up to limit records at once: the
// durable records of one egress route after the position after, in order,
// read with a single store iterator. An empty result means there is none.
// AckEgress then accepts positions up to the last one returned.
func (e *Engine) ReadEgressBatch(ctx context.Context, egress, route string, after uint64, limit int) ([]EgressItem, error) {
	if e.closed.Load() {
		return nil, ErrClosed
	}
	if e.opts.Owned {
		return nil, ErrPlaygroundEgress
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	q := e.egress.queue(egress, route)
	q.mu.Lock()
	defer q.mu.Unlock()
	var items []EgressItem
	err := e.db.ScanEgress(egress, route, max(after, q.cursor), limit, func(seq uint64, rec *protocol.EgressRecord) bool {
		items = append(items, EgressItem{Pos: seq, Record: rec})
		return true
	})
	if err != nil {
		return nil, err
	}
	if n := len(items); n > 0 {
		// The store shows a group commit's records before its sync is
		// done; a record handed on and then lost by a crash would be
		// written again, differently, after the restart (the function
		// runs again), and the relay would skip the new one as delivered.
		if err := e.db.SyncWAL(); err != nil {
			return nil, err
		}
		q.read = max(q.read, items[n-1].Pos)
	}
	return items, nil
}

// AckEgress removes every record of one egress route at or below pos, and
// returns once the removal is durable: the consumer has them. Acknowledging
// again is harmless. A position beyond the highest read since the start is
// refused with ErrNotRead when records the reads have not handed out lie at
// or below it (after a restart: read again, then acknowledge); with no such
// record (a repeated acknowledgement) it succeeds and removes nothing new.
// No lock is held while the removal is synced.
func (e *Engine) AckEgress(ctx context.Context, egress, route string, pos uint64) error {
	if e.closed.Load() {
		return ErrClosed
	}
	if e.opts.Owned {
		return ErrPlaygroundEgress
	}
	q := e.egress.queue(egress, route)
	q.mu.Lock()
	if pos > q.read {
		seq, _, unread, err := e.db.NextEgress(egress, route, max(q.read, q.cursor))
		if err != nil {
			q.mu.Unlock()
			return err
		}
		if unread && seq <= pos {
			read := q.read
			q.mu.Unlock()
			return fmt.Errorf("%w: position %d of %s is not read yet (the highest read since the start is %d)", ErrNotRead, seq, route, read)
		}
	}
	q.mu.Unlock()
	req := &ackReq{halt: e.halt, egress: egress, route: route, pos: pos, done: make(chan error, 1)}
	if err := e.egress.submit(req); err != nil {
		return err
	}
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		// The removal goes ahead or fails on its own; acknowledging again
		// tells which is harmless.
		return ctx.Err()
	}
}
