package engine

import (
	"fmt"
	"sync"
	"time"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/engine/dispatch"
	"github.com/statefun-go/statefun/internal/idempotency"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
)

// Driver steps an engine built with Options.Driven, on the caller's
// goroutine and in the caller's order: a partition's events, one group
// commit, one function call. Nothing runs between two calls, so a seeded
// simulation chooses every interleaving (and, with Options.Now, every
// instant) and replays it exactly. See docs/explanation/engine.md.
type Driver struct {
	e *Engine

	mu    sync.Mutex
	calls []Call
}

// Call is an invocation waiting for the driver to run it.
type Call struct {
	Partition  int
	Invocation partition.Invocation

	// p is the part that sent it: its result goes back there, never to
	// a later assignment of the partition (whose request ids start again).
	p *part
}

func (d *Driver) invoke(p *part, inv partition.Invocation) {
	d.mu.Lock()
	d.calls = append(d.calls, Call{Partition: p.id, Invocation: inv, p: p})
	d.mu.Unlock()
}

// drop forgets the calls of a revoked part: their results would be
// ignored.
func (d *Driver) drop(p *part) {
	d.mu.Lock()
	defer d.mu.Unlock()
	kept := d.calls[:0]
	for _, c := range d.calls {
		if c.p != p {
			kept = append(kept, c)
		}
	}
	clear(d.calls[len(kept):])
	d.calls = kept
}

// Driver returns the engine's driver, or nil unless Options.Driven.
func (e *Engine) Driver() *Driver { return e.drv }

// Pending returns the number of events waiting in partition p's mailbox
// (0 for a partition not owned).
func (d *Driver) Pending(p int) int {
	if pt := d.e.part(p); pt != nil {
		return pt.mb.Len()
	}
	return 0
}

// HasWork reports whether Step(p) has something to do now: events in the
// mailbox, effects of the core not handed on yet (after New, the restored
// inbox's invocations), or messages waiting in the store that the partition
// has room for now. Due timers need a Step too: see NextDeadline.
// False for a partition not owned.
func (d *Driver) HasWork(p int) bool {
	pt := d.e.part(p)
	return pt != nil && (pt.mb.Len() > 0 || pt.core.HasReady() || pt.pageDue())
}

// Step processes partition p once: every event waiting in its mailbox, or a
// Tick at the current time when there is none (due timers fire, backoffs
// end). Its invocations join Calls, its commit goes to the committer. A core
// error stops the engine and is returned; a partition not owned returns
// ErrMoved.
func (d *Driver) Step(p int) error {
	pt := d.e.part(p)
	if pt == nil {
		return movedErr(p)
	}
	if _, err := pt.process(); err != nil {
		d.e.fatal(err)
		return err
	}
	return nil
}

// NextDeadline returns when partition p has timer work to do (a delayed
// message is due, or a backoff ends), and false when nothing is scheduled
// (or p is not owned).
func (d *Driver) NextDeadline(p int) (time.Time, bool) {
	pt := d.e.part(p)
	if pt == nil {
		return time.Time{}, false
	}
	at, ok := pt.core.NextDeadline()
	return time.UnixMilli(at), ok
}

// Commits returns the number of requests waiting for a group commit.
func (d *Driver) Commits() int { return d.e.com.Pending() }

// groupCommitter is a Durability the driver can ask for one group.
type groupCommitter interface {
	CommitGroup() (int, error)
}

// Commit writes every waiting request in one synced group and releases what
// waited for it. A store error stops the engine and is returned. With an
// Options.Durability that has no CommitGroup method, the caller commits
// through it and Commit returns an error.
func (d *Driver) Commit() error {
	gc, ok := d.e.com.(groupCommitter)
	if !ok {
		return fmt.Errorf("engine: the driver cannot commit through a %T (it has no CommitGroup)", d.e.com)
	}
	if _, err := gc.CommitGroup(); err != nil {
		d.e.fatal(err)
		return err
	}
	return nil
}

// Calls returns the invocations waiting to be run, oldest first.
func (d *Driver) Calls() []Call {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Call(nil), d.calls...)
}

// RunCall removes call i from Calls, calls Options.Functions with it on the
// caller's goroutine and posts the result to its partition.
func (d *Driver) RunCall(i int) {
	d.mu.Lock()
	c := d.calls[i]
	d.calls = append(d.calls[:i], d.calls[i+1:]...)
	d.mu.Unlock()
	dispatch.Call(d.e.ctx, d.e.opts.Functions, d.e.opts.Now, c.Invocation, d.e.callDone(c.p))
}

// Future is the answer of a request started through the driver; it is in
// once the steps it waits for have run.
type Future struct {
	poll func() (partition.Receipt, bool, error)

	done bool
	rc   partition.Receipt
	err  error
}

// Done reports whether the answer is in; it never blocks.
func (f *Future) Done() bool {
	if !f.done {
		f.rc, f.done, f.err = f.poll()
	}
	return f.done
}

// Err returns the request's error once Done.
func (f *Future) Err() error { return f.err }

