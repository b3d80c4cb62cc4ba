// Package inflight bounds the calls in flight to a remote service with a
// limit that adapts: it looks for the fewest calls in flight that give the
// most throughput.
//
// Why: a runtime that sends every call it can (up to a connection pool of
// a thousand) to a function that is the bottleneck gains nothing: the
// function answers no faster, its queue grows, and every call in flight
// costs the runtime goroutines, wake-ups and memory. On the two-core
// machine of docs/benchmarks.md ("Fewer runnable goroutines") that excess took the
// function load from 8,000 to 6,000 messages/s and kept hundreds of
// goroutines runnable, ahead of every state API request. A fixed small
// cap would starve a slow function that needs many calls in flight (one
// that waits 50 ms on a database needs 400 for 8,000 calls/s), and a limit
// driven by latency (TCP Vegas' "latency above the minimum is queueing")
// misreads a function whose latency varies by itself. So the limit here is
// driven by what it is for, throughput: it probes a higher limit, and keeps
// it only when the work done per second rose with it; it probes a lower
// one, and keeps it when the work done per second did not fall.
//
// A probe is judged over a window (at least Options.Window, and at least
// Options.MinUnits units of work or a few calls' time in flight, whichever
// comes first), and only while the limit is what holds the calls back (a
// call waited for a slot during the window): when demand is below the
// limit there is nothing to learn, and the limit stays.
//
// A slow function gives no evidence for a long time: at a limit of 4 and
// 30 s a call, a window of 64 units would last eight minutes, and the climb
// to the tens of calls such a function needs would take hours. So the
// waiting calls are looked at in time too, once per Options.Window while
// any wait: when they would take more than a window to drain at the limit
// (no call ended during the whole window, or the waiting calls times the
// calls' time in flight, over the limit, exceed a window), the limit
// doubles (up to Max) without waiting for throughput to prove it — a call
// that takes longer than a window cannot be judged by one. The doubling
// stops as soon as the calls that end got slower with it (the function
// queues them: more calls would only wait inside it), until nobody waits.
// The windows then judge the limit as usual, and probes down take back
// what the doubling gave and throughput did not need.
package inflight

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Options configure a Limiter. Max is required; the zero value of every
// other field is usable.
type Options struct {
	// Max is the hard cap on calls in flight, never exceeded.
	Max int
	// Min is the floor the limit never goes under; default 1.
	Min int
	// Initial is the limit to start from; default Min: the limit climbs only
	// as far as throughput shows it must.
	Initial int
	// Window is the shortest time a probe is judged over; default 500 ms.
	Window time.Duration
	// MinUnits is the least work a window must count to be judged; default
	// 64 units.
	MinUnits int
	// Fixed turns adaptation off: the limit stays at Max.
	Fixed bool
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Limiter is a concurrency limit. It is safe for concurrent use.
type Limiter struct {
	opts Options

	mu       sync.Mutex
	inFlight int
	waiters  []*waiter // oldest first; taken ones are nil
	head     int
	ctl      controller

	latency time.Duration // moving average of a call's time in flight

	// the current window
	start  time.Time
	units  int
	calls  int           // calls ended in the window
	spent  time.Duration // their time in flight
	waited bool          // a call waited for a slot during the window

	// ticking is set while a timer will look at the waiting calls
	// (starved).
	ticking bool
	// starveLat is the mean time in flight of the calls that ended in the
	// window before the last doubling by starved (0: none yet); noStarve
	// is set once a doubling made calls slower (the function queues
	// them), until nobody waits.
	starveLat time.Duration
	noStarve  bool
	// climbing is set while starved's last look doubled the limit: the
	// windows judge nothing meanwhile (starved owns the limit).
	climbing bool
}

type waiter struct {
	ready    chan struct{}              // closed once the slot is the waiter's (Acquire)
	start    func(done func(units int)) // run with the slot (Go)
	granted  bool                       // under mu
	canceled bool                       // under mu
}

// New returns a Limiter.
func New(opts Options) (*Limiter, error) {
	if opts.Max <= 0 {
		return nil, fmt.Errorf("inflight: Max %d must be positive", opts.Max)
	}
	if opts.Min <= 0 {
		opts.Min = 1
	}
	opts.Min = min(opts.Min, opts.Max)
	if opts.Initial <= 0 {
		opts.Initial = opts.Min
	}
	opts.Initial = min(max(opts.Initial, opts.Min), opts.Max)
	if opts.Fixed {
		opts.Initial = opts.Max
	}
	if opts.Window <= 0 {
		opts.Window = 500 * time.Millisecond
	}
	if opts.MinUnits <= 0 {
		opts.MinUnits = 64
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	l := &Limiter{opts: opts, start: opts.Now()}
	l.ctl = controller{min: opts.Min, max: opts.Max, limit: opts.Initial, base: opts.Initial}
	return l, nil
}

// TryAcquire takes a slot if one is free and nobody waits for one, without
// waiting; done is as Acquire's.
func (l *Limiter) TryAcquire() (done func(units int), ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inFlight < l.ctl.limit && l.head == len(l.waiters) {
		l.inFlight++
		return l.releaser(), true
	}
	return nil, false
}

// Acquire waits for a slot, in arrival order, and returns the function
// that gives it back; done is told how much work the call did (the
// invocations it carried; 0 for a call that failed), which is what the
// limit maximizes per second. It returns ctx's error, and holds no slot,
// if ctx ends first.
func (l *Limiter) Acquire(ctx context.Context) (done func(units int), err error) {
	if done, ok := l.TryAcquire(); ok {
		return done, nil
	}
	l.mu.Lock()
	w := &waiter{ready: make(chan struct{})}
	l.waiters = append(l.waiters, w)
	run := l.grant() // the waiters ahead may all have left
	if w.granted {
		l.mu.Unlock()
		l.startAll(run)
		return l.releaser(), nil
	}
	l.waited = true
	l.tickLocked()
	l.mu.Unlock()
	l.startAll(run)
	select {
	case <-w.ready:
		return l.releaser(), nil
	case <-ctx.Done():
		l.mu.Lock()
		granted := w.granted
		w.canceled = true
		l.mu.Unlock()
		if granted {
			l.release(0, 0)
		}
		return nil, context.Cause(ctx)
	}
}

// Go runs start with a slot, as Acquire would give it, without a goroutine
// waiting for one: at once, on the caller's goroutine, when a slot is free
// and nobody waits (Go then returns false), or later, in arrival order, on
// the goroutine whose call frees one (Go returns true: it queued). A
// waiting call is only start, held as data: a backlog of calls waiting for
// a slow function costs no goroutines. start must not block (it hands the
// call to a goroutine of its own) and must see done called once.
func (l *Limiter) Go(start func(done func(units int))) (queued bool) {
	if done, ok := l.TryAcquire(); ok {
		start(done)
		return false
	}
	l.mu.Lock()
	l.waiters = append(l.waiters, &waiter{start: start})
	l.waited = true
	l.tickLocked()
	run := l.grant()
	l.mu.Unlock()
	l.startAll(run)
	return true
}

// startAll runs the starts of waiters grant handed slots to, outside mu.
func (l *Limiter) startAll(run []func(done func(units int))) {
	for _, start := range run {
		start(l.releaser())
	}
}

// releaser returns the done function of a call that starts now.
func (l *Limiter) releaser() func(units int) {
	start := l.opts.Now()
	return func(units int) { l.release(units, l.opts.Now().Sub(start)) }
}

// release gives a slot back and counts the call's work and time.
func (l *Limiter) release(units int, took time.Duration) {
	l.mu.Lock()
	l.inFlight--
	l.units += units
	if took > 0 {
		l.latency += (took - l.latency) / 8
		l.calls++
		l.spent += took
	}
	if !l.opts.Fixed {
		l.judge()
	}
	run := l.grant()
	l.mu.Unlock()
	l.startAll(run)
}

// judge ends the window once it is long enough, and lets the controller
// set the limit from it. Under mu.
//
// A window lasts at least Options.Window, counts at least
// Options.MinUnits, and spans windowLatencies calls' time in flight: calls
// end in waves a latency apart, and a window of one or two waves measures
// where the waves fall, not the rate. The settling window after a change
// lasts two calls' time in flight.
func (l *Limiter) judge() {
	if l.climbing {
		return
	}
	now := l.opts.Now()
	elapsed := now.Sub(l.start)
	if l.ctl.settling {
		// The window after a change is skipped anyway: it need only last
		// until the calls started under the old limit have ended.
		if elapsed < 2*l.latency {
			return
		}
	} else if elapsed < l.opts.Window || elapsed < windowLatencies*l.latency ||
		l.units < l.opts.MinUnits && (l.latency == 0 || l.calls < 2*l.ctl.limit) {
		// Too short, or too little evidence: MinUnits units, or, for a
		// function too slow to give them soon, two waves of calls at the
		// limit over a few calls' time in flight.
		return
	}
	lat := 0.0
	if l.calls > 0 {
		lat = l.spent.Seconds() / float64(l.calls)
	}
	l.ctl.observe(float64(l.units)/elapsed.Seconds(), lat, l.waited)
	l.start, l.units, l.calls, l.spent, l.waited = now, 0, 0, 0, l.head < len(l.waiters)
}

// tickLocked arranges for starved to run a window from now, unless it will
// already: a call waits, and a slow function may end none for longer than
// a window. Under mu.
func (l *Limiter) tickLocked() {
	if l.opts.Fixed || l.ticking {
		return
	}
	l.ticking = true
	time.AfterFunc(l.opts.Window, l.starved)
}

// starved doubles the limit when the calls waiting would take more than a
// window to drain at it (see the package comment) — no call ended during a
// whole window, or the waiting calls times their time in flight over the
// limit exceed a window — as long as the calls that end do not get slower
// for it: a function that queues the extra calls gains nothing from them.
// It looks again a window later while calls still wait.
func (l *Limiter) starved() {
	var run []func(done func(units int))
	defer func() { l.startAll(run) }()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ticking = false
	waiting := len(l.waiters) - l.head
	if waiting == 0 {
		// Nobody waits: nothing to learn, no reason to look again; the
		// next wave of demand may double again.
		l.starveLat, l.noStarve, l.climbing = 0, false, false
		return
	}
	now := l.opts.Now()
	l.climbing = false
	if now.Sub(l.start) >= l.opts.Window && l.ctl.limit < l.ctl.max && !l.noStarve {
		double := l.calls == 0
		if l.calls > 0 {
			lat := l.spent / time.Duration(l.calls)
			switch {
			case l.starveLat > 0 && lat > l.starveLat*3/2:
				l.noStarve = true // the function queues what it is given
			case time.Duration(waiting)*lat/time.Duration(l.ctl.limit) > l.opts.Window:
				double = true
				l.starveLat = lat
			}
		}
		if double {
			l.climbing = true
			l.ctl.starved()
			l.start, l.units, l.calls, l.spent, l.waited = now, 0, 0, 0, true
			run = l.grant()
		}
	}
	l.tickLocked()
}

// grant hands free slots to the oldest waiters, and returns the starts of
// the ones that called Go, to be run once mu is released. Under mu.
func (l *Limiter) grant() (run []func(done func(units int))) {
	for l.inFlight < l.ctl.limit && l.head < len(l.waiters) {
		w := l.waiters[l.head]
		l.waiters[l.head] = nil
		l.head++
		if w.canceled {
			continue
		}
		w.granted = true
		l.inFlight++
		if w.start != nil {
			run = append(run, w.start)
			continue
		}
		close(w.ready)
	}
	if l.head == len(l.waiters) {
		l.waiters, l.head = l.waiters[:0], 0
	} else if l.head >= 256 && 2*l.head >= len(l.waiters) {
		n := copy(l.waiters, l.waiters[l.head:])
		clear(l.waiters[n:])
		l.waiters, l.head = l.waiters[:n], 0
	}
	return run
}

// windowLatencies is how many calls' time in flight a window spans at least.
const windowLatencies = 4

// Limit is the current limit.
func (l *Limiter) Limit() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ctl.limit
}
