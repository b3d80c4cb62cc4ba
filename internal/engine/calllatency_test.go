package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/protocol"
)

// timedFunctions is the counter function, each call of which takes took
// on the engine's clock; calls to ids starting with "bad" fail after 1 ms.
type timedFunctions struct {
	counter
	clock *simClock
	took  time.Duration
}

func (f *timedFunctions) Call(ctx context.Context, t address.TypeName, req *protocol.ToFunction) (*protocol.FromFunction, error) {
	if id := req.GetInvocation().GetTarget().GetId(); len(id) >= 3 && id[:3] == "bad" {
		f.clock.advance(time.Millisecond)
		return nil, errors.New("the function failed")
	}
	f.clock.advance(f.took)
	return f.counter.Call(ctx, t, req)
}

// TestCallLatencies: each successful call to a remote function leaves its
// round trip (on the engine's clock) in CallLatencies, once for each
// reader with its own cursor; a reader that starts at the present
// (math.MaxUint64) sees only the calls after it; failed calls are not
// counted (a failing function's latency says nothing of its load).
func TestCallLatencies(t *testing.T) {
	clock := &simClock{now: time.Unix(1e9, 0)}
	fns := &timedFunctions{clock: clock, took: 7 * time.Millisecond}
	e := newEngine(t, openStore(t, vfs.NewMem(), 4), fns, func(o *Options) { o.Now = clock.Now })
	e.Start()
	ctx := context.Background()
	_, start := e.CallLatencies(math.MaxUint64, nil)
	if err := e.Ingest(ctx, msg("bad-1", "x")); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := e.Ingest(ctx, msg(fmt.Sprint("c-", i), "x")); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "five counters at 1", func() bool {
		for i := range 5 {
			if count(t, e, fmt.Sprint("c-", i)) != "1" {
				return false
			}
		}
		return true
	})
	// Each counter: the call that counts, and one that learns the
	// state spec where the partition did not know it yet. bad-1's calls
	// fail (and are retried) meanwhile.
	got, next := e.CallLatencies(start, nil)
	if len(got) < 5 || len(got) > 10 {
		t.Fatalf("%d round trips after 5 counters' first message, want 5 to 10: %v", len(got), got)
	}
	for _, d := range got {
		if d != 7*time.Millisecond {
			t.Fatalf("round trips %v, want 7 ms each", got)
		}
	}
	if again, _ := e.CallLatencies(start, nil); len(again) != len(got) {
		t.Fatalf("a second reader from the same cursor got %d round trips, want the same %d", len(again), len(got))
	}
	if later, cur := e.CallLatencies(next, nil); len(later) != 0 || cur != next {
		t.Fatalf("after the last cursor: %v (cursor %d, was %d), want none", later, cur, next)
	}
	if now, _ := e.CallLatencies(math.MaxUint64, nil); len(now) != 0 {
		t.Fatalf("from the present: %v, want none", now)
	}
}

// TestCallRingKeepsTheLatest: a reader that fell behind gets the latest
// callRingSize round trips, oldest first, and a cursor that goes on.
func TestCallRingKeepsTheLatest(t *testing.T) {
	var r callRing
	for i := range callRingSize + 100 {
		r.add(time.Duration(i))
	}
	got, cur := r.since(0, nil)
	if len(got) != callRingSize || got[0] != 100 || got[len(got)-1] != callRingSize+99 || cur != callRingSize+100 {
		t.Fatalf("behind: %d round trips from %v to %v, cursor %d; want %d from 100, cursor %d",
			len(got), got[0], got[len(got)-1], cur, callRingSize, callRingSize+100)
	}
	r.add(5)
	if got, cur := r.since(cur, got[:0]); len(got) != 1 || got[0] != 5 || cur != callRingSize+101 {
		t.Fatalf("the next: %v, cursor %d", got, cur)
	}
}
