package engine

import (
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/statefun-go/statefun/internal/engine/clustertest"
	"github.com/statefun-go/statefun/internal/store"
)

// resubmit hands partition p's records at offsets [from, to) of the
// messages topic to the engine again, as a consumer does whose group
// offsets were moved back (an operator's reset, or offsets expired while
// every node was down).
func (n *clusterNode) resubmit(k *clustertest.Kafka, p int, from, to int64) {
	n.t.Helper()
	envs := k.Messages(p)
	var arr []Arrival
	for off := from; off < to; off++ {
		arr = append(arr, Arrival{Offset: off, Env: envs[off]})
	}
	ch, err := n.e.SubmitArrivals(p, arr)
	if err != nil {
		n.t.Fatal(err)
	}
	n.arrivalsDone = ch
}

// A partition's read position in the messages topic is its own data: a
// record at or before it came again because the group's offsets were
// behind, and applies nothing — whether it was consumed long ago, or is
// still waiting in the inbox; a new record after it applies. The position
// survives a rebuild and a move to another process (it is in the
// changelog).
func TestClusterArrivalsAppliedBeforeAreSkipped(t *testing.T) {
	k := clustertest.NewKafka()
	fn := &relay{}
	n := newClusterNode(t, k, openStore(t, vfs.NewMem(), 1), fn, true, nil)
	if err := n.e.Assign(0); err != nil {
		t.Fatal(err)
	}
	d := n.e.Driver()
	for _, s := range []string{"one", "two", "three"} {
		k.Produce(0, msg("a", s))
	}
	n.poll(0)
	settle(t, d, 1)
	if got := storedCount(t, n.db, "a"); got != "3" {
		t.Fatalf("a = %q; want 3", got)
	}

	// Consumed long ago: offsets 0..2 come again with a new record.
	k.Produce(0, msg("a", "four"))
	n.resubmit(k, 0, 0, 4)
	settle(t, d, 1)
	if got := storedCount(t, n.db, "a"); got != "4" {
		t.Fatalf("a = %q after offsets 0..3 came with 0..2 applied before; want 4 (each once)", got)
	}

	// Still in the inbox: offset 4 is durable, not yet invoked, when it
	// comes again.
	k.Produce(0, msg("a", "five"))
	n.resubmit(k, 0, 4, 5)
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	n.resubmit(k, 0, 4, 5)
	settle(t, d, 1)
	if got := storedCount(t, n.db, "a"); got != "5" {
		t.Fatalf("a = %q after offset 4 came twice; want 5", got)
	}
	if got := testutil.ToFloat64(n.e.m.replayed.WithLabelValues("messages")); got != 4 {
		t.Errorf("statefun_cluster_replayed_records_total{source=messages} = %v; want 4", got)
	}

	// Rebuilt from the store, and moved to another process from the
	// changelog alone: the position comes with the data.
	n.e.Revoke(0)
	if err := n.e.Assign(0); err != nil {
		t.Fatal(err)
	}
	n.resubmit(k, 0, 0, 5)
	settle(t, d, 1)
	if got := storedCount(t, n.db, "a"); got != "5" {
		t.Fatalf("a = %q after a rebuild and offsets 0..4 again; want 5", got)
	}
	n.e.Revoke(0)
	m := newClusterNode(t, k, openStore(t, vfs.NewMem(), 1), fn, true, nil)
	restoreFrom(t, k, m.db, 0)
	rps, err := m.db.ReadPositions(0)
	if err != nil || len(rps) != 1 || rps[0] != (store.ReadPosition{Topic: store.MessagesTopic, Partition: 0, Offset: 4}) {
		t.Fatalf("the other process's restored read positions: %+v, %v; want the messages topic through offset 4", rps, err)
	}
	if err := m.e.Assign(0); err != nil {
		t.Fatal(err)
	}
	k.Produce(0, msg("a", "six"))
	m.resubmit(k, 0, 0, 6)
	settle(t, m.e.Driver(), 1)
	if got := storedCount(t, m.db, "a"); got != "6" {
		t.Fatalf("a = %q on the other process after offsets 0..5; want 6", got)
	}

	// A position the session found past the topic's end (the topic was
	// recreated) is forgotten: records below it are new.
	m.e.ForgetReadPosition(0)
	k.Produce(0, msg("a", "seven"))
	m.resubmit(k, 0, 2, 3) // stands for a record of the recreated topic at offset 2
	settle(t, m.e.Driver(), 1)
	if got := storedCount(t, m.db, "a"); got != "7" {
		t.Fatalf("a = %q after the position was forgotten; want 7 (the record at offset 2 taken as new)", got)
	}
}
