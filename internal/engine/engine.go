package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/engine/committer"
	"github.com/statefun-go/statefun/internal/engine/dispatch"
	"github.com/statefun-go/statefun/internal/lane"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
	"google.golang.org/protobuf/proto"
)

// Functions sends one request to the endpoint that serves a function type.
// Implementations are safe for concurrent use; one attempt per call (the
// partition core owns retries). It is the dispatcher's interface, which
// the engine hands its Functions to.
type Functions = dispatch.Functions

// Options configure an Engine. Store and Functions are required.
type Options struct {
	Store     *store.DB
	Functions Functions
	// MaxBatch is the per-type cap on invocations per request; nil for none.
	MaxBatch func(t address.TypeName) int
	// MaxBatchBytes is the per-type cap on the bytes of invocations per
	// request (see partition.Config.MaxBatchBytes); nil for none.
	MaxBatchBytes func(t address.TypeName) int
	// Egress routes and checks egress records (see partition.Config.Egress).
	Egress func(namespace, typ string, arg *protocol.TypedValue) (string, error)
	// Routable says whether a message to a function type may be taken in
	// (nil) or why not; a function's response that sends a message to a
	// type it refuses is a protocol violation (see
	// partition.Config.Routable). Nil means every type is served.
	Routable func(t address.TypeName) error
	// MaxRecordBytes is the most bytes one record of the log takes (see
	// partition.Config.MaxRecordBytes); ≤ 0 for no limit.
	MaxRecordBytes int
	// MaxBacklog is how many messages one partition holds in memory: past
	// it the ingresses and the state API answer busy, and the messages it
	// cannot refuse (from other partitions, delayed ones falling due, a
	// restart's inbox) wait in its inbox in the store, paged in as it
	// drains (paging.go). Default DefaultMaxBacklog.
	MaxBacklog int
	// MaxBacklogBytes is how many bytes of messages may be held in memory
	// by one partition (waiting in its mailbox, queued in its core or in
	// flight) before the ingress and the state API answer busy, and the
	// rest waits in the store like MaxBacklog's. One message
	// is always taken into an empty partition, whatever its size. Default
	// DefaultMaxBacklogBytes.
	MaxBacklogBytes int64
	// TimerWindow is how many pending delayed messages one partition keeps
	// in memory, the earliest due; the others wait in the store and are
	// read as the window drains. Default partition.DefaultTimerWindow.
	TimerWindow int
	// RetryBase and RetryMax bound the backoff of failed calls. Defaults
	// 50ms and 10s.
	RetryBase, RetryMax time.Duration
	// PauseAfter and PauseOnViolation are the poison policy (see
	// partition.Config): nil keeps retrying a failed batch until it
	// succeeds.
	PauseAfter       func(t address.TypeName) int
	PauseOnViolation func(t address.TypeName) bool
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Metrics may be nil.
	Metrics *Metrics
	// IngressAnswers is how many callers of Ingest and IngestOnce (the
	// playground ingress's handlers) are woken with their outcome and not
	// yet done at once; the rest wait their turn, oldest first. Zero means
	// two per GOMAXPROCS; a negative number turns the pacing off (each
	// caller is woken as its message is durable). Why: see answerPacer.
	IngressAnswers int
	// Lane is the runtime's admin lane (internal/lane), which the hot
	// paths poke: a partition's turn and each call to a function. Nil:
	// none.
	Lane *lane.Lane
	// Now is the clock; defaults to time.Now. Every time the engine reads
	// (timers of the partition loops, retry logs, latencies) comes from it.
	Now func() time.Time
	// Admit, when set, is asked before new work is taken: a non-nil error
	// refuses Ingest and Mutate (every ack mode) with an error for which
	// errors.Is(err, ErrBusy) holds and which carries the reason (a disk
	// space guard plugs in here). Reads and egress pops are not refused.
	Admit func() error
	// Driven makes Start run no goroutines: the caller steps partitions,
	// the group committer and function calls one at a time through
	// Driver, on its own goroutine (a deterministic simulation does).
	Driven bool

	// Durability, when set, makes the engine's requests durable instead
	// of the embedded group committer (cluster mode: the Kafka session;
	// see Durability and cluster.go). Nil is the embedded committer on
	// Store.
	Durability Durability
	// Outbound, when set, takes the messages a partition commit sends to
	// other partitions and its egress records, during the commit's Encode
	// (see Outbound). Set exactly when Owned is.
	Outbound Outbound
	// Owned makes the engine start with no partition: Assign and Revoke
	// say which partitions it runs (cluster mode). Requires Durability
	// and Outbound.
	Owned bool
	// ReadOnly runs the partitions without invoking any function or
	// making anything durable (readonly.go): for a store opened
	// read-only. Not with Owned or Driven.
	ReadOnly bool
}

