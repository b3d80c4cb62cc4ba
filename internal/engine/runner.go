package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/statefun-go/statefun/internal/engine/dispatch"
	"github.com/statefun-go/statefun/internal/engine/mailbox"
	"github.com/statefun-go/statefun/internal/lane"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/store"
	"google.golang.org/protobuf/proto"
)

// effects is where a partition runner hands the effects of its core: the
// engine implements it. A runner knows nothing else of the engine.
type effects interface {
	// callFailed logs and counts a failed attempt.
	callFailed(p int, f partition.Failure)
	// reply answers a waiting reader or mutator.
	reply(r partition.Reply)
	// invoke sends an invocation; its result comes back through post.
	invoke(p *part, inv partition.Invocation)
	// commit hands a commit to the committer; CommitDurable comes back
	// through post.
	commit(p *part, c *partition.Commit)
	// backlog reports the core's backlog, the delayed messages it holds
	// in memory and the messages waiting in the store, after a step.
	backlog(p int, n, delayed, paged int)
	// health reports the core's failing and paused addresses when they
	// changed.
	health(p int, h partition.Health)
}

// part runs one partition: the only goroutine (or driver step) that touches
// its core. Anyone may post events; process steps them in arrival order.
type part struct {
	id   int
	core *partition.Core
	mb   *mailbox.Mailbox[partition.Event]
	out  effects
	now  func() time.Time
	lane *lane.Lane // poked before each turn (Options.Lane); nil: none
	// callDone completes this part's calls (Engine.callDone), made once
	// when the part is built.
	callDone dispatch.Done

	// queued is the core's backlog after the last step: with the events in
	// the mailbox, the work waiting in this partition, which the ingress
	// and the state API bound.
	queued atomic.Int64
	// held is the size of every inbox message the core holds (queued or in
	// flight) until a commit consumes it; heldBytes their sum. Only the
	// runner touches held.
	held      map[partition.InboxKey]int
	heldBytes atomic.Int64
	// consuming is the partition's own messages consumed by commits not yet
	// durable, with the commit's id: still in the store, no longer held
	// (paging.go). Only the runner touches it.
	consuming map[partition.InboxKey]uint64
	// limit and limitBytes bound the messages and bytes the partition
	// holds in memory (Options.MaxBacklog, MaxBacklogBytes); past them
	// its messages wait in the store (paging.go), which inbox reads.
	limit      int
	limitBytes int64
	pg         paging
	inbox      inboxReader
	// handedOver mirrors the core's HandedOver after each step.
	handedOver atomic.Bool
	// pending is the addresses with applied writes not yet durable.
	pending *pendingWrites
	// arr numbers this part's inbox messages (arrivals.go).
	arr *arrivals

	// A part is one assignment of its partition: in cluster mode (see
	// cluster.go) Revoke ends it and Assign builds a new part from the
	// store, so requests still in the durability pipeline name the part
	// they were made for and never touch its successor.
	//
	// gone is set by Revoke: the part takes no work, and what its requests
	// would release is dropped. aborted is set when one of its requests
	// failed with ErrAborted (or ErrMoved): its core has moved past work
	// that will never be durable, so none of its later requests may be
	// encoded; the session revokes and assigns the partition again.
	gone, aborted atomic.Bool
	// encoded counts its requests that were encoded into a batch and have
	// not heard Durable or Fail yet: Assign of the partition refuses to
	// build a successor while any is unsettled.
	encoded atomic.Int64
	// commands is the mutation ids of the commands this part encoded
	// (SubmitArrivals) that are not durable yet: a repeat of one polled
	// meanwhile is not applied twice (once durable, their receipts in the
	// store say so). Owned by the durability goroutine.
	commands map[string]bool
	// ingressKeys is the Idempotency-Keys of the ingress messages this
	// part encoded (SubmitArrivals), scope and key to fingerprint: a
	// repeat polled before the first is durable is known here. Owned by
	// the durability goroutine.
	ingressKeys map[string][]byte
	// pauseIDs is the mutation ids of the type-level pauses and resumes
	// this part took as its type's TypeOwner (PauseIn) whose receipt is
	// not durable yet: a repeat waits for the first one's receipt instead
	// of applying it again (once durable, the store has the receipt).
	// readPos is how far this partition has applied each Kafka topic
	// partition whose records it applies (cluster mode: its partition of
	// the messages topic, and the ingress topic partitions routed to it),
	// as stored in the partition's data (store.ReadPosition) and moved on
	// by the arrivals encoded since. A record at or before its position
	// was applied already and is skipped. Owned by the durability
	// goroutine; loaded by Assign.
	readPos map[readKey]store.ReadPosition
	// replayLogged is set once a skipped record was logged: the log says
	// it once per assignment, the metric counts every one.
	replayLogged bool
	pauseMu      sync.Mutex
	pauseIDs     map[string]bool
	// stop ends the runner, which closes done (cluster mode).
	stop context.CancelFunc
	done chan struct{}
}

