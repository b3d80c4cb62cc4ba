package kafkaegress

import (
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// kfake fails chosen requests with chosen Kafka errors: commits, produces,
// adding partitions to the transaction, fencing. The egress neither
// duplicates nor loses a record.
func TestExactlyOnceUnderFaults(t *testing.T) {
	cases := []struct {
		name  string
		fault kfake.Fault
		opts  []kfake.Opt
	}{
		{name: "EndTxn unknown server error", fault: kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, Count: 2}},
		{name: "EndTxn not coordinator", fault: kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, Err: kerr.NotCoordinator, Count: 3}},
		{name: "EndTxn transaction abortable", fault: kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, Err: kerr.TransactionAbortable, Count: 2}},
		{name: "Produce timed out after append", fault: kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: outTopic, Err: kerr.RequestTimedOut, Count: 3}},
		{name: "Produce unknown server error", fault: kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: outTopic, Count: 2}},
		{name: "Produce not leader", fault: kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: outTopic, Err: kerr.NotLeaderForPartition, Count: 3}},
		// A 3.9 cluster: before KIP-890 part 2 a producer adds each
		// partition to its transaction with AddPartitionsToTxn (later,
		// Produce adds it).
		{name: "AddPartitionsToTxn unknown server error", fault: kfake.Fault{Keys: []kmsg.Key{kmsg.AddPartitionsToTxn}, Count: 2},
			opts: []kfake.Opt{kfake.MaxVersions(kversion.V3_9_0())}},
		{name: "AddPartitionsToTxn not coordinator", fault: kfake.Fault{Keys: []kmsg.Key{kmsg.AddPartitionsToTxn}, Err: kerr.NotCoordinator, Count: 3},
			opts: []kfake.Opt{kfake.MaxVersions(kversion.V3_9_0())}},
		{name: "InitProducerID coordinator not available", fault: kfake.Fault{Keys: []kmsg.Key{kmsg.InitProducerID}, Err: kerr.CoordinatorNotAvailable, Count: 3}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, tc.opts...)
			h := c.Fault(tc.fault)
			r := newRelay(t, testConfig(c, ExactlyOnce))
			rt := openRuntime(t, vfs.NewMem(), r.Route, nil)
			rt.start(r)
			rt.ingest(t, 0, 80, 9)
			waitDelivered(t, rt, c.ListenAddrs(), 80)
			if h.Hits() == 0 {
				t.Fatal("the fault was never hit: the test proves nothing")
			}
		})
	}
}

// A commit whose answer is lost (the client gives up waiting; the broker
// then commits) has an unknown outcome: the relay must not send the batch
// again. It learns from the marker topic that the batch is in.
func TestExactlyOnceCommitAnswerLost(t *testing.T) {
	c := newCluster(t)
	cfg := testConfig(c, ExactlyOnce)
	cfg.Timeout = 300 * time.Millisecond
	cfg.RetryBase, cfg.RetryMax = 300*time.Millisecond, time.Second
	r := newRelay(t, cfg)
	var once atomic.Bool
	c.ControlKey(int16(kmsg.EndTxn), func(kmsg.Request) (kmsg.Response, error, bool) {
		if once.CompareAndSwap(false, true) {
			// Hold the first commit until the relay has given up on it.
			c.SleepControl(func() {
				waitFor(t, "the relay to give up on the commit", func() bool {
					return testutil.ToFloat64(cfg.Metrics.transactions.WithLabelValues(egressID, "unknown")) > 0
				})
			})
		}
		return nil, nil, false
	})
	rt := openRuntime(t, vfs.NewMem(), r.Route, nil)
	rt.ingest(t, 0, 30, 5)
	rt.start(r)
	// Had the relay sent the batch again after the lost answer, both
	// copies would be committed: waitDelivered fails on any record a
	// read_committed consumer sees twice. (The log itself may hold more
	// than 30 records: on a loaded machine a produce can outlast the 300 ms
	// timeout, and that batch is aborted and sent again, invisible to
	// read_committed consumers.)
	waitDelivered(t, rt, c.ListenAddrs(), 30)
	if n := testutil.ToFloat64(cfg.Metrics.transactions.WithLabelValues(egressID, "unknown")); n == 0 {
		t.Fatal("no commit had an unknown outcome: the test did not lose a commit answer")
	}
}

