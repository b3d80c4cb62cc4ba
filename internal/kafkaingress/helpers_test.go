package kafkaingress

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/engine"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// The tests run the consumer against kfake (3 brokers, in process), the
// real engine on a real Pebble store (a crashable in-memory filesystem) and
// a counter function implemented in Go behind engine.Functions.

var (
	counterA = address.TypeName{Namespace: "test", Name: "counter"}
	counterB = address.TypeName{Namespace: "test", Name: "other"}
)

const valueType = "test/login"

type quietPebble struct{}

func (quietPebble) Infof(string, ...any)         {}
func (quietPebble) Errorf(string, ...any)        {}
func (quietPebble) Fatalf(f string, args ...any) { panic("pebble fatal: " + f) }

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// counter adds the number of invocations of each batch to state "n"; gate,
// when set, is waited on before each call; it checks the argument's type.
type counter struct {
	gate chan struct{}
	mu   sync.Mutex
	bad  []string
}

func (f *counter) Call(ctx context.Context, _ address.TypeName, req *protocol.ToFunction) (*protocol.FromFunction, error) {
	if f.gate != nil {
		select {
		case <-f.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	b := req.GetInvocation()
	var n int64
	have := false
	for _, pv := range b.GetState() {
		if pv.GetStateName() == "n" {
			have = true
			if v := pv.GetStateValue(); v.GetHasValue() {
				n, _ = strconv.ParseInt(string(v.GetValue()), 10, 64)
			}
		}
	}
	if !have {
		return &protocol.FromFunction{Response: &protocol.FromFunction_IncompleteInvocationContext_{
			IncompleteInvocationContext: &protocol.FromFunction_IncompleteInvocationContext{
				MissingValues: []*protocol.FromFunction_PersistedValueSpec{{StateName: "n", TypeTypename: "test/n"}},
			}}}, nil
	}
	for _, inv := range b.GetInvocations() {
		if a := inv.GetArgument(); a.GetTypename() != valueType || !a.GetHasValue() {
			f.mu.Lock()
			f.bad = append(f.bad, fmt.Sprint(a))
			f.mu.Unlock()
		}
	}
	n += int64(len(b.GetInvocations()))
	return &protocol.FromFunction{Response: &protocol.FromFunction_InvocationResult{InvocationResult: &protocol.FromFunction_InvocationResponse{
		StateMutations: []*protocol.FromFunction_PersistedValueMutation{{
			MutationType: protocol.FromFunction_PersistedValueMutation_MODIFY, StateName: "n",
			StateValue: &protocol.TypedValue{Typename: "test/n", HasValue: true, Value: []byte(strconv.FormatInt(n, 10))},
		}},
	}}}, nil
}

func newCluster(t *testing.T, topics ...string) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(4, topics...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// rig is one runtime: a store, an engine and the consumer.
type rig struct {
	t   *testing.T
	db  *store.DB
	eng *engine.Engine
	c   *Consumer
	fn  *counter
}

func startRig(t *testing.T, fs vfs.FS, cfg Config, fn *counter, mod func(*engine.Options)) *rig {
	t.Helper()
	db, err := store.Open("data", store.Options{Partitions: 4, FS: fs, Logger: quietPebble{}})
	if err != nil {
		t.Fatal(err)
	}
	if fn == nil {
		fn = &counter{}
	}
	opts := engine.Options{Store: db, Functions: fn, Logger: quietLog(), RetryBase: 5 * time.Millisecond, RetryMax: 50 * time.Millisecond}
	if mod != nil {
		mod(&opts)
	}
	e, err := engine.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	e.Start()
	if cfg.Logger == nil {
		cfg.Logger = quietLog()
	}
	cfg.ClientOpts = append(cfg.ClientOpts, kgo.FetchMaxWait(100*time.Millisecond))
	c, err := New(cfg, e)
	if err != nil {
		t.Fatal(err)
	}
	c.Start()
	r := &rig{t: t, db: db, eng: e, c: c, fn: fn}
	t.Cleanup(r.stop)
	return r
}

func (r *rig) stop() {
	r.c.Close()
	r.eng.Close()
	r.db.Close()
}

// count returns state n of t/id (0 when absent).
func (r *rig) count(t address.TypeName, id string) int {
	r.t.Helper()
	v, ok, err := r.db.GetState(address.Address{Type: t, ID: id}, "n")
	if err != nil {
		r.t.Fatal(err)
	}
	if !ok {
		return 0
	}
	n, _ := strconv.Atoi(string(v.Value))
	return n
}

func baseConfig(kc *kfake.Cluster, group string, routes ...Route) Config {
	return Config{ID: "test/kafka", Brokers: kc.ListenAddrs(), GroupID: group, Routes: routes,
		Startup: Startup{Kind: StartEarliest}, CommitInterval: 50 * time.Millisecond}
}

func route(topic string, targets ...address.TypeName) Route {
	return Route{Topic: topic, ValueType: valueType, Targets: targets}
}

// produce writes records synchronously.
func produce(t *testing.T, kc *kfake.Cluster, rs ...*kgo.Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func rec(topic, key, value string) *kgo.Record {
	return &kgo.Record{Topic: topic, Key: []byte(key), Value: []byte(value)}
}

// waitFor polls cond for up to 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// groupOffsets reads the group's committed offsets.
func groupOffsets(t *testing.T, kc *kfake.Cluster, group string) map[tp]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	os, err := kadm.NewClient(cl).FetchOffsets(context.Background(), group)
	if err != nil {
		t.Fatal(err)
	}
	out := map[tp]int64{}
	os.Each(func(o kadm.OffsetResponse) { out[tp{o.Topic, o.Partition}] = o.At })
	return out
}

// positions reads the stored positions of the test ingress.
func positions(t *testing.T, db *store.DB) map[tp]int64 {
	t.Helper()
	ps, err := db.SourcePositions("test/kafka")
	if err != nil {
		t.Fatal(err)
	}
	out := map[tp]int64{}
	for _, p := range ps {
		out[tp{p.Topic, p.Partition}] = p.Next
	}
	return out
}

// newSinglePartition is a cluster whose topic "in" has one partition.
func newSinglePartition(t *testing.T) (*kfake.Cluster, error) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(1, "in"))
	if err != nil {
		return nil, err
	}
	t.Cleanup(c.Close)
	return c, nil
}

// produceManual writes records to the partitions they name.
func produceManual(t *testing.T, kc *kfake.Cluster, rs ...*kgo.Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// commitGroup commits an offset for the group, as another consumer would
// have.
func commitGroup(t *testing.T, kc *kfake.Cluster, group, topic string, p int32, off int64) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var os kadm.Offsets
	os.AddOffset(topic, p, off, -1)
	if err := kadm.NewClient(cl).CommitAllOffsets(context.Background(), group, os); err != nil {
		t.Fatal(err)
	}
}

func msgTo(id string) *protocol.Envelope {
	return &protocol.Envelope{
		Target:   &protocol.Address{Namespace: counterA.Namespace, Type: counterA.Name, Id: id},
		Argument: &protocol.TypedValue{Typename: valueType, HasValue: true, Value: []byte("x")},
	}
}
