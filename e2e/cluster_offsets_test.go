package e2e

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestClusterGroupOffsetsMovedBack stops every node of an application,
// moves the consumer group's committed offsets of its messages topic and
// of its Kafka ingress topic back by 100 per partition (what an operator's
// offset reset does, and what Kafka's offset expiry does after every node
// was down for offsets.retention.minutes), and starts the nodes again.
// Each partition resumes from its own read position, kept in its
// changelog, and knows the ingress records it applied: no message applies
// twice, no node exits, and the output holds every count exactly once,
// through the rewind and the traffic after it.
func TestClusterGroupOffsetsMovedBack(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test skipped in -short mode")
	}
	t.Parallel()
	needKcat(t)
	dk := startDevkafka(t, "-port", "0", "-brokers", "3", "-topic", "counts:3", "-topic", "in:4")
	fn := kafkaCounterFn(t, "kc/out")
	nodes := newIngressClusterNodes(t, dk, "rewind", fn, "node-a", "node-b")
	launchAll(t, nodes...)

	// Playground traffic to counters k0..k39, and Kafka ingress records
	// to counters i0..i19 (each record one message, so acknowledged and
	// attempted alike once kcat is done).
	stream := func(tr *traffic, seed uint64) {
		s := newKcatStream(t, dk.brokers, "in")
		rng := rand.New(rand.NewPCG(seed, 2))
		for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
			if err := s.send("i"+strconv.Itoa(rng.IntN(20)), "x"); err != nil {
				t.Fatal(err)
			}
			time.Sleep(3 * time.Millisecond)
		}
		s.close(t)
		tr.mu.Lock()
		for id, n := range s.count {
			tr.acked[id] += n
			tr.attempted[id] += n
		}
		tr.mu.Unlock()
	}
	tr := startTraffic(t, "kc/counter", 40, nodes...)
	stream(tr, 1)
	tr.waitAcked(time.Second, 30*time.Second)
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
	const group = "rewind"
	fetched, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	back := kadm.Offsets{}
	moved := map[string]int64{}
	fetched.Each(func(o kadm.OffsetResponse) {
		if o.At <= 0 {
			return
		}
		to := max(o.At-100, 0)
		moved[o.Topic] += o.At - to
		back.AddOffset(o.Topic, o.Partition, to, -1)
	})
	if moved["rewind-messages"] < 200 || moved["in"] < 200 {
		t.Fatalf("the group's offsets move back by %v; want at least 200 records in each topic for the test to mean something (offsets %v)", moved, fetched)
	}
	// The stopped nodes are static members until their session times
	// out; an offset commit from outside the group is refused until then.
	waitFor(t, 60*time.Second, "the group's offsets moved back", func() bool {
		resp, err := adm.CommitOffsets(ctx, group, back)
		return err == nil && resp.Ok()
	})
	t.Logf("moved the group's offsets back by %v records", moved)

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
	stream(tr2, 2)
	tr2.settle(t, dk, nodes, 90*time.Second)
	running(t, nodes...)

	// Each partition resumed from its own read position (a seek, made
	// again after every End that reset the fetch positions to the group's
	// offsets), so none of the rewound records of the messages topic is
	// even fetched: one that is shows a path where offsets moved forward
	// would skip records never applied (the engine skips it here, but
	// there it would be lost). The ingress records are routed again from
	// the rewound offsets, and their messages skipped by their owners.
	skipped, err := sumMetric(nodes, "statefun_cluster_replayed_records_total", `source="messages"`)
	if err != nil {
		t.Fatal(err)
	}
	again, err := sumMetric(nodes, "statefun_cluster_replayed_records_total", `source="ingress"`)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the nodes skipped %v fetched records of the messages topic and %v messages of ingress records routed again", skipped, again)
	if skipped != 0 {
		t.Errorf("%v rewound records of the messages topic were fetched again; want 0 (every partition fetching from its own position)", skipped)
	}
	if again == 0 {
		t.Errorf("no message of a rewound ingress record was skipped; want the ingress records routed again (from offsets moved back) skipped by their owners")
	}
}
