package e2e

// Cluster mode end to end: devkafka (three kfake brokers) as a process of
// its own, statefun nodes as processes with the same application id, an
// official-Go-SDK counter that writes each count to a Kafka egress, and
// kcat reading the output read_committed.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// clusterModule is the module.yaml of a cluster node: functions kc/* at
// fnURL, a playground ingress on port in (the egress port is not used:
// cluster mode refuses the playground egress) and the Kafka egress kc/out
// on brokers.
func clusterModule(fnURL, brokers string, in int) string {
	return fmt.Sprintf(`kind: io.statefun.endpoints.v2/http
spec:
  functions: kc/*
  urlPathTemplate: %s
  transport:
    type: io.statefun.transports.v1/async
    call: 5s
---
kind: io.statefun.playground.v1/ingress
spec:
  port: %d
---
kind: io.statefun.kafka.v1/egress
spec:
  id: kc/out
  address: %s
  deliverySemantic:
    type: exactly-once
    transactionTimeout: 10s
`, fnURL, in, brokers)
}

// clusterNode is one statefun process of an application.
type clusterNode struct {
	*runtime
	id, app, brokers string
	// sessionTimeout is the group's session.timeout.ms for this node.
	sessionTimeout int
	// defaults runs the node with Kafka's own session, heartbeat and
	// transaction timeouts instead of the tests' short ones.
	defaults bool
	// extra are flags added to the node's command line.
	extra []string
}

// newClusterNode writes the module of node id of application app; the
// process is not started.
func newClusterNode(t testing.TB, brokers, app, id, fnURL string) *clusterNode {
	rt := newRuntimeWith(t, func(in, _ int) string { return clusterModule(fnURL, brokers, in) })
	return &clusterNode{runtime: rt, id: id, app: app, brokers: brokers, sessionTimeout: 6000}
}

// args are the node's command line. The group session times out after
// 6 s (kfake's minimum) and transactions after 10 s, so that a killed
// node's partitions move within the test's time (the defaults are 45 s
// and 40 s).
func (n *clusterNode) args() []string {
	args := []string{"run", "--module", n.module, "--data-dir", filepath.Join(n.dir, "data"), "--admin-addr", n.admin,
		"--cluster-brokers", n.brokers, "--cluster-app-id", n.app, "--cluster-node-id", n.id,
		"--cluster-advertise", "http://" + n.admin, "--cluster-partitions", "8"}
	if !n.defaults {
		args = append(args, "--cluster-property", "session.timeout.ms="+strconv.Itoa(n.sessionTimeout), "--cluster-property", "heartbeat.interval.ms=500",
			"--cluster-property", "transaction.timeout.ms=10000")
	}
	return append(args, n.extra...)
}

// sumMetric is a metric's value summed over nodes.
func sumMetric(nodes []*clusterNode, name string, labels ...string) (float64, error) {
	total := 0.0
	for _, n := range nodes {
		v, err := n.metric(name, labels...)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", n.id, err)
		}
		total += v
	}
	return total, nil
}

// newClusterNodes writes the modules of nodes ids of application app; the
// processes are not started (see launchAll).
func newClusterNodes(t *testing.T, dk *devkafka, app, fnURL string, ids ...string) []*clusterNode {
	var nodes []*clusterNode
	for _, id := range ids {
		nodes = append(nodes, newClusterNode(t, dk.brokers, app, id, fnURL))
	}
	return nodes
}

// launchAll starts nodes and waits until each is ready and they share the
// partitions (waitServing).
func launchAll(t *testing.T, nodes ...*clusterNode) {
	t.Helper()
	for _, n := range nodes {
		n.launch()
	}
	for _, n := range nodes {
		n.waitReady(60 * time.Second)
	}
	waitServing(t, 60*time.Second, nodes...)
}

