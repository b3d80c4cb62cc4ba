package inflight

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func mustNew(t *testing.T, o Options) *Limiter {
	t.Helper()
	l, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Calls over the limit wait, and get their slots in arrival order.
func TestWaitersAreServedInArrivalOrder(t *testing.T) {
	l := mustNew(t, Options{Max: 2, Fixed: true})
	ctx := context.Background()
	d1, _ := l.Acquire(ctx)
	d2, _ := l.Acquire(ctx)
	order := make(chan int, 5)
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := l.Acquire(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			order <- i
			d(1)
		}()
		// Each goroutine is queued before the next starts.
		for waiting(l) != i+1 {
			time.Sleep(time.Millisecond)
		}
	}
	// d2 stays held: one slot is free at a time, and each waiter passes it
	// on after noting its turn.
	d1(1)
	wg.Wait()
	d2(1)
	close(order)
	want := 0
	for i := range order {
		if i != want {
			t.Fatalf("waiter %d got a slot before waiter %d", i, want)
		}
		want++
	}
}

func waiting(l *Limiter) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.waiters) - l.head
}

// A waiter whose context ends leaves without a slot, and its place does not
// block the ones behind it, nor a later caller once the slots are free.
func TestCanceledWaiterLeaves(t *testing.T) {
	l := mustNew(t, Options{Max: 1, Fixed: true})
	d, _ := l.Acquire(context.Background())
	ctx, cancel := context.WithCancelCause(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := l.Acquire(ctx)
		errc <- err
	}()
	for waiting(l) != 1 {
		time.Sleep(time.Millisecond)
	}
	cause := errors.New("caller gone")
	cancel(cause)
	if err := <-errc; !errors.Is(err, cause) {
		t.Fatalf("canceled Acquire returned %v, want the context's cause", err)
	}
	d(0)
	got := make(chan struct{})
	go func() {
		d, err := l.Acquire(context.Background())
		if err == nil {
			d(0)
		}
		close(got)
	}()
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("a caller after a canceled waiter never got the free slot")
	}
	if l.inFlight != 0 {
		t.Fatalf("%d slots held after every call returned", l.inFlight)
	}
}

// The limit adapts on a real clock: a service whose throughput grows with
// its calls in flight (each call sleeps 20 ms) raises the limit from 2
// toward the cap.
func TestLimitRisesWithThroughput(t *testing.T) {
	l := mustNew(t, Options{Max: 64, Initial: 2, Window: 30 * time.Millisecond, MinUnits: 20})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				d, err := l.Acquire(ctx)
				if err != nil {
					return
				}
				time.Sleep(20 * time.Millisecond)
				d(1)
				if l.Limit() >= 32 {
					cancel()
				}
			}
		}()
	}
	wg.Wait()
	if got := l.Limit(); got < 32 {
		t.Fatalf("limit %d after 8 s of a service whose throughput grows with concurrency; want it to climb to 32 or more", got)
	}
}

func TestFixedStaysAtMax(t *testing.T) {
	l := mustNew(t, Options{Max: 7, Fixed: true})
	if l.Limit() != 7 {
		t.Fatalf("fixed limit %d, want Max 7", l.Limit())
	}
	if _, err := New(Options{}); err == nil {
		t.Fatal("New accepted Max 0")
	}
}

// TryAcquire takes a free slot, and does not jump the queue: with a
// waiter queued it refuses even once a slot is free for the waiter.
func TestTryAcquire(t *testing.T) {
	l := mustNew(t, Options{Max: 1, Fixed: true})
	d, ok := l.TryAcquire()
	if !ok {
		t.Fatal("TryAcquire refused a free slot")
	}
	if _, ok := l.TryAcquire(); ok {
		t.Fatal("TryAcquire took a slot over the limit")
	}
	got := make(chan func(int))
	go func() {
		d, err := l.Acquire(context.Background())
		if err != nil {
			t.Error(err)
		}
		got <- d
	}()
	for waiting(l) != 1 {
		time.Sleep(time.Millisecond)
	}
	d(1) // the slot goes to the waiter
	if _, ok := l.TryAcquire(); ok {
		t.Fatal("TryAcquire took the slot handed to a waiter")
	}
	(<-got)(1)
	if d, ok := l.TryAcquire(); !ok {
		t.Fatal("TryAcquire refused a free slot with nobody waiting")
	} else {
		d(0)
	}
}
