// Package kafkaegress delivers the records functions send to a Kafka egress
// (io.statefun.kafka.v1/egress) on the embedded engine.
//
// A record is first written to the egress's outbox in the store, in the same
// synced commit as the function's state change (docs/reference/egress.md). One Relay
// per egress reads the outbox in order and produces it to Kafka with
// franz-go, in batches, and removes a batch from the outbox once Kafka has
// it:
//
//   - exactly-once: each batch is one Kafka transaction that also writes the
//     batch's last outbox position to a compacted marker topic. At start the
//     relay fences its predecessor (InitProducerID), reads its marker back
//     read_committed and continues after it, so a crash between the Kafka
//     commit and the local removal never sends a batch twice;
//   - at-least-once: an idempotent producer with acks=all; a batch leaves
//     the outbox once Kafka acknowledged all of it;
//   - none: records leave the outbox as soon as they are handed to the
//     producer.
//
// A relay never blocks the engine: while Kafka is down records wait in the
// outbox (subject to the store's egress retention), the relay retries with
// backoff and Ready says why the egress is not connected. See
// docs/reference/kafka-egress.md.
package kafkaegress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/statefun-go/statefun/internal/engine"
	"github.com/statefun-go/statefun/internal/kafkatxn"
	"github.com/statefun-go/statefun/internal/protocol"
)

// Outbox is where a relay reads the durable records of its egress and
// removes those it delivered (the embedded engine implements it;
// docs/reference/egress.md). Reads never remove: a record is removed only by an
// acknowledgement after Kafka took it, so each is delivered at least once.
type Outbox interface {
	// ReadEgress returns the first record of a route whose position is
	// greater than after (0: the oldest), with that position, without
	// removing it; false when there is none. Positions grow with every
	// record and are never given twice.
	ReadEgress(ctx context.Context, egress, route string, after uint64) (uint64, *protocol.EgressRecord, bool, error)
	// ReadEgressBatch is ReadEgress for up to limit records at once, in
	// order; none means there is none.
	ReadEgressBatch(ctx context.Context, egress, route string, after uint64, limit int) ([]engine.EgressItem, error)
	// AckEgress removes every record of a route at or below pos and
	// returns once the removal is durable; again is harmless. A position
	// beyond what reads handed out since the start is refused
	// (engine.ErrNotRead) while unread records lie at or below it.
	AckEgress(ctx context.Context, egress, route string, pos uint64) error
}

// Store is what the exactly-once relay needs to know of the store whose
// outbox it delivers (*store.DB implements it).
type Store interface {
	// ID is the store's identity, written into every position marker.
	ID() string
	// PreIDEgressSeq is the highest egress position the store wrote
	// before it had an identity: markers without one, written by an older
	// build, may be its own only up to it.
	PreIDEgressSeq() uint64
	// MaxEgressSeq is the highest egress position the store ever wrote.
	MaxEgressSeq() (uint64, error)
	// SharedWith reports whether store is one this store was restored
	// from (a backup of it), and up to which egress position the two
	// share their records.
	SharedWith(store string) (uint64, bool)
}

// Relay delivers one Kafka egress's outbox to Kafka. Create it with New
// (before the engine: its Route checks the records functions send), then
// Start it on the engine, and Close it before closing the engine.
type Relay struct {
	cfg       Config
	log       *slog.Logger
	maxRecord int // bytes of key plus value the producer accepts

	mu        sync.Mutex
	status    error     // why the egress is not connected; nil when it is
	busySince time.Time // when the batch being delivered started; zero when idle
	connErr   error     // the last failed broker connection, cleared by a good one
	started   bool
	cancel    context.CancelFunc
	done      chan struct{}
	zombie    *kgo.Client // the client a simulated crash left behind

	topicReady bool // the marker topic exists; only the run goroutine touches it

	// crash, in tests, is asked at chosen points whether the relay dies
	// there (without any cleanup, as a killed process would).
	crash func(point string) bool
}

// Points at which tests can crash a relay.
const (
	// crashBeforeCommit: the batch and the marker are in Kafka's log
	// (flushed), the transaction is open (exactly-once).
	crashBeforeCommit = "before-commit"
	// crashBeforeAck: Kafka has the batch (committed, or acknowledged),
	// the outbox still holds it.
	crashBeforeAck = "before-ack"
)

