package engine

import (
	"fmt"
	"sync"

	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/store"
)

// arrivals numbers the messages of one partition's inbox in the order the
// committer writes them, which is the order it delivers them: the inbox
// key starts with that number, so a restart replays the inbox in arrival
// order (a message from another partition does not jump ahead of an
// accepted mutation that arrived before it). The core names messages by
// (partition, source, seq); arrivals remembers the number of each message
// still in the inbox, to delete its key when a commit consumes it.
//
// Each part (each assignment of a partition, in cluster mode) has its own,
// so a request of a revoked assignment never touches the numbers of the
// next one. Written by the durability goroutine (requests' Encode, Fail
// and the deliveries of Durable), by the restore before the part runs, and
// by the part's runner for the messages it pages in from the store
// (paging.go) — hence the lock.
type arrivals struct {
	mu   sync.Mutex
	next uint64
	keys map[partition.InboxKey]uint64
}

func newArrivals() *arrivals {
	return &arrivals{keys: map[partition.InboxKey]uint64{}}
}

// restored records a message found in the inbox at start.
func (a *arrivals) restored(k store.InboxKey) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.keys[partition.InboxKey{Partition: k.Partition, Source: k.Source, Seq: k.Seq}] = k.Arrival
	a.next = max(a.next, k.Arrival+1)
}

// assign numbers a message that is being written.
func (a *arrivals) assign(k partition.InboxKey) store.InboxKey {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := a.next
	a.next++
	a.keys[k] = n
	return store.InboxKey{Partition: k.Partition, Arrival: n, Source: k.Source, Seq: k.Seq}
}

// consume returns the store key of a message a commit consumes, and forgets it.
func (a *arrivals) consume(k partition.InboxKey) (store.InboxKey, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	n, ok := a.keys[k]
	if !ok {
		return store.InboxKey{}, fmt.Errorf("engine: partition %d consumed message %d of source %d, which is not in its inbox", k.Partition, k.Seq, k.Source)
	}
	delete(a.keys, k)
	return store.InboxKey{Partition: k.Partition, Arrival: n, Source: k.Source, Seq: k.Seq}, nil
}

// lookup returns the store key of a message still in the inbox.
func (a *arrivals) lookup(k partition.InboxKey) (store.InboxKey, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	n, ok := a.keys[k]
	return store.InboxKey{Partition: k.Partition, Arrival: n, Source: k.Source, Seq: k.Seq}, ok
}

// forget drops a message that was numbered but will not be written.
func (a *arrivals) forget(k partition.InboxKey) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.keys, k)
}

// skipTo makes the next number at least n: the restore calls it with the
// number above the inbox's last message, whose messages past the
// partition's bound it leaves in the store (paging.go).
func (a *arrivals) skipTo(n uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.next = max(a.next, n)
}
