package partition

import (
	"container/heap"
	"math"
	"sort"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/protocol"
)

// Delayed messages live in the store. The core keeps a window of them in
// memory — the earliest due, at most Config.TimerWindow — and reads the
// next ones through its Reader as the window drains; one scheduled past
// the window goes to the store with its commit and is not kept.
//
// The invariant is the horizon: every pending delayed message whose key
// (due, id) is at most the horizon is in memory, and none after it is
// (all: the horizon is past every key). So the earliest one in memory is
// the earliest pending one, and firing from memory fires in order.
//
// The store lags the core by the commits that are not durable yet, so two
// overlays stand in for it until they are: past, the delayed messages
// after the horizon that such a commit adds (the store does not have them
// yet), and removed, the keys such a commit deletes (the store still has
// them). A load from the store merges the one and skips the other, and a
// lookup by cancellation token does the same.

// DefaultTimerWindow is Config.TimerWindow's default: the delayed
// messages a partition keeps in memory.
const DefaultTimerWindow = 2_000

// timerItem is one scheduled wake-up: a delayed message, or the end of a
// batch's backoff.
type timerItem struct {
	due   int64
	seq   uint64 // tie-break: scheduling order, so firing is deterministic
	timer *Timer
	retry *retryRef
	pause *pauseRef
	gone  bool // cancelled; dropped lazily
	// commit is the commit that added the delayed message (0: durable
	// when the core got it); unloaded marks one read from the store or
	// past for an operator's scan, not in memory.
	commit   uint64
	unloaded bool
}

