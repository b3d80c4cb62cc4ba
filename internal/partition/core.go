package partition

import (
	"errors"
	"fmt"
	"math"

	"google.golang.org/protobuf/proto"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/protocol"
)

// Config is what a partition core is built with. The zero values of the
// optional fields are usable.
type Config struct {
	// ID is this partition's index in [0, Partitions).
	ID int
	// Partitions is P, the number of partitions of the application.
	Partitions int
	// MaxBatch returns how many invocations of one address may go in one
	// request (module.yaml maxNumBatchRequests); ≤ 0 or a nil func means no
	// cap.
	MaxBatch func(t address.TypeName) int
	// MaxBatchBytes returns how many bytes of invocations (each encoded
	// ToFunction.Invocation: caller and argument) one request for an
	// address of the type may carry, so that a batch of messages that each
	// fit the endpoint's payload cap is not one request over it, refused on
	// every retry. The first queued message always goes. ≤ 0 or a nil func
	// means no cap.
	MaxBatchBytes func(t address.TypeName) int
	// Egress checks a record a function sends to an egress and returns its
	// route (a playground topic). An error refuses the whole response. A nil
	// func refuses every egress message.
	Egress func(namespace, typ string, arg *protocol.TypedValue) (route string, err error)
	// Routable says whether a message to a function type may be taken in:
	// nil, or why not (no endpoint serves it, or a wildcard endpoint's
	// bound on its types is reached). A response that sends a message (at
	// once or delayed) to a type it refuses is a protocol violation: the
	// message could never be delivered. Nil means every type is routable.
	Routable func(t address.TypeName) error
	// RetryBase is the first backoff after a failed attempt, in ms; it
	// doubles per attempt up to RetryMax. Defaults 50 and 10000.
	RetryBase, RetryMax int64
	// PauseAfter is the poison policy: after how many failed attempts of
	// one batch an address of the type is paused (pause.go), keeping the
	// batch at the head of its inbox. ≤ 0 or a nil func: never, the batch
	// is retried until it succeeds.
	PauseAfter func(t address.TypeName) int
	// PauseOnViolation pauses an address of the type at once when its
	// function breaks the protocol. Nil: never.
	PauseOnViolation func(t address.TypeName) bool
	// OwnTypePauses makes every partition keep its own durable record of
	// a type-level pause (cluster mode, where each partition's records
	// travel in its own changelog and move with it): each writes the
	// pause into its commits and answers a SetPause of a type once that
	// commit is durable, with a receipt that is not stored. TypeOwner's
	// share alone writes the type's receipt and audit record. Without it
	// only TypeOwner records the pause and the others answer at once.
	OwnTypePauses bool
	// MaxRecordBytes is the most bytes one record of the application's log
	// may carry (cluster mode: what one Kafka record of the node's producer
	// takes, max.request.size less a batch's framing). A message, a
	// delayed message or a state value of a function's response whose
	// record would be larger could never be committed, so the response is
	// a protocol violation, refused as a whole like any other: the batch
	// backs off and the poison policy applies, instead of every commit of
	// the partition failing on it. ≤ 0: no limit (embedded mode).
	MaxRecordBytes int
	// MaxQueued is how many unsettled messages (Backlog) the core holds
	// before a message it produces for an address of its own partition —
	// sent by a function, or a delayed message falling due — is not
	// queued but written to the inbox only and handed to the shell to
	// deliver (Produced.Deliver), like a message for another partition.
	// The shell holds a partition's messages past its bound in the store
	// and pages them in as the backlog drains, so a partition whose
	// functions message each other, or whose delayed messages fall due
	// together, holds a bounded number in memory. Once one message is
	// handed over, the next ones of this partition go the same way until
	// the last of them is back: a sender's messages to an address stay in
	// the order it sent them. ≤ 0: no bound, every such message is queued.
	MaxQueued int
	// TimerWindow is how many pending delayed messages the core keeps in
	// memory: the earliest due. The others stay in the store and are read
	// through the Reader as the window drains (timers.go). ≤ 0 means
	// DefaultTimerWindow.
	TimerWindow int
}

