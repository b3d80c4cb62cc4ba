package engine

import (
	"context"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/store"
)

// QueuedByType counts, per function type, the messages the partitions hold
// and have not processed yet (queued, or in a batch in flight or failed),
// asked of every partition through its mailbox. It visits the mailboxes of
// addresses with work, never every address of the store.
func (e *Engine) QueuedByType(ctx context.Context) (map[address.TypeName]int, error) {
	reps, err := e.inspectAll(ctx, partition.Inspect{Kind: partition.InspectQueued})
	if err != nil {
		return nil, err
	}
	out := map[address.TypeName]int{}
	for _, r := range reps {
		for t, n := range r.Queued {
			out[t] += n
		}
	}
	return out, nil
}

// StateStats counts the ids, entries and bytes of a function type's
// durable state, reading at most maxKeys entries (store.DB.StateStats).
func (e *Engine) StateStats(t address.TypeName, maxKeys int) (store.StateStats, error) {
	return e.db.StateStats(t, maxKeys)
}

// StateStatsOf is StateStats counting only the ids keep accepts
// (store.DB.StateStatsOf).
func (e *Engine) StateStatsOf(t address.TypeName, maxKeys int, keep func(id string) bool) (store.StateStats, error) {
	return e.db.StateStatsOf(t, maxKeys, keep)
}
