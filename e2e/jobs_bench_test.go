package e2e

import (
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
// functions' own load: 8 closed-loop clients each send a message to their
// own counter (sdktest/counter, official Go SDK) through the playground
// ingress and wait for its egress record; the time from the send to the
// record popped is one sample. It is taken for 8 s with no job, for 8 s
// while a job migrates 20,000 other counters at 200 and at 1,000 writes a
// second, and for 8 s with no job again. Run it with
//
//	go test -run '^$' -bench JobLoadLatency -benchtime 1x ./e2e/
//
// The figures are in docs/how-to/bulk-jobs.md.
func BenchmarkJobLoadLatency(b *testing.B) {
	for range b.N {
		e := jbStart(b)
		const entries = 20000
		e.seed(entries, jbID)
		phase := func(name string, rate int) {
			var id string
			began := time.Now()
			if rate > 0 {
				j := e.create(fmt.Sprintf(`{"select":{"type":"sdktest/counter","idPrefix":"c-"},"action":{"op":"set","expr":"value + 1"},"rate":%d}`, rate))
				id = j.ID
				time.Sleep(time.Second) // the job at its pace
			}
			lat := jbLoad(b, e, 8, 8*time.Second)
			if id != "" {
				e.api.expect(http.StatusOK, http.MethodPost, "/jobs/"+id+"/cancel", "")
				j := e.job(id)
				b.Logf("%s: the job wrote %d entries (%.0f/s over its life)", name, j.Counts.Changed,
					float64(j.Counts.Changed)/time.Since(began).Seconds())
			}
			slices.Sort(lat)
			p := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) / 1000 }
			b.Logf("%s: %d messages, p50 %.2f ms, p99 %.2f ms, max %.2f ms", name, len(lat), p(0.5), p(0.99), p(1))
			b.ReportMetric(p(0.99), name+"-p99-ms")
			b.ReportMetric(p(0.5), name+"-p50-ms")
		}
		// Baselines before and after, to see the machine's own drift.
		phase("no-job", 0)
		phase("job-200", 200)
		phase("job-1000", 1000)
		phase("no-job-after", 0)
	}
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
