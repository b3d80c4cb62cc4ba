package e2e

import (
	"testing"
	"time"
)

// /readyz of a node the group assigns no partition, because there are
// more nodes than partitions (P = 1 here, two nodes): it answers 200 once
// the group is stable and the other node owns the partition, though it
// serves none itself (TestClusterFailover checks that a node with its
// share still to come is not ready).
func TestClusterReadyWithoutPartitions(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test skipped in -short mode")
	}
	t.Parallel()
	needKcat(t)
	dk := startDevkafka(t, "-port", "0", "-brokers", "1", "-topic", "counts:3")
	fn := kafkaCounterFn(t, "kc/out")
	nodes := newClusterNodes(t, dk, "ready", fn, "node-a", "node-b")
	for _, n := range nodes {
		n.extra = []string{"--cluster-partitions", "1"}
	}
	a, b := nodes[0], nodes[1]
	a.launch()
	a.waitReady(60 * time.Second)
	b.launch()
	b.waitReady(60 * time.Second)
	for _, n := range nodes {
		owned, err := n.metric("statefun_cluster_owned_partitions")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s owns %v partitions", n.id, owned)
	}
	if owned, _ := sumMetric(nodes, "statefun_cluster_owned_partitions"); owned != 1 {
		t.Errorf("the nodes own %v partitions between them, want the one", owned)
	}
}
