package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/statefun-go/statefun/internal/app"
	"github.com/statefun-go/statefun/internal/cluster/clusterconfig"
	"github.com/statefun-go/statefun/internal/module"
)

var (
	flagClusterNodes = flag.String("cluster.nodes", envStr("STATEFUN_BENCH_CLUSTER_NODES", "1,2,3"),
		"runtime processes of each BenchmarkCluster run, comma-separated")
	flagClusterP = flag.Int("cluster.partitions", envInt("STATEFUN_BENCH_CLUSTER_PARTITIONS", 8),
		"P of the cluster benchmarks' application")
	flagClusterCommit = flag.Duration("cluster.commit", envDur("STATEFUN_BENCH_CLUSTER_COMMIT", 0),
		"--cluster-commit-interval of the nodes (0: the runtime's default)")
	flagClusterKillAfter = flag.Duration("cluster.killafter", envDur("STATEFUN_BENCH_CLUSTER_KILLAFTER", time.Second),
		"BenchmarkClusterFailover: how long the load runs through the other nodes before each failure")
)

// clusterNodeEnv carries a clusterNodeSpec, as JSON, to a cnode child.
const clusterNodeEnv = "STATEFUN_BENCH_CLUSTER_NODE"

// clusterNodeSpec is one runtime process of the cluster benchmarks.
type clusterNodeSpec struct {
	Module    string
	Dir       string // the node's data directory and module file live here
	AdminAddr string
	Cluster   clusterconfig.Config
	GOGC      int
	// Embedded runs the node in embedded mode (Cluster is not used), with
	// Partitions partitions: BenchmarkClusterVsEmbedded's other side.
	Embedded   bool
	Partitions int
	// Profile, when set, is where the child writes a CPU profile from
	// SIGUSR1 to SIGUSR2.
	Profile string
}

