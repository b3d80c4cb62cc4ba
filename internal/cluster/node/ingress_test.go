package node

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/cluster/clusterconfig"
	"github.com/statefun-go/statefun/internal/kafkaingress"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

func mapping(t *testing.T, id string, topics ...string) *kafkaingress.Mapping {
	t.Helper()
	cfg := kafkaingress.Config{ID: id, Brokers: []string{"127.0.0.1:9092"}, GroupID: "g"}
	for _, tp := range topics {
		cfg.Routes = append(cfg.Routes, kafkaingress.Route{Topic: tp, ValueType: "kc/text",
			Targets: []address.TypeName{{Namespace: "kc", Name: "counter"}, {Namespace: "kc", Name: "audit"}}})
	}
	m, err := kafkaingress.NewMapping(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// An ingress record becomes one messages-topic record per target of its
// topic's route, in the record format of the playground ingress (key the
// target address, partition address.Partition of the key's id among P,
// value the envelope with the record's value typed valueType); a bad
// record says why and becomes its dead letter, for the runtime partition
// that keeps its Kafka partition's. Two ingresses may not share a topic.
func TestIngressRecordsToMessages(t *testing.T) {
	const p = 8
	n := &Node{p: p, maxRecord: 1 << 20, cfg: Config{Cluster: &clusterconfig.Config{AppID: "app"},
		Now: func() time.Time { return time.UnixMilli(1_800_000_000_000) }}}
	in, err := newIngresses(n, []*kafkaingress.Mapping{mapping(t, "kc/in", "in")})
	if err != nil {
		t.Fatal(err)
	}
	msgs, bad, err := in.Route(&kgo.Record{Topic: "in", Partition: 5, Offset: 17, Key: []byte("k7"), Value: []byte("hello")})
	if err != nil || bad != "" || len(msgs) != 2 {
		t.Fatalf("Route = %d messages, %q, %v; want 2 messages", len(msgs), bad, err)
	}
	for i, want := range []string{"counter", "audit"} {
		m := msgs[i]
		if m.Partition != address.Partition("k7", p) {
			t.Errorf("message %d: partition %d, want %d", i, m.Partition, address.Partition("k7", p))
		}
		if wantKey := store.AddressKey("kc", want, "k7"); string(m.Key) != string(wantKey) {
			t.Errorf("message %d: key %q, want %q", i, m.Key, wantKey)
		}
		env, err := Decode(m.Value)
		if err != nil {
			t.Fatal(err)
		}
		wantEnv := &protocol.Envelope{Target: &protocol.Address{Namespace: "kc", Type: want, Id: "k7"},
			Argument: &protocol.TypedValue{Typename: "kc/text", HasValue: true, Value: []byte("hello")},
			// Its owner applies each (record, message) once.
			Origin: &protocol.IngressOrigin{Topic: "in", Partition: 5, Offset: 17, Index: uint32(i)}}
		if !proto.Equal(env, wantEnv) {
			t.Errorf("message %d: %v, want %v", i, env, wantEnv)
		}
	}
	// A bad record becomes its dead letter, for the runtime partition that
	// keeps Kafka partition 11's: 11 mod 8.
	rec := &kgo.Record{Topic: "in", Partition: 11, Offset: 42, Timestamp: time.UnixMilli(1_700_000_000_000), Value: []byte("no key")}
	msgs, bad, err = in.Route(rec)
	if err != nil || bad != kafkaingress.ReasonNullKey || len(msgs) != 1 {
		t.Fatalf("a record without a key: %d messages, %q, %v; want its dead letter, %q", len(msgs), bad, err, kafkaingress.ReasonNullKey)
	}
	if msgs[0].Partition != 3 {
		t.Errorf("the dead letter of Kafka partition 11 goes to partition %d, want 3", msgs[0].Partition)
	}
	if want := store.AddressKey("kc/in", "in", "11/42"); string(msgs[0].Key) != string(want) {
		t.Errorf("the dead letter's key %q, want %q", msgs[0].Key, want)
	}
	env, err := Decode(msgs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	wantDL := &protocol.IngressDeadLetter{At: 1_800_000_000_000, Ingress: "kc/in", Topic: "in", Partition: 11, Offset: 42,
		Reason: kafkaingress.ReasonNullKey, Timestamp: 1_700_000_000_000, KeyNull: true, Value: []byte("no key")}
	if !proto.Equal(env, &protocol.Envelope{IngressDeadLetter: wantDL}) {
		t.Errorf("the dead letter's envelope %v, want %v", env, wantDL)
	}
	// A value that would not fit in a record of the messages topic is left
	// out (else every transaction routing it would abort).
	n.maxRecord = 4096
	rec.Value = make([]byte, 4000)
	if msgs, _, err = in.Route(rec); err != nil || len(msgs) != 1 {
		t.Fatalf("a large bad record: %d messages, %v", len(msgs), err)
	}
	if env, err = Decode(msgs[0].Value); err != nil {
		t.Fatal(err)
	}
	if d := env.GetIngressDeadLetter(); !d.GetValueOmitted() || len(d.GetValue()) != 0 || d.GetOffset() != 42 {
		t.Errorf("a large bad record's dead letter: %v; want its value omitted", d)
	}
	_, err = newIngresses(n, []*kafkaingress.Mapping{mapping(t, "kc/in", "in"), mapping(t, "kc/other", "x", "in")})
	if err == nil || !strings.Contains(err.Error(), "topic in is consumed by the Kafka ingresses kc/in and kc/other") {
		t.Errorf("two ingresses sharing a topic: %v", err)
	}
}