// DefaultMaxBacklog is the default of Options.MaxBacklog: 160,000
// messages in memory for the 16 partitions of a default store, which is
// about 150 MiB of RSS for small messages; more wait in the store.
const DefaultMaxBacklog = 10_000

// DefaultMaxBacklogBytes is the default of Options.MaxBacklogBytes: 16 MiB
// per partition, so 256 MiB for the 16 partitions of a default store.
const DefaultMaxBacklogBytes = 16 << 20

// ErrBusy is returned by Ingest, Mutate and Read when the target
// partition's backlog is at its limit; the edges answer 503 with
// Retry-After.
var ErrBusy = errors.New("engine: the partition's queue is full, retry later")

// BusyError is the error of work refused because Options.Admit said no:
// errors.Is(err, ErrBusy) holds, and Reason says why.
type BusyError struct{ Reason error }

func (e *BusyError) Error() string { return "engine: not taking new work: " + e.Reason.Error() }

// Is makes errors.Is(err, ErrBusy) hold.
func (e *BusyError) Is(target error) bool { return target == ErrBusy }

// Unwrap returns the reason.
func (e *BusyError) Unwrap() error { return e.Reason }

// admit asks Options.Admit.
func (e *Engine) admit() error {
	if e.opts.Admit == nil {
		return nil
	}
	if err := e.opts.Admit(); err != nil {
		return &BusyError{Reason: err}
	}
	return nil
}

// ErrClosed is returned by every method after Close, and wrapped by the
// error callers get once a store error stopped the engine (see Err).
var ErrClosed = errors.New("engine: closed")

// Engine runs the partitions of one application on the embedded store.
type Engine struct {
	opts Options
	db   *store.DB
	log  *slog.Logger
	m    *Metrics
	// unknown are the function types reported unknown by their function
	// server (logFailure).
	unknown unknownTypes
	specs   *specRegistry
	// n is P, the application's partition count.
	n int
	// parts are the partitions of an engine that runs them all, built at
	// New and never replaced; nil with Options.Owned, where slots hold the
	// parts assigned now (nil for a partition not owned). Use part(i).
	parts []*part
	slots []atomic.Pointer[part]
	// com makes requests durable: the embedded group committer, or
	// Options.Durability.
	com   Durability
	calls invoker
	drv   *Driver

	// ownMu serializes Assign, Revoke and Start (cluster.go); started is
	// set by Start, so an Assign after it starts the part's runner.
	ownMu   sync.Mutex
	started bool
	// prev is the last revoked part of each partition, whose unsettled
	// requests hold up the next Assign.
	prev []*part

	ingressSeq atomic.Uint64
	egressSeq  uint64        // owned by the committer's goroutine (Encode)
	scratch    encodeScratch // owned by the committer's goroutine (Encode)
	resendMu   sync.Mutex    // one re-send of a dead letter at a time (repair.go)
	egress     *egressPopper
	once       inflight // idempotency keys being made durable

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed atomic.Bool

	waiters *waiters
	answers *answerPacer // wakes the playground ingress's callers

	// positions are the partitions' durable commit ids (history.go).
	positions positions

	// halt is how the engine stopped on an error (fatal, Err).
	halt *halt

	// callRTT holds the latest calls' round trips (CallLatencies).
	callRTT callRing
}

// invoker sends a partition's invocations: a pool of call workers, or the
// Driver's queue.
type invoker interface {
	invoke(p *part, inv partition.Invocation)
}

