package functions_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/functions"
	"github.com/statefun-go/statefun/internal/ingress"
	"github.com/statefun-go/statefun/internal/invoker"
	"github.com/statefun-go/statefun/internal/module"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/sdktest"
)

func TestMain(m *testing.M) {
	// The official Go SDK logs every registration and failed invocation.
	log.SetOutput(io.Discard)
	os.Exit(m.Run())
}

func parse(t *testing.T, yaml string) *module.Module {
	t.Helper()
	mod, err := module.Parse("module.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return mod
}

func newRouter(t *testing.T, mod *module.Module, opts functions.Options) *functions.Router {
	t.Helper()
	r, err := functions.New(mod, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

func tn(s string) address.TypeName {
	ns, name, _ := strings.Cut(s, "/")
	return address.TypeName{Namespace: ns, Name: name}
}

// pathRecorder serves the official Go SDK's sdktest functions and records
// the request path of every call, so a test sees which endpoint URL a call
// went to.
type pathRecorder struct {
	name string
	sdk  http.Handler
	mu   sync.Mutex
	got  []string
}

func (p *pathRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.got = append(p.got, p.name+r.URL.Path)
	p.mu.Unlock()
	p.sdk.ServeHTTP(w, r)
}

func (p *pathRecorder) paths() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.got...)
}

func stringCall(id string, fn string) *protocol.ToFunction {
	return sdktest.Request(sdktest.Address(fn, id), nil, sdktest.Invocation(nil, sdktest.StringValue("hi")))
}

// An exact function type wins over a namespace wildcard wherever it is
// written, each endpoint gets its own URL with {function.name} expanded,
// and per-type settings come from the endpoint that serves the type.
func TestRoutingSelectsEndpointAndExpandsTemplate(t *testing.T) {
	wild := &pathRecorder{name: "wild", sdk: sdktest.FeatureHandler()}
	exact := &pathRecorder{name: "exact", sdk: sdktest.FeatureHandler()}
	ws, es := httptest.NewServer(wild), httptest.NewServer(exact)
	t.Cleanup(ws.Close)
	t.Cleanup(es.Close)
	mod := parse(t, fmt.Sprintf(`kind: io.statefun.endpoints.v2/http
spec:
  functions: sdktest/*
  urlPathTemplate: %s/fns/{function.name}
  maxNumBatchRequests: 7
  transport:
    payload_max_bytes: 100000
---
kind: io.statefun.endpoints.v2/http
spec:
  functions: sdktest/stateless
  urlPathTemplate: %s/one
`, ws.URL, es.URL))
	r := newRouter(t, mod, functions.Options{})
	ctx := context.Background()

	from, err := r.Call(ctx, tn(sdktest.StatelessFn), stringCall("a", sdktest.StatelessFn))
	if err != nil || from.GetInvocationResult() == nil {
		t.Fatalf("call sdktest/stateless: %v, %v", from, err)
	}
	if _, err := r.Call(ctx, tn(sdktest.FeaturesFn), stringCall("a", sdktest.FeaturesFn)); err != nil {
		t.Fatalf("call sdktest/features: %v", err)
	}
	if got := wild.paths(); len(got) != 1 || got[0] != "wild/fns/features" {
		t.Errorf("wildcard endpoint saw %v, want [wild/fns/features]", got)
	}
	if got := exact.paths(); len(got) != 1 || got[0] != "exact/one" {
		t.Errorf("exact endpoint saw %v, want [exact/one]", got)
	}

	if got := r.MaxBatch(tn(sdktest.FeaturesFn)); got != 7 {
		t.Errorf("MaxBatch(features) = %d, want 7", got)
	}
	if got := r.MaxBatch(tn(sdktest.StatelessFn)); got != module.DefaultMaxNumBatchRequests {
		t.Errorf("MaxBatch(stateless) = %d, want the default %d", got, module.DefaultMaxNumBatchRequests)
	}
	if got := r.MaxBatch(tn("ghost/fn")); got != 0 {
		t.Errorf("MaxBatch(ghost/fn) = %d, want 0", got)
	}
	if got := r.MaxMessage("sdktest", "features"); got != 100000-functions.RequestOverhead {
		t.Errorf("MaxMessage(features) = %d, want payload_max_bytes less the overhead, %d", got, 100000-functions.RequestOverhead)
	}
	if got := r.MaxMessage("sdktest", "stateless"); got != module.DefaultPayloadMaxBytes-functions.RequestOverhead {
		t.Errorf("MaxMessage(stateless) = %d, want %d", got, module.DefaultPayloadMaxBytes-functions.RequestOverhead)
	}
	if got := r.MaxMessage("ghost", "fn"); got != ingress.MaxBodyBytes {
		t.Errorf("MaxMessage(ghost/fn) = %d, want the ingress cap %d", got, ingress.MaxBodyBytes)
	}
}

func TestCallWithoutEndpointNamesTheType(t *testing.T) {
	r := newRouter(t, parse(t, `kind: io.statefun.endpoints.v2/http
spec:
  functions: a/*
  urlPathTemplate: http://127.0.0.1:1/
`), functions.Options{})
	_, err := r.Call(context.Background(), tn("ghost/fn"), stringCall("x", "ghost/fn"))
	if !errors.Is(err, functions.ErrNoEndpoint) || !strings.Contains(err.Error(), "ghost/fn") {
		t.Fatalf("err = %v, want ErrNoEndpoint naming ghost/fn", err)
	}
}

func TestLimitPerTypeDefaults(t *testing.T) {
	mod := parse(t, `kind: io.statefun.endpoints.v2/http
spec:
  functions: a/*
  urlPathTemplate: http://127.0.0.1:1/
---
kind: io.statefun.endpoints.v2/http
spec:
  functions: b/one
  urlPathTemplate: http://127.0.0.1:1/
---
kind: io.statefun.endpoints.v2/http
spec:
  functions: c/*
  urlPathTemplate: http://127.0.0.1:1/
  transport:
    pool_size: 1
`)
	wild, one, tiny := mod.Endpoints[0], mod.Endpoints[1], mod.Endpoints[2]
	for _, c := range []struct {
		ep         *module.Endpoint
		configured int
		want       int
	}{
		{wild, 0, invoker.DefaultPoolSize / 2},
		{one, 0, invoker.DefaultPoolSize},
		{tiny, 0, 1},
		{wild, 10, 10},
		{wild, 1 << 20, invoker.DefaultPoolSize},
		{tiny, 5, 1},
	} {
		if got := functions.LimitPerType(c.ep, c.configured); got != c.want {
			t.Errorf("LimitPerType(%s, %d) = %d, want %d", c.ep.Functions, c.configured, got, c.want)
		}
	}
	if _, err := functions.New(mod, functions.Options{MaxCallsPerType: -1}); err == nil || !strings.Contains(err.Error(), "MaxCallsPerType") {
		t.Errorf("MaxCallsPerType -1: err = %v, want one naming the field", err)
	}
}

// The defect: calls of one hung function type filled the connection pool
// of the endpoint it shares with another type, and the other type got no
// invocation until the hung calls timed out. With the bulkhead, type A
// holds at most its limit of connections, its further calls wait without
// one, and type B is invoked and answers while A is still hung.
func TestBulkheadKeepsOtherTypeServedWhileOneHangs(t *testing.T) {
	const pool, limit, hung = 4, 2, 10
	srv := sdktest.StartFeatureServer(t)
	mod := parse(t, fmt.Sprintf(`kind: io.statefun.endpoints.v2/http
spec:
  functions: sdktest/*
  urlPathTemplate: %s
  transport:
    pool_size: %d
`, srv.URL, pool))
	reg := prometheus.NewRegistry()
	r := newRouter(t, mod, functions.Options{MaxCallsPerType: limit, Metrics: functions.NewMetrics(reg)})

	// Type A (sdktest/features) hangs for hung addresses, more than the pool.
	var holds []*sdktest.Hold
	var wg sync.WaitGroup
	aErrs := make(chan error, hung)
	for i := range hung {
		id := fmt.Sprintf("a%d", i)
		holds = append(holds, srv.Hold(sdktest.FeaturesFn, id))
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := r.Call(context.Background(), tn(sdktest.FeaturesFn), stringCall(id, sdktest.FeaturesFn))
			aErrs <- err
		}()
	}
	released := false
	release := func() {
		if !released {
			released = true
			for _, h := range holds {
				h.Release()
			}
		}
	}
	t.Cleanup(func() { release(); wg.Wait() })

	// Wait until limit of A's calls have reached the function and hang.
	arrivals := make(chan struct{}, hung)
	for _, h := range holds {
		go func() {
			select {
			case <-h.Arrived():
				arrivals <- struct{}{}
			case <-t.Context().Done():
			}
		}()
	}
	for range limit {
		<-arrivals
	}

	// Type B (sdktest/stateless) answers while A is still hung. The
	// context only turns a starved call into a failure instead of a hang.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	from, err := r.Call(ctx, tn(sdktest.StatelessFn), stringCall("b", sdktest.StatelessFn))
	if err != nil {
		t.Fatalf("type B while type A hangs: %v", err)
	}
	if from.GetInvocationResult() == nil || srv.Invocations(sdktest.StatelessFn, "b") != 1 {
		t.Fatalf("type B was not invoked: %v", from)
	}
	if n := arrivedCount(holds); n != limit {
		t.Errorf("%d calls of type A reached the function, want its limit %d", n, limit)
	}
	waitFor(t, func() bool {
		return gauge(t, reg, "statefun_function_calls_waiting", sdktest.FeaturesFn) == hung-limit &&
			gauge(t, reg, "statefun_function_calls_in_flight", sdktest.FeaturesFn) == limit
	})
	select {
	case err := <-aErrs:
		t.Fatalf("a call of type A ended before A was released: %v", err)
	default:
	}

	// Once A recovers, its waiting calls run, in turn.
	release()
	wg.Wait()
	close(aErrs)
	for err := range aErrs {
		if err != nil {
			t.Errorf("type A after release: %v", err)
		}
	}
	if got := (gauge(t, reg, "statefun_function_calls_waiting", sdktest.FeaturesFn)); got != 0 {
		t.Errorf("calls waiting after release = %v, want 0", got)
	}
}

