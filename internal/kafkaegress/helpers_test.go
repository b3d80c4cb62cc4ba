package kafkaegress

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/egress"
	"github.com/statefun-go/statefun/internal/engine"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// The tests run the real engine on a real Pebble store (in memory, crashable)
// with a function written in Go that sends KafkaProducerRecords, and a
// kfake cluster of three brokers in process.

const (
	egressID = "test/kafka"
	outTopic = "out"
)

var emitType = address.TypeName{Namespace: "test", Name: "emit"}

type quietPebble struct{}

func (quietPebble) Infof(string, ...any)         {}
func (quietPebble) Errorf(string, ...any)        {}
func (quietPebble) Fatalf(f string, args ...any) { panic("pebble fatal: " + f) }

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// emitter is a remote function that sends, for each message, one record to
// the Kafka egress: key = the function's id (the id "nokey" sends an empty
// key), value = the message text, topic = out. Texts starting with "raw:"
// choose a malformed value instead (see rawValue).
type emitter struct{}

func (emitter) Call(_ context.Context, _ address.TypeName, req *protocol.ToFunction) (*protocol.FromFunction, error) {
	b := req.GetInvocation()
	res := &protocol.FromFunction_InvocationResponse{}
	for _, inv := range b.GetInvocations() {
		text := string(inv.GetArgument().GetValue())
		key := b.GetTarget().GetId()
		if key == "nokey" {
			key = ""
		}
		arg := &protocol.TypedValue{Typename: RecordTypename, HasValue: true,
			Value: EncodeRecord(Record{Key: key, Value: []byte(text), Topic: outTopic})}
		if raw, ok := strings.CutPrefix(text, "raw:"); ok {
			arg = rawValue(raw)
		}
		res.OutgoingEgresses = append(res.OutgoingEgresses, &protocol.FromFunction_EgressMessage{
			EgressNamespace: "test", EgressType: "kafka", Argument: arg})
	}
	return &protocol.FromFunction{Response: &protocol.FromFunction_InvocationResult{InvocationResult: res}}, nil
}

// rawValue is a malformed egress value.
func rawValue(kind string) *protocol.TypedValue {
	switch kind {
	case "typename":
		return &protocol.TypedValue{Typename: "io.statefun.playground/EgressRecord", HasValue: true, Value: []byte(`{"topic":"out"}`)}
	case "undecodable":
		return &protocol.TypedValue{Typename: RecordTypename, HasValue: true, Value: []byte{0x1a, 0x05, 'o'}}
	case "notopic":
		return &protocol.TypedValue{Typename: RecordTypename, HasValue: true, Value: EncodeRecord(Record{Key: "k", Value: []byte("v")})}
	}
	panic(kind)
}

func msg(id, text string) *protocol.Envelope {
	return &protocol.Envelope{
		Target:   &protocol.Address{Namespace: emitType.Namespace, Type: emitType.Name, Id: id},
		Argument: &protocol.TypedValue{Typename: "test/text", HasValue: true, Value: []byte(text)},
	}
}

// runtime is an engine on a store, with the egress routes of the relays.
type runtime struct {
	db  *store.DB
	eng *engine.Engine
}

func openRuntime(t *testing.T, fs vfs.FS, route egress.RouteFunc, log *slog.Logger) *runtime {
	t.Helper()
	db, err := store.Open("data", store.Options{Partitions: 4, FS: fs, Logger: quietPebble{}})
	if err != nil {
		t.Fatal(err)
	}
	routes := egress.NewRoutes()
	if err := routes.Add(egressID, route); err != nil {
		t.Fatal(err)
	}
	if log == nil {
		log = quietLog()
	}
	eng, err := engine.New(engine.Options{Store: db, Functions: emitter{}, Egress: routes.Route, Logger: log,
		RetryBase: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond})
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	eng.Start()
	rt := &runtime{db: db, eng: eng}
	t.Cleanup(rt.close)
	return rt
}

// start starts r on the runtime's outbox, with its store to check markers
// against, as the runtime does.
func (rt *runtime) start(r *Relay) {
	r.cfg.Store = rt.db
	r.Start(rt.eng)
}

func (rt *runtime) close() {
	if rt.eng != nil {
		rt.eng.Close()
		rt.db.Close()
		rt.eng = nil
	}
}

// ingest sends n messages over ids ids, "m<i>" as text; it returns once
// every one is durable.
func (rt *runtime) ingest(t *testing.T, from, n, ids int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		if err := rt.eng.Ingest(context.Background(), msg(fmt.Sprintf("id%d", i%ids), fmt.Sprintf("m%d", i))); err != nil {
			t.Fatal(err)
		}
	}
}

// outboxEmpty reports whether the egress's outbox holds no record.
func (rt *runtime) outboxEmpty(t *testing.T) bool {
	_, _, ok, err := rt.eng.ReadEgress(context.Background(), egressID, egressID, 0)
	if err != nil {
		t.Fatal(err)
	}
	return !ok
}

