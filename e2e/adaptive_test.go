package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/statefun-go/statefun/internal/sdktest"
)

// A function that is slow but not busy (the official SDK counter behind a
// 20 ms wait, as if it called a database) needs many calls in flight. The
// adaptive limit (docs/reference/limits.md) starts at 4, at which these 3,000
// messages would take 15 s; it must climb, as statefun_function_calls_limit
// shows, and every message must be processed.
func TestAdaptiveCallsClimbForASlowFunction(t *testing.T) {
	sdk := sdktest.CounterHandler()
	fn := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond)
		sdk.ServeHTTP(w, r)
	}))
	t.Cleanup(fn.Close)
	rt := newRuntime(t, fn.URL, []string{"sdktest"}, []string{sdktest.DefaultTopic})
	rt.start()

	const msgs, ids, senders = 3000, 1000, 32
	next := make(chan int, msgs)
	for i := range msgs {
		next <- i
	}
	close(next)
	start := time.Now()
	var wg sync.WaitGroup
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				resp, err := http.Post(fmt.Sprintf("%s/%s/%d", rt.ingress, sdktest.CounterFn, i%ids), "application/octet-stream", strings.NewReader("x"))
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("ingress answered %d", resp.StatusCode)
					return
				}
			}
		}()
	}
	limit := `statefun_function_calls_limit{function="sdktest/counter"}`
	highest := 0.0
	eventually(t, 60*time.Second, "every message processed", func() bool {
		highest = max(highest, metric(t, rt, limit))
		return metric(t, rt, "statefun_batch_size_sum") >= msgs
	})
	wg.Wait()
	took := time.Since(start)
	t.Logf("3,000 messages of a 20 ms function in %s; the limit reached %.0f", took.Round(time.Millisecond), highest)
	if highest < 16 {
		t.Fatalf("the calls-in-flight limit reached only %.0f for a function that is slow but not busy; want it to climb to 16 or more", highest)
	}
}