// A call waiting in the bulkhead gives up when its context ends, and its
// place does not leak: the type's limit is intact afterwards.
func TestBulkheadWaitHonoursContext(t *testing.T) {
	srv := sdktest.StartFeatureServer(t)
	mod := parse(t, fmt.Sprintf(`kind: io.statefun.endpoints.v2/http
spec:
  functions: sdktest/*
  urlPathTemplate: %s
`, srv.URL))
	reg := prometheus.NewRegistry()
	r := newRouter(t, mod, functions.Options{MaxCallsPerType: 1, Metrics: functions.NewMetrics(reg)})
	h := srv.Hold(sdktest.FeaturesFn, "first")
	done := make(chan error, 1)
	go func() {
		_, err := r.Call(context.Background(), tn(sdktest.FeaturesFn), stringCall("first", sdktest.FeaturesFn))
		done <- err
	}()
	<-h.Arrived()

	ctx, cancel := context.WithCancel(context.Background())
	waited := make(chan error, 1)
	go func() {
		_, err := r.Call(ctx, tn(sdktest.FeaturesFn), stringCall("second", sdktest.FeaturesFn))
		waited <- err
	}()
	waitFor(t, func() bool {
		return (gauge(t, reg, "statefun_function_calls_waiting", sdktest.FeaturesFn)) == 1
	})
	cancel()
	if err := <-waited; !errors.Is(err, context.Canceled) {
		t.Fatalf("waiting call after cancel: %v, want context.Canceled", err)
	}
	if n := srv.Invocations(sdktest.FeaturesFn, "second"); n != 0 {
		t.Errorf("the cancelled call reached the function %d times", n)
	}
	h.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The limit is whole again: a new call goes straight through.
	if _, err := r.Call(context.Background(), tn(sdktest.FeaturesFn), stringCall("third", sdktest.FeaturesFn)); err != nil {
		t.Fatal(err)
	}
}

