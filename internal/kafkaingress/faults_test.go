package kafkaingress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Records reach the function exactly once while the cluster misbehaves in
// every way a consumer-group member meets: heartbeats answered "rebalance
// in progress" (the member rejoins; partitions are revoked and assigned
// again), failed offset commits, fetch connections cut, group coordinators
// moving, partition leaders moving, and a broker stopped and another started in
// its place. Only the stored positions decide where consumption resumes,
// so none of it may duplicate or lose a record.
func TestExactlyOnceUnderGroupFaults(t *testing.T) {
	kc := newCluster(t, "in")
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	var mu sync.Mutex // guards rng inside control functions
	// FAULTS=hb,commit,fetch,rehash,shuffle,replace picks faults when
	// hunting a failure; all by default.
	only := os.Getenv("FAULTS")
	on := func(f string) bool { return only == "" || strings.Contains(only, f) }
	chance := func(pct int) bool {
		mu.Lock()
		defer mu.Unlock()
		return rng.IntN(100) < pct
	}

	var heartbeats, commits, fetches atomic.Int64
	kc.ControlKey(kmsg.Heartbeat.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		// The first heartbeat always fails (a short run may otherwise see
		// none fail); later ones at random.
		if !on("hb") || heartbeats.Load() > 0 && !chance(10) {
			return nil, nil, false
		}
		heartbeats.Add(1)
		resp := req.(*kmsg.HeartbeatRequest).ResponseKind().(*kmsg.HeartbeatResponse)
		resp.ErrorCode = kerr.RebalanceInProgress.Code
		return resp, nil, true
	})
	kc.ControlKey(kmsg.OffsetCommit.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		if !on("commit") || commits.Load() > 0 && !chance(40) {
			return nil, nil, false
		}
		commits.Add(1)
		return nil, errors.New("injected: offset commit connection cut"), true
	})
	kc.ControlKey(kmsg.Fetch.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		if !on("fetch") || fetches.Load() > 0 && !chance(10) {
			return nil, nil, false
		}
		fetches.Add(1)
		return nil, errors.New("injected: fetch connection cut"), true
	})

	cfg := baseConfig(kc, "g-faults", route("in", counterA))
	cfg.MaxBatchRecords = 23
	cfg.CommitInterval = 20 * time.Millisecond
	cfg.ClientOpts = append(cfg.ClientOpts, kgo.HeartbeatInterval(50*time.Millisecond))
	if testing.Verbose() {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
		if os.Getenv("KGO_LOG") != "" { // franz-go's own log too
			cfg.ClientOpts = append(cfg.ClientOpts, kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelInfo, nil)))
		}
	}
	r := startRig(t, vfs.NewMem(), cfg, nil, nil)

	const keys, perKey, rounds = 30, 40, 8
	for round := range rounds {
		var rs []*kgo.Record
		for i := range perKey / rounds {
			for k := range keys {
				rs = append(rs, rec("in", fmt.Sprintf("key-%d", k), fmt.Sprint(round, ".", i)))
			}
		}
		produce(t, kc, rs...)
		switch {
		case round%4 == 0 && on("rehash"):
			kc.RehashCoordinators()
		case round%4 == 1 && on("shuffle"):
			kc.ShufflePartitionLeaders()
		case round%4 == 2 && on("replace"):
			replaceBroker(t, kc)
		}
		time.Sleep(250 * time.Millisecond)
	}
	total := func() int {
		n := 0
		for k := range keys {
			n += r.count(counterA, fmt.Sprintf("key-%d", k))
		}
		return n
	}
	deadline := time.Now().Add(30 * time.Second)
	for total() < keys*perKey {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d records counted after 30 s; ready: %v; stored positions %v; end offsets %v; workers %s", total(), keys*perKey, r.c.Ready(), positions(t, r.db), endOffsets(t, kc, "in"), r.c.describeWorkers())
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // a duplicate would show up by now
	for k := range keys {
		if n := r.count(counterA, fmt.Sprintf("key-%d", k)); n != perKey {
			t.Errorf("key-%d counted %d times, want %d", k, n, perKey)
		}
	}
	t.Logf("injected: %d heartbeat rebalances, %d offset-commit cuts, %d fetch cuts",
		heartbeats.Load(), commits.Load(), fetches.Load())
	if heartbeats.Load() == 0 || commits.Load() == 0 || fetches.Load() == 0 {
		t.Fatal("a fault was never injected; the test proved nothing about it")
	}
}

// replaceBroker stops the last broker of kc and starts another in its
// place. (Starting one with the stopped broker's node id on its port makes
// kfake stop serving fetches of some partitions moved to it, which a real
// broker restart does not; e2e restarts a whole devkafka process instead.)
func replaceBroker(t *testing.T, kc *kfake.Cluster) {
	t.Helper()
	node := int32(len(kc.ListenAddrs()) - 1)
	if err := kc.RemoveNode(node); err != nil {
		t.Fatalf("stopping broker %d: %v", node, err)
	}
	time.Sleep(50 * time.Millisecond)
	if _, _, err := kc.AddNode(-1, 0); err != nil {
		t.Fatalf("starting a broker in place of %d: %v", node, err)
	}
}

// endOffsets lists the end offset of every partition of topic.
func endOffsets(t *testing.T, kc *kfake.Cluster, topic string) map[tp]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	l, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	out := map[tp]int64{}
	l.Each(func(o kadm.ListedOffset) { out[tp{o.Topic, o.Partition}] = o.Offset })
	return out
}

// describeWorkers says, per partition, the next offset, the queue length and
// whether fetching is paused (for tests and debugging).
func (c *Consumer) describeWorkers() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	for k, w := range c.workers {
		w.mu.Lock()
		fmt.Fprintf(&b, "%s/%d: queue %d paused %v; ", k.topic, k.partition, len(w.queue), w.paused)
		w.mu.Unlock()
	}
	fmt.Fprintf(&b, "client paused %v", c.cl.PauseFetchPartitions(nil))
	return b.String()
}