// waitServing waits until each of nodes owns partitions and serves them,
// and together they own all 8.
func waitServing(t *testing.T, timeout time.Duration, nodes ...*clusterNode) {
	t.Helper()
	var ids []string
	for _, n := range nodes {
		ids = append(ids, n.id)
	}
	deadline := time.Now().Add(timeout)
	for !serving(nodes...) {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s own the 8 partitions between them and each serves its own\n%s", timeout, strings.Join(ids, ", "), describeGroup(nodes...))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// describeGroup tells what the consumer group of the nodes' application
// looks like to Kafka, and how many partitions each node says it owns: for
// the message of a test that waited for the partitions to settle in vain.
func describeGroup(nodes ...*clusterNode) string {
	var b strings.Builder
	for _, n := range nodes {
		v, err := n.metric("statefun_cluster_owned_partitions")
		fmt.Fprintf(&b, "%s owns %v partitions (%v)\n", n.id, v, err)
	}
	n := nodes[0]
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(n.brokers, ",")...))
	if err != nil {
		return b.String() + err.Error()
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	groups, err := kadm.NewClient(cl).DescribeGroups(ctx, n.app)
	if err != nil {
		return fmt.Sprintf("%sdescribing group %s: %v", b.String(), n.app, err)
	}
	for _, g := range groups {
		fmt.Fprintf(&b, "group %s: state %s, protocol %s (%v)\n", g.Group, g.State, g.Protocol, g.Err)
		for _, m := range g.Members {
			assigned, _ := m.Assigned.AsConsumer()
			joined, _ := m.Join.AsConsumer()
			var a, o []string
			if assigned != nil {
				for _, t := range assigned.Topics {
					a = append(a, fmt.Sprintf("%s%v", t.Topic, t.Partitions))
				}
			}
			if joined != nil {
				for _, t := range joined.OwnedPartitions {
					o = append(o, fmt.Sprintf("%s%v", t.Topic, t.Partitions))
				}
			}
			inst := ""
			if m.InstanceID != nil {
				inst = *m.InstanceID
			}
			fmt.Fprintf(&b, "  member %s: assigned %v, owned when it joined %v\n", inst, a, o)
		}
	}
	return b.String()
}

// serving reports whether each of nodes owns partitions and serves them,
// and together they own all 8.
func serving(nodes ...*clusterNode) bool {
	owned := 0.0
	for _, n := range nodes {
		v, err := n.metric("statefun_cluster_owned_partitions")
		if err != nil || v == 0 {
			return false
		}
		if s, _, _ := n.readyz(); s != 200 {
			return false
		}
		owned += v
	}
	return owned == 8
}

// launch starts the process without waiting for it to be ready.
func (n *clusterNode) launch() {
	n.t.Helper()
	n.cmd = exec.Command(binary, n.args()...)
	n.cmd.Env = append(os.Environ(), "STATEFUN_LISTEN_HOST=127.0.0.1")
	n.cmd.Stdout, n.cmd.Stderr = n.runtime, n.runtime
	if err := n.cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	n.exited = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { c.Wait(); close(done) }(n.cmd, n.exited)
}

// waitReady waits until /readyz answers 200: the node joined the group and
// serves every partition assigned to it.
func (n *clusterNode) waitReady(timeout time.Duration) {
	n.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		status, body, err := n.readyz()
		if err == nil && status == http.StatusOK {
			return
		}
		select {
		case <-n.exited:
			n.t.Fatalf("node %s exited during start:\n%s", n.id, n.logs())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("node %s not ready after %v: %d %s (%v)\n%s", n.id, timeout, status, body, err, n.logs())
		}
	}
}

// stateProblem is the body of a state API error.
type stateProblem struct {
	Status    int    `json:"status"`
	Detail    string `json:"detail"`
	Partition *int   `json:"partition"`
	OwnerNode string `json:"ownerNode"`
	OwnerURL  string `json:"ownerUrl"`
}

