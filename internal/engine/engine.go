package engine

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// Functions sends one request to the endpoint that serves a function type.
// Implementations are safe for concurrent use; one attempt per call (the
// partition core owns retries).
type Functions interface {
	Call(ctx context.Context, t address.TypeName, req *protocol.ToFunction) (*protocol.FromFunction, error)
}

// Options configure an Engine. Store and Functions are required.
type Options struct {
	Store     *store.DB
	Functions Functions
	// MaxBatch is the per-type cap on invocations per request; nil for none.
	MaxBatch func(t address.TypeName) int
	// Egress routes and checks egress records (see partition.Config.Egress).
	Egress func(namespace, typ string, arg *protocol.TypedValue) (string, error)
	// MaxBacklog is how many messages may wait in one partition before the
	// ingress answers busy. Default 100000.
	MaxBacklog int
	// RetryBase and RetryMax bound the backoff of failed calls. Defaults
	// 50ms and 10s.
	RetryBase, RetryMax time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Metrics may be nil.
	Metrics *Metrics
	// Now is the clock; defaults to time.Now. Tests may drive it.
	Now func() time.Time
}

// ErrBusy is returned by Ingest when the target partition's backlog is at
// its limit; the ingress answers 503 with Retry-After.
var ErrBusy = errors.New("engine: the partition's queue is full, retry later")

// ErrClosed is returned by Ingest and PopEgress after Close.
var ErrClosed = errors.New("engine: closed")

// Engine runs the partitions of one application on the embedded store.
type Engine struct {
	opts  Options
	db    *store.DB
	log   *slog.Logger
	m     *Metrics
	reg   *specRegistry
	parts []*part
	com   *committer

	ingressSeq atomic.Uint64
	egressSeq  uint64 // owned by the committer

	egressMu sync.Mutex
	egressQ  map[string]*egressQueue

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed atomic.Bool

	waiters *waiters
	calls   chan callReq // unbuffered: a send succeeds only to an idle worker

	errOnce sync.Once
	err     error
	failed  chan struct{}
}

