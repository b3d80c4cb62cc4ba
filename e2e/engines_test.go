package e2e

// The end-to-end suites run against both engines: the embedded one (one
// process, its own store) and cluster mode (one `statefun run` node with
// cluster settings, on devkafka running as a process of its own). A test
// written for the embedded runtime runs on a cluster node as its subtest
// engine=cluster with its body unchanged: the runtime helper starts the
// node instead, turns the module's playground egress (which cluster mode
// refuses) into a Kafka egress, and reads that egress's topics
// read_committed where the test pops the playground egress.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/statefun-go/statefun/internal/sdktest"
)

// engine is the engine a test's runtime runs.
type engine string

const (
	// embedded is `statefun run` on its own store.
	embedded engine = "embedded"
	// clustered is one `statefun run` node with cluster settings.
	clustered engine = "cluster"
)

// engineEnv names the one engine to run the tests of both engines on
// ("embedded" or "cluster"); unset or empty runs both.
const engineEnv = "STATEFUN_E2E_ENGINE"

// onEngines runs body as the parallel subtests engine=embedded and
// engine=cluster (only one of them when STATEFUN_E2E_ENGINE names it).
func onEngines(t *testing.T, body func(t *testing.T, e engine)) {
	t.Helper()
	runOnEngines(t, true, body)
}

// onEnginesInTurn is onEngines with the subtests one after the other, for
// a test that keeps the machine's cores busy.
func onEnginesInTurn(t *testing.T, body func(t *testing.T, e engine)) {
	t.Helper()
	runOnEngines(t, false, body)
}

func runOnEngines(t *testing.T, parallel bool, body func(t *testing.T, e engine)) {
	t.Helper()
	only := os.Getenv(engineEnv)
	if only != "" && only != string(embedded) && only != string(clustered) {
		t.Fatalf("%s=%q: want %s, %s, or unset for both", engineEnv, only, embedded, clustered)
	}
	for _, e := range []engine{embedded, clustered} {
		if only != "" && only != string(e) {
			continue
		}
		t.Run("engine="+string(e), func(t *testing.T) {
			if parallel {
				t.Parallel()
			}
			if e == clustered && testing.Short() {
				t.Skip("cluster: skipped in -short mode")
			}
			body(t, e)
		})
	}
}

// skipCluster skips t on a cluster node, for a test that does not apply
// there; why names the documented difference (docs/explanation/cluster.md) or the
// defect.
func (e engine) skipCluster(t *testing.T, why string) {
	t.Helper()
	if e == clustered {
		t.Skip("cluster: " + why)
	}
}

// egressKafka is the typename of the Kafka egress that replaces the
// playground egress in a cluster node's module.
const egressKafka = "e2e/out"

// sharedKafka is one devkafka (one broker) for every cluster runtime of
// the package, started by the first one and stopped by TestMain. Each
// runtime has an application id, and so topics, of its own.
var sharedKafka struct {
	once sync.Once
	dk   *devkafka
}

// kafkaForRuntimes starts the shared devkafka once and returns it.
func kafkaForRuntimes(t testing.TB) *devkafka {
	t.Helper()
	sharedKafka.once.Do(func() {
		d := &devkafka{t: t, args: []string{"-port", "0", "-brokers", "1", "-partitions", "1"}}
		d.start()
		sharedKafka.dk = d
	})
	if sharedKafka.dk == nil || sharedKafka.dk.brokers == "" {
		t.Fatal("the shared devkafka did not start (see the first cluster test's failure)")
	}
	return sharedKafka.dk
}

// stopSharedKafka stops the shared devkafka if a test started it.
func stopSharedKafka() {
	if sharedKafka.dk != nil {
		sharedKafka.dk.kill()
	}
}

// clusterSide is what a runtime on a cluster node has beyond an embedded
// one.
type clusterSide struct {
	brokers, app, node string
	// prefix goes before every playground egress topic to name its Kafka
	// topic.
	prefix string
	out    *kafkaEgress
}

var appSeq atomic.Int64

var notInAppID = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// newRuntimeOn is newRuntimeWith on engine e. On a cluster node the
// module's playground egress document becomes the Kafka egress egressKafka
// on the shared devkafka, its topics created there (one partition each,
// named <app>.<topic>), and pop reads them; call routeEgress for each
// FeatureServer whose functions egress.
func newRuntimeOn(t *testing.T, e engine, module func(ingressPort, egressPort int) string) *runtime {
	t.Helper()
	if e == embedded {
		return newRuntimeWith(t, module)
	}
	dk := kafkaForRuntimes(t)
	app := fmt.Sprintf("e2e-%d-%s", appSeq.Add(1), strings.Trim(notInAppID.ReplaceAllString(t.Name(), "-"), "-"))
	if len(app) > 150 {
		app = app[:150]
	}
	cs := &clusterSide{brokers: dk.brokers, app: app, node: "node-a", prefix: app + "."}
	var topics []string
	r := newRuntimeWith(t, func(in, out int) string {
		var err error
		var mod string
		mod, topics, err = clusterModuleOf(module(in, out), dk.brokers)
		if err != nil {
			t.Fatal(err)
		}
		return mod
	})
	r.cluster = cs
	for i := range topics {
		topics[i] = cs.prefix + topics[i]
	}
	out, err := newKafkaEgress(dk.brokers, topics)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(out.close)
	cs.out = out
	return r
}

// egressRouter is a function server of internal/sdktest.
type egressRouter interface{ SendEgressTo(sdktest.EgressRoute) }

