// Package functions routes calls to remote functions: module.yaml binds each
// function type to an endpoint, and each endpoint gets one invoker.Client
// (one connection pool). It also answers the per-type questions the engine
// and the ingress ask of module.yaml (the batch cap, the largest message an
// endpoint can carry).
//
// # Bulkheads
//
// Function types that share an endpoint share its pool of PoolSize
// connections, and each call holds one connection for its whole duration.
// Without a bound per type, one type whose function hangs fills the pool
// with hung calls, and every other type of the endpoint waits for a
// connection until those calls time out. So each type may have at most a
// limited number of calls in flight (Options.MaxCallsPerType; by default
// half the pool for an endpoint that serves a namespace, the whole pool for
// an endpoint that serves one type). A call over its type's limit waits,
// in arrival order, for one of that type's calls to end; it holds no
// connection while it waits, and it stops waiting when its context ends.
// With k types hung at the limit L, the other types of the endpoint still
// have PoolSize − k·L connections.
//
// # Adaptive limits
//
// Within its bulkhead, a type's calls in flight follow an adaptive limit
// (package inflight): the fewest calls that give the most invocations
// answered per second, found by probing. A function that is the
// bottleneck then gets a few calls at a time instead of a pool's worth
// (which it answers no faster, and which keep hundreds of the runtime's
// goroutines busy ahead of everything else), and a function that is slow
// but not busy gets as many as its throughput needs, up to the bulkhead.
// Options.FixedCalls turns the adaptation off.
package functions

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/inflight"
	"github.com/statefun-go/statefun/internal/ingress"
	"github.com/statefun-go/statefun/internal/invoker"
	"github.com/statefun-go/statefun/internal/module"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
)

// ErrNoEndpoint is returned (wrapped, naming the type) by Call for a
// function type that no endpoint of the module serves.
var ErrNoEndpoint = errors.New("functions: no endpoint in module.yaml serves the function type")

// noEndpointError names the function type that has no endpoint.
type noEndpointError struct{ t address.TypeName }

func (e noEndpointError) Error() string {
	return "functions: no endpoint in module.yaml serves function type " + e.t.String()
}

func (e noEndpointError) Is(target error) bool { return target == ErrNoEndpoint }

// Options configure a Router.
type Options struct {
	// MaxCallsPerType caps the calls in flight per function type on each
	// endpoint (the bulkhead). Zero means the default: half the endpoint's
	// pool size (at least 1) for an endpoint that serves a namespace
	// ("ns/*"), the pool size for an endpoint that serves one type. A value
	// above an endpoint's pool size is lowered to it. Negative is refused.
	MaxCallsPerType int
	// FixedCalls keeps each type's calls in flight at its bulkhead instead
	// of adapting them to the throughput (see "Adaptive limits").
	FixedCalls bool
	// Metrics receives the bulkhead gauges; nil records nothing.
	Metrics *Metrics
	// MaxWildcardTypes bounds the distinct function types each namespace
	// wildcard endpoint serves (see Admit). Zero means
	// DefaultMaxWildcardTypes; negative means no bound.
	MaxWildcardTypes int
	// Logger receives an endpoint's changes of state (down, reachable
	// again); nil logs nothing.
	Logger *slog.Logger
}

// Router calls remote functions through the endpoint module.yaml binds to
// each function type. It implements the engine's Functions interface and is
// safe for concurrent use.
type Router struct {
	mod       *module.Module
	endpoints map[*module.Endpoint]*endpoint
	metrics   *Metrics
	types     admitted // the types wildcard endpoints serve so far
	log       *slog.Logger
}

// endpoint is one module.yaml endpoint: its client and its bulkhead.
type endpoint struct {
	client *invoker.Client
	limit  int  // calls in flight per function type (the bulkhead)
	fixed  bool // Options.FixedCalls

	mu      sync.Mutex
	types   map[address.TypeName]*bulkhead
	metrics *Metrics // the bulkheads' gauges; may be nil

	health health // is its server reachable (health.go)
}

