package e2e

// Cluster mode under the failures real processes meet: a rolling restart,
// a node paused past its session timeout (a zombie), Kafka refusing
// requests and moving coordinators, and delayed messages pending on a
// killed node. Each runs devkafka and statefun nodes as processes of their
// own (helpers in cluster_test.go).

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// restoreLine is a node's log line for a finished restore.
var restoreLine = regexp.MustCompile(`msg="cluster: partition restored; serving".* partition=(\d+) from=(\d+) to=(\d+) records=(\d+)`)

// restored is one partition restore a node logged.
type restored struct{ partition, from, to, records int64 }

// restoresSince parses the restores n logged after the first mark bytes of
// its log.
func (n *clusterNode) restoresSince(mark int) []restored {
	var out []restored
	for _, m := range restoreLine.FindAllStringSubmatch(badFullLog(n.runtime)[mark:], -1) {
		var r restored
		r.partition, _ = strconv.ParseInt(m[1], 10, 64)
		r.from, _ = strconv.ParseInt(m[2], 10, 64)
		r.to, _ = strconv.ParseInt(m[3], 10, 64)
		r.records, _ = strconv.ParseInt(m[4], 10, 64)
		out = append(out, r)
	}
	return out
}

// changelogRecords counts the records a restore from the start of topic
// would apply, in each partition up to the offset upTo gives it: the
// committed records (read_committed, as a restore reads), not the
// transaction markers.
func changelogRecords(t *testing.T, brokers, topic string, upTo map[int32]int64) int64 {
	t.Helper()
	offsets := map[int32]kgo.Offset{}
	for p, to := range upTo {
		if to > 0 {
			offsets[p] = kgo.NewOffset().At(0)
		}
	}
	if len(offsets) == 0 {
		return 0
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var n int64
	for len(offsets) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s: partitions %v not read up to their offsets %v", topic, offsets, upTo)
		}
		fs.EachRecord(func(r *kgo.Record) {
			to := upTo[r.Partition]
			if r.Offset < to && !r.Attrs.IsControl() {
				n++
			}
			if r.Offset >= to-1 {
				delete(offsets, r.Partition)
			}
		})
	}
	return n
}

// TestClusterRollingRestart restarts each of three nodes in turn (SIGTERM,
// then the same node id and data directory again) while traffic flows
// through the others. The group's session timeout (30 s here) outlasts a
// restart, so a node keeps its partitions (static membership) and restores
// only the changelog tail written since its store's recorded position —
// not the whole changelog a full restore would read. Afterwards every
// counter lies between its acknowledged and attempted messages and the
// output holds every count exactly once.
func TestClusterRollingRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test skipped in -short mode")
	}
	t.Parallel()
	needKcat(t)
	dk := startDevkafka(t, "-port", "0", "-brokers", "3", "-topic", "counts:3")
	fn := kafkaCounterFn(t, "kc/out")
	nodes := newClusterNodes(t, dk, "roll", fn, "node-a", "node-b", "node-c")
	for _, n := range nodes {
		n.sessionTimeout = 30000
	}
	launchAll(t, nodes...)
	tr := startTraffic(t, "kc/counter", 40, nodes...)
	tr.waitAcked(2*time.Second, 30*time.Second)

	for i, n := range nodes {
		others := slices.Delete(slices.Clone(nodes), i, i+1)
		tr.sendTo(others...)
		tr.drain(n)
		began := time.Now()
		if err := n.stop(); err != nil {
			t.Fatalf("%s did not stop cleanly on SIGTERM: %v", n.id, err)
		}
		stopped := time.Since(began)
		mark := len(badFullLog(n.runtime))
		n.launch()
		n.waitReady(60 * time.Second)
		tr.sendTo(nodes...)
		t.Logf("restarted %s (stopped in %v, ready %v later)", n.id, stopped.Round(time.Millisecond), (time.Since(began) - stopped).Round(time.Millisecond))

		// Its restores read the tail only: from the position its store
		// recorded, not from the changelog's start.
		rs := n.restoresSince(mark)
		if len(rs) == 0 {
			t.Fatalf("%s logged no restore after its restart", n.id)
		}
		var tail int64
		upTo := map[int32]int64{}
		for _, r := range rs {
			if r.from == 0 {
				t.Errorf("%s restored partition %d from offset 0 after a restart; want the position its store kept", n.id, r.partition)
			}
			tail += r.records
			upTo[int32(r.partition)] = r.to
		}
		full := changelogRecords(t, dk.brokers, "roll-changelog", upTo)
		got, err := n.metric("statefun_cluster_restore_records_total")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s restored %d partitions: %v changelog records read (restores logged %d), a full restore would read %d", n.id, len(rs), got, tail, full)
		if full == 0 || got >= float64(full) {
			t.Errorf("%s read %v changelog records restoring after a restart; a full restore reads %d: want only the tail", n.id, got, full)
		}
		tr.waitAcked(time.Second, 30*time.Second)
	}
	waitServing(t, 60*time.Second, nodes...)
	tr.settle(t, dk, nodes, 90*time.Second)
}