// routeEgress makes the functions of a server send their records to the
// runtime's egress: the Kafka egress on a cluster node, with the runtime's
// topics.
func (r *runtime) routeEgress(fs egressRouter) {
	if r.cluster != nil {
		fs.SendEgressTo(sdktest.EgressRoute{Kafka: egressKafka, TopicPrefix: r.cluster.prefix})
	}
}

// writeModule replaces the runtime's module.yaml with module, for a
// restart with another module; on a cluster node its playground egress
// becomes the Kafka egress of newRuntimeOn (the topics must be among those
// the runtime started with).
func (r *runtime) writeModule(module string) {
	r.t.Helper()
	if r.cluster != nil {
		var err error
		if module, _, err = clusterModuleOf(module, r.cluster.brokers); err != nil {
			r.t.Fatal(err)
		}
	}
	if err := os.WriteFile(r.module, []byte(module), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

var moduleDocs = regexp.MustCompile(`(?m)^---[ \t]*\n`)

// clusterModuleOf replaces the playground egress document of module with
// the Kafka egress egressKafka on brokers, and returns the playground
// topics it declared.
func clusterModuleOf(module, brokers string) (string, []string, error) {
	docs := moduleDocs.Split(module, -1)
	var topics []string
	for i, d := range docs {
		if !strings.Contains(d, "kind: io.statefun.playground.v1/egress") {
			continue
		}
		_, list, ok := strings.Cut(d, "topics: [")
		list, _, ok2 := strings.Cut(list, "]")
		if !ok || !ok2 {
			return "", nil, fmt.Errorf("the playground egress document has no topics: [...] line:\n%s", d)
		}
		for _, tp := range strings.Split(list, ",") {
			if tp = strings.TrimSpace(tp); tp != "" {
				topics = append(topics, tp)
			}
		}
		docs[i] = fmt.Sprintf("kind: io.statefun.kafka.v1/egress\nspec:\n  id: %s\n  address: %s\n  deliverySemantic:\n    type: exactly-once\n    transactionTimeout: 10s\n", egressKafka, brokers)
	}
	return strings.Join(docs, "---\n"), topics, nil
}

// runArgs is the command line of `statefun run` for the runtime: the
// embedded engine with 8 partitions, or a cluster node of 8 partitions
// whose group session times out after 6 s and transactions after 10 s
// (as the cluster tests' nodes), with a cluster secret, which a node with
// state API tokens needs (the nodes of cluster_test.go run without one).
func (r *runtime) runArgs(extra ...string) []string {
	args := []string{"run", "--module", r.module, "--data-dir", filepath.Join(r.dir, "data"), "--admin-addr", r.admin}
	if c := r.cluster; c != nil {
		scheme := "http"
		if slices.Contains(extra, "--tls-cert") {
			scheme = "https"
		}
		secret := filepath.Join(r.dir, "cluster-secret")
		if err := os.WriteFile(secret, []byte("e2e-cluster-secret-0123456789abcdef\n"), 0o600); err != nil {
			r.t.Fatal(err)
		}
		args = append(args, "--cluster-secret-file", secret,
			"--cluster-brokers", c.brokers, "--cluster-app-id", c.app, "--cluster-node-id", c.node,
			"--cluster-advertise", scheme+"://"+r.admin, "--cluster-partitions", "8",
			"--cluster-property", "session.timeout.ms=6000", "--cluster-property", "heartbeat.interval.ms=500",
			"--cluster-property", "transaction.timeout.ms=10000")
	} else {
		args = append(args, "--partitions", "8")
	}
	return append(args, extra...)
}

// readyWithin is how long start waits for /readyz: a cluster node joins
// the group and restores its partitions first.
func (r *runtime) readyWithin() time.Duration {
	if r.cluster != nil {
		return 60 * time.Second
	}
	return 30 * time.Second
}

// kafkaEgress reads the Kafka egress topics of a cluster runtime,
// read_committed, and hands their records out as the playground egress
// does: each once, in order within a topic.
type kafkaEgress struct {
	cl *kgo.Client

	mu  sync.Mutex
	buf map[string][]string // topic -> payloads not handed out yet
}

// newKafkaEgress creates topics (one partition each) and consumes them
// from their start.
func newKafkaEgress(brokers string, topics []string) (*kafkaEgress, error) {
	admin, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...))
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if len(topics) > 0 {
		res, err := kadm.NewClient(admin).CreateTopics(ctx, 1, 1, nil, topics...)
		if err == nil {
			err = res.Error()
		}
		if err != nil {
			return nil, fmt.Errorf("creating the egress topics %v: %w", topics, err)
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...), kgo.ConsumeTopics(topics...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return nil, err
	}
	return &kafkaEgress{cl: cl, buf: map[string][]string{}}, nil
}

func (k *kafkaEgress) close() { k.cl.Close() }

// pop takes the next record of topic: payload, found. It polls Kafka
// briefly when it holds none.
func (k *kafkaEgress) pop(topic string) (string, bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.buf[topic]) == 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		fetches := k.cl.PollFetches(ctx)
		cancel()
		for _, fe := range fetches.Errors() {
			if !errors.Is(fe.Err, context.DeadlineExceeded) && !errors.Is(fe.Err, context.Canceled) {
				return "", false, fmt.Errorf("reading the Kafka egress topic %s/%d: %w", fe.Topic, fe.Partition, fe.Err)
			}
		}
		fetches.EachRecord(func(r *kgo.Record) { k.buf[r.Topic] = append(k.buf[r.Topic], string(r.Value)) })
	}
	if len(k.buf[topic]) == 0 {
		return "", false, nil
	}
	p := k.buf[topic][0]
	k.buf[topic] = k.buf[topic][1:]
	return p, true, nil
}
