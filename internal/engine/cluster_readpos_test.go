package engine

import (
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/statefun-go/statefun/internal/cluster/sessiontest"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// resubmit hands partition p's records at offsets [from, to) of the
// messages topic to the engine again, as a consumer does whose group
// offsets were moved back (an operator's reset, or offsets expired while
// every node was down).
func (n *clusterNode) resubmit(k *sessiontest.Kafka, p int, from, to int64) {
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
	k := sessiontest.NewKafka()
	fn := &relay{}
	n := newClusterNode(t, k, openStore(t, vfs.NewMem(), 1), fn, true, nil)
	if err := n.s.Assign(0); err != nil {
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
	n.s.Revoke(0)
	if err := n.s.Assign(0); err != nil {
		t.Fatal(err)
	}
	n.resubmit(k, 0, 0, 5)
	settle(t, d, 1)
	if got := storedCount(t, n.db, "a"); got != "5" {
		t.Fatalf("a = %q after a rebuild and offsets 0..4 again; want 5", got)
	}
	n.s.Revoke(0)
	m := newClusterNode(t, k, openStore(t, vfs.NewMem(), 1), fn, true, nil)
	restoreFrom(t, k, m.db, 0)
	rps, err := m.db.ReadPositions(0)
	if err != nil || len(rps) != 1 || rps[0] != (store.ReadPosition{Topic: store.MessagesTopic, Partition: 0, Offset: 4}) {
		t.Fatalf("the other process's restored read positions: %+v, %v; want the messages topic through offset 4", rps, err)
	}
	if err := m.s.Assign(0); err != nil {
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

// from marks env as message index of the Kafka ingress record at offset
// of topic's partition kp, as a node routing the record does.
func from(env *protocol.Envelope, topic string, kp int32, offset int64, index uint32) *protocol.Envelope {
	env.Origin = &protocol.IngressOrigin{Topic: topic, Partition: kp, Offset: offset, Index: index}
	return env
}

// A Kafka ingress record routed again (the group's offsets of its topic
// were behind) comes as new records of the messages topic, past the
// partition's position there; its origin tells the owner that it applied
// the record's messages — and kept its dead letter — before.
func TestClusterIngressRecordsRoutedAgainApplyOnce(t *testing.T) {
	k := sessiontest.NewKafka()
	fn := &relay{}
	n := newClusterNode(t, k, openStore(t, vfs.NewMem(), 1), fn, true, nil)
	if err := n.s.Assign(0); err != nil {
		t.Fatal(err)
	}
	d := n.e.Driver()
	// Stored now: the store's retention sweeper would delete a dead
	// letter stamped long ago, which the count below could not tell from
	// one never stored.
	now := time.Now().UnixMilli()
	dead := func(at int64) *protocol.Envelope {
		dl := store.DeadLetter{At: now + at, Ingress: "kc/in", Topic: "in", Partition: 2, Offset: 12, Reason: "null-key", KeyNull: true}
		return IngressDeadLetterCommand(&dl)
	}
	k.Produce(0, from(msg("a", "one"), "in", 2, 10, 0))
	k.Produce(0, from(msg("b", "one"), "in", 2, 10, 1)) // the record's second target
	k.Produce(0, from(msg("a", "two"), "in", 2, 11, 0))
	k.Produce(0, dead(1000))
	n.poll(0)
	settle(t, d, 1)

	// Routed again from offset 10 of in/2 by the next owner of in/2, with
	// a new record at 13; in/3 is another partition of the topic.
	k.Produce(0, from(msg("a", "one"), "in", 2, 10, 0))
	k.Produce(0, from(msg("b", "one"), "in", 2, 10, 1))
	k.Produce(0, from(msg("a", "two"), "in", 2, 11, 0))
	k.Produce(0, dead(2000))
	k.Produce(0, from(msg("a", "three"), "in", 2, 13, 0))
	k.Produce(0, from(msg("a", "other"), "in", 3, 1, 0))
	n.poll(0)
	settle(t, d, 1)
	if a, b := storedCount(t, n.db, "a"), storedCount(t, n.db, "b"); a != "4" || b != "1" {
		t.Fatalf("a = %q, b = %q; want 4 and 1 (each record's messages applied once)", a, b)
	}
	dls := 0
	if err := n.db.ScanDeadLetters(store.DeadLetterFilter{}, func(store.DeadLetter) bool { dls++; return true }); err != nil {
		t.Fatal(err)
	}
	if dls != 1 {
		t.Errorf("%d dead letters of in/2@12; want 1", dls)
	}
	if got := testutil.ToFloat64(n.e.m.replayed.WithLabelValues("ingress")); got != 4 {
		t.Errorf("statefun_cluster_replayed_records_total{source=ingress} = %v; want 4", got)
	}
}
