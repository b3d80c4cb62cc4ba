package engine

import (
	"sync"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/partition"
)

// pendingWrites knows which addresses of a partition have applied writes
// that are not yet durable, and which function types have specs learned
// but not yet durable. A read of anything else is answered from the store
// by the caller's goroutine, without a turn in the partition's mailbox:
// behind a runner busy with function traffic that turn was most of a read's
// time under load (docs/explanation/engine.md, "Goroutines").
//
// The runner marks a commit's addresses when it hands the commit on, which
// is before it answers anyone who could have seen those writes (the replies
// of a step go out last); the committer clears them once the commit is
// durable, and only if no later commit of the partition wrote them since.
// A read that finds an address clean and then reads the store sees every
// write anybody was told about: durable ones are in the store, and an
// applied one would have marked the address before its reply.
type pendingWrites struct {
	mu    sync.Mutex
	addrs map[address.Address]uint64 // the last commit that wrote the address
	types map[address.TypeName]uint64
}

func newPendingWrites() *pendingWrites {
	return &pendingWrites{addrs: map[address.Address]uint64{}, types: map[address.TypeName]uint64{}}
}

// mark records the writes of c, about to be handed to the committer.
func (w *pendingWrites) mark(c *partition.Commit) {
	if len(c.State) == 0 && len(c.Specs) == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range c.State {
		w.addrs[s.Addr] = c.ID
	}
	for t := range c.Specs {
		w.types[t] = c.ID
	}
}

// durable forgets the writes of c, now in the store, unless a later
// commit wrote the same address or type again.
func (w *pendingWrites) durable(c *partition.Commit) {
	if len(c.State) == 0 && len(c.Specs) == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range c.State {
		if w.addrs[s.Addr] == c.ID {
			delete(w.addrs, s.Addr)
		}
	}
	for t := range c.Specs {
		if w.types[t] == c.ID {
			delete(w.types, t)
		}
	}
}

// clean reports whether the store holds everything applied to a and its
// type's specs.
func (w *pendingWrites) clean(a address.Address) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, addr := w.addrs[a]
	_, typ := w.types[a.Type]
	return !addr && !typ
}

// durableReader reads what is durable: the store's entries and the specs
// the registry holds once their commit is durable.
type durableReader struct {
	storeReader
	reg *specRegistry
}

func (r durableReader) Specs(t address.TypeName) ([]partition.Spec, error) { return r.reg.get(t), nil }
