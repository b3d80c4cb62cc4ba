package engine

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
)

// The backlog of a partition is bounded in bytes: messages held in memory
// (in flight, queued in the core) count until a commit consumes them.
func TestBacklogBoundedInBytes(t *testing.T) {
	db := openStore(t, vfs.NewMem(), 1)
	e := newEngine(t, db, &counter{}, func(o *Options) { o.Driven = true; o.MaxBacklogBytes = 1000 })
	d := e.Driver()
	big := strings.Repeat("x", 300)
	taken := 0
	for range 10 {
		f, err := d.Ingest(msg("a", big))
		if errors.Is(err, ErrBusy) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Commit(); err != nil || !f.Done() {
			t.Fatal(err)
		}
		if err := d.Step(0); err != nil { // into the core: no call is run
			t.Fatal(err)
		}
		taken++
	}
	if taken != 3 {
		t.Fatalf("took %d messages of over 300 bytes under a 1000-byte limit, want 3 before ErrBusy", taken)
	}
	if _, err := d.Mutate(mutation("m", AckApplied)); !errors.Is(err, ErrBusy) {
		t.Fatalf("Mutate on a full partition = %v, want ErrBusy", err)
	}
	// Once the function runs and the commits consume them, there is room.
	settle(t, d, 1)
	if _, err := d.Ingest(msg("a", big)); err != nil {
		t.Fatalf("Ingest after the backlog drained: %v", err)
	}
}

// Reads that take a turn in the mailbox (of an address with an applied
// write not yet durable) count against the partition's queue limit: a
// flood of them gets ErrBusy instead of growing the mailbox without bound.
func TestReadsCountAgainstQueueLimit(t *testing.T) {
	db := openStore(t, vfs.NewMem(), 1)
	e := newEngine(t, db, &counter{}, func(o *Options) { o.Driven = true; o.MaxBacklog = 2 })
	d := e.Driver()
	if _, err := d.Mutate(mutation("w", AckApplied)); err != nil {
		t.Fatal(err)
	}
	if err := d.Step(0); err != nil { // applied; its commit waits
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range 2 {
		go e.Read(ctx, addr("m"), "")
	}
	waitFor(t, "two reads in the mailbox", func() bool { return d.Pending(0) == 2 })
	ctx3, cancel3 := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel3()
	if _, err := e.Read(ctx3, addr("m"), ""); !errors.Is(err, ErrBusy) {
		t.Fatalf("a third read = %v, want ErrBusy", err)
	}
	// An address with nothing waiting is read from the store, full or not.
	if _, err := e.Read(ctx3, addr("other"), ""); err != nil {
		t.Fatalf("a read of a clean address on a full partition = %v, want an answer from the store", err)
	}
}

// An edited message counts in the backlog at its new size: an operator who
// grows a queued message grows what the partition holds in memory.
func TestEditedMessageRecountedInBacklog(t *testing.T) {
	ctx := context.Background()
	db := openStore(t, vfs.NewMem(), 1)
	e := newEngine(t, db, &counter{}, func(o *Options) { o.MaxBacklogBytes = 1200 })
	e.Start()
	if _, err := e.Pause(ctx, PauseRequest{Mutation: "p", Addr: addr("a"), Principal: "op"}); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"1", "2"} {
		if err := e.Ingest(ctx, msg("a", v)); err != nil {
			t.Fatal(err)
		}
	}
	var first partition.InboxKey
	waitFor(t, "two queued messages", func() bool {
		in, err := e.Inbox(ctx, addr("a"))
		if err != nil || len(in.Queued) != 2 {
			return false
		}
		first = in.Queued[0].Key
		return true
	})
	held := e.parts[0].heldBytes.Load()
	big := &protocol.TypedValue{Typename: "io.statefun.types/string", HasValue: true, Value: []byte(strings.Repeat("x", 1500))}
	rc, err := e.Repair(ctx, partition.Mutation{ID: "e1", Addr: addr("a"), Op: partition.OpEditMessage, Principal: "op",
		Repair: &partition.MessageRepair{Key: &first, Argument: big}})
	if err != nil || rc.Reject != partition.Applied {
		t.Fatalf("edit: %+v, %v", rc, err)
	}
	if now := e.parts[0].heldBytes.Load(); now < held+1500 {
		t.Fatalf("held bytes %d before the edit, %d after it grew a message by 1500 bytes", held, now)
	}
	if err := e.Ingest(ctx, msg("a", "3")); !errors.Is(err, ErrBusy) {
		t.Fatalf("Ingest past the byte limit after the edit = %v, want ErrBusy", err)
	}
}
