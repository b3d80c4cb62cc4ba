package engine

import (
	"bytes"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statefun-go/statefun/internal/cluster/sessiontest"
	"github.com/statefun-go/statefun/internal/store"
)

func deadLettersIn(t *testing.T, db *store.DB) []store.DeadLetter {
	t.Helper()
	var out []store.DeadLetter
	if err := db.ScanDeadLetters(store.DeadLetterFilter{}, func(d store.DeadLetter) bool {
		out = append(out, d)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func sameDeadLetter(a, b store.DeadLetter) bool {
	return a.At == b.At && a.Ingress == b.Ingress && a.Topic == b.Topic && a.Partition == b.Partition && a.Offset == b.Offset &&
		a.Reason == b.Reason && a.Timestamp == b.Timestamp && a.KeyNull == b.KeyNull && bytes.Equal(a.Key, b.Key) &&
		bytes.Equal(a.Value, b.Value) && a.ValueOmitted == b.ValueOmitted
}

// In cluster mode a Kafka ingress dead letter arrives as a command of the
// messages topic at the partition that keeps its Kafka partition's
// (IngressDeadLetterPartition: 5 mod 2 = 1), and that partition's commit
// stores it, as embedded mode stores one, in key space 0x0F — so it is in
// the partition's changelog and a node restoring the partition has it. A
// command delivered twice stores one dead letter (its key, stored time
// included, came with it); one for another partition is refused. Its
// retention deletion goes through the changelog: it leaves the store only
// when the transaction carrying the tombstone commits, and a restore does
// not bring it back.
func TestClusterIngressDeadLetterStoredThroughTheChangelog(t *testing.T) {
	const parts = 2
	var shift atomic.Int64 // how far the store's clock is ahead
	open := skewedStores(t, parts, store.Retention{DeadLetterAge: time.Hour}, &shift)
	k := sessiontest.NewKafka()
	db := open(vfs.NewMem())
	n := newClusterNode(t, k, db, &relay{}, true, nil)
	for p := range parts {
		if err := n.s.Assign(p); err != nil {
			t.Fatal(err)
		}
	}
	d := n.e.Driver()
	dl := store.DeadLetter{At: time.Now().UnixMilli(), Ingress: "shop/logins", Topic: "logins", Partition: 5, Offset: 41,
		Reason: "null-key", Timestamp: 1_700_000_000_000, KeyNull: true, Value: []byte("v")}
	q := IngressDeadLetterPartition(dl.Partition, parts)
	if q != 1 || n.e.IngressDeadLetterPartition(&dl) != 1 {
		t.Fatalf("Kafka partition 5's dead letters are kept by partition %d, want 5 mod 2 = 1", q)
	}
	if _, err := n.e.SubmitArrivals(0, []Arrival{{Offset: 0, Env: IngressDeadLetterCommand(&dl)}}); err == nil {
		t.Fatal("a dead letter kept by partition 1 was taken by partition 0")
	}
	k.Produce(q, IngressDeadLetterCommand(&dl))
	k.Produce(q, IngressDeadLetterCommand(&dl)) // a repeat
	k.Produce(q, msg(idIn(q, parts, "a"), "hello"))
	n.poll(q)
	settle(t, d, parts)
	got := deadLettersIn(t, db)
	if len(got) != 1 || !sameDeadLetter(got[0], dl) {
		t.Fatalf("stored dead letters %+v, want exactly %+v", got, dl)
	}
	if got := storedCount(t, db, idIn(q, parts, "a")); got != "1" {
		t.Errorf("the message after the dead letters: count %q, want 1 (delivered once)", got)
	}
	logged := 0
	for _, op := range k.Changelog(q) {
		if len(op.Key) > 0 && op.Key[0] == 0x0F && !op.Delete {
			logged++
		}
	}
	if logged == 0 {
		t.Fatalf("partition %d's changelog holds no dead letter", q)
	}
	fresh := open(vfs.NewMem())
	restoreFrom(t, k, fresh, q)
	if got := deadLettersIn(t, fresh); len(got) != 1 || !sameDeadLetter(got[0], dl) {
		t.Fatalf("a restore of partition %d: dead letters %+v, want exactly %+v", q, got, dl)
	}

	shift.Store(int64(2 * time.Hour))
	if _, err := db.Sweep(); err != nil {
		t.Fatal(err)
	}
	if got := deadLettersIn(t, db); len(got) != 1 {
		t.Fatal("the dead letter left the store before the transaction carrying its deletion committed")
	}
	settle(t, d, parts)
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := deadLettersIn(t, db); len(got) != 0 {
		t.Fatalf("after the sweep's commit: %d dead letters, want none", len(got))
	}
	again := open(vfs.NewMem())
	restoreFrom(t, k, again, q)
	if got := deadLettersIn(t, again); len(got) != 0 {
		t.Errorf("a restore of partition %d brought the swept dead letter back: %+v", q, got)
	}
}
