package session

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/cluster/changelog"
	"github.com/statefun-go/statefun/internal/engine"
	"github.com/statefun-go/statefun/internal/kafkaingress"
	"github.com/statefun-go/statefun/internal/store"
)

const (
	inTopic = "in"
	inP     = 3
)

// mappedIngress is the session's Ingress over the Kafka ingress's own
// mapping (as a node has it): a record keyed k becomes one message to the
// counter at address.Partition(k, P), carrying hop count 0, so that each
// ingress record shows as exactly one arrival.
type mappedIngress struct {
	mp      *kafkaingress.Mapping
	started atomic.Int64 // partitions Start placed
}

func newMappedIngress(t *testing.T, c *Config, startup kafkaingress.StartupKind) *mappedIngress {
	t.Helper()
	mp, err := kafkaingress.NewMapping(kafkaingress.Config{
		ID: "test/in", Brokers: c.Cluster.Brokers, GroupID: "ignored in cluster mode",
		Routes:  []kafkaingress.Route{{Topic: inTopic, ValueType: "test/v", Targets: []address.TypeName{{Namespace: "test", Name: "counter"}}}},
		Startup: kafkaingress.Startup{Kind: startup},
		Metrics: kafkaingress.NewMetrics(c.Metrics), Logger: c.Logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &mappedIngress{mp: mp}
}

func (m *mappedIngress) Topics() []string { return m.mp.Topics() }

func (m *mappedIngress) Start(ctx context.Context, adm *kadm.Client, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]int64, error) {
	start, _, err := m.mp.Start(ctx, adm, offsets)
	for _, ps := range start {
		m.started.Add(int64(len(ps)))
	}
	return start, err
}

func (m *mappedIngress) Route(r *kgo.Record) ([]Message, string, error) {
	envs, reason := m.mp.Messages(r)
	if reason != "" {
		d := m.mp.DeadLetter(r, reason)
		d.At = time.Now().UnixMilli()
		v, err := proto.Marshal(engine.IngressDeadLetterCommand(&d))
		if err != nil {
			return nil, "", err
		}
		key := fmt.Appendf(append([]byte(nil), deadLetterKey...), "%s/%d/%d", r.Topic, r.Partition, r.Offset)
		return []Message{{Partition: engine.IngressDeadLetterPartition(r.Partition, testP), Key: key, Value: v}}, reason, nil
	}
	out := make([]Message, 0, len(envs))
	for _, env := range envs {
		id := env.GetTarget().GetId()
		out = append(out, Message{Partition: address.Partition(id, testP), Key: []byte(id), Value: []byte("0")})
	}
	return out, "", nil
}

func (m *mappedIngress) Committed(r *kgo.Record, bad string) {
	if bad != "" {
		m.mp.Bad(r, bad, "kept as a dead letter")
		return
	}
	m.mp.Delivered(r.Topic, 1)
}

func (h *harness) createIngressTopic() {
	h.t.Helper()
	if resp, err := h.adm.CreateTopic(ctxT(h.t), inP, 3, nil, inTopic); err != nil || resp.Err != nil {
		h.t.Fatalf("create %s: %v %v", inTopic, err, resp.Err)
	}
}

// produceIngress writes n records with distinct keys into the ingress
// topic, spread over its partitions.
func (h *harness) produceIngress(n int) {
	h.t.Helper()
	var recs []*kgo.Record
	for range n {
		i := h.seq.Add(1)
		recs = append(recs, &kgo.Record{Topic: inTopic, Partition: int32(i % inP), Key: []byte(fmt.Sprint("in", i)), Value: []byte("v")})
	}
	if err := h.prod.ProduceSync(ctxT(h.t), recs...).FirstErr(); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) startIngress(id, dir string, startup kafkaingress.StartupKind) (*node, *mappedIngress) {
	var in *mappedIngress
	n := h.startWith(id, dir, func(c *Config) { in = newMappedIngress(h.t, c, startup); c.Ingress = in }, nil)
	return n, in
}

// produceBad writes a record that cannot become a message (key nil: no
// key; empty; not UTF-8) into partition p of the ingress topic and
// returns the dead letter it must become (At aside).
func (h *harness) produceBad(p int32, key []byte, reason string) store.DeadLetter {
	h.t.Helper()
	r := &kgo.Record{Topic: inTopic, Partition: p, Key: key, Value: []byte("bad " + reason)}
	if err := h.prod.ProduceSync(ctxT(h.t), r).FirstErr(); err != nil {
		h.t.Fatal(err)
	}
	return store.DeadLetter{Ingress: "test/in", Topic: inTopic, Partition: p, Offset: r.Offset, Reason: reason,
		Timestamp: r.Timestamp.UnixMilli(), KeyNull: key == nil, Key: key, Value: r.Value}
}

// checkDeadLetters checks that db holds each wanted dead letter exactly
// once, with every field the ingress gave it, and no other.
func checkDeadLetters(t *testing.T, where string, db *store.DB, want []store.DeadLetter) {
	t.Helper()
	got := map[string][]store.DeadLetter{}
	if err := db.ScanDeadLetters(store.DeadLetterFilter{}, func(d store.DeadLetter) bool {
		k := fmt.Sprintf("%s/%d@%d", d.Topic, d.Partition, d.Offset)
		got[k] = append(got[k], d)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	for _, w := range want {
		k := fmt.Sprintf("%s/%d@%d", w.Topic, w.Partition, w.Offset)
		ds := got[k]
		delete(got, k)
		if len(ds) != 1 {
			t.Errorf("%s: %d dead letters of %s, want exactly one", where, len(ds), k)
			continue
		}
		d := ds[0]
		if d.At <= 0 {
			t.Errorf("%s: dead letter %s stored at %d, want its time", where, k, d.At)
		}
		d.At = 0
		if d.Ingress != w.Ingress || d.Reason != w.Reason || d.Timestamp != w.Timestamp || d.KeyNull != w.KeyNull ||
			!bytes.Equal(d.Key, w.Key) || !bytes.Equal(d.Value, w.Value) || d.ValueOmitted {
			t.Errorf("%s: dead letter %s = %+v, want %+v", where, k, d, w)
		}
	}
	for k, ds := range got {
		t.Errorf("%s: %d dead letters of %s, which is no bad record", where, len(ds), k)
	}
}

// changelogStore restores every partition's changelog into a fresh store:
// what a node that takes them all over holds.
func (h *harness) changelogStore() *store.DB {
	t := h.t
	t.Helper()
	db, err := store.Open(t.TempDir(), store.Options{Partitions: testP, Logger: quietLogger{}, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	for p := range testP {
		if _, _, err := changelog.Restore(ctxT(t), changelog.Config{DB: db, Brokers: h.kc.ListenAddrs(), ClientOpts: []kgo.Opt{h.dial}, Topic: testApp + "-changelog", Partition: int32(p)}); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

// Records of a Kafka ingress topic, consumed by the nodes' group sessions,
// each become exactly one message — one arrival at the counter of their
// key's partition — through joins, a stop and a restart, and brokers that
// refuse EndTxn and TxnOffsetCommit and answer heartbeats "rebalance in
// progress": the ingress offsets commit in the transaction that produced
// the messages, so an aborted transaction polls its records again and a
// committed one never does. A bad record (no key, an empty key, a key not
// UTF-8; one written in each phase) is counted once and becomes exactly
// one dead letter, with its topic, partition, offset, reason, key and
// value, in the changelog of the runtime partition that keeps it
// (engine.IngressDeadLetterPartition): its dead-letter command is produced
// in the transaction that commits its offset, and stored by that
// partition's owner in the transaction that commits the command's. A node
// that takes every partition over restores them all.
func TestIngressRecordsCountOnceThroughMovesAndFaults(t *testing.T) {
	kafkaTestThroughRebalances(t, func(t *testing.T, h *harness) {
		seed := pickSeed(t)
		h.createIngressTopic()
		h.produceIngress(100) // before any node: startup position earliest
		dead := []store.DeadLetter{h.produceBad(1, nil, kafkaingress.ReasonNullKey)}
		f := h.injectFaults(seed)
		dirB := t.TempDir()
		a, _ := h.startIngress("a", t.TempDir(), kafkaingress.StartEarliest)
		b, _ := h.startIngress("b", dirB, kafkaingress.StartEarliest)
		all := []*node{a, b}
		want := int64(100)
		step := func(what string, n int) {
			t.Helper()
			h.produceIngress(n)
			want += int64(n)
			// At least want, then exactly: a record delivered twice would
			// show as more.
			h.eventually(what, 60*time.Second, func() bool { return totalArrivals(all...) >= want })
			if got := totalArrivals(all...); got != want {
				t.Fatalf("%s: %d arrivals, want %d (one per ingress record)", what, got, want)
			}
		}
		step("two nodes", 300)
		b.stop(t)
		dead = append(dead, h.produceBad(2, []byte{}, kafkaingress.ReasonEmptyKey))
		step("node b stopped", 300)
		b2, _ := h.startIngress("b", dirB, kafkaingress.StartEarliest)
		all = append(all, b2)
		dead = append(dead, h.produceBad(0, []byte{0xff, 0xfe}, kafkaingress.ReasonInvalidKey))
		step("node b restarted", 300)
		h.eventually("b serves again", 30*time.Second, func() bool { return len(b2.e.owned()) > 0 && b2.s.Ready() })
		step("both serving", 100)
		h.eventually("the dead letters stored", 30*time.Second, func() bool { return totalDead(all...) >= int64(len(dead)) })

		f.on.Store(false)
		// Nothing more comes: no record is delivered twice late.
		h.settle(300 * time.Millisecond)
		if got := totalArrivals(all...); got != want {
			t.Fatalf("after the run: %d arrivals, want %d", got, want)
		}
		if got := totalDead(all...); got != int64(len(dead)) {
			t.Errorf("after the run: %d dead letters made durable, want %d (one per bad record)", got, len(dead))
		}
		var bad, delivered float64
		for _, n := range []*node{a, b2} {
			bad += n.metric(t, "statefun_kafka_ingress_bad_records_total")
			delivered += n.metric(t, "statefun_kafka_ingress_records_total")
		}
		delivered += b.metric(t, "statefun_kafka_ingress_records_total")
		bad += b.metric(t, "statefun_kafka_ingress_bad_records_total")
		// Node a stops: b takes its partitions over, restoring them from their
		// changelogs, and holds every dead letter.
		a.stop(t)
		h.eventually("b serves every partition", 30*time.Second, func() bool { return len(b2.e.owned()) == testP && b2.s.Ready() })
		checkDeadLetters(t, "node b, owning every partition", b2.db, dead)
		b2.stop(t)
		t.Logf("faults: %d EndTxn, %d TxnOffsetCommit, %d heartbeats; requests aborted %d",
			f.endTxn.Load(), f.offsets.Load(), f.heartbeats.Load(), abortedTotal(all...))
		if f.endTxn.Load() == 0 || f.offsets.Load() == 0 {
			t.Errorf("not every fault fired: %d EndTxn, %d TxnOffsetCommit", f.endTxn.Load(), f.offsets.Load())
		}
		if bad != float64(len(dead)) {
			t.Errorf("bad ingress records counted %v times, want %d (once each)", bad, len(dead))
		}
		if delivered != float64(want) {
			t.Errorf("statefun_kafka_ingress_records_total = %v, want %d", delivered, want)
		}
		h.checkExactlyOnce(want)
		checkDeadLetters(t, "the changelogs", h.changelogStore(), dead)
	})
}

// An ingress partition without a committed offset starts at the
// ingress's startup position (latest: records written before the node
// joined are not delivered), and that placement is committed at once, in
// the node's next transaction: the node stops before any record arrived,
// records are written while it is down, and its restart resumes from the
// committed placement, delivering them (resolving "latest" again would
// skip them). Later records resume from the committed offsets.
func TestIngressStartupPositionCommittedAtOnce(t *testing.T) {
	kafkaTest(t, func(t *testing.T, h *harness) {
		h.createIngressTopic()
		h.produceIngress(30)
		dir := t.TempDir()
		a, in := h.startIngress("a", dir, kafkaingress.StartLatest)
		h.eventually("node a ready with every partition", 20*time.Second, func() bool { return a.s.Ready() && len(a.e.owned()) == testP })
		h.eventually("the ingress partitions placed at their startup position", 20*time.Second, func() bool { return in.started.Load() == inP })
		h.eventually("the placements committed", 20*time.Second, func() bool { return h.ingressCommittedAt(10) })
		a.stop(t)
		h.produceIngress(30)
		a2, in2 := h.startIngress("a", dir, kafkaingress.StartLatest)
		h.eventually("the 30 records written while the node was down", 20*time.Second, func() bool { return totalArrivals(a2) >= 30 })
		if n := in2.started.Load(); n != 0 {
			t.Errorf("after the restart %d ingress partitions were placed at the startup position, want none (every one had a committed offset)", n)
		}
		h.produceIngress(30)
		h.eventually("30 more", 20*time.Second, func() bool { return totalArrivals(a2) >= 60 })
		h.settle(200 * time.Millisecond)
		if got := totalArrivals(a, a2); got != 60 {
			t.Fatalf("%d arrivals, want 60: the 30 written while the node was down and the 30 after", got)
		}
		a2.stop(t)
		h.checkExactlyOnce(60)
	})
}

// A partition whose queue is full stops being fetched: records written to
// it are not polled while the engine reports it full (while another
// partition's records still come), and are polled once it drains.
func TestFullPartitionPausesFetching(t *testing.T) {
	kafkaTest(t, func(t *testing.T, h *harness) {
		a := h.start("a", t.TempDir())
		h.eventually("node a ready with every partition", 20*time.Second, func() bool { return a.s.Ready() && len(a.e.owned()) == testP })
		produceTo := func(p int32, n int) {
			t.Helper()
			var recs []*kgo.Record
			for range n {
				recs = append(recs, &kgo.Record{Topic: testApp + "-messages", Partition: p, Key: []byte("k"), Value: []byte("0")})
			}
			if err := h.prod.ProduceSync(ctxT(t), recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		a.e.full[1].Store(true)
		produceTo(1, 10)
		h.eventually("partition 1's first records", 20*time.Second, func() bool { return a.e.submitted[1].Load() > 0 })
		h.eventually("partition 1 paused", 20*time.Second, func() bool { return a.metric(t, "statefun_cluster_full_partitions") == 1 })
		first := a.e.submitted[1].Load()
		produceTo(1, 10)
		produceTo(2, 10)
		h.eventually("partition 2's records", 20*time.Second, func() bool { return a.e.submitted[2].Load() == 10 })
		h.settle(300 * time.Millisecond) // many commit intervals
		if got := a.e.submitted[1].Load(); got != first {
			t.Fatalf("partition 1, full, had %d records handed to the engine after it was paused at %d", got, first)
		}
		a.e.full[1].Store(false)
		h.eventually("partition 1 resumed", 20*time.Second, func() bool { return a.e.submitted[1].Load() == 20 })
		if v := a.metric(t, "statefun_cluster_full_partitions"); v != 0 {
			t.Errorf("statefun_cluster_full_partitions = %v after the partition drained, want 0", v)
		}
		h.eventually("30 arrivals durable", 20*time.Second, func() bool { return totalArrivals(a) == 30 })
		a.stop(t)
		h.checkExactlyOnce(30)
	})
}

func totalDead(ns ...*node) int64 {
	var n int64
	for _, x := range ns {
		n += x.e.dead.Load()
	}
	return n
}

// A bad ingress record's dead letter is stored once although both
// transactions that carry it abort once: the brokers refuse the first
// EndTxn commit after the record is written (the transaction that sends
// the dead letter to its partition: nothing is sent, the record is polled
// and routed again, with a new stored time) and the third (the one that
// stores it: nothing is stored, the command is polled again). A leak of
// either aborted transaction would show as a second dead letter or a
// second count.
func TestIngressDeadLetterOnceAcrossAborts(t *testing.T) {
	kafkaTest(t, func(t *testing.T, h *harness) {
		h.createIngressTopic()
		a, in := h.startIngress("a", t.TempDir(), kafkaingress.StartEarliest)
		h.eventually("node a ready with every partition", 20*time.Second, func() bool { return a.s.Ready() && len(a.e.owned()) == testP })
		h.eventually("the ingress partitions placed and committed", 20*time.Second, func() bool {
			return in.started.Load() == inP && h.ingressCommittedAt(0)
		})
		commits := h.refuseEndTxnCommits(func(n int64) bool { return n == 1 || n == 3 })
		dead := []store.DeadLetter{h.produceBad(1, nil, kafkaingress.ReasonNullKey)}
		h.eventually("the dead letter stored", 30*time.Second, func() bool { return a.e.dead.Load() >= 1 })
		h.settle(300 * time.Millisecond) // many commit intervals
		if n := commits.Load(); n < 4 {
			t.Fatalf("%d EndTxn commits; want at least 4 (two refused, two committed)", n)
		}
		// The two refused EndTxn commits, and no other abort of the
		// session's making. kfake may refuse a record of the next
		// transaction after a refused EndTxn with
		// OUT_OF_ORDER_SEQUENCE_NUMBER (in about 2% of runs on the fake
		// clock, where the brokers answer at once; not in 150 on real
		// time): an abort for reason "produce", which the session handles
		// as any record Kafka refuses. (The refusal answers the EndTxn
		// without kfake acting on it; the client then aborts by reloading
		// its producer id, which bumps the epoch. Which of kfake or the
		// client loses the sequence is not known.)
		all, group := a.metric(t, "statefun_cluster_txn_aborts_total"), a.metricWith(t, "statefun_cluster_txn_aborts_total", "reason", "group")
		produce := a.metricWith(t, "statefun_cluster_txn_aborts_total", "reason", "produce")
		if group != 2 || all != group+produce {
			t.Errorf("%v transactions aborted, %v of them by the refused EndTxn commits; want the 2 refused (and at most records kfake refused)", all, group)
		}
		if produce > 0 {
			t.Logf("%v transactions aborted by a record kfake refused", produce)
		}
		if n := a.e.dead.Load(); n != 1 {
			t.Errorf("%d dead letters made durable, want 1", n)
		}
		if n := a.metric(t, "statefun_kafka_ingress_bad_records_total"); n != 1 {
			t.Errorf("the bad record counted %v times, want once", n)
		}
		checkDeadLetters(t, "node a", a.db, dead)
		a.stop(t)
		checkDeadLetters(t, "the changelogs", h.changelogStore(), dead)
	})
}

// ingressCommittedAt tells whether the group's committed position of every
// ingress partition is at.
func (h *harness) ingressCommittedAt(at int64) bool {
	offs, err := h.adm.FetchOffsets(ctxT(h.t), testApp)
	if err != nil {
		return false
	}
	n := 0
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Topic == inTopic && o.Err == nil && o.At == at {
			n++
		}
	})
	return n == inP
}
