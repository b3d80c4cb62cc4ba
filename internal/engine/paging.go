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
// A message of another source may be read before its delivery runs too:
// the committer writes the next group while the one before it syncs, and
// a written group is readable. The page takes it, and its delivery finds
// it taken.
//
// mu orders the deliveries against the runner. A delivery decides under
// it whether its message stays in the store, and posts it to the mailbox
// still under it; a page claims each message under it (claim), so that a
// delivery sees its message either still in the store or taken, never
// half-way; paging starts and ends under it. So no message is posted to
// the mailbox after paging started (startPost counts every one before),
// and a last read finds the store's end with no delivery in between.
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
// arrival order, under mu: the caller posts the message to the mailbox,
// still under mu, when it does not stay, so that paging never starts
// between the decision and the post. The runner checks again as it takes
// the message (pageOutTaken): the counts read here may lag its core by a
// step.
func (p *part) pageOut(k partition.InboxKey) bool {
	pg := &p.pg
	sk, ok := p.arr.lookup(k)
	if !ok || sk.Arrival < pg.next.Load() {
		// A page took it before its delivery ran: the committer writes the
		// next group while one syncs, so a page may read a message whose
		// delivery is still to come (and a commit may consume it, too).
		return true
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
// forgets it and every one below it (pages read in order). Under mu.
func (pg *paging) takeHanded(s uint64) bool {
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
	n, stop, err := p.readPage(now, room, false)
	if err != nil || stop != pageEnd {
		pg.more = stop == pageFull && n == room && room == pageSize
		return err
	}
	// The store had no more: read what was delivered since with the
	// deliveries held, and end paging if that is all.
	pg.mu.Lock()
	defer pg.mu.Unlock()
	m, stop, err := p.readPage(now, room-n, true)
	if err == nil && stop == pageEnd {
		pg.on.Store(false)
	}
	pg.more = stop == pageFull && n+m == room && room == pageSize
	return err
}

// readPage steps up to n messages from the store, from next on; locked
// says whether the caller holds mu.
func (p *part) readPage(now int64, n int, locked bool) (int, pageStop, error) {
	pg := &p.pg
	stepped, stop := 0, pageEnd
	err := p.inbox.ScanInboxFrom(p.id, pg.next.Load(), func(k store.InboxKey, env *protocol.Envelope) error {
		if stepped == n || p.heldBytes.Load() >= p.limitBytes {
			stop = pageFull
			return errPageStop
		}
		pk := partition.InboxKey{Partition: k.Partition, Source: k.Source, Seq: k.Seq}
		if !locked {
			pg.mu.Lock()
		}
		take, wait := p.claim(k, pk)
		if !locked {
			pg.mu.Unlock()
		}
		switch {
		case wait:
			stop = pageWait
			return errPageStop
		case !take:
			return nil
		}
		ev := partition.MessageArrived{Key: pk, Env: env}
		if m := env.GetMutation(); m != nil {
			ev.Mutation = mutationFromProto(m)
		}
		if err := p.core.Step(now, ev); err != nil {
			return err
		}
		p.hold(pk, proto.Size(env))
		stepped++
		return nil
	})
	if errors.Is(err, errPageStop) {
		err = nil
	}
	return stepped, stop, err
}

// claim decides what a page does with the message at k in the store, and
// moves next past it unless the page waits for it. The page takes it
// (take), or skips it (the core queued it itself), or waits (wait: its
// delivery has not run yet, and taking it now would overtake the
// messages before it). Under mu, so that the message's delivery
// (pageOut) sees it either still in the store, and leaves it there for
// the page, or taken: never both.
func (p *part) claim(k store.InboxKey, pk partition.InboxKey) (take, wait bool) {
	pg := &p.pg
	if k.Arrival >= pg.restoredEnd && k.Source == uint32(p.id) {
		_, held := p.held[pk]
		_, consumed := p.consuming[pk]
		switch {
		case held || consumed:
			pg.next.Store(k.Arrival + 1)
			return false, false
		case !pg.takeHanded(k.Seq):
			return false, true
		}
	}
	if _, delivering := p.arr.lookup(pk); !delivering {
		// Left in the store (leave forgot it), or found there by the
		// restore: it was counted as waiting. A message still known by
		// its number is one whose delivery has not run yet.
		pg.waiting.Add(-1)
	}
	p.arr.restored(k)
	pg.next.Store(k.Arrival + 1)
	return true, false
}
