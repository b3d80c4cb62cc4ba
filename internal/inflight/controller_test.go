package inflight

import (
	"math"
	"math/rand/v2"
	"testing"
)

// model is a service: the units/s it completes with limit calls in flight,
// and whether calls wait for a slot at that limit. A call's time in flight
// follows from Little's law.
type model func(limit int) (rate float64, waited bool)

// run feeds c windows of m with ±noise relative noise and returns the
// limits it set, window by window.
func run(c *controller, m model, windows int, noise float64, seed uint64) []int {
	r := rand.New(rand.NewPCG(seed, 1))
	out := make([]int, 0, windows)
	for range windows {
		rate, waited := m(c.limit)
		lat := float64(c.limit) / rate // Little's law, before the noise
		rate *= 1 + noise*(2*r.Float64()-1)
		c.observe(rate, lat, waited)
		out = append(out, c.limit)
	}
	return out
}

func tail(ls []int, n int) (lo, hi int) {
	lo, hi = math.MaxInt, 0
	for _, l := range ls[len(ls)-n:] {
		lo, hi = min(lo, l), max(hi, l)
	}
	return lo, hi
}

// A function whose calls take 50 ms whatever the concurrency (it waits on
// something else): throughput grows with the limit until demand, 8,000
// calls/s, is met, which needs 400 calls in flight. The limit must climb
// there from its floor, 4, not stay small.
func TestClimbsForALatencyBoundFunction(t *testing.T) {
	const demand, latency = 8000.0, 0.050
	m := func(limit int) (float64, bool) {
		capacity := float64(limit) / latency
		return min(capacity, demand), capacity < demand
	}
	c := &controller{min: 4, max: 1024, limit: 4, base: 4}
	ls := run(c, m, 200, 0.02, 1)
	if lo, _ := tail(ls, 100); lo < 400 {
		t.Fatalf("limit fell to %d in the last 100 windows; 400 calls in flight are needed (limits: %v)", lo, ls)
	}
	for i, l := range ls {
		if l >= 400 {
			t.Logf("demand met after %d windows", i+1)
			break
		}
	}
}

// Jitter of its own does not shrink a latency-bound function's limit: the
// limit is judged by throughput, which jitter does not change on average.
func TestJitterDoesNotShrinkTheLimit(t *testing.T) {
	const demand = 4000.0
	r := rand.New(rand.NewPCG(7, 7))
	m := func(limit int) (float64, bool) {
		latency := 0.005 + 0.030*r.Float64() // 5–35 ms, mean 20
		capacity := float64(limit) / latency
		return min(capacity, demand), capacity < demand
	}
	c := &controller{min: 4, max: 1024, limit: 8, base: 8}
	ls := run(c, m, 300, 0.02, 2)
	if lo, _ := tail(ls, 100); lo < 80 {
		t.Fatalf("limit fell to %d; a 20 ms function needs 80 calls in flight for 4,000/s (limits: %v)", lo, ls)
	}
}

// A function that is the bottleneck (two cores' worth of work: 6,000
// calls/s at most, reached with 4 calls in flight, and a little worse with
// many, as a loaded server is) keeps the limit near the knee instead of
// growing it to the cap.
func TestStaysNearTheKneeOfACPUBoundFunction(t *testing.T) {
	m := func(limit int) (float64, bool) {
		rate := 6000 * min(1, float64(limit)/4)
		if limit > 16 {
			rate *= 0.9
		}
		return rate, true // the function is the bottleneck: calls always wait
	}
	for seed := range uint64(20) {
		c := &controller{min: 1, max: 1024, limit: 8, base: 8}
		ls := run(c, m, 400, 0.03, seed)
		if lo, hi := tail(ls, 200); lo < 3 || hi > 12 {
			t.Fatalf("seed %d: limit ranged %d..%d in the last 200 windows; the knee is at 4 (limits: %v)", seed, lo, hi, ls)
		}
	}
}

// Windows without waiting say nothing: the limit stays where it is.
func TestIdleWindowsChangeNothing(t *testing.T) {
	c := &controller{min: 1, max: 100, limit: 20, base: 20}
	for range 50 {
		c.observe(100, 0, false)
	}
	if c.limit != 20 {
		t.Fatalf("limit %d after windows in which no call waited, want 20", c.limit)
	}
}

// The limit never leaves [min, max].
func TestBounds(t *testing.T) {
	up := func(limit int) (float64, bool) { return float64(limit) * 100, true }
	c := &controller{min: 2, max: 30, limit: 8, base: 8}
	for _, l := range run(c, up, 100, 0, 3) {
		if l < 2 || l > 30 {
			t.Fatalf("limit %d outside [2, 30]", l)
		}
	}
	if c.limit != 30 {
		t.Fatalf("limit %d with throughput growing with it; want the cap 30", c.limit)
	}
	down := func(limit int) (float64, bool) { return 1000, true }
	c = &controller{min: 2, max: 30, limit: 8, base: 8}
	for _, l := range run(c, down, 100, 0, 4) {
		if l < 2 || l > 30 {
			t.Fatalf("limit %d outside [2, 30]", l)
		}
	}
	if c.base != 2 {
		t.Fatalf("base %d with throughput flat at every limit; want the floor 2", c.base)
	}
}

// Where more calls give no more throughput, noise in the measured
// throughput (±20% a window, more than the probes' thresholds) does not
// walk the limit up: the extra calls' time in flight shows that they only
// queue.
func TestNoiseDoesNotClimbAFlatThroughput(t *testing.T) {
	m := func(limit int) (float64, bool) { return 8000 * min(1, float64(limit)/4), true }
	for seed := range uint64(20) {
		c := &controller{min: 4, max: 1024, limit: 8, base: 8}
		ls := run(c, m, 400, 0.20, seed)
		if _, hi := tail(ls, 300); hi > 16 {
			t.Fatalf("seed %d: limit reached %d on a throughput flat from 4 (limits: %v)", seed, hi, ls)
		}
	}
}
