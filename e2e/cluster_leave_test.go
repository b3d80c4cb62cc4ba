package e2e

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A node stopped for good with --cluster-leave-on-stop leaves the group as
// it stops: its partitions move to the other node at once, not after the
// session timeout (60 s here), and what it counted is served there.
func TestClusterLeaveOnStop(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test skipped in -short mode")
	}
	t.Parallel()
	needKcat(t)
	dk := startDevkafka(t, "-port", "0", "-brokers", "1", "-topic", "counts:3")
	fn := kafkaCounterFn(t, "kc/out")
	a := newClusterNode(t, dk.brokers, "leave", "node-a", fn)
	b := newClusterNode(t, dk.brokers, "leave", "node-b", fn)
	// A session timeout of 60 s instead of 6: only the leave moves the
	// partitions within the test's time.
	for _, n := range []*clusterNode{a, b} {
		n.sessionTimeout = 60000
	}
	a.extra = []string{"--cluster-leave-on-stop"}
	launchAll(t, a, b)
	want := map[string]int{}
	for i := range 40 {
		id := "k" + strconv.Itoa(i%8)
		if status, err := a.send("/kc/counter/"+id, "kc/text", "x"); err != nil || status != http.StatusOK {
			t.Fatalf("message %d: %d %v", i, status, err)
		}
		want[id]++
	}
	waitCounts(t, []*clusterNode{a, b}, want, 30*time.Second)

	stopped := time.Now()
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("node-a stopped %v after its SIGTERM", time.Since(stopped).Round(time.Millisecond))
	// A clean stop is not a fault: nothing at ERROR.
	for line := range strings.SplitSeq(badFullLog(a.runtime), "\n") {
		if strings.Contains(line, "level=ERROR") {
			t.Errorf("node-a logged an ERROR on a clean stop: %s", line)
		}
	}
	// Well within the session timeout, so only the leave can explain it.
	waitFor(t, 25*time.Second, "node-b owns and serves all 8 partitions", func() bool {
		v, _ := b.metric("statefun_cluster_owned_partitions")
		r, _ := b.metric("statefun_cluster_restoring_partitions")
		return v == 8 && r == 0
	})
	t.Logf("node-b serves every partition %v after node-a's SIGTERM", time.Since(stopped).Round(time.Millisecond))
	waitCounts(t, []*clusterNode{b}, want, 30*time.Second)
}
