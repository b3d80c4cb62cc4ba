package bench

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/statefun-go/statefun/internal/cluster/clusterconfig"
)

var flagVsRounds = flag.Int("vs.rounds", envInt("STATEFUN_BENCH_VS_ROUNDS", 2),
	"BenchmarkClusterVsEmbedded: rounds; each round runs every row once per mode, the modes' order alternating")

// The modes BenchmarkClusterVsEmbedded compares.
const (
	modeEmbedded = "embedded"
	modeCluster  = "cluster"
)

// BenchmarkClusterVsEmbedded runs the same work on an embedded runtime and
// on a one-node cluster, interleaved in one invocation, each a child
// process started afresh for each row with a kfake child of its own (one
// broker, 8 partitions per topic) and the official-SDK counter (a child,
// shared). Rows, in each of -vs.rounds rounds:
//
//   - load=full: a load generator (a child) produces -kafka.records
//     records over -kafka.keys keys to the Kafka ingress topic bench-in,
//     at most -kafka.window of them not yet visible to its read_committed
//     consumer of bench-out; bench/counter counts each and sends the count
//     to the exactly-once Kafka egress. runtime-cpu-us/record is the CPU
//     time of the runtime's process per record.
//   - load=light/path=playground and path=kafka-router: the rows of
//     BenchmarkClusterLatency (one record at a time over 100 keys), for
//     both modes.
//
// Both modes have P = -cluster.partitions. The summary at the end gives
// each round's CPU per record of both and their ratio. With -load.profile
// each runtime writes a CPU profile of its measured interval there
// (cpu-<mode>-<row>-r<round>.pprof).
func BenchmarkClusterVsEmbedded(b *testing.B) {
	fnAddr, fnPID := startServer(b, "kcounter")
	fnURL := "http://" + fnAddr + "/statefun"
	type key struct{ row, mode string }
	results := map[key][]*clusterRunResult{}
	rows := []string{"full", "light/path=playground", "light/path=kafka-router"}
	for round := range *flagVsRounds {
		modes := []string{modeEmbedded, modeCluster}
		if round%2 == 1 {
			slices.Reverse(modes)
		}
		for _, row := range rows {
			for _, mode := range modes {
				b.Run(fmt.Sprintf("round=%d/load=%s/mode=%s", round, row, mode), func(b *testing.B) {
					var r *clusterRunResult
					for range b.N {
						r = runVs(b, fnURL, fnPID, mode, row, round)
					}
					r.report(b)
					results[key{row, mode}] = append(results[key{row, mode}], r)
				})
			}
		}
	}
	perRec := func(r *clusterRunResult) float64 { return 1e6 * r.cpuNodes.Seconds() / float64(r.load.Visible) }
	for i := range *flagVsRounds {
		e, c := results[key{"full", modeEmbedded}], results[key{"full", modeCluster}]
		if i >= len(e) || i >= len(c) {
			break
		}
		b.Logf("round %d, full load: embedded %.0f records/s, p50 %.0f ms, runtime CPU %.0f µs/record; cluster %.0f records/s, p50 %.0f ms, runtime CPU %.0f µs/record; cluster/embedded CPU %.2f×, records/s %.2f×",
			i, e[i].load.rate(), ms(e[i].load.P50), perRec(e[i]), c[i].load.rate(), ms(c[i].load.P50), perRec(c[i]),
			perRec(c[i])/perRec(e[i]), c[i].load.rate()/e[i].load.rate())
		for _, row := range rows[1:] {
			e, c := results[key{row, modeEmbedded}], results[key{row, modeCluster}]
			if i < len(e) && i < len(c) {
				b.Logf("round %d, %s: embedded p50 %.1f ms, p99 %.1f ms; cluster p50 %.1f ms, p99 %.1f ms",
					i, row, ms(e[i].load.P50), ms(e[i].load.P99), ms(c[i].load.P50), ms(c[i].load.P99))
			}
		}
	}
}

// runVs starts a runtime of mode for row and measures it.
func runVs(b *testing.B, fnURL string, fnPID int, mode, row string, round int) *clusterRunResult {
	b.StopTimer()
	target := kafkaCounterFn
	if strings.HasSuffix(row, "kafka-router") {
		target = kafkaRouterFn
	}
	profile := ""
	if *flagProfile != "" {
		if err := os.MkdirAll(*flagProfile, 0o755); err != nil {
			b.Fatal(err)
		}
		name := strings.NewReplacer("/", "-", "=", "-").Replace(row)
		profile = filepath.Join(*flagProfile, fmt.Sprintf("cpu-%s-%s-r%d.pprof", mode, name, round))
	}
	c := startVsNode(b, fnPID, mode, fmt.Sprintf("vs%d%s", round, strings.NewReplacer("/", "", "=", "", "-", "").Replace(row)),
		func(brokers string, port int) string {
			return clusterBenchModule(fnURL, brokers, port) + kafkaIngressTo(brokers, target)
		}, profile)
	spec := kafkaLoadSpec{Brokers: strings.Split(c.brokers, ","), Records: *flagKafkaRecords, Keys: *flagKafkaKeys,
		Window: *flagKafkaWindow, MaxTime: *flagKafkaMaxTime}
	if row != "full" {
		spec.Records, spec.Keys, spec.Window = *flagClusterLatRecords, 100, 1
	}
	if strings.HasSuffix(row, "playground") {
		spec.Ingress = ingresses(c.nodes)
	}
	return c.measure(b, spec)
}