// runClusterNodeChild is a cluster node in a process of its own, as
// `statefun run --cluster-*` runs it: it prints "admin <addr>" and
// "ingress <addr>", then runs until stdin closes (or it is killed).
func runClusterNodeChild() error {
	var spec clusterNodeSpec
	if err := json.Unmarshal([]byte(os.Getenv(clusterNodeEnv)), &spec); err != nil {
		return err
	}
	debug.SetGCPercent(cmp.Or(spec.GOGC, 400))
	modPath := filepath.Join(spec.Dir, "module.yaml")
	if err := os.WriteFile(modPath, []byte(spec.Module), 0o644); err != nil {
		return err
	}
	cfg := app.Config{ModulePath: modPath, DataDir: filepath.Join(spec.Dir, "data"), AdminAddr: spec.AdminAddr,
		ListenHost: "127.0.0.1", Cluster: &spec.Cluster,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	if spec.Embedded {
		cfg.Cluster, cfg.Partitions = nil, spec.Partitions
	}
	a, err := app.Start(cfg)
	if err != nil {
		return err
	}
	if spec.Profile != "" {
		stopProfile := profileOnSignal(spec.Profile)
		defer stopProfile()
	}
	fmt.Printf("admin %s\n", a.Addr("admin"))
	fmt.Printf("ingress %s\n", a.Addr("ingress0"))
	// SIGTERM stops it cleanly, as it stops statefun run (a planned
	// stop); so does stdin closing. A failed engine (a fenced zombie)
	// exits 1, as statefun run does.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); stop() }()
	select {
	case <-ctx.Done():
		return a.Close()
	case <-a.Failed():
		_ = a.Close()
		return errors.New("the engine failed")
	}
}

// benchCluster is a kfake child, the Kafka counter's function child and
// the runtime nodes of one cluster run.
type benchCluster struct {
	brokers string
	kafka   *child
	fnPID   int
	nodes   []*clusterNodeProc
	mc      *http.Client
	// onStart and onStop, when set, run as the measured interval starts
	// and ends.
	onStart, onStop func()
}

// clusterNodeProc is one node's child process.
type clusterNodeProc struct {
	*child
	admin, ingress string // http://host:port
	env            string // its clusterNodeSpec, to start it again
}

// startBenchCluster starts Kafka (-kafka.brokers brokers) and n nodes of
// application app, each with a playground ingress and the exactly-once
// Kafka egress of bench/counter, and waits until the group has assigned
// all of P to nodes that serve it. props are --cluster-property settings.
func startBenchCluster(b *testing.B, fnURL string, fnPID, n int, appID string, props ...string) *benchCluster {
	b.Helper()
	return startBenchClusterWith(b, fnURL, fnPID, n, appID, nil, props...)
}

// startBenchClusterWith is startBenchCluster with tweak, if not nil,
// changing each node's cluster configuration.
func startBenchClusterWith(b *testing.B, fnURL string, fnPID, n int, appID string, tweak func(*clusterconfig.Config), props ...string) *benchCluster {
	b.Helper()
	return startBenchClusterModule(b, fnPID, n, appID, func(brokers string, port int) string {
		return clusterBenchModule(fnURL, brokers, port)
	}, tweak, props...)
}

// startBenchClusterModule is startBenchClusterWith with each node's module
// made by mod, given the brokers and the playground ingress's port.
func startBenchClusterModule(b *testing.B, fnPID, n int, appID string, mod func(brokers string, port int) string,
	tweak func(*clusterconfig.Config), props ...string) *benchCluster {
	b.Helper()
	js, err := json.Marshal(kafkaCluster{Brokers: *flagKafkaBrokers, Partitions: *flagKafkaPartitions})
	if err != nil {
		b.Fatal(err)
	}
	c := &benchCluster{fnPID: fnPID, mc: &http.Client{Timeout: 10 * time.Second}}
	c.kafka = startChild(b, "kafka", kafkaEnv+"="+string(js))
	c.brokers = c.kafka.expect(b, "listening on ", time.Minute)
	var kprops []module.KafkaProperty
	for _, p := range props {
		k, v, _ := strings.Cut(p, "=")
		kprops = append(kprops, module.KafkaProperty{Key: k, Value: v})
	}
	for i := range n {
		id := "node-" + strconv.Itoa(i)
		admin := "127.0.0.1:" + strconv.Itoa(freePort(b))
		spec := clusterNodeSpec{
			Module:    mod(c.brokers, freePort(b)),
			Dir:       b.TempDir(),
			AdminAddr: admin,
			Cluster: clusterconfig.Config{Brokers: strings.Split(c.brokers, ","), AppID: appID, NodeID: id,
				Advertise: "http://" + admin, Partitions: *flagClusterP, CommitInterval: *flagClusterCommit,
				Properties: kprops},
			GOGC: *flagGOGC,
		}
		if tweak != nil {
			tweak(&spec.Cluster)
		}
		js, err := json.Marshal(spec)
		if err != nil {
			b.Fatal(err)
		}
		c.nodes = append(c.nodes, startNodeChild(b, clusterNodeEnv+"="+string(js)))
	}
	c.waitServing(b, c.nodes, 2*time.Minute)
	return c
}

// startNodeChild starts a cnode child with env (its spec) and waits until
// its listeners are bound.
func startNodeChild(b *testing.B, env string) *clusterNodeProc {
	b.Helper()
	ch := startChild(b, "cnode", env)
	np := &clusterNodeProc{child: ch, env: env, admin: "http://" + ch.expect(b, "admin ", 2*time.Minute)}
	np.ingress = "http://" + ch.expect(b, "ingress ", time.Minute)
	return np
}

// restart starts node i again, with its node id, data directory and
// ports, once its process has exited.
func (c *benchCluster) restart(b *testing.B, i int) {
	b.Helper()
	<-c.nodes[i].exited
	c.nodes[i] = startNodeChild(b, c.nodes[i].env)
}

// waitServing waits until nodes own all of P between them, each some, and
// restore none, and returns when that was first seen.
func (c *benchCluster) waitServing(b *testing.B, nodes []*clusterNodeProc, timeout time.Duration) time.Time {
	b.Helper()
	deadline := time.Now().Add(timeout)
	for {
		owned, restoring, ok := 0.0, 0.0, true
		for _, n := range nodes {
			m, err := scrape(b.Context(), c.mc, n.admin+"/metrics")
			if err != nil || (m.sum("statefun_cluster_owned_partitions") == 0 && len(nodes) <= *flagClusterP) {
				ok = false
				break
			}
			owned += m.sum("statefun_cluster_owned_partitions")
			restoring += m.sum("statefun_cluster_restoring_partitions")
		}
		if ok && int(owned) == *flagClusterP && restoring == 0 {
			return time.Now()
		}
		if time.Now().After(deadline) {
			b.Fatalf("bench: the nodes own %v of %d partitions and restore %v after %v", owned, *flagClusterP, restoring, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ingresses are the nodes' ingress URL prefixes of bench/counter.
func ingresses(nodes []*clusterNodeProc) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.ingress+"/"+kafkaCounterFn+"/")
	}
	return out
}

// clusterBenchModule is a node's module: bench/* at fnURL, a playground
// ingress on port, the exactly-once Kafka egress bench/out.
func clusterBenchModule(fnURL, brokers string, port int) string {
	return fmt.Sprintf(`kind: io.statefun.endpoints.v2/http
spec:
  functions: bench/*
  urlPathTemplate: %s
  transport:
    type: io.statefun.transports.v1/async
---
kind: io.statefun.playground.v1/ingress
spec:
  port: %d
---
kind: io.statefun.kafka.v1/egress
spec:
  id: %s
  address: %s
  deliverySemantic:
    type: exactly-once
    transactionTimeout: 1min
`, fnURL, port, kafkaEgressID, brokers)
}

// BenchmarkCluster runs the Kafka counter in cluster mode with 1, 2 and 3
// runtime processes (-cluster.nodes) on this machine: a kfake child
// (-kafka.brokers), the official-SDK counter bench/counter (a child), the
// nodes (children, P = -cluster.partitions) and a load generator (a child)
// that POSTs -kafka.records records over -kafka.keys keys to the nodes'
// playground ingresses in turn, at most -kafka.window of them not yet
// visible to its read_committed consumer of the egress topic. Each node's
// ingress answers once Kafka has the record; the record is counted and its
// count produced to bench-out in a node's transaction. records/s is the
// records visible on the output over the time from the first POST to the
// last visible record; p50/p99 are from a record's POST to its count
// being visible; runtime-cpu-us/record is the CPU time of all nodes
// together per record. The processes share the machine's cores, so more
// nodes do not add CPU: the figures say what the protocol costs.
func BenchmarkCluster(b *testing.B) {
	fnAddr, fnPID := startServer(b, "kcounter")
	for _, s := range strings.Split(*flagClusterNodes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			b.Fatalf("bench: -cluster.nodes %q: want positive counts", *flagClusterNodes)
		}
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			var r *clusterRunResult
			for range b.N {
				r = runCluster(b, "http://"+fnAddr+"/statefun", fnPID, n)
			}
			r.report(b)
		})
	}
}

