package e2e

// The trust boundary of cluster mode (docs/explanation/cluster.md, "Trust between
// nodes"): a member record written into <app>-meta by someone without the
// cluster secret draws no request, let alone an operator's token, while
// the nodes that have the secret go on forwarding to each other.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// attacker is an HTTP listener posing as a member: it records every
// request it gets.
type attacker struct {
	*httptest.Server
	mu  sync.Mutex
	got []string // method, path and Authorization of each request
}

func newAttacker(t *testing.T) *attacker {
	a := &attacker{}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.got = append(a.got, fmt.Sprintf("%s %s (Authorization %q)", r.Method, r.URL, r.Header.Get("Authorization")))
		a.mu.Unlock()
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "42")
	}))
	t.Cleanup(a.Close)
	return a
}

// check fails t if the listener got any request, and says so apart if
// one carried the operator's token.
func (a *attacker) check(t *testing.T, token string) {
	t.Helper()
	a.mu.Lock()
	got := slices.Clone(a.got)
	a.mu.Unlock()
	if len(got) == 0 {
		return
	}
	t.Errorf("the forged member's listener got %d requests:\n%s", len(got), strings.Join(got, "\n"))
	for _, g := range got {
		if strings.Contains(g, token) {
			t.Errorf("the forged member's listener got the operator's token: %s", g)
		}
	}
}

// forgeMember writes a member record for node, with admin URL url and no
// MAC, straight into the application's meta topic, as any client that may
// write the topic can.
func forgeMember(t *testing.T, brokers, app, node, url string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	v, _ := json.Marshal(map[string]any{"node_id": node, "admin_url": url, "started_at": time.Now().UTC(), "incarnation": "forged"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: app + "-meta", Partition: 0, Key: []byte("member/" + node), Value: v}).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// joinAs joins the application's consumer group as a static member named
// node, as any client that may join the group can, and holds what it is
// assigned without processing it.
func joinAs(t *testing.T, brokers, app, node string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...), kgo.ConsumerGroup(app), kgo.InstanceID(node),
		kgo.ConsumeTopics(app+"-messages"), kgo.Balancers(kgo.CooperativeStickyBalancer()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			cl.PollFetches(ctx)
		}
	}()
	t.Cleanup(func() { cancel(); <-done; cl.Close() })
}

// TestClusterForgedMemberGetsNothing: two nodes with a cluster secret and
// state API tokens. Someone who may write <app>-meta and join the consumer
// group, but lacks the secret, publishes a member record of a new node
// "evil" pointing at their own listener, joins the group as evil (so that
// evil owns partitions), and overwrites node-b's record with one pointing
// at the same listener. Requests with an operator's bearer token sent to
// node-a about addresses evil owns — a read, a state change sent once, a
// gathered listing — reach no one: the read and the change are a 503
// whose problem detail names evil's untrusted member record, the listing
// names evil's partitions missing. Requests about node-b's addresses still
// go to the genuine node-b (its trusted record stands), with the caller's
// name in its audit log. The listener gets no request at all.
func TestClusterForgedMemberGetsNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test skipped in -short mode")
	}
	t.Parallel()
	dk := startDevkafka(t, "-port", "0", "-brokers", "3")
	fn := apiFn(t)
	dir := t.TempDir()
	secret, tokens := filepath.Join(dir, "secret"), filepath.Join(dir, "tokens")
	const token = "ops-token-0123456789abcdef"
	if err := os.WriteFile(secret, []byte("trust-test-secret-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tokens, []byte("ops "+token+" read,write\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	nodes := newClusterNodes(t, dk, "trust", fn, "node-a", "node-b")
	for _, n := range nodes {
		n.extra = []string{"--cluster-secret-file", secret, "--api-tokens", tokens}
	}
	launchAll(t, nodes...)
	a, b := nodes[0], nodes[1]

	evil := newAttacker(t)
	forgeMember(t, dk.brokers, "trust", "evil", evil.URL)
	forgeMember(t, dk.brokers, "trust", "node-b", evil.URL)
	joinAs(t, dk.brokers, "trust", "evil")
	var own map[int32]string
	waitFor(t, 60*time.Second, "evil and node-b own partitions", func() bool {
		own = owners(t, dk.brokers, "trust")
		return len(own) == 8 && len(idsOwnedBy(own, "evil", "e", 1)) > 0 && len(idsOwnedBy(own, "node-b", "b", 1)) > 0
	})
	t.Logf("owners: %v", own)
	evilID, bID := idsOwnedBy(own, "evil", "e", 1)[0], idsOwnedBy(own, "node-b", "b", 1)[0]
	if status, err := b.send("/kc/counter/"+bID, "kc/text", "x"); err != nil || status != http.StatusOK {
		t.Fatalf("a message to kc/counter/%s: %d %v", bID, status, err)
	}

	auth := []string{"Authorization", "Bearer " + token}
	untrusted := func(what string, r stateReply) {
		t.Helper()
		var p stateProblem
		json.Unmarshal(r.body, &p)
		if r.status != http.StatusServiceUnavailable || !strings.HasPrefix(r.header.Get("Content-Type"), "application/problem+json") ||
			p.OwnerNode != "evil" || p.OwnerURL != "" ||
			!strings.Contains(p.Detail, "is owned by node evil, and this node does not trust its member record at offset ") ||
			!strings.Contains(p.Detail, "of trust-meta is not signed") {
			t.Errorf("%s through node-a: %d %s %s; want a 503 problem naming evil's untrusted member record", what, r.status, r.header.Get("Content-Type"), r.body)
		}
	}
	untrusted("a read", a.api(t, "GET", "/state/kc/counter/"+evilID+"/count", "", auth...))
	untrusted("a pause of one address", a.api(t, "POST", "/pause/kc/counter/"+evilID, `{"reason":"repair"}`, append(auth, "Content-Type", "application/json")...))
	list := a.api(t, "GET", "/state/kc/counter", "", auth...)
	if missing := list.header.Get("Statefun-Missing-Partitions"); list.status != 200 || missing == "" {
		t.Errorf("a listing through node-a: %d, missing %q: %s", list.status, missing, list.body)
	}
	evil.check(t, token)

	// node-b's own addresses: its genuine record stands, despite the
	// forged one written after it.
	waitFor(t, 30*time.Second, "kc/counter/"+bID+" read through node-a", func() bool {
		r := a.api(t, "GET", "/state/kc/counter/"+bID+"/count", "", append(auth, "Accept", "text/plain")...)
		return r.status == 200 && string(r.body) == "1"
	})
	pause := a.api(t, "POST", "/pause/kc/counter/"+bID, `{"reason":"trust test"}`, append(auth, "Content-Type", "application/json")...)
	if pause.status != 200 {
		t.Fatalf("a pause of node-b's address through node-a: %d %s", pause.status, pause.body)
	}
	rec := b.api(t, "GET", "/audit?namespace=kc&type=counter&id="+url.QueryEscape(bID), "", append(auth, "Statefun-Forwarded", "test")...)
	if rec.status != 200 || !strings.Contains(string(rec.body), `"principal": "ops"`) {
		t.Errorf("node-b's audit log of the pause sent through node-a: %d %s; want the caller's name, ops", rec.status, rec.body)
	}

	evil.check(t, token)
	if !strings.Contains(a.logs(), "a member record this node does not trust is ignored") {
		t.Errorf("node-a's log does not report the forged records:\n%s", a.logs())
	}
}