// Restore is the durable starting point of a core: what the store held at
// the last commit. The shell feeds the inbox's messages as MessageArrived
// after New, in key order.
type Restore struct {
	CommitID   uint64
	VersionSeq uint64
	// OutSeq is the next sequence for messages this partition produces:
	// above every pending inbox message whose source is this partition.
	OutSeq uint64
	// Timers are the first pending delayed messages in key order (due,
	// then id): the shell reads up to Config.TimerWindow of them.
	// MoreTimers says the store holds more after the last of them, which
	// the core reads through its Reader when its window runs low.
	Timers     []Timer
	MoreTimers bool
	// TimerSeq is the highest timer id of the partition's pending delayed
	// messages; new ids continue above it and above those of Timers (ids
	// of fired timers may be reused: their keys are gone).
	TimerSeq uint64
	// Pauses are the pauses in force: of this partition's addresses, and
	// every type-level one (Addr.ID empty).
	Pauses []PauseWrite
}

// versionEpoch is added to the version counter at every restore, so a
// version handed out by a commit that was lost in a crash is never handed
// out again for another value.
const versionEpoch = 1 << 32

// Core is the state machine of one partition. It is not safe for concurrent
// use: one goroutine (the partition's mailbox) owns it.
type Core struct {
	cfg Config
	r   Reader
	now int64

	mailboxes map[address.Address]*mailbox
	// backlog counts the messages and mutations of every mailbox that are
	// not settled yet: queued, parked behind a probe, or in a batch in
	// flight or in backoff.
	backlog int
	// handedOver is set while a message this partition produced for
	// itself was handed to the shell (Config.MaxQueued) and has not come
	// back: until the one numbered lastHanded arrives, the next ones are
	// handed over too, so none overtakes an earlier one of its sender.
	handedOver bool
	lastHanded uint64

	specs map[address.TypeName][]Spec
	// known marks types whose states are known to be complete: they have
	// registered states, or a request of theirs succeeded. Until then one
	// address probes the type and the others wait (parked), so a cold start
	// pays one negotiation round trip per type, not one per address — the
	// reason StateFun makes a type's first request synchronous.
	known   map[address.TypeName]bool
	probing map[address.TypeName]address.Address
	parked  map[address.TypeName][]address.Address

	// overlay holds writes applied but not yet durable, newest per entry,
	// tagged with the commit that carries them; byCommit lists them so
	// CommitDurable can drop them without a scan.
	overlay  map[stateKey]overlayEntry
	byCommit map[uint64][]stateKey

	// timers holds the wake-ups in memory: the delayed messages of the
	// window, backoffs and pause expiries. The window's delayed messages
	// are in pendingT and their tokens in tokens; horizon, all, past and
	// removed are its bookkeeping (timers.go).
	timers   timerHeap
	schedSeq uint64
	pendingT map[uint64]*timerItem // delayed messages in memory by timer id
	tokens   map[tokenKey]uint64   // (sender id, token) → timer id
	window   int
	horizon  TimerKey
	all      bool
	past     map[TimerKey]pastTimer
	pastTok  map[tokenKey]TimerKey
	removed  map[TimerKey]uint64 // key → the commit that removes it
	durable  uint64              // the last durable commit

	nextRequest uint64
	commitID    uint64
	versionSeq  uint64
	outSeq      uint64
	timerSeq    uint64

	pending  *Commit
	stateIdx map[stateKey]int // index in pending.State
	ready    Ready

	// pauses and typePauses are the pauses in force (pause.go);
	// pausedByType counts pauses, failingByType failing batches, per type,
	// for the shell's gauges (healthChanged: since the last TakeHealth).
	pauses        map[address.Address]*Pause
	typePauses    map[address.TypeName]*Pause
	pausedByType  map[address.TypeName]int
	failingByType map[address.TypeName]int
	healthChanged bool
	autoSeq       uint64
	// cause is what the writes being applied come from (an invocation's
	// batch, a mutation), set around apply and applyMutation; nil while a
	// request is built (a TTL restart changes no value).
	cause *Cause
}

type stateKey struct {
	addr  address.Address
	state string
}

