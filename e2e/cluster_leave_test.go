package e2e

import (
	"net/http"
	"os"
	"os/exec"
	"strconv"
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
	launchWith(a, "--cluster-leave-on-stop")
	launchWith(b)
	a.waitReady(60 * time.Second)
	b.waitReady(60 * time.Second)
	waitFor(t, 60*time.Second, "both nodes own partitions", func() bool {
		va, _ := a.metric("statefun_cluster_owned_partitions")
		vb, _ := b.metric("statefun_cluster_owned_partitions")
		return va > 0 && vb > 0 && va+vb == 8
	})
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
	// Well within the session timeout, so only the leave can explain it.
	waitFor(t, 25*time.Second, "node-b owns and serves all 8 partitions", func() bool {
		v, _ := b.metric("statefun_cluster_owned_partitions")
		r, _ := b.metric("statefun_cluster_restoring_partitions")
		return v == 8 && r == 0
	})
	t.Logf("node-b serves every partition %v after node-a's SIGTERM", time.Since(stopped).Round(time.Millisecond))
	waitCounts(t, []*clusterNode{b}, want, 30*time.Second)
}

// launchWith starts the node with its usual arguments, a session timeout
// of 60 s instead of 6, and extra.
func launchWith(n *clusterNode, extra ...string) {
	n.t.Helper()
	n.sessionTimeout = 60000
	n.cmd = exec.Command(binary, append(n.args(), extra...)...)
	n.cmd.Env = append(os.Environ(), "STATEFUN_LISTEN_HOST=127.0.0.1")
	n.cmd.Stdout, n.cmd.Stderr = n.runtime, n.runtime
	if err := n.cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	n.exited = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { c.Wait(); close(done) }(n.cmd, n.exited)
}