// readCount reads kc/counter/<id>'s count from node n: the value (-1 when
// empty) and 200, or the status and problem of a node that does not own
// it.
func (n *clusterNode) readCount(id string) (int64, int, stateProblem, string, error) {
	return n.readInt("kc/counter", id, "count")
}

// readInt reads the integer state of fnType/<id> from node n, as
// readCount does.
func (n *clusterNode) readInt(fnType, id, state string) (int64, int, stateProblem, string, error) {
	req, _ := http.NewRequest(http.MethodGet, "http://"+n.admin+"/state/"+fnType+"/"+url.PathEscape(id)+"/"+state, nil)
	req.Header.Set("Accept", "text/plain")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, stateProblem{}, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var pr stateProblem
	switch resp.StatusCode {
	case http.StatusOK:
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return v, 200, pr, "", err
	case http.StatusNotFound:
		return -1, 200, pr, "", nil
	default:
		json.Unmarshal(b, &pr)
		return 0, resp.StatusCode, pr, resp.Header.Get("Retry-After"), nil
	}
}

// count reads a counter from whichever of nodes owns it; ok is false when
// none answers 200 (a partition moving).
func count(t *testing.T, nodes []*clusterNode, id string) (int64, bool) {
	t.Helper()
	for _, n := range nodes {
		v, status, _, _, err := n.readCount(id)
		if err == nil && status == 200 {
			return v, true
		}
	}
	return 0, false
}

// TestClusterOneNode runs one cluster node: messages through its playground
// ingress are produced to the messages topic and answered 200 once Kafka
// has them; the counters read through the state API equal the messages
// sent; the Kafka egress topic, read read_committed by kcat, holds every
// count exactly once. A clean stop withdraws the member record.
func TestClusterOneNode(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test skipped in -short mode")
	}
	t.Parallel()
	needKcat(t)
	dk := startDevkafka(t, "-port", "0", "-brokers", "3", "-topic", "counts:3")
	fn := kafkaCounterFn(t, "kc/out")
	n := newClusterNode(t, dk.brokers, "one", "node-a", fn)
	n.launch()
	n.waitReady(60 * time.Second)
	// A record no statefun node wrote, in partition 0 of the messages
	// topic: skipped (with a metric), it must not hold up the partition.
	kcatProduceTo(t, dk.brokers, "one-messages", 0, "not an envelope")

	want := map[string]int{}
	for i := range 300 {
		id := "k" + strconv.Itoa(i%30)
		status, err := n.send("/kc/counter/"+id, "kc/text", "x")
		if err != nil || status != http.StatusOK {
			t.Fatalf("message %d to %s: %d %v", i, id, status, err)
		}
		want[id]++
	}
	waitCounts(t, []*clusterNode{n}, want, 30*time.Second)
	out := kcatReadUntil(t, dk.brokers, "counts", 300, 30*time.Second)
	checkEffects(t, out, want, nil)

	// The messages went through the messages topic, keyed by address.
	msgs := kcatRead(t, dk.brokers, "one-messages")
	if len(msgs) != 301 {
		t.Errorf("one-messages holds %d records, want the 300 sent and the foreign one", len(msgs))
	}
	if v, err := n.metric("statefun_cluster_skipped_records_total", `reason="undecodable"`); err != nil || v != 1 {
		t.Errorf("statefun_cluster_skipped_records_total{reason=\"undecodable\"} = %v (%v), want 1", v, err)
	}
	if members := memberRecords(t, dk.brokers, "one"); members["node-a"] != "http://"+n.admin {
		t.Errorf("member records %v: want node-a at http://%s", members, n.admin)
	}
	if err := n.stop(); err != nil {
		t.Fatal(err)
	}
	if members := memberRecords(t, dk.brokers, "one"); len(members) != 0 {
		t.Errorf("member records after a clean stop: %v, want none", members)
	}

	// Its data directory holds application one's 8 partitions: a node of
	// an application with another P is refused, naming both, and the
	// directory is left as it was.
	other := append(n.args()[:0:0], n.args()...)
	for i := range other {
		switch other[i-min(i, 1)] {
		case "--cluster-app-id":
			other[i] = "two"
		case "--cluster-partitions":
			other[i] = "4"
		}
	}
	ex := badRunBinary(t, n.dir, nil, other...)
	checkBadExit(t, ex, 1, "cluster: the data directory "+filepath.Join(n.dir, "data")+" belongs to another application or was made with another partition count: application two has 4 partitions")
}

