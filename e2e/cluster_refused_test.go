package e2e

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"
)

// TestClusterEgressTopicMissing has one address's function write its
// Kafka egress record to a topic that does not exist, while traffic flows
// to other counters through two nodes. Kafka refuses that record and the
// transaction carrying it aborts once; the node learns the refusal, so the
// function's next response with such a record is a protocol violation
// where it is made, which pauses the address (--pause-on-violation). The
// other counters' output keeps flowing, exactly once, and the node does
// not abort transaction after transaction.
func TestClusterEgressTopicMissing(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test skipped in -short mode")
	}
	t.Parallel()
	needKcat(t)
	dk := startDevkafka(t, "-port", "0", "-brokers", "3", "-topic", "counts:3")
	fn := kafkaCounterFn(t, "kc/out")
	nodes := newClusterNodes(t, dk, "refused", fn, "node-a", "node-b")
	for _, n := range nodes {
		n.extra = append(n.extra, "--pause-on-violation")
	}
	launchAll(t, nodes...)

	tr := startTraffic(t, "kc/counter", 20, nodes...)
	tr.waitAcked(time.Second, 30*time.Second)
	if status, err := nodes[0].send("/kc/counter/poison", "kc/text", "missing"); err != nil || status != http.StatusOK {
		t.Fatalf("the message for the missing topic: %d %v", status, err)
	}
	var in struct {
		Paused *struct {
			Reason string `json:"reason"`
		} `json:"paused"`
	}
	waitFor(t, 60*time.Second, "kc/counter/poison paused by the poison policy", func() bool {
		r := nodes[1].api(t, "GET", "/inbox/kc/counter/poison", "")
		return r.status == 200 && json.Unmarshal(r.body, &in) == nil && in.Paused != nil
	})
	t.Logf("paused: %s", in.Paused.Reason)

	// The traffic goes on for a while after the pause: every counter's
	// output exactly once.
	tr.waitAcked(3*time.Second, 30*time.Second)
	tr.settle(t, dk, nodes, 90*time.Second)
	running(t, nodes...)

	refused, err := sumMetric(nodes, "statefun_cluster_refused_records_total", `kind="topic"`)
	if err != nil {
		t.Fatal(err)
	}
	aborts, err := sumMetric(nodes, "statefun_cluster_txn_aborts_total", `reason="produce"`)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("records refused for their topic: %v; transactions aborted for a refused record: %v", refused, aborts)
	if refused < 1 || aborts < 1 {
		t.Errorf("refused records %v, aborts %v; want the missing topic's record refused by Kafka (once or a few times)", refused, aborts)
	}
	if aborts > 3 {
		t.Errorf("%v transactions aborted for a refused record; want the refusal learnt after the first (a few at most: each node may produce one)", aborts)
	}
}
