package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// errBusy is what an op returns when the system asked it to come back
// later (a 503 or 429): drive retries the same operation after
// busyBackoff, and the latency counts from the first attempt.
var errBusy = errors.New("bench: busy")

// busyBackoff is how long a client waits before it retries a busy answer.
// Our ingress says Retry-After: 1 (second); a benchmark that waited that
// long would measure the wait.
const busyBackoff = 5 * time.Millisecond

// newClient returns a keep-alive HTTP client for conns concurrent
// requests to one host: one idle connection kept per client (the default
// of 2 would make most requests dial), no compression, no proxy.
func newClient(conns int) *http.Client {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conns + 4,
		MaxIdleConnsPerHost: conns + 4,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	return &http.Client{Transport: tr, Timeout: 2 * time.Minute}
}

// result is what one drive measured.
type result struct {
	OK      int           // operations that succeeded
	Busy    int           // busy answers, each retried
	Elapsed time.Duration // from the first request to the last answer
	lat     []time.Duration
}

// Quantile returns the q-quantile of the latencies (nearest rank).
func (r result) Quantile(q float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	i := int(q*float64(len(r.lat))+0.5) - 1
	return r.lat[min(max(i, 0), len(r.lat)-1)]
}

// Rate is operations per second.
func (r result) Rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.OK) / r.Elapsed.Seconds()
}

// drive runs op(ctx, i) for i = 0..n-1 from c goroutines and stops taking
// new operations once maxTime has passed: every load is bounded in count
// and in time. An op that returns errBusy is retried after busyBackoff.
// Goroutine w runs the operations i with i mod c == w, so a caller that
// maps i to a key as i mod k with k a multiple of c keeps every key on one
// goroutine. Any other op error stops the run and is returned.
func drive(ctx context.Context, n, c int, maxTime time.Duration, op func(ctx context.Context, i int) error) (result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c = max(min(c, n), 1)
	var (
		busy     atomic.Int64
		errOnce  sync.Once
		firstErr error
		wg       sync.WaitGroup
		lats     = make([][]time.Duration, c)
	)
	fail := func(err error) { errOnce.Do(func() { firstErr = err; cancel() }) }
	start := time.Now()
	deadline := start.Add(maxTime)
	for w := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := make([]time.Duration, 0, n/c+1)
			defer func() { lats[w] = lat }()
			for i := w; i < n; i += c {
				if ctx.Err() != nil || time.Now().After(deadline) {
					return
				}
				t0 := time.Now()
				for {
					err := op(ctx, i)
					if err == nil {
						break
					}
					if !errors.Is(err, errBusy) {
						if ctx.Err() == nil {
							fail(err)
						}
						return
					}
					busy.Add(1)
					select {
					case <-ctx.Done():
						return
					case <-time.After(busyBackoff):
					}
				}
				lat = append(lat, time.Since(t0))
			}
		}()
	}
	wg.Wait()
	res := result{Busy: int(busy.Load()), Elapsed: time.Since(start)}
	for _, l := range lats {
		res.lat = append(res.lat, l...)
	}
	res.OK = len(res.lat)
	slices.Sort(res.lat)
	return res, firstErr
}

// do sends req and reads the answer to its end, so the connection goes
// back to the pool. It returns the status and the body (at most 1 MiB).
func do(client *http.Client, req *http.Request) (int, []byte, error) {
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, nil, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, body, nil
}

// expectStatus turns an answer into an op result: want is success, 503 and
// 429 are busy, anything else is an error that names the request.
func expectStatus(req *http.Request, status int, body []byte, err error, want int) error {
	switch {
	case err != nil:
		return err
	case status == want:
		return nil
	case status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests:
		return errBusy
	}
	if len(body) > 300 {
		body = body[:300]
	}
	return fmt.Errorf("bench: %s %s answered %d: %s", req.Method, req.URL, status, body)
}

// pollUntil calls check every interval until it reports done, fails, or
// timeout passes.
func pollUntil(ctx context.Context, interval, timeout time.Duration, what string, check func() (bool, error)) error {
	return pollSince(ctx, time.Now(), interval, timeout, what, check)
}

// pollSince is pollUntil with an interval that grows with the time since
// t0, to a fiftieth of it: a run timed from t0 is measured within 2% (or
// the minimum interval) while a long one is not slowed down by the polls
// (a Restate poll is an SQL query over every counter).
func pollSince(ctx context.Context, t0 time.Time, interval, timeout time.Duration, what string, check func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		done, err := check()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: %s: not done within %v", what, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(max(interval, time.Since(t0)/50)):
		}
	}
}
