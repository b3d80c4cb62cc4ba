package session

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/statefun-go/statefun/internal/cluster/clusterconfig"
	"github.com/statefun-go/statefun/internal/kafkatxn"
	"github.com/statefun-go/statefun/internal/module"
	"github.com/statefun-go/statefun/internal/store"
)

// faultSeed fixes the random stream of the fault tests (0: a random
// one): which requests the brokers refuse, which partitions the ticker
// ticks. It does not replay a run. Even on the bubble's fake clock, where
// every timer fires at the same fake instant in each run, the order in
// which goroutines run within one instant is not fixed (they run in
// parallel, select picks among ready cases at random, maps iterate in
// random order), and so neither is which request draws which number:
// two runs with one seed see different faults (checked with -tags
// synctests, also at GOMAXPROCS=1).
var faultSeed = flag.Uint64("session.seed", 0, "seed of the injected faults' schedule (0: random)")

// pickSeed returns -session.seed, or a random seed, and logs it.
func pickSeed(t *testing.T) uint64 {
	seed := *faultSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (-session.seed %d draws the same random numbers; the goroutines' order decides which request gets which)", seed, seed)
	return seed
}

func totalArrivals(ns ...*node) int64 {
	var n int64
	for _, x := range ns {
		n += x.e.arrivals.Load()
	}
	return n
}

func totalTicks(ns ...*node) int64 {
	var n int64
	for _, x := range ns {
		n += x.e.ticks.Load()
	}
	return n
}

// One node serves every partition: the records it consumes, the messages
// it sends to other partitions and the ticks it makes count once each, in
// the changelog and in the output, and it reports ready once restored.
func TestOneNodeCountsOnce(t *testing.T) {
	kafkaTest(t, func(t *testing.T, h *harness) {
		a := h.start("a", t.TempDir())
		h.eventually("node a ready with every partition", 20*time.Second, func() bool { return a.s.Ready() && len(a.e.owned()) == testP })
		h.produce(200, 1)
		for p := range testP {
			a.e.tick(p)
		}
		h.eventually("400 increments by arrivals", 20*time.Second, func() bool { return totalArrivals(a) == 400 })
		h.eventually("4 ticks", 20*time.Second, func() bool { return totalTicks(a) == 4 })
		for _, m := range []struct {
			name     string
			min, max float64
		}{
			{"statefun_cluster_owned_partitions", testP, testP},
			{"statefun_cluster_restoring_partitions", 0, 0},
			{"statefun_cluster_restore_seconds", testP, testP}, // one restore each
			{"statefun_cluster_rebalances_total", 1, 1},        // the first assignment
			{"statefun_cluster_txn_commits_total", 1, 1e9},
			{"statefun_cluster_txn_seconds", 1, 1e9},
			{"statefun_cluster_txn_records", 1, 1e9},
			{"statefun_cluster_txn_aborts_total", 0, 0},
			// Nothing left to poll; the offsets of the last commit markers
			// count, at most one per partition.
			{"statefun_cluster_partition_lag", 0, testP},
		} {
			if v := a.metric(t, m.name); v < m.min || v > m.max {
				t.Errorf("%s = %v, want %v..%v", m.name, v, m.min, m.max)
			}
		}
		a.stop(t)
		h.checkExactlyOnce(404)
	})
}

// Uncommitted changes never reach the store: a transaction whose EndTxn
// the brokers refuse is aborted, its overlay never written to Pebble
// (though its changelog record was produced, in the aborted transaction),
// its request fails with ErrAborted, and the partition is rebuilt from the
// store. The next transaction commits normally.
func TestAbortLeavesNoTraceInStore(t *testing.T) {
	kafkaTest(t, func(t *testing.T, h *harness) {
		var armed atomic.Bool
		h.failEndTxnCommit(&armed)
		a := h.start("a", t.TempDir())
		h.eventually("node a ready with every partition", 20*time.Second, func() bool { return a.s.Ready() && len(a.e.owned()) == testP })
		h.produce(40, 0)
		h.eventually("40 arrivals", 20*time.Second, func() bool { return totalArrivals(a) == 40 })
		assigns := a.e.assigns.Load()

		armed.Store(true)
		done := make(chan error, 1)
		if !a.e.probe(1, "aborted", done) {
			t.Fatal("partition 1 not served")
		}
		err := <-done
		if !errors.Is(err, ErrAborted) {
			t.Fatalf("the probe's request failed with %v, want ErrAborted", err)
		}
		if _, ok, err := a.db.GetState(counterAddr(1), "probe/aborted"); err != nil || ok {
			t.Fatalf("after the abort the store holds the aborted overlay's key (found %v, err %v)", ok, err)
		}
		// The aborted record did reach the changelog, so it is the abort,
		// not a missing produce, that keeps it out.
		inLog := func(committed bool) bool {
			for _, r := range h.readTopic(testApp+"-changelog", committed) {
				if r.Partition == 1 && bytes.Contains(r.Key, []byte("probe/aborted")) {
					return true
				}
			}
			return false
		}
		if !inLog(false) || inLog(true) {
			t.Fatalf("the aborted record: read_uncommitted sees it %v (want true), read_committed %v (want false)", inLog(false), inLog(true))
		}
		h.eventually("partition 1 rebuilt after the abort", 20*time.Second, func() bool { return a.e.assigns.Load() > assigns && a.s.Ready() })

		if !a.e.probe(1, "committed", done) {
			t.Fatal("partition 1 not served after its rebuild")
		}
		if err := <-done; err != nil {
			t.Fatalf("the second probe: %v", err)
		}
		if _, ok, err := a.db.GetState(counterAddr(1), "probe/committed"); err != nil || !ok {
			t.Fatalf("after the commit the store lacks the committed key (found %v, err %v)", ok, err)
		}
		h.produce(40, 0)
		h.eventually("80 arrivals", 20*time.Second, func() bool { return totalArrivals(a) == 80 })
		a.stop(t)
		h.checkExactlyOnce(80)
	})
}

// ticker ticks random partitions of the running nodes until stopped, as
// timers and state API writes would: requests that commit no offsets.
type ticker struct {
	mu    sync.Mutex
	nodes []*node
	stop  chan struct{}
	once  sync.Once // closes stop
	done  chan struct{}
}

func startTicker(t *testing.T, seed uint64, nodes ...*node) *ticker {
	tk := &ticker{nodes: nodes, stop: make(chan struct{}), done: make(chan struct{})}
	// Also when the test fails before it halts the ticker: a bubble must
	// end with none of its goroutines left. Registered after the nodes'
	// cleanups, this one runs before theirs.
	t.Cleanup(tk.halt)
	rng := rand.New(rand.NewPCG(seed, seed+1))
	go func() {
		defer close(tk.done)
		for {
			select {
			case <-tk.stop:
				return
			case <-time.After(3 * time.Millisecond):
			}
			tk.mu.Lock()
			if len(tk.nodes) > 0 {
				tk.nodes[rng.IntN(len(tk.nodes))].e.tick(rng.IntN(testP))
			}
			tk.mu.Unlock()
		}
	}()
	return tk
}

func (tk *ticker) set(nodes ...*node) {
	tk.mu.Lock()
	tk.nodes = nodes
	tk.mu.Unlock()
}

// halt stops the ticker and waits for it; later calls do nothing.
func (tk *ticker) halt() {
	tk.once.Do(func() { close(tk.stop) })
	<-tk.done
}

// Three nodes share the application while members leave and join and the
// brokers misbehave (EndTxn and TxnOffsetCommit refused, heartbeats
// answered "rebalance in progress"): every consumed record, every message
// between partitions and every tick made durable counts exactly once in
// the changelog, and the output read read_committed holds each effect
// once. A node that stops (as a process exit: a static member does not
// leave) has its partitions moved after its session timeout; restarted
// under the same node id with its store, it restores only the tail.
func TestThreeNodesExactlyOnceThroughMovesAndFaults(t *testing.T) {
	kafkaTestThroughRebalances(t, func(t *testing.T, h *harness) {
		seed := pickSeed(t)
		f := h.injectFaults(seed)
		dirB := t.TempDir()
		a := h.start("a", t.TempDir())
		b := h.start("b", dirB)
		tk := startTicker(t, seed, a, b)
		var all []*node
		all = append(all, a, b)
		want := int64(0)
		step := func(what string, n int) {
			t.Helper()
			h.produce(n, 1)
			want += 2 * int64(n)
			h.eventually(what, 60*time.Second, func() bool { return totalArrivals(all...) == want })
			if got := totalArrivals(all...); got != want {
				t.Fatalf("%s: %d increments by arrivals, want %d", what, got, want)
			}
		}
		step("two nodes", 300)
		c := h.start("c", t.TempDir())
		all = append(all, c)
		tk.set(a, b, c)
		step("a third node joined", 300)

		tk.set(a, c)
		b.stop(t)
		step("node b stopped", 300)
		h.eventually("a and c serve every partition", 30*time.Second, func() bool {
			return len(a.e.owned())+len(c.e.owned()) == testP && a.s.Ready() && c.s.Ready()
		})

		b2 := h.start("b", dirB)
		all = append(all, b2)
		tk.set(a, c, b2)
		step("node b restarted", 300)
		h.eventually("b serves again", 30*time.Second, func() bool { return len(b2.e.owned()) > 0 && b2.s.Ready() })
		step("three nodes again", 100)

		tk.halt()
		f.on.Store(false)
		// A tick made just before the halt may still be in a transaction;
		// a node stopped while it ends one cannot tell whether it
		// committed (the tick fails with ErrStopped, uncounted), so the
		// nodes stop once none has work in flight.
		h.eventually("no work in flight", 30*time.Second, func() bool {
			if !idle(a, c, b2) {
				return false
			}
			time.Sleep(50 * time.Millisecond)
			return idle(a, c, b2)
		})
		for _, n := range []*node{a, c, b2} {
			n.stop(t)
		}
		t.Logf("faults: %d EndTxn, %d TxnOffsetCommit, %d heartbeats; ticks durable %d; requests aborted %d",
			f.endTxn.Load(), f.offsets.Load(), f.heartbeats.Load(), totalTicks(all...), abortedTotal(all...))
		if f.endTxn.Load() == 0 || f.offsets.Load() == 0 || f.heartbeats.Load() == 0 {
			t.Errorf("not every fault fired: %d EndTxn, %d TxnOffsetCommit, %d heartbeats", f.endTxn.Load(), f.offsets.Load(), f.heartbeats.Load())
		}
		h.checkExactlyOnce(want + totalTicks(all...))
	})
}

// idle reports whether no node of ns has a request queued or a
// transaction open.
func idle(ns ...*node) bool {
	for _, n := range ns {
		if n.s.Pending() > 0 || n.s.txn.Load() != nil {
			return false
		}
	}
	return true
}

func abortedTotal(ns ...*node) int64 {
	var n int64
	for _, x := range ns {
		n += x.e.aborted.Load()
	}
	return n
}

// A zombie cannot commit. Node a stalls (its loop blocked with requests
// that commit no offsets, its heartbeats unseen by the coordinator) past
// its session timeout; the group gives its partitions to b, which restores
// and serves them. When a resumes, it finishes its cycle: it produces its
// changelog and output records, but the transaction is fenced and aborts,
// so nothing it did while a zombie counts, and nothing counts twice.
func TestZombieCannotCommit(t *testing.T) {
	kafkaTest(t, func(t *testing.T, h *harness) {
		var silent, stall atomic.Bool
		h.stallHeartbeats("a", &silent)
		entered, release := make(chan struct{}), make(chan struct{})
		a := h.startWith("a", t.TempDir(), func(c *Config) {
			// A slow heartbeat: the node learns of its expulsion late, so it
			// is its commit that must be fenced.
			c.ClientOpts = append(c.ClientOpts, kgo.HeartbeatInterval(500*time.Millisecond))
		}, func(s *Session) {
			s.testHookCommit = func(reqs []Request) {
				if !stall.Load() {
					return
				}
				for _, r := range reqs {
					if cr, ok := r.(*countReq); ok && cr.tick {
						stall.Store(false)
						close(entered)
						<-release
						return
					}
				}
			}
		})
		b := h.start("b", t.TempDir())
		h.eventually("a and b share the partitions", 30*time.Second, func() bool {
			return len(a.e.owned()) > 0 && len(b.e.owned()) > 0 && len(a.e.owned())+len(b.e.owned()) == testP && a.s.Ready() && b.s.Ready()
		})
		h.produce(200, 1)
		h.eventually("400 arrivals", 30*time.Second, func() bool { return totalArrivals(a, b) == 400 })

		// a stalls with a tick of each of its partitions in hand.
		stall.Store(true)
		silent.Store(true)
		zombieParts := a.e.owned()
		for _, p := range zombieParts {
			if !a.e.tick(p) {
				t.Fatalf("a does not serve partition %d", p)
			}
		}
		<-entered
		h.eventually("b serves every partition", 30*time.Second, func() bool { return len(b.e.owned()) == testP && b.s.Ready() })
		h.produce(200, 1)
		for p := range testP {
			b.e.tick(p)
		}
		h.eventually("800 arrivals, all at b", 30*time.Second, func() bool { return totalArrivals(a, b) == 800 })

		// a resumes.
		aborted := a.e.aborted.Load()
		silent.Store(false)
		close(release)
		h.eventually("a's zombie cycle to end", 30*time.Second, func() bool {
			return a.e.aborted.Load() >= aborted+int64(len(zombieParts)) || a.e.ticks.Load() > 0
		})
		if n := a.e.ticks.Load(); n != 0 {
			t.Errorf("%d of the zombie's ticks were made durable: it committed after the group gave its partitions to b", n)
		}
		h.eventually("a rejoined and serves", 30*time.Second, func() bool { return len(a.e.owned()) > 0 && a.s.Ready() })
		h.produce(200, 1)
		h.eventually("1200 arrivals", 30*time.Second, func() bool { return totalArrivals(a, b) == 1200 })
		a.stop(t)
		b.stop(t)
		h.checkExactlyOnce(1200 + totalTicks(a, b))
	})
}

// An idle node hears every revocation. The group transact session reports
// a revocation to the session once per transaction (it forgets the next
// ones until End), so a node that commits nothing between two
// revocations — one node, idle, while two others join one after the
// other — must still give up each partition it loses: else two nodes
// serve one partition.
func TestIdleNodeHearsEveryRevocation(t *testing.T) {
	kafkaTest(t, func(t *testing.T, h *harness) {
		a := h.start("a", t.TempDir())
		h.eventually("a serves every partition", 20*time.Second, func() bool { return a.s.Ready() && len(a.e.owned()) == testP })
		nodes := []*node{a}
		for _, id := range []string{"b", "c"} {
			n := h.start(id, t.TempDir())
			nodes = append(nodes, n)
			h.eventually(id+" serves partitions", 20*time.Second, func() bool { return n.s.Ready() && len(n.e.owned()) > 0 })
		}
		h.eventually("the nodes serve disjoint partitions covering all", 20*time.Second, func() bool {
			seen := map[int]bool{}
			for _, n := range nodes {
				if !n.s.Ready() {
					return false
				}
				for _, p := range n.e.owned() {
					if seen[p] {
						return false
					}
					seen[p] = true
				}
			}
			return len(seen) == testP
		})
		h.settle(time.Second) // settled: nothing moves any more
		owners := map[int][]string{}
		for _, n := range nodes {
			for _, p := range n.e.owned() {
				owners[p] = append(owners[p], n.id)
			}
		}
		for p, ids := range owners {
			if len(ids) > 1 {
				t.Errorf("partition %d served by %v", p, ids)
			}
		}
		h.produce(100, 0)
		h.eventually("100 arrivals", 20*time.Second, func() bool { return totalArrivals(nodes...) >= 100 })
		for _, n := range nodes {
			n.stop(t)
		}
		h.checkExactlyOnce(100)
	})
}

// Every revocation reaches the engine, also one that follows another
// without a transaction in between. kgo's GroupTransactSession calls the
// user's revoke callback only for the first revocation after an End: with
// nothing to commit (an idle start), a node that gave partitions away once
// would keep serving the ones it gives away next, while their new owner
// serves them too. Four nodes join one after another without traffic, so
// the first gives partitions away at two rebalances: each must end up with
// one partition, none with one another serves.
func TestRevokedTwiceWithoutTraffic(t *testing.T) {
	kafkaTest(t, func(t *testing.T, h *harness) {
		var nodes []*node
		for _, id := range []string{"a", "b", "c", "d"} {
			nodes = append(nodes, h.start(id, t.TempDir()))
			n := len(nodes)
			h.eventually(strconv.Itoa(n)+" nodes share the partitions", 30*time.Second, func() bool {
				total := 0
				for _, x := range nodes {
					if !x.s.Ready() || len(x.e.owned()) == 0 && n <= testP {
						return false
					}
					total += len(x.e.owned())
				}
				return total == testP
			})
		}
		seen := map[int]string{}
		for i, n := range nodes {
			for _, p := range n.e.owned() {
				if other, ok := seen[p]; ok {
					t.Errorf("partition %d served by node %s and node %s", p, other, []string{"a", "b", "c", "d"}[i])
				}
				seen[p] = []string{"a", "b", "c", "d"}[i]
			}
		}
		for _, n := range nodes {
			n.stop(t)
		}
	})
}

// kgoLog records the Kafka client's log messages.
type kgoLog struct {
	mu   sync.Mutex
	msgs []string
}

func (l *kgoLog) Level() kgo.LogLevel { return kgo.LogLevelDebug }
func (l *kgoLog) Log(_ kgo.LogLevel, msg string, _ ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, msg)
}

