package jobs

import (
	"context"
	"slices"
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
		p := newPacer(400, nil, nil)
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
		p := newPacer(0, nil, nil)
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
		p := newPacer(1000, nil, nil)
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
		p := newPacer(0, nil, nil)
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
		p := newPacer(0, nil, nil)
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
		p := newPacer(20, nil, nil) // the start pace capped at 20/s
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

// functions is the functions' side of a test: their calls' round trips,
// read as Engine.CallLatencies gives them.
type functions struct {
	mu  sync.Mutex
	rtt []time.Duration
}

func (f *functions) calls(cursor uint64, buf []time.Duration) ([]time.Duration, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	end := uint64(len(f.rtt))
	if cursor > end {
		return buf, end
	}
	return append(buf, f.rtt[cursor:]...), end
}

// load makes a call every interval for d, each taking rtt() (the
// functions' load beside the job), in the background; wait for it with
// the returned func.
func (f *functions) load(d, interval time.Duration, rtt func() time.Duration) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for end := time.Now().Add(d); time.Now().Before(end); {
			time.Sleep(interval)
			r := rtt()
			f.mu.Lock()
			f.rtt = append(f.rtt, r)
			f.mu.Unlock()
		}
	}()
	return func() { <-done }
}

// contended is the round trip of the functions' calls beside a job at
// p's pace: 1 ms, and 1 ms more for every 100 writes a second beyond 100
// (the job takes the functions' CPU). The job's own writes take 1 ms
// whatever its pace: they do not feel what they cost the functions.
func contended(p *pacer) func() time.Duration {
	return func() time.Duration {
		p.mu.Lock()
		r := p.rate
		p.mu.Unlock()
		return time.Millisecond + time.Duration(max(r-100, 0)/100*float64(time.Millisecond))
	}
}

// TestPaceYieldsToFunctions: the functions' calls (500 a second) slow
// down as the job speeds up, while the job's own writes do not. Without
// the functions' signal the pace goes to its cap; with it the job yields:
// it drops to the floor as the functions begin (their latency with the
// job at full speed is no base), then settles where their calls stay
// within their limit above their base, and once they stop calling it is
// back at its cap.
func TestPaceYieldsToFunctions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		deaf := newPacer(1000, nil, nil)
		f := &functions{}
		wait := f.load(10*time.Second, 2*time.Millisecond, contended(deaf))
		drive(t, deaf, DefaultWorkers, 10*time.Second, steady(time.Millisecond))
		wait()
		if v := deaf.view(); v.Rate != 1000 {
			t.Fatalf("without the functions' signal: pace %+v, want the cap 1000", v)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		f := &functions{}
		p := newPacer(1000, nil, f.calls)
		drive(t, p, DefaultWorkers, 2*time.Second, steady(time.Millisecond))
		if v := p.view(); v.Rate != 1000 || v.FunctionsMs != 0 {
			t.Fatalf("no calls: pace %+v, want the cap 1000 and no functions' latency", v)
		}
		// The functions begin: as soon as their calls are enough to
		// judge (8 calls, 16 ms), not at the window's end, the job is at
		// the floor; it stays there for the window that gives their base.
		wait := f.load(20*time.Second, 2*time.Millisecond, contended(p))
		drive(t, p, DefaultWorkers, 20*time.Millisecond, steady(time.Millisecond))
		if v := p.view(); v.Rate != minPace || v.Backoffs != 1 {
			t.Fatalf("20 ms after the functions began: pace %+v, want the floor %v after one back-off", v, minPace)
		}
		drive(t, p, DefaultWorkers, 480*time.Millisecond, steady(time.Millisecond))
		if v := p.view(); v.Rate > 2*minPace || v.FunctionsBaseMs != 1 {
			t.Fatalf("0.5 s after the functions began: pace %+v, want at most %v, their base 1 ms", v, 2*minPace)
		}
		var rates []float64
		for range 39 {
			drive(t, p, DefaultWorkers, 500*time.Millisecond, steady(time.Millisecond))
			rates = append(rates, p.view().Rate)
		}
		wait()
		slices.Sort(rates)
		v := p.view()
		// 1 ms is their base, 1.5 ms their limit (fnTargetRatio 0.5):
		// about 150 writes a second.
		if med := rates[len(rates)/2]; med < 60 || med > 260 {
			t.Fatalf("beside the functions: median pace %v (sampled %v), want 60 to 260 writes/s", med, rates)
		}
		if v.FunctionsBaseMs != 1 || v.Backoffs < 3 || v.BaseMs != 1 {
			t.Fatalf("beside the functions: pace %+v, want their base 1 ms, the writes' 1 ms, back-offs", v)
		}
		// They stop: the job goes back to its cap.
		drive(t, p, DefaultWorkers, 20*time.Second, steady(time.Millisecond))
		if v := p.view(); v.Rate != 1000 || v.FunctionsMs != 0 {
			t.Fatalf("20 s after the functions stopped: pace %+v, want the cap 1000, no functions' latency", v)
		}
	})
}

// TestPaceTrickleOfCallsDoesNotHold: a call now and then (fewer than
// fnMinCalls a window) tells nothing of the functions' load: the job goes
// to its cap as on an idle runtime, however slow the calls.
func TestPaceTrickleOfCallsDoesNotHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &functions{}
		p := newPacer(1000, nil, f.calls)
		wait := f.load(5*time.Second, 50*time.Millisecond, func() time.Duration { return 200 * time.Millisecond })
		drive(t, p, DefaultWorkers, 5*time.Second, steady(time.Millisecond))
		wait()
		if v := p.view(); v.Rate != 1000 || v.Backoffs != 0 || v.FunctionsMs != 0 {
			t.Fatalf("pace %+v, want the cap 1000, no back-off", v)
		}
	})
}

// TestPaceProbesFunctionsBase: while the functions' calls stay at their
// base the job keeps its cap, except for one window every fnProbeEvery at
// the floor (no back-off), where it sees their base anew.
func TestPaceProbesFunctionsBase(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &functions{}
		p := newPacer(400, nil, f.calls)
		wait := f.load(70*time.Second, 2*time.Millisecond, func() time.Duration { return time.Millisecond })
		// When, after the functions' start, the pace is at the floor.
		var floors []time.Duration
		for i := range 700 {
			drive(t, p, DefaultWorkers, 100*time.Millisecond, steady(time.Millisecond))
			if at := time.Duration(i+1) * 100 * time.Millisecond; at > 2*time.Second && p.view().Rate == minPace {
				floors = append(floors, at)
			}
		}
		wait()
		v := p.view()
		if v.Rate != 400 || v.Backoffs != 1 || v.FunctionsBaseMs != 1 || v.FunctionsMs != 1 {
			t.Fatalf("pace %+v: want the cap 400, one back-off (the functions' start), their base 1 ms", v)
		}
		// A probe window about 30 s after the start's, and 30 s later.
		near := func(at time.Duration) bool {
			return slices.ContainsFunc(floors, func(f time.Duration) bool { return f >= at && f < at+time.Second })
		}
		if !near(30*time.Second) || !near(60*time.Second) || len(floors) > 6 {
			t.Fatalf("at the floor at %v, want a probe window after 30 s and after 60 s, nothing else", floors)
		}
	})
}