type overlayEntry struct {
	entry  Entry
	delete bool
	commit uint64
}

type tokenKey struct{ sender, token string }

// queued is one item of a mailbox: a message, or an operator mutation.
type queued struct {
	key InboxKey
	inv *protocol.ToFunction_Invocation
	mut *Mutation
	// durable is set for a mutation that came through the inbox.
	durable bool
	// at is when the core got it (unix ms), for operators.
	at int64
}

// mailbox is the per-address queue: at most one batch in flight, later
// messages wait and go out together when it completes.
type mailbox struct {
	queue    []queued
	inflight *batch
	// parked is set while the mailbox waits for its type's probe.
	parked bool
}

type batch struct {
	request uint64
	msgs    []queued
	attempt int
	// waiting is set while the batch sits out a backoff.
	waiting bool
	// sent names the states the last request carried.
	sent []string
	// since is when the batch first failed, retryAt when its next attempt
	// is due; lastErr and violation describe its last failure.
	since, retryAt int64
	lastErr        string
	violation      bool
	// one and sentBuf back msgs and sent in the common case: a batch of
	// one message (at many addresses, every batch) of a type with a few
	// states.
	one     [1]queued
	sentBuf [4]string
}

// New returns a core that starts from a durable restore point.
func New(cfg Config, r Reader, rs Restore) *Core {
	if cfg.RetryBase <= 0 {
		cfg.RetryBase = 50
	}
	if cfg.RetryMax <= 0 {
		cfg.RetryMax = 10_000
	}
	c := &Core{
		cfg:        cfg,
		r:          r,
		mailboxes:  map[address.Address]*mailbox{},
		specs:      map[address.TypeName][]Spec{},
		known:      map[address.TypeName]bool{},
		probing:    map[address.TypeName]address.Address{},
		parked:     map[address.TypeName][]address.Address{},
		overlay:    map[stateKey]overlayEntry{},
		byCommit:   map[uint64][]stateKey{},
		pendingT:   map[uint64]*timerItem{},
		tokens:     map[tokenKey]uint64{},
		window:     cfg.TimerWindow,
		past:       map[TimerKey]pastTimer{},
		pastTok:    map[tokenKey]TimerKey{},
		removed:    map[TimerKey]uint64{},
		durable:    rs.CommitID,
		timerSeq:   rs.TimerSeq,
		commitID:   rs.CommitID,
		versionSeq: rs.VersionSeq + versionEpoch,
		outSeq:     rs.OutSeq,

		pauses:        map[address.Address]*Pause{},
		typePauses:    map[address.TypeName]*Pause{},
		pausedByType:  map[address.TypeName]int{},
		failingByType: map[address.TypeName]int{},
	}
	if c.window <= 0 {
		c.window = DefaultTimerWindow
	}
	c.resetPending()
	c.all = true
	for _, t := range rs.Timers {
		c.addTimer(t, 0)
	}
	if rs.MoreTimers && len(rs.Timers) > 0 && c.all {
		c.all, c.horizon = false, rs.Timers[len(rs.Timers)-1].Key
	}
	for _, p := range rs.Pauses {
		c.restorePause(p)
	}
	return c
}

func (c *Core) resetPending() {
	c.pending = &Commit{}
	// The index is the core's own: cleared and kept, unless a large commit
	// grew it (a cleared map keeps its size).
	if c.stateIdx == nil || len(c.stateIdx) > 256 {
		c.stateIdx = map[stateKey]int{}
	} else {
		clear(c.stateIdx)
	}
}

