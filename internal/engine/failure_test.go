package engine

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statefun-go/statefun/internal/engine/committer"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

func mutation(id string, ack partition.AckMode) partition.Mutation {
	return partition.Mutation{ID: id, Addr: addr("m"), State: "n", Op: partition.OpPut, Typename: countTypename, Value: []byte("5"), Ack: ack}
}

// A message whose typename is not UTF-8 cannot be stored: it fails alone,
// the messages committed with it are durable and the engine runs on.
func TestUnencodableMessageFailsOnlyItself(t *testing.T) {
	db := openStore(t, vfs.NewMem(), 2)
	e := newEngine(t, db, &counter{}, func(o *Options) { o.Driven = true })
	d := e.Driver()
	bad := msg("a", "x")
	bad.Argument.Typename = "test/\xff"
	var futures []*Future
	for _, env := range []any{msg("a", "1"), bad, msg("b", "2")} {
		f, err := d.Ingest(env.(*protocol.Envelope))
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, f)
	}
	m, err := d.Mutate(partition.Mutation{ID: "bad\xff", Addr: addr("m"), State: "n", Op: partition.OpPut, Typename: countTypename, Value: []byte("1"), Ack: AckAccepted})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Commit(); err != nil {
		t.Fatalf("the group commit failed: %v", err)
	}
	for i, f := range futures {
		if !f.Done() {
			t.Fatalf("message %d was not answered", i)
		}
		if (f.Err() != nil) != (i == 1) {
			t.Fatalf("message %d: err %v", i, f.Err())
		}
	}
	if !strings.Contains(futures[1].Err().Error(), "encode") {
		t.Fatalf("the bad message failed with %v, want an encoding error", futures[1].Err())
	}
	if !m.Done() || m.Err() == nil {
		t.Fatalf("the unencodable accepted mutation: done %v, err %v", m.Done(), m.Err())
	}
	if e.Err() != nil {
		t.Fatalf("the engine stopped: %v", e.Err())
	}
	n := 0
	for p := range 2 {
		db.ScanInbox(p, func(store.InboxKey, *protocol.Envelope) error { n++; return nil })
	}
	if n != 2 {
		t.Fatalf("%d messages in the inboxes, want the 2 good ones", n)
	}
}

// A store error answers every caller waiting on the committer — ingress,
// accepted and committed-ack mutations, egress pops — with an error that
// wraps ErrClosed and the cause, and stops the engine with the cause.
func TestStoreErrorAnswersEveryCaller(t *testing.T) {
	db := openStore(t, vfs.NewMem(), 1)
	e := newEngine(t, db, &counter{}, nil)
	diskErr := errors.New("disk on fire")
	entered := make(chan struct{})
	release := make(chan struct{})
	var first atomic.Bool
	e.com = committer.New(db, committer.Options{Sync: func(*store.Batch) error {
		if !first.Swap(true) {
			close(entered)
		}
		<-release
		return diskErr
	}})
	putEgress(t, e, "r1")
	e.Start()
	ctx := context.Background()

	errs := make(chan error, 5)
	go func() { errs <- e.Ingest(ctx, msg("a", "1")) }()
	<-entered // the first group is syncing; everything else queues behind it
	go func() { errs <- e.Ingest(ctx, msg("a", "2")) }()
	go func() { _, err := e.Mutate(ctx, mutation("acc", AckAccepted)); errs <- err }()
	go func() { _, err := e.Mutate(ctx, mutation("com", AckCommitted)); errs <- err }()
	go func() { _, _, err := e.PopEgress(ctx, "io/egress", "topic"); errs <- err }()
	waitFor(t, "four requests queued behind the sync", func() bool { return e.com.Pending() == 4 })
	close(release)
	for range 5 {
		err := <-errs
		if !errors.Is(err, ErrClosed) || !errors.Is(err, diskErr) {
			t.Fatalf("a caller got %v, want an error wrapping ErrClosed and the store error", err)
		}
	}
	<-e.Failed()
	if !errors.Is(e.Err(), diskErr) {
		t.Fatalf("Err() = %v, want the store error", e.Err())
	}
	if err := e.Ingest(ctx, msg("a", "3")); !errors.Is(err, diskErr) {
		t.Fatalf("Ingest after the failure = %v, want the store error", err)
	}
}
