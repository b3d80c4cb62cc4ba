package dispatch

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
)

type fnFunc func(ctx context.Context, t address.TypeName, req *protocol.ToFunction) (*protocol.FromFunction, error)

func (f fnFunc) Call(ctx context.Context, t address.TypeName, req *protocol.ToFunction) (*protocol.FromFunction, error) {
	return f(ctx, t, req)
}

type outcome struct {
	inv  partition.Invocation
	resp *protocol.FromFunction
	err  error
	took time.Duration
}

func TestPoolReportsEveryCall(t *testing.T) {
	boom := errors.New("boom")
	fns := fnFunc(func(_ context.Context, tn address.TypeName, _ *protocol.ToFunction) (*protocol.FromFunction, error) {
		if tn.Name == "bad" {
			return nil, boom
		}
		return &protocol.FromFunction{}, nil
	})
	// The latency comes from the injected clock, which moves 7ms per reading.
	var mu sync.Mutex
	tick := time.UnixMilli(0)
	now := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		tick = tick.Add(7 * time.Millisecond)
		return tick
	}
	p := New(context.Background(), fns, now, nil)
	out := make(chan outcome, 2)
	done := func(inv partition.Invocation, resp *protocol.FromFunction, err error, took time.Duration) {
		out <- outcome{inv, resp, err, took}
	}
	p.Dispatch(partition.Invocation{Addr: address.Address{Type: address.TypeName{Namespace: "n", Name: "good"}, ID: "1"}, Request: 1}, done, nil)
	p.Dispatch(partition.Invocation{Addr: address.Address{Type: address.TypeName{Namespace: "n", Name: "bad"}, ID: "2"}, Request: 2}, done, nil)
	got := map[uint64]outcome{}
	for range 2 {
		o := <-out
		got[o.inv.Request] = o
	}
	if o := got[1]; o.err != nil || o.resp == nil || o.took <= 0 {
		t.Fatalf("call 1: %+v", o)
	}
	if o := got[2]; !errors.Is(o.err, boom) {
		t.Fatalf("call 2: %+v, want the function's error", o)
	}
}

// A call that ends after shutdown reports nothing: its batch re-runs after
// a restart.
func TestPoolAbandonsCallsAtShutdown(t *testing.T) {
	started := make(chan struct{})
	fns := fnFunc(func(ctx context.Context, _ address.TypeName, _ *protocol.ToFunction) (*protocol.FromFunction, error) {
		close(started)
		<-ctx.Done()
		return nil, ctx.Err()
	})
	ctx, cancel := context.WithCancel(context.Background())
	p := New(ctx, fns, nil, nil)
	reported := make(chan struct{}, 1)
	p.Dispatch(partition.Invocation{Request: 1}, func(partition.Invocation, *protocol.FromFunction, error, time.Duration) {
		reported <- struct{}{}
	}, nil)
	<-started
	cancel()
	// Call on this goroutine with the same (ended) context: it must not
	// report either, which is the same code path the worker took.
	Call(ctx, fnFunc(func(context.Context, address.TypeName, *protocol.ToFunction) (*protocol.FromFunction, error) {
		return &protocol.FromFunction{}, nil
	}), time.Now, partition.Invocation{Request: 2}, func(partition.Invocation, *protocol.FromFunction, error, time.Duration) {
		reported <- struct{}{}
	})
	select {
	case <-reported:
		t.Fatal("a call abandoned at shutdown was reported")
	default:
	}
}
