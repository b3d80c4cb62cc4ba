package engine

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/cluster/sessiontest"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// In cluster mode the retention sweep deletes what a partition's changelog
// wrote through that changelog: the owner's next transaction carries
// tombstones, and only its commit removes the keys from the store. A key
// deleted only locally would come back with the next restore, here or on
// another node, and compaction would keep it forever. Keys of a partition
// this node does not own are left to their owner; keys no changelog wrote
// are deleted locally as in embedded mode.
func TestClusterRetentionSweepsThroughTheChangelog(t *testing.T) {
	const parts = 2
	var shift atomic.Int64 // how far the store's clock is ahead
	open := skewedStores(t, parts, store.Retention{ReceiptAge: time.Hour, AuditAge: time.Hour}, &shift)
	k := sessiontest.NewKafka()
	db := open(vfs.NewMem())
	n := newClusterNode(t, k, db, &relay{}, true, nil)
	own := address.Partition("a", parts)
	other := 1 - own
	if err := n.s.Assign(own); err != nil {
		t.Fatal(err)
	}
	d := n.e.Driver()
	k.Produce(own, msg("a", "first"))
	n.poll(own)
	settle(t, d, parts)
	k.Produce(own, putCommand("m1", "a", "10"))
	n.poll(own)
	settle(t, d, parts)
	if rc, ok, _ := db.Receipt("m1"); !ok || rc.GetStatus() != "committed" || countAudit(t, n.e, "m1") != 1 {
		t.Fatalf("m1 before the sweep: receipt %v (%v), %d audit records; want committed and 1", rc, ok, countAudit(t, n.e, "m1"))
	}
	// What the other partition's changelog wrote while this node owned it
	// before, and a receipt no changelog wrote.
	b := db.NewBatch()
	b.PutReceipt(&protocol.Receipt{Mutation: "m9", Status: "committed", At: time.Now().UnixMilli()})
	var ops []store.Op
	if err := b.Ops(func(op store.Op) error {
		ops = append(ops, store.Op{Key: append([]byte(nil), op.Key...), Value: append([]byte(nil), op.Value...)})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if err := db.ApplyChangelog(other, ops, store.ChangelogPosition{Next: 1}); err != nil {
		t.Fatal(err)
	}
	local := db.NewBatch()
	local.PutReceipt(&protocol.Receipt{Mutation: "m8", Status: "committed", At: time.Now().UnixMilli()})
	if err := local.Commit(true); err != nil {
		t.Fatal(err)
	}

	shift.Store(int64(2 * time.Hour))
	if _, err := db.Sweep(); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := db.Receipt("m1"); !ok {
		t.Fatal("m1's receipt left the store before the transaction carrying its deletion committed")
	}
	if _, ok, _ := db.Receipt("m8"); ok {
		t.Error("m8's receipt, which no changelog wrote, is still in the store after the sweep")
	}
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := db.Receipt("m1"); ok || countAudit(t, n.e, "m1") != 0 {
		t.Fatalf("after the sweep's commit: m1's receipt still there (%v) or %d audit records; want both gone", ok, countAudit(t, n.e, "m1"))
	}
	if _, ok, _ := db.Receipt("m9"); !ok {
		t.Error("m9's receipt, of a partition this node does not own, was deleted: that is its owner's to do")
	}
	deleted := 0
	for _, op := range k.Changelog(own) {
		if op.Delete {
			deleted++
		}
	}
	if deleted < 2 {
		t.Errorf("partition %d's changelog holds %d deletions; want the receipt's and the audit record's", own, deleted)
	}

	// A node that takes the partition over restores it without them.
	fresh := open(vfs.NewMem())
	restoreFrom(t, k, fresh, own)
	if _, ok, _ := fresh.Receipt("m1"); ok {
		t.Error("a restore of the partition brought m1's swept receipt back")
	}
	if v, ok, err := fresh.GetState(addr("a"), "n"); err != nil || !ok || string(v.Value) != "10" {
		t.Errorf("the restored state of a: %q (%v, %v); want 10", v.Value, ok, err)
	}
}

// skewedStores opens stores of parts partitions with retention ret, no
// background sweep, and a clock *shift ahead of time.Now; each is closed
// when t ends.
func skewedStores(t *testing.T, parts int, ret store.Retention, shift *atomic.Int64) func(vfs.FS) *store.DB {
	return func(fs vfs.FS) *store.DB {
		db, err := store.Open("data", store.Options{Partitions: parts, FS: fs, Logger: quietPebble{}, SweepInterval: -1, Retention: ret,
			Now: func() time.Time { return time.Now().Add(time.Duration(shift.Load())) }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
}
