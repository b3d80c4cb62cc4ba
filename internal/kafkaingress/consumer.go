package kafkaingress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/statefun-go/statefun/internal/engine"
	"github.com/statefun-go/statefun/internal/store"
)

// Engine is what the consumer needs of the embedded engine: where a
// batch of records goes, and where the consumer resumes.
type Engine interface {
	// IngestFrom makes a batch durable in one commit, its messages, dead
	// letters and position together (after a crash all or none are in the
	// store), then delivers the messages in order; it returns once the
	// batch is durable. It refuses the whole batch, writing nothing, with
	// an error matching engine.ErrBusy when a target partition is full or
	// new work is not taken: retry the same batch later.
	IngestFrom(ctx context.Context, b engine.SourceBatch) error
	// SourcePositions returns the stored positions of an ingress's source
	// partitions: the offset after the last record made durable.
	SourcePositions(ingress string) ([]store.SourcePosition, error)
}

// Reasons a record becomes a dead letter (the reason label of
// statefun_kafka_ingress_bad_records_total and DeadLetter.Reason).
const (
	ReasonNullKey    = "null-key"
	ReasonEmptyKey   = "empty-key"
	ReasonInvalidKey = "invalid-utf8-key"
	// ReasonDotKey is a key "." or "..": an id a URL path cannot carry.
	ReasonDotKey        = "dot-key"
	ReasonKeyTooLong    = "key-too-long"
	ReasonValueTooLarge = "value-too-large"
	ReasonNoRoute       = "no-route"
)

// ErrNotReady is wrapped by Ready's error while the ingress cannot reach
// its brokers.
var ErrNotReady = errors.New("kafkaingress: not connected")

type tp struct {
	topic     string
	partition int32
}

// Consumer is one Kafka ingress: a consumer-group member feeding the
// engine. Start runs it, Close stops it.
type Consumer struct {
	cfg Config
	eng Engine
	mp  *Mapping
	cl  *kgo.Client
	adm *kadm.Client
	log *slog.Logger
	m   *Metrics

	reseeked map[tp]int64 // partition → offset last re-seeked to (poll goroutine only)

	// The group membership (join.go): the instance id the client joins
	// with, closed once it joined its group, and the limiter of group
	// error lines.
	instance  string
	joined    chan struct{}
	joinOnce  sync.Once
	groupErrs *limiter

	ctx    context.Context
	cancel context.CancelFunc
	built  chan struct{} // closed once New has set cl and adm
	wg     sync.WaitGroup
	closed atomic.Bool

	mu         sync.Mutex
	workers    map[tp]*worker
	durable    map[tp]int64 // positions made durable, not yet committed to the group
	wakeCommit chan struct{}

	// Health: the last successful request to a broker (unix nanos, 0 =
	// never) and the last error.
	lastOK  atomic.Int64
	lastErr atomic.Pointer[string]
}

// New checks cfg and creates the Kafka client; nothing is fetched before
// Start. It fails (ErrConfig) on a configuration the ingress cannot run.
func New(cfg Config, eng Engine) (*Consumer, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	c := &Consumer{cfg: cfg, eng: eng, mp: newMapping(cfg), log: cfg.Logger.With("ingress", cfg.ID), m: cfg.Metrics,
		workers: map[tp]*worker{}, durable: map[tp]int64{}, wakeCommit: make(chan struct{}, 1),
		reseeked: map[tp]int64{}, joined: make(chan struct{}), groupErrs: newLimiter(cfg.Now, 10*time.Second)}
	topics := c.mp.Topics()
	reset := kgo.NewOffset().AtEnd()
	if cfg.AutoOffsetReset == "earliest" {
		reset = kgo.NewOffset().AtStart()
	}
	instance := cfg.InstanceID
	if instance == "" {
		instance = "statefun-" + cfg.ID
	}
	// The default instance id comes before the client properties, so
	// that a group.instance.id property replaces it.
	opts := append([]kgo.Opt{kgo.InstanceID(instance)}, cfg.ClientOpts...)
	opts = append(opts,
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumerGroup(cfg.GroupID),
		kgo.ConsumeTopics(topics...),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.DisableAutoCommit(),
		// Records handed out by a poll are queued to their partition's
		// worker before a rebalance may revoke the partition, so a
		// re-assigned partition never sees stale records after its resumed
		// ones.
		kgo.BlockRebalanceOnPoll(),
		kgo.ConsumeResetOffset(reset),
		kgo.AdjustFetchOffsetsFn(c.assigned),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, m map[string][]int32) { c.revoked(ctx, m, true) }),
		kgo.OnPartitionsLost(func(ctx context.Context, cl *kgo.Client, m map[string][]int32) { c.revoked(ctx, m, false) }),
		kgo.WithHooks(hooks{c}),
	)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	// The client joins the group at once; assigned waits for the fields
	// below.
	c.built = make(chan struct{})
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		c.cancel()
		return nil, fmt.Errorf("%w: ingress %s: %v", ErrConfig, cfg.ID, err)
	}
	c.cl = cl
	c.adm = kadm.NewClient(cl)
	c.instance, _ = cl.OptValue(kgo.InstanceID).(string)
	close(c.built)
	c.m.connected.WithLabelValues(cfg.ID).Set(0)
	return c, nil
}

