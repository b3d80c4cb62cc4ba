package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// busyBackoff is how long a client waits after a 503 before it retries the
// same message. The ingress says Retry-After: 1 (second); a benchmark that
// waited that long would measure the wait.
const busyBackoff = 5 * time.Millisecond

// newLoadClient returns the HTTP client of the load generator: keep-alive,
// one idle connection kept per concurrent client (the default of 2 would
// make most requests dial), no compression, no proxy.
func newLoadClient(conns int) *http.Client {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	return &http.Client{Transport: tr, Timeout: time.Minute}
}

// loadResult is what one drive measured.
type loadResult struct {
	ok      int           // requests answered 200
	busy    int           // 503 answers, each retried
	elapsed time.Duration // from the first request to the last answer
	lat     []time.Duration
}

// quantile returns the q-quantile of the latencies (nearest rank).
func (r loadResult) quantile(q float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	i := int(q*float64(len(r.lat))+0.5) - 1
	return r.lat[min(max(i, 0), len(r.lat)-1)]
}

// loadSummary is a loadResult without the latencies, which a load
// generator process sends back as JSON.
type loadSummary struct {
	OK, Busy            int
	Elapsed             time.Duration
	P50, P90, P99, PMax time.Duration
}

func (r loadResult) summary() loadSummary {
	return loadSummary{OK: r.ok, Busy: r.busy, Elapsed: r.elapsed,
		P50: r.quantile(0.5), P90: r.quantile(0.9), P99: r.quantile(0.99), PMax: r.quantile(1)}
}

func (s loadSummary) rate() float64 { return float64(s.OK) / s.Elapsed.Seconds() }

// drive runs op for i = 0..n-1 from c goroutines and stops early once
// maxTime has passed. An op that reports busy (the ingress answered 503) is
// retried after busyBackoff, and its latency runs from the first attempt.
// An op error stops the run and is returned.
//
// The goroutines carry the pprof label role=loadgen (and so do the HTTP
// transport's connection goroutines they start), so a CPU profile of the
// process can leave the load generator out.
func drive(ctx context.Context, n, c int, maxTime time.Duration, op func(ctx context.Context, i int) (busy bool, err error)) (loadResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next     atomic.Int64
		busy     atomic.Int64
		errOnce  sync.Once
		firstErr error
		wg       sync.WaitGroup
		lats     = make([][]time.Duration, c)
	)
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err; cancel() })
	}
	start := time.Now()
	deadline := start.Add(maxTime)
	for w := range c {
		wg.Add(1)
		go pprof.Do(ctx, pprof.Labels("role", "loadgen"), func(ctx context.Context) {
			defer wg.Done()
			lat := make([]time.Duration, 0, n/c+1)
			defer func() { lats[w] = lat }()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil || time.Now().After(deadline) {
					return
				}
				t0 := time.Now()
				for {
					isBusy, err := op(ctx, i)
					if err != nil {
						if ctx.Err() == nil {
							fail(err)
						}
						return
					}
					if !isBusy {
						break
					}
					busy.Add(1)
					time.Sleep(busyBackoff)
				}
				lat = append(lat, time.Since(t0))
			}
		})
	}
	wg.Wait()
	res := loadResult{busy: int(busy.Load()), elapsed: time.Since(start)}
	for _, l := range lats {
		res.lat = append(res.lat, l...)
	}
	res.ok = len(res.lat)
	slices.Sort(res.lat)
	return res, firstErr
}

// postOp is an op for drive that posts body to url(i) with client: 200 is
// success, 503 busy, anything else an error.
func postOp(client *http.Client, url func(i int) string, body []byte) func(ctx context.Context, i int) (bool, error) {
	return func(ctx context.Context, i int) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url(i), bytes.NewReader(body))
		if err != nil {
			return false, err
		}
		status, err := roundTrip(client, req)
		switch {
		case err != nil:
			return false, err
		case status == http.StatusServiceUnavailable:
			return true, nil
		case status != http.StatusOK:
			return false, fmt.Errorf("bench: POST %s answered %d", req.URL, status)
		}
		return false, nil
	}
}

// roundTrip sends req and reads the answer to its end, so the connection
// goes back to the pool.
func roundTrip(client *http.Client, req *http.Request) (int, error) {
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, err
}

// putText PUTs body as text/plain to u with client: busy on a 503 (the
// driver tries again), an error for any other answer but 200.
func putText(ctx context.Context, client *http.Client, u string, body []byte) (busy bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u, bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "text/plain")
	st, err := roundTrip(client, req)
	switch {
	case err != nil:
		return false, err
	case st == http.StatusServiceUnavailable:
		return true, nil
	case st != http.StatusOK:
		return false, fmt.Errorf("bench: PUT %s answered %d", u, st)
	}
	return false, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