// kcatProduceTo produces one record with a null key to a partition of
// topic with kcat.
func kcatProduceTo(t testing.TB, brokers, topic string, partition int, value string) {
	t.Helper()
	cmd := exec.Command(kcat, "-P", "-b", brokers, "-t", topic, "-p", strconv.Itoa(partition))
	cmd.Stdin = strings.NewReader(value + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kcat -P: %v\n%s", err, out)
	}
}

// memberRecords reads <app>-meta and returns the member records it holds
// now: node id → admin URL (a tombstone deletes).
func memberRecords(t *testing.T, brokers, app string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, r := range kcatRead(t, brokers, app+"-meta") {
		if r.Key == nil || !strings.HasPrefix(*r.Key, "member/") {
			continue
		}
		node := strings.TrimPrefix(*r.Key, "member/")
		if r.Payload == nil {
			delete(out, node)
			continue
		}
		var m struct {
			AdminURL string `json:"admin_url"`
		}
		if err := json.Unmarshal([]byte(*r.Payload), &m); err != nil {
			t.Fatalf("member record %v: %v", r, err)
		}
		out[node] = m.AdminURL
	}
	return out
}

// TestClusterKillNode runs three nodes of one application: traffic through
// every node's playground ingress is spread over the partitions, which the
// nodes share; one node is killed with SIGKILL mid-stream. Its partitions
// move to the others (after the 6 s session timeout) and afterwards every
// counter lies between the messages acknowledged for it and the messages
// attempted, and the output topic holds every count of every counter
// exactly once. A node answers a read of an address it does not own with
// 503, Retry-After and the owner's node id and admin URL.
func TestClusterKillNode(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test skipped in -short mode")
	}
	t.Parallel()
	needKcat(t)
	dk := startDevkafka(t, "-port", "0", "-brokers", "3", "-topic", "counts:3")
	fn := kafkaCounterFn(t, "kc/out")
	nodes := newClusterNodes(t, dk, "kill", fn, "node-a", "node-b", "node-c")
	launchAll(t, nodes...)

	tr := startTraffic(t, "kc/counter", 40, nodes...)
	tr.waitAcked(2*time.Second, 30*time.Second)
	// Kill node-c; traffic goes on through node-a and node-b. The sends
	// in flight to node-c count as attempted, not acknowledged.
	survivors := nodes[:2]
	tr.sendTo(survivors...)
	nodes[2].kill()
	t.Log("killed node-c")
	tr.waitAcked(3*time.Second, 30*time.Second)
	tr.halt()

	// node-c's partitions move to the survivors, which restore and serve
	// them: every counter reaches at least its acknowledged messages, and
	// every count is on the output topic once.
	final := tr.settle(t, dk, survivors, 90*time.Second)
	waitServing(t, 30*time.Second, survivors...)

	// A read on the node that does not own the address is forwarded to
	// the owner; with the hop header (as a node forwards it) it is not
	// forwarded again: 503, Retry-After, and the owner with its admin URL.
	checked := false
	for id := range final {
		v0, s0, _, _, err0 := survivors[0].readCount(id)
		v1, s1, _, _, err1 := survivors[1].readCount(id)
		if err0 != nil || err1 != nil {
			t.Fatal(err0, err1)
		}
		if s0 != 200 || s1 != 200 || v0 != v1 {
			t.Errorf("read of %s on the survivors: %d %d and %d %d; want 200 and the same value from both", id, s0, v0, s1, v1)
		}
		_, r0, b0, err0 := survivors[0].countOn(id, "Statefun-Forwarded", "test")
		_, r1, b1, err1 := survivors[1].countOn(id, "Statefun-Forwarded", "test")
		if err0 != nil || err1 != nil {
			t.Fatal(err0, err1)
		}
		if (r0.StatusCode == 200) == (r1.StatusCode == 200) {
			t.Errorf("reads of %s with the hop header: %s and %s; want one owner answering", id, r0.Status, r1.Status)
			continue
		}
		owner, other, b, ra := survivors[0], survivors[1], b1, r1.Header.Get("Retry-After")
		if r1.StatusCode == 200 {
			owner, other, b, ra = survivors[1], survivors[0], b0, r0.Header.Get("Retry-After")
		}
		var pr stateProblem
		json.Unmarshal(b, &pr)
		if pr.Status != http.StatusServiceUnavailable || ra == "" || pr.OwnerNode != owner.id || pr.OwnerURL != "http://"+owner.admin || pr.Partition == nil {
			t.Errorf("read of %s with the hop header on %s (not its owner): %+v, Retry-After %q; want 503 naming %s at http://%s", id, other.id, pr, ra, owner.id, owner.admin)
		}
		// A write there goes to the owner as a command
		// (cluster_write_test.go tests it).
		checked = true
		break
	}
	if !checked {
		t.Error("no counter to check a non-owner's answer with")
	}

	// Member records: the killed node's stays behind (harmless: only
	// owners are looked up); a clean stop withdraws its own.
	if err := survivors[1].stop(); err != nil {
		t.Fatal(err)
	}
	ms := memberRecords(t, dk.brokers, "kill")
	if ms["node-a"] != "http://"+nodes[0].admin || ms["node-c"] != "http://"+nodes[2].admin {
		t.Errorf("member records %v: want node-a and the killed node-c", ms)
	}
	if _, ok := ms["node-b"]; ok {
		t.Errorf("member records %v: node-b stopped cleanly and withdrew its record", ms)
	}
}

