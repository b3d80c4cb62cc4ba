package e2e

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/statefun-go/statefun/pkg/stateclient"
)

// clusterIngressDoc is a Kafka ingress kc/in on brokers: topic "in" →
// kc/counter, from the earliest offset. Its consumerGroupId does not apply
// in cluster mode (the application's group consumes the topic).
func clusterIngressDoc(brokers string) string {
	return fmt.Sprintf(`---
kind: io.statefun.kafka.v1/ingress
spec:
  id: kc/in
  address: %s
  consumerGroupId: not-used-in-cluster-mode
  startupPosition:
    type: earliest
  topics:
    - topic: in
      valueType: kc/text
      targets: [kc/counter]
`, brokers)
}

// newIngressClusterNodes writes the modules of nodes ids of application
// app with the Kafka ingress kc/in (clusterIngressDoc) besides the
// cluster module; the processes are not started.
func newIngressClusterNodes(t *testing.T, dk *devkafka, app, fnURL string, ids ...string) []*clusterNode {
	var nodes []*clusterNode
	for _, id := range ids {
		rt := newRuntimeWith(t, func(in, _ int) string { return clusterModule(fnURL, dk.brokers, in) + clusterIngressDoc(dk.brokers) })
		nodes = append(nodes, &clusterNode{runtime: rt, id: id, app: app, brokers: dk.brokers, sessionTimeout: 6000})
	}
	return nodes
}

// TestClusterKafkaIngressKillNode runs three nodes of one application
// whose module has a Kafka ingress: kcat streams records into its topic
// while the node consuming the most of them is killed with SIGKILL. The ingress topic's partitions move with the group like the
// messages topic's; each record becomes exactly one message in
// <app>-messages, produced in the transaction that commits the ingress
// offset, so afterwards every counter equals the records produced for it
// (each counted once: none lost with the killed node's open transaction,
// none again by the node that took its partitions over), and the Kafka
// egress output, read read_committed, holds each effect once. A record
// without a key is counted on the node that consumed it and becomes one
// dead letter, listed by the survivors.
func TestClusterKafkaIngressKillNode(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test skipped in -short mode")
	}
	t.Parallel()
	needKcat(t)
	dk := startDevkafka(t, "-port", "0", "-brokers", "3", "-topic", "counts:3", "-topic", "in:4")
	fn := kafkaCounterFn(t, "kc/out")
	const app = "kin"
	var nodes []*clusterNode
	for _, id := range []string{"node-a", "node-b", "node-c"} {
		rt := newRuntimeWith(t, func(in, _ int) string { return clusterModule(fn, dk.brokers, in) + clusterIngressDoc(dk.brokers) })
		n := &clusterNode{runtime: rt, id: id, app: app, brokers: dk.brokers, sessionTimeout: 6000}
		n.launch()
		nodes = append(nodes, n)
	}
	for _, n := range nodes {
		n.waitReady(60 * time.Second)
	}

	const keys = 40
	s := newKcatStream(t, dk.brokers, "in")
	rng := rand.New(rand.NewPCG(1, 2))
	stream := func(d time.Duration) {
		t.Helper()
		for end := time.Now().Add(d); time.Now().Before(end); {
			if err := s.send("k"+strconv.Itoa(rng.IntN(keys)), "x"); err != nil {
				t.Fatal(err)
			}
			time.Sleep(3 * time.Millisecond)
		}
	}
	stream(time.Second)
	// The victim is a node consuming ingress partitions (the group may
	// give them all to one node).
	var victim int
	waitFor(t, 30*time.Second, "a node delivered ingress records", func() bool {
		best := 0.0
		for i, n := range nodes {
			if v, err := n.metric("statefun_kafka_ingress_records_total"); err == nil && v > best {
				best, victim = v, i
			}
		}
		return best > 0
	})
	stream(time.Second)
	nodes[victim].kill()
	t.Logf("killed %s", nodes[victim].id)
	stream(3 * time.Second)
	var survivors []*clusterNode
	for i, n := range nodes {
		if i != victim {
			survivors = append(survivors, n)
		}
	}
	// Once the survivors own every partition, a record without a key.
	waitFor(t, 60*time.Second, "the survivors own every partition and serve them", func() bool {
		owned := 0.0
		for _, n := range survivors {
			v, err := n.metric("statefun_cluster_owned_partitions")
			if s, _, _ := n.readyz(); err != nil || s != 200 {
				return false
			}
			owned += v
		}
		return owned == 8
	})
	stream(time.Second)
	if _, err := fmt.Fprintln(s.w, "no key"); err != nil {
		t.Fatal(err)
	}
	s.close(t)
	want := map[string]int{}
	total := 0
	for k, n := range s.count {
		want[k] = n
		total += n
	}
	t.Logf("%d records produced to the ingress topic, for %d keys", total, len(want))

	waitCounts(t, survivors, want, 90*time.Second)
	// Nothing more can arrive late: the messages topic holds one message
	// per record (below), and the output each count once.
	out := kcatReadUntil(t, dk.brokers, "counts", total, 30*time.Second)
	checkEffects(t, out, want, nil)

	// Each record is one message in the messages topic, read_committed,
	// and the bad record one dead letter.
	msgs := kcatRead(t, dk.brokers, app+"-messages")
	if len(msgs) != total+1 {
		t.Errorf("%s holds %d records (read_committed), want one per ingress record and the bad record's dead letter: %d", app+"-messages", len(msgs), total+1)
	}
	var dead []stateclient.DeadLetter
	waitFor(t, 30*time.Second, "the bad record's dead letter listed", func() bool {
		list, err := cliDeadLetters(t, survivors[0], "kc/in")
		dead = list
		return err == nil && len(list) > 0
	})
	if len(dead) != 1 || dead[0].Reason != "null-key" || dead[0].Key != nil || string(dead[0].Value.Bytes) != "no key" {
		t.Errorf("dead letters of kc/in: %+v; want the record without a key, once", dead)
	}
	bad, err := sumMetric(survivors, "statefun_kafka_ingress_bad_records_total", `reason="null-key"`)
	if err != nil {
		t.Fatal(err)
	}
	if bad != 1 {
		t.Errorf("statefun_kafka_ingress_bad_records_total{reason=\"null-key\"} on the survivors = %v, want 1", bad)
	}
	delivered, err := sumMetric(survivors, "statefun_kafka_ingress_records_total")
	if err != nil {
		t.Fatal(err)
	}
	if delivered > float64(total) {
		t.Errorf("the survivors delivered %v ingress records, more than the %d produced", delivered, total)
	}
}