func (l *kgoLog) count(prefix string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if strings.HasPrefix(m, prefix) {
			n++
		}
	}
	return n
}

// A transaction that polled nothing (timers, state API writes, a
// function's effects after its arrival committed) must not end through
// the group transact session's pre-KIP-447 path, which holds the session
// for 500 ms after each commit: at low load a node's cycles alternate
// between arrivals and their effects, and every other cycle took half a
// second (BenchmarkCluster at window 100). The client says when it
// takes that path; the test counts it, and counts the ticks committed.
func TestCommitWithoutOffsetsSkipsThePreKIP447Pause(t *testing.T) {
	kafkaTest(t, func(t *testing.T, h *harness) {
		logs := &kgoLog{}
		a := h.startWith("a", t.TempDir(), func(c *Config) {
			c.ClientOpts = append(c.ClientOpts, kgo.WithLogger(logs))
		}, nil)
		h.eventually("node a ready with every partition", 20*time.Second, func() bool { return a.s.Ready() && len(a.e.owned()) == testP })
		h.produce(20, 0) // one transaction with offsets first, as in a run
		h.eventually("20 arrivals", 20*time.Second, func() bool { return totalArrivals(a) == 20 })
		const ticks = 5
		for i := range ticks {
			a.e.tick(i % testP)
			h.eventually(fmt.Sprintf("tick %d committed", i+1), 20*time.Second, func() bool { return totalTicks(a) == int64(i+1) })
		}
		if n := logs.count("sleeping 500ms before allowing a rebalance"); n != 0 {
			t.Errorf("the Kafka client paused 500 ms after %d of %d commits without offsets", n, ticks)
		}
		if a.metric(t, "statefun_cluster_txn_aborts_total") != 0 {
			t.Error("a transaction was aborted")
		}
		a.stop(t)
		h.checkExactlyOnce(20 + ticks)
	})
}

