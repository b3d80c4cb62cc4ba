package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestClusterGroupOffsetsMovedBack stops every node of an application,
// moves the consumer group's committed offsets of its messages topic back
// by 100 (what an operator's offset reset does, and what Kafka's offset
// expiry does after every node was down for offsets.retention.minutes),
// and starts the nodes again. Each partition resumes from its own read
// position, kept in its changelog: no message applies twice, no node
// exits, and the output holds every count exactly once, through the
// rewind and the traffic after it.
func TestClusterGroupOffsetsMovedBack(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test skipped in -short mode")
	}
	t.Parallel()
	needKcat(t)
	dk := startDevkafka(t, "-port", "0", "-brokers", "3", "-topic", "counts:3")
	fn := kafkaCounterFn(t, "kc/out")
	nodes := newClusterNodes(t, dk, "rewind", fn, "node-a", "node-b")
	launchAll(t, nodes...)

	tr := startTraffic(t, "kc/counter", 40, nodes...)
	tr.waitAcked(4*time.Second, 30*time.Second)
	before := tr.settle(t, dk, nodes, 90*time.Second)
	for _, n := range nodes {
		if err := n.stop(); err != nil {
			t.Fatalf("%s did not stop cleanly: %v", n.id, err)
		}
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(dk.brokers, ",")...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	const group, topic = "rewind", "rewind-messages"
	fetched, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	back := kadm.Offsets{}
	moved := int64(0)
	fetched.Each(func(o kadm.OffsetResponse) {
		if o.Topic != topic || o.At <= 0 {
			return
		}
		to := max(o.At-100, 0)
		moved += o.At - to
		back.AddOffset(topic, o.Partition, to, -1)
	})
	if moved < 200 {
		t.Fatalf("the group's offsets of %s move back by %d in all; want at least 200 for the test to mean something (offsets %v)", topic, moved, fetched)
	}
	// The stopped nodes are static members until their session times
	// out; an offset commit from outside the group is refused until then.
	waitFor(t, 60*time.Second, "the group's offsets moved back", func() bool {
		resp, err := adm.CommitOffsets(ctx, group, back)
		return err == nil && resp.Ok()
	})
	t.Logf("moved the group's offsets of %s back by %d records in all", topic, moved)

	for _, n := range nodes {
		n.launch()
	}
	for _, n := range nodes {
		n.waitReady(60 * time.Second)
	}
	waitServing(t, 60*time.Second, nodes...)

	// New traffic on top of the counts before: a counter must end at its
	// count before plus its new messages, never more.
	tr2 := startTraffic(t, "kc/counter", 40, nodes...)
	tr2.mu.Lock()
	for id, v := range before {
		tr2.acked[id] += v
		tr2.attempted[id] += v
	}
	tr2.mu.Unlock()
	tr2.waitAcked(2*time.Second, 30*time.Second)
	tr2.settle(t, dk, nodes, 90*time.Second)
	running(t, nodes...)

	// Each partition resumed from its own read position (a seek), so
	// usually none of the rewound records is even fetched; any that is
	// (the seek lost a race with the group's offset fetch) is skipped by
	// the engine and counted here.
	skipped, err := sumMetric(nodes, "statefun_cluster_replayed_records_total", `source="messages"`)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the nodes skipped %v fetched records of the messages topic as applied before", skipped)
}