// Start joins the group and consumes until Close.
func (c *Consumer) Start() {
	c.wg.Add(3)
	go func() { defer c.wg.Done(); c.poll() }()
	go func() { defer c.wg.Done(); c.commitLoop() }()
	go func() { defer c.wg.Done(); c.joinLoop() }()
}

// Close stops consuming: each partition's batch in flight is finished or
// abandoned (its stored position says which), the durable positions are
// committed to the group (best effort) and, unless Config.KeepMembership,
// the group is left.
func (c *Consumer) Close() {
	if c.closed.Swap(true) {
		return
	}
	c.cancel()
	c.wg.Wait()
	c.cl.AllowRebalance()
	if !c.cfg.KeepMembership {
		c.leave()
	}
	c.cl.Close() // revoked stops every worker (a static member does not leave here)
	c.stopWorkers(nil)
	c.m.connected.WithLabelValues(c.cfg.ID).Set(0)
}

// Ready returns nil while the ingress reaches its brokers, and otherwise an
// error (wrapping ErrNotReady) naming the ingress and why.
func (c *Consumer) Ready() error {
	if c.closed.Load() {
		return fmt.Errorf("%w: kafka ingress %s is closed", ErrNotReady, c.cfg.ID)
	}
	why := "no error reported"
	if p := c.lastErr.Load(); p != nil {
		why = *p
	}
	ok := c.lastOK.Load()
	if ok == 0 {
		return fmt.Errorf("%w: kafka ingress %s has not reached its brokers %v yet: %s", ErrNotReady, c.cfg.ID, c.cfg.Brokers, why)
	}
	if since := c.cfg.Now().Sub(time.Unix(0, ok)); since > c.cfg.ReadyTimeout {
		return fmt.Errorf("%w: kafka ingress %s: no successful request to its brokers for %s: %s", ErrNotReady, c.cfg.ID, since.Round(time.Second), why)
	}
	return nil
}

// hooks observe every broker request: readiness comes from them.
type hooks struct{ c *Consumer }

func (h hooks) OnBrokerE2E(meta kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if err := e2e.Err(); err != nil {
		h.c.noteErr(fmt.Sprintf("broker %s:%d: %v", meta.Host, meta.Port, err))
		return
	}
	h.c.lastOK.Store(h.c.cfg.Now().UnixNano())
	h.c.m.connected.WithLabelValues(h.c.cfg.ID).Set(1)
}

func (h hooks) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err != nil {
		h.c.noteErr(fmt.Sprintf("connecting to broker %s:%d: %v", meta.Host, meta.Port, err))
	}
}

func (c *Consumer) noteErr(s string) {
	c.lastErr.Store(&s)
	if c.lastOK.Load() == 0 || c.cfg.Now().Sub(time.Unix(0, c.lastOK.Load())) > c.cfg.ReadyTimeout {
		c.m.connected.WithLabelValues(c.cfg.ID).Set(0)
	}
}