func newPart(id int, core *partition.Core, out effects, now func() time.Time) *part {
	return &part{id: id, core: core, mb: mailbox.New[partition.Event](), out: out, now: now, held: map[partition.InboxKey]int{},
		consuming: map[partition.InboxKey]uint64{}, limit: math.MaxInt, limitBytes: math.MaxInt64,
		pending: newPendingWrites(), arr: newArrivals(), commands: map[string]bool{},
		ingressKeys: map[string][]byte{}, readPos: map[readKey]store.ReadPosition{}}
}

// encodable returns nil while requests of this part may be encoded, and
// the reason why not once it was revoked or lost a commit to an abort.
func (p *part) encodable() error {
	if p.gone.Load() {
		return fmt.Errorf("%w: partition %d was revoked", ErrMoved, p.id)
	}
	if p.aborted.Load() {
		return fmt.Errorf("%w: partition %d lost work to an aborted transaction; it takes none until it is assigned again", ErrAborted, p.id)
	}
	return nil
}

// usable returns nil while the part takes new work: ErrMoved once it was
// revoked or an abort left it waiting to be assigned again.
func (p *part) usable() error {
	if p.gone.Load() || p.aborted.Load() {
		return movedErr(p.id)
	}
	return nil
}

// reqOf is embedded in the requests tied to one part: it counts them in
// the part's encoded from a successful Encode until Durable or Fail.
type reqOf struct {
	p       *part
	counted bool
}

// encoded is called at the end of a successful Encode.
func (s *reqOf) encoded() {
	if !s.counted {
		s.counted = true
		s.p.encoded.Add(1)
	}
}

// settled is called by Durable and Fail.
func (s *reqOf) settled() {
	if s.counted {
		s.counted = false
		s.p.encoded.Add(-1)
	}
}

// Partition is the partition whose store writes the request makes.
func (s *reqOf) Partition() int { return s.p.id }

// failed ends the part's usefulness when its request failed with an
// abort (or was refused because it was revoked): the next assignment
// rebuilds the partition from the store.
func (s *reqOf) failed(err error) bool {
	if errors.Is(err, ErrAborted) || errors.Is(err, ErrMoved) {
		s.p.aborted.Store(true)
		return true
	}
	return false
}

// full reports whether the partition takes no new work from the
// ingresses and the state API: its queue is at its limit of events or of
// bytes, or messages that came before wait in the store (paging.go).
func (p *part) full() bool {
	return p.atBound() || p.pg.on.Load() || p.handedOver.Load()
}

// post queues an event that holds no message; it never blocks.
func (p *part) post(ev partition.Event) { p.mb.Post(ev, 0) }

// postSized queues an event holding size bytes of message.
func (p *part) postSized(ev partition.Event, size int) { p.mb.Post(ev, size) }

// hold counts an inbox message the core now holds.
func (p *part) hold(k partition.InboxKey, size int) {
	if size > 0 {
		p.held[k] = size
		p.heldBytes.Add(int64(size))
	}
}

// consumed ends the count of a message a commit consumed.
func (p *part) consumed(k partition.InboxKey) {
	if size, ok := p.held[k]; ok {
		delete(p.held, k)
		p.heldBytes.Add(-int64(size))
	}
}

// run processes events until ctx ends, waking for posts and for the core's
// next deadline (measured on the injected clock). It returns the core's
// error, which makes the partition inoperable.
func (p *part) run(ctx context.Context) error {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		p.lane.Poke() // a hot path: a waiting operator request goes first
		if _, err := p.process(); err != nil {
			return err
		}
		if p.pg.more {
			continue // the next page before waiting
		}
		if at, ok := p.core.NextDeadline(); ok {
			timer.Reset(time.UnixMilli(at).Sub(p.now()))
		} else {
			timer.Stop()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-p.mb.Wake():
		case <-timer.C:
		}
	}
}

