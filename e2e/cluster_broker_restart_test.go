package e2e

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/statefun-go/statefun/internal/testport"
)

// TestClusterBrokerRestart stops the Kafka cluster (devkafka, its data on
// disk, every write synced) while traffic flows through two nodes, and
// starts it again on the same ports a few seconds later, twice. The nodes
// ride it out: a transaction whose end cannot reach the brokers has an
// unknown outcome, which is aborted once they are back and its partitions
// rebuilt from their changelogs, instead of the node stopping. No node
// exits, and afterwards every counter lies between its acknowledged and
// attempted messages and the output holds every count exactly once.
//
// The brokers stop with SIGTERM: kfake's on-disk state does not survive a
// SIGKILL as a Kafka broker's log does (producer epochs come back older,
// transactions open at the kill stay open for good), which would test the
// development broker rather than the runtime.
//
// It runs under STATEFUN_CLUSTER_SOAK=1 (make soak) only. It found, in
// about one run of six under load, one transaction's effects twice: a
// node whose partitions were lost after the restart rejoined under a new
// member id, and its transaction without offsets passed the membership
// check with that id (session.checkMember now checks the identity the
// node had when the transaction began). It stays in the soak until more
// runs confirm the fix: a test that fails one run in six would fail CI.
func TestClusterBrokerRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test skipped in -short mode")
	}
	if os.Getenv("STATEFUN_CLUSTER_SOAK") == "" {
		t.Skip("a broker restart runs in make soak (STATEFUN_CLUSTER_SOAK=1): see the comment")
	}
	t.Parallel()
	needKcat(t)
	port, err := testport.FreeRange(3)
	if err != nil {
		t.Fatal(err)
	}
	dk := startDevkafka(t, "-port", strconv.Itoa(port), "-data-dir", t.TempDir(), "-sync", "-topic", "counts:3")
	fn := kafkaCounterFn(t, "kc/out")
	nodes := newClusterNodes(t, dk, "brokers", fn, "node-a", "node-b")
	launchAll(t, nodes...)

	tr := startTraffic(t, "kc/counter", 40, nodes...)
	for round := range 2 {
		tr.waitAcked(2*time.Second, 60*time.Second)
		dk.stop()
		t.Logf("round %d: stopped the brokers", round)
		time.Sleep(3 * time.Second) // the brokers stay down a while
		dk.start()
		t.Logf("round %d: brokers back", round)
		tr.waitAcked(time.Second, 90*time.Second)
	}
	tr.waitAcked(2*time.Second, 60*time.Second)
	tr.settle(t, dk, nodes, 120*time.Second)
	running(t, nodes...)
	skipped, err := sumMetric(nodes, "statefun_cluster_replayed_records_total")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("records skipped as applied before: %v", skipped)
}
