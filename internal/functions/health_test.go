package functions_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/statefun-go/statefun/internal/functions"
	"github.com/statefun-go/statefun/internal/sdktest"
)

// syncBuffer is a log sink safe for the router's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// An endpoint whose server is gone is down after three calls in a row
// could not connect, said once in the log and in statefun_function_endpoint_up,
// and up again at the first call the server (the official Go SDK's
// counter, started on the same port) answers; a failure that is the
// function's (an answer, whatever it says) keeps it up.
func TestEndpointDownAndUpAgain(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nobody listens: connection refused
	reg := prometheus.NewRegistry()
	var logs syncBuffer
	r := newRouter(t, parse(t, fmt.Sprintf("kind: io.statefun.endpoints.v2/http\nspec:\n  functions: sdktest/*\n  urlPathTemplate: http://%s/\n", addr)),
		functions.Options{Metrics: functions.NewMetrics(reg), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	up := func() float64 { return endpointUp(t, reg) }
	if up() != 1 || !r.Endpoints()[0].Up {
		t.Fatalf("a new endpoint: up %v, %+v", up(), r.Endpoints())
	}
	call := func() error {
		_, err := r.Call(context.Background(), tn(sdktest.CounterFn), stringCall("a", sdktest.CounterFn))
		return err
	}
	for i := 1; i <= 5; i++ {
		if call() == nil {
			t.Fatal("a call to nobody succeeded")
		}
		if want := i < 3; r.Endpoints()[0].Up != want || r.EndpointDown(tn(sdktest.CounterFn)) == want {
			t.Fatalf("after %d refused calls: %+v, want up %v", i, r.Endpoints()[0], want)
		}
	}
	st := r.Endpoints()[0]
	if up() != 0 || st.Since.IsZero() || st.FailuresInARow != 5 || !strings.Contains(st.LastError, "connect") {
		t.Errorf("down: gauge %v, %+v", up(), st)
	}
	if n := strings.Count(logs.String(), "function endpoint down"); n != 1 {
		t.Errorf("%d log lines saying the endpoint is down, want 1:\n%s", n, logs.String())
	}
	if d := r.Down(); len(d) != 1 || !strings.Contains(d[0], "sdktest/*") {
		t.Errorf("Down: %q", d)
	}

	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	srv := &http.Server{Handler: sdktest.CounterHandler()}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	if err := call(); err != nil {
		t.Fatalf("the call once the server is back: %v", err)
	}
	if st := r.Endpoints()[0]; !st.Up || up() != 1 || st.FailuresInARow != 0 || len(r.Down()) != 0 {
		t.Errorf("back: gauge %v, %+v", up(), st)
	}
	if !strings.Contains(logs.String(), "function endpoint reachable again") {
		t.Errorf("no log line saying it is back:\n%s", logs.String())
	}
	// A type the SDK does not know: a 500, the function's failure, not
	// its server's absence.
	for range 4 {
		if _, err := r.Call(context.Background(), tn("sdktest/nobody"), stringCall("a", "sdktest/nobody")); err == nil {
			t.Fatal("a call to an unknown type succeeded")
		}
	}
	if !r.Endpoints()[0].Up {
		t.Errorf("four 500s took the endpoint down: %+v", r.Endpoints()[0])
	}
}

// endpointUp reads the one series of statefun_function_endpoint_up in reg.
func endpointUp(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "statefun_function_endpoint_up" && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no single series of statefun_function_endpoint_up")
	return 0
}
