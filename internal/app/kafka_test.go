package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/flink-statefun/statefun-sdk-go/v3/pkg/statefun"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/statefun-go/statefun/internal/kafkaegress"
)

// kafkaCounter is an official-SDK function server: kt/counter counts the
// records of each key and sends "key=count" to the Kafka egress kt/out,
// topic "counts", keyed by the function id.
func kafkaCounter(t *testing.T) string {
	b := statefun.StatefulFunctionsBuilder()
	err := b.WithSpec(statefun.StatefulFunctionSpec{
		FunctionType: statefun.TypeNameFrom("kt/counter"),
		States:       []statefun.ValueSpec{countSpec},
		Function: statefun.StatefulFunctionPointer(func(ctx statefun.Context, msg statefun.Message) error {
			var n int32
			ctx.Storage().Get(countSpec, &n)
			n++
			ctx.Storage().Set(countSpec, n)
			ctx.SendEgress(&statefun.KafkaEgressBuilder{
				Target: statefun.TypeNameFrom("kt/out"),
				Topic:  "counts",
				Key:    ctx.Self().Id,
				Value:  []byte(fmt.Sprintf("%s=%d", ctx.Self().Id, n)),
			})
			return nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(b.AsHandler())
	t.Cleanup(srv.Close)
	return srv.URL
}

func kafkaModule(fnURL, brokers string) string {
	return fmt.Sprintf(`kind: io.statefun.endpoints.v2/http
spec:
  functions: kt/*
  urlPathTemplate: %s/statefun
---
kind: io.statefun.kafka.v1/ingress
spec:
  id: kt/in
  address: %s
  consumerGroupId: counter
  startupPosition:
    type: earliest
  topics:
    - topic: names
      valueType: io.statefun.types/string
      targets: [kt/counter]
---
kind: io.statefun.kafka.v1/egress
spec:
  id: kt/out
  address: %s
  deliverySemantic:
    type: exactly-once
    transactionTimeout: 15s
`, fnURL, brokers, brokers)
}

// TestKafkaInCounterKafkaOut runs a module with a Kafka ingress and an
// exactly-once Kafka egress against a Kafka-protocol cluster: every record
// of the input topic is counted once, and a read_committed consumer of the
// output topic sees each count once — also across a restart of the
// runtime in the middle of the stream.
func TestKafkaInCounterKafkaOut(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "names", "counts"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	brokers := strings.Join(cluster.ListenAddrs(), ",")
	dir := t.TempDir()
	path := filepath.Join(dir, "module.yaml")
	if err := os.WriteFile(path, []byte(kafkaModule(kafkaCounter(t), brokers)), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := Config{ModulePath: path, DataDir: filepath.Join(dir, "data"), AdminAddr: "127.0.0.1:0",
		ListenHost: "127.0.0.1", Partitions: 4, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}

	prod, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.DefaultProduceTopic("names"))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	const keys, perKey = 5, 20
	produce := func(round int) {
		var recs []*kgo.Record
		for i := range keys {
			for range perKey / 2 {
				recs = append(recs, &kgo.Record{Key: []byte("k" + strconv.Itoa(i)), Value: []byte("x")})
			}
		}
		if err := prod.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}

	a, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	waitReady(t, a)
	produce(1)
	got := readCounts(t, cluster, keys*perKey/2)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	produce(2)
	a, err = Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	got = readCounts(t, cluster, keys*perKey)
	seen := map[string]int{}
	for _, v := range got {
		seen[v]++
	}
	for i := range keys {
		for n := 1; n <= perKey; n++ {
			v := fmt.Sprintf("k%d=%d", i, n)
			if seen[v] != 1 {
				t.Errorf("%s arrived %d times, want once", v, seen[v])
			}
		}
	}
	if len(got) != keys*perKey {
		t.Errorf("%d records on the output topic, want %d", len(got), keys*perKey)
	}
}

// waitReady waits for /readyz to answer 200, which includes the Kafka
// ingress and egress being connected.
func waitReady(t *testing.T, a *App) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + a.Addr("admin") + "/readyz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("/readyz: %s %s", resp.Status, body)
			}
		} else if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readCounts reads the output topic read_committed from the start until it
// holds at least n records (and a little longer, to catch duplicates).
func readCounts(t *testing.T, cluster *kfake.Cluster, n int) []string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics("counts"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []string
	deadline := time.Now().Add(30 * time.Second)
	var settle time.Time
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
		if len(got) >= n && settle.IsZero() {
			settle = time.Now().Add(500 * time.Millisecond)
		}
		if !settle.IsZero() && time.Now().After(settle) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d records on the output topic after 30s, want %d: %v", len(got), n, got)
		}
	}
}

// TestKafkaEgressRefusedBeforeTheStore: an egress whose properties cannot
// be honoured is refused with its file and line before the store is
// created, like every other invalid module (no data directory is left
// behind for a module that never ran).
func TestKafkaEgressRefusedBeforeTheStore(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "module.yaml")
	mod := `kind: io.statefun.endpoints.v2/http
spec:
  functions: kt/*
  urlPathTemplate: http://127.0.0.1:1/statefun
---
kind: io.statefun.kafka.v1/egress
spec:
  id: kt/out
  address: 127.0.0.1:1
  deliverySemantic:
    type: exactly-once
    transactionTimeout: 1min
  properties:
    - acks: 1
`
	if err := os.WriteFile(path, []byte(mod), 0o644); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	a, err := Start(Config{ModulePath: path, DataDir: data, AdminAddr: "127.0.0.1:0", ListenHost: "127.0.0.1",
		Partitions: 4, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil {
		a.Close()
		t.Fatal("Start accepted an exactly-once egress with acks=1")
	}
	if want := "module.yaml:14:7: document 2 (io.statefun.kafka.v1/egress): spec.properties.acks: acks=1 cannot be honoured under exactly-once"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q lacks %q", err, want)
	}
	if _, err := os.Stat(data); err == nil {
		t.Errorf("the store %s was created for a module that was refused", data)
	}
}

// A --kafka-egress-reset-marker for an egress the module does not have as
// an exactly-once Kafka egress is refused, naming the flag, before the
// store is created.
func TestResetMarkerOfUnknownEgressRefused(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "module.yaml")
	if err := os.WriteFile(path, []byte(kafkaModule("http://127.0.0.1:1/statefun", "127.0.0.1:1")), 0o644); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	a, err := Start(Config{ModulePath: path, DataDir: data, AdminAddr: "127.0.0.1:0", ListenHost: "127.0.0.1",
		Partitions: 4, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		KafkaEgressResetMarkers: map[string]kafkaegress.MarkerRef{"kt/nope": {Store: "x", Position: 1}}})
	if err == nil {
		a.Close()
		t.Fatal("Start accepted a reset of an egress the module does not have")
	}
	if want := "--kafka-egress-reset-marker kt/nope: the module has no exactly-once Kafka egress kt/nope"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q lacks %q", err, want)
	}
	if _, err := os.Stat(data); err == nil {
		t.Errorf("the store %s was created for a refused start", data)
	}
}