// kafkaIngressTo is a module's Kafka ingress of bench-in to the function
// type target.
func kafkaIngressTo(brokers, target string) string {
	return fmt.Sprintf(`---
kind: io.statefun.kafka.v1/ingress
spec:
  id: bench/in
  address: %s
  consumerGroupId: bench
  startupPosition:
    type: earliest
  topics:
    - topic: %s
      valueType: %s
      targets: [%s]
`, brokers, kafkaInTopic, kafkaStampType, target)
}

// startVsNode starts Kafka and one runtime of mode (a one-node cluster of
// application appID, or an embedded runtime) with the module mod makes,
// and waits until it serves. With profile set, the runtime writes a CPU
// profile of the measured interval there.
func startVsNode(b *testing.B, fnPID int, mode, appID string, mod func(brokers string, port int) string, profile string) *benchCluster {
	b.Helper()
	js, err := json.Marshal(kafkaCluster{Brokers: *flagKafkaBrokers, Partitions: *flagKafkaPartitions})
	if err != nil {
		b.Fatal(err)
	}
	c := &benchCluster{fnPID: fnPID, mc: &http.Client{Timeout: 10 * time.Second}}
	c.kafka = startChild(b, "kafka", kafkaEnv+"="+string(js))
	c.brokers = c.kafka.expect(b, "listening on ", time.Minute)
	admin := "127.0.0.1:" + strconv.Itoa(freePort(b))
	spec := clusterNodeSpec{
		Module:    mod(c.brokers, freePort(b)),
		Dir:       b.TempDir(),
		AdminAddr: admin,
		Cluster: clusterconfig.Config{Brokers: strings.Split(c.brokers, ","), AppID: appID, NodeID: "node-0",
			Advertise: "http://" + admin, Partitions: *flagClusterP, CommitInterval: *flagClusterCommit},
		GOGC:       *flagGOGC,
		Embedded:   mode == modeEmbedded,
		Partitions: *flagClusterP,
		Profile:    profile,
	}
	js, err = json.Marshal(spec)
	if err != nil {
		b.Fatal(err)
	}
	n := startNodeChild(b, clusterNodeEnv+"="+string(js))
	c.nodes = append(c.nodes, n)
	if mode == modeCluster {
		c.waitServing(b, c.nodes, 2*time.Minute)
	} else if err := waitReadyz(b.Context(), c.mc, n.admin+"/readyz", time.Minute); err != nil {
		b.Fatal(err)
	}
	if profile != "" {
		c.onStart = func() { signalChild(b, n.pid, syscall.SIGUSR1) }
		c.onStop = func() { signalChild(b, n.pid, syscall.SIGUSR2) }
	}
	return c
}

func signalChild(b *testing.B, pid int, sig syscall.Signal) {
	if err := syscall.Kill(pid, sig); err != nil {
		b.Fatalf("bench: signal %v to %d: %v", sig, pid, err)
	}
}

// profileOnSignal writes a CPU profile of this process to path from a
// SIGUSR1 to the next SIGUSR2 (a child's measured interval). The returned
// function stops listening, and the profile if one runs.
func profileOnSignal(path string) func() {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGUSR2)
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		var f *os.File
		stop := func() {
			if f != nil {
				pprof.StopCPUProfile()
				_ = f.Close()
				f = nil
			}
		}
		defer stop()
		for {
			select {
			case <-done:
				return
			case s := <-sigs:
				if s == syscall.SIGUSR2 {
					stop()
					continue
				}
				if f != nil {
					continue
				}
				var err error
				if f, err = os.Create(path); err != nil {
					fmt.Fprintln(os.Stderr, "bench: profile:", err)
					continue
				}
				if err := pprof.StartCPUProfile(f); err != nil {
					fmt.Fprintln(os.Stderr, "bench: profile:", err)
					_ = f.Close()
					f = nil
				}
			}
		}
	}()
	return func() {
		signal.Stop(sigs)
		close(done)
		<-stopped
	}
}