// New restores every partition from the store (with Options.Owned, none:
// see Assign). Call Start to run them.
func New(opts Options) (*Engine, error) {
	if opts.Store == nil || opts.Functions == nil {
		return nil, errors.New("engine: Options.Store and Options.Functions are required")
	}
	if opts.Owned != (opts.Outbound != nil) {
		return nil, errors.New("engine: Options.Owned and Options.Outbound go together (cluster mode): set both or neither")
	}
	if opts.ReadOnly && (opts.Owned || opts.Driven) {
		return nil, errors.New("engine: Options.ReadOnly runs every partition itself: not with Owned or Driven")
	}
	if opts.Owned && opts.Durability == nil {
		return nil, errors.New("engine: Options.Owned needs Options.Durability (the cluster session makes the partitions' work durable)")
	}
	if opts.MaxBacklog <= 0 {
		opts.MaxBacklog = DefaultMaxBacklog
	}
	if opts.MaxBacklogBytes <= 0 {
		opts.MaxBacklogBytes = DefaultMaxBacklogBytes
	}
	if opts.TimerWindow <= 0 {
		opts.TimerWindow = partition.DefaultTimerWindow
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	e := &Engine{opts: opts, db: opts.Store, log: opts.Logger, m: opts.Metrics, halt: newHalt(), waiters: newWaiters(),
		answers: newAnswerPacer(opts.IngressAnswers),
		n:       opts.Store.Partitions()}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	e.egress = newEgressPopper(e.db, e.submit)
	var err error
	if e.specs, err = loadSpecs(e.db); err != nil {
		return nil, err
	}
	if opts.Owned {
		e.slots = make([]atomic.Pointer[part], e.n)
		e.prev = make([]*part, e.n)
		e.db.SetChangelogSweep(e.sweepThroughChangelog)
	} else if err := e.restore(); err != nil {
		return nil, err
	}
	if opts.ReadOnly {
		e.com, e.calls = readOnlyDurability{}, heldCalls{}
		return e, nil
	}
	if opts.Durability != nil {
		e.com = opts.Durability
	} else {
		e.com = committer.New(e.db, committer.Options{Now: opts.Now, Observe: e.m.observeCommit})
	}
	if opts.Driven {
		e.drv = &Driver{e: e}
		e.calls = e.drv
	} else {
		e.calls = poolInvoker{e: e, pool: dispatch.New(e.ctx, opts.Functions, opts.Now, opts.Lane)}
	}
	return e, nil
}

func durOr(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// Start runs the partitions and the committer until Close (with
// Options.Driven it runs nothing: see Driver). With Options.Owned it runs
// Durability and the partitions assigned so far; a later Assign starts its
// partition's runner itself.
func (e *Engine) Start() {
	if e.drv != nil {
		return
	}
	e.ownMu.Lock()
	defer e.ownMu.Unlock()
	e.started = true
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		if err := e.com.Run(e.ctx); err != nil {
			e.fatal(err)
		}
	}()
	if e.slots != nil {
		for i := range e.slots {
			if p := e.slots[i].Load(); p != nil {
				e.runPart(p)
			}
		}
		return
	}
	for _, p := range e.parts {
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			if err := p.run(e.ctx); err != nil {
				e.fatal(err)
			}
		}()
	}
}

// Close stops every goroutine. Commits already handed to the committer are
// finished; invocations in flight are abandoned and re-run after a restart.
// The store is left open for the caller to close.
func (e *Engine) Close() {
	if e.closed.Swap(true) {
		return
	}
	if e.opts.Owned {
		e.db.SetChangelogSweep(nil)
	}
	e.cancel()
	e.wg.Wait()
	e.com.Close()
}

// Partitions returns P, whether or not this process runs them all.
func (e *Engine) Partitions() int { return e.n }

// part returns the part of partition i: the engine's own, or with
// Options.Owned the one assigned now (nil when i is not owned).
func (e *Engine) part(i int) *part {
	if e.slots != nil {
		return e.slots[i].Load()
	}
	return e.parts[i]
}

// owner returns the part of partition i that takes new work, or ErrMoved.
func (e *Engine) owner(i int) (*part, error) {
	p := e.part(i)
	if p == nil {
		return nil, movedErr(i)
	}
	if err := p.usable(); err != nil {
		return nil, err
	}
	return p, nil
}

// submit hands a request to the committer.
func (e *Engine) submit(r Request) error {
	if e.opts.Owned && r.Partition() < 0 {
		return fmt.Errorf("engine: a %T is not any partition's work, which cluster mode cannot log", r)
	}
	if err := e.com.Submit(r); err != nil {
		return e.stopErr(err)
	}
	return nil
}

// stopErr is what a caller gets when its work will not be made durable
// because the engine stopped (halt.errOf).
func (e *Engine) stopErr(cause error) error { return e.halt.errOf(cause) }

// halt is how the engine stopped on an error: what the requests and
// callers whose work will not be finished are told.
type halt struct {
	once   sync.Once
	err    error
	failed chan struct{} // closed once err is set
}

func newHalt() *halt { return &halt{failed: make(chan struct{})} }

// cause returns the error that stopped the engine, or nil while it runs.
func (h *halt) cause() error {
	select {
	case <-h.failed:
		return h.err
	default:
		return nil
	}
}

