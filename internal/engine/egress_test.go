package engine

import (
	"context"
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statefun-go/statefun/internal/protocol"
)

func putEgress(t *testing.T, e *Engine, texts ...string) {
	t.Helper()
	b := e.db.NewBatch()
	for _, s := range texts {
		e.egressSeq++
		b.PutEgress("io/egress", "topic", e.egressSeq, &protocol.EgressRecord{EgressNamespace: "io", EgressType: "egress",
			Argument: &protocol.TypedValue{Typename: "test/text", HasValue: true, Value: []byte(s)}})
	}
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
}

type popResult struct {
	text string
	ok   bool
	err  error
}

func pop(e *Engine, ctx context.Context, out chan<- popResult) {
	rec, ok, err := e.PopEgress(ctx, "io/egress", "topic")
	out <- popResult{string(rec.GetArgument().GetValue()), ok, err}
}

// Pops hand out records oldest first, each once; a pop waiting for its
// removal to be durable honours its context and holds up no other pop.
func TestPopEgress(t *testing.T) {
	db := openStore(t, vfs.NewMem(), 1)
	e := newEngine(t, db, &counter{}, func(o *Options) { o.Driven = true })
	d := e.Driver()
	putEgress(t, e, "r1", "r2", "r3")

	out := make(chan popResult, 3)
	ctx, cancel := context.WithCancel(context.Background())
	go pop(e, ctx, out)
	waitFor(t, "the first pop to wait for its commit", func() bool { return d.Commits() == 1 })
	// The first pop waits for a commit the test has not run: a second pop
	// is not held up by it and claims the next record.
	go pop(e, context.Background(), out)
	waitFor(t, "the second pop to wait for its commit", func() bool { return d.Commits() == 2 })
	cancel()
	if r := <-out; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("the cancelled pop returned %+v, want context.Canceled", r)
	}
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	if r := <-out; r.err != nil || !r.ok || r.text != "r2" {
		t.Fatalf("second pop = %+v, want r2", r)
	}
	// r1's removal went ahead: the cancelled caller lost it (at most once).
	go pop(e, context.Background(), out)
	waitFor(t, "the third pop to wait for its commit", func() bool { return d.Commits() == 1 })
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	if r := <-out; r.err != nil || !r.ok || r.text != "r3" {
		t.Fatalf("third pop = %+v, want r3", r)
	}
	rec, ok, err := e.PopEgress(context.Background(), "io/egress", "topic")
	if err != nil || ok {
		t.Fatalf("pop of an empty route = %v, %v, %v", rec, ok, err)
	}
	if _, _, ok, _ := db.NextEgress("io/egress", "topic", 0); ok {
		t.Fatal("a record is left in the store")
	}
}
