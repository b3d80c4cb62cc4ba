package kafkaingress

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/engine"
	"github.com/statefun-go/statefun/internal/store"
)

// Records for many keys reach the function exactly once across a crash:
// the runtime is crash-cloned (only synced data survives) while it
// consumes, restarted on the clone, and every counter ends equal to the
// number of records produced for its key. The group's committed offsets
// never run ahead of the stored positions, and catch up with them.
func TestExactlyOnceAcrossCrash(t *testing.T) {
	kc := newCluster(t, "in")
	const keys, perKey = 40, 50
	var first, second []*kgo.Record
	for i := range perKey {
		for k := range keys {
			r := rec("in", fmt.Sprintf("key-%d", k), fmt.Sprint(i))
			if i < perKey/2 {
				first = append(first, r)
			} else {
				second = append(second, r)
			}
		}
	}
	produce(t, kc, first...)

	fs := vfs.NewCrashableMem()
	cfg := baseConfig(kc, "g1", route("in", counterA))
	cfg.MaxBatchRecords = 37
	r1 := startRig(t, fs, cfg, nil, nil)
	// Group offsets are checked against the positions while it runs.
	var ahead []string
	var mu sync.Mutex
	stopCheck := make(chan struct{})
	checked := make(chan struct{})
	go func() {
		defer close(checked)
		for {
			select {
			case <-stopCheck:
				return
			case <-time.After(20 * time.Millisecond):
			}
			g := groupOffsets(t, kc, "g1")
			p := positions(t, r1.db) // read after: positions only grow
			for k, off := range g {
				if off > p[k] {
					mu.Lock()
					ahead = append(ahead, fmt.Sprintf("%v: group %d > stored %d", k, off, p[k]))
					mu.Unlock()
				}
			}
		}
	}()
	waitFor(t, "some records counted", func() bool {
		n := 0
		for k := range keys {
			n += r1.count(counterA, fmt.Sprintf("key-%d", k))
		}
		return n >= keys*perKey/4
	})
	crashed := fs.CrashClone(vfs.CrashCloneCfg{})
	close(stopCheck)
	<-checked
	r1.stop()
	if len(ahead) > 0 {
		t.Fatalf("group offsets ran ahead of the stored positions: %v", ahead)
	}

	produce(t, kc, second...)
	r2 := startRig(t, crashed, cfg, nil, nil)
	total := func() int {
		n := 0
		for k := range keys {
			n += r2.count(counterA, fmt.Sprintf("key-%d", k))
		}
		return n
	}
	waitFor(t, "every record counted", func() bool { return total() >= keys*perKey })
	for k := range keys {
		if n := r2.count(counterA, fmt.Sprintf("key-%d", k)); n != perKey {
			t.Errorf("key-%d counted %d times, want %d", k, n, perKey)
		}
	}
	// Lag tools see the group caught up with the stored positions.
	waitFor(t, "group offsets equal to the stored positions", func() bool {
		g, p := groupOffsets(t, kc, "g1"), positions(t, r2.db)
		return fmt.Sprint(g) == fmt.Sprint(p) && len(p) == 4
	})
	if len(r2.fn.bad) > 0 {
		t.Fatalf("arguments not typed %s with a value: %v", valueType, r2.fn.bad)
	}
}

// A record goes to every target of its topic.
func TestFanOutToEveryTarget(t *testing.T) {
	kc := newCluster(t, "in")
	var rs []*kgo.Record
	for i := range 30 {
		rs = append(rs, rec("in", fmt.Sprintf("k%d", i%3), "v"))
	}
	produce(t, kc, rs...)
	r := startRig(t, vfs.NewMem(), baseConfig(kc, "g", route("in", counterA, counterB)), nil, nil)
	waitFor(t, "both targets counted", func() bool {
		for i := range 3 {
			if r.count(counterA, fmt.Sprintf("k%d", i)) != 10 || r.count(counterB, fmt.Sprintf("k%d", i)) != 10 {
				return false
			}
		}
		return true
	})
}

