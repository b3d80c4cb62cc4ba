package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

func srcPos(next int64) store.SourcePosition {
	return store.SourcePosition{Ingress: "test/kafka", Topic: "in", Partition: 3, Next: next}
}

// A source batch's messages (to several partitions), its dead letters and
// its position land together or not at all: after a crash the store holds
// exactly the synced batches, the functions see exactly their messages, and
// the position says where to resume.
func TestIngestFromLandsWithItsPosition(t *testing.T) {
	const parts = 2
	fs := vfs.NewCrashableMem()
	db := openStore(t, fs, parts)
	e := newEngine(t, db, &counter{}, func(o *Options) { o.Driven = true })
	d := e.Driver()
	x, y := idIn(0, parts, "x"), idIn(1, parts, "y")

	a := SourceBatch{Position: srcPos(10), Messages: []*protocol.Envelope{msg(x, "1"), msg(y, "2"), msg(x, "3")},
		DeadLetters: []store.DeadLetter{{Ingress: "test/kafka", Topic: "in", Partition: 3, Offset: 8, Reason: "null-key", KeyNull: true, Value: []byte("v")}}}
	f, err := d.IngestFrom(a)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Commit(); err != nil || !f.Done() || f.Err() != nil {
		t.Fatalf("batch A: %v %v", err, f.Err())
	}
	// Batch B is handed to the committer but never synced.
	if _, err := d.IngestFrom(SourceBatch{Position: srcPos(20), Messages: []*protocol.Envelope{msg(x, "4"), msg(y, "5")},
		DeadLetters: []store.DeadLetter{{Ingress: "test/kafka", Topic: "in", Partition: 3, Offset: 15, Reason: "no-route"}}}); err != nil {
		t.Fatal(err)
	}
	crashed := fs.CrashClone(vfs.CrashCloneCfg{})
	e.Close()

	db2 := openStore(t, crashed, parts)
	e2 := newEngine(t, db2, &counter{}, func(o *Options) { o.Driven = true })
	pos, err := e2.SourcePositions("test/kafka")
	if err != nil || len(pos) != 1 || pos[0] != srcPos(10) {
		t.Fatalf("positions after the crash: %v %v; want only %v", pos, err, srcPos(10))
	}
	var dead []store.DeadLetter
	if err := e2.Reads().ScanDeadLetters(store.DeadLetterFilter{}, func(d store.DeadLetter) bool { dead = append(dead, d); return true }); err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || dead[0].Offset != 8 || dead[0].Reason != "null-key" || !dead[0].KeyNull {
		t.Fatalf("dead letters after the crash: %+v; want only offset 8", dead)
	}
	settle(t, e2.Driver(), parts)
	for id, want := range map[string]string{x: "2", y: "1"} {
		v, _, err := db2.GetState(addr(id), "n")
		if err != nil || string(v.Value) != want {
			t.Fatalf("n of %s = %q (%v), want %s: batch A exactly, nothing of B", id, v.Value, err, want)
		}
	}
}

// A batch for a full partition is refused whole, writing nothing, while a
// batch that only moves the position is always taken.
func TestIngestFromBusyWritesNothing(t *testing.T) {
	const parts = 2
	db := openStore(t, vfs.NewMem(), parts)
	e := newEngine(t, db, &counter{}, func(o *Options) { o.Driven = true; o.MaxBacklog = 1 })
	d := e.Driver()
	x, y := idIn(0, parts, "x"), idIn(1, parts, "y")
	if _, err := d.Ingest(msg(y, "fill")); err != nil {
		t.Fatal(err)
	}
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	_, err := d.IngestFrom(SourceBatch{Position: srcPos(5), Messages: []*protocol.Envelope{msg(x, "1"), msg(y, "2")}})
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("IngestFrom into a full partition = %v, want ErrBusy", err)
	}
	if n := d.Commits(); n != 0 {
		t.Fatalf("%d requests queued after a refusal", n)
	}
	if pos, _ := e.SourcePositions("test/kafka"); len(pos) != 0 {
		t.Fatalf("position written by a refused batch: %v", pos)
	}
	f, err := d.IngestFrom(SourceBatch{Position: srcPos(5)})
	if err != nil {
		t.Fatalf("position-only batch: %v", err)
	}
	if err := d.Commit(); err != nil || !f.Done() || f.Err() != nil {
		t.Fatal(err, f.Err())
	}
	settle(t, d, parts)
	f, err = d.IngestFrom(SourceBatch{Position: srcPos(7), Messages: []*protocol.Envelope{msg(x, "1"), msg(y, "2")}})
	if err != nil {
		t.Fatalf("after the backlog drained: %v", err)
	}
	if err := d.Commit(); err != nil || !f.Done() || f.Err() != nil {
		t.Fatal(err, f.Err())
	}
	if pos, _ := e.SourcePositions("test/kafka"); len(pos) != 1 || pos[0].Next != 7 {
		t.Fatalf("position: %v", pos)
	}
}

// A batch with a record the store cannot encode fails as a whole: the
// position does not move past messages that were not written.
func TestIngestFromEncodingFailureMovesNothing(t *testing.T) {
	db := openStore(t, vfs.NewMem(), 1)
	e := newEngine(t, db, &counter{}, nil)
	e.Start()
	ctx := context.Background()
	if err := e.IngestFrom(ctx, SourceBatch{Position: srcPos(1), Messages: []*protocol.Envelope{msg("a", "1")}}); err != nil {
		t.Fatal(err)
	}
	err := e.IngestFrom(ctx, SourceBatch{Position: srcPos(3), Messages: []*protocol.Envelope{msg("b", "2"), msg("bad\xff", "3")}})
	if err == nil {
		t.Fatal("a message with a non-UTF-8 id was written")
	}
	pos, _ := e.SourcePositions("test/kafka")
	if fmt.Sprint(pos) != fmt.Sprint([]store.SourcePosition{srcPos(1)}) {
		t.Fatalf("position after the failed batch: %v", pos)
	}
	if err := e.IngestFrom(ctx, SourceBatch{Position: srcPos(2), Messages: []*protocol.Envelope{msg("b", "2")}}); err != nil {
		t.Fatalf("the engine goes on after one batch failed to encode: %v", err)
	}
	waitFor(t, "b counted once", func() bool { return count(t, e, "b") == "1" })
}