// clusterRunResult is one measured cluster run.
type clusterRunResult struct {
	nodes         int
	keys, window  int
	input         string // where the records went in
	load          kafkaLoadResult
	cpuNodes      time.Duration
	cpuFn         time.Duration
	cpuKafka      time.Duration
	cpuGen        time.Duration
	cpuOK         bool
	machine       machineCPU
	before, after []metrics
}

func runCluster(b *testing.B, fnURL string, fnPID, n int) *clusterRunResult {
	b.StopTimer()
	c := startBenchCluster(b, fnURL, fnPID, n, fmt.Sprintf("bench%d", n))
	spec := kafkaLoadSpec{Brokers: strings.Split(c.brokers, ","), Records: *flagKafkaRecords, Keys: *flagKafkaKeys,
		Window: *flagKafkaWindow, MaxTime: *flagKafkaMaxTime, Ingress: ingresses(c.nodes)}
	return c.measure(b, spec)
}

// measure runs the load spec through the cluster c, the clock stopped
// until the load generator's warm-up is done.
func (c *benchCluster) measure(b *testing.B, spec kafkaLoadSpec) *clusterRunResult {
	gen := c.startLoad(b, spec)
	n := len(c.nodes)
	r := &clusterRunResult{nodes: n, keys: spec.Keys, window: spec.Window, input: "the nodes' playground ingresses in turn"}
	if len(spec.Ingress) == 0 {
		r.input = "the Kafka ingress topic " + kafkaInTopic
	}
	r.before = c.scrapeAll(b)
	pids := c.pids(gen.pid)
	cpu0, ok0 := cpuOf(pids...)
	mach0 := readMachineCPU()
	if c.onStart != nil {
		c.onStart()
	}
	b.StartTimer()
	if _, err := io.WriteString(gen.stdin, "go\n"); err != nil {
		b.Fatal(err)
	}
	if err := json.Unmarshal([]byte(gen.expect(b, "result ", *flagKafkaMaxTime+time.Minute)), &r.load); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	if c.onStop != nil {
		c.onStop()
	}
	r.machine = readMachineCPU().minus(mach0)
	cpu1, ok1 := cpuOf(pids...)
	r.cpuOK = ok0 && ok1
	for i := range c.nodes {
		r.cpuNodes += cpu1[i] - cpu0[i]
	}
	k := len(c.nodes)
	r.cpuFn, r.cpuKafka, r.cpuGen = cpu1[k]-cpu0[k], cpu1[k+1]-cpu0[k+1], cpu1[k+2]-cpu0[k+2]
	r.after = c.scrapeAll(b)
	if l := r.load; l.Duplicates+l.Wrong+l.Extra > 0 {
		b.Errorf("bench: the output topic held %d duplicate, %d wrong and %d extra records; want none", l.Duplicates, l.Wrong, l.Extra)
	}
	return r
}