// Step feeds one event at time now (unix ms; a now earlier than one already
// seen is treated as that one). A non-nil error comes from the Reader: the
// partition must stop.
func (c *Core) Step(now int64, ev Event) error {
	if now > c.now {
		c.now = now
	}
	var err error
	switch ev := ev.(type) {
	case MessageArrived:
		if c.handedOver && ev.Key.Source == uint32(c.cfg.ID) && ev.Key.Seq >= c.lastHanded {
			c.handedOver = false
		}
		if ev.Mutation != nil {
			err = c.queueMutation(&ev.Key, ev.Mutation)
		} else {
			err = c.enqueue(ev.Key, ev.Env)
		}
	case Mutate:
		err = c.queueMutation(nil, ev.Mutation)
	case ReadState:
		c.read(ev)
	case Inspect:
		err = c.inspect(ev)
	case SetPause:
		err = c.setPause(ev)
	case DelayedRepair:
		err = c.repairDelayed(ev)
	case ResultArrived:
		err = c.onResult(ev)
	case CommitDurable:
		c.onDurable(ev.ID)
	case Tick:
	case SpecsKnown:
		if err = c.merge(ev.Type, ev.Specs); err == nil && len(ev.Specs) > 0 {
			c.known[ev.Type] = true
			if _, ok := c.probing[ev.Type]; ok {
				err = c.releaseParked(ev.Type)
			}
		}
	default:
		panic(fmt.Sprintf("partition: unknown event %T", ev))
	}
	if err != nil {
		return err
	}
	return c.fireDue()
}

// Ready returns the effects since the last call and cuts the commit under
// construction. The caller owns what it returns.
func (c *Core) Ready() Ready {
	rd := c.ready
	c.ready = Ready{}
	if !c.pending.Empty() {
		c.commitID++
		c.pending.ID = c.commitID
		c.pending.VersionSeq = c.versionSeq
		rd.Commit = c.pending
		c.resetPending()
	}
	return rd
}

// HasReady reports whether Ready would return anything.
func (c *Core) HasReady() bool {
	return len(c.ready.Invocations) > 0 || len(c.ready.Failures) > 0 || len(c.ready.Replies) > 0 || !c.pending.Empty()
}

// NextDeadline returns the time at which a Tick has work to do (a delayed
// message is due or a backoff ends), and false when nothing is scheduled.
func (c *Core) NextDeadline() (int64, bool) {
	c.timers.dropCancelled()
	if len(c.timers) == 0 {
		return 0, false
	}
	return c.timers[0].due, true
}

// Backlog is the number of messages (and operator mutations) in the core
// that are not settled yet: queued behind an invocation, parked behind a
// cold type's probe, or in a batch in flight or waiting out a backoff. A
// message stuck retrying counts until it succeeds.
func (c *Core) Backlog() int { return c.backlog }

// HandedOver reports whether messages this partition produced for its own
// addresses wait with the shell (Config.MaxQueued): the shell must not
// let new work overtake them.
func (c *Core) HandedOver() bool { return c.handedOver }

func (c *Core) mailbox(addr address.Address) *mailbox {
	mb := c.mailboxes[addr]
	if mb == nil {
		mb = &mailbox{}
		c.mailboxes[addr] = mb
	}
	return mb
}

func (c *Core) enqueue(key InboxKey, env *protocol.Envelope) error {
	addr := toAddress(env.GetTarget())
	mb := c.mailbox(addr)
	mb.queue = append(mb.queue, queued{key: key, at: c.now, inv: &protocol.ToFunction_Invocation{
		Caller:   env.GetCaller(),
		Argument: env.GetArgument(),
	}})
	c.backlog++
	if mb.inflight == nil {
		return c.advance(addr, mb)
	}
	return nil
}

// advance moves a mailbox on when nothing of it is in flight: mutations at
// the head apply at once, then the messages up to the next mutation go out
// as one batch.
//
// A batch sitting out a backoff after a failed call is not in flight, and
// nothing of a paused address is: there every queued mutation applies at
// once, ahead of the messages that wait (they have not been invoked, so
// they will see the new state), and the failed batch's retry carries it.
// Repairing the state that makes a function fail is what an operator
// needs most, and nothing of the failed batch was applied.
func (c *Core) advance(addr address.Address, mb *mailbox) error {
	if (mb.inflight != nil && !mb.inflight.waiting) || mb.parked {
		return nil
	}
	paused := c.paused(addr)
	if mb.inflight != nil || paused {
		if err := c.applyHeldMutations(mb); err != nil {
			return err
		}
	}
	for len(mb.queue) > 0 && mb.queue[0].mut != nil {
		q := mb.queue[0]
		mb.queue[0] = queued{}
		mb.queue = mb.queue[1:]
		c.backlog--
		if err := c.applyMutation(q); err != nil {
			return err
		}
	}
	switch {
	case mb.inflight != nil:
		return nil
	case len(mb.queue) > 0:
		if paused {
			return nil
		}
		return c.startBatch(addr, mb)
	default:
		delete(c.mailboxes, addr)
		return nil
	}
}