// New checks the configuration (including the client options, which
// franz-go validates) and returns a Relay that is not running yet.
func New(cfg Config) (*Relay, error) {
	if err := cfg.resolve(); err != nil {
		return nil, err
	}
	r := &Relay{cfg: cfg, log: cfg.Logger.With("egress", cfg.ID)}
	cl, err := kgo.NewClient(r.producerOpts()...)
	if err != nil {
		return nil, fmt.Errorf("kafkaegress: egress %s: client options: %w", cfg.ID, err)
	}
	if v, ok := cl.OptValue(kgo.ProducerBatchMaxBytes).(int32); ok {
		// A record batch of one record carries about a hundred bytes
		// besides its key and value.
		r.maxRecord = max(int(v)-256, 1)
	}
	if v, ok := cl.OptValue(kgo.TransactionalID).(string); ok && v != cfg.TransactionalID {
		cl.Close()
		return nil, fmt.Errorf("kafkaegress: egress %s: the client options set a transactional id; use Config.TransactionalID", cfg.ID)
	}
	cl.Close()
	r.status = fmt.Errorf("kafka egress %s: not connected yet", cfg.ID)
	r.metric(func(m *Metrics) { m.connected.WithLabelValues(cfg.ID).Set(0) })
	return r, nil
}

// ID returns the egress id.
func (r *Relay) ID() string { return r.cfg.ID }

// Route checks a record a function sends to this egress and returns its
// route in the outbox: the egress id (one ordered outbox per egress; the
// topic is inside the record). It implements egress.RouteFunc. A value
// that is not a KafkaProducerRecord, does not decode, has no topic or an
// invalid one, or is larger than the producer accepts is an error, which
// makes the function's response a protocol violation.
func (r *Relay) Route(namespace, typ string, arg *protocol.TypedValue) (string, error) {
	if id := namespace + "/" + typ; id != r.cfg.ID {
		return "", fmt.Errorf("the Kafka egress %s got a record for %s", r.cfg.ID, id)
	}
	if _, err := parse(arg, r.maxRecord); err != nil {
		return "", err
	}
	return r.cfg.ID, nil
}

// producerOpts are the options of the producing client.
func (r *Relay) producerOpts() []kgo.Opt {
	opts := append(append([]kgo.Opt(nil), r.cfg.ClientOpts...),
		kgo.SeedBrokers(r.cfg.Brokers...), kgo.WithHooks(r.hooks()))
	switch r.cfg.Semantic {
	case ExactlyOnce:
		opts = append(opts, kgo.TransactionalID(r.cfg.TransactionalID), kgo.TransactionTimeout(r.cfg.TransactionTimeout),
			kgo.RequiredAcks(kgo.AllISRAcks()))
	case AtLeastOnce:
		opts = append(opts, kgo.RequiredAcks(kgo.AllISRAcks()))
	case None:
		opts = append(opts, kgo.DisableIdempotentWrite(), kgo.RequiredAcks(kgo.LeaderAck()))
	}
	return opts
}

// Start runs the relay on the outbox, on a goroutine of its own, until
// Close. Starting twice does nothing.
func (r *Relay) Start(out Outbox) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started {
		return
	}
	r.started = true
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan struct{})
	go r.run(ctx, out)
}

// Close stops the relay and waits for it. A transaction in progress is
// left to the next start, which fences and aborts it; records not yet
// delivered stay in the outbox. Close before closing the engine.
func (r *Relay) Close() {
	r.mu.Lock()
	cancel, done := r.cancel, r.done
	r.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
	r.mu.Lock()
	z := r.zombie
	r.zombie = nil
	r.mu.Unlock()
	if z != nil {
		z.Close()
	}
}

// Ready returns nil while the egress is connected, and otherwise an error
// naming the egress and why it is not: the last failure (connecting,
// fencing, producing, committing), or a batch whose delivery has taken
// longer than StallAfter (with the last broker connection error, if any).
func (r *Relay) Ready() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.status != nil {
		return r.status
	}
	if !r.busySince.IsZero() {
		if d := time.Since(r.busySince); d > r.cfg.StallAfter {
			why := "no answer from the brokers"
			if r.connErr != nil {
				why = r.connErr.Error()
			}
			return fmt.Errorf("kafka egress %s: not connected: delivering a batch has taken %s: %s", r.cfg.ID, d.Round(time.Millisecond), why)
		}
	}
	return nil
}

// stageError is a failure at one stage of the relay's work (a metric label).
type stageError struct {
	stage string
	err   error
}

func (e *stageError) Error() string { return e.stage + ": " + e.err.Error() }
func (e *stageError) Unwrap() error { return e.err }