func newCluster(t *testing.T, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(3), kfake.SeedTopics(3, outTopic)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// testConfig is a relay configuration with short timings.
func testConfig(c *kfake.Cluster, sem Semantic) Config {
	return Config{ID: egressID, Brokers: c.ListenAddrs(), Semantic: sem, TransactionTimeout: 20 * time.Second,
		BatchRecords: 7, PollInterval: time.Millisecond, PingInterval: 50 * time.Millisecond, StallAfter: 200 * time.Millisecond,
		Timeout: 2 * time.Second, RetryBase: 5 * time.Millisecond, RetryMax: 50 * time.Millisecond,
		Logger: testLog(), Metrics: NewMetrics(nil),
		// Client properties pass through: here, a quick metadata refresh
		// after a leader or coordinator moved.
		ClientOpts: []kgo.Opt{kgo.MetadataMinAge(20 * time.Millisecond)}}
}

func newRelay(t *testing.T, cfg Config) *Relay {
	t.Helper()
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// readTopic reads a topic to its current end and returns its records
// (isolation read_committed or read_uncommitted).
func readTopic(t *testing.T, brokers []string, topic string, committed bool) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	adm, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ends, err := kadm.NewClient(adm).ListEndOffsets(ctx, topic)
	if err != nil || ends.Error() != nil {
		t.Fatalf("end offsets of %s: %v %v", topic, err, ends.Error())
	}
	want := map[int32]int64{}
	from := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
			from[o.Partition] = kgo.NewOffset().AtStart()
		}
	})
	if len(want) == 0 {
		return nil
	}
	iso := kgo.ReadUncommitted()
	if committed {
		iso = kgo.ReadCommitted()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.FetchIsolationLevel(iso), kgo.KeepControlRecords(),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s: %v (still to reach: %v)", topic, ctx.Err(), want)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if end, ok := want[r.Partition]; ok && r.Offset+1 >= end {
				delete(want, r.Partition)
			}
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
		})
	}
	return out
}

// values returns the values of records, sorted.
func values(recs []*kgo.Record) []string {
	var vs []string
	for _, r := range recs {
		vs = append(vs, string(r.Value))
	}
	sort.Strings(vs)
	return vs
}

// want returns m<from>..m<from+n-1>, sorted.
func want(from, n int) []string {
	var vs []string
	for i := from; i < from+n; i++ {
		vs = append(vs, fmt.Sprintf("m%d", i))
	}
	sort.Strings(vs)
	return vs
}

// waitDelivered waits until the outbox is empty and a read_committed
// consumer sees n records, then checks that it sees exactly m0..m<n-1>,
// each once.
func waitDelivered(t *testing.T, rt *runtime, brokers []string, n int) []*kgo.Record {
	t.Helper()
	var recs []*kgo.Record
	waitFor(t, fmt.Sprintf("%d records delivered", n), func() bool {
		if !rt.outboxEmpty(t) {
			return false
		}
		recs = readTopic(t, brokers, outTopic, true)
		return len(recs) >= n
	})
	if got, w := values(recs), want(0, n); !slices.Equal(got, w) {
		t.Fatalf("a read_committed consumer sees %d records, want each of %d exactly once:\n got %v\nwant %v", len(got), n, dups(got), w[:min(len(w), 10)])
	}
	return recs
}

// dups lists the values seen more than once (or all when there are none).
func dups(vs []string) []string {
	var out []string
	for i := 1; i < len(vs); i++ {
		if vs[i] == vs[i-1] {
			out = append(out, vs[i])
		}
	}
	if len(out) == 0 {
		return vs
	}
	return append([]string{"duplicates:"}, out...)
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// crashAt returns a crash hook that fires the n-th time point is reached
// (1-based), once, and a channel closed when it fired.
func crashAt(point string, n int) (func(string) bool, <-chan struct{}) {
	var mu sync.Mutex
	seen := 0
	fired := make(chan struct{})
	return func(p string) bool {
		mu.Lock()
		defer mu.Unlock()
		if p != point {
			return false
		}
		seen++
		if seen == n {
			close(fired)
			return true
		}
		return false
	}, fired
}

// testLog is quiet unless KAFKAEGRESS_LOG is set.
func testLog() *slog.Logger {
	if os.Getenv("KAFKAEGRESS_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return quietLog()
}

// await waits for ch to close, failing the test after a while.
func await(t testing.TB, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// assertAtLeastOnce checks that each of m0..m<n-1> is there at least once,
// and nothing else is.
func assertAtLeastOnce(t *testing.T, recs []*kgo.Record, n int) {
	t.Helper()
	got := slices.Compact(values(recs))
	if w := want(0, n); !slices.Equal(got, w) {
		t.Fatalf("the consumer sees %d distinct values, want each of %d at least once: %v", len(got), n, got)
	}
}
