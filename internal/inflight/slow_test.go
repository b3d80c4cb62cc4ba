package inflight

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// makespan runs calls calls of a function that takes latency per call and
// is not busy (it waits, as on a database), all of them wanting a slot at
// once, through a limiter of opts, on synctest's clock; it returns how long
// the last call took to end.
func makespan(t *testing.T, opts Options, calls int, latency time.Duration) (took time.Duration) {
	synctest.Test(t, func(t *testing.T) {
		l, err := New(opts)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		var wg sync.WaitGroup
		for range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				done, err := l.Acquire(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				time.Sleep(latency)
				done(1)
			}()
		}
		wg.Wait()
		took = time.Since(start)
		// Let the limiter's timer find nobody waiting and stop.
		time.Sleep(2 * opts.withDefaults().Window)
	})
	return took
}

// withDefaults is opts as New fills it in.
func (o Options) withDefaults() Options {
	if o.Window <= 0 {
		o.Window = 500 * time.Millisecond
	}
	return o
}

// A slow function that is not busy needs many calls in flight. Two hundred
// messages to a function that takes 30 s (or 1 s) per call, with a
// bulkhead of 256 and the adaptive limit starting at 4: the limit must
// climb within a few windows, not after a window of 64 answers each (eight
// minutes at 4 calls of 30 s), so the adaptive limiter finishes within a
// small factor of the fixed pool's time. A fast function is judged as
// before; its figures are logged for docs/reference/limits.md.
func TestSlowFunctionsAreNotStarved(t *testing.T) {
	for _, c := range []struct {
		latency time.Duration
		calls   int
		factor  float64 // the most the adaptive limit may take, times the fixed pool's
	}{
		{30 * time.Second, 200, 1.25},
		// A burst of one-second calls: the limit doubles every window
		// (500 ms) from 4, so the last calls start a few windows late.
		{time.Second, 200, 4.5},
		{time.Second, 2000, 1.6},
		// A burst shorter than a window: the limit has no time to move.
		{10 * time.Millisecond, 200, 0},
		{10 * time.Millisecond, 20000, 5},
	} {
		t.Run(fmt.Sprintf("latency=%v/calls=%d", c.latency, c.calls), func(t *testing.T) {
			fixed := makespan(t, Options{Max: 256, Min: 4, Fixed: true}, c.calls, c.latency)
			adaptive := makespan(t, Options{Max: 256, Min: 4}, c.calls, c.latency)
			ratio := float64(adaptive) / float64(fixed)
			t.Logf("%d calls of %v: fixed pool %v, adaptive %v (%.2f×)", c.calls, c.latency, fixed, adaptive, ratio)
			if c.factor > 0 && ratio > c.factor {
				t.Errorf("the adaptive limit took %.2f× the fixed pool's time (%v against %v); want at most %.2f×", ratio, adaptive, fixed, c.factor)
			}
		})
	}
}