// process steps every queued event (or a Tick when there is none), then
// acts on the Ready: invocations go out now, the commit goes to the
// committer, then the replies to readers and mutators. It reports whether
// there was an event.
func (p *part) process() (bool, error) {
	items := p.mb.Take()
	now := p.now().UnixMilli()
	for _, it := range items {
		switch ev := it.Event.(type) {
		case partition.MessageArrived:
			if p.pageOutTaken(ev.Key) {
				continue // in the store: paged in once the partition has room
			}
		case partition.Mutate:
			if p.pg.on.Load() {
				// Admitted before paging began, it would overtake the
				// messages that wait in the store: refused as busy.
				p.out.reply(partition.Reply{Request: ev.Mutation.Request, Err: ErrBusy})
				continue
			}
		}
		if err := p.core.Step(now, it.Event); err != nil {
			return true, err
		}
		switch ev := it.Event.(type) {
		case partition.MessageArrived:
			p.hold(ev.Key, it.Size)
		case partition.CommitDurable:
			for k, id := range p.consuming {
				if id <= ev.ID {
					delete(p.consuming, k)
				}
			}
		}
	}
	if len(items) == 0 {
		if err := p.core.Step(now, partition.Tick{}); err != nil {
			return false, err
		}
	}
	stepped := len(items) > 0
	// The backlog before the events' count ends, so that the two never
	// add up to less than the partition holds (atBound).
	p.queued.Store(int64(p.core.Backlog()))
	p.mb.Release(items)
	if err := p.pageIn(now); err != nil {
		return stepped, err
	}
	p.queued.Store(int64(p.core.Backlog()))

	rd := p.core.Ready()
	for _, f := range rd.Failures {
		p.out.callFailed(p.id, f)
	}
	for _, inv := range rd.Invocations {
		p.out.invoke(p, inv)
	}
	if c := rd.Commit; c != nil {
		for _, m := range c.Produced {
			if m.Key.Partition == p.id && !m.Deliver {
				p.hold(m.Key, proto.Size(m.Env))
			}
		}
		for _, k := range c.Consumed {
			p.consumed(k)
			if k.Source == uint32(p.id) {
				p.consuming[k] = c.ID
			}
		}
		for _, m := range c.Rewritten {
			// An edited message is held at its new size.
			if _, ok := p.held[m.Key]; ok {
				p.consumed(m.Key)
				p.hold(m.Key, proto.Size(m.Env))
			}
		}
		p.pending.mark(c)
		p.out.commit(p, c)
	}
	if h, ok := p.core.TakeHealth(); ok {
		p.out.health(p.id, h)
	}
	backlog := p.core.Backlog() // stored in queued above: Ready does not change it
	p.handedOver.Store(p.core.HandedOver())
	p.out.backlog(p.id, backlog, p.core.TimersHeld(), int(p.pg.waiting.Load()))
	// The waiting readers and mutators last: Go runs the goroutine the
	// runner woke last first, and each later wake (a call worker, the
	// committer) would push an earlier one to the back of the run queue,
	// behind the function traffic of a loaded runtime.
	for _, r := range rd.Replies {
		p.out.reply(r)
	}
	return stepped, nil
}

// The engine's side of effects.

func (e *Engine) callFailed(p int, f partition.Failure) { e.logFailure(p, f) }
func (e *Engine) reply(r partition.Reply)               { e.waiters.deliver(r) }
func (e *Engine) invoke(p *part, inv partition.Invocation) {
	e.calls.invoke(p, inv)
}
func (e *Engine) commit(p *part, c *partition.Commit) {
	// A refused submit means the engine is stopping: the commit re-runs
	// after a restart.
	_ = e.com.Submit(&partCommit{reqOf: reqOf{p: p}, e: e, c: c})
}
func (e *Engine) health(p int, h partition.Health) { e.m.repair.report(p, h) }
func (e *Engine) backlog(p int, n, delayed, paged int) {
	g := e.m.partition(p)
	g.queue.Set(float64(n))
	g.paged.Set(float64(paged))
	g.delayed.Set(float64(delayed))
}
