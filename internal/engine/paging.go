package engine

import (
	"errors"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
	"google.golang.org/protobuf/proto"
)

// Paging: a partition holds a bounded number of messages in memory.
//
// The ingresses and the state API refuse work for a partition whose
// backlog is full (Options.MaxBacklog, MaxBacklogBytes). Three kinds of
// messages cannot be refused: those a function sends to another
// partition, the delayed messages that fall due, and the inbox a restart
// finds. They are durable in the inbox already, and refusing them would
// mean stopping the partition that sent them — which can deadlock two
// partitions that message each other. So a partition at its bound leaves
// them in its inbox in the store and pages them in, in arrival order, as
// its backlog drains to half the bound. Its core does the same with the
// messages it sends its own addresses (partition.Config.MaxQueued): it
// hands them over rather than queue them, and they come back through
// here.
//
// Order. Deliveries reach a part in arrival order: the durability
// goroutine numbers the inbox's messages as it encodes them and delivers
// them in that order once durable. While paging, every delivery stays in
// the store, so from next on the store holds every message the core has
// not taken, and paging in from next in key order keeps the arrival order.
// A page is read only once every event posted before paging started was
// taken: those arrived earlier.
//
// What the scan finds from next on is a message to take, except the core's
// own messages that it queued at once: they sit in the inbox too (until a
// durable commit consumes them). The part knows those: held (queued) or
// consumed by a commit not yet durable (consuming). A message of the partition
// itself that is neither, nor known as handed over, is one whose delivery
// has not run yet; the page stops there and the delivery wakes the runner.
//
// Paging ends under mu, which deliveries take while paging: a last read
// finds the store's end with no delivery in between, and the next one
// goes to the mailbox again.
type paging struct {
	// on is set while the store holds messages of the partition its core
	// has not taken.
	on atomic.Bool
	// next is the arrival number from which the store holds them: every
	// message below it was delivered or paged in.
	next atomic.Uint64
	// startPost is the mailbox's post count when paging started.
	startPost atomic.Uint64
	// waiting is how many messages wait in the store (a gauge).
	waiting atomic.Int64

	mu sync.Mutex
	// handed is the sequence numbers of the partition's own messages its
	// core handed over that wait in the store, in ranges (a core hands a
	// run of consecutive ones over). Under mu.
	handed []seqRange

	// restoredEnd is the arrival number above the inbox a restart found:
	// every message below it, the partition's own too, was in the store
	// before the core was built. Set before the part runs.
	restoredEnd uint64
	// more is set when the last page stopped at its size with room left:
	// the runner reads the next one before it waits. Only the runner
	// touches it.
	more bool
}

// inboxReader reads the messages a partition left in its inbox.
type inboxReader interface {
	ScanInboxFrom(p int, from uint64, fn func(k store.InboxKey, env *protocol.Envelope) error) error
}

// seqRange is the sequence numbers lo..hi, inclusive.
type seqRange struct{ lo, hi uint64 }

// pageSize is the most messages one page reads: the runner answers its
// other events between two.
const pageSize = 1024

// atBound reports whether the partition's core and mailbox hold as many
// messages, or bytes of them, as they may.
func (p *part) atBound() bool {
	return int64(p.mb.Len())+p.queued.Load() >= int64(p.limit) || p.mb.Bytes()+p.heldBytes.Load() >= p.limitBytes
}

// mailboxFull reports whether the events waiting in the mailbox alone
// reach the partition's bound.
func (p *part) mailboxFull() bool {
	return int64(p.mb.Len()) >= int64(p.limit) || p.mb.Bytes() >= p.limitBytes
}

// pageOut reports whether a delivered message, durable in the inbox,
// stays there: the partition is paging, or reached its bound now, or the
// message was paged in already. Called by the durability goroutine, in
// arrival order. The runner checks again as it takes the message
// (pageOutTaken): the counts read here may lag its core by a step.
func (p *part) pageOut(k partition.InboxKey) bool {
	pg := &p.pg
	sk, ok := p.arr.lookup(k)
	if !pg.on.Load() && !p.atBound() {
		// Not known any more: paged in and consumed.
		return !ok || sk.Arrival < pg.next.Load()
	}
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if !ok || sk.Arrival < pg.next.Load() {
		return true // paged in already
	}
	if !pg.on.Load() && !p.atBound() {
		return false
	}
	p.leave(k, sk.Arrival)
	p.mb.Nudge() // a page may have stopped for it
	return true
}

// pageOutTaken reports whether a message the runner took from its
// mailbox stays in the store instead: the core holds its bound, or the
// partition pages. Every message posted before paging began reaches here
// before the first page is read, so one below next lowers it.
func (p *part) pageOutTaken(k partition.InboxKey) bool {
	pg := &p.pg
	if !pg.on.Load() && p.core.Backlog() < p.limit && p.heldBytes.Load() < p.limitBytes {
		return false
	}
	pg.mu.Lock()
	defer pg.mu.Unlock()
	sk, ok := p.arr.lookup(k)
	if !ok {
		return false
	}
	p.leave(k, sk.Arrival)
	return true
}

