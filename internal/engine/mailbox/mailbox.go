// Package mailbox is the event queue in front of one partition: any
// goroutine posts, one consumer takes everything posted so far in arrival
// order. It counts what waits, in events and in bytes, so that the engine
// can refuse new work before memory grows without bound.
package mailbox

import (
	"sync"
	"sync/atomic"
)

// Item is one posted event and the bytes it holds in memory.
type Item[E any] struct {
	Event E
	Size  int
}

// Mailbox is a multi-producer, single-consumer queue. Post never blocks.
type Mailbox[E any] struct {
	mu    sync.Mutex
	items []Item[E]
	spare []Item[E]
	wake  chan struct{}

	count atomic.Int64
	bytes atomic.Int64
	// posted and taken count the events ever posted and ever taken
	// (under mu): an event posted before posted read n has been taken
	// once taken reaches n.
	posted, taken uint64
}

// New returns an empty mailbox.
func New[E any]() *Mailbox[E] {
	return &Mailbox[E]{wake: make(chan struct{}, 1)}
}

// Post queues an event holding size bytes and wakes the consumer.
func (m *Mailbox[E]) Post(ev E, size int) {
	m.mu.Lock()
	m.items = append(m.items, Item[E]{ev, size})
	m.posted++
	m.mu.Unlock()
	m.count.Add(1)
	m.bytes.Add(int64(size))
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Nudge wakes the consumer without an event: something it waits for
// outside the mailbox changed.
func (m *Mailbox[E]) Nudge() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Wake receives a value after a Post; the consumer then calls Take.
func (m *Mailbox[E]) Wake() <-chan struct{} { return m.wake }

// Take returns everything posted since the last Take, oldest first. The
// events still count as waiting until the consumer passes the slice back to
// Release.
func (m *Mailbox[E]) Take() []Item[E] {
	m.mu.Lock()
	defer m.mu.Unlock()
	items := m.items
	m.items, m.spare = m.spare[:0], nil
	m.taken = m.posted
	return items
}

// Posted returns how many events were ever posted.
func (m *Mailbox[E]) Posted() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.posted
}

// Taken returns how many events were ever taken: every event posted
// before Posted returned n was handed to the consumer once Taken ≥ n.
func (m *Mailbox[E]) Taken() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.taken
}

// Release ends the count of items (returned by Take, now processed) and
// keeps the slice for reuse.
func (m *Mailbox[E]) Release(items []Item[E]) {
	var n int64
	for i := range items {
		n += int64(items[i].Size)
		items[i] = Item[E]{}
	}
	m.count.Add(-int64(len(items)))
	m.bytes.Add(-n)
	m.mu.Lock()
	if m.spare == nil {
		m.spare = items[:0]
	}
	m.mu.Unlock()
}

// Len returns the number of events posted and not yet released.
func (m *Mailbox[E]) Len() int { return int(m.count.Load()) }

// Bytes returns the bytes of the events posted and not yet released.
func (m *Mailbox[E]) Bytes() int64 { return m.bytes.Load() }