// New restores every partition from the store. Call Start to run them.
func New(opts Options) (*Engine, error) {
	if opts.Store == nil || opts.Functions == nil {
		return nil, errors.New("engine: Options.Store and Options.Functions are required")
	}
	if opts.MaxBacklog <= 0 {
		opts.MaxBacklog = 100_000
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
	e := &Engine{opts: opts, db: opts.Store, log: opts.Logger, m: opts.Metrics, egressQ: map[string]*egressQueue{}, failed: make(chan struct{}), waiters: newWaiters(), calls: make(chan callReq)}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	var err error
	if e.reg, err = loadSpecs(e.db); err != nil {
		return nil, err
	}
	if err := e.restore(); err != nil {
		return nil, err
	}
	e.com = newCommitter(e)
	return e, nil
}

// restore rebuilds every partition core from the store: its meta, its
// timers, and the messages still waiting in its inbox, which re-run.
func (e *Engine) restore() error {
	n := e.db.Partitions()
	inboxes := make([][]store.InboxKey, n)
	envs := make([][]*protocol.Envelope, n)
	outSeq := make([]uint64, n)
	var maxIngress uint64
	for p := 0; p < n; p++ {
		err := e.db.ScanInbox(p, func(k store.InboxKey, env *protocol.Envelope) error {
			inboxes[p] = append(inboxes[p], k)
			envs[p] = append(envs[p], env)
			switch {
			case k.Source == store.SourceIngress:
				maxIngress = max(maxIngress, k.Seq)
			case int(k.Source) < n:
				outSeq[k.Source] = max(outSeq[k.Source], k.Seq+1)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	e.ingressSeq.Store(maxIngress)
	seq, err := e.db.MaxEgressSeq()
	if err != nil {
		return err
	}
	e.egressSeq = seq
	now := e.opts.Now().UnixMilli()
	pending := 0
	for p := 0; p < n; p++ {
		meta, err := e.db.Meta(p)
		if err != nil {
			return err
		}
		rs := partition.Restore{CommitID: meta.CommitID, VersionSeq: meta.VersionSeq, OutSeq: outSeq[p]}
		err = e.db.ScanTimers(p, func(k store.TimerKey, env *protocol.Envelope) error {
			rs.Timers = append(rs.Timers, partition.Timer{Key: partition.TimerKey{Partition: k.Partition, Due: k.Due, ID: k.ID}, Env: env})
			return nil
		})
		if err != nil {
			return err
		}
		core := partition.New(partition.Config{
			ID:         p,
			Partitions: n,
			MaxBatch:   e.opts.MaxBatch,
			Egress:     e.opts.Egress,
			RetryBase:  durOr(e.opts.RetryBase, 50*time.Millisecond).Milliseconds(),
			RetryMax:   durOr(e.opts.RetryMax, 10*time.Second).Milliseconds(),
		}, storeReader{db: e.db, reg: e.reg}, rs)
		for i, k := range inboxes[p] {
			ev := partition.MessageArrived{Key: partition.InboxKey{Partition: k.Partition, Source: k.Source, Seq: k.Seq}, Env: envs[p][i]}
			if m := envs[p][i].GetMutation(); m != nil {
				ev.Mutation = mutationFromProto(m)
			}
			if err := core.Step(now, ev); err != nil {
				return err
			}
		}
		pending += len(inboxes[p])
		e.parts = append(e.parts, newPart(e, p, core))
	}
	if pending > 0 {
		e.log.Info("restored pending messages", "messages", pending, "partitions", n)
	}
	return nil
}

func durOr(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// Start runs the partitions and the committer until Close.
func (e *Engine) Start() {
	e.wg.Add(1)
	go func() { defer e.wg.Done(); e.com.loop(e.ctx) }()
	for _, p := range e.parts {
		e.wg.Add(1)
		go func() { defer e.wg.Done(); p.loop(e.ctx) }()
	}
}

// Close stops every goroutine. Commits already handed to the committer are
// finished; invocations in flight are abandoned and re-run after a restart.
// The store is left open for the caller to close.
func (e *Engine) Close() {
	if e.closed.Swap(true) {
		return
	}
	e.cancel()
	e.wg.Wait()
}

// Partitions returns P.
func (e *Engine) Partitions() int { return len(e.parts) }

// Ingest makes a message from an ingress durable and then delivers it. It
// returns once the message is durable (the playground ingress answers 200
// only then), ErrBusy when the target partition is full.
func (e *Engine) Ingest(ctx context.Context, env *protocol.Envelope) error {
	if e.closed.Load() {
		return ErrClosed
	}
	p := e.parts[address.Partition(env.GetTarget().GetId(), len(e.parts))]
	if p.full(e.opts.MaxBacklog) {
		e.m.ingressRejected.Inc()
		return ErrBusy
	}
	key := store.InboxKey{Partition: p.id, Source: store.SourceIngress, Seq: e.ingressSeq.Add(1)}
	req := &commitReq{ingress: &ingressWrite{key: key, env: env}, done: make(chan error, 1)}
	if err := e.com.submit(req); err != nil {
		return err
	}
	select {
	case err := <-req.done:
		if err != nil {
			return err
		}
	case <-ctx.Done():
		// Durable or not, the message will be delivered (after a restart
		// at the latest); the caller only stops waiting.
		return ctx.Err()
	}
	e.m.ingressed.Inc()
	return nil
}

// deliver hands a durable message (or accepted mutation) to its
// partition's mailbox.
func (e *Engine) deliver(k store.InboxKey, env *protocol.Envelope) {
	ev := partition.MessageArrived{Key: partition.InboxKey{Partition: k.Partition, Source: k.Source, Seq: k.Seq}, Env: env}
	if m := env.GetMutation(); m != nil {
		ev.Mutation = mutationFromProto(m)
	}
	e.parts[k.Partition].post(ev)
}

// publishSpecs tells every other partition what one partition learned.
func (e *Engine) publishSpecs(from int, specs map[address.TypeName][]partition.Spec) {
	for t, s := range specs {
		e.reg.set(t, s)
		for _, p := range e.parts {
			if p.id != from {
				p.post(partition.SpecsKnown{Type: t, Specs: s})
			}
		}
	}
}

// callReq is one invocation handed to a call worker.
type callReq struct {
	p   *part
	inv partition.Invocation
}

// callIdle is how long a call worker waits for work before it exits.
const callIdle = 30 * time.Second

// dispatch sends an invocation on a call worker: an idle one if there is
// one, else a new one. Workers live on while there is work, so their stacks,
// grown by decoding responses, are reused instead of grown again for every
// call (a goroutine per call cost 7.5% of the runtime's CPU in the profile of
// docs/benchmarks.md). There is no cap: each address has at most one call in
// flight, and the endpoint's connection pool bounds the rest.
func (e *Engine) dispatch(p *part, inv partition.Invocation) {
	select {
	case e.calls <- callReq{p, inv}:
	default:
		go e.callWorker(callReq{p, inv})
	}
}

func (e *Engine) callWorker(r callReq) {
	idle := time.NewTimer(callIdle)
	defer idle.Stop()
	for {
		e.call(r.p, r.inv)
		idle.Reset(callIdle)
		select {
		case r = <-e.calls:
		case <-idle.C:
			return
		case <-e.ctx.Done():
			return
		}
	}
}

func (e *Engine) call(p *part, inv partition.Invocation) {
	start := time.Now()
	resp, err := e.opts.Functions.Call(e.ctx, inv.Addr.Type, inv.Body)
	if e.ctx.Err() != nil {
		return // shutting down: the batch re-runs after a restart
	}
	e.m.observeCall(inv, err, time.Since(start))
	p.post(partition.ResultArrived{Addr: inv.Addr, Request: inv.Request, Response: resp, Err: err})
}

// SpecsOf returns the registered states of a function type.
func (e *Engine) SpecsOf(t address.TypeName) []partition.Spec { return e.reg.get(t) }