// leave leaves a message, at arrival in the inbox, in the store: paging
// starts at it, or reaches back to it. Under mu.
func (p *part) leave(k partition.InboxKey, arrival uint64) {
	pg := &p.pg
	switch {
	case !pg.on.Load():
		pg.next.Store(arrival)
		pg.startPost.Store(p.mb.Posted())
		pg.on.Store(true)
	case arrival < pg.next.Load():
		pg.next.Store(arrival)
	}
	if k.Source == uint32(p.id) {
		pg.handed = addSeq(pg.handed, k.Seq)
	}
	p.arr.forget(k) // paging in numbers it again
	pg.waiting.Add(1)
}

// addSeq adds s to the ranges, kept in order.
func addSeq(rs []seqRange, s uint64) []seqRange {
	i := sort.Search(len(rs), func(i int) bool { return rs[i].hi+1 >= s })
	switch {
	case i < len(rs) && rs[i].lo <= s && s <= rs[i].hi:
		return rs // there already
	case i < len(rs) && rs[i].hi+1 == s:
		rs[i].hi = s
		if i+1 < len(rs) && rs[i+1].lo == s+1 {
			rs[i].hi = rs[i+1].hi
			rs = append(rs[:i+1], rs[i+2:]...)
		}
		return rs
	case i < len(rs) && rs[i].lo == s+1:
		rs[i].lo = s
		return rs
	}
	return slices.Insert(rs, i, seqRange{s, s})
}

// takeHanded reports whether s is a handed-over sequence number, and
// forgets it and every one below it (pages read in order).
func (pg *paging) takeHanded(s uint64) bool {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	for len(pg.handed) > 0 && pg.handed[0].hi < s {
		pg.handed = pg.handed[1:]
	}
	if len(pg.handed) == 0 || pg.handed[0].lo > s {
		return false
	}
	pg.handed[0].lo = s + 1
	if pg.handed[0].lo > pg.handed[0].hi {
		pg.handed = pg.handed[1:]
	}
	return true
}

// pageStop is why a page ended.
type pageStop int

const (
	pageEnd  pageStop = iota // the store holds no more
	pageFull                 // the page, or the partition, is full
	pageWait                 // a message whose delivery has not run yet
)

var errPageStop = errors.New("engine: page ends")

// pageDue reports whether pageIn would read a page now.
func (p *part) pageDue() bool {
	return p.pg.on.Load() && p.mb.Taken() >= p.pg.startPost.Load() &&
		p.core.Backlog() <= p.limit/2 && p.heldBytes.Load() <= p.limitBytes/2
}

// pageIn steps messages the store holds for the partition into its core,
// once its backlog drained to half its bound, up to the bound.
func (p *part) pageIn(now int64) error {
	pg := &p.pg
	pg.more = false
	if !p.pageDue() {
		return nil
	}
	backlog := p.core.Backlog()
	room := min(p.limit-backlog, pageSize)
	n, stop, err := p.readPage(now, room)
	if err != nil || stop != pageEnd {
		pg.more = stop == pageFull && n == room && room == pageSize
		return err
	}
	// The store had no more: read what was delivered since with the
	// deliveries held, and end paging if that is all.
	pg.mu.Lock()
	defer pg.mu.Unlock()
	m, stop, err := p.readPage(now, room-n)
	if err == nil && stop == pageEnd {
		pg.on.Store(false)
	}
	pg.more = stop == pageFull && n+m == room && room == pageSize
	return err
}

// readPage steps up to n messages from the store, from next on.
func (p *part) readPage(now int64, n int) (int, pageStop, error) {
	pg := &p.pg
	stepped, stop := 0, pageEnd
	err := p.inbox.ScanInboxFrom(p.id, pg.next.Load(), func(k store.InboxKey, env *protocol.Envelope) error {
		if stepped == n || p.heldBytes.Load() >= p.limitBytes {
			stop = pageFull
			return errPageStop
		}
		pk := partition.InboxKey{Partition: k.Partition, Source: k.Source, Seq: k.Seq}
		if k.Arrival >= pg.restoredEnd && k.Source == uint32(p.id) {
			_, held := p.held[pk]
			_, consumed := p.consuming[pk]
			switch {
			case held || consumed:
				pg.next.Store(k.Arrival + 1) // the core queued it itself
				return nil
			case !pg.takeHanded(k.Seq):
				stop = pageWait
				return errPageStop
			}
		}
		ev := partition.MessageArrived{Key: pk, Env: env}
		if m := env.GetMutation(); m != nil {
			ev.Mutation = mutationFromProto(m)
		}
		p.arr.restored(k)
		if err := p.core.Step(now, ev); err != nil {
			return err
		}
		p.hold(pk, proto.Size(env))
		pg.next.Store(k.Arrival + 1)
		pg.waiting.Add(-1)
		stepped++
		return nil
	})
	if errors.Is(err, errPageStop) {
		err = nil
	}
	return stepped, stop, err
}
