package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/store"
)

// In read-only mode over a store that holds a due delayed message and a
// message waiting in an inbox, the engine invokes no function, fires no
// timer and refuses new work, while reads and inspections answer.
func TestReadOnlyInvokesNothing(t *testing.T) {
	fs := vfs.NewMem()
	db, err := store.Open("data", store.Options{Partitions: 2, FS: fs, Logger: quietPebble{}})
	if err != nil {
		t.Fatal(err)
	}
	fn := &counter{}
	e, err := New(Options{Store: db, Functions: fn, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	e.Start()
	if err := e.Ingest(context.Background(), msg("a", "one")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a counted", func() bool { return count(t, e, "a") == "1" })
	e.Close()
	// A due delayed message for t and a message waiting for b, as a crash
	// or a backup would leave them.
	b := db.NewBatch()
	b.PutTimer(store.TimerKey{Partition: address.Partition("t", 2), Due: time.Now().Add(-time.Second).UnixMilli(), ID: 1}, msg("t", "late"))
	b.PutInbox(store.InboxKey{Partition: address.Partition("b", 2), Arrival: 1 << 20, Source: store.SourceIngress, Seq: 1 << 20}, msg("b", "queued"))
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	ro, err := store.Open("data", store.Options{ReadOnly: true, FS: fs, Logger: quietPebble{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ro.Close() })
	fn2 := &counter{}
	e2 := newEngine(t, ro, fn2, func(o *Options) { o.ReadOnly = true })
	e2.Start()
	time.Sleep(300 * time.Millisecond)
	if got := fn2.messages(); len(got) != 0 {
		t.Fatalf("read-only mode invoked the function with %v", got)
	}
	if got := count(t, e2, "a"); got != "1" {
		t.Errorf("a reads %q in read-only mode, want 1", got)
	}
	in, err := e2.Inbox(context.Background(), address.Address{Type: counterType, ID: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(in.Queued) + inflightOf(in); n != 1 {
		t.Errorf("b's inbox holds %d messages in read-only mode, want the waiting one: %+v", n, in)
	}
	if err := e2.Ingest(context.Background(), msg("c", "new")); !errors.Is(err, ErrReadOnly) {
		t.Errorf("Ingest in read-only mode: %v, want ErrReadOnly", err)
	}
	if _, err := e2.Mutate(context.Background(), partition.Mutation{}); !errors.Is(err, ErrReadOnly) {
		t.Errorf("Mutate in read-only mode: %v, want ErrReadOnly", err)
	}
	if _, err := e2.Pause(context.Background(), PauseRequest{}); !errors.Is(err, ErrReadOnly) {
		t.Errorf("Pause in read-only mode: %v, want ErrReadOnly", err)
	}
}

func inflightOf(in *partition.Inbox) int {
	if in.Inflight == nil {
		return 0
	}
	return len(in.Inflight.Messages)
}