// traffic sends messages through the playground ingresses of a set of
// nodes from four goroutines, each to <fnType>/k<random below keys>, and
// counts per id the messages attempted and those acknowledged (200).
type traffic struct {
	t       *testing.T
	fnType  string
	stop    chan struct{}
	wg      sync.WaitGroup
	targets atomic.Pointer[[]*clusterNode]

	mu        sync.Mutex
	acked     map[string]int
	attempted map[string]int
	inflight  map[*clusterNode]int
	ackedN    int
}

// startTraffic starts sending to nodes; halt stops it.
func startTraffic(t *testing.T, fnType string, keys int, nodes ...*clusterNode) *traffic {
	tr := &traffic{t: t, fnType: fnType, stop: make(chan struct{}),
		acked: map[string]int{}, attempted: map[string]int{}, inflight: map[*clusterNode]int{}}
	tr.sendTo(nodes...)
	for w := range 4 {
		tr.wg.Add(1)
		go func() {
			defer tr.wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for {
				select {
				case <-tr.stop:
					return
				default:
				}
				id := "k" + strconv.Itoa(rng.IntN(keys))
				targets := *tr.targets.Load()
				n := targets[rng.IntN(len(targets))]
				tr.mu.Lock()
				tr.attempted[id]++
				tr.inflight[n]++
				tr.mu.Unlock()
				status, err := n.send("/"+tr.fnType+"/"+id, "kc/text", "x")
				tr.mu.Lock()
				tr.inflight[n]--
				if err == nil && status == http.StatusOK {
					tr.acked[id]++
					tr.ackedN++
				}
				tr.mu.Unlock()
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	t.Cleanup(tr.halt)
	return tr
}

// sendTo makes nodes take the traffic from now on. A send already under
// way to another node ends as it ends (see drain).
func (tr *traffic) sendTo(nodes ...*clusterNode) {
	ns := append([]*clusterNode(nil), nodes...)
	tr.targets.Store(&ns)
}

// drain waits until no send to n is under way (after sendTo left it out).
func (tr *traffic) drain(n *clusterNode) {
	tr.t.Helper()
	waitFor(tr.t, 30*time.Second, "the sends under way to "+n.id+" to end", func() bool {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return tr.inflight[n] == 0
	})
}

// ackedTotal is the number of messages acknowledged so far.
func (tr *traffic) ackedTotal() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.ackedN
}

// waitAcked lets the traffic run for at least d and until at least one
// message more is acknowledged: the traffic flows.
func (tr *traffic) waitAcked(d, timeout time.Duration) {
	tr.t.Helper()
	from := tr.ackedTotal()
	deadline := time.Now().Add(d)
	waitFor(tr.t, timeout, "messages acknowledged by the playground ingress", func() bool {
		return time.Now().After(deadline) && tr.ackedTotal() > from
	})
}

// halt stops the traffic and waits for the sends under way.
func (tr *traffic) halt() {
	select {
	case <-tr.stop:
	default:
		close(tr.stop)
	}
	tr.wg.Wait()
}

// settle checks exactly-once after the traffic halted: every counter the
// traffic touched, read from its owner among nodes, reaches its
// acknowledged messages and does not exceed its attempted ones, and the
// output topic (read_committed) holds every count of every counter exactly
// once. It waits for counts to stop moving (a message sent but not
// acknowledged may still arrive) and returns them.
func (tr *traffic) settle(t *testing.T, dk *devkafka, nodes []*clusterNode, timeout time.Duration) map[string]int {
	t.Helper()
	tr.halt()
	tr.mu.Lock()
	acked, attempted := maps.Clone(tr.acked), maps.Clone(tr.attempted)
	total := tr.ackedN
	tr.mu.Unlock()
	t.Logf("%d messages acknowledged, for %d keys", total, len(acked))
	read := func() (map[string]int, bool) {
		now := map[string]int{}
		for id := range attempted {
			v, ok := count(t, nodes, id)
			if !ok {
				return nil, false
			}
			now[id] = int(max(v, 0))
		}
		return now, true
	}
	var final map[string]int
	var out []kcatRecord
	deadline := time.Now().Add(timeout)
	for {
		final = nil
		waitFor(t, time.Until(deadline), "every counter read from its owner reaches its acknowledged messages", func() bool {
			now, ok := read()
			if !ok {
				return false
			}
			for id, n := range acked {
				if now[id] < n {
					return false
				}
			}
			final = now
			return true
		})
		sum := 0
		for _, v := range final {
			sum += v
		}
		out = kcatReadUntil(t, dk.brokers, "counts", sum, time.Until(deadline))
		if again, ok := read(); ok && maps.Equal(again, final) && len(out) == sum {
			break
		}
		if time.Now().After(deadline) {
			break
		}
	}
	for id, v := range final {
		if v > attempted[id] {
			t.Errorf("counter %s = %d, more than the %d messages attempted", id, v, attempted[id])
		}
	}
	checkEffects(t, out, final, nil)
	return final
}

// waitCounts waits until every counter in want, read from its owner
// among nodes, has its count (a partition being restored answers 503
// meanwhile).
func waitCounts(t *testing.T, nodes []*clusterNode, want map[string]int, timeout time.Duration) {
	t.Helper()
	var wrong []string
	ok := func() bool {
		wrong = wrong[:0]
		for id, n := range want {
			if v, ok := count(t, nodes, id); !ok || v != int64(n) {
				wrong = append(wrong, fmt.Sprintf("%s=%d (want %d, read %v)", id, v, n, ok))
			}
		}
		return len(wrong) == 0
	}
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v, %d counters are wrong: %s", timeout, len(wrong), strings.Join(first(wrong, 20), ", "))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitFor polls ok until it holds or timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
