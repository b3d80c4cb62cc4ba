package engine

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/store"
)

// TestHistoryWrittenWithTheState: a history record is written by the very
// batch that changes the entry. The runtime runs on Pebble's crashable
// filesystem while messages and operator mutations arrive; crashes are
// cloned at random points (keeping a random part of what was not synced);
// after recovery, the newest history record of every entry matches the
// entry exactly (same version, same value) — and an entry that is gone has
// a deletion as its newest record.
func TestHistoryWrittenWithTheState(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	fs := vfs.NewCrashableMem()
	db := openStore(t, fs, 2)
	e := newEngine(t, db, &counter{}, nil)
	e.Start()
	ids := []string{"a", "b", "c", "d", "e"}
	var clones []*vfs.MemFS
	for i := range 200 {
		id := ids[rng.IntN(len(ids))]
		switch rng.IntN(4) {
		case 0:
			m := partition.Mutation{ID: fmt.Sprint("m", i), Addr: addr(id), State: "n", Op: partition.OpPut,
				Value: []byte("100"), Ack: partition.AckApplied, Principal: "op"}
			if rng.IntN(3) == 0 {
				m.Op = partition.OpDelete
			}
			if _, err := e.Mutate(context.Background(), m); err != nil {
				t.Fatal(err)
			}
		default:
			if err := e.Ingest(context.Background(), msg(id, "x")); err != nil {
				t.Fatal(err)
			}
		}
		if rng.IntN(25) == 0 {
			clones = append(clones, fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rng}))
		}
	}
	clones = append(clones, fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rng}))
	for ci, clone := range clones {
		db2, err := store.Open("data", store.Options{Partitions: 2, FS: clone, Logger: quietPebble{}, SweepInterval: -1})
		if err != nil {
			t.Fatalf("clone %d: %v", ci, err)
		}
		for _, id := range ids {
			cur, ok, err := db2.GetState(addr(id), "n")
			if err != nil {
				t.Fatal(err)
			}
			var newest *store.HistoryRecord
			err = db2.ScanHistory(addr(id), "n", false, 0, func(r store.HistoryRecord) bool { newest = &r; return false })
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case newest == nil:
				if ok {
					t.Errorf("clone %d: %s holds %q v%d but has no history", ci, id, cur.Value, cur.Version)
				}
			case ok && (newest.GetDeleted() || newest.GetVersion() != cur.Version || !bytes.Equal(newest.GetValue(), cur.Value)):
				t.Errorf("clone %d: %s holds %q v%d, its newest change is %q v%d deleted=%v", ci, id, cur.Value, cur.Version, newest.GetValue(), newest.GetVersion(), newest.GetDeleted())
			case !ok && !newest.GetDeleted():
				t.Errorf("clone %d: %s has no value, its newest change is %q v%d", ci, id, newest.GetValue(), newest.GetVersion())
			}
		}
		_ = db2.Close()
	}
}
