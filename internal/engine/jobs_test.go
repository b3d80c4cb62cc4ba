package engine

import (
	"context"
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statefun-go/statefun/internal/cluster/sessiontest"
	"github.com/statefun-go/statefun/internal/store"
)

// A bulk job's record written with PutJob is in its home partition's
// changelog: a node that restores the partition finds it (and, once
// deleted, does not). A partition this node does not own refuses it.
func TestClusterJobRecordTravelsInTheChangelog(t *testing.T) {
	const parts = 2
	k := sessiontest.NewKafka()
	n := newClusterNode(t, k, openStore(t, vfs.NewMem(), parts), &relay{}, false, nil)
	if err := n.s.Assign(0); err != nil {
		t.Fatal(err)
	}
	n.e.Start()
	ctx := context.Background()
	if err := n.e.PutJob(ctx, 0, "j1", []byte(`{"id":"j1"}`)); err != nil {
		t.Fatal(err)
	}
	if err := n.e.PutJob(ctx, 0, "j2", []byte(`{"id":"j2"}`)); err != nil {
		t.Fatal(err)
	}
	if err := n.e.PutJob(ctx, 0, "j2", nil); err != nil {
		t.Fatal(err)
	}
	if err := n.e.PutJob(ctx, 1, "j3", []byte(`{}`)); !errors.Is(err, ErrMoved) {
		t.Fatalf("PutJob in a partition this node does not own: %v, want ErrMoved", err)
	}
	jobsIn := func(db *store.DB) map[string]string {
		out := map[string]string{}
		if err := db.ScanJobs(func(id string, rec []byte) error { out[id] = string(rec); return nil }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if got := jobsIn(n.db); len(got) != 1 || got["j1"] != `{"id":"j1"}` {
		t.Fatalf("the owner's store holds jobs %v, want j1 alone", got)
	}
	fresh := openStore(t, vfs.NewMem(), parts)
	restoreFrom(t, k, fresh, 0)
	if got := jobsIn(fresh); len(got) != 1 || got["j1"] != `{"id":"j1"}` {
		t.Fatalf("a restore of partition 0 holds jobs %v, want j1 alone", got)
	}
}
