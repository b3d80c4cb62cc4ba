package e2e

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/statefun-go/statefun/internal/sdktest"
	"github.com/statefun-go/statefun/internal/testport"
)

// TestKafkaGoSDKDevkafka runs Kafka in, official-Go-SDK counter, Kafka out
// (KafkaEgressBuilder, exactly-once) against cmd/devkafka as a process of
// its own with three brokers, with kcat producing the input and reading the
// output read_committed. A record the function sends with an empty key
// arrives with a null key.
func TestKafkaGoSDKDevkafka(t *testing.T) {
	t.Parallel()
	needKcat(t)
	port, err := testport.FreeRange(3)
	if err != nil {
		t.Fatal(err)
	}
	dk := startDevkafka(t, "-port", strconv.Itoa(port), "-brokers", "3", "-topic", "in:4", "-topic", "counts:3")
	if want := fmt.Sprintf("127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", port, port+1, port+2); dk.brokers != want {
		t.Fatalf("devkafka serves %s, want %s", dk.brokers, want)
	}
	fn := kafkaCounterFn(t, "kc/out")
	rt := newRuntimeWith(t, func(in, out int) string {
		return kafkaModule(fn, dk.brokers, "exactly-once", in, out)
	})
	rt.start()

	want := map[string]int{}
	var lines []string
	for round := range 5 {
		for k := range 10 {
			id := "k" + strconv.Itoa(k)
			lines = append(lines, id+":round"+strconv.Itoa(round))
			want[id]++
		}
	}
	lines = append(lines, "k3:nokey")
	want["k3"]++
	kcatProduce(t, dk.brokers, "in", lines...)

	rt.waitCounters(want, 30*time.Second)
	out := kcatReadUntil(t, dk.brokers, "counts", len(lines), 30*time.Second)
	checkEffects(t, out, want, map[string]bool{"k3=6": true})
}

// TestKafkaJSSDK runs the official JavaScript SDK function jsfn/kafka,
// which writes kafkaEgressMessage records, between a Kafka ingress and an
// at-least-once Kafka egress on an in-process three-broker kfake cluster;
// kcat produces and reads. Nothing is lost (and, without a crash, nothing
// is duplicated); the record with an empty key arrives with a null key.
func TestKafkaJSSDK(t *testing.T) {
	t.Parallel()
	needKcat(t)
	js := sdktest.StartJSServer(t)
	cluster := kafkaCluster(t, kfake.SeedTopics(3, "js-in", "js-counts"))
	brokers := brokersOf(cluster)
	rt := newRuntimeWith(t, func(in, out int) string {
		return fmt.Sprintf(`kind: io.statefun.endpoints.v2/http
spec:
  functions: jsfn/*
  urlPathTemplate: %s
---
kind: io.statefun.kafka.v1/ingress
spec:
  id: jsfn/in
  address: %s
  consumerGroupId: js
  startupPosition:
    type: earliest
  topics:
    - topic: js-in
      valueType: jsfn/text
      targets: [jsfn/kafka]
---
kind: io.statefun.kafka.v1/egress
spec:
  id: jsfn/kafka-out
  address: %s
  deliverySemantic:
    type: at-least-once
`, js, brokers, brokers)
	})
	rt.start()

	want := map[string]int{}
	var lines []string
	for round := range 4 {
		for _, id := range []string{"alice", "bob", "carol", "dave", "eve"} {
			lines = append(lines, id+":login"+strconv.Itoa(round))
			want[id]++
		}
	}
	lines = append(lines, "eve:nokey")
	want["eve"]++
	kcatProduce(t, brokers, "js-in", lines...)

	rt.waitStates("jsfn/kafka", "seen", want, 30*time.Second)
	out := kcatReadUntil(t, brokers, "js-counts", len(lines), 30*time.Second)
	checkEffects(t, out, want, map[string]bool{"eve=5": true})
}