// startBatch sends the messages at the head of the queue, up to the first
// mutation and the batch cap.
func (c *Core) startBatch(addr address.Address, mb *mailbox) error {
	known, err := c.typeKnown(addr.Type)
	if err != nil {
		return err
	}
	if !known {
		if p, ok := c.probing[addr.Type]; ok && p != addr {
			mb.parked = true
			c.parked[addr.Type] = append(c.parked[addr.Type], addr)
			return nil
		}
		c.probing[addr.Type] = addr
	}
	n := 0
	for n < len(mb.queue) && mb.queue[n].mut == nil {
		n++
	}
	if max := c.maxBatch(addr.Type); max > 0 && n > max {
		n = max
	}
	if c.cfg.MaxBatchBytes != nil {
		if limit := c.cfg.MaxBatchBytes(addr.Type); limit > 0 {
			size := 0
			for i := range n {
				size += proto.Size(mb.queue[i].inv)
				if i > 0 && size > limit {
					n = i
					break
				}
			}
		}
	}
	b := &batch{}
	b.msgs, b.sent = b.one[:], b.sentBuf[:0] // a batch of one message and a few states: no more allocations
	if n > 1 {
		b.msgs = make([]queued, n)
	}
	copy(b.msgs, mb.queue)
	rest := mb.queue[n:]
	mb.queue = append(mb.queue[:0:0], rest...)
	mb.inflight = b
	return c.send(addr, b)
}

func (c *Core) maxBatch(t address.TypeName) int {
	if c.cfg.MaxBatch == nil {
		return 0
	}
	return c.cfg.MaxBatch(t)
}

// send builds the request of b with every registered state attached, as it
// is now, and hands it out.
func (c *Core) send(addr address.Address, b *batch) error {
	specs, err := c.specsOf(addr.Type)
	if err != nil {
		return err
	}
	// The request's messages are allocated together, one allocation for
	// the request and one for its states, rather than one each: a call
	// is made for every batch, at 10,000 addresses for every message.
	one := &sendAlloc{}
	one.target = protocol.Address{Namespace: addr.Type.Namespace, Type: addr.Type.Name, Id: addr.ID}
	req := &one.req
	req.Target = &one.target
	req.State = make([]*protocol.ToFunction_PersistedValue, 0, len(specs))
	req.Invocations = make([]*protocol.ToFunction_Invocation, len(b.msgs))
	states := make([]stateAlloc, len(specs))
	b.sent = b.sent[:0]
	for i, s := range specs {
		pv := &states[i].pv
		pv.StateName = s.Name
		e, ok, err := c.get(addr, s.Name)
		if err != nil {
			return err
		}
		if ok {
			tv := &states[i].tv
			tv.Typename, tv.HasValue, tv.Value = s.Typename, true, e.Value
			pv.StateValue = tv
			if s.Mode == ExpireAfterInvoke {
				// Reading a state for an invocation restarts its clock
				// (StateFun's OnReadAndWrite TTL); the version stays.
				e.ExpiresAt = addSat(c.now, s.TTL)
				c.write(addr, s.Name, e, false)
			}
		}
		req.State = append(req.State, pv)
		b.sent = append(b.sent, s.Name)
	}
	for i, q := range b.msgs {
		req.Invocations[i] = q.inv
	}
	c.nextRequest++
	b.request = c.nextRequest
	b.waiting = false
	c.ready.Invocations = append(c.ready.Invocations, Invocation{
		Addr:    addr,
		Request: b.request,
		Attempt: b.attempt,
		Body:    one.body(),
	})
	return nil
}

// sendAlloc holds the messages of one request to a function but its
// states, allocated together (Core.send).
type sendAlloc struct {
	target protocol.Address
	req    protocol.ToFunction_InvocationBatchRequest
	inv    protocol.ToFunction_Invocation_
	to     protocol.ToFunction
}

