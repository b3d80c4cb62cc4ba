package e2e

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/statefun-go/statefun/internal/testport"
)

// notReadyFor is a readiness condition: 503 naming the Kafka ingress kc/in
// and the Kafka egress kc/out as not connected.
func notReadyFor(status int, body string) bool {
	return status == http.StatusServiceUnavailable &&
		strings.Contains(body, "kafka ingress kc/in") && strings.Contains(body, "kafka egress kc/out")
}

func readyOK(status int, _ string) bool { return status == http.StatusOK }

// playgroundCounts sends one message to kc/counter/<id> for each id through
// the playground ingress, which must accept each (200) whatever Kafka does.
func playgroundCounts(t *testing.T, rt *runtime, want map[string]int, ids ...string) {
	t.Helper()
	for _, id := range ids {
		status, err := rt.send("/kc/counter/"+id, "kc/text", "x")
		if err != nil || status != http.StatusOK {
			t.Fatalf("playground ingress PUT /kc/counter/%s: %d %v; want 200 while Kafka is down", id, status, err)
		}
		want[id]++
	}
}

// TestKafkaDownAndBack kills devkafka (three brokers, a data directory,
// synced writes) under a running runtime: the runtime keeps serving the
// playground ingress and the state API, /readyz answers 503 naming the
// Kafka ingress and egress, and once devkafka is back on the same ports
// the runtime reconnects by itself; every record acknowledged before,
// during and after the outage reaches the output topic exactly once.
func TestKafkaDownAndBack(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the ingress's 15 s readiness timeout")
	}
	t.Parallel()
	needKcat(t)
	port, err := testport.FreeRange(3)
	if err != nil {
		t.Fatal(err)
	}
	dk := startDevkafka(t, "-port", strconv.Itoa(port), "-data-dir", t.TempDir(), "-sync", "-topic", "in:4", "-topic", "counts:3")
	fn := kafkaCounterFn(t, "kc/out")
	rt := newRuntimeWith(t, func(in, out int) string {
		return kafkaModule(fn, dk.brokers, "exactly-once", in, out)
	})
	rt.start()

	want := map[string]int{}
	produce := func(round int) {
		var lines []string
		for k := range 10 {
			id := "k" + strconv.Itoa(k)
			lines = append(lines, fmt.Sprintf("%s:r%d", id, round))
			want[id]++
		}
		kcatProduce(t, dk.brokers, "in", lines...)
	}
	produce(1)
	rt.waitCounters(want, 30*time.Second)
	if out := kcatReadUntil(t, dk.brokers, "counts", 10, 30*time.Second); len(out) != 10 {
		t.Fatalf("before the outage: %d records on the output topic, want 10", len(out))
	}

	dk.kill()
	down := time.Now()
	// While Kafka is down: the playground ingress and the state API work,
	// the effects wait in the egress's outbox.
	playgroundCounts(t, rt, want, "k1", "k2", "p1", "p2")
	rt.waitCounters(want, 10*time.Second)
	body := rt.waitReadyz("503 naming kc/in and kc/out", 40*time.Second, notReadyFor)
	t.Logf("/readyz %v after Kafka went down: %s", time.Since(down).Round(time.Second), strings.TrimSpace(body))
	playgroundCounts(t, rt, want, "k1", "p1")
	rt.waitCounters(want, 10*time.Second)
	select {
	case <-rt.exited:
		t.Fatalf("statefun exited while Kafka was down:\n%s", rt.logs())
	default:
	}

	dk.start() // same flags: same ports, same data directory
	back := time.Now()
	rt.waitReadyz("200 once Kafka is back", 40*time.Second, readyOK)
	t.Logf("ready %v after Kafka came back", time.Since(back).Round(time.Millisecond))
	produce(2)
	rt.waitCounters(want, 30*time.Second)
	total := 0
	for _, n := range want {
		total += n
	}
	checkEffects(t, kcatReadUntil(t, dk.brokers, "counts", total, 30*time.Second), want, nil)
}

// TestKafkaUnreachableAtStart starts the runtime with brokers nobody
// listens on: it starts anyway, serves the playground ingress and the state
// API, and /readyz says which Kafka ingress and egress are not connected
// and why. When a Kafka cluster (kfake, three brokers) appears on those
// ports, the runtime connects by itself and everything flows, once.
func TestKafkaUnreachableAtStart(t *testing.T) {
	t.Parallel()
	needKcat(t)
	var ports []int
	var addrs []string
	for range 3 {
		p := freePort(t)
		ports = append(ports, p)
		addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", p))
	}
	brokers := strings.Join(addrs, ",")
	fn := kafkaCounterFn(t, "kc/out")
	rt := newRuntimeWith(t, func(in, out int) string {
		return kafkaModule(fn, brokers, "exactly-once", in, out)
	})
	rt.startWhen(notReadyFor)
	_, body, _ := rt.readyz()
	t.Logf("/readyz with unreachable brokers: %s", strings.TrimSpace(body))
	for _, frag := range []string{"kafka ingress kc/in has not reached its brokers", addrs[0], "connection refused", "kafka egress kc/out: not connected"} {
		if !strings.Contains(body, frag) {
			t.Errorf("/readyz says %q; want it to contain %q", body, frag)
		}
	}
	want := map[string]int{}
	playgroundCounts(t, rt, want, "p1", "p2", "p1")
	rt.waitCounters(want, 10*time.Second)

	cluster := kafkaCluster(t, kfake.Ports(ports...))
	if got := brokersOf(cluster); got != brokers {
		t.Fatalf("kfake listens on %s, want %s", got, brokers)
	}
	up := time.Now()
	rt.waitReadyz("200 once Kafka is reachable", 40*time.Second, readyOK)
	t.Logf("ready %v after Kafka became reachable", time.Since(up).Round(time.Millisecond))
	kcatProduce(t, brokers, "in", "k1:a", "k2:a", "p1:a")
	want["k1"]++
	want["k2"]++
	want["p1"]++
	rt.waitCounters(want, 30*time.Second)
	checkEffects(t, kcatReadUntil(t, brokers, "counts", 6, 30*time.Second), want, nil)
}
