package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestClusterBalancedBesideKafkaIngress runs three nodes of an application
// of 12 partitions whose module has a Kafka ingress topic of 3 partitions:
// the group consumes 15 topic-partitions, and balancing their total count
// could split the runtime partitions 3/5/4. Each node must own 4. A node
// stopped for good (--cluster-leave-on-stop) leaves 6 each to the other
// two; started again, it takes back 4, and so does every node.
func TestClusterBalancedBesideKafkaIngress(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test skipped in -short mode")
	}
	t.Parallel()
	dk := startDevkafka(t, "-port", "0", "-brokers", "3", "-topic", "counts:3", "-topic", "in:3")
	fn := kafkaCounterFn(t, "kc/out")
	var nodes []*clusterNode
	for _, id := range []string{"node-a", "node-b", "node-c"} {
		rt := newRuntimeWith(t, func(in, _ int) string { return clusterModule(fn, dk.brokers, in) + clusterIngressDoc(dk.brokers) })
		n := &clusterNode{runtime: rt, id: id, app: "bal", brokers: dk.brokers, sessionTimeout: 60000,
			extra: []string{"--cluster-partitions", "12", "--cluster-leave-on-stop"}}
		n.launch()
		nodes = append(nodes, n)
	}
	waitOwned(t, nodes, 4)

	c := nodes[2]
	if err := c.stop(); err != nil {
		t.Fatal(err)
	}
	waitOwned(t, nodes[:2], 6)

	c.launch()
	waitOwned(t, nodes, 4)
}

// waitOwned waits until each of nodes is ready and owns want partitions
// (a session timeout of 60 s: only a leave or a join moves them).
func waitOwned(t *testing.T, nodes []*clusterNode, want float64) {
	t.Helper()
	var last string
	waitFor(t, 60*time.Second, fmt.Sprintf("each node serving %v runtime partitions", want), func() bool {
		var got []string
		ok := true
		for _, n := range nodes {
			v, err := n.metric("statefun_cluster_owned_partitions")
			s, _, _ := n.readyz()
			got = append(got, fmt.Sprintf("%s=%v (ready %d)", n.id, v, s))
			ok = ok && err == nil && v == want && s == 200
		}
		if s := strings.Join(got, " "); s != last {
			t.Logf("owned: %s", s)
			last = s
		}
		return ok
	})
}