// poll hands the records of each poll to their partitions' workers, then
// lets a waiting rebalance go on.
func (c *Consumer) poll() {
	for {
		fs := c.cl.PollRecords(c.ctx, 10*c.cfg.MaxBatchRecords)
		if c.ctx.Err() != nil || fs.IsClientClosed() {
			return
		}
		fs.EachError(func(topic string, p int32, err error) {
			if errors.Is(err, context.Canceled) {
				return
			}
			var loss *kgo.ErrDataLoss
			if errors.As(err, &loss) && c.reseek(loss) {
				return
			}
			c.noteErr(fmt.Sprintf("fetching %s/%d: %v", topic, p, err))
			c.log.Warn("kafka fetch error", "topic", topic, "partition", p, "error", err)
		})
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) == 0 {
				return
			}
			c.mu.Lock()
			w := c.workers[tp{p.Topic, p.Partition}]
			c.mu.Unlock()
			if w != nil {
				w.push(p.Records)
			}
		})
		c.cl.AllowRebalance()
	}
}

// reseek undoes a forward jump of the client's fetch position. When the
// client suspects the log was truncated under it (a leader change whose
// epochs it cannot reconcile) and cannot find where the log diverged, it
// resets the partition by auto.offset.reset — to the end, by default —
// skipping records that may well still be there. For an exactly-once
// ingress that is silent loss, so the partition is sent back to the offset
// it had consumed to (everything below it is already queued here). If the
// records are really gone, the next fetch is out of range and the reset
// applies; a second jump from the same offset is accepted and logged as
// loss. It runs on the polling goroutine before AllowRebalance, as
// SetOffsets requires, and reports whether it re-seeked.
func (c *Consumer) reseek(loss *kgo.ErrDataLoss) bool {
	if loss.ResetTo <= loss.ConsumedTo {
		return false
	}
	k := tp{loss.Topic, loss.Partition}
	if c.reseeked[k] == loss.ConsumedTo {
		c.log.Error("kafka records lost: the brokers no longer hold them", "topic", loss.Topic, "partition", loss.Partition,
			"from", loss.ConsumedTo, "to", loss.ResetTo)
		return false
	}
	c.reseeked[k] = loss.ConsumedTo
	c.log.Warn("kafka client skipped ahead after a leader change; resuming where it had consumed to", "topic", loss.Topic,
		"partition", loss.Partition, "consumed_to", loss.ConsumedTo, "skipped_to", loss.ResetTo)
	c.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{loss.Topic: {loss.Partition: {Epoch: -1, Offset: loss.ConsumedTo}}})
	return true
}

