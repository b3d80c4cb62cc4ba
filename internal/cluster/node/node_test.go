package node

import (
	"context"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/cluster/clusterconfig"
	"github.com/statefun-go/statefun/internal/ingress"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// The messages topic's record format (docs/explanation/cluster.md, "The messages
// topic"): the key is the target address as str(namespace) str(type)
// str(id), the same for a message and a state mutation command, and the
// partition is address.Partition of the id; the value is the envelope's
// protobuf encoding, read back as it was. A Kafka ingress dead letter is
// keyed by its record and goes to its Kafka partition mod P.
func TestRecordFormat(t *testing.T) {
	msg := &protocol.Envelope{
		Target:   &protocol.Address{Namespace: "kc", Type: "counter", Id: "a\x00b"},
		Argument: &protocol.TypedValue{Typename: "kc/text", HasValue: true, Value: []byte("x")},
	}
	cmd := &protocol.Envelope{Mutation: &protocol.StateMutation{Id: "m1", Target: &protocol.Address{Namespace: "kc", Type: "counter", Id: "a\x00b"}}}
	const wantKey = "6b630001" + "636f756e7465720001" + "6100ff620001"
	for _, env := range []*protocol.Envelope{msg, cmd} {
		key, p, err := Key(env, 8)
		if err != nil {
			t.Fatal(err)
		}
		if got := hex.EncodeToString(key); got != wantKey {
			t.Errorf("key %s, want %s", got, wantKey)
		}
		if want := address.Partition("a\x00b", 8); p != want {
			t.Errorf("partition %d, want %d", p, want)
		}
		v, err := proto.Marshal(env)
		if err != nil {
			t.Fatal(err)
		}
		back, err := Decode(v)
		if err != nil || !proto.Equal(back, env) {
			t.Errorf("Decode = %v, %v; want %v", back, err, env)
		}
	}
	// An ingress dead letter: str(ingress) str(topic) str("<partition>/<offset>"),
	// at its Kafka partition mod P.
	dl := &protocol.Envelope{IngressDeadLetter: &protocol.IngressDeadLetter{Ingress: "kc/in", Topic: "in", Partition: 11, Offset: 42}}
	key, p, err := Key(dl, 8)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := hex.EncodeToString(key), "6b632f696e0001"+"696e0001"+"31312f34320001"; got != want || p != 3 {
		t.Errorf("a dead letter's key %s at partition %d, want %s at 3", got, p, want)
	}
	if _, _, err := Key(&protocol.Envelope{}, 8); err == nil {
		t.Error("Key of an envelope without a target: no error")
	}
	if _, err := Decode([]byte("not an envelope")); err == nil {
		t.Error("Decode of a foreign value: no error")
	}
}

// A playground message whose record is over what the node's producer takes
// is refused with ingress.ErrTooLarge, naming the sizes and the setting,
// before anything is sent to Kafka: Kafka would refuse it on every retry.
func TestIngestRefusesARecordOverTheProducerLimit(t *testing.T) {
	// No producer: reaching Kafka would panic.
	n := &Node{p: 8, maxRecord: 1000, cfg: Config{Cluster: &clusterconfig.Config{AppID: "app"}}}
	env := &protocol.Envelope{
		Target:   &protocol.Address{Namespace: "kc", Type: "counter", Id: "a"},
		Argument: &protocol.TypedValue{Typename: "kc/text", HasValue: true, Value: make([]byte, 1000)},
	}
	err := n.Ingest(context.Background(), env)
	if !errors.Is(err, ingress.ErrTooLarge) || errors.Is(err, ErrNotAcknowledged) {
		t.Fatalf("Ingest of a 1000-byte body with a 1000-byte record limit: %v; want ingress.ErrTooLarge", err)
	}
	for _, want := range []string{"app-messages", "over the 1000", "max.request.size"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// A node whose brokers take smaller records than its producer would send
// bounds its records by what the brokers take: a larger one is refused
// where it is made, not produced into every transaction that carries it.
// (1000012 is the producer's default batch limit, max.request.size.)
func TestRecordLimitFollowsTheBrokers(t *testing.T) {
	db, err := store.Open(t.TempDir(), store.Options{Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	cc := &clusterconfig.Config{Brokers: []string{"127.0.0.1:1"}, AppID: "app", NodeID: "n1", Advertise: "http://n1:8070"}
	for _, c := range []struct{ brokers, want int }{{0, 1000012 - 256}, {5000, 5000 - 256}, {4 << 20, 1000012 - 256}} {
		n, err := New(Config{Cluster: cc, DB: db, MaxMessageBytes: c.brokers, MaxMessageBytesOf: "app-changelog"})
		if err != nil {
			t.Fatal(err)
		}
		if got := n.MaxRecord(); got != c.want {
			t.Errorf("brokers take %d: MaxRecord = %d; want %d", c.brokers, got, c.want)
		}
		n.Close()
	}
}