// TestClusterZombie stops one of three nodes with SIGSTOP while traffic
// flows through the others, past its session timeout: the group gives its
// partitions to the others, which restore them (once its open transaction
// timed out) and serve. Then SIGCONT: the zombie resumes where it stopped,
// with a transaction of a generation that is over. Nothing it tries to
// commit counts, and what happens to it depends on where it stopped:
//
//   - with a transaction open on the brokers (the usual case under
//     traffic), the coordinator aborted it at transaction.timeout.ms and
//     bumped the node's producer epoch: its late offset commit is answered
//     PRODUCER_FENCED, and it exits with status 1 naming the cause.
//     Restarted, as a supervisor would, it rejoins;
//   - between transactions, it hears it is no longer a member (or its
//     offset commit is refused by the generation), aborts, and rejoins
//     without exiting.
//
// Either way no effect counts twice: every counter lies between its
// acknowledged and attempted messages and the output holds every count
// exactly once.
func TestClusterZombie(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test skipped in -short mode")
	}
	t.Parallel()
	needKcat(t)
	dk := startDevkafka(t, "-port", "0", "-brokers", "3", "-topic", "counts:3")
	fn := kafkaCounterFn(t, "kc/out")
	nodes := newClusterNodes(t, dk, "zombie", fn, "node-a", "node-b", "node-c")
	launchAll(t, nodes...)
	live, z := nodes[:2], nodes[2]
	// The zombie's own ingress takes no traffic: a send to a stopped
	// process would hang. Its partitions get their messages through the
	// others.
	tr := startTraffic(t, "kc/counter", 40, live...)
	tr.waitAcked(2*time.Second, 30*time.Second)

	if err := z.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Log("stopped node-c (SIGSTOP)")
	stopped := time.Now()
	waitServing(t, 90*time.Second, live...)
	t.Logf("node-a and node-b serve every partition %v after the stop", time.Since(stopped).Round(time.Second))
	tr.waitAcked(2*time.Second, 30*time.Second)

	mark := len(badFullLog(z.runtime))
	if err := z.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	t.Log("resumed node-c (SIGCONT)")
	exited := false
	waitFor(t, 90*time.Second, "node-c to rejoin and serve, or to exit", func() bool {
		select {
		case <-z.exited:
			exited = true
			return true
		default:
		}
		l := badFullLog(z.runtime)[mark:]
		return (strings.Contains(l, "partitions lost") || strings.Contains(l, "partitions revoked")) && serving(nodes...)
	})
	if exited {
		t.Log("node-c exited after SIGCONT: its transaction had been aborted by the coordinator")
		if code := z.cmd.ProcessState.ExitCode(); code != 1 {
			t.Errorf("node-c exited with status %d, want 1", code)
		}
		z.waitLog(10*time.Second, "engine stopped", "ending a transaction of zombie-node-c failed, so this node stops", "stalled past transaction.timeout.ms")
		z.launch()
		z.waitReady(60 * time.Second)
		t.Log("node-c restarted")
	} else {
		aborts, _ := z.metric("statefun_cluster_txn_aborts_total")
		t.Logf("node-c rejoined after SIGCONT without exiting (%v transactions aborted)", aborts)
	}
	waitServing(t, 90*time.Second, nodes...)
	tr.sendTo(nodes...)
	tr.waitAcked(2*time.Second, 30*time.Second)
	tr.settle(t, dk, nodes, 90*time.Second)
}

// running fails the test at once if one of nodes exited, and is true
// otherwise.
func running(t *testing.T, nodes ...*clusterNode) bool {
	t.Helper()
	for _, n := range nodes {
		select {
		case <-n.exited:
			t.Fatalf("%s exited:\n%s", n.id, n.logs())
		default:
		}
	}
	return true
}

// controlFault installs a fault through devkafka's -control listener and
// returns its id.
func controlFault(t *testing.T, ctl, query string) int {
	t.Helper()
	resp, err := http.Post(ctl+"/faults?"+query, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out struct{ ID int }
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(b, &out) != nil {
		t.Fatalf("POST /faults?%s: %s %s", query, resp.Status, b)
	}
	return out.ID
}

// faultHits is the number of requests fault id failed so far.
func faultHits(t *testing.T, ctl string, id int) int {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("%s/faults/%d", ctl, id))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct{ Hits int }
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out.Hits
}

// controlPost posts to one of devkafka's control actions.
func controlPost(t *testing.T, ctl, path string) {
	t.Helper()
	resp, err := http.Post(ctl+path, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("POST %s: %s", path, resp.Status)
	}
}