// bulkhead bounds the calls in flight of one function type: at most the
// endpoint's limit, and within it the adaptive limit. Waiters are served
// first come, first served.
type bulkhead struct {
	calls *inflight.Limiter
	refs  int         // calls in flight or waiting (see unref)
	g     *typeGauges // the type's gauges
	url   string      // the type's URL at its endpoint
}

// New returns a Router with one client per endpoint of mod. It fails,
// naming the endpoint, when a client cannot be built (a TLS file that
// cannot be read, a bad option) or when opts is invalid.
func New(mod *module.Module, opts Options) (*Router, error) {
	if opts.MaxCallsPerType < 0 {
		return nil, fmt.Errorf("functions: MaxCallsPerType %d is negative", opts.MaxCallsPerType)
	}
	r := &Router{mod: mod, endpoints: map[*module.Endpoint]*endpoint{}, metrics: opts.Metrics, log: opts.Logger,
		types: admitted{limit: opts.MaxWildcardTypes, names: map[*module.Endpoint]map[string]struct{}{}}}
	if r.types.limit == 0 {
		r.types.limit = DefaultMaxWildcardTypes
	}
	for _, ep := range mod.Endpoints {
		c, err := invoker.New(invoker.Options{
			CallTimeout:     ep.Transport.Call,
			ConnectTimeout:  ep.Transport.Connect,
			PoolTTL:         ep.Transport.PoolTTL,
			PoolSize:        ep.Transport.PoolSize,
			PayloadMaxBytes: ep.Transport.PayloadMaxBytes,
			TrustCACerts:    ep.Transport.TrustCACerts,
			ClientCert:      ep.Transport.ClientCert,
			ClientKey:       ep.Transport.ClientKey,
		})
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("functions: endpoint for %s (%s): %w", ep.Functions, ep.Pos, err)
		}
		r.endpoints[ep] = &endpoint{client: c, limit: LimitPerType(ep, opts.MaxCallsPerType), fixed: opts.FixedCalls,
			types: map[address.TypeName]*bulkhead{}, metrics: opts.Metrics}
		if opts.Metrics != nil {
			opts.Metrics.endpointUp.WithLabelValues(ep.Functions.String()).Set(1)
		}
	}
	return r, nil
}

// PoolSize is the number of connections the endpoint's client pools: its
// transport's pool_size, or the invoker's default.
func PoolSize(ep *module.Endpoint) int {
	if ep.Transport.PoolSize > 0 {
		return ep.Transport.PoolSize
	}
	return invoker.DefaultPoolSize
}

// LimitPerType is the bulkhead of ep: the calls in flight one function type
// may have, for a configured maximum (0 for the default, see
// Options.MaxCallsPerType).
func LimitPerType(ep *module.Endpoint, configured int) int {
	pool := PoolSize(ep)
	switch {
	case configured > 0:
		return min(configured, pool)
	case ep.Functions.Wildcard:
		return max(pool/2, 1)
	default:
		return pool
	}
}

// Call sends req to the endpoint that serves t and returns its answer. It
// waits first, without holding a connection, while t has as many calls in
// flight as its bulkhead allows, and returns ctx's error if ctx ends while
// it waits. A t that no endpoint serves gets ErrNoEndpoint; a failed call
// gets the invoker's *invoker.Error.
func (r *Router) Call(ctx context.Context, t address.TypeName, req *protocol.ToFunction) (*protocol.FromFunction, error) {
	mep, ok := r.mod.EndpointFor(t)
	if !ok {
		return nil, noEndpointError{t}
	}
	ep := r.endpoints[mep]
	url, release, err := ep.acquire(ctx, t, mep)
	if err != nil {
		return nil, err
	}
	done := 0 // the work the call did, which the adaptive limit maximizes
	defer func() { release(done) }()
	resp, err := r.invoke(ctx, ep, mep, url, req)
	if err == nil {
		done = len(req.GetInvocation().GetInvocations())
	}
	return resp, err
}

