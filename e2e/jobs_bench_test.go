package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/statefun-go/statefun/internal/sdktest"
)

// BenchmarkJobLoadLatency measures what a running bulk job costs the
// functions' own load, and how fast a job goes without one. 8 closed-loop
// clients each send a message to their own counter (sdktest/counter,
// official Go SDK) through the playground ingress and wait for its egress
// record; the time from the send to the record popped is one sample. The
// phases, 8 s each:
//
//   - idle-job: a job migrates 20,000 counters with no load: its writes a
//     second (its adaptive pace on an idle runtime);
//   - no-job: the load alone;
//   - job: the load while a job migrates 20,000 other counters at its
//     adaptive pace (no rate), started a second before;
//   - job-200: the same with "rate": 200 (a cap);
//   - no-job-after: the load alone again, to see the machine's drift.
//
// Run it with
//
//	go test -run '^$' -bench JobLoadLatency -benchtime 1x ./e2e/
//
// The figures are in docs/how-to/bulk-jobs.md and docs/benchmarks.md.
func BenchmarkJobLoadLatency(b *testing.B) {
	for range b.N {
		e := jbStart(b)
		const entries = 20000
		e.seed(entries, jbID)
		const spec = `{"select":{"type":"sdktest/counter","idPrefix":"c-"},"action":{"op":"set","expr":"value + 1"}%s}`
		// startJob starts a job and samples its pace every 250 ms until
		// the returned stop is called; stop cancels it and logs what it did.
		startJob := func(name, extra string) (stop func()) {
			j := e.create(fmt.Sprintf(spec, extra))
			began := time.Now()
			done := make(chan struct{})
			var rates []float64
			var last jbJob
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-done:
						return
					case <-time.After(250 * time.Millisecond):
					}
					r := e.api.do(http.MethodGet, "/jobs/"+j.ID, "")
					var cur jbJob
					if r.status == http.StatusOK && json.Unmarshal(r.body, &cur) == nil && cur.Pace != nil {
						rates = append(rates, cur.Pace.Rate)
						last = cur
					}
				}
			}()
			return func() {
				close(done)
				wg.Wait()
				// Its counters before the cancel: they hold the page in
				// progress, which a cancel drops.
				end := e.job(j.ID)
				e.api.do(http.MethodPost, "/jobs/"+j.ID+"/cancel", "")
				b.Logf("%s: the job wrote %d entries (%.0f/s over its life)", name, end.Counts.Changed,
					float64(end.Counts.Changed)/time.Since(began).Seconds())
				if last.Pace != nil {
					slices.Sort(rates)
					b.Logf("%s: pace sampled %d times: median %.0f/s, min %.0f/s, max %.0f/s; last: write latency (median) %.2f ms, base %.2f ms, functions' calls (median) %.2f ms, base %.2f ms, %d back-offs",
						name, len(rates), rates[len(rates)/2], rates[0], rates[len(rates)-1], last.Pace.LatencyMs, last.Pace.BaseMs,
						last.Pace.FunctionsMs, last.Pace.FunctionsBaseMs, last.Pace.Backoffs)
				}
				if name == "idle-job" {
					b.ReportMetric(float64(end.Counts.Changed)/time.Since(began).Seconds(), name+"-writes/s")
				}
			}
		}
		// phase runs the load for d, beside a job when extra is not "-",
		// and returns its latencies.
		phase := func(name, extra string, d time.Duration) []time.Duration {
			var stop func()
			if extra != "-" {
				stop = startJob(name, extra)
				time.Sleep(time.Second) // the job at its pace
			}
			lat := jbLoad(b, e, 8, d)
			if stop != nil {
				stop()
			}
			jbReport(b, name, lat, false)
			return lat
		}
		// A job alone: how fast it goes on an idle runtime (once the
		// store has settled after the seeding).
		time.Sleep(3 * time.Second)
		stop := startJob("idle-job", "")
		time.Sleep(8 * time.Second)
		stop()
		// The load without and with a job, in turns, so that the
		// machine's own drift (other work on it) falls on both alike.
		var without, with []time.Duration
		for round := range 3 {
			without = append(without, phase(fmt.Sprintf("no-job-%d", round), "-", 6*time.Second)...)
			with = append(with, phase(fmt.Sprintf("job-%d", round), "", 6*time.Second)...)
		}
		p50, p99 := jbReport(b, "no-job", without, true)
		jp50, jp99 := jbReport(b, "job", with, true)
		b.ReportMetric(jp50/p50, "p50-ratio")
		b.ReportMetric(jp99/p99, "p99-ratio")
		phase("job-200", `,"rate":200`, 6*time.Second)
	}
}

// jbReport logs the percentiles of lat, and reports them as metrics; it
// returns the p50 and the p99 in ms.
func jbReport(b *testing.B, name string, lat []time.Duration, metrics bool) (p50, p99 float64) {
	slices.Sort(lat)
	p := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.Logf("%s: %d messages, p50 %.2f ms, p99 %.2f ms, max %.2f ms", name, len(lat), p(0.5), p(0.99), p(1))
	if metrics {
		b.ReportMetric(p(0.99), name+"-p99-ms")
		b.ReportMetric(p(0.5), name+"-p50-ms")
	}
	return p(0.5), p(0.99)
}

// jbLoad runs clients closed-loop clients for d and returns each
// message's time from its send to its egress record.
func jbLoad(b *testing.B, e *jbEnv, clients int, d time.Duration) []time.Duration {
	var (
		mu      sync.Mutex
		waiting = map[string]chan struct{}{}
		lat     []time.Duration
		stop    = make(chan struct{})
		wg      sync.WaitGroup
	)
	go func() { // the collector: pops the counter's egress records
		for {
			select {
			case <-stop:
				return
			default:
			}
			rec, ok, err := e.rt.pop(sdktest.CounterTopic)
			if err != nil || !ok {
				time.Sleep(time.Millisecond)
				continue
			}
			id, _, _ := strings.Cut(rec, ":")
			mu.Lock()
			if ch, ok := waiting[id]; ok {
				delete(waiting, id)
				close(ch)
			}
			mu.Unlock()
		}
	}()
	deadline := time.Now().Add(d)
	for w := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("load-%d", w)
			for time.Now().Before(deadline) {
				ch := make(chan struct{})
				mu.Lock()
				waiting[id] = ch
				mu.Unlock()
				start := time.Now()
				if status, err := e.rt.send("/"+sdktest.CounterFn+"/"+id, saString, "tick"); err != nil || status != http.StatusOK {
					b.Errorf("ingress: %d %v", status, err)
					return
				}
				select {
				case <-ch:
				case <-time.After(30 * time.Second):
					b.Errorf("no egress record for %s within 30 s", id)
					return
				}
				mu.Lock()
				lat = append(lat, time.Since(start))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(stop)
	return lat
}