// body links the request into its ToFunction and returns it.
func (a *sendAlloc) body() *protocol.ToFunction {
	a.inv.Invocation = &a.req
	a.to.Request = &a.inv
	return &a.to
}

// stateAlloc is one state of a request and its value, allocated together.
type stateAlloc struct {
	pv protocol.ToFunction_PersistedValue
	tv protocol.TypedValue
}

func (c *Core) onResult(ev ResultArrived) error {
	mb := c.mailboxes[ev.Addr]
	if mb == nil || mb.inflight == nil || mb.inflight.waiting || mb.inflight.request != ev.Request {
		return nil // a stale result: the batch was already settled
	}
	if p, ok := c.probing[ev.Addr.Type]; ok && p == ev.Addr {
		// Whatever the probe's outcome, the parked addresses go next: with
		// the type's states learned, or to find out for themselves if the
		// probe's own messages are the problem.
		if err := c.settleResult(ev, mb); err != nil {
			return err
		}
		return c.releaseParked(ev.Addr.Type)
	}
	return c.settleResult(ev, mb)
}

// settleResult applies the outcome of a batch's request.
func (c *Core) settleResult(ev ResultArrived, mb *mailbox) error {
	if ev.Err != nil {
		// A call that failed is retried; one whose answer broke the
		// protocol (AsViolation) counts as a violation too.
		return c.fail(ev.Addr, mb, ev.Err, IsViolation(ev.Err))
	}
	switch r := ev.Response.GetResponse().(type) {
	case *protocol.FromFunction_IncompleteInvocationContext_:
		if err := c.learn(ev.Addr.Type, mb.inflight, r.IncompleteInvocationContext.GetMissingValues()); err != nil {
			if IsViolation(err) {
				return c.fail(ev.Addr, mb, err, true)
			}
			return err
		}
		// StateFun re-sends the same invocations with every state attached.
		return c.send(ev.Addr, mb.inflight)
	default:
		// No oneof set means a response with no effects, as in StateFun.
		fx, err := c.validate(ev.Addr, ev.Response.GetInvocationResult())
		if err == nil {
			c.known[ev.Addr.Type] = true // a success: the states sent were all it needed
		}
		if err != nil {
			if IsViolation(err) {
				return c.fail(ev.Addr, mb, err, true)
			}
			return err
		}
		if err := c.apply(ev.Addr, mb.inflight, fx); err != nil {
			return err
		}
		if mb.inflight.attempt > 0 {
			c.failing(ev.Addr.Type, -1)
		}
		c.backlog -= len(mb.inflight.msgs)
		mb.inflight = nil
		return c.advance(ev.Addr, mb)
	}
}

// fail schedules a retry of b with capped exponential backoff. The batch
// keeps its messages: nothing is lost, and the address's later messages wait.
// When the poison policy says so, the address is paused instead, the batch
// still at the head of its inbox; it is retried when the address resumes.
func (c *Core) fail(addr address.Address, mb *mailbox, err error, violation bool) error {
	b := mb.inflight
	b.attempt++
	if b.attempt == 1 {
		b.since = c.now
		c.failing(addr.Type, 1)
	}
	b.lastErr, b.violation = err.Error(), violation
	backoff := c.cfg.RetryMax
	if shift := b.attempt - 1; shift < 30 && c.cfg.RetryBase <= backoff>>shift {
		backoff = c.cfg.RetryBase << shift
	}
	b.waiting = true
	f := Failure{Addr: addr, Attempt: b.attempt, Violation: violation, Err: err}
	if reason, ok := c.policyPauses(addr, b, err, violation); ok && !c.paused(addr) {
		c.autoPause(addr, reason)
		f.Paused = true
	} else {
		b.retryAt = addSat(c.now, backoff)
		f.RetryAt = b.retryAt
		c.schedule(&timerItem{due: b.retryAt, retry: &retryRef{addr: addr, b: b, attempt: b.attempt}})
	}
	c.ready.Failures = append(c.ready.Failures, f)
	return c.advance(addr, mb)
}

