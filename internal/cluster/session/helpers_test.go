package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/cluster/changelog"
	"github.com/statefun-go/statefun/internal/cluster/clusterconfig"
	"github.com/statefun-go/statefun/internal/engine"
	"github.com/statefun-go/statefun/internal/engine/committer"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

const (
	testApp  = "app"
	testP    = 4
	outTopic = "out"
)

// counterEngine is the test double of the engine side of the seam,
// implementing exactly the contract a cluster engine has with the session:
// Assign builds a partition's "core" (a counter) from the store, Revoke
// drops it, SubmitArrivals turns polled records into requests submitted
// before it returns. Every arrival and every tick increments its
// partition's counter; its request writes the new value to a store key and
// emits one output record (key: partition, value: the counter value) to
// the output topic through Outbound, so that exactly-once shows as: every
// partition's output values are 1..count, each once. An arrival whose
// value is a positive hop count also sends a message to the next
// partition through Outbound, one hop fewer. A record that carries a Kafka
// ingress dead letter is stored as the engine stores it, and counts
// nothing.
type counterEngine struct {
	s  *Session
	db *store.DB

	mu    sync.Mutex
	cores map[int]*core

	arrivals atomic.Int64 // increments made durable by arrival requests
	dead     atomic.Int64 // ingress dead letters made durable
	ticks    atomic.Int64 // ticks made durable
	aborted  atomic.Int64 // requests failed with ErrAborted
	moved    atomic.Int64 // requests failed with ErrMoved
	assigns  atomic.Int64
	revokes  atomic.Int64

	// poisoned partitions submit, on every Assign, a request whose
	// Encode fails: work a core redoes after each rebuild, and that fails
	// to encode every time.
	poisoned [testP]atomic.Bool
	poisons  atomic.Int64 // poison requests failed

	submitted [testP]atomic.Int64 // arrivals handed over by SubmitArrivals, by partition
	full      [testP]atomic.Bool  // what Full reports, set by a test

	errMu sync.Mutex
	errs  []error // unexpected failures
}

type core struct{ count int64 }

func counterAddr(p int) address.Address {
	return address.Address{Type: address.TypeName{Namespace: "test", Name: "counter"}, ID: strconv.Itoa(p)}
}

func newCounterEngine(s *Session, db *store.DB) *counterEngine {
	e := &counterEngine{s: s, db: db, cores: map[int]*core{}}
	s.Bind(e)
	return e
}

func (e *counterEngine) Assign(p int) error {
	c := &core{}
	ent, ok, err := e.db.GetState(counterAddr(p), "count")
	if err != nil {
		return err
	}
	if ok {
		if c.count, err = strconv.ParseInt(string(ent.Value), 10, 64); err != nil {
			return err
		}
	}
	if e.poisoned[p].Load() {
		// Queued before the core serves: the session takes it in its
		// next cycle, as it would a commit the rebuilt core made.
		if err := e.s.Submit(&poisonReq{e: e, p: p}); err != nil {
			return err
		}
	}
	e.mu.Lock()
	e.cores[p] = c
	e.mu.Unlock()
	e.assigns.Add(1)
	return nil
}

func (e *counterEngine) Revoke(p int) {
	e.mu.Lock()
	delete(e.cores, p)
	e.mu.Unlock()
	e.revokes.Add(1)
}

// ForgetReadPosition does nothing: the double writes no read positions,
// so the session never finds one to forget.
func (e *counterEngine) ForgetReadPosition(int) {}