func stage(name string, err error) error {
	if err == nil || errors.Is(err, errCrashed) {
		return err
	}
	return &stageError{stage: name, err: err}
}

func (r *Relay) metric(f func(*Metrics)) {
	if r.cfg.Metrics != nil {
		f(r.cfg.Metrics)
	}
}

// setOK records a good exchange with Kafka.
func (r *Relay) setOK() {
	r.mu.Lock()
	was := r.status
	r.status = nil
	r.mu.Unlock()
	if was != nil {
		r.log.Info("kafka egress connected", "semantic", r.cfg.Semantic.String())
		r.metric(func(m *Metrics) { m.connected.WithLabelValues(r.cfg.ID).Set(1) })
	}
}

// setFailed records a failure: Ready reports it until the next good
// exchange.
func (r *Relay) setFailed(err error) {
	r.mu.Lock()
	r.status = fmt.Errorf("kafka egress %s: not connected: %w", r.cfg.ID, err)
	r.mu.Unlock()
	name := "connect"
	var se *stageError
	if errors.As(err, &se) {
		name = se.stage
	}
	r.metric(func(m *Metrics) {
		m.connected.WithLabelValues(r.cfg.ID).Set(0)
		m.errors.WithLabelValues(r.cfg.ID, name).Inc()
	})
}

func (r *Relay) setBusy(busy bool) {
	r.mu.Lock()
	if busy {
		r.busySince = time.Now()
	} else {
		r.busySince = time.Time{}
	}
	r.mu.Unlock()
}

// connHook notes broker connection failures, for Ready.
type connHook struct{ r *Relay }

// OnBrokerConnect implements kgo.HookBrokerConnect.
func (h connHook) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	if err != nil {
		h.r.connErr = fmt.Errorf("connecting to broker %s: %w", net.JoinHostPort(meta.Host, fmt.Sprint(meta.Port)), err)
	} else {
		h.r.connErr = nil
	}
}

func (r *Relay) hooks() kgo.Hook { return connHook{r} }