// Transaction coordinators move while the egress delivers.
func TestExactlyOnceCoordinatorMoves(t *testing.T) {
	c := newCluster(t)
	r := newRelay(t, testConfig(c, ExactlyOnce))
	rt := openRuntime(t, vfs.NewMem(), r.Route, nil)
	rt.start(r)
	var moves atomic.Int64
	c.ControlKey(int16(kmsg.EndTxn), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if moves.Add(1)%2 == 0 {
			c.RehashCoordinators() // the next requests find the coordinator moved
		}
		return nil, nil, false
	})
	rt.ingest(t, 0, 200, 17)
	waitDelivered(t, rt, c.ListenAddrs(), 200)
	if moves.Load() < 4 {
		t.Fatalf("only %d commits: the coordinator hardly moved", moves.Load())
	}
}

// freePorts returns n loopback ports free right now.
func freePorts(t *testing.T, n int) []int {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// Kafka goes away (every broker stopped) and comes back: meanwhile Ready
// names the egress and why, records wait in the outbox, and afterwards
// every one arrives — exactly once, or at least once.
func TestKafkaDownAndBack(t *testing.T) {
	for _, sem := range []Semantic{ExactlyOnce, AtLeastOnce} {
		t.Run(sem.String(), func(t *testing.T) {
			ports := freePorts(t, 3)
			dir := t.TempDir()
			start := func() *kfake.Cluster {
				c, err := kfake.NewCluster(kfake.Ports(ports...), kfake.DataDir(dir), kfake.SeedTopics(3, outTopic))
				if err != nil {
					t.Fatal(err)
				}
				return c
			}
			c := start()
			brokers := c.ListenAddrs()
			cfg := testConfig(c, sem)
			cfg.Timeout = 500 * time.Millisecond
			r := newRelay(t, cfg)
			rt := openRuntime(t, vfs.NewMem(), r.Route, nil)
			rt.start(r)
			rt.ingest(t, 0, 20, 4)
			waitFor(t, "the first records delivered", func() bool { return rt.outboxEmpty(t) })

			c.Close()
			rt.ingest(t, 20, 30, 4)
			var why error
			waitFor(t, "readiness to report Kafka down", func() bool { why = r.Ready(); return why != nil })
			if !strings.Contains(why.Error(), "kafka egress test/kafka: not connected") {
				t.Fatalf("readiness says %q; want it to name the egress", why)
			}
			t.Logf("while Kafka is down: %v", why)
			if rt.outboxEmpty(t) {
				t.Fatal("the records written while Kafka was down are not in the outbox")
			}

			c = start()
			defer c.Close()
			if sem == ExactlyOnce {
				waitDelivered(t, rt, brokers, 50)
			} else {
				waitFor(t, "every record delivered", func() bool { return rt.outboxEmpty(t) })
				assertAtLeastOnce(t, readTopic(t, brokers, outTopic, true), 50)
			}
			waitFor(t, "readiness", func() bool { return r.Ready() == nil })
		})
	}
}

// An unreachable address is reported by Ready, naming the egress and the
// broker that does not answer; the runtime keeps running meanwhile.
func TestUnreachableBrokerReported(t *testing.T) {
	port := freePorts(t, 1)[0]
	cfg := Config{ID: egressID, Brokers: []string{net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}, Semantic: ExactlyOnce,
		TransactionTimeout: time.Second, Timeout: 200 * time.Millisecond, RetryBase: 10 * time.Millisecond, RetryMax: 20 * time.Millisecond,
		Logger: quietLog()}
	r := newRelay(t, cfg)
	rt := openRuntime(t, vfs.NewMem(), r.Route, nil)
	rt.start(r)
	rt.ingest(t, 0, 3, 3)
	var why error
	waitFor(t, "a failure", func() bool {
		why = r.Ready()
		return why != nil && !strings.Contains(why.Error(), "not connected yet")
	})
	if !strings.Contains(why.Error(), "kafka egress test/kafka: not connected: resume: initializing the transactional producer statefun-egress-test/kafka") {
		t.Fatalf("readiness: %v", why)
	}
	// Ingest returns once the messages are durable in their inboxes; the
	// function's egress records reach the outbox when it has run, which
	// under load can be after the failure above.
	waitFor(t, "the records waiting in the outbox", func() bool { return !rt.outboxEmpty(t) })
}