// startLoad starts the kload child and waits for its warm-up.
func (c *benchCluster) startLoad(b *testing.B, spec kafkaLoadSpec) *child {
	b.Helper()
	if spec.Keys <= 0 || spec.Records <= 0 || spec.Window <= 0 {
		b.Fatalf("bench: -kafka.records, -kafka.keys and -kafka.window must be positive")
	}
	js, err := json.Marshal(spec)
	if err != nil {
		b.Fatal(err)
	}
	gen := startChild(b, "kload", kafkaLoadEnv+"="+string(js))
	gen.expect(b, "ready", 2*time.Minute)
	return gen
}

// pids are the nodes', then the function's, Kafka's and the load's.
func (c *benchCluster) pids(gen int) []int {
	var pids []int
	for _, n := range c.nodes {
		pids = append(pids, n.pid)
	}
	return append(pids, c.fnPID, c.kafka.pid, gen)
}

func (c *benchCluster) scrapeAll(b *testing.B) []metrics { return c.scrape(b, c.nodes) }

// scrape reads the metrics of nodes.
func (c *benchCluster) scrape(b *testing.B, nodes []*clusterNodeProc) []metrics {
	var ms []metrics
	for _, n := range nodes {
		m, err := scrape(b.Context(), c.mc, n.admin+"/metrics")
		if err != nil {
			b.Fatal(err)
		}
		ms = append(ms, m)
	}
	return ms
}

// sumAll is a metric's sum over the nodes' scrapes.
func sumAll(ms []metrics, name string, match ...string) float64 {
	t := 0.0
	for _, m := range ms {
		t += m.sum(name, match...)
	}
	return t
}

func (r *clusterRunResult) report(b *testing.B) {
	l := r.load
	wall := l.Elapsed.Seconds()
	perRec := func(d time.Duration) float64 { return 1e6 * d.Seconds() / float64(l.Visible) }
	b.ReportMetric(l.rate(), "records/s")
	b.ReportMetric(ms(l.P50), "p50-ms")
	b.ReportMetric(ms(l.P99), "p99-ms")
	if r.cpuOK {
		b.ReportMetric(perRec(r.cpuNodes), "runtime-cpu-us/record")
	}
	d := func(name string) float64 { return sumAll(r.after, name) - sumAll(r.before, name) }
	txns := d("statefun_cluster_txn_commits_total")
	b.Logf("%d nodes, P %d: %d records over %d keys, window %d, through %s; %d kfake brokers",
		r.nodes, *flagClusterP, l.Visible, r.keys, r.window, r.input, *flagKafkaBrokers)
	b.Logf("output (read_committed): %.0f records/s in %.2fs; POST to visible p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.2f ms",
		l.rate(), wall, ms(l.P50), ms(l.P90), ms(l.P99), ms(l.PMax))
	if txns == 0 { // an embedded runtime
		b.Logf("embedded: %.0f group commits (%.2f per record), %.0f egress transactions (%.2f per record)",
			d("statefun_commit_seconds_count"), d("statefun_commit_seconds_count")/float64(l.Visible),
			d("statefun_kafka_egress_transactions_total"), d("statefun_kafka_egress_transactions_total")/float64(l.Visible))
	} else {
		b.Logf("transactions: %.0f committed (%.1f/s over all nodes, %.2f per record), %.1f records produced per transaction, %.2f ms each on average, %.0f aborted",
			txns, txns/wall, txns/float64(l.Visible), d("statefun_cluster_txn_records_sum")/d("statefun_cluster_txn_records_count"),
			1e3*d("statefun_cluster_txn_seconds_sum")/d("statefun_cluster_txn_seconds_count"), d("statefun_cluster_txn_aborts_total"))
	}
	if r.cpuOK {
		b.Logf("CPU per record: nodes %.1f µs (together), function %.1f µs, kfake %.1f µs, load generator %.1f µs; machine busy %.2f cores",
			perRec(r.cpuNodes), perRec(r.cpuFn), perRec(r.cpuKafka), perRec(r.cpuGen), r.machine.busy/wall)
	}
}
