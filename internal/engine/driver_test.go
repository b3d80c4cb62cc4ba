package engine

import (
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// settle runs a driven engine until nothing is left to do: every partition
// stepped until its mailbox is empty, every commit written, every call run.
// The order is fixed (partitions in index order, then the committer, then
// the oldest call), so a run is reproducible.
func settle(t *testing.T, d *Driver, parts int) {
	t.Helper()
	for range 1000 {
		busy := false
		for p := range parts {
			if d.HasWork(p) {
				busy = true
				if err := d.Step(p); err != nil {
					t.Fatal(err)
				}
			}
		}
		if d.Commits() > 0 {
			busy = true
			if err := d.Commit(); err != nil {
				t.Fatal(err)
			}
		}
		if len(d.Calls()) > 0 {
			busy = true
			d.RunCall(0)
		}
		if !busy {
			return
		}
	}
	t.Fatal("the engine did not settle in 1000 rounds")
}

// This is the simulation seam of docs/explanation/engine.md: one message driven
// through the engine step by step on the test's goroutine, with a clock the
// test owns.
func TestDriverOneMessage(t *testing.T) {
	clock := &simClock{now: time.UnixMilli(1_000_000)}
	fn := &counter{}
	db := openStore(t, vfs.NewMem(), 2)
	e := newEngine(t, db, fn, func(o *Options) { o.Driven = true; o.Now = clock.Now })
	e.Start() // runs nothing: the test drives
	d := e.Driver()

	f, err := d.Ingest(msg("a", "hello"))
	if err != nil {
		t.Fatal(err)
	}
	if f.Done() {
		t.Fatal("the message was acknowledged before any commit")
	}
	if err := d.Commit(); err != nil { // the ingress write becomes durable
		t.Fatal(err)
	}
	if !f.Done() || f.Err() != nil {
		t.Fatalf("after the commit: done %v, err %v", f.Done(), f.Err())
	}
	p := 0
	for ; p < 2 && d.Pending(p) == 0; p++ {
	}
	if err := d.Step(p); err != nil { // the partition sends the invocation
		t.Fatal(err)
	}
	if calls := d.Calls(); len(calls) != 1 || calls[0].Invocation.Addr.ID != "a" {
		t.Fatalf("calls after the step: %+v", calls)
	}
	d.RunCall(0) // the function asks for its state "n"
	if err := d.Step(p); err != nil {
		t.Fatal(err)
	}
	d.RunCall(0) // the retry with the state: n = 1
	if err := d.Step(p); err != nil {
		t.Fatal(err)
	}
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	settle(t, d, 2)
	if got := fn.messages(); len(got) != 1 || got[0] != "a:hello" {
		t.Fatalf("the function saw %v", got)
	}
	v, ok, err := db.GetState(addr("a"), "n")
	if err != nil || !ok || string(v.Value) != "1" {
		t.Fatalf("durable n = %q, %v, %v; want 1", v.Value, ok, err)
	}
}