// assigned is called (kgo.AdjustFetchOffsetsFn) with newly assigned
// partitions and the offsets the group knows: each starts from its stored
// position, or else from the startup position, resolved to an offset and
// stored at once, so a restart before the first record does not move it.
func (c *Consumer) assigned(ctx context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	select {
	case <-c.built:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	c.markJoined()
	stored, err := c.eng.SourcePositions(c.cfg.ID)
	if err != nil {
		return nil, fmt.Errorf("kafkaingress: reading stored positions: %w", err)
	}
	have := map[tp]int64{}
	for _, p := range stored {
		have[tp{p.Topic, p.Partition}] = p.Next
	}
	start := map[tp]int64{}
	fresh := map[string]map[int32]kgo.Offset{}
	for topic, ps := range offsets {
		for p, off := range ps {
			k := tp{topic, p}
			if next, ok := have[k]; ok {
				start[k] = next
				continue
			}
			if fresh[topic] == nil {
				fresh[topic] = map[int32]kgo.Offset{}
			}
			fresh[topic][p] = off
		}
	}
	if len(fresh) > 0 {
		resolved, listed, err := c.mp.Start(ctx, c.adm, fresh)
		if err != nil {
			return nil, err
		}
		for topic, ps := range resolved {
			for p, o := range ps {
				start[tp{topic, p}] = o
				if !listed[topic][p] {
					continue
				}
				// Stored before consuming: a restart before the first
				// record resumes here rather than resolving "latest"
				// again later.
				pos := store.SourcePosition{Ingress: c.cfg.ID, Topic: topic, Partition: p, Next: o}
				if err := c.eng.IngestFrom(ctx, engine.SourceBatch{Position: pos}); err != nil {
					return nil, fmt.Errorf("kafkaingress: storing the startup position of %s/%d: %w", topic, p, err)
				}
			}
		}
	}
	out := make(map[string]map[int32]kgo.Offset, len(offsets))
	for k, next := range start {
		if out[k.topic] == nil {
			out[k.topic] = map[int32]kgo.Offset{}
		}
		out[k.topic][k.partition] = kgo.NewOffset().At(next).WithEpoch(-1)
		c.startWorker(k, next)
		c.log.Info("kafka partition assigned", "topic", k.topic, "partition", k.partition, "offset", next)
	}
	return out, nil
}

// revoked stops the workers of partitions taken away; on a clean
// revocation the durable positions are committed to the group first.
func (c *Consumer) revoked(ctx context.Context, m map[string][]int32, clean bool) {
	<-c.built
	var ks []tp
	for topic, ps := range m {
		for _, p := range ps {
			ks = append(ks, tp{topic, p})
		}
	}
	if len(ks) == 0 {
		// A cooperative rebalance that keeps every partition here still
		// ends the session with an empty revocation; stopping workers now
		// would leave the kept partitions without one (nothing assigns
		// them again), and their records would never be consumed.
		return
	}
	c.stopWorkers(ks)
	if clean {
		c.commitDurable(ctx, true)
	}
	c.mu.Lock()
	for _, k := range ks {
		delete(c.durable, k)
	}
	c.mu.Unlock()
	c.cl.ResumeFetchPartitions(m) // a paused partition assigned again later starts unpaused
}

func (c *Consumer) startWorker(k tp, next int64) {
	w := &worker{c: c, k: k, next: next, wake: make(chan struct{}, 1), done: make(chan struct{})}
	w.ctx, w.cancel = context.WithCancel(c.ctx)
	c.mu.Lock()
	old := c.workers[k]
	c.workers[k] = w
	c.mu.Unlock()
	if old != nil {
		old.stop()
	}
	go w.run()
}

// stopWorkers stops the workers of ks (all when ks is nil) and waits for
// them.
func (c *Consumer) stopWorkers(ks []tp) {
	c.mu.Lock()
	var ws []*worker
	for k, w := range c.workers {
		if ks == nil || contains(ks, k) {
			ws = append(ws, w)
			delete(c.workers, k)
		}
	}
	c.mu.Unlock()
	for _, w := range ws {
		w.stop()
	}
}

func contains(ks []tp, k tp) bool {
	for _, x := range ks {
		if x == k {
			return true
		}
	}
	return false
}

// markDurable notes a position made durable, for the next group commit.
func (c *Consumer) markDurable(k tp, next int64) {
	c.mu.Lock()
	c.durable[k] = next
	c.mu.Unlock()
	select {
	case c.wakeCommit <- struct{}{}:
	default:
	}
}

// commitLoop commits the durable positions to the consumer group, at most
// once per CommitInterval: only lag tools read them.
func (c *Consumer) commitLoop() {
	t := time.NewTicker(c.cfg.CommitInterval)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		select {
		case <-c.wakeCommit:
			c.commitDurable(c.ctx, false)
		default:
		}
	}
}

// commitDurable commits the positions made durable since the last commit.
func (c *Consumer) commitDurable(ctx context.Context, sync bool) {
	c.mu.Lock()
	m := map[string]map[int32]kgo.EpochOffset{}
	for k, next := range c.durable {
		if m[k.topic] == nil {
			m[k.topic] = map[int32]kgo.EpochOffset{}
		}
		m[k.topic][k.partition] = kgo.EpochOffset{Epoch: -1, Offset: next}
	}
	c.durable = map[tp]int64{}
	c.mu.Unlock()
	if len(m) == 0 {
		return
	}
	done := func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err == nil && resp != nil {
			for _, t := range resp.Topics {
				for _, p := range t.Partitions {
					if p.ErrorCode != 0 {
						err = fmt.Errorf("%s/%d: error code %d", t.Topic, p.Partition, p.ErrorCode)
					}
				}
			}
		}
		if err != nil && !errors.Is(err, context.Canceled) {
			c.m.commitErr.WithLabelValues(c.cfg.ID).Inc()
			c.log.Debug("committing positions to the consumer group failed (best effort)", "error", err)
		}
	}
	if sync {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		c.cl.CommitOffsetsSync(cctx, m, done)
		return
	}
	c.cl.CommitOffsets(ctx, m, done)
}

// worker turns the records of one Kafka partition into source batches, in
// order, one batch in flight at a time.
type worker struct {
	c      *Consumer
	k      tp
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	wake   chan struct{}

	mu     sync.Mutex
	queue  []*kgo.Record
	paused bool // fetching of the partition is paused by this worker

	next int64 // owned by run
}