// Each startup position starts a partition without a stored position where
// module.yaml says; a stored position always wins.
func TestStartupPositions(t *testing.T) {
	t0 := time.UnixMilli(1_700_000_000_000)
	for _, tc := range []struct {
		name    string
		startup Startup
		reset   string
		commit  int64 // a group offset committed before the start, if > 0
		want    int   // of the 10 records produced before the start
	}{
		{"earliest", Startup{Kind: StartEarliest}, "", 0, 10},
		{"latest", Startup{Kind: StartLatest}, "", 0, 0},
		{"specific-offsets", Startup{Kind: StartSpecificOffsets, SpecificOffsets: map[string]map[int32]int64{"in": {0: 3}}}, "", 0, 7},
		{"date", Startup{Kind: StartDate, Date: t0.Add(5 * time.Second)}, "", 0, 5},
		{"group-offsets with a committed offset", Startup{Kind: StartGroupOffsets}, "latest", 4, 6},
		{"group-offsets without one, reset earliest", Startup{Kind: StartGroupOffsets}, "earliest", 0, 10},
		{"group-offsets without one, reset latest", Startup{Kind: StartGroupOffsets}, "latest", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kc, err := newSinglePartition(t)
			if err != nil {
				t.Fatal(err)
			}
			var rs []*kgo.Record
			for i := range 10 {
				r := rec("in", "k", fmt.Sprint(i))
				r.Timestamp = t0.Add(time.Duration(i) * time.Second)
				r.Partition = 0
				rs = append(rs, r)
			}
			produceManual(t, kc, rs...)
			if tc.commit > 0 {
				commitGroup(t, kc, "g", "in", 0, tc.commit)
			}
			cfg := baseConfig(kc, "g", route("in", counterA))
			cfg.Startup, cfg.AutoOffsetReset = tc.startup, tc.reset
			fs := vfs.NewMem()
			r := startRig(t, fs, cfg, nil, nil)
			// The start is stored before anything is consumed; five more
			// records then arrive after it.
			waitFor(t, "the startup position stored", func() bool { _, ok := positions(t, r.db)[tp{"in", 0}]; return ok })
			more := []*kgo.Record{}
			for i := range 5 {
				x := rec("in", "k", fmt.Sprint(10+i))
				x.Partition = 0
				more = append(more, x)
			}
			produceManual(t, kc, more...)
			waitFor(t, "the records after the start counted", func() bool { return positions(t, r.db)[tp{"in", 0}] == 15 })
			waitFor(t, "counted", func() bool { return r.count(counterA, "k") >= tc.want+5 })
			if n := r.count(counterA, "k"); n != tc.want+5 {
				t.Fatalf("counted %d, want %d", n, tc.want+5)
			}
		})
	}
}

// With a tiny backlog and a function that holds its calls, the engine is
// busy: the ingress pauses fetching of the partition, retries, and once the
// function runs again nothing is lost or counted twice.
func TestBackpressurePausesFetching(t *testing.T) {
	kc, err := newSinglePartition(t)
	if err != nil {
		t.Fatal(err)
	}
	var rs []*kgo.Record
	for i := range 200 {
		r := rec("in", fmt.Sprintf("k%d", i%4), "v")
		r.Partition = 0
		rs = append(rs, r)
	}
	produceManual(t, kc, rs...)
	fn := &counter{gate: make(chan struct{})}
	cfg := baseConfig(kc, "g", route("in", counterA))
	cfg.MaxBatchRecords = 10
	cfg.Metrics = NewMetrics(nil)
	r := startRig(t, vfs.NewMem(), cfg, fn, func(o *engine.Options) { o.MaxBacklog = 2 })
	waitFor(t, "the engine to refuse a batch", func() bool { return testutil.ToFloat64(cfg.Metrics.busy.WithLabelValues("test/kafka")) > 0 })
	waitFor(t, "fetching paused", func() bool { return len(r.c.cl.PauseFetchPartitions(nil)["in"]) == 1 })
	close(fn.gate)
	waitFor(t, "every record counted", func() bool {
		n := 0
		for k := range 4 {
			n += r.count(counterA, fmt.Sprintf("k%d", k))
		}
		return n >= 200
	})
	for k := range 4 {
		if n := r.count(counterA, fmt.Sprintf("k%d", k)); n != 50 {
			t.Errorf("k%d counted %d, want 50", k, n)
		}
	}
	waitFor(t, "fetching resumed", func() bool { return len(r.c.cl.PauseFetchPartitions(nil)) == 0 })
}

