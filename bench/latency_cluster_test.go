package bench

import (
	"flag"
	"fmt"
	"strings"
	"testing"
)

var flagClusterLatRecords = flag.Int("cluster.latrecords", envInt("STATEFUN_BENCH_CLUSTER_LAT_RECORDS", 300),
	"BenchmarkClusterLatency: records per path, sent one at a time")

// BenchmarkClusterLatency measures cluster mode's latency at light load:
// one node (kfake, the counter and the node as child processes), one
// record at a time (window 1) over 100 keys, -cluster.latrecords records
// per path:
//
//   - path=playground: a POST to the node's playground ingress, to
//     bench/counter, whose count goes to the Kafka egress: one function.
//   - path=kafka-router: a record produced to the Kafka ingress topic
//     bench-in, to bench/router, which sends it on to bench/counter (a
//     message between functions, through the messages topic), whose count
//     goes to the Kafka egress: two functions.
//
// p50/p99 run from the POST (the produce) to the count being visible to a
// read_committed consumer of the output.
func BenchmarkClusterLatency(b *testing.B) {
	fnAddr, fnPID := startServer(b, "kcounter")
	fnURL := "http://" + fnAddr + "/statefun"
	for _, path := range []string{"playground", "kafka-router"} {
		b.Run("path="+path, func(b *testing.B) {
			var r *clusterRunResult
			for i := range b.N {
				b.StopTimer()
				c := startBenchClusterModule(b, fnPID, 1, fmt.Sprintf("lat%s%d", strings.ReplaceAll(path, "-", ""), i),
					func(brokers string, port int) string {
						return clusterBenchModule(fnURL, brokers, port) + clusterRouterIngress(brokers)
					}, nil)
				spec := kafkaLoadSpec{Brokers: strings.Split(c.brokers, ","), Records: *flagClusterLatRecords, Keys: 100,
					Window: 1, MaxTime: *flagKafkaMaxTime}
				if path == "playground" {
					spec.Ingress = ingresses(c.nodes)
				}
				r = c.measure(b, spec)
			}
			r.report(b)
		})
	}
}

// clusterRouterIngress is a module's Kafka ingress of bench-in to
// bench/router.
func clusterRouterIngress(brokers string) string { return kafkaIngressTo(brokers, kafkaRouterFn) }