// Receipt returns a mutation's receipt once Done.
func (f *Future) Receipt() partition.Receipt { return f.rc }

// Ingest starts Engine.Ingest: the future is done once the message is
// durable (after a Commit). Admission errors (ErrBusy) are returned at once.
func (d *Driver) Ingest(env *protocol.Envelope) (*Future, error) {
	req, err := d.e.ingest(env)
	if err != nil {
		return nil, err
	}
	return &Future{poll: func() (partition.Receipt, bool, error) {
		select {
		case err := <-req.done:
			return partition.Receipt{}, true, err
		default:
			return partition.Receipt{}, false, nil
		}
	}}, nil
}

// IngestOnce starts Engine.IngestOnce: a replay (replayed true, no future)
// and refusals (ErrBusy, the idempotency errors) are answered at once;
// otherwise the future is done once the message and its key are durable.
func (d *Driver) IngestOnce(env *protocol.Envelope, r idempotency.Request) (f *Future, replayed bool, err error) {
	req, replayed, err := d.e.ingestOnce(env, r, false)
	if err != nil || replayed {
		return nil, replayed, err
	}
	return &Future{poll: func() (partition.Receipt, bool, error) {
		select {
		case err := <-req.done:
			return partition.Receipt{}, true, err
		default:
			return partition.Receipt{}, false, nil
		}
	}}, false, nil
}

// Mutate starts Engine.Mutate: the future is done when the mutation's ack
// mode says (after the Step or Commit that answers it).
func (d *Driver) Mutate(m partition.Mutation) (*Future, error) {
	pm, err := d.e.mutate(m)
	if err != nil {
		return nil, err
	}
	return &Future{poll: pm.poll}, nil
}

// ReadFuture is the answer of a read started through the driver.
type ReadFuture struct {
	e  *Engine
	id uint64
	ch chan partition.Reply

	done bool
	rep  partition.Reply
	err  error
}

// Read starts Engine.Read: the future is done at once when the store
// answers it, else once partition Step has (a read never waits for a
// function).
func (d *Driver) Read(a address.Address, state string) (*ReadFuture, error) {
	e := d.e
	if e.closed.Load() {
		return nil, ErrClosed
	}
	p, err := e.partOf(a)
	if err != nil {
		return nil, err
	}
	if rep, ok := e.readStore(p, a, state); ok {
		return &ReadFuture{e: e, rep: rep, err: rep.Err, done: true}, nil
	}
	// A read queues behind no message: only reads flooding the mailbox
	// are refused, not those of a partition whose backlog is full.
	if p.mailboxFull() {
		return nil, ErrBusy
	}
	e.m.stateReads.WithLabelValues("mailbox").Inc()
	id, ch, err := e.ask(p, 0, func(id uint64) partition.Event { return partition.ReadState{Request: id, Addr: a, State: state} })
	if err != nil {
		return nil, err
	}
	return &ReadFuture{e: e, id: id, ch: ch}, nil
}

// Done reports whether the answer is in; it never blocks.
func (f *ReadFuture) Done() bool {
	if f.done {
		return true
	}
	select {
	case r := <-f.ch:
		f.rep, f.err, f.done = r, r.Err, true
	default:
		if f.e.ctx.Err() != nil {
			f.e.waiters.drop(f.id)
			f.err, f.done = f.e.stopErr(nil), true
		}
	}
	return f.done
}

// Reply returns the read's entries once Done.
func (f *ReadFuture) Reply() partition.Reply { return f.rep }

// Err returns the read's error once Done.
func (f *ReadFuture) Err() error { return f.err }

// PopFuture is the answer of an egress pop started through the driver.
type PopFuture struct {
	q    *egressQueue
	req  *popReq
	rec  *protocol.EgressRecord
	done bool
	ok   bool
	err  error
}

// PopEgress starts Engine.PopEgress: the oldest record of the route is
// claimed now, and the future is done once its removal is durable (after a
// Commit), or at once when the route holds none. The claim and the
// removal are those of PopEgress, so a record is handed out at most once.
func (d *Driver) PopEgress(egress, route string) (*PopFuture, error) {
	q, req, rec, err := d.e.claimPop(egress, route)
	switch {
	case err != nil:
		return nil, err
	case req == nil: // nothing to pop
		return &PopFuture{done: true}, nil
	}
	return &PopFuture{q: q, req: req, rec: rec}, nil
}

// Done reports whether the answer is in; it never blocks.
func (f *PopFuture) Done() bool {
	if f.done {
		return true
	}
	select {
	case err := <-f.req.done:
		f.done = true
		if err != nil {
			f.q.unclaim(f.req.seq)
			f.err = err
			return true
		}
		f.ok = true
	default:
	}
	return f.done
}

// Record returns the popped record and true once Done, or false when the
// route held none (or the pop failed: see Err).
func (f *PopFuture) Record() (*protocol.EgressRecord, bool) {
	if !f.ok {
		return nil, false
	}
	return f.rec, true
}

// Err returns the pop's error once Done.
func (f *PopFuture) Err() error { return f.err }
