package node

import (
	"encoding/hex"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/protocol"
)

// The messages topic's record format (docs/cluster.md, "The messages
// topic"): the key is the target address as str(namespace) str(type)
// str(id), the same for a message and a state mutation command, and the
// partition is address.Partition of the id; the value is the envelope's
// protobuf encoding, read back as it was.
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
	if _, _, err := Key(&protocol.Envelope{}, 8); err == nil {
		t.Error("Key of an envelope without a target: no error")
	}
	if _, err := Decode([]byte("not an envelope")); err == nil {
		t.Error("Decode of a foreign value: no error")
	}
}