// learn registers the states a function reported missing from the request
// b carried. A name already registered must keep its type. A name the
// request did carry is a protocol loop; one registered meanwhile (by
// another partition) is fine: the re-sent request will carry it.
func (c *Core) learn(t address.TypeName, b *batch, missing []*protocol.FromFunction_PersistedValueSpec) error {
	cur, err := c.specsOf(t)
	if err != nil {
		return err
	}
	next := append([]Spec(nil), cur...)
	for _, m := range missing {
		s, err := specFromProto(m)
		if err != nil {
			return violation("%v", err)
		}
		for _, sent := range b.sent {
			if sent == s.Name {
				return violation("the function reported state %q missing, but the request carried it", s.Name)
			}
		}
		if i := indexSpec(next, s.Name); i >= 0 {
			if next[i].Typename != s.Typename {
				return violation("state %q is registered with type %s, the function now declares %s", s.Name, next[i].Typename, s.Typename)
			}
			continue
		}
		next = append(next, s)
	}
	if len(next) == len(cur) {
		return nil // all registered meanwhile
	}
	c.specs[t] = next
	if c.pending.Specs == nil {
		c.pending.Specs = map[address.TypeName][]Spec{}
	}
	c.pending.Specs[t] = next
	return nil
}

func specFromProto(m *protocol.FromFunction_PersistedValueSpec) (Spec, error) {
	s := Spec{Name: m.GetStateName(), Typename: m.GetTypeTypename()}
	if s.Name == "" {
		return s, errors.New("the function declared a state with an empty name")
	}
	// The name is a path segment of the state API, the typename is stored
	// with every value: both must be storable and reachable.
	if err := address.CheckStateName(s.Name); err != nil {
		return s, fmt.Errorf("a declared %s", fieldProblem(err))
	}
	if s.Typename == "" {
		s.Typename = "io.statefun.types/unset"
	}
	if err := address.CheckTypename(s.Typename); err != nil {
		return s, fmt.Errorf("state %q: %s", s.Name, fieldProblem(err))
	}
	switch es := m.GetExpirationSpec(); es.GetMode() {
	case protocol.FromFunction_ExpirationSpec_NONE:
	case protocol.FromFunction_ExpirationSpec_AFTER_WRITE, protocol.FromFunction_ExpirationSpec_AFTER_INVOKE:
		if es.GetExpireAfterMillis() <= 0 {
			return s, fmt.Errorf("state %q: expiration after %d ms", s.Name, es.GetExpireAfterMillis())
		}
		s.Mode, s.TTL = ExpireMode(es.GetMode()), es.GetExpireAfterMillis()
	default:
		return s, fmt.Errorf("state %q: unknown expiration mode %d", s.Name, es.GetMode())
	}
	return s, nil
}

func indexSpec(specs []Spec, name string) int {
	for i, s := range specs {
		if s.Name == name {
			return i
		}
	}
	return -1
}

// typeKnown reports whether a type's states are known to be complete.
func (c *Core) typeKnown(t address.TypeName) (bool, error) {
	if c.known[t] {
		return true, nil
	}
	specs, err := c.specsOf(t)
	if err != nil || len(specs) == 0 {
		return false, err
	}
	c.known[t] = true
	return true, nil
}

// releaseParked ends a type's probe and moves the addresses that waited
// for it.
func (c *Core) releaseParked(t address.TypeName) error {
	delete(c.probing, t)
	waiting := c.parked[t]
	delete(c.parked, t)
	for _, a := range waiting {
		mb := c.mailboxes[a]
		if mb == nil || !mb.parked {
			continue
		}
		mb.parked = false
		if err := c.advance(a, mb); err != nil {
			return err
		}
	}
	return nil
}

// merge adds the specs another partition registered; the names this core
// already knows keep their registration.
func (c *Core) merge(t address.TypeName, specs []Spec) error {
	cur, err := c.specsOf(t)
	if err != nil {
		return err
	}
	next := cur
	for _, s := range specs {
		if indexSpec(next, s.Name) < 0 {
			next = append(next[:len(next):len(next)], s)
		}
	}
	c.specs[t] = next
	return nil
}

