package e2e

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestKafkaBadRecords puts records the ingress cannot deliver — a null key,
// a key that is not UTF-8, an empty key — into partition 0 of the input
// topic, followed by good records: consumption goes on past them, each is
// counted in statefun_kafka_ingress_bad_records_total on /metrics by reason
// and logged with its topic, partition and offset.
//
// A record "from a topic with no route" cannot be produced through a
// module: the ingress subscribes to exactly the topics it routes, by name,
// so the broker never hands it a record of another topic (the consumer
// keeps a guard for it, covered by the package's own tests).
//
// A function that sends a value that is not a KafkaProducerRecord to the
// Kafka egress gets a protocol violation naming the function, the id and
// the egress; the other addresses go on.
func TestKafkaBadRecords(t *testing.T) {
	t.Parallel()
	needKcat(t)
	cluster := kafkaCluster(t)
	brokers := brokersOf(cluster)
	fn := kafkaCounterFn(t, "kc/out")
	rt := newRuntimeWith(t, func(in, out int) string {
		return kafkaModule(fn, brokers, "exactly-once", in, out)
	})
	rt.start()

	// kcat -K: gives a line without ':' a null key; everything to
	// partition 0, in this order.
	bad := []struct{ line, reason string }{
		{"a record without a key", "null-key"},
		{"\xff\xfe\xfd:a key that is not UTF-8", "invalid-utf8-key"},
		{":an empty key", "empty-key"},
	}
	var lines []string
	for _, b := range bad {
		lines = append(lines, b.line)
	}
	lines = append(lines, "k1:a", "k2:a", "k1:b", "k5:badvalue", "k2:b")
	cmd := exec.Command(kcat, "-P", "-b", brokers, "-t", "in", "-p", "0", "-K:")
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kcat -P: %v\n%s", err, out)
	}

	// Consumption went on past the bad records.
	rt.waitCounters(map[string]int{"k1": 2, "k2": 2}, 30*time.Second)
	checkEffects(t, kcatReadUntil(t, brokers, "counts", 4, 30*time.Second), map[string]int{"k1": 2, "k2": 2}, nil)

	for offset, b := range bad {
		n, err := rt.metric("statefun_kafka_ingress_bad_records_total", `ingress="kc/in"`, `topic="in"`, `reason="`+b.reason+`"`)
		if err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Errorf("statefun_kafka_ingress_bad_records_total{reason=%q} = %v, want 1", b.reason, n)
		}
		line := rt.waitLog(5*time.Second, `msg="kafka record stored as a dead letter"`, "ingress=kc/in", "topic=in",
			"partition=0", fmt.Sprintf("offset=%d", offset), "reason="+b.reason)
		t.Logf("%s: %s", b.reason, line[strings.Index(line, "msg="):])
	}
	if n, _ := rt.metric("statefun_kafka_ingress_records_total", `ingress="kc/in"`); n != 5 {
		t.Errorf("statefun_kafka_ingress_records_total = %v, want the 5 good records", n)
	}

	// The value of the wrong type: refused as a protocol violation, with
	// the function, the id and the egress in the log; retried, never sent.
	line := rt.waitLog(10*time.Second, `msg="invocation failed, will retry"`, "function=kc/counter", "id=k5 ",
		"protocol_violation=true", "egress message 0 to kc/out", "KafkaProducerRecord")
	t.Logf("a non-KafkaProducerRecord value: %s", line[strings.Index(line, "msg="):])
	if n, err := rt.counter("k5"); err != nil || n != -1 {
		t.Errorf("kc/counter/k5 count = %d (%v); want no state: a refused response changes nothing", n, err)
	}
	for _, r := range kcatRead(t, brokers, "counts") {
		if r.Key != nil && *r.Key == "k5" {
			t.Errorf("the record of the wrong type reached the output topic: %v", r)
		}
	}
}