// push queues records handed out by a poll; above a high-water mark the
// partition's fetching pauses until the worker catches up.
func (w *worker) push(rs []*kgo.Record) {
	w.mu.Lock()
	w.queue = append(w.queue, rs...)
	high := len(w.queue) >= 4*w.c.cfg.MaxBatchRecords
	w.mu.Unlock()
	if high {
		w.pause()
	}
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *worker) pause() {
	w.mu.Lock()
	already := w.paused
	w.paused = true
	w.mu.Unlock()
	if !already {
		w.c.cl.PauseFetchPartitions(map[string][]int32{w.k.topic: {w.k.partition}})
	}
}

// resumeIfDrained resumes fetching once the queue is below one batch.
func (w *worker) resumeIfDrained() {
	w.mu.Lock()
	resume := w.paused && len(w.queue) < w.c.cfg.MaxBatchRecords
	if resume {
		w.paused = false
	}
	w.mu.Unlock()
	if resume {
		w.c.cl.ResumeFetchPartitions(map[string][]int32{w.k.topic: {w.k.partition}})
	}
}

func (w *worker) stop() {
	w.cancel()
	<-w.done
}

func (w *worker) run() {
	defer close(w.done)
	for {
		w.mu.Lock()
		n := min(len(w.queue), w.c.cfg.MaxBatchRecords)
		recs := w.queue[:n:n]
		w.mu.Unlock()
		if n == 0 {
			select {
			case <-w.ctx.Done():
				return
			case <-w.wake:
				continue
			}
		}
		b := w.c.batch(w.k, recs)
		if !w.ingest(b) {
			return
		}
		w.mu.Lock()
		w.queue = w.queue[n:]
		w.mu.Unlock()
		w.next = b.Position.Next
		w.c.markDurable(w.k, w.next)
		w.resumeIfDrained()
	}
}

// ingest makes b durable, retrying with backoff — with the partition's
// fetching paused — while the engine is busy. It returns false when the
// worker is stopped.
func (w *worker) ingest(b batchOf) bool {
	backoff := 5 * time.Millisecond
	for {
		err := w.c.eng.IngestFrom(w.ctx, b.SourceBatch)
		if err == nil {
			w.c.mp.Delivered(w.k.topic, b.records)
			return true
		}
		if w.ctx.Err() != nil {
			return false
		}
		if errors.Is(err, engine.ErrBusy) {
			w.c.m.busy.WithLabelValues(w.c.cfg.ID).Inc()
			w.pause()
		} else {
			w.c.log.Error("kafka ingress: making records durable failed; retrying", "topic", w.k.topic, "partition", w.k.partition, "error", err)
			if errors.Is(err, engine.ErrClosed) {
				backoff = max(backoff, time.Second)
			}
		}
		t := time.NewTimer(backoff)
		select {
		case <-w.ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}

// batch turns records of one partition into a source batch: a message to
// every target of the topic's route for each good record, a dead letter for
// each bad one, and the position after the last.
func (c *Consumer) batch(k tp, recs []*kgo.Record) batchOf {
	b := batchOf{SourceBatch: engine.SourceBatch{Position: store.SourcePosition{Ingress: c.cfg.ID, Topic: k.topic, Partition: k.partition}}}
	for _, r := range recs {
		b.Position.Next = r.Offset + 1
		msgs, reason := c.mp.Messages(r)
		if reason != "" {
			c.mp.Bad(r, reason, "stored as a dead letter")
			b.DeadLetters = append(b.DeadLetters, c.mp.DeadLetter(r, reason))
			continue
		}
		b.Messages = append(b.Messages, msgs...)
		b.records++
	}
	return b
}

// batchOf is a source batch with the number of records it delivers.
type batchOf struct {
	engine.SourceBatch
	records int
}

// limiter lets one log line per key through per interval and counts the
// rest.
type limiter struct {
	now      func() time.Time
	interval time.Duration
	mu       sync.Mutex
	last     map[string]time.Time
	dropped  map[string]int
}

func newLimiter(now func() time.Time, interval time.Duration) *limiter {
	return &limiter{now: now, interval: interval, last: map[string]time.Time{}, dropped: map[string]int{}}
}

// allow reports whether a line for key may be logged now, and how many
// were suppressed since the last one.
func (l *limiter) allow(key string) (int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if t, ok := l.last[key]; ok && now.Sub(t) < l.interval {
		l.dropped[key]++
		return 0, false
	}
	n := l.dropped[key]
	l.last[key] = now
	l.dropped[key] = 0
	return n, true
}
