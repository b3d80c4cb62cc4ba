package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// answered returns the indexes of the answers whose callers have them.
func answered(as ...*pacedAnswer) []int {
	var out []int
	for i, a := range as {
		select {
		case <-a.done:
			out = append(out, i)
		default:
		}
	}
	return out
}

func newAnswers(n int) []*pacedAnswer {
	as := make([]*pacedAnswer, n)
	for i := range as {
		as[i] = &pacedAnswer{done: make(chan error, 1)}
	}
	return as
}

// At most limit callers hold an answer at once; the others get theirs in
// the order they were settled, one per caller done.
func TestAnswerPacerWakesInTurn(t *testing.T) {
	p := newAnswerPacer(2)
	as := newAnswers(5)
	for _, a := range as {
		p.settle(a, nil)
	}
	if got := answered(as...); len(got) != 2 || got[0] != 0 || got[1] != 1 {
		t.Fatalf("after 5 settled with limit 2, answered %v; want [0 1]", got)
	}
	for want := 2; want < 5; want++ {
		p.done()
		if got := answered(as[want:]...); len(got) != 1 || got[0] != 0 {
			t.Fatalf("a caller done: answered %v of the rest; want the oldest, %d", got, want)
		}
	}
	p.done()
	p.done()
	if p.running != 0 || p.head != len(p.queue) {
		t.Fatalf("every caller done: %d running, %d queued; want none", p.running, len(p.queue)-p.head)
	}
}

// A caller that left before its answer neither takes a slot nor blocks the
// ones behind it; one that left after being woken passes its slot on.
func TestAnswerPacerSkipsCallersThatLeft(t *testing.T) {
	p := newAnswerPacer(1)
	as := newAnswers(4)
	p.settle(as[0], nil) // woken
	p.leave(as[1])       // leaves before it is settled
	p.settle(as[1], nil)
	fail := errors.New("store stopped")
	p.settle(as[2], fail)
	p.settle(as[3], nil)
	p.leave(as[0]) // woken, then gone without reading: passes its slot on
	select {
	case err := <-as[2].done:
		if !errors.Is(err, fail) {
			t.Fatalf("caller 2 got %v, want its failure", err)
		}
	default:
		t.Fatal("caller 2 was not answered; caller 1 left, and caller 0's slot was passed on")
	}
	if got := answered(as[1], as[3]); len(got) != 0 {
		t.Fatalf("callers 1 and 3 answered %v; want neither (1 left, 3 waits its turn)", got)
	}
	p.done()
	if got := answered(as[3]); len(got) != 1 {
		t.Fatal("caller 3 never got its answer")
	}
	p.done()
	if p.running != 0 {
		t.Fatalf("%d slots held after every caller was done or gone", p.running)
	}
}

// The queue's storage is reused under a steady stream: it does not grow
// with the number of answers ever queued.
func TestAnswerPacerQueueStaysSmall(t *testing.T) {
	p := newAnswerPacer(1)
	p.settle(&pacedAnswer{done: make(chan error, 1)}, nil)
	for range 100_000 {
		p.settle(&pacedAnswer{done: make(chan error, 1)}, nil)
		p.done()
	}
	if c := cap(p.queue); c > 4096 {
		t.Fatalf("queue capacity %d after 100,000 answers through one slot; want it reused", c)
	}
}

// Through the engine: with one answer slot, hundreds of concurrent
// ingress callers, a third of whom give up waiting at once, all return;
// every message is delivered, the callers that gave up included; and no
// slot is left held, so a later caller is answered. The same holds with
// the pacing turned off (a negative IngressAnswers).
func TestIngestPacedAnswersThroughTheEngine(t *testing.T) {
	for _, limit := range []int{1, -1} {
		t.Run(fmt.Sprintf("IngressAnswers=%d", limit), func(t *testing.T) { testIngestAnswers(t, limit) })
	}
}

func testIngestAnswers(t *testing.T, limit int) {
	db := openStore(t, vfs.NewMem(), 4)
	e := newEngine(t, db, &counter{}, func(o *Options) { o.IngressAnswers = limit })
	if (e.answers == nil) != (limit < 0) {
		t.Fatalf("IngressAnswers %d: pacer %v", limit, e.answers)
	}
	e.Start()
	const n = 300
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if i%3 == 0 {
				// Gives up at some point: before its message is durable,
				// while it waits its turn, or once woken.
				time.AfterFunc(time.Duration(rand.IntN(3000))*time.Microsecond, cancel)
			}
			err := e.Ingest(ctx, msg(fmt.Sprintf("a%d", i%10), "x"))
			if err != nil && !errors.Is(err, context.Canceled) {
				errs <- err
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("ingress callers still waiting for their answers after 30 s")
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Ingest(ctx, msg("a0", "x")); err != nil {
		t.Fatalf("a caller after the storm: %v (a slot left held?)", err)
	}
	waitFor(t, "every message counted, the abandoned ones included", func() bool {
		sum := 0
		for i := range 10 {
			c, _ := strconv.Atoi(count(t, e, fmt.Sprintf("a%d", i)))
			sum += c
		}
		return sum == n+1
	})
	if e.answers == nil {
		return
	}
	e.answers.mu.Lock()
	defer e.answers.mu.Unlock()
	if e.answers.running != 0 {
		t.Fatalf("%d answer slots held with no caller waiting", e.answers.running)
	}
}
