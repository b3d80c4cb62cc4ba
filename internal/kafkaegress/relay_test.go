package kafkaegress

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statefun-go/statefun/internal/protocol"
)

// Records a function sends to an exactly-once Kafka egress reach the output
// topic exactly once, keyed by the record key (an empty key is a null key,
// an empty value an empty value, not a tombstone), and leave the outbox.
func TestExactlyOnceDelivers(t *testing.T) {
	c := newCluster(t)
	cfg := testConfig(c, ExactlyOnce)
	r := newRelay(t, cfg)
	rt := openRuntime(t, vfs.NewMem(), r.Route, nil)
	rt.start(r)

	rt.ingest(t, 0, 100, 10)
	recs := waitDelivered(t, rt, c.ListenAddrs(), 100)
	for _, rec := range recs {
		i, _ := strconv.Atoi(string(rec.Value[1:]))
		if want := fmt.Sprintf("id%d", i%10); string(rec.Key) != want || rec.Topic != outTopic {
			t.Fatalf("record %q has key %q in topic %s, want key %s (the sender's id) in %s", rec.Value, rec.Key, rec.Topic, want, outTopic)
		}
	}
	if err := r.Ready(); err != nil {
		t.Fatalf("ready: %v", err)
	}

	// An empty key produces a null key; an empty value stays an empty value.
	if err := rt.eng.Ingest(context.Background(), msg("nokey", "")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the keyless record", func() bool { return len(readTopic(t, c.ListenAddrs(), outTopic, true)) == 101 })
	for _, rec := range readTopic(t, c.ListenAddrs(), outTopic, true) {
		if string(rec.Value) == "" {
			if rec.Key != nil || rec.Value == nil {
				t.Fatalf("empty key/value: key %v (want nil), value %v (want empty, not nil)", rec.Key, rec.Value)
			}
		}
	}
}

// A value that is not a KafkaProducerRecord, does not decode or has no topic
// is a protocol violation: the response is refused whole (nothing reaches
// the outbox) and the log names the function, the id and the egress.
func TestViolationsNameFunctionIDAndEgress(t *testing.T) {
	cases := []struct{ kind, want string }{
		{"typename", `a Kafka egress record must have typename type.googleapis.com/io.statefun.sdk.egress.KafkaProducerRecord, got "io.statefun.playground/EgressRecord"`},
		{"undecodable", "the KafkaProducerRecord does not decode: field 3 (topic)"},
		{"notopic", "the KafkaProducerRecord has no topic"},
	}
	for _, tc := range cases {
		t.Run(tc.kind, func(t *testing.T) {
			var buf syncBuffer
			log := slog.New(slog.NewTextHandler(&buf, nil))
			r, err := New(Config{ID: egressID, Brokers: []string{"127.0.0.1:1"}, Semantic: ExactlyOnce, TransactionTimeout: 1e9})
			if err != nil {
				t.Fatal(err)
			}
			rt := openRuntime(t, vfs.NewMem(), r.Route, log)
			if err := rt.eng.Ingest(context.Background(), msg("bob", "raw:"+tc.kind)); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the violation logged", func() bool { return strings.Contains(buf.String(), "protocol_violation=true") })
			line := strings.ReplaceAll(buf.String(), `\"`, `"`)
			for _, w := range []string{"function=test/emit", "id=bob", "egress message 0 to test/kafka", tc.want} {
				if !strings.Contains(line, w) {
					t.Fatalf("the log does not say %q:\n%s", w, line)
				}
			}
			if !rt.outboxEmpty(t) {
				t.Fatal("a refused response reached the outbox")
			}
		})
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Route checks each field of the record as the producer would.
func TestRouteChecksRecords(t *testing.T) {
	r, err := New(Config{ID: egressID, Brokers: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	val := func(rec Record) *protocol.TypedValue {
		return &protocol.TypedValue{Typename: RecordTypename, HasValue: true, Value: EncodeRecord(rec)}
	}
	route, err := r.Route("test", "kafka", val(Record{Key: "k", Value: []byte("v"), Topic: "greetings.v1_x-y"}))
	if err != nil || route != egressID {
		t.Fatalf("a valid record: route %q, %v", route, err)
	}
	for _, c := range []struct {
		name string
		ns   string
		arg  *protocol.TypedValue
		want string
	}{
		{"wrong egress", "other", val(Record{Topic: "t"}), "got a record for other/kafka"},
		{"typename", "test", &protocol.TypedValue{Typename: "x/y"}, "must have typename"},
		{"truncated", "test", &protocol.TypedValue{Typename: RecordTypename, Value: []byte{0x0a, 0x09, 'a'}}, "field 1 (key)"},
		{"wire type", "test", &protocol.TypedValue{Typename: RecordTypename, Value: []byte{0x18, 0x01}}, "field 3 (topic) has wire type 0"},
		{"key not utf-8", "test", &protocol.TypedValue{Typename: RecordTypename, Value: []byte{0x0a, 0x01, 0xff, 0x1a, 0x01, 't'}}, "field 1 (key) is not UTF-8"},
		{"no topic", "test", val(Record{Key: "k"}), "has no topic"},
		{"bad topic", "test", val(Record{Topic: "a b"}), `topic "a b" is not a valid Kafka topic name`},
		{"dot topic", "test", val(Record{Topic: ".."}), "not a valid Kafka topic name"},
		{"long topic", "test", val(Record{Topic: strings.Repeat("t", 250)}), "over Kafka's limit of 249"},
		{"too large", "test", val(Record{Topic: "t", Value: make([]byte, 2<<20)}), "over the producer's limit"},
	} {
		if _, err := r.Route(c.ns, "kafka", c.arg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	// Unknown fields are skipped, as proto3 does.
	v := append(EncodeRecord(Record{Topic: "t"}), 0x20, 0x07)
	if _, err := r.Route("test", "kafka", &protocol.TypedValue{Typename: RecordTypename, Value: v}); err != nil {
		t.Errorf("an unknown field: %v", err)
	}
}

// New refuses a configuration it cannot run, naming the egress.
func TestNewRefusesBadConfig(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{ID: "nope", Brokers: []string{"x:1"}}, `egress id "nope" is not namespace/type`},
		{Config{ID: "a/b"}, "egress a/b: no broker address"},
		{Config{ID: "a/b", Brokers: []string{"x:1"}, Semantic: ExactlyOnce}, "exactly-once needs a positive transaction timeout"},
		{Config{ID: "a/b", Brokers: []string{"x:1"}, MarkerTopic: "a b"}, "marker topic"},
	} {
		if _, err := New(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
	for in, want := range map[string]Semantic{"": AtLeastOnce, "at-least-once": AtLeastOnce, "exactly-once": ExactlyOnce, "none": None} {
		if got, err := ParseSemantic(in); err != nil || got != want {
			t.Errorf("ParseSemantic(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseSemantic("twice"); err == nil || !strings.Contains(err.Error(), `"twice"`) {
		t.Errorf("ParseSemantic(twice): %v", err)
	}
}
