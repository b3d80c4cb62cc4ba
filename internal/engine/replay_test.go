package engine

import (
	"fmt"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/partition"
)

// idIn returns an id of counter that lives in partition p of n.
func idIn(p, n int, prefix string) string {
	for i := 0; ; i++ {
		if id := fmt.Sprintf("%s%d", prefix, i); address.Partition(id, n) == p {
			return id
		}
	}
}

// After a crash the inbox replays in arrival order: an ack=accepted
// mutation that arrived before a message from another partition is applied
// before it, as it would have been without the crash (the state API's
// ordering promise). Before the fix the inbox replayed grouped by source,
// every other partition's messages ahead of ingress ones.
func TestReplayFollowsArrivalOrder(t *testing.T) {
	const parts = 2
	fs := vfs.NewCrashableMem()
	db := openStore(t, fs, parts)
	fn := &counter{}
	e := newEngine(t, db, fn, func(o *Options) { o.Driven = true })
	d := e.Driver()
	x, y := idIn(0, parts, "x"), idIn(1, parts, "y")

	// 1. A message for y, which will forward one to x.
	if _, err := d.Ingest(msg(y, "fwd:"+x)); err != nil {
		t.Fatal(err)
	}
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	// 2. An accepted mutation of x arrives: durable in x's inbox, not applied
	// (partition 0 is not stepped before the crash).
	f, err := d.Mutate(partition.Mutation{ID: "m1", Addr: addr(x), State: "n", Op: partition.OpPut,
		Typename: countTypename, Value: []byte("5"), Ack: AckAccepted})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Commit(); err != nil || !f.Done() || f.Err() != nil {
		t.Fatalf("accepting the mutation: %v, %v", err, f.Err())
	}
	// 3. y runs and its forward to x becomes durable after the mutation.
	for range 10 {
		if err := d.Step(1); err != nil {
			t.Fatal(err)
		}
		for len(d.Calls()) > 0 {
			d.RunCall(0)
		}
		if err := d.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if got := fn.messages(); !slices.Equal(got, []string{y + ":fwd:" + x}) {
		t.Fatalf("before the crash the function saw %v", got)
	}

	// Crash: only what was synced survives. Restart on it.
	crashed := fs.CrashClone(vfs.CrashCloneCfg{})
	e.Close()
	db2 := openStore(t, crashed, parts)
	fn2 := &counter{}
	e2 := newEngine(t, db2, fn2, func(o *Options) { o.Driven = true })
	settle(t, e2.Driver(), parts)

	// The mutation (n = 5) came first, then the message (n = 6).
	if got := fn2.messages(); !slices.Equal(got, []string{x + ":from " + y}) {
		t.Fatalf("after the restart the function saw %v", got)
	}
	v, ok, err := db2.GetState(addr(x), "n")
	if err != nil || !ok || string(v.Value) != "6" {
		t.Fatalf("n of %s = %q (%v, %v); want 6: the accepted mutation, then the message", x, v.Value, ok, err)
	}
}
