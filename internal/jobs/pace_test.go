package jobs

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// drive runs workers writers through p for d, as a job's workers do: wait
// for the pace, then a write that takes latency(elapsed). It returns the
// writes made. Inside a synctest bubble the clock is the bubble's, so the
// outcome does not depend on the machine.
func drive(t *testing.T, p *pacer, workers int, d time.Duration, latency func(elapsed time.Duration) time.Duration) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	start := time.Now()
	var mu sync.Mutex
	writes := 0
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p.wait(ctx) == nil {
				l := latency(time.Since(start))
				time.Sleep(l)
				p.done(l)
				mu.Lock()
				writes++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return writes
}

func steady(l time.Duration) func(time.Duration) time.Duration {
	return func(time.Duration) time.Duration { return l }
}

// TestPaceIdleReachesLimit: on an idle runtime (every write 1 ms) a job
// capped at 400 writes a second reaches the cap within a second, from its
// start pace, and keeps it: over 10 s it writes close to 4,000.
func TestPaceIdleReachesLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(400, nil)
		n := drive(t, p, DefaultWorkers, time.Second, steady(time.Millisecond))
		if v := p.view(); v.Rate != 400 || v.Limit != 400 || v.Backoffs != 0 {
			t.Fatalf("after 1 s idle: pace %+v, want rate 400 (the limit), no back-off", v)
		}
		n += drive(t, p, DefaultWorkers, 9*time.Second, steady(time.Millisecond))
		if n < 3500 || n > 4000 {
			t.Fatalf("%d writes in 10 s at a cap of 400/s, want 3,500 to 4,000", n)
		}
		if v := p.view(); v.LatencyMs != 1 || v.BaseMs != 1 {
			t.Fatalf("pace %+v: want latency and base 1 ms", v)
		}
	})
}

// TestPaceUncappedFindsTheKnee: with no cap the pace grows until the job's
// own writes queue: a write takes 1 ms plus 1 ms for every 200 writes a
// second beyond 1,000 (the runtime saturating). The pace settles where the
// latency stays under twice the base, not at MaxRate.
func TestPaceUncappedFindsTheKnee(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(0, nil)
		lat := func(time.Duration) time.Duration {
			p.mu.Lock()
			r := p.rate
			p.mu.Unlock()
			return time.Millisecond + time.Duration(max(r-1000, 0)/200*float64(time.Millisecond))
		}
		drive(t, p, 16, 20*time.Second, lat)
		v := p.view()
		if v.Rate < 500 || v.Rate > 1600 || v.Backoffs == 0 {
			t.Fatalf("pace %+v: want it between 500 and 1,600 writes/s, backed off from the knee", v)
		}
	})
}

// TestPaceBacksOffUnderLoad: when the functions' load makes the job's
// writes queue (1 ms idle, 20 ms loaded), the pace halves each window to
// the floor, and grows back once the load is gone.
func TestPaceBacksOffUnderLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(1000, nil)
		drive(t, p, DefaultWorkers, 2*time.Second, steady(time.Millisecond))
		if v := p.view(); v.Rate != 1000 {
			t.Fatalf("idle: pace %+v, want 1000 (the cap)", v)
		}
		n := drive(t, p, DefaultWorkers, 5*time.Second, steady(20*time.Millisecond))
		v := p.view()
		if v.Rate > 2*minPace || v.Backoffs < 5 {
			t.Fatalf("loaded: pace %+v, want at most %v writes/s after 5 back-offs or more", v, 2*minPace)
		}
		// Loaded, the job wrote what the first windows allowed, then little.
		if n > 600 {
			t.Fatalf("loaded: %d writes in 5 s, want at most 600", n)
		}
		if v.BaseMs != 1 || v.LatencyMs != 20 {
			t.Fatalf("loaded: pace %+v, want base 1 ms, latency 20 ms", v)
		}
		// The load gone, the pace grows by steps: slower than at the
		// start, but back at the cap within 20 s.
		drive(t, p, DefaultWorkers, 3*time.Second, steady(time.Millisecond))
		mid := p.view().Rate
		if mid <= 2*minPace || mid >= 1000 {
			t.Fatalf("3 s after the load: pace %v, want it growing (not yet at the cap)", mid)
		}
		drive(t, p, DefaultWorkers, 20*time.Second, steady(time.Millisecond))
		if v := p.view(); v.Rate != 1000 {
			t.Fatalf("20 s after the load: pace %+v, want back at the cap", v)
		}
	})
}

// TestPaceBusyHalves: a write refused by a full partition halves the pace
// at once; the floor holds.
func TestPaceBusyHalves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(0, nil)
		p.busy()
		if v := p.view(); v.Rate != startPace/2 || v.Backoffs != 1 {
			t.Fatalf("pace %+v, want %v after one refusal", v, startPace/2)
		}
		p.backoffMetric = newMetrics(nil, nil).backoffs
		for range 10 {
			p.busy()
		}
		if v := p.view(); v.Rate != minPace {
			t.Fatalf("pace %+v, want the floor %v", v, minPace)
		}
		if n := testutil.ToFloat64(p.backoffMetric); n != 10 {
			t.Fatalf("statefun_job_pace_backoffs_total %v, want 10", n)
		}
	})
}

// TestPaceNotHeldDoesNotGrow: when the writes' latency, not the pace,
// bounds the job (one worker, 100 ms a write: 10 writes a second against a
// pace of 50), the pace does not grow without bound.
func TestPaceNotHeldDoesNotGrow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(0, nil)
		drive(t, p, 1, 10*time.Second, steady(100*time.Millisecond))
		if v := p.view(); v.Rate != startPace {
			t.Fatalf("pace %+v, want the start pace %v", v, startPace)
		}
	})
}

// TestPaceSpacesWrites: at a pace of r the writes are 1/r apart, whatever
// the number of workers.
func TestPaceSpacesWrites(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(20, nil) // the start pace capped at 20/s
		start := time.Now()
		for range 21 {
			if err := p.wait(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		if d := time.Since(start); d != time.Second {
			t.Fatalf("21 writes at 20/s took %v, want 1 s", d)
		}
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if err := p.wait(ctx); err == nil {
			t.Fatal("wait with an ended context: no error")
		}
	})
}
