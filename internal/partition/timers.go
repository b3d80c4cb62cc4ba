package partition

import (
	"container/heap"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/protocol"
)

// timerItem is one scheduled wake-up: a delayed message, or the end of a
// batch's backoff.
type timerItem struct {
	due   int64
	seq   uint64 // tie-break: scheduling order, so firing is deterministic
	timer *Timer
	retry *retryRef
	pause *pauseRef
	gone  bool // cancelled; dropped lazily
}

// retryRef is the end of a batch's backoff after its attempt-th failure:
// an attempt sent earlier (a resume retries at once) makes it stale.
type retryRef struct {
	addr    address.Address
	b       *batch
	attempt int
}

type timerHeap []*timerItem

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if h[i].due != h[j].due {
		return h[i].due < h[j].due
	}
	return h[i].seq < h[j].seq
}
func (h timerHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)   { *h = append(*h, x.(*timerItem)) }
func (h *timerHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return it
}

func (h *timerHeap) push(it *timerItem) {
	heap.Push(h, it)
}

func (h *timerHeap) dropCancelled() {
	for len(*h) > 0 && (*h)[0].gone {
		heap.Pop(h)
	}
}

// addTimer schedules a delayed message and indexes its token.
func (c *Core) addTimer(t Timer) {
	it := &timerItem{due: t.Key.Due, timer: &t}
	c.schedule(it)
	c.pendingT[t.Key.ID] = it
	if tok := t.Env.GetCancellationToken(); tok != "" {
		c.tokens[tokenKey{t.Env.GetCaller().GetId(), tok}] = t.Key.ID
	}
	if t.Key.ID > c.timerSeq {
		c.timerSeq = t.Key.ID
	}
}

func (c *Core) schedule(it *timerItem) {
	c.schedSeq++
	it.seq = c.schedSeq
	c.timers.push(it)
}

// cancelTimer drops a pending delayed message by token. Cancelling a token
// that is unknown or already delivered does nothing, as in StateFun.
func (c *Core) cancelTimer(sender, token string) {
	k := tokenKey{sender, token}
	id, ok := c.tokens[k]
	if !ok {
		return
	}
	delete(c.tokens, k)
	it := c.pendingT[id]
	delete(c.pendingT, id)
	it.gone = true
	c.pending.TimersRemoved = append(c.pending.TimersRemoved, it.timer.Key)
}

// fireDue delivers due delayed messages and restarts batches whose backoff
// ended.
func (c *Core) fireDue() error {
	for {
		c.timers.dropCancelled()
		if len(c.timers) == 0 || c.timers[0].due > c.now {
			return nil
		}
		it := heap.Pop(&c.timers).(*timerItem)
		if r := it.pause; r != nil {
			if err := c.expire(r); err != nil {
				return err
			}
			continue
		}
		if r := it.retry; r != nil {
			mb := c.mailboxes[r.addr]
			// A paused address keeps its failed batch until it resumes.
			if mb != nil && mb.inflight == r.b && r.b.waiting && r.b.attempt == r.attempt && !c.paused(r.addr) {
				if err := c.send(r.addr, r.b); err != nil {
					return err
				}
			}
			continue
		}
		t := it.timer
		delete(c.pendingT, t.Key.ID)
		if tok := t.Env.GetCancellationToken(); tok != "" {
			delete(c.tokens, tokenKey{t.Env.GetCaller().GetId(), tok})
		}
		c.pending.TimersRemoved = append(c.pending.TimersRemoved, t.Key)
		env := &protocol.Envelope{Target: t.Env.GetTarget(), Caller: t.Env.GetCaller(), Argument: t.Env.GetArgument()}
		if err := c.produce(env); err != nil {
			return err
		}
	}
}
