// Package dispatch sends the invocations of the partition cores to the
// remote functions on a pool of call workers, and hands each outcome to a
// completion callback.
package dispatch

import (
	"context"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

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

// Gate is a Functions whose calls wait for their function type's slot as
// data rather than on a goroutine (functions.Router): run is given the
// call once the type has a slot — at once (Start returns false), or later
// from the goroutine of the call that frees one (Start returns true). run
// must not block.
type Gate interface {
	Start(t address.TypeName, req *protocol.ToFunction, run func(call func(ctx context.Context) (*protocol.FromFunction, error))) (queued bool)
}

type call struct {
	inv  partition.Invocation
	done Done
	// gated, when set, is the call a Gate gave a slot: the worker runs it
	// instead of Functions.Call.
	gated func(ctx context.Context) (*protocol.FromFunction, error)
}

// Pool runs calls on workers: an idle one if there is one, else a new one.
// Workers live on while there is work, so their stacks, grown by decoding
// responses, are reused instead of grown again for every call (a goroutine
// per call cost 7.5% of the runtime's CPU in a profile of
// BenchmarkEndToEnd at 10,000 addresses). With a Gate, a worker runs only a call that holds a
// slot of its type's bulkhead, so the workers are bounded by the
// bulkheads; the calls waiting for a slot are data. Without one, each
// address has at most one call in flight, each on a worker.
type Pool struct {
	ctx   context.Context
	fns   Functions
	now   func() time.Time
	calls chan call  // unbuffered: a send succeeds only to an idle worker
	gate  Gate       // fns, when it is one (else nil)
	lane  *lane.Lane // poked before each call; nil: none
}

// New returns a pool calling fns until ctx ends; then calls in flight are
// abandoned (their Done is not called). now measures call latency. Each
// call is a hot path of the load: before it, the worker pokes ln, the
// admin lane of the runtime (nil: none), so that a waiting operator
// request goes first (internal/lane).
func New(ctx context.Context, fns Functions, now func() time.Time, ln *lane.Lane) *Pool {
	if now == nil {
		now = time.Now
	}
	gate, _ := fns.(Gate)
	return &Pool{ctx: ctx, fns: fns, now: now, calls: make(chan call), gate: gate, lane: ln}
}

// Dispatch starts inv and returns at once; done is called from a worker
// goroutine. When the Functions is a Gate, a call that must wait for its
// type's slot waits as data, not on a worker: a backlog of waiting batches
// costs no goroutines, and while it waits the size of its request (every
// state value of its address attached) is added to held, the bytes its
// partition's admission counts (nil: not counted).
func (p *Pool) Dispatch(inv partition.Invocation, done Done, held *atomic.Int64) {
	gate := p.gate
	if gate == nil {
		p.hand(call{inv: inv, done: done})
		return
	}
	// The call may start, from another goroutine, before Start returns:
	// its bytes are counted only if it queued and has not started yet.
	var st atomic.Int64 // 0 pending, -1 started, > 0 the bytes counted
	queued := gate.Start(inv.Addr.Type, inv.Body, func(c func(ctx context.Context) (*protocol.FromFunction, error)) {
		if n := st.Swap(-1); n > 0 && held != nil {
			held.Add(-n)
		}
		p.hand(call{inv: inv, done: done, gated: c})
	})
	if queued && held != nil {
		if n := int64(proto.Size(inv.Body)); n > 0 && st.CompareAndSwap(0, n) {
			held.Add(n)
		}
	}
}

// hand gives c to an idle worker, or to a new one.
func (p *Pool) hand(c call) {
	select {
	case p.calls <- c:
	default:
		go p.worker(c)
	}
}

func (p *Pool) worker(c call) {
	idle := time.NewTimer(IdleTimeout)
	defer idle.Stop()
	for {
		p.lane.Poke()
		if c.gated != nil {
			callGated(p.ctx, p.now, c)
		} else {
			Call(p.ctx, p.fns, p.now, c.inv, c.done)
		}
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

// callGated makes a call a Gate gave a slot, as Call does.
func callGated(ctx context.Context, now func() time.Time, c call) {
	start := now()
	resp, err := c.gated(ctx)
	if ctx.Err() != nil {
		return
	}
	c.done(c.inv, resp, err, now().Sub(start))
}

// Call makes one call on the caller's goroutine and reports it to done,
// unless ctx ended meanwhile (shutting down: the batch re-runs after a
// restart).
func Call(ctx context.Context, fns Functions, now func() time.Time, inv partition.Invocation, done Done) {
	start := now()
	resp, err := fns.Call(ctx, inv.Addr.Type, inv.Body)
	if ctx.Err() != nil {
		return
	}
	done(inv, resp, err, now().Sub(start))
}