// pastTimer is a delayed message after the horizon whose commit is not
// durable yet.
type pastTimer struct {
	t      Timer
	commit uint64
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

// timerLow is the count of delayed messages in memory at or under which
// the core loads more; timerTarget the count a load fills to and an
// eviction leaves. The gap between them and the window makes each load
// and each eviction cover many messages.
func (c *Core) timerLow() int    { return c.window / 2 }
func (c *Core) timerTarget() int { return c.window - c.window/4 }

// afterHorizon reports whether a key lies past the window's horizon.
func (c *Core) afterHorizon(k TimerKey) bool { return !c.all && timerKeyLess(c.horizon, k) }

// TimersHeld is the number of delayed messages the core holds in memory:
// those in its window (at most Config.TimerWindow) and those past it that
// commits not yet durable add.
func (c *Core) TimersHeld() int { return len(c.pendingT) + len(c.past) }

// addTimer schedules a delayed message that commit adds (0: one the store
// holds) and indexes its token: in memory if it falls in the window, else
// in past until its commit is durable.
func (c *Core) addTimer(t Timer, commit uint64) {
	if t.Key.ID > c.timerSeq {
		c.timerSeq = t.Key.ID
	}
	if c.afterHorizon(t.Key) {
		if commit > c.durable {
			c.past[t.Key] = pastTimer{t: t, commit: commit}
			if tok := t.Env.GetCancellationToken(); tok != "" {
				c.pastTok[tokenKey{t.Env.GetCaller().GetId(), tok}] = t.Key
			}
		}
		return
	}
	c.keepTimer(t, commit)
	if len(c.pendingT) > c.window {
		c.evictTimers()
	}
}

// keepTimer puts a delayed message in memory.
func (c *Core) keepTimer(t Timer, commit uint64) {
	it := &timerItem{due: t.Key.Due, timer: &t, commit: commit}
	c.schedule(it)
	c.pendingT[t.Key.ID] = it
	if tok := t.Env.GetCancellationToken(); tok != "" {
		c.tokens[tokenKey{t.Env.GetCaller().GetId(), tok}] = t.Key.ID
	}
}

// evictTimers shrinks the window to timerTarget, dropping the latest
// delayed messages from memory (those whose commit is not durable yet go
// to past) and moving the horizon back to the last one kept.
func (c *Core) evictTimers() {
	items := make([]*timerItem, 0, len(c.pendingT))
	for _, it := range c.pendingT {
		items = append(items, it)
	}
	sort.Slice(items, func(i, j int) bool { return timerKeyLess(items[i].timer.Key, items[j].timer.Key) })
	keep := c.timerTarget()
	for _, it := range items[keep:] {
		t := it.timer
		delete(c.pendingT, t.Key.ID)
		tok := t.Env.GetCancellationToken()
		if tok != "" {
			delete(c.tokens, tokenKey{t.Env.GetCaller().GetId(), tok})
		}
		it.gone = true
		if it.commit > c.durable {
			c.past[t.Key] = pastTimer{t: *t, commit: it.commit}
			if tok != "" {
				c.pastTok[tokenKey{t.Env.GetCaller().GetId(), tok}] = t.Key
			}
		}
	}
	c.all = false
	c.horizon = items[keep-1].timer.Key
	// The heap drops what is gone now, so memory holds the window only.
	live := c.timers[:0]
	for _, it := range c.timers {
		if !it.gone {
			live = append(live, it)
		}
	}
	clear(c.timers[len(live):])
	c.timers = live
	heap.Init(&c.timers)
}

// loadTimers fills the window up to timerTarget with the next delayed
// messages after the horizon, from the store and past, and moves the
// horizon to the last one loaded (or past every key when none is left).
func (c *Core) loadTimers() error {
	want := c.timerTarget() - len(c.pendingT)
	var got []pastTimer
	more := false
	err := c.r.Timers(&c.horizon, func(t Timer) bool {
		if _, gone := c.removed[t.Key]; gone {
			return true
		}
		if _, dup := c.past[t.Key]; dup {
			return true // durable meanwhile; past has it
		}
		if len(got) == want {
			more = true
			return false
		}
		got = append(got, pastTimer{t: t})
		return true
	})
	if err != nil {
		return err
	}
	for _, p := range c.past {
		got = append(got, p)
	}
	sort.Slice(got, func(i, j int) bool { return timerKeyLess(got[i].t.Key, got[j].t.Key) })
	if len(got) > want {
		got, more = got[:want], true
	}
	for _, p := range got {
		if _, ok := c.past[p.t.Key]; ok {
			delete(c.past, p.t.Key)
			if tok := p.t.Env.GetCancellationToken(); tok != "" {
				delete(c.pastTok, tokenKey{p.t.Env.GetCaller().GetId(), tok})
			}
		}
		c.keepTimer(p.t, p.commit)
	}
	if more {
		c.horizon = got[len(got)-1].t.Key
	} else {
		c.all = true
	}
	return nil
}

// timerDurable forgets what the overlays hold for commits through id.
func (c *Core) timerDurable(id uint64) {
	c.durable = max(c.durable, id)
	for k, p := range c.past {
		if p.commit <= id {
			delete(c.past, k)
			if tok := p.t.Env.GetCancellationToken(); tok != "" {
				delete(c.pastTok, tokenKey{p.t.Env.GetCaller().GetId(), tok})
			}
		}
	}
	for k, cid := range c.removed {
		if cid <= id {
			delete(c.removed, k)
		}
	}
}

func (c *Core) schedule(it *timerItem) {
	c.schedSeq++
	it.seq = c.schedSeq
	c.timers.push(it)
}

// tokenTimer finds the pending delayed message sender scheduled with
// token: in memory (it set), or after the horizon (key set, ok).
func (c *Core) tokenTimer(sender, token string) (it *timerItem, key TimerKey, ok bool, err error) {
	k := tokenKey{sender, token}
	if id, found := c.tokens[k]; found {
		it = c.pendingT[id]
		return it, it.timer.Key, true, nil
	}
	if key, found := c.pastTok[k]; found {
		return nil, key, true, nil
	}
	key, found, err := c.r.TimerByToken(sender, token)
	if err != nil || !found {
		return nil, TimerKey{}, false, err
	}
	// At or before the horizon it would be in memory were it pending: it
	// fired or was cancelled by a commit not durable yet.
	if !c.afterHorizon(key) {
		return nil, TimerKey{}, false, nil
	}
	if _, gone := c.removed[key]; gone {
		return nil, TimerKey{}, false, nil
	}
	return nil, key, true, nil
}

// tokenPending reports whether sender has a delayed message pending with
// token.
func (c *Core) tokenPending(sender, token string) (bool, error) {
	_, _, ok, err := c.tokenTimer(sender, token)
	return ok, err
}

// cancelTimer drops a pending delayed message by token. Cancelling a token
// that is unknown or already delivered does nothing, as in StateFun.
func (c *Core) cancelTimer(sender, token string) error {
	it, key, ok, err := c.tokenTimer(sender, token)
	if err != nil || !ok {
		return err
	}
	if it != nil {
		c.dropTimer(it)
		return nil
	}
	if _, inPast := c.past[key]; inPast {
		delete(c.past, key)
		delete(c.pastTok, tokenKey{sender, token})
	}
	c.removeTimer(key, sender, token)
	return nil
}

// removeTimer records the deletion of a delayed message in the commit
// under construction, and keeps its key in removed until that commit is
// durable.
func (c *Core) removeTimer(k TimerKey, sender, token string) {
	c.removed[k] = c.commitID + 1
	c.pending.TimersRemoved = append(c.pending.TimersRemoved, RemovedTimer{Key: k, Sender: sender, Token: token})
}

// dropTimer removes a pending delayed message: one in memory, or one an
// operator's scan found past the horizon.
func (c *Core) dropTimer(it *timerItem) {
	t := it.timer
	sender, tok := t.Env.GetCaller().GetId(), t.Env.GetCancellationToken()
	if it.unloaded {
		if _, inPast := c.past[t.Key]; inPast {
			delete(c.past, t.Key)
			if tok != "" {
				delete(c.pastTok, tokenKey{sender, tok})
			}
		}
	} else {
		delete(c.pendingT, t.Key.ID)
		if tok != "" {
			delete(c.tokens, tokenKey{sender, tok})
		}
		it.gone = true
	}
	c.removeTimer(t.Key, sender, tok)
}

// scanTimers calls fn with every pending delayed message, in memory or
// not, until fn returns false: an operator's look at the delayed messages
// of an address reads every one the partition holds.
func (c *Core) scanTimers(fn func(it *timerItem) bool) error {
	for _, it := range c.pendingT {
		if !fn(it) {
			return nil
		}
	}
	if c.all {
		return nil
	}
	for _, p := range c.past {
		t := p.t
		if !fn(&timerItem{due: t.Key.Due, timer: &t, commit: p.commit, unloaded: true}) {
			return nil
		}
	}
	return c.r.Timers(&c.horizon, func(t Timer) bool {
		if _, gone := c.removed[t.Key]; gone {
			return true
		}
		if _, dup := c.past[t.Key]; dup {
			return true
		}
		return fn(&timerItem{due: t.Key.Due, timer: &t, unloaded: true})
	})
}

// unloadedAt reads the pending delayed message at key past the horizon.
func (c *Core) unloadedAt(k TimerKey) (*timerItem, error) {
	if p, ok := c.past[k]; ok {
		t := p.t
		return &timerItem{due: t.Key.Due, timer: &t, commit: p.commit, unloaded: true}, nil
	}
	prev := TimerKey{Partition: k.Partition, Due: k.Due, ID: k.ID - 1}
	if k.ID == 0 {
		prev.Due, prev.ID = k.Due-1, math.MaxUint64
	}
	var found *timerItem
	err := c.r.Timers(&prev, func(t Timer) bool {
		if t.Key == k {
			found = &timerItem{due: t.Key.Due, timer: &t, unloaded: true}
		}
		return false
	})
	return found, err
}

// fireDue delivers due delayed messages and restarts batches whose backoff
// ended, loading more delayed messages when the window runs low.
func (c *Core) fireDue() error {
	for {
		if !c.all && len(c.pendingT) <= c.timerLow() {
			if err := c.loadTimers(); err != nil {
				return err
			}
		}
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
		it.gone = true // popped: dropTimer must not see it in the heap
		c.dropTimer(it)
		env := &protocol.Envelope{Target: t.Env.GetTarget(), Caller: t.Env.GetCaller(), Argument: t.Env.GetArgument()}
		if err := c.produce(env); err != nil {
			return err
		}
	}
}
