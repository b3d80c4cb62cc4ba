package engine

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// answerPacer hands the outcomes of ingress requests to their waiting
// callers a few at a time.
//
// Why: one group commit makes the messages of every waiting ingress
// request durable at once, and waking all their callers at once puts as
// many goroutines in the Go scheduler's run queues. Anything readied after
// them — a state API request just read off the network — runs only once
// they all have: under load that wait was the state API's latency (a GET's
// p99 of 8–13 ms while its own work took 0.3 ms; docs/benchmarks.md,
// "Fewer runnable goroutines"). A parked caller costs nothing, so the pacer lets at most
// limit callers be woken and not yet done at once, in the order their
// requests were settled, and each woken caller, once it has its outcome,
// wakes the next. The answers come out as fast as before, one chain per
// slot, and the run queues stay short.
//
// Only ingress callers are paced: a state API write's caller is answered
// at once (it is the request the pacing protects).
type answerPacer struct {
	limit int

	mu      sync.Mutex
	running int            // callers woken and not yet done
	queue   []*pacedAnswer // settled, waiting for a slot, oldest first
	head    int            // queue[:head] are taken
}

// pacedAnswer is one caller's outcome, and whether the caller still waits.
type pacedAnswer struct {
	done  chan error // buffered 1
	err   error
	state atomic.Int32 // answerWaiting, answerWoken or answerLeft
}

const (
	answerWaiting = iota
	answerWoken
	answerLeft
)

// defaultAnswerLimit is the limit when Options.IngressAnswers is zero: two
// callers per processor keeps every processor busy answering while the
// run queues hold only a handful of them (docs/benchmarks.md, "Fewer runnable goroutines":
// 2, 4 and 8 on two cores were within the run-to-run spread).
func defaultAnswerLimit() int { return 2 * runtime.GOMAXPROCS(0) }

// newAnswerPacer returns a pacer of limit callers (0: the default), or nil
// for a negative limit: no pacing, every caller hears at once.
func newAnswerPacer(limit int) *answerPacer {
	switch {
	case limit < 0:
		return nil
	case limit == 0:
		limit = defaultAnswerLimit()
	}
	return &answerPacer{limit: limit}
}

// settle hands a its outcome: at once if a slot is free, else after the
// callers settled before it. It is called on the committer's goroutine.
func (p *answerPacer) settle(a *pacedAnswer, err error) {
	a.err = err
	p.mu.Lock()
	if p.running >= p.limit {
		if p.head >= 256 && 2*p.head >= len(p.queue) {
			n := copy(p.queue, p.queue[p.head:])
			clear(p.queue[n:])
			p.queue, p.head = p.queue[:n], 0
		}
		p.queue = append(p.queue, a)
		p.mu.Unlock()
		return
	}
	p.running++
	p.mu.Unlock()
	p.wake(a)
}

// wake gives a its outcome, or passes its slot on if its caller left.
func (p *answerPacer) wake(a *pacedAnswer) {
	for a != nil {
		if a.state.CompareAndSwap(answerWaiting, answerWoken) {
			a.done <- a.err
			return
		}
		a = p.next() // the caller left: its slot goes to the next
	}
}

// next returns the oldest queued answer, keeping the slot it takes over,
// or frees the slot and returns nil.
func (p *answerPacer) next() *pacedAnswer {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.head == len(p.queue) {
		p.running--
		p.queue, p.head = p.queue[:0], 0
		return nil
	}
	a := p.queue[p.head]
	p.queue[p.head] = nil
	p.head++
	return a
}

// done is called by a woken caller once it has its outcome: the next
// settled caller is woken in its place.
func (p *answerPacer) done() { p.wake(p.next()) }

// leave is called by a caller that stops waiting before its outcome (its
// context ended). If it had been woken meanwhile, it passes its slot on.
func (p *answerPacer) leave(a *pacedAnswer) {
	if !a.state.CompareAndSwap(answerWaiting, answerLeft) {
		p.done()
	}
}

// settleOr gives a paced request's outcome to p, and an unpaced one's (a
// nil) straight to done.
func (a *pacedAnswer) settleOr(p *answerPacer, done chan error, err error) {
	if a == nil {
		done <- err
		return
	}
	p.settle(a, err)
}