// run delivers until ctx ends: one session (a client) at a time, a new one
// after a failure, with capped exponential backoff.
func (r *Relay) run(ctx context.Context, out Outbox) {
	defer close(r.done)
	delay := r.cfg.RetryBase
	for {
		progressed, err := r.session(ctx, out)
		if errors.Is(err, errCrashed) || ctx.Err() != nil {
			return
		}
		if progressed {
			delay = r.cfg.RetryBase
		}
		r.setFailed(err)
		var refused *MarkerRefusedError
		if errors.As(err, &refused) {
			r.log.Error("kafka egress: refusing to deliver: the position marker in Kafka is not this store's; nothing is delivered or removed from the outbox until an operator resolves it",
				"marker", refused.Marker.String(), "transactional_id", r.cfg.TransactionalID, "retry_in", delay, "error", err)
		} else {
			r.log.Warn("kafka egress: delivery failed, will retry", "semantic", r.cfg.Semantic.String(), "retry_in", delay, "error", err)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		delay = min(delay*2, r.cfg.RetryMax)
	}
}

// session runs one producing client: resume, then deliver batch after
// batch until something fails. progressed tells whether a batch left the
// outbox.
func (r *Relay) session(ctx context.Context, out Outbox) (progressed bool, err error) {
	cl, err := kgo.NewClient(r.producerOpts()...)
	if err != nil {
		return false, stage("connect", err)
	}
	defer func() {
		if errors.Is(err, errCrashed) {
			r.mu.Lock()
			r.zombie = cl // a dead process's client: nobody closes it until Close
			r.mu.Unlock()
			return
		}
		cl.Close()
	}()
	pos, err := r.resume(ctx, cl, out)
	if err != nil {
		return false, stage("resume", err)
	}
	r.setOK()
	lastContact := time.Now()
	for {
		recs, last, dg, err := r.readBatch(ctx, out, pos)
		if err != nil {
			return progressed, stage("outbox", err)
		}
		if last == pos { // nothing new
			if time.Since(lastContact) >= r.cfg.PingInterval {
				pctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
				err := cl.Ping(pctx)
				cancel()
				if err != nil && ctx.Err() == nil {
					r.setFailed(stage("connect", fmt.Errorf("no broker answers: %w", err)))
				} else if err == nil {
					r.setOK()
				}
				lastContact = time.Now()
			}
			t := time.NewTimer(r.cfg.PollInterval)
			select {
			case <-ctx.Done():
				t.Stop()
				return progressed, ctx.Err()
			case <-t.C:
			}
			continue
		}
		if len(recs) > 0 {
			r.setBusy(true)
			err = r.deliver(ctx, cl, recs, marker{Position: last, After: pos, Records: dg.n, Digest: dg.sum()})
			r.setBusy(false)
			if err != nil {
				return progressed, err
			}
			lastContact = time.Now()
			if r.crash != nil && r.crash(crashBeforeAck) {
				return progressed, errCrashed
			}
		}
		if err := out.AckEgress(ctx, r.cfg.ID, r.cfg.ID, last); err != nil {
			return progressed, stage("outbox", err)
		}
		pos, progressed = last, true
		r.metric(func(m *Metrics) {
			m.records.WithLabelValues(r.cfg.ID).Add(float64(len(recs)))
			m.position.WithLabelValues(r.cfg.ID).Set(float64(last))
		})
		r.setOK()
	}
}

// resume finds where delivery continues: for exactly-once, it fences the
// transactional id's predecessor, reads the last committed position back
// from the marker topic and removes what it covers from the outbox (that
// removal may have been lost in a crash); otherwise it checks a broker
// answers, and delivery restarts at the oldest record still in the outbox.
func (r *Relay) resume(ctx context.Context, cl *kgo.Client, out Outbox) (uint64, error) {
	tctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	if r.cfg.Semantic != ExactlyOnce {
		if err := cl.Ping(tctx); err != nil {
			return 0, fmt.Errorf("no broker answers: %w", err)
		}
		return 0, nil
	}
	if _, _, err := cl.ProducerID(tctx); err != nil {
		return 0, fmt.Errorf("initializing the transactional producer %s: %w", r.cfg.TransactionalID, err)
	}
	if !r.topicReady {
		if err := r.ensureMarkerTopic(tctx, cl); err != nil {
			return 0, err
		}
		r.topicReady = true
	}
	m, err := r.readMarker(tctx, cl)
	if err != nil || m == nil {
		return 0, err
	}
	if r.cfg.Store == nil {
		// Nothing to check the marker against: trust it.
		if err := r.ackThrough(ctx, out, m.Position); err != nil {
			return 0, err
		}
		return m.Position, nil
	}
	after, err := r.judge(ctx, out, m)
	var refused *MarkerRefusedError
	if errors.As(err, &refused) && r.cfg.ResetMarker != nil && *r.cfg.ResetMarker == m.ref() {
		if err := r.reset(ctx, cl, out, m); err != nil {
			return 0, err
		}
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return after, nil
}

// ackThrough removes the records up to pos from the outbox. The outbox
// accepts an acknowledgement only of records read since the runtime
// started, so it reads them first: at most the batch whose local removal a
// crash lost.
func (r *Relay) ackThrough(ctx context.Context, out Outbox, pos uint64) error {
	var after uint64
	for {
		p, _, ok, err := out.ReadEgress(ctx, r.cfg.ID, r.cfg.ID, after)
		if err != nil {
			return fmt.Errorf("reading the outbox: %w", err)
		}
		if !ok || p > pos {
			break
		}
		after = p
	}
	if after == 0 {
		return nil // nothing at or below pos is left
	}
	if err := out.AckEgress(ctx, r.cfg.ID, r.cfg.ID, pos); err != nil {
		return fmt.Errorf("removing the records up to position %d, which Kafka has: %w", pos, err)
	}
	return nil
}

// readBatch reads the next batch after pos: the Kafka records, the
// position of the last outbox record it covers (pos when there is none),
// and the digest of the outbox records it covers (for the marker). A record
// that does not decode is logged, counted and skipped.
func (r *Relay) readBatch(ctx context.Context, out Outbox, pos uint64) (recs []*kgo.Record, last uint64, dg *batchDigest, err error) {
	last, dg = pos, newDigest()
	items, err := out.ReadEgressBatch(ctx, r.cfg.ID, r.cfg.ID, pos, r.cfg.BatchRecords)
	if err != nil {
		return nil, pos, dg, err
	}
	bytes := 0
	// Records past the byte bound are left for the next batch (read
	// again then); the batch ends with the record that reached it.
	for _, it := range items {
		if bytes >= r.cfg.BatchBytes {
			break
		}
		last = it.Pos
		dg.add(it.Pos, it.Record)
		kr, err := parse(it.Record.GetArgument(), r.maxRecord)
		if err != nil {
			r.log.Error("kafka egress: skipping an outbox record that cannot be delivered", "position", it.Pos, "error", err)
			r.metric(func(m *Metrics) { m.undeliverable.WithLabelValues(r.cfg.ID).Inc() })
			continue
		}
		recs = append(recs, kafkaRecord(kr))
		bytes += len(kr.Key) + len(kr.Value)
	}
	return recs, last, dg, nil
}

// firstErr collects the first error of a batch's produce promises.
type firstErr struct {
	mu  sync.Mutex
	err error
}

func (f *firstErr) promise(rec *kgo.Record, err error) {
	if err == nil {
		return
	}
	f.mu.Lock()
	if f.err == nil {
		f.err = fmt.Errorf("producing to topic %s: %w", rec.Topic, err)
	}
	f.mu.Unlock()
}

func (f *firstErr) get() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// deliver sends one batch by the egress's semantic; it returns nil once the
// batch may leave the outbox.
func (r *Relay) deliver(ctx context.Context, cl *kgo.Client, recs []*kgo.Record, m marker) error {
	switch r.cfg.Semantic {
	case ExactlyOnce:
		return r.deliverTxn(ctx, cl, recs, m)
	case AtLeastOnce:
		var fe firstErr
		for _, kr := range recs {
			cl.Produce(ctx, kr, fe.promise)
		}
		fctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
		err := cl.Flush(fctx)
		cancel()
		if err == nil {
			err = fe.get()
		}
		return stage("produce", err)
	default: // None
		for _, kr := range recs {
			cl.Produce(ctx, kr, func(rec *kgo.Record, err error) {
				if err != nil {
					r.log.Warn("kafka egress: a record was lost (delivery semantic none)", "topic", rec.Topic, "error", err)
					r.metric(func(m *Metrics) { m.lost.WithLabelValues(r.cfg.ID).Inc() })
				}
			})
		}
		return nil
	}
}

// deliverTxn sends one batch and its position marker in one transaction.
// It returns nil once the transaction is committed. A failure before the
// commit aborts the transaction; a failed commit has an unknown outcome,
// which the next session learns from the marker topic.
func (r *Relay) deliverTxn(ctx context.Context, cl *kgo.Client, recs []*kgo.Record, m marker) error {
	if err := cl.BeginTransaction(); err != nil {
		return stage("produce", err)
	}
	var fe firstErr
	var topics kafkatxn.Topics
	for _, kr := range recs {
		topics.Add(kr.Topic)
		cl.Produce(ctx, kr, fe.promise)
	}
	mr := r.markerRecord(m)
	topics.Add(mr.Topic)
	cl.Produce(ctx, mr, fe.promise)
	fctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	err := cl.Flush(fctx)
	if err == nil {
		err = fe.get()
	}
	if err == nil {
		// Ended before the client settled its partitions, the commit
		// could be ended as an abort and reported done (package kafkatxn).
		err = kafkatxn.Await(fctx, topics.List(), r.cfg.Timeout, func(t string) bool { return kafkatxn.Settled(cl, t) })
	}
	cancel()
	if err != nil {
		r.abort(ctx, cl)
		return stage("produce", err)
	}
	if r.crash != nil && r.crash(crashBeforeCommit) {
		return errCrashed
	}
	// Not cut short by Close: a commit whose answer is lost has an outcome
	// only the marker topic can tell.
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.Timeout)
	defer cancel()
	if err := cl.EndTransaction(ectx, kgo.TryCommit); err != nil {
		r.metric(func(m *Metrics) { m.transactions.WithLabelValues(r.cfg.ID, "unknown").Inc() })
		// As franz-go advises after a failed commit: abort, which bumps the
		// epoch and fences whatever is still open. Whether the commit took
		// effect, the marker topic says when the next session resumes.
		_ = cl.EndTransaction(ectx, kgo.TryAbort)
		return stage("commit", err)
	}
	r.metric(func(m *Metrics) { m.transactions.WithLabelValues(r.cfg.ID, "committed").Inc() })
	return nil
}

// abort ends a transaction that failed before its commit. When it cannot
// (Kafka unreachable, or the relay closing), the next session's fencing
// aborts it.
func (r *Relay) abort(ctx context.Context, cl *kgo.Client) {
	if ctx.Err() != nil {
		return
	}
	actx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	if err := cl.AbortBufferedRecords(actx); err != nil {
		return
	}
	if err := cl.EndTransaction(actx, kgo.TryAbort); err == nil {
		r.metric(func(m *Metrics) { m.transactions.WithLabelValues(r.cfg.ID, "aborted").Inc() })
	}
}
