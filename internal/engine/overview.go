package engine

import (
	"context"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/partition"
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