func (e *counterEngine) SubmitArrivals(p int, recs []*kgo.Record) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.cores[p]
	if c == nil {
		return fmt.Errorf("partition %d not assigned", p)
	}
	r := &countReq{e: e, p: p, from: c.count}
	dl := &deadReq{e: e, p: p}
	for _, rec := range recs {
		if bytes.HasPrefix(rec.Key, deadLetterKey) {
			env := &protocol.Envelope{}
			if err := proto.Unmarshal(rec.Value, env); err != nil || env.GetIngressDeadLetter() == nil {
				return fmt.Errorf("a dead-letter record that does not decode: %v", err)
			}
			dl.letters = append(dl.letters, engine.IngressDeadLetterOf(env.GetIngressDeadLetter()))
			continue
		}
		hops, err := strconv.Atoi(string(rec.Value))
		if err != nil {
			return err
		}
		r.hops = append(r.hops, hops)
	}
	c.count += int64(len(r.hops))
	r.to = c.count
	e.submitted[p].Add(int64(len(r.hops)))
	if len(dl.letters) > 0 {
		if err := e.s.Submit(dl); err != nil {
			return err
		}
	}
	if len(r.hops) == 0 {
		return nil
	}
	return e.s.Submit(r)
}

// deadLetterKey starts the key of a messages-topic record that carries an
// ingress dead letter (engine.IngressDeadLetterCommand), as the double's
// ingress writes it.
var deadLetterKey = []byte("dead-letter/")

// deadReq stores ingress dead letters that arrived for partition p, as
// the engine does.
type deadReq struct {
	e       *counterEngine
	p       int
	letters []store.DeadLetter
}

func (r *deadReq) Partition() int { return r.p }
func (r *deadReq) Encode(b *store.Batch) error {
	for i := range r.letters {
		b.PutDeadLetter(&r.letters[i])
	}
	return nil
}
func (r *deadReq) Durable()       { r.e.dead.Add(int64(len(r.letters))) }
func (r *deadReq) Fail(err error) { r.e.failed(err) }

// Full reports what the test set: a partition whose queue is full.
func (e *counterEngine) Full(p int) bool { return e.full[p].Load() }

// tick increments p's counter outside any arrival, as a timer or a state
// API write does: a request that commits no offsets. It reports whether p
// is served here.
func (e *counterEngine) tick(p int) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.cores[p]
	if c == nil {
		return false
	}
	r := &countReq{e: e, p: p, from: c.count, to: c.count + 1, tick: true}
	c.count++
	return e.s.Submit(r) == nil
}

// probe submits a request that writes only the key probe/<name> of p.
func (e *counterEngine) probe(p int, name string, done chan error) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cores[p] == nil {
		return false
	}
	return e.s.Submit(&probeReq{p: p, name: name, done: done}) == nil
}

func (e *counterEngine) owned() []int {
	e.mu.Lock()
	defer e.mu.Unlock()
	var ps []int
	for p := range testP {
		if e.cores[p] != nil {
			ps = append(ps, p)
		}
	}
	return ps
}

func (e *counterEngine) unexpected(err error) {
	e.errMu.Lock()
	e.errs = append(e.errs, err)
	e.errMu.Unlock()
}

func (e *counterEngine) failed(err error) {
	switch {
	case errors.Is(err, ErrAborted):
		e.aborted.Add(1)
	case errors.Is(err, ErrMoved):
		e.moved.Add(1)
	case errors.Is(err, committer.ErrStopped):
		// the node stops
	default:
		e.unexpected(err)
	}
}

// countReq is the request of increments from..to of partition p.
type countReq struct {
	e        *counterEngine
	p        int
	from, to int64
	hops     []int // per arrival; nil for a tick
	tick     bool
}

func (r *countReq) Partition() int { return r.p }

