package dispatch_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/engine/dispatch"
	"github.com/statefun-go/statefun/internal/functions"
	"github.com/statefun-go/statefun/internal/module"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/sdktest"
)

var _ dispatch.Gate = (*functions.Router)(nil)

// A backlog of batches for a slow function waits as data: with the real
// router (a bulkhead of 2 calls) in front of the official Go SDK's counter,
// held until released, 500 batches dispatched at once start 2 calls and
// no goroutine for the other 498, whose requests (state attached) are
// counted in held while they wait; released, every batch is reported and
// held is back to zero.
func TestWaitingCallsAreDataNotGoroutines(t *testing.T) {
	sdk := sdktest.CounterHandler()
	release := make(chan struct{})
	var arrived atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		<-release
		sdk.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	mod, err := module.Parse("module.yaml", []byte(fmt.Sprintf("kind: io.statefun.endpoints.v2/http\nspec:\n  functions: sdktest/*\n  urlPathTemplate: %s\n", srv.URL)))
	if err != nil {
		t.Fatal(err)
	}
	fns, err := functions.New(mod, functions.Options{MaxCallsPerType: 2, FixedCalls: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fns.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	pool := dispatch.New(ctx, fns, nil, nil)

	const batches = 500
	counter := address.TypeName{Namespace: "sdktest", Name: "counter"}
	state := make([]byte, 1000) // every state value of the address rides along
	var held atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Int64
	wg.Add(batches)
	before := runtime.NumGoroutine()
	want := int64(0)
	for i := range batches {
		body := &protocol.ToFunction{Request: &protocol.ToFunction_Invocation_{Invocation: &protocol.ToFunction_InvocationBatchRequest{
			Target:      &protocol.Address{Namespace: counter.Namespace, Type: counter.Name, Id: fmt.Sprint("id", i)},
			State:       []*protocol.ToFunction_PersistedValue{{StateName: "blob", StateValue: &protocol.TypedValue{Typename: "x/y", HasValue: true, Value: state}}},
			Invocations: []*protocol.ToFunction_Invocation{{Argument: &protocol.TypedValue{Typename: "io.statefun.types/string", HasValue: true, Value: []byte("x")}}},
		}}}
		if i >= 2 {
			want += int64(proto.Size(body))
		}
		pool.Dispatch(partition.Invocation{Addr: address.Address{Type: counter, ID: fmt.Sprint("id", i)}, Request: uint64(i), Body: body},
			func(_ partition.Invocation, _ *protocol.FromFunction, err error, _ time.Duration) {
				if err != nil {
					failed.Add(1)
				}
				wg.Done()
			}, &held)
	}
	deadline := time.Now().Add(10 * time.Second)
	for arrived.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // nothing more may arrive
	if got := arrived.Load(); got != 2 {
		t.Fatalf("%d calls reached the function, want the bulkhead's 2", got)
	}
	if grew := runtime.NumGoroutine() - before; grew > 40 {
		t.Errorf("%d goroutines more with %d batches waiting; want a handful (the two calls and the HTTP client's)", grew, batches-2)
	}
	if got := held.Load(); got != want {
		t.Errorf("held %d bytes for the waiting batches, want their requests' %d", got, want)
	}
	close(release)
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Errorf("%d calls failed", n)
	}
	if got := held.Load(); got != 0 {
		t.Errorf("held %d bytes once every batch started, want 0", got)
	}
}
