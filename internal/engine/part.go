package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/statefun-go/statefun/internal/partition"
)

// part is the mailbox of one partition: the only goroutine that touches its
// core. Anyone may post events; the loop steps them in arrival order.
type part struct {
	e    *Engine
	id   int
	core *partition.Core

	mu     sync.Mutex
	events []partition.Event
	spare  []partition.Event
	wake   chan struct{}

	// unprocessed counts posted events the loop has not stepped yet, and
	// queued the core's backlog after the last step: together, the work
	// waiting in this partition, which the ingress and the state API bound.
	unprocessed atomic.Int64
	queued      atomic.Int64
}

// full reports whether the partition's queue is at limit.
func (p *part) full(limit int) bool {
	return p.unprocessed.Load()+p.queued.Load() >= int64(limit)
}

func newPart(e *Engine, id int, core *partition.Core) *part {
	return &part{e: e, id: id, core: core, wake: make(chan struct{}, 1)}
}

// post queues an event; it never blocks.
func (p *part) post(ev partition.Event) {
	p.mu.Lock()
	p.events = append(p.events, ev)
	p.mu.Unlock()
	p.unprocessed.Add(1)
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *part) loop(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if err := p.process(); err != nil {
			p.e.fatal(err)
			return
		}
		if at, ok := p.core.NextDeadline(); ok {
			timer.Reset(time.Until(time.UnixMilli(at)))
		} else {
			timer.Stop()
		}
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		case <-timer.C:
		}
	}
}

// process steps every queued event, then acts on the Ready: invocations go
// out now, the commit goes to the committer.
func (p *part) process() error {
	p.mu.Lock()
	evs := p.events
	p.events, p.spare = p.spare[:0], nil
	p.mu.Unlock()

	now := p.e.opts.Now().UnixMilli()
	for i, ev := range evs {
		if err := p.core.Step(now, ev); err != nil {
			return err
		}
		evs[i] = nil
	}
	if len(evs) == 0 {
		if err := p.core.Step(now, partition.Tick{}); err != nil {
			return err
		}
	}
	p.mu.Lock()
	if p.spare == nil {
		p.spare = evs[:0]
	}
	p.mu.Unlock()
	p.unprocessed.Add(-int64(len(evs)))

	rd := p.core.Ready()
	for _, f := range rd.Failures {
		p.e.logFailure(p.id, f)
	}
	for _, r := range rd.Replies {
		p.e.waiters.deliver(r)
	}
	for _, inv := range rd.Invocations {
		p.e.dispatch(p, inv)
	}
	if c := rd.Commit; c != nil {
		if len(c.Specs) > 0 {
			p.e.publishSpecs(p.id, c.Specs)
		}
		p.e.com.enqueue(&commitReq{part: p, commit: c})
	}
	backlog := p.core.Backlog()
	p.queued.Store(int64(backlog))
	p.e.m.queueDepth.WithLabelValues(partLabel(p.id)).Set(float64(backlog))
	return nil
}
