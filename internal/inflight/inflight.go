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
// A probe is judged over a window (at least Options.Window and
// Options.MinUnits units of work), and only while the limit is what holds
// the calls back (a call waited for a slot during the window): when demand
// is below the limit there is nothing to learn, and the limit stays.
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
}

type waiter struct {
	ready    chan struct{} // closed once the slot is the waiter's
	granted  bool          // under mu
	canceled bool          // under mu
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
	l.grant() // the waiters ahead may all have left
	if w.granted {
		l.mu.Unlock()
		return l.releaser(), nil
	}
	l.waited = true
	l.mu.Unlock()
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
	l.grant()
	l.mu.Unlock()
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
	now := l.opts.Now()
	elapsed := now.Sub(l.start)
	if l.ctl.settling {
		// The window after a change is skipped anyway: it need only last
		// until the calls started under the old limit have ended.
		if elapsed < 2*l.latency {
			return
		}
	} else if elapsed < l.opts.Window || elapsed < windowLatencies*l.latency || l.units < l.opts.MinUnits {
		return
	}
	lat := 0.0
	if l.calls > 0 {
		lat = l.spent.Seconds() / float64(l.calls)
	}
	l.ctl.observe(float64(l.units)/elapsed.Seconds(), lat, l.waited)
	l.start, l.units, l.calls, l.spent, l.waited = now, 0, 0, 0, l.head < len(l.waiters)
}

// grant hands free slots to the oldest waiters. Under mu.
func (l *Limiter) grant() {
	for l.inFlight < l.ctl.limit && l.head < len(l.waiters) {
		w := l.waiters[l.head]
		l.waiters[l.head] = nil
		l.head++
		if w.canceled {
			continue
		}
		w.granted = true
		l.inFlight++
		close(w.ready)
	}
	if l.head == len(l.waiters) {
		l.waiters, l.head = l.waiters[:0], 0
	} else if l.head >= 256 && 2*l.head >= len(l.waiters) {
		n := copy(l.waiters, l.waiters[l.head:])
		clear(l.waiters[n:])
		l.waiters, l.head = l.waiters[:n], 0
	}
}

// windowLatencies is how many calls' time in flight a window spans at least.
const windowLatencies = 4

// Limit is the current limit.
func (l *Limiter) Limit() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ctl.limit
}