func arrivedCount(holds []*sdktest.Hold) int {
	n := 0
	for _, h := range holds {
		select {
		case <-h.Arrived():
			n++
		default:
		}
	}
	return n
}

// gauge reads the series of function type fn of a gauge registered in reg,
// as a scrape of /metrics would; a missing series reads 0.
func gauge(t *testing.T, reg *prometheus.Registry, name, fn string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "function" && l.GetValue() == fn {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return 0
}

// waitFor polls cond, which reads state that has no signal to wait on (a
// gauge), until it holds; the test's own timeout bounds it.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for !cond() {
		time.Sleep(time.Millisecond)
	}
}

// The defect: a type's bulkhead, with the adaptive limit it had learned,
// was forgotten whenever none of its calls was in flight, so every burst
// after a pause — a Kafka fetch, a moment between two calls — started again
// from the adaptive floor. The limit a type climbed to under a burst is
// still in force for its next call after it went idle.
func TestAdaptiveLimitSurvivesIdleType(t *testing.T) {
	srv := sdktest.StartFeatureServer(t)
	mod := parse(t, fmt.Sprintf(`kind: io.statefun.endpoints.v2/http
spec:
  functions: sdktest/*
  urlPathTemplate: %s
`, srv.URL))
	reg := prometheus.NewRegistry()
	r := newRouter(t, mod, functions.Options{Metrics: functions.NewMetrics(reg)})
	limit := func() float64 { return gauge(t, reg, "statefun_function_calls_limit", sdktest.FeaturesFn) }

	// A burst of held calls: the ones past the adaptive floor wait, and
	// since none ends within a window the limit doubles.
	const burst = 12
	var holds []*sdktest.Hold
	var wg sync.WaitGroup
	for i := range burst {
		id := fmt.Sprintf("b%d", i)
		holds = append(holds, srv.Hold(sdktest.FeaturesFn, id))
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := r.Call(context.Background(), tn(sdktest.FeaturesFn), stringCall(id, sdktest.FeaturesFn)); err != nil {
				t.Error(err)
			}
		}()
	}
	waitFor(t, func() bool { return arrivedCount(holds) > 4 })
	for _, h := range holds {
		h.Release()
	}
	wg.Wait()
	learned := limit()
	if learned <= 4 {
		t.Fatalf("limit after the burst = %v, want above the adaptive floor 4", learned)
	}
	if got := gauge(t, reg, "statefun_function_calls_in_flight", sdktest.FeaturesFn); got != 0 {
		t.Fatalf("calls in flight after the burst = %v, want 0 (the type is idle)", got)
	}

	// The type is idle; its next call finds the limit it learned.
	if _, err := r.Call(context.Background(), tn(sdktest.FeaturesFn), stringCall("after", sdktest.FeaturesFn)); err != nil {
		t.Fatal(err)
	}
	if got := limit(); got != learned {
		t.Errorf("limit after the type went idle = %v, want the %v it learned", got, learned)
	}
}