// errOf is what a caller gets when its work will not be made durable
// because the engine stopped, or its request failed with cause: it wraps
// ErrClosed and the cause.
func (h *halt) errOf(cause error) error {
	if err := h.cause(); err != nil {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	if cause == nil || errors.Is(cause, ErrClosed) {
		return ErrClosed
	}
	if errors.Is(cause, committer.ErrStopped) {
		return fmt.Errorf("%w: %w", ErrClosed, cause)
	}
	return cause
}

// Ingest makes a message from an ingress durable and then delivers it. It
// returns once the message is durable (the playground ingress answers 200
// only then), ErrBusy when the target partition is full.
func (e *Engine) Ingest(ctx context.Context, env *protocol.Envelope) error {
	req, err := e.ingestReq(env, nil, true)
	if err != nil {
		return err
	}
	return e.awaitIngress(ctx, req)
}

// awaitIngress waits until an ingress request is durable (or failed), or ctx ends.
func (e *Engine) awaitIngress(ctx context.Context, req *ingressReq) error {
	select {
	case err := <-req.done:
		if req.answer != nil {
			e.answers.done()
		}
		if err != nil {
			return err
		}
	case <-ctx.Done():
		// Durable or not, the message will be delivered (after a restart
		// at the latest); the caller only stops waiting.
		if req.answer != nil {
			e.answers.leave(req.answer)
		}
		return ctx.Err()
	}
	e.m.ingressed.Inc()
	return nil
}

// ingest admits a message and hands it to the committer.
func (e *Engine) ingest(env *protocol.Envelope) (*ingressReq, error) {
	return e.ingestReq(env, nil, false)
}

// ingestReq admits a message and hands it to the committer, with the
// idempotency record to write with it, if any. A paced request's outcome
// reaches its caller through e.answers, and the caller must wait for it
// with awaitIngress.
func (e *Engine) ingestReq(env *protocol.Envelope, once *onceWrite, paced bool) (*ingressReq, error) {
	if e.closed.Load() {
		return nil, ErrClosed
	}
	if err := e.admit(); err != nil {
		e.m.ingressRejected.Inc()
		return nil, err
	}
	p, err := e.owner(address.Partition(env.GetTarget().GetId(), e.n))
	if err != nil {
		return nil, err
	}
	if e.full(p) {
		e.m.ingressRejected.Inc()
		return nil, ErrBusy
	}
	req := e.newIngressReq(p, env)
	req.once = once
	if paced && e.answers != nil {
		req.paced.done = req.done
		req.answer = &req.paced
	}
	if err := e.submit(req); err != nil {
		return nil, err
	}
	return req, nil
}

// deliver hands a durable message (or accepted mutation) to its
// partition's mailbox (an engine that runs every partition).
func (e *Engine) deliver(k partition.InboxKey, env *protocol.Envelope) {
	e.deliverTo(e.part(k.Partition), k, env)
}

// deliverTo hands a durable message (or accepted mutation) to the mailbox
// of p (deliverTo).
func (e *Engine) deliverTo(p *part, k partition.InboxKey, env *protocol.Envelope) {
	deliverTo(p, k, env)
}

// deliverTo hands a durable message (or accepted mutation) to the mailbox
// of p, the part its request was made for, unless p was revoked meanwhile:
// then the partition's next assignment finds it in the store.
func deliverTo(p *part, k partition.InboxKey, env *protocol.Envelope) {
	if p == nil || p.gone.Load() {
		return
	}
	p.pg.mu.Lock()
	defer p.pg.mu.Unlock()
	if p.pageOut(k) {
		return // in the store: paged in once the partition has room
	}
	ev := partition.MessageArrived{Key: k, Env: env}
	if m := env.GetMutation(); m != nil {
		ev.Mutation = mutationFromProto(m)
	}
	p.postSized(ev, proto.Size(env))
}

// full reports whether p is at its limit of messages or bytes.
func (e *Engine) full(p *part) bool { return p.full() }

// poolInvoker sends invocations on the call workers of a dispatch.Pool.
type poolInvoker struct {
	e    *Engine
	pool *dispatch.Pool
}

func (pi poolInvoker) invoke(p *part, inv partition.Invocation) {
	pi.pool.Dispatch(inv, p.callDone, &p.heldBytes)
}

// callDone returns the completion of p's calls: metrics, then the result
// goes into p's mailbox.
func (e *Engine) callDone(p *part) dispatch.Done {
	return func(inv partition.Invocation, resp *protocol.FromFunction, err error, took time.Duration) {
		e.m.observeCall(inv, err, took)
		if err == nil {
			e.callRTT.add(took)
		}
		p.post(partition.ResultArrived{Addr: inv.Addr, Request: inv.Request, Response: resp, Err: err})
	}
}

// fatal stops the engine after an error that leaves it unable to go on
// (a store error). Everything durable stays; the rest re-runs after restart.
func (e *Engine) fatal(err error) {
	e.halt.once.Do(func() {
		e.halt.err = err
		if err == committer.ErrStopped || errors.Is(err, committer.ErrStopped) && errors.Is(err, context.Canceled) {
			// Durability was closed with no cause but the process's
			// stop: a clean stop (the cluster session ends before the
			// engine does), not a fault.
			e.log.Info("engine stopped: its durability was closed (the process is stopping)")
		} else {
			e.log.Error("engine stopped", "error", err)
		}
		close(e.halt.failed)
		e.cancel()
	})
}

// Failed is closed when the engine stopped on an error; Err says which.
func (e *Engine) Failed() <-chan struct{} { return e.halt.failed }

// Err returns the error that stopped the engine, or nil while it runs
// (the admin /readyz answers 503 with it).
func (e *Engine) Err() error { return e.halt.cause() }