// TestClusterKafkaFaults runs two nodes while devkafka, from outside,
// refuses EndTxn commits (UNKNOWN_SERVER_ERROR: the outcome unknown to the
// client), TxnOffsetCommits (ILLEGAL_GENERATION) and heartbeats
// (REBALANCE_IN_PROGRESS: the members rejoin), and moves every group and
// transaction coordinator, with traffic flowing all along. Transactions abort and partitions are rebuilt, and
// exactly-once holds: every counter between its acknowledged and attempted
// messages, every count once on the output.
func TestClusterKafkaFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test skipped in -short mode")
	}
	t.Parallel()
	needKcat(t)
	ctl := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	dk := startDevkafka(t, "-port", "0", "-brokers", "3", "-topic", "counts:3", "-control", ctl)
	ctl = "http://" + ctl
	fn := kafkaCounterFn(t, "kc/out")
	nodes := newClusterNodes(t, dk, "faults", fn, "node-a", "node-b")
	launchAll(t, nodes...)
	tr := startTraffic(t, "kc/counter", 40, nodes...)
	tr.waitAcked(time.Second, 30*time.Second)

	for _, f := range []struct {
		what, query string
		hits        int
	}{
		{"EndTxn commits refused", "key=EndTxn&commit=true&error=UNKNOWN_SERVER_ERROR&count=3", 3},
		{"TxnOffsetCommits refused", "key=TxnOffsetCommit&error=ILLEGAL_GENERATION&count=3", 3},
		{"heartbeats answered with a rebalance", "key=Heartbeat&error=REBALANCE_IN_PROGRESS&count=2", 2},
	} {
		id := controlFault(t, ctl, f.query)
		waitFor(t, 60*time.Second, f.what, func() bool { return running(t, nodes...) && faultHits(t, ctl, id) >= f.hits })
		t.Logf("%s: %d hits", f.what, faultHits(t, ctl, id))
		tr.waitAcked(time.Second, 60*time.Second)
	}
	controlPost(t, ctl, "/coordinators/move")
	tr.waitAcked(time.Second, 60*time.Second)

	waitServing(t, 60*time.Second, nodes...)
	tr.settle(t, dk, nodes, 90*time.Second)
	aborts, err := sumMetric(nodes, "statefun_cluster_txn_aborts_total")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("transactions aborted: %v", aborts)
	if aborts == 0 {
		t.Error("no transaction aborted under the faults: they did not reach the nodes")
	}
}

// TestClusterDelayedAcrossKill: messages to kc/delay each send one message
// to kc/counter with SendAfter (10 s). With those delayed messages pending
// on node-b (its partitions' counters not counted yet), node-b is killed
// with SIGKILL; its partitions move to node-a, which restores their
// pending timers and fires each delayed message exactly once: every
// counter equals its acknowledged messages and the output holds every
// count once.
func TestClusterDelayedAcrossKill(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test skipped in -short mode")
	}
	t.Parallel()
	needKcat(t)
	dk := startDevkafka(t, "-port", "0", "-brokers", "3", "-topic", "counts:3")
	fn := kafkaCounterFn(t, "kc/out")
	nodes := newClusterNodes(t, dk, "delay", fn, "node-a", "node-b")
	launchAll(t, nodes...)
	a, b := nodes[0], nodes[1]
	tr := startTraffic(t, "kc/delay", 20, a)
	tr.waitAcked(2*time.Second, 30*time.Second)
	tr.halt()
	total := tr.ackedTotal()

	// Every message to kc/delay was handled and committed (its "armed"
	// count, read from its owner, reached the messages acknowledged): a
	// delayed message is pending for each. Those of node-b's partitions
	// have not fired yet.
	waitFor(t, 60*time.Second, "every kc/delay message handled", func() bool {
		for id, want := range tr.acked {
			ok := false
			for _, n := range nodes {
				v, status, _, _, err := n.readInt("kc/delay", id, "armed")
				if err == nil && status == 200 && v == int64(want) {
					ok = true
				}
			}
			if !ok {
				return false
			}
		}
		return true
	})
	// Counted on node-b alone: the hop header makes it answer only for
	// the addresses it owns (another node's it would fetch from their owner).
	pending := 0
	for id, want := range tr.acked {
		v, resp, _, err := b.countOn(id, "Statefun-Forwarded", "test")
		if err == nil && resp.StatusCode != http.StatusServiceUnavailable && v < int64(want) {
			pending += want - int(max(v, 0))
		}
	}
	if pending == 0 {
		t.Fatal("no delayed message pending on node-b before the kill: the test would prove nothing")
	}
	b.kill()
	t.Logf("killed node-b with %d delayed messages pending on it (of %d)", pending, total)

	waitServing(t, 90*time.Second, a)
	final := tr.settle(t, dk, []*clusterNode{a}, 90*time.Second)
	for id, want := range tr.acked {
		if final[id] != want {
			t.Errorf("counter %s = %d, want %d: each delayed message once", id, final[id], want)
		}
	}
}
