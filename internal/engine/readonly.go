package engine

import (
	"context"
	"errors"

	"github.com/statefun-go/statefun/internal/engine/committer"
	"github.com/statefun-go/statefun/internal/partition"
)

// Read-only mode (Options.ReadOnly): the engine restores its partitions
// from a store opened read-only (a backup being looked into) and runs
// them, so that reads and inspections (inboxes, failing addresses,
// pauses) are answered as they would be, but it changes nothing: no
// function is invoked (an invocation is held, never sent), no request is
// made durable (a partition's commit is dropped; new work is refused with
// ErrReadOnly), so no message is delivered and no delayed message fires.

// ErrReadOnly is returned for work an engine in read-only mode refuses.
var ErrReadOnly = errors.New("engine: the runtime runs in read-only mode (statefun run --read-only): it writes nothing")

// readOnlyDurability makes nothing durable.
type readOnlyDurability struct{}

func (readOnlyDurability) Submit(committer.Request) error { return ErrReadOnly }
func (readOnlyDurability) Run(ctx context.Context) error  { <-ctx.Done(); return nil }
func (readOnlyDurability) Close()                         {}
func (readOnlyDurability) Pending() int                   { return 0 }

// heldCalls sends no invocation: the partition waits for it for good.
type heldCalls struct{}

func (heldCalls) invoke(*part, partition.Invocation) {}

// writable returns ErrReadOnly in read-only mode.
func (e *Engine) writable() error {
	if e.opts.ReadOnly {
		return ErrReadOnly
	}
	return nil
}
