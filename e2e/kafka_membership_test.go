package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestKafkaIngressGroupMembership runs, one after the other, four
// runtimes whose Kafka ingresses have different ids (so different
// static-membership instance ids) and the same consumerGroupId, as
// applications reusing a group id do:
//
//   - the first stops with SIGTERM and leaves the group, so the second
//     joins at once, though the first's session timeout is 60 s;
//   - the third is run with --kafka-ingress-keep-membership and stays in
//     the group when it stops, so the fourth waits for its session timeout
//     (12 s), and says at WARN what it waits for: the group and the
//     member, by instance id.
func TestKafkaIngressGroupMembership(t *testing.T) {
	t.Parallel()
	dk := startDevkafka(t, "-port", "0", "-brokers", "1", "-topic", "in:4", "-topic", "counts:3")
	fn := kafkaCounterFn(t, "kc/out")
	app := func(id, session string) *runtime {
		return newRuntimeWith(t, func(in, out int) string {
			mod := kafkaModule(fn, dk.brokers, "exactly-once", in, out, "session.timeout.ms: "+session)
			return strings.Replace(mod, "id: kc/in", "id: kc/"+id, 1)
		})
	}

	first := app("first", "60000")
	saStart(first, "http", http.DefaultClient)
	first.waitLog(30*time.Second, "joined its consumer group", "group=kc", "instance_id=statefun-kc/first")
	if err := first.stop(); err != nil {
		t.Fatal(err)
	}

	second := app("second", "60000")
	started := time.Now()
	saStart(second, "http", http.DefaultClient)
	second.waitLog(20*time.Second, "joined its consumer group", "group=kc", "instance_id=statefun-kc/second")
	t.Logf("the second joined %v after its start (the first's session timeout: 60 s)", time.Since(started).Round(time.Millisecond))
	first.waitLog(time.Second, "left its consumer group", "instance_id=statefun-kc/first")
	if err := second.stop(); err != nil {
		t.Fatal(err)
	}

	third := app("third", "12000")
	saStart(third, "http", http.DefaultClient, "--kafka-ingress-keep-membership")
	third.waitLog(30*time.Second, "joined its consumer group", "group=kc", "instance_id=statefun-kc/third")
	if err := third.stop(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(third.logs(), "left its consumer group") {
		t.Errorf("the third left its group though run with --kafka-ingress-keep-membership:\n%s", third.logs())
	}

	fourth := app("fourth", "12000")
	saStart(fourth, "http", http.DefaultClient)
	fourth.waitLog(time.Second, "level=INFO", "joining its consumer group", "group=kc", "session_timeout=12s")
	wait := fourth.waitLog(20*time.Second, "level=WARN", "still joining its consumer group", "group=kc", "instance statefun-kc/third")
	t.Logf("the fourth, waiting: %s", wait)
	fourth.waitLog(30*time.Second, "joined its consumer group", "group=kc", "instance_id=statefun-kc/fourth")
}