// invoke sends req to t's endpoint, holding one of its slots.
func (r *Router) invoke(ctx context.Context, ep *endpoint, mep *module.Endpoint, url string, req *protocol.ToFunction) (*protocol.FromFunction, error) {
	resp, err := ep.client.Invoke(ctx, url, req)
	r.observe(mep, ep, err)
	if invoker.KindOf(err) == invoker.KindDecode {
		// The function answered 2xx with a body that is not a
		// FromFunction: it broke the protocol, as an invalid effect does.
		err = partition.AsViolation(err)
	}
	return resp, err
}

// Start is Call without a goroutine waiting for the type's bulkhead: run
// is given the call to make, once t has a slot — at once when one is free
// (Start returns false), or later, in arrival order, from the goroutine of
// the call that frees one (Start returns true: it queued). A backlog of
// batches for a slow function then waits as data, not as goroutines, each
// holding its request. run must not block: it hands call to a goroutine of
// its own, which must call it once. A t that no endpoint serves gets
// ErrNoEndpoint from call.
func (r *Router) Start(t address.TypeName, req *protocol.ToFunction, run func(call func(ctx context.Context) (*protocol.FromFunction, error))) (queued bool) {
	mep, ok := r.mod.EndpointFor(t)
	if !ok {
		run(func(context.Context) (*protocol.FromFunction, error) { return nil, noEndpointError{t} })
		return false
	}
	ep := r.endpoints[mep]
	b, err := ep.bulkheadOf(t, mep)
	if err != nil {
		run(func(context.Context) (*protocol.FromFunction, error) { return nil, err })
		return false
	}
	m := b.g
	// The call may start, on another goroutine, before Go returns: the
	// waiting gauge counts it only if Go queued it and it has not started.
	var st waitState
	queued = b.calls.Go(func(done func(units int)) {
		if st.started() {
			m.addWaiting(-1)
		}
		m.addInFlight(1)
		m.setLimit(b.calls.Limit())
		run(func(ctx context.Context) (*protocol.FromFunction, error) {
			n := 0
			defer func() {
				m.addInFlight(-1)
				done(n)
				ep.unref(t, b)
			}()
			resp, err := r.invoke(ctx, ep, mep, b.url, req)
			if err == nil {
				n = len(req.GetInvocation().GetInvocations())
			}
			return resp, err
		})
	})
	if queued && st.queued() {
		m.addWaiting(1)
	}
	return queued
}

// waitState orders the two sides of a call that Go may start on another
// goroutine before it returns.
type waitState struct{ v atomic.Int32 } // 0 pending, 1 started, 2 counted as waiting

// queued reports whether the call is still waiting, and counts it as such.
func (w *waitState) queued() bool { return w.v.CompareAndSwap(0, 2) }

// started reports whether the call was counted as waiting.
func (w *waitState) started() bool { return w.v.Swap(1) == 2 }

// minAdaptive is the floor of the adaptive limit: a few calls in flight
// whatever the probes say, so that one slow call does not hold up a type.
const minAdaptive = 4

// acquire takes one of t's slots, waiting for one while all are taken, and
// returns t's URL at its endpoint (mep) and the function that gives the
// slot back, told the invocations the call answered.
func (e *endpoint) acquire(ctx context.Context, t address.TypeName, mep *module.Endpoint) (url string, release func(done int), err error) {
	b, err := e.bulkheadOf(t, mep)
	if err != nil {
		return "", nil, err
	}
	m := b.g

	done, ok := b.calls.TryAcquire()
	if !ok {
		m.addWaiting(1)
		done, err = b.calls.Acquire(ctx)
		m.addWaiting(-1)
	}
	if err != nil {
		e.unref(t, b)
		return "", nil, fmt.Errorf("functions: waiting for one of the %d calls in flight of %s to end: %w", b.calls.Limit(), t, err)
	}
	m.addInFlight(1)
	m.setLimit(b.calls.Limit())
	return b.url, func(n int) {
		m.addInFlight(-1)
		done(n)
		e.unref(t, b)
	}, nil
}