// Bad records are neither delivered nor allowed to stop consumption: each
// is counted by reason, stored as a dead letter with its position, and the
// good records around them are delivered.
func TestBadRecordsAreDeadLettered(t *testing.T) {
	kc, err := newSinglePartition(t)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("k", address.MaxSegmentBytes+1)
	rs := []*kgo.Record{
		{Topic: "in", Key: []byte("good"), Value: []byte("1")},
		{Topic: "in", Key: nil, Value: []byte("null key")},
		{Topic: "in", Key: []byte{}, Value: []byte("empty key")},
		{Topic: "in", Key: []byte("bad\xff"), Value: []byte("not utf-8")},
		{Topic: "in", Key: []byte(long), Value: []byte("too long")},
		{Topic: "in", Key: []byte("good"), Value: nil},
		{Topic: "in", Key: []byte("big"), Value: bytes.Repeat([]byte("x"), 101)},
		{Topic: "in", Key: []byte("good"), Value: []byte("3")},
	}
	produceManual(t, kc, rs...)
	cfg := baseConfig(kc, "g", route("in", counterA))
	cfg.Metrics = NewMetrics(nil)
	cfg.MaxValueBytes = 100
	r := startRig(t, vfs.NewMem(), cfg, nil, nil)
	waitFor(t, "all records consumed", func() bool { return positions(t, r.db)[tp{"in", 0}] == int64(len(rs)) })
	waitFor(t, "good records counted", func() bool { return r.count(counterA, "good") == 3 })
	var dead []string
	if err := r.eng.Reads().ScanDeadLetters(store.DeadLetterFilter{Ingress: "test/kafka"}, func(d store.DeadLetter) bool {
		dead = append(dead, fmt.Sprintf("%d:%s:%v:%s", d.Offset, d.Reason, d.KeyNull, d.Value))
		return true
	}); err != nil {
		t.Fatal(err)
	}
	want := []string{"1:null-key:true:null key", "2:empty-key:false:empty key", "3:invalid-utf8-key:false:not utf-8",
		"4:key-too-long:false:too long", "6:value-too-large:false:" + strings.Repeat("x", 101)}
	if fmt.Sprint(dead) != fmt.Sprint(want) {
		t.Fatalf("dead letters\n got %v\nwant %v", dead, want)
	}
	for _, reason := range []string{ReasonNullKey, ReasonEmptyKey, ReasonInvalidKey, ReasonKeyTooLong, ReasonValueTooLarge} {
		if n := testutil.ToFloat64(cfg.Metrics.bad.WithLabelValues("test/kafka", "in", reason)); n != 1 {
			t.Errorf("bad records %s = %v, want 1", reason, n)
		}
	}
	// A record of a topic without a route (not consumed by name, but
	// guarded): a dead letter too.
	b := r.c.batch(tp{"other", 0}, []*kgo.Record{{Topic: "other", Key: []byte("k"), Offset: 9}})
	if len(b.Messages) != 0 || len(b.DeadLetters) != 1 || b.DeadLetters[0].Reason != ReasonNoRoute || b.Position.Next != 10 {
		t.Fatalf("unrouted record: %+v", b)
	}
}

