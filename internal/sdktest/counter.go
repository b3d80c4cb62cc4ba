package sdktest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/apache/flink-statefun/statefun-sdk-go/v3/pkg/statefun"
)

// countSpec is CounterFn's only state.
var countSpec = statefun.ValueSpec{Name: CounterState, ValueType: statefun.Int64Type}

// CounterHandler returns the official Go SDK's request-reply handler
// serving CounterFn: every message, whatever its type, adds 1 to the long
// state CounterState and egresses the record
// {"topic": CounterTopic, "payload": "<id>:<new count>"}. A test that must
// stop and restart the function on a fixed address serves it on a listener
// of its own.
func CounterHandler() http.Handler { return counterHandler(&EgressSender{}) }

func counterHandler(out *EgressSender) http.Handler {
	fns := statefun.StatefulFunctionsBuilder()
	must(fns.WithSpec(statefun.StatefulFunctionSpec{
		FunctionType: statefun.TypeNameFrom(CounterFn),
		States:       []statefun.ValueSpec{countSpec},
		Function: statefun.StatefulFunctionPointer(func(ctx statefun.Context, _ statefun.Message) error {
			var n int64
			ctx.Storage().Get(countSpec, &n)
			n++
			ctx.Storage().Set(countSpec, n)
			out.Send(ctx, CounterTopic, fmt.Sprintf("%s:%d", ctx.Self().Id, n))
			return nil
		}),
	}))
	return fns.AsHandler()
}

// CounterServer serves CounterHandler on a loopback port, with nothing in
// front, so that benchmarks measure the SDK alone.
type CounterServer struct {
	// URL is the endpoint to configure for sdktest/counter.
	URL string

	srv *httptest.Server
	out *EgressSender
}

// SendEgressTo makes the function send its records by r from now on.
func (s *CounterServer) SendEgressTo(r EgressRoute) { s.out.SendEgressTo(r) }

// StartCounterServer starts a CounterServer that stops when t ends.
func StartCounterServer(t testing.TB) *CounterServer {
	t.Helper()
	out := &EgressSender{}
	srv := httptest.NewServer(counterHandler(out))
	s := &CounterServer{URL: srv.URL + "/statefun", srv: srv, out: out}
	t.Cleanup(s.Close)
	return s
}

// Close stops the server as a crash of the function would: it cuts every
// connection, requests in flight included, and calls to URL fail from then
// on. It is idempotent and also runs when t ends.
func (s *CounterServer) Close() {
	s.srv.CloseClientConnections()
	s.srv.Close()
}