// bulkheadOf returns t's bulkhead, made on first use, with a reference
// taken (unref gives it back).
func (e *endpoint) bulkheadOf(t address.TypeName, mep *module.Endpoint) (*bulkhead, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	b, ok := e.types[t]
	if !ok {
		calls, err := inflight.New(inflight.Options{Max: e.limit, Min: minAdaptive, Fixed: e.fixed})
		if err != nil {
			return nil, fmt.Errorf("functions: %s: %w", t, err)
		}
		b = &bulkhead{calls: calls, g: e.metrics.of(t), url: mep.URL(t)}
		e.types[t] = b
	}
	b.refs++
	return b, nil
}

// maxIdleBulkheads is how many bulkheads an endpoint keeps while none of
// their calls is in flight or waiting. A bulkhead carries its type's
// adaptive limit: forgetting it whenever the type goes idle, even for a
// moment between two calls, would start every burst again from the
// adaptive floor. The types an endpoint serves are bounded already (those
// module.yaml names, and a wildcard's admitted types,
// DefaultMaxWildcardTypes by default); the bound here only matters where
// the operator lifted the wildcard's bound.
const maxIdleBulkheads = DefaultMaxWildcardTypes

// unref drops one reference to t's bulkhead. An idle bulkhead is kept, with
// the limit it learned, unless the endpoint holds more than
// maxIdleBulkheads: then it is forgotten, so that types seen once do not
// accumulate.
func (e *endpoint) unref(t address.TypeName, b *bulkhead) {
	e.mu.Lock()
	defer e.mu.Unlock()
	b.refs--
	if b.refs == 0 && len(e.types) > maxIdleBulkheads {
		delete(e.types, t)
	}
}

// Serves reports whether an endpoint of the module serves function type t
// (module.yaml alone; Admit also applies a wildcard's bound).
func (r *Router) Serves(t address.TypeName) bool {
	_, ok := r.mod.EndpointFor(t)
	return ok
}

// MaxBatch is the batch cap module.yaml sets for t's endpoint
// (maxNumBatchRequests), 0 when no endpoint serves t.
func (r *Router) MaxBatch(t address.TypeName) int {
	if ep, ok := r.mod.EndpointFor(t); ok {
		return ep.MaxNumBatchRequests
	}
	return 0
}

// MaxBatchBytes is how many bytes of invocations one request to the
// endpoint of t may carry (see partition.Config.MaxBatchBytes): what
// MaxMessage leaves for one message, so that a batch of messages that each
// fit is not one request over the endpoint's payload cap.
func (r *Router) MaxBatchBytes(t address.TypeName) int {
	return int(r.MaxMessage(t.Namespace, t.Name))
}

// MaxMessage is the largest message body the endpoint of a function type
// can carry in a request: its payload_max_bytes less room for the envelope
// and state around it. Without an endpoint, or with no payload cap, it is
// the ingress's own cap.
func (r *Router) MaxMessage(namespace, name string) int64 {
	ep, ok := r.mod.EndpointFor(address.TypeName{Namespace: namespace, Name: name})
	if !ok || ep.Transport.PayloadMaxBytes <= 0 {
		return ingress.MaxBodyBytes
	}
	return max(ep.Transport.PayloadMaxBytes-RequestOverhead, 0)
}

// RequestOverhead is the room kept in a request for the parts around one
// message: target, caller, typename, framing (state can still exceed it).
const RequestOverhead = 4 << 10

// Close closes the idle pooled connections of every endpoint. Calls in
// flight are not interrupted.
func (r *Router) Close() {
	for _, e := range r.endpoints {
		e.client.Close()
	}
}
