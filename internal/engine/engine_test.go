package engine

import (
	"context"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// The engine with its goroutines: messages from the ingress reach the
// function, a forwarded message crosses partitions, state is applied and
// durable, and the specs one partition learned reach the listing.
func TestEngineRuns(t *testing.T) {
	db := openStore(t, vfs.NewMem(), 4)
	fn := &counter{}
	e := newEngine(t, db, fn, nil)
	e.Start()
	ctx := context.Background()
	for _, m := range []string{"x", "fwd:b", "y"} {
		if err := e.Ingest(ctx, msg("a", m)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "three messages at a and one at b", func() bool { return count(t, e, "a") == "3" && count(t, e, "b") == "1" })
	if specs := e.SpecsOf(counterType); len(specs) != 1 || specs[0].Name != "n" {
		t.Fatalf("registered specs %+v", specs)
	}
	waitFor(t, "the state to be durable", func() bool {
		v, ok, err := db.GetState(addr("b"), "n")
		return err == nil && ok && string(v.Value) == "1"
	})
	var ids []string
	if err := e.ScanIDs(counterType, "", "", func(id string) bool { ids = append(ids, id); return true }); err != nil {
		t.Fatal(err)
	}
	if len(ids) != 2 {
		t.Fatalf("ids holding state: %v", ids)
	}
}