// A session's fetches wait at most DefaultFetchMaxWait (the Kafka
// consumer's default) unless fetch.max.wait.ms is set: with the client's
// default of 5 s, a partition resumed after its restore waited for the
// fetch in flight, and a node that had just reported ready took 5.1 s to
// take in its first message (seen in the e2e suites on a cluster node).
func TestFetchMaxWaitDefault(t *testing.T) {
	for _, tc := range []struct {
		props []module.KafkaProperty
		want  time.Duration
	}{
		{nil, DefaultFetchMaxWait},
		{[]module.KafkaProperty{{Key: "fetch.max.wait.ms", Value: "50"}}, 50 * time.Millisecond},
	} {
		db, err := store.Open("", store.Options{Partitions: testP, FS: vfs.NewMem(), Logger: quietLogger{}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		cfg := &clusterconfig.Config{Brokers: []string{"127.0.0.1:1"}, AppID: testApp, NodeID: "n", Advertise: "http://n:8070", Properties: tc.props}
		s, err := New(Config{Cluster: cfg, DB: db})
		if err != nil {
			t.Fatal(err)
		}
		cl, err := kgo.NewClient(s.clientOpts()...)
		if err != nil {
			t.Fatal(err)
		}
		got := cl.OptValue(kgo.FetchMaxWait)
		cl.Close()
		if got != tc.want {
			t.Errorf("properties %v: the session's fetch max wait is %v, want %v", tc.props, got, tc.want)
		}
	}
}

// Work of one partition that fails to encode every time it is redone (a
// deterministic error) aborts the transaction, but the node does not
// stop (the failure would follow the partition to every node), and the
// partition's rebuild backs off, so the other partitions' work commits
// while it fails: the poison costs a handful of aborted transactions, not
// one per cycle. Once the work encodes again, the partition catches up,
// and every record counts once.
func TestEncodeFailureBacksOffItsPartitionOnly(t *testing.T) {
	kafkaTest(t, func(t *testing.T, h *harness) {
		const first = 100 * time.Millisecond
		a := h.startWith("a", t.TempDir(), func(c *Config) { c.RebuildBackoff = first }, nil)
		h.eventually("node a ready with every partition", 20*time.Second, func() bool { return a.s.Ready() && len(a.e.owned()) == testP })
		a.e.poisoned[1].Store(true)
		if err := a.s.Submit(&poisonReq{e: a.e, p: 1}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		h.produce(120, 0) // 30 for each of the 4 partitions
		h.eventually("the 90 arrivals of partitions 0, 2 and 3", 30*time.Second, func() bool { return totalArrivals(a) >= 90 })
		h.settle(time.Second) // let the poison fail on through its back-offs
		took := time.Since(start)
		poisons, backoffs := a.e.poisons.Load(), a.metric(t, "statefun_cluster_partition_backoffs_total")
		t.Logf("in %v: %d poison attempts, %v back-offs", took.Round(time.Millisecond), poisons, backoffs)
		if poisons < 3 || backoffs < 3 {
			t.Errorf("%d poison attempts, %v back-offs; want the poison redone after each rebuild, each rebuild backed off", poisons, backoffs)
		}
		// 0.1 s, 0.2 s, 0.4 s, ...: about log2(took/0.1 s) attempts, not one
		// per cycle.
		if max := int64(2 + math.Log2(float64(took/first))); poisons > max {
			t.Errorf("%d poison attempts in %v; want at most %d (the rebuild backs off)", poisons, took, max)
		}
		select {
		case err := <-a.done:
			t.Fatalf("the node stopped: %v", err)
		default:
		}
		a.e.poisoned[1].Store(false)
		h.eventually("all 120 arrivals once partition 1 encodes again", 60*time.Second, func() bool { return totalArrivals(a) == 120 })
		a.stop(t)
		h.checkExactlyOnce(120)
	})
}

// A node refuses options under which a transaction waiting for a
// rebalance may outlive its timeout (two rebalance timeouts must fit well
// inside it): the Kafka client's own defaults, a 60 s rebalance timeout
// against a 40 s transaction timeout, among them.
func TestRefusesRebalanceLongerThanItsTransactions(t *testing.T) {
	for _, tc := range []struct {
		opts []kgo.Opt
		ok   bool
	}{
		{nil, false}, // the client's defaults
		{[]kgo.Opt{kgo.RebalanceTimeout(5 * time.Second), kgo.TransactionTimeout(10 * time.Second)}, false},
		{[]kgo.Opt{kgo.RebalanceTimeout(3 * time.Second), kgo.TransactionTimeout(10 * time.Second)}, true},
	} {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}, tc.opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		err = checkTimeouts(cl)
		cl.Close()
		if tc.ok != (err == nil) || (err != nil && !strings.Contains(err.Error(), "lower max.poll.interval.ms or raise transaction.timeout.ms")) {
			t.Errorf("rebalance %v, transaction %v: %v", cl.OptValue(kgo.RebalanceTimeout), cl.OptValue(kgo.TransactionTimeout), err)
		}
	}
}

// A commit waits until the Kafka client has settled the partitions of the
// topics it produced to: until then, the client's EndTransaction can take
// the transaction for empty and end it as an abort while reporting
// success. Here the client reports the changelog unsettled for a while
// after every flush; each commit without offsets (a tick, as a state API
// write) waits it out and commits.
func TestCommitWaitsUntilTheClientSettlesItsPartitions(t *testing.T) {
	kafkaTest(t, func(t *testing.T, h *harness) {
		var asked, lagging atomic.Int64
		a := h.startWith("a", t.TempDir(), nil, func(s *Session) {
			s.testHookSettled = func(cl *kgo.Client, topic string) bool {
				asked.Add(1)
				if topic == testApp+"-changelog" && lagging.Load() > 0 {
					lagging.Add(-1)
					return false
				}
				return kafkatxn.Settled(cl, topic)
			}
		})
		h.eventually("node a ready with every partition", 20*time.Second, func() bool { return a.s.Ready() && len(a.e.owned()) == testP })
		const ticks = 4
		for i := range ticks {
			lagging.Store(3)
			before := asked.Load()
			a.e.tick(i % testP)
			h.eventually(fmt.Sprintf("tick %d committed", i+1), 20*time.Second, func() bool { return totalTicks(a) == int64(i+1) })
			if n := asked.Load() - before; n < 4 {
				t.Fatalf("tick %d: the commit asked %d times whether the client settled its partitions; want it to ask until they were (4 times or more)", i+1, n)
			}
		}
		if n := a.metric(t, "statefun_cluster_txn_aborts_total"); n != 0 {
			t.Errorf("%v transactions aborted; want the commits to wait, not abort", n)
		}
		a.stop(t)
		h.checkExactlyOnce(ticks)
	})
}

// A transaction whose produced partitions the client does not settle
// within settleWait aborts (its commit could not be trusted to hold its
// records): the request fails with ErrAborted, the store and the
// read_committed changelog lack its write, the partition is rebuilt and
// serves the next write.
func TestUnsettledPartitionsAbortTheTransaction(t *testing.T) {
	kafkaTest(t, func(t *testing.T, h *harness) {
		var stuck atomic.Bool
		a := h.startWith("a", t.TempDir(), nil, func(s *Session) {
			s.testHookSettled = func(cl *kgo.Client, topic string) bool {
				if topic == testApp+"-changelog" && stuck.Load() {
					return false
				}
				return kafkatxn.Settled(cl, topic)
			}
		})
		h.eventually("node a ready with every partition", 20*time.Second, func() bool { return a.s.Ready() && len(a.e.owned()) == testP })
		assigns := a.e.assigns.Load()
		stuck.Store(true)
		done := make(chan error, 1)
		if !a.e.probe(1, "unsettled", done) {
			t.Fatal("partition 1 not served")
		}
		if err := <-done; !errors.Is(err, ErrAborted) {
			t.Fatalf("the probe's request failed with %v, want ErrAborted", err)
		}
		stuck.Store(false)
		if _, ok, err := a.db.GetState(counterAddr(1), "probe/unsettled"); err != nil || ok {
			t.Fatalf("the store holds the aborted write (found %v, err %v)", ok, err)
		}
		for _, r := range h.readTopic(testApp+"-changelog", true) {
			if bytes.Contains(r.Key, []byte("probe/unsettled")) {
				t.Fatal("the read_committed changelog holds the aborted write")
			}
		}
		if n := a.metricWith(t, "statefun_cluster_txn_aborts_total", "reason", "unsettled"); n != 1 {
			t.Errorf("aborts for reason unsettled: %v, want 1", n)
		}
		h.eventually("partition 1 rebuilt after the abort", 20*time.Second, func() bool { return a.e.assigns.Load() > assigns && a.s.Ready() })
		if !a.e.probe(1, "settled", done) {
			t.Fatal("partition 1 not served after its rebuild")
		}
		if err := <-done; err != nil {
			t.Fatalf("the next write: %v", err)
		}
		if _, ok, err := a.db.GetState(counterAddr(1), "probe/settled"); err != nil || !ok {
			t.Fatalf("the store lacks the committed write (found %v, err %v)", ok, err)
		}
	})
}
