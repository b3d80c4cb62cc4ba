package node

import (
	"strings"
	"testing"

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
// record becomes none and says why. Two ingresses may not share a topic.
func TestIngressRecordsToMessages(t *testing.T) {
	const p = 8
	n := &Node{p: p, cfg: Config{Cluster: &clusterconfig.Config{AppID: "app"}}}
	in, err := newIngresses(n, []*kafkaingress.Mapping{mapping(t, "kc/in", "in")})
	if err != nil {
		t.Fatal(err)
	}
	msgs, bad, err := in.Route(&kgo.Record{Topic: "in", Key: []byte("k7"), Value: []byte("hello")})
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
			Argument: &protocol.TypedValue{Typename: "kc/text", HasValue: true, Value: []byte("hello")}}
		if !proto.Equal(env, wantEnv) {
			t.Errorf("message %d: %v, want %v", i, env, wantEnv)
		}
	}
	if msgs, bad, err := in.Route(&kgo.Record{Topic: "in", Value: []byte("no key")}); err != nil || bad != kafkaingress.ReasonNullKey || len(msgs) != 0 {
		t.Errorf("a record without a key: %d messages, %q, %v; want none, %q", len(msgs), bad, err, kafkaingress.ReasonNullKey)
	}
	_, err = newIngresses(n, []*kafkaingress.Mapping{mapping(t, "kc/in", "in"), mapping(t, "kc/other", "x", "in")})
	if err == nil || !strings.Contains(err.Error(), "topic in is consumed by the Kafka ingresses kc/in and kc/other") {
		t.Errorf("two ingresses sharing a topic: %v", err)
	}
}