func (c *Core) specsOf(t address.TypeName) ([]Spec, error) {
	if s, ok := c.specs[t]; ok {
		return s, nil
	}
	s, err := c.r.Specs(t)
	if err != nil {
		return nil, err
	}
	c.specs[t] = s
	return s, nil
}

// get reads an entry as the partition sees it now: its own applied writes
// first, then the durable store; expired values are absent.
func (c *Core) get(a address.Address, state string) (Entry, bool, error) {
	e, ok, err := c.getRaw(a, state)
	if err != nil || !ok || e.expired(c.now) {
		return Entry{}, false, err
	}
	return e, true, nil
}

func (c *Core) getRaw(a address.Address, state string) (Entry, bool, error) {
	if o, ok := c.overlay[stateKey{a, state}]; ok {
		return o.entry, !o.delete, nil
	}
	return c.r.State(a, state)
}

// write records an entry change in the commit under construction and in
// the overlay that later reads see.
func (c *Core) write(a address.Address, state string, e Entry, del bool) {
	k := stateKey{a, state}
	id := c.commitID + 1 // the id the pending commit will get
	c.overlay[k] = overlayEntry{entry: e, delete: del, commit: id}
	c.byCommit[id] = append(c.byCommit[id], k)
	w := StateWrite{Addr: a, State: state, Entry: e, Delete: del, Cause: c.cause, At: c.now}
	if i, ok := c.stateIdx[k]; ok {
		if w.Cause == nil {
			// A TTL restart after a change in the same commit: the change
			// and its cause stand, with the new expiry.
			w.Cause, w.At = c.pending.State[i].Cause, c.pending.State[i].At
		}
		c.pending.State[i] = w
		return
	}
	c.stateIdx[k] = len(c.pending.State)
	c.pending.State = append(c.pending.State, w)
}

func (c *Core) onDurable(id uint64) {
	c.timerDurable(id)
	for cid, keys := range c.byCommit {
		if cid > id {
			continue
		}
		for _, k := range keys {
			if o, ok := c.overlay[k]; ok && o.commit <= id {
				delete(c.overlay, k)
			}
		}
		delete(c.byCommit, cid)
	}
}

// produce writes a message from this partition into its target's inbox.
// A target in this partition is queued at once, unless the core holds
// Config.MaxQueued or handed an earlier one over; others, and those, are
// delivered by the shell once the commit is durable.
func (c *Core) produce(env *protocol.Envelope) error {
	dest := address.Partition(env.GetTarget().GetId(), c.cfg.Partitions)
	key := InboxKey{Partition: dest, Source: uint32(c.cfg.ID), Seq: c.outSeq}
	c.outSeq++
	if dest != c.cfg.ID {
		c.pending.Produced = append(c.pending.Produced, Produced{Key: key, Env: env})
		return nil
	}
	if c.handedOver || (c.cfg.MaxQueued > 0 && c.backlog >= c.cfg.MaxQueued) {
		c.pending.Produced = append(c.pending.Produced, Produced{Key: key, Env: env, Deliver: true})
		c.handedOver, c.lastHanded = true, key.Seq
		return nil
	}
	c.pending.Produced = append(c.pending.Produced, Produced{Key: key, Env: env})
	return c.enqueue(key, env)
}

func toAddress(a *protocol.Address) address.Address {
	return address.Address{Type: address.TypeName{Namespace: a.GetNamespace(), Name: a.GetType()}, ID: a.GetId()}
}

func toProto(a address.Address) *protocol.Address {
	return &protocol.Address{Namespace: a.Type.Namespace, Type: a.Type.Name, Id: a.ID}
}

// addSat returns now + d, saturated at the ends of int64: a delay, TTL or
// backoff too large to represent lies forever in the future (or past) and
// never wraps around to fire at once.
func addSat(now, d int64) int64 {
	switch {
	case d > 0 && now > math.MaxInt64-d:
		return math.MaxInt64
	case d < 0 && now < math.MinInt64-d:
		return math.MinInt64
	}
	return now + d
}
