package members

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/statefun-go/statefun/internal/cluster/clusterconfig"
	"github.com/statefun-go/statefun/internal/cluster/topics"
)

// secret is the cluster secret of the tests' application.
var secret = []byte("0123456789abcdef0123456789abcdef")

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// application starts a kfake cluster of three brokers and creates the
// application "shop" with P partitions on it.
func application(t *testing.T, p int) (*kfake.Cluster, func(node string) *clusterconfig.Config) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(3))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cfg := func(node string) *clusterconfig.Config {
		return &clusterconfig.Config{Brokers: c.ListenAddrs(), AppID: "shop", NodeID: node, Advertise: "http://" + node + ".statefun:8070", Secret: secret}
	}
	first := cfg("node-a")
	first.Partitions = p
	if _, err := topics.Ensure(ctx(t), first, nil); err != nil {
		t.Fatal(err)
	}
	return c, cfg
}

func urls(ms map[string]Member) map[string]string {
	out := map[string]string{}
	for n, m := range ms {
		out[n] = m.AdminURL
	}
	return out
}

// Published members appear in every watcher, a withdrawn one disappears,
// a restarted node's record replaces the old one, and a late goodbye of
// an old process does not remove its successor.
func TestMembersAppearAndDisappear(t *testing.T) {
	_, cfg := application(t, 4)
	w, err := Watch(ctx(t), cfg("node-a"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if len(w.All()) != 0 {
		t.Fatalf("members before any published: %v", w.All())
	}
	started := time.Now()
	incA, incB := NewIncarnation(), NewIncarnation()
	if incA == incB || len(incA) != 16 {
		t.Fatalf("incarnations %q %q", incA, incB)
	}
	for node, inc := range map[string]string{"node-a": incA, "node-b": incB} {
		if err := Publish(ctx(t), cfg(node), started, inc); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]string{"node-a": "http://node-a.statefun:8070", "node-b": "http://node-b.statefun:8070"}
	if err := w.Wait(ctx(t), func(m map[string]Member) bool { return maps.Equal(urls(m), want) }); err != nil {
		t.Fatalf("%v: %v", err, w.All())
	}
	if m, ok := w.Lookup("node-b"); !ok || m.Incarnation != incB || !m.StartedAt.Equal(started.UTC()) || m.NodeID != "node-b" {
		t.Errorf("node-b: %+v %v", m, ok)
	}

	if err := Withdraw(ctx(t), cfg("node-a"), incA); err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(ctx(t), func(m map[string]Member) bool { return len(m) == 1 }); err != nil {
		t.Fatal(err)
	}
	if _, ok := w.Lookup("node-a"); ok {
		t.Errorf("node-a still there after its withdrawal: %v", w.All())
	}

	// node-b restarts: a new incarnation, a new URL. The old process's
	// goodbye arrives after it, and is ignored.
	incB2 := NewIncarnation()
	moved := cfg("node-b")
	moved.Advertise = "https://10.0.0.7:8443"
	if err := Publish(ctx(t), moved, time.Now(), incB2); err != nil {
		t.Fatal(err)
	}
	if err := Withdraw(ctx(t), cfg("node-b"), incB); err != nil {
		t.Fatal(err)
	}
	if err := Publish(ctx(t), cfg("node-c"), time.Now(), NewIncarnation()); err != nil {
		t.Fatal(err)
	}
	want = map[string]string{"node-b": "https://10.0.0.7:8443", "node-c": "http://node-c.statefun:8070"}
	if err := w.Wait(ctx(t), func(m map[string]Member) bool { return len(m) == 2 && m["node-c"].NodeID != "" }); err != nil {
		t.Fatal(err)
	}
	if got := urls(w.All()); !maps.Equal(got, want) {
		t.Errorf("after node-b's restart: %v, want %v", got, want)
	}

	// A watcher started now reads the same from the topic's start.
	w2, err := Watch(ctx(t), cfg("node-d"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	if got := urls(w2.All()); !maps.Equal(got, want) {
		t.Errorf("a new watcher: %v, want %v", got, want)
	}
}

// consumer is a group member as a node will be: static membership with
// the node id, the cooperative-sticky assignor; it records what it is
// assigned.
type consumer struct {
	mu       sync.Mutex
	assigned map[int32]bool
	changed  chan struct{}
}

func startConsumer(t *testing.T, c *kfake.Cluster, node string, changed chan struct{}) *consumer {
	t.Helper()
	cs := &consumer{assigned: map[int32]bool{}, changed: changed}
	note := func(m map[string][]int32, add bool) {
		cs.mu.Lock()
		for _, p := range m["shop-messages"] {
			if add {
				cs.assigned[p] = true
			} else {
				delete(cs.assigned, p)
			}
		}
		cs.mu.Unlock()
		select {
		case cs.changed <- struct{}{}:
		default:
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumerGroup("shop"), kgo.InstanceID(node),
		kgo.ConsumeTopics("shop-messages"), kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { note(m, true) }),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { note(m, false) }),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { note(m, false) }),
	)
	if err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for pctx.Err() == nil {
			cl.PollFetches(pctx)
		}
	}()
	t.Cleanup(func() { cancel(); <-done; cl.Close() })
	return cs
}

func (cs *consumer) partitions() []int32 {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return slices.Sorted(maps.Keys(cs.assigned))
}

// The owner map read from the group equals what each node's client was
// assigned.
func TestOwnersFollowTheGroup(t *testing.T) {
	c, cfg := application(t, 6)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)

	o, err := Owners(ctx(t), adm, cfg("node-a"))
	if err != nil || len(o.Owners) != 0 {
		t.Fatalf("before any node joined: %+v %v", o, err)
	}

	changed := make(chan struct{}, 1)
	a := startConsumer(t, c, "node-a", changed)
	b := startConsumer(t, c, "node-b", changed)
	// Wait until the two split the six partitions.
	for {
		pa, pb := a.partitions(), b.partitions()
		if len(pa) > 0 && len(pb) > 0 && len(pa)+len(pb) == 6 {
			break
		}
		select {
		case <-changed:
		case <-ctx(t).Done():
			t.Fatalf("no split: node-a %v, node-b %v", pa, pb)
		}
	}
	o, err = Owners(ctx(t), adm, cfg("node-a"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]string{}
	for _, p := range a.partitions() {
		want[p] = "node-a"
	}
	for _, p := range b.partitions() {
		want[p] = "node-b"
	}
	if !maps.Equal(o.Owners, want) || o.State != "Stable" {
		t.Errorf("owners %v (%s), want %v", o.Owners, o.State, want)
	}
	t.Logf("node-a %v, node-b %v", a.partitions(), b.partitions())
}

// A group member that is not a statefun node (no instance id) is named.
func TestOwnersRefuseAForeignMember(t *testing.T) {
	c, cfg := application(t, 2)
	changed := make(chan struct{}, 1)
	cs := &consumer{assigned: map[int32]bool{}, changed: changed}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumerGroup("shop"), kgo.ClientID("stranger"),
		kgo.ConsumeTopics("shop-messages"),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			cs.mu.Lock()
			for _, p := range m["shop-messages"] {
				cs.assigned[p] = true
			}
			cs.mu.Unlock()
			changed <- struct{}{}
		}))
	if err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithCancel(context.Background())
	go func() {
		for pctx.Err() == nil {
			cl.PollFetches(pctx)
		}
	}()
	defer func() { cancel(); cl.Close() }()
	select {
	case <-changed:
	case <-ctx(t).Done():
		t.Fatal("never assigned")
	}
	adm := kadm.NewClient(cl)
	_, err = Owners(ctx(t), adm, cfg("node-a"))
	if err == nil || !containsAll(err.Error(), "members: group shop member ", "(client stranger on ", "has no instance id: it is not a statefun node, yet it is assigned shop-messages") {
		t.Errorf("got %v", err)
	}
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
