// Package dispatch sends the invocations of the partition cores to the
// remote functions on a pool of call workers, and hands each outcome to a
// completion callback.
package dispatch

import (
	"context"
	"time"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/lane"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
)

// Functions sends one request to the endpoint that serves a function type.
// Implementations are safe for concurrent use; one attempt per call (the
// partition core owns retries). engine.Functions is an alias of it.
type Functions interface {
	Call(ctx context.Context, t address.TypeName, req *protocol.ToFunction) (*protocol.FromFunction, error)
}

// Done receives the outcome of one invocation and how long the call took.
type Done func(inv partition.Invocation, resp *protocol.FromFunction, err error, took time.Duration)

// IdleTimeout is how long a call worker waits for work before it exits.
const IdleTimeout = 30 * time.Second

type call struct {
	inv  partition.Invocation
	done Done
}

// Pool runs calls on workers: an idle one if there is one, else a new one.
// Workers live on while there is work, so their stacks, grown by decoding
// responses, are reused instead of grown again for every call (a goroutine
// per call cost 7.5% of the runtime's CPU in the profile of
// docs/benchmarks.md). There is no cap: each address has at most one call in
// flight, and the endpoint's connection pool bounds the rest.
type Pool struct {
	ctx   context.Context
	fns   Functions
	now   func() time.Time
	calls chan call // unbuffered: a send succeeds only to an idle worker
}

// New returns a pool calling fns until ctx ends; then calls in flight are
// abandoned (their Done is not called). now measures call latency.
func New(ctx context.Context, fns Functions, now func() time.Time) *Pool {
	if now == nil {
		now = time.Now
	}
	return &Pool{ctx: ctx, fns: fns, now: now, calls: make(chan call)}
}

// Dispatch starts inv and returns at once; done is called from a worker
// goroutine.
func (p *Pool) Dispatch(inv partition.Invocation, done Done) {
	select {
	case p.calls <- call{inv, done}:
	default:
		go p.worker(call{inv, done})
	}
}

func (p *Pool) worker(c call) {
	idle := time.NewTimer(IdleTimeout)
	defer idle.Stop()
	for {
		Call(p.ctx, p.fns, p.now, c.inv, c.done)
		idle.Reset(IdleTimeout)
		select {
		case c = <-p.calls:
		case <-idle.C:
			return
		case <-p.ctx.Done():
			return
		}
	}
}

// Call makes one call on the caller's goroutine and reports it to done,
// unless ctx ended meanwhile (shutting down: the batch re-runs after a
// restart).
func Call(ctx context.Context, fns Functions, now func() time.Time, inv partition.Invocation, done Done) {
	lane.Poke() // a hot path: a waiting operator request goes first
	start := now()
	resp, err := fns.Call(ctx, inv.Addr.Type, inv.Body)
	if ctx.Err() != nil {
		return
	}
	done(inv, resp, err, now().Sub(start))
}