// With the brokers unreachable the ingress is not ready and says why; the
// rest of the engine runs on; once they are back, consumption resumes from
// where it was, with no gap and no duplicate.
func TestKafkaDownReadiness(t *testing.T) {
	kc := newCluster(t, "in")
	cfg := baseConfig(kc, "g", route("in", counterA))
	cfg.ReadyTimeout = 300 * time.Millisecond
	r := startRig(t, vfs.NewMem(), cfg, nil, nil)
	waitFor(t, "ready", func() bool { return r.c.Ready() == nil })
	records := func() (rs []*kgo.Record) {
		for i := range 40 {
			rs = append(rs, rec("in", fmt.Sprintf("k%d", i%4), "v"))
		}
		return rs
	}
	produce(t, kc, records()...)
	waitFor(t, "first records counted", func() bool { return r.count(counterA, "k0") == 10 })

	var down sync.Mutex
	isDown := true
	kc.Control(func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		down.Lock()
		defer down.Unlock()
		if isDown {
			return nil, errors.New("broker down"), true
		}
		return nil, nil, false
	})
	waitFor(t, "not ready", func() bool { return r.c.Ready() != nil })
	err := r.c.Ready()
	if !errors.Is(err, ErrNotReady) || !strings.Contains(err.Error(), "test/kafka") {
		t.Fatalf("Ready() = %v; want ErrNotReady naming the ingress", err)
	}
	// The engine goes on without Kafka.
	if err := r.eng.Ingest(t.Context(), msgTo("k0")); err != nil {
		t.Fatalf("engine while Kafka is down: %v", err)
	}
	waitFor(t, "the engine's own message counted", func() bool { return r.count(counterA, "k0") == 11 })

	down.Lock()
	isDown = false
	down.Unlock()
	waitFor(t, "ready again", func() bool { return r.c.Ready() == nil })
	produce(t, kc, records()...)
	waitFor(t, "records after the outage counted", func() bool {
		n := 0
		for k := range 4 {
			n += r.count(counterA, fmt.Sprintf("k%d", k))
		}
		return n >= 81
	})
	for k, want := range map[string]int{"k0": 21, "k1": 20, "k2": 20, "k3": 20} {
		if n := r.count(counterA, k); n != want {
			t.Errorf("%s counted %d, want %d", k, n, want)
		}
	}
}

// Bad configurations are refused naming the field.
func TestConfigRefused(t *testing.T) {
	ok := Config{ID: "a/b", Brokers: []string{"x:9092"}, GroupID: "g", Routes: []Route{route("in", counterA)}}
	for _, tc := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.GroupID = "" }, "consumerGroupId"},
		{func(c *Config) { c.Brokers = nil }, "address"},
		{func(c *Config) { c.Routes = nil }, "topics"},
		{func(c *Config) {
			c.Routes = []Route{{Topic: "in", ValueType: "nope", Targets: []address.TypeName{counterA}}}
		}, "valueType"},
		{func(c *Config) { c.Routes = []Route{{Topic: "in", ValueType: valueType}} }, "targets"},
		{func(c *Config) { c.AutoOffsetReset = "middle" }, "autoOffsetResetPosition"},
		{func(c *Config) { c.Startup.Kind = "never" }, "startupPosition.type"},
		{func(c *Config) { c.Startup.Kind = StartDate }, "startupPosition.date"},
		{func(c *Config) {
			c.Startup = Startup{Kind: StartSpecificOffsets, SpecificOffsets: map[string]map[int32]int64{"nope": {0: 1}}}
		}, "startupPosition.offsets"},
	} {
		c := ok
		tc.mod(&c)
		_, err := New(c, nil)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New = %v", tc.want, err)
		}
	}
}

// The consumer is a static member of its group by default, so that a
// restart after SIGKILL takes the dead member's place at once; a
// group.instance.id property replaces the default.
func TestStaticMembershipByDefault(t *testing.T) {
	kc := newCluster(t, "in")
	for _, tc := range []struct {
		opts []kgo.Opt
		want string
	}{
		{nil, "statefun-test/kafka"},
		{[]kgo.Opt{kgo.InstanceID("node-7")}, "node-7"},
	} {
		cfg := baseConfig(kc, "g-static", route("in", counterA))
		cfg.ClientOpts = tc.opts
		c, err := New(cfg, idleEngine{})
		if err != nil {
			t.Fatal(err)
		}
		got, _ := c.cl.OptValue(kgo.InstanceID).(string)
		c.cancel()
		c.cl.Close()
		if got != tc.want {
			t.Errorf("instance id = %q, want %q", got, tc.want)
		}
	}
}

// idleEngine stores nothing and knows no positions: for tests of the
// consumer's client options, where the group may still assign partitions
// before the client closes (a nil engine made that a nil-pointer panic).
type idleEngine struct{}

func (idleEngine) IngestFrom(context.Context, engine.SourceBatch) error   { return engine.ErrBusy }
func (idleEngine) SourcePositions(string) ([]store.SourcePosition, error) { return nil, nil }
