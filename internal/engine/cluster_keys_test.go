package engine

import (
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statefun-go/statefun/internal/cluster/sessiontest"
	"github.com/statefun-go/statefun/internal/protocol"
)

// keyed is an ingress message to id sent with Idempotency-Key key, as a
// cluster node's playground ingress produces it.
func keyed(id, text, key, fingerprint string) *protocol.Envelope {
	env := msg(id, text)
	env.IngressKey = &protocol.IngressKey{Scope: counterType.Namespace + "/" + counterType.Name + "/" + id, Key: key, Fingerprint: []byte(fingerprint)}
	return env
}

// In cluster mode the owner of an address delivers the first ingress
// message of each Idempotency-Key and drops its repeats — in one poll,
// after the first was durable, after the partition was rebuilt — because
// the key travels in the changelog with the message. A repeat with
// another fingerprint (the key reused for a different request) is not
// delivered but kept as a message dead letter.
func TestClusterIngressKeyDeliversOnce(t *testing.T) {
	k := sessiontest.NewKafka()
	fn := &relay{}
	n := newClusterNode(t, k, openStore(t, vfs.NewMem(), 1), fn, true, nil)
	if err := n.s.Assign(0); err != nil {
		t.Fatal(err)
	}
	d := n.e.Driver()
	k.Produce(0, keyed("a", "one", "k1", "f1"))
	k.Produce(0, keyed("a", "one", "k1", "f1")) // the client retried: the first answer was lost
	n.poll(0)
	settle(t, d, 1)
	k.Produce(0, keyed("a", "one", "k1", "f1")) // again, after the first is durable
	k.Produce(0, keyed("a", "two", "k2", "f2"))
	n.poll(0)
	settle(t, d, 1)
	n.s.Revoke(0)
	if err := n.s.Assign(0); err != nil {
		t.Fatal(err)
	}
	k.Produce(0, keyed("a", "two", "k2", "f2")) // after a move
	k.Produce(0, keyed("a", "other", "k2", "f3"))
	k.Produce(0, keyed("b", "one", "k1", "f1")) // another address: its own scope
	n.poll(0)
	settle(t, d, 1)

	got := fn.messages()
	slices.Sort(got)
	if want := []string{"a:one", "a:two", "b:one"}; !slices.Equal(got, want) {
		t.Fatalf("the function got %v; want %v (each key once per address)", got, want)
	}
	var dead []*protocol.MessageDeadLetter
	if err := n.e.ScanMessageDeadLetters("", func(m *protocol.MessageDeadLetter) bool {
		dead = append(dead, m)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || string(dead[0].GetEnvelope().GetArgument().GetValue()) != "other" ||
		!strings.Contains(dead[0].GetReason(), `"k2"`) || dead[0].GetPrincipal() != "ingress" {
		t.Fatalf("message dead letters %v; want the key reuse \"other\" with a reason naming k2", dead)
	}

	// The keys are in the changelog: a node that restores the partition
	// knows them.
	fresh := openStore(t, vfs.NewMem(), 1)
	restoreFrom(t, k, fresh, 0)
	if r, ok, err := fresh.Idempotency("test/counter/a", "k1"); err != nil || !ok || string(r.Fingerprint) != "f1" {
		t.Fatalf("k1 after a restore: %v, %v, %v; want its record", r, ok, err)
	}
}