func (r *countReq) Encode(b *store.Batch) error {
	b.PutState(counterAddr(r.p), "count", store.Entry{Value: []byte(strconv.FormatInt(r.to, 10))})
	key := []byte(strconv.Itoa(r.p))
	for v := r.from + 1; v <= r.to; v++ {
		if err := r.e.s.Egress(&kgo.Record{Topic: outTopic, Key: key, Value: []byte(strconv.FormatInt(v, 10))}); err != nil {
			return err
		}
	}
	for _, h := range r.hops {
		if h > 0 {
			if err := r.e.s.Message((r.p+1)%testP, key, []byte(strconv.Itoa(h-1))); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *countReq) Durable() {
	if r.tick {
		r.e.ticks.Add(r.to - r.from)
	} else {
		r.e.arrivals.Add(r.to - r.from)
	}
}

func (r *countReq) Fail(err error) { r.e.failed(err) }

// poisonReq is work whose Encode fails every time it is redone.
type poisonReq struct {
	e *counterEngine
	p int
}

func (r *poisonReq) Partition() int { return r.p }
func (r *poisonReq) Encode(b *store.Batch) error {
	b.PutState(counterAddr(r.p), "poison", store.Entry{Value: []byte("x")})
	return errors.New("poison: this work cannot be encoded")
}
func (r *poisonReq) Durable() { r.e.unexpected(errors.New("a poison request was made durable")) }
func (r *poisonReq) Fail(err error) {
	r.e.poisons.Add(1)
	if !errors.Is(err, ErrAborted) && !errors.Is(err, ErrMoved) && !errors.Is(err, committer.ErrStopped) {
		r.e.unexpected(fmt.Errorf("a poison request failed with %w; want an abort (its partition rebuilt, the node going on)", err))
	}
}

// probeReq writes a key of its own and nothing else.
type probeReq struct {
	p    int
	name string
	done chan error
}

func (r *probeReq) Partition() int { return r.p }
func (r *probeReq) Encode(b *store.Batch) error {
	b.PutState(counterAddr(r.p), "probe/"+r.name, store.Entry{Value: []byte("x")})
	return nil
}
func (r *probeReq) Durable()       { r.done <- nil }
func (r *probeReq) Fail(err error) { r.done <- err }

// node is one runtime process of a test: a store, a session, the engine
// double, and the session's Run.
type node struct {
	id     string
	db     *store.DB
	s      *Session
	e      *counterEngine
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan error
}

// metric returns the value of the named metric of the node (summed over
// its labels; a histogram's sample count).
func (n *node) metric(t *testing.T, name string) float64 {
	t.Helper()
	return n.metricWith(t, name, "", "")
}

// metricWith is metric over the series whose label named label has value
// (all series when label is empty).
func (n *node) metricWith(t *testing.T, name, label, value string) float64 {
	t.Helper()
	mfs, err := n.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var v float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label != "" {
				match := false
				for _, l := range m.GetLabel() {
					match = match || l.GetName() == label && l.GetValue() == value
				}
				if !match {
					continue
				}
			}
			switch {
			case m.Gauge != nil:
				v += m.Gauge.GetValue()
			case m.Counter != nil:
				v += m.Counter.GetValue()
			case m.Histogram != nil:
				v += float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return v
}

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)         {}
func (quietLogger) Errorf(string, ...any)        {}
func (quietLogger) Fatalf(f string, args ...any) { panic(fmt.Sprintf("pebble fatal: "+f, args...)) }

// harness is one test's Kafka: a kfake cluster of three brokers on an
// in-memory network (kfake.VirtualNetwork), with the application's topics
// and a client that produces and lists offsets.
//
// A harness normally lives in a synctest bubble (kafkaTest): the brokers,
// the nodes' clients and stores and every goroutine they start run on the
// bubble's fake clock, which advances only when every goroutine of the
// bubble is blocked on it or on another goroutine of the bubble. A
// heartbeat interval, a session timeout, a back-off or a give-up time then
// costs no wall time, and a wait for a condition is bounded by fake time,
// not by how loaded the machine is. The network must be in memory for
// that: a goroutine blocked on a real socket is not durably blocked, and
// the clock would never move.
//
// The nodes' stores are real Pebble stores on disk, in the bubble too:
// Pebble's background goroutines (flushes, compactions, its disk-health
// tickers) wait on condition variables, channels and timers, which are
// durably blocking, its file I/O only holds the clock until it completes,
// and a store closed before the bubble ends leaves no goroutine behind.
type harness struct {
	t    *testing.T
	fake bool // in a synctest bubble, on its clock
	kc   *kfake.Cluster
	dial kgo.Opt // the in-memory network's dialer, for every client
	adm  *kadm.Client
	prod *kgo.Client
	seq  atomic.Int64
	log  *slog.Logger
}

// kafkaTest runs test against a fresh harness in a synctest bubble, on
// fake time.
func kafkaTest(t *testing.T, test func(t *testing.T, h *harness)) {
	t.Helper()
	done := make(chan struct{})
	defer close(done)
	go watchBubble(t.Name(), done)
	synctest.Test(t, func(t *testing.T) { test(t, newHarness(t, true)) })
}

// frozenAfter is the wall time after which a test in a bubble is taken
// for frozen; one takes a second or two, also under the race detector.
const frozenAfter = 2 * time.Minute

// watchBubble stops the test binary, with every goroutine's stack, if
// the test named name runs for frozenAfter of wall time before done is
// closed. A bubble whose clock stopped never fails by itself: a goroutine
// blocked on a sync mutex is not durably blocked, so while one waits for
// a mutex that a goroutine waiting on the fake clock holds, time never
// advances and no fake-time bound expires. In franz-go that is a
// transactional offset commit during a join, or an End after one that took
// the pre-KIP-447 pause (500 ms holding the session's mutex), unless it is
// built with -tags synctests. It runs outside the bubble, on real time.
func watchBubble(name string, done <-chan struct{}) {
	tm := time.NewTimer(frozenAfter)
	defer tm.Stop()
	select {
	case <-done:
	case <-tm.C:
		debug.SetTraceback("all")
		panic(fmt.Sprintf("%s: still running after %v of wall time: its bubble's clock has most likely stopped, a goroutine blocked on a sync mutex held by one that waits on the fake clock (look for sync.Mutex.Lock or sync.RWMutex.RLock in a goroutine of the bubble below)", name, frozenAfter))
	}
}

// kafkaTestThroughRebalances runs a test whose nodes commit consumed
// offsets while the group rebalances: in a synctest bubble only where the
// Kafka client's mutexes are durably blocking (built with -tags
// synctests), else on real time, on the same in-memory network.
//
// The client's transactional offset commit waits for a join in flight to
// end, by blocking on a sync.RWMutex the join holds while it waits for
// the other members to rejoin. A goroutine blocked on a sync mutex is not
// durably blocked, so the bubble's clock stops, the other members'
// heartbeats never come, and the join never ends: the test would hang.
// Under the synctests build tag franz-go replaces its mutexes by
// channel-based ones (its internal xsync package), which synctest sees.
//
// A node's transactional offset commit waits for a join and sync in
// flight with its transaction open, so the nodes' rebalance timeout is
// at most a third of their transaction timeout (kafkaclient.RebalanceShare):
// with 5 s against 10 s, joins and syncs that ran to the rebalance
// timeout (waiting for a member stopped without leaving) could hold the
// transaction open past its timeout, on which the broker aborts it and
// bumps the producer's epoch, and the node's offset commit was answered
// PRODUCER_FENCED (once in about twenty runs of
// TestThreeNodesExactlyOnceThroughMovesAndFaults). The nodes here have a
// 15 s transaction timeout beside a 5 s rebalance timeout.
// Under the tag, in one failure traced, kfake also left a JoinGroup
// unanswered until the client's request timed out (the rebalance timeout
// plus the client's 10 s request overhead), which no rebalance timeout
// bounds.
func kafkaTestThroughRebalances(t *testing.T, test func(t *testing.T, h *harness)) {
	t.Helper()
	if kgoMutexesDurable {
		kafkaTest(t, test)
		return
	}
	test(t, newHarness(t, false))
}

// newHarness starts the brokers; fake says whether t runs in a synctest
// bubble.
func newHarness(t *testing.T, fake bool) *harness {
	t.Helper()
	var vn kfake.VirtualNetwork
	// The in-memory network does not pick free ports: each broker gets
	// its own (the network is this test's alone). Ports 1 to 3, where
	// nothing listens for real: a client made without the network's
	// dialer fails at once, instead of reaching a Kafka on this machine.
	kc, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.Ports(1, 2, 3), kfake.ListenFn(vn.Listen),
		kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	h := &harness{t: t, fake: fake, kc: kc, dial: kgo.Dialer(vn.DialContext), log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if testing.Verbose() {
		h.log = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	cl, err := kgo.NewClient(h.dial, kgo.SeedBrokers(kc.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	h.prod = cl
	h.adm = kadm.NewClient(cl)
	// The application's data topics, as topics.Ensure creates them (P
	// partitions; the changelog compacted). Ensure itself builds its
	// clients from the node's configuration alone, which has no dialer
	// for the in-memory network; the session reads neither the meta
	// topic nor the application record.
	cfg := h.config("setup")
	for _, tc := range []struct {
		topic   string
		configs map[string]*string
	}{
		{cfg.MessagesTopic(), map[string]*string{"cleanup.policy": kmsg.StringPtr("delete"), "retention.ms": kmsg.StringPtr("-1")}},
		{cfg.ChangelogTopic(), map[string]*string{"cleanup.policy": kmsg.StringPtr("compact")}},
		{outTopic, nil},
	} {
		if resp, err := h.adm.CreateTopic(ctxT(t), testP, 3, tc.configs, tc.topic); err != nil || resp.Err != nil {
			t.Fatalf("create %s: %v %v", tc.topic, err, resp.Err)
		}
	}
	return h
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) { w.t.Log(string(b)); return len(b), nil }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func (h *harness) config(nodeID string) *clusterconfig.Config {
	return &clusterconfig.Config{
		Brokers: h.kc.ListenAddrs(), AppID: testApp, NodeID: nodeID, Advertise: "http://" + nodeID + ":8070",
		Partitions: testP, CommitInterval: 20 * time.Millisecond,
	}
}

// start runs a node with a store in dir.
func (h *harness) start(id, dir string) *node { return h.startWith(id, dir, nil, nil) }

// startWith runs a node, with cfgTweak changing its Config and sTweak its
// Session before Run (either may be nil).
func (h *harness) startWith(id, dir string, cfgTweak func(*Config), sTweak func(*Session)) *node {
	t := h.t
	t.Helper()
	db, err := store.Open(dir, store.Options{Partitions: testP, Logger: quietLogger{}, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	cfg := Config{
		Cluster: h.config(id), DB: db, Logger: h.log.With("n", id), Metrics: reg,
		ClientOpts: []kgo.Opt{
			h.dial,
			kgo.SessionTimeout(1500 * time.Millisecond), kgo.HeartbeatInterval(100 * time.Millisecond),
			// Two rebalance timeouts well inside a transaction timeout, as
			// kafkaclient.RebalanceShare wants.
			kgo.RebalanceTimeout(5 * time.Second), kgo.TransactionTimeout(15 * time.Second),
		},
	}
	if cfgTweak != nil {
		cfgTweak(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if sTweak != nil {
		sTweak(s)
	}
	n := &node{id: id, db: db, s: s, e: newCounterEngine(s, db), reg: reg, done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	go func() { n.done <- s.Run(ctx) }()
	t.Cleanup(func() { n.stop(t) })
	return n
}

// stop ends the node's Run, as a process exit would (a static member does
// not leave the group), and closes its store.
func (n *node) stop(t *testing.T) {
	t.Helper()
	if n.cancel == nil {
		return
	}
	n.cancel()
	n.cancel = nil
	if err := <-n.done; err != nil {
		t.Errorf("node %s: Run: %v", n.id, err)
	}
	n.e.errMu.Lock()
	for _, err := range n.e.errs {
		t.Errorf("node %s: unexpected request failure: %v", n.id, err)
	}
	n.e.errMu.Unlock()
	if err := n.db.Close(); err != nil {
		t.Errorf("node %s: close store: %v", n.id, err)
	}
}

// produce writes n input records with hops, spread over the partitions,
// as the playground ingress would (acknowledged by all replicas).
func (h *harness) produce(n, hops int) {
	h.t.Helper()
	var recs []*kgo.Record
	for range n {
		i := h.seq.Add(1)
		recs = append(recs, &kgo.Record{Topic: testApp + "-messages", Partition: int32(i % testP), Key: []byte(fmt.Sprint("k", i)), Value: []byte(strconv.Itoa(hops))})
	}
	if err := h.prod.ProduceSync(ctxT(h.t), recs...).FirstErr(); err != nil {
		h.t.Fatal(err)
	}
}

// eventually waits until cond holds, checking it every 10 ms, and fails
// the test after timeout. In a bubble, both are on the bubble's clock,
// and cond is checked when every goroutine of the bubble is blocked
// (synctest.Wait): a node that never gets there fails the test at once,
// without a wall-clock wait.
func (h *harness) eventually(what string, timeout time.Duration, cond func() bool) {
	t := h.t
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if h.fake {
			synctest.Wait()
		}
		if cond() {
			return
		}
		if !time.Now().Before(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// settle lets d pass; in a bubble, it then waits until every goroutine of
// the bubble is blocked.
func (h *harness) settle(d time.Duration) {
	time.Sleep(d)
	if h.fake {
		synctest.Wait()
	}
}

// readOutput reads the output topic to its end with the given isolation
// and returns, per partition key, the values in offset order.
func (h *harness) readTopic(topic string, committed bool) []*kgo.Record {
	t := h.t
	t.Helper()
	ends, err := h.adm.ListEndOffsets(ctxT(t), topic)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	iso := kgo.ReadUncommitted()
	if committed {
		iso = kgo.ReadCommitted()
	}
	cl, err := kgo.NewClient(h.dial, kgo.SeedBrokers(h.kc.ListenAddrs()...), kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(iso), kgo.KeepControlRecords())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	ctx := ctxT(t)
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("reading %s: %v (still to read: %v)", topic, err, want)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset+1 >= want[r.Partition] {
				delete(want, r.Partition)
			}
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
		})
	}
	return out
}

// checkExactlyOnce checks the output topic (read_committed) and the
// changelog against the counters the engines made durable: every
// partition's output values are 1..count, each exactly once, where count
// is the value its changelog holds, and the counts add up to the
// increments made durable.
func (h *harness) checkExactlyOnce(durable int64) {
	t := h.t
	t.Helper()
	seen := map[string]map[string]int{}
	for _, r := range h.readTopic(outTopic, true) {
		k := string(r.Key)
		if seen[k] == nil {
			seen[k] = map[string]int{}
		}
		seen[k][string(r.Value)]++
	}
	// The changelog, restored into a fresh store, is the truth.
	db, err := store.Open(t.TempDir(), store.Options{Partitions: testP, Logger: quietLogger{}, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var total int64
	for p := range testP {
		if _, _, err := changelog.Restore(ctxT(t), changelog.Config{DB: db, Brokers: h.kc.ListenAddrs(), ClientOpts: []kgo.Opt{h.dial}, Topic: testApp + "-changelog", Partition: int32(p)}); err != nil {
			t.Fatal(err)
		}
		var count int64
		if ent, ok, err := db.GetState(counterAddr(p), "count"); err != nil {
			t.Fatal(err)
		} else if ok {
			count, _ = strconv.ParseInt(string(ent.Value), 10, 64)
		}
		total += count
		vals := seen[strconv.Itoa(p)]
		for v := int64(1); v <= count; v++ {
			if n := vals[strconv.FormatInt(v, 10)]; n != 1 {
				t.Errorf("partition %d: output value %d appears %d times, want once", p, v, n)
			}
			delete(vals, strconv.FormatInt(v, 10))
		}
		for v, n := range vals {
			t.Errorf("partition %d: output value %s (x%d) beyond the changelog's count %d", p, v, n, count)
		}
	}
	if total != durable {
		t.Errorf("the changelog's counts add up to %d, the engines made %d increments durable", total, durable)
	}
}

// failEndTxnCommit makes the brokers refuse the next EndTxn that commits,
// once armed, with an error the client turns into an abort (as a broker
// losing the transaction's state would).
func (h *harness) failEndTxnCommit(armed *atomic.Bool) {
	h.refuseEndTxnCommits(func(int64) bool { return armed.CompareAndSwap(true, false) })
}

// refuseEndTxnCommits makes the brokers refuse the EndTxn commits that
// refuse picks (given each one's number, from 1), as failEndTxnCommit does,
// and returns the count of EndTxn commits asked so far.
func (h *harness) refuseEndTxnCommits(refuse func(n int64) bool) *atomic.Int64 {
	var n atomic.Int64
	h.kc.ControlKey(kmsg.EndTxn.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		h.kc.KeepControl()
		r := req.(*kmsg.EndTxnRequest)
		if !r.Commit || !refuse(n.Add(1)) {
			return nil, nil, false
		}
		resp := r.ResponseKind().(*kmsg.EndTxnResponse)
		resp.ErrorCode = kerr.UnknownServerError.Code
		return resp, nil, true
	})
	return &n
}

// faults makes the brokers misbehave at random while a test runs: EndTxn
// commits refused (the client aborts), TxnOffsetCommit answered
// ILLEGAL_GENERATION (the transaction aborts), heartbeats answered
// REBALANCE_IN_PROGRESS (the member rejoins; partitions may move). The
// first request of each kind always fails, so a short run sees each.
type faults struct {
	endTxn, offsets, heartbeats atomic.Int64
	on                          atomic.Bool
}

func (h *harness) injectFaults(seed uint64) *faults {
	f := &faults{}
	f.on.Store(true)
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, seed))
	chance := func(pct int) bool {
		mu.Lock()
		defer mu.Unlock()
		return rng.IntN(100) < pct
	}
	h.kc.ControlKey(kmsg.EndTxn.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		h.kc.KeepControl()
		r := req.(*kmsg.EndTxnRequest)
		if !f.on.Load() || !r.Commit || f.endTxn.Load() > 0 && !chance(5) {
			return nil, nil, false
		}
		f.endTxn.Add(1)
		resp := r.ResponseKind().(*kmsg.EndTxnResponse)
		resp.ErrorCode = kerr.UnknownServerError.Code
		return resp, nil, true
	})
	h.kc.ControlKey(kmsg.TxnOffsetCommit.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		h.kc.KeepControl()
		if !f.on.Load() || f.offsets.Load() > 0 && !chance(5) {
			return nil, nil, false
		}
		f.offsets.Add(1)
		r := req.(*kmsg.TxnOffsetCommitRequest)
		resp := r.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
		for _, t := range r.Topics {
			rt := kmsg.NewTxnOffsetCommitResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
				rp.Partition = p.Partition
				rp.ErrorCode = kerr.IllegalGeneration.Code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})
	h.kc.ControlKey(kmsg.Heartbeat.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		h.kc.KeepControl()
		if !f.on.Load() || f.heartbeats.Load() > 0 && !chance(3) {
			return nil, nil, false
		}
		f.heartbeats.Add(1)
		resp := req.(*kmsg.HeartbeatRequest).ResponseKind().(*kmsg.HeartbeatResponse)
		resp.ErrorCode = kerr.RebalanceInProgress.Code
		return resp, nil, true
	})
	return f
}

// stallHeartbeats answers the heartbeats of node id with success while
// *stalled is true, without the coordinator seeing them: to the group the
// node is silent (its session times out), to the node all is well — the
// view of a process that stopped (a long pause) and resumes.
func (h *harness) stallHeartbeats(id string, stalled *atomic.Bool) {
	h.kc.ControlKey(kmsg.Heartbeat.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		h.kc.KeepControl()
		r := req.(*kmsg.HeartbeatRequest)
		if !stalled.Load() || r.InstanceID == nil || *r.InstanceID != id {
			return nil, nil, false
		}
		return r.ResponseKind(), nil, true
	})
}
