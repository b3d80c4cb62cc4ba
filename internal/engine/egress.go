package engine

import (
	"context"
	"sync"

	"github.com/statefun-go/statefun/internal/protocol"
)

// egressQueue serializes the pops of one egress route and remembers where
// the last one ended, so a pop does not wade through deleted records.
type egressQueue struct {
	mu     sync.Mutex
	cursor uint64
}

// PopEgress removes and returns the oldest durable record of one egress
// route (a playground topic), or ok=false when there is none. It returns once
// the removal is durable, so a record is handed out at most once.
func (e *Engine) PopEgress(ctx context.Context, egress, route string) (rec *protocol.EgressRecord, ok bool, err error) {
	e.egressMu.Lock()
	q := e.egressQ[egress+"\x00"+route]
	if q == nil {
		q = &egressQueue{}
		e.egressQ[egress+"\x00"+route] = q
	}
	e.egressMu.Unlock()

	q.mu.Lock()
	defer q.mu.Unlock()
	seq, rec, ok, err := e.db.NextEgress(egress, route, q.cursor)
	if err != nil || !ok {
		return nil, false, err
	}
	req := &commitReq{egress: &egressPop{egress: egress, route: route, seq: seq}, done: make(chan error, 1)}
	if err := e.com.submit(req); err != nil {
		return nil, false, err
	}
	if err := <-req.done; err != nil {
		return nil, false, err
	}
	q.cursor = seq
	return rec, true, nil
}
