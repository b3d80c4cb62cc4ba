package engine

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/statefun-go/statefun/internal/address"
	invokererr "github.com/statefun-go/statefun/internal/invoker"
	"github.com/statefun-go/statefun/internal/partition"
)

// Metrics are the engine's Prometheus collectors.
type Metrics struct {
	invocations     *prometheus.CounterVec
	invocationsOf   sync.Map // address.TypeName → *[2]prometheus.Counter: its ok and error series
	partitionsOf    sync.Map // partition → *partGauges
	batchSize       prometheus.Histogram
	callSeconds     prometheus.Histogram
	retries         *prometheus.CounterVec
	commitSeconds   prometheus.Histogram
	commitOps       prometheus.Histogram
	commitBytes     prometheus.Histogram
	queueDepth      *prometheus.GaugeVec
	delayedHeld     *prometheus.GaugeVec
	paged           *prometheus.GaugeVec
	ingressed       prometheus.Counter
	ingressRejected prometheus.Counter
	ingressReplayed prometheus.Counter
	ingressKeyReuse prometheus.Counter
	replayed        *prometheus.CounterVec
	stateRequest    *prometheus.HistogramVec
	stateReads      *prometheus.CounterVec
	repair          *repairGauges
}

// NewMetrics creates the collectors and registers them with reg (nil: not
// registered, for tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		invocations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "statefun_invocations_total", Help: "Requests sent to remote functions, by function type and outcome (ok, error).",
		}, []string{"function", "outcome"}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "statefun_batch_size", Help: "Invocations per request to a remote function.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 8),
		}),
		callSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "statefun_call_seconds", Help: "Round-trip time of requests to remote functions.",
			Buckets: prometheus.ExponentialBuckets(0.0002, 4, 10),
		}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "statefun_retries_total", Help: "Failed attempts that were scheduled for retry, by reason (call, violation).",
		}, []string{"reason"}),
		commitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "statefun_commit_seconds", Help: "Latency of one synced group commit.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 3, 10),
		}),
		commitOps: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "statefun_commit_ops", Help: "Store operations per group commit.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 9),
		}),
		commitBytes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "statefun_commit_bytes", Help: "Bytes per group commit.",
			Buckets: prometheus.ExponentialBuckets(64, 4, 10),
		}),
		queueDepth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "statefun_queue_depth", Help: "Messages waiting behind in-flight invocations, per partition.",
		}, []string{"partition"}),
		delayedHeld: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "statefun_delayed_in_memory", Help: "Delayed messages a partition holds in memory, per partition: its window of the earliest due (at most --timer-window) and those of commits not yet durable. The others wait in the store.",
		}, []string{"partition"}),
		paged: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "statefun_inbox_paged_messages", Help: "Messages a partition at its backlog bound left in its inbox in the store, per partition: they are paged in, in arrival order, as its backlog drains.",
		}, []string{"partition"}),
		ingressed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "statefun_ingress_messages_total", Help: "Messages accepted (durable) from ingresses.",
		}),
		ingressRejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "statefun_ingress_rejected_total", Help: "Ingress messages refused because the partition queue was full or Admit refused new work.",
		}),
		ingressReplayed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "statefun_ingress_replayed_total", Help: "Ingress requests answered from an earlier request with the same Idempotency-Key, without a new message.",
		}),
		ingressKeyReuse: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "statefun_ingress_key_reused_total", Help: "Cluster mode: ingress messages whose Idempotency-Key was used before, for the same address, by a different request: not delivered, kept as message dead letters.",
		}),
		replayed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "statefun_cluster_replayed_records_total", Help: "Cluster mode: records a partition had applied before and skipped when they came again (the consumer group's offsets were behind the partition's own read position), by source (messages: the messages topic; ingress: messages of a Kafka ingress record routed again).",
		}, []string{"source"}),
		// The engine's share of a state API request's latency: with the
		// HTTP round trip measured by the client, it says whether a slow
		// answer waited in the runtime (the partition's mailbox, the group
		// commit) or outside it (the network, the scheduler of a loaded
		// machine). BenchmarkStateAPI reports it beside the client's latency.
		stateReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "statefun_state_reads_total", Help: "State API reads by the path that answered: store (the address had no write waiting for durability) or mailbox (in the partition's order, after its applied writes).",
		}, []string{"path"}),
		stateRequest: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "statefun_state_request_seconds", Help: "Time from handing a state API read or mutation to its partition until its answer, by kind (read, and a mutation's ack: accepted, applied, committed).",
			Buckets: prometheus.ExponentialBuckets(0.00005, 3, 10),
		}, []string{"kind"}),
		repair: newRepairGauges(),
	}
	if reg != nil {
		reg.MustRegister(m.invocations, m.batchSize, m.callSeconds, m.retries, m.commitSeconds,
			m.commitOps, m.commitBytes, m.queueDepth, m.delayedHeld, m.paged, m.ingressed, m.ingressRejected, m.ingressReplayed, m.ingressKeyReuse, m.replayed, m.stateRequest, m.stateReads)
		reg.MustRegister(m.repair.collectors()...)
	}
	return m
}

func (m *Metrics) observeCall(inv partition.Invocation, err error, d time.Duration) {
	c, ok := m.invocationsOf.Load(inv.Addr.Type)
	if !ok {
		// Once per type: its label is built and looked up here, not on
		// every call. There are no more entries than series of the vector.
		t := inv.Addr.Type.String()
		c, _ = m.invocationsOf.LoadOrStore(inv.Addr.Type, &[2]prometheus.Counter{
			m.invocations.WithLabelValues(t, "ok"), m.invocations.WithLabelValues(t, "error")})
	}
	i := 0
	if err != nil {
		i = 1
	}
	c.(*[2]prometheus.Counter)[i].Inc()
	m.batchSize.Observe(float64(len(inv.Body.GetInvocation().GetInvocations())))
	m.callSeconds.Observe(d.Seconds())
}

func (m *Metrics) observeCommit(d time.Duration, reqs, ops, bytes int) {
	m.commitSeconds.Observe(d.Seconds())
	m.commitOps.Observe(float64(ops))
	m.commitBytes.Observe(float64(bytes))
}

// observeStateRequest records how long the engine took to answer a state
// API request of a kind ("read" or a mutation's ack mode).
func (m *Metrics) observeStateRequest(kind string, d time.Duration) {
	m.stateRequest.WithLabelValues(kind).Observe(d.Seconds())
}

func partLabel(p int) string { return strconv.Itoa(p) }

// partGauges are the backlog gauges of one partition.
type partGauges struct{ queue, paged, delayed prometheus.Gauge }

// partition returns partition p's backlog gauges. A runner sets them after
// every step, so their series are looked up once per partition, not on
// every step (a label string and a hash of it each time). There are no
// more entries than partitions.
func (m *Metrics) partition(p int) *partGauges {
	if g, ok := m.partitionsOf.Load(p); ok {
		return g.(*partGauges)
	}
	l := partLabel(p)
	g, _ := m.partitionsOf.LoadOrStore(p, &partGauges{queue: m.queueDepth.WithLabelValues(l),
		paged: m.paged.WithLabelValues(l), delayed: m.delayedHeld.WithLabelValues(l)})
	return g.(*partGauges)
}

// logFailure reports a failed attempt with its address and reason.
func (e *Engine) logFailure(p int, f partition.Failure) {
	reason := "call"
	if f.Violation {
		reason = "violation"
	}
	e.m.retries.WithLabelValues(reason).Inc()
	level := e.log.Warn
	if f.Attempt > 3 && !f.Violation {
		level = e.log.Error
	}
	if d, ok := e.opts.Functions.(endpointHealth); ok && !f.Paused &&
		invokererr.KindOf(f.Err) == invokererr.KindConnect && d.EndpointDown(f.Addr.Type) {
		// Every address of a down endpoint fails so: the endpoint's
		// state says it once (functions.Router).
		level = e.log.Debug
	}
	if !f.Paused && invokererr.IsUnknownFunctionType(f.Err) {
		// Every address of a type its function server does not know
		// fails the same way, and keeps failing until the type is
		// deployed: say so once per type, not once per address and
		// attempt.
		level = e.log.Debug
		if e.unknown.first(f.Addr.Type) {
			e.log.Warn("a function server does not know this function type (it answered \"unknown function type\"): its messages wait in their addresses' inboxes and are retried; deploy a function of this type there, or drop the messages (the state API's inbox repair); this is said once per type",
				"function", f.Addr.Type.String(), "id", f.Addr.ID, "partition", p, "error", f.Err)
		}
	}
	if f.Paused {
		e.log.Error("invocation failed, address paused by the poison policy (resume it through the state API)",
			"function", f.Addr.Type.String(), "id", f.Addr.ID, "partition", p,
			"attempt", f.Attempt, "protocol_violation", f.Violation, "error", f.Err)
		return
	}
	level("invocation failed, will retry",
		"function", f.Addr.Type.String(), "id", f.Addr.ID, "partition", p,
		"attempt", f.Attempt, "retry_in", time.UnixMilli(f.RetryAt).Sub(e.opts.Now()).Round(time.Millisecond),
		"protocol_violation", f.Violation, "error", f.Err)
}

// unknownTypes are the function types a function server answered as
// unknown, each reported once (logFailure). It holds at most
// maxUnknownTypes; past that, no more are reported at WARN.
type unknownTypes struct {
	mu    sync.Mutex
	types map[address.TypeName]struct{}
}

// maxUnknownTypes bounds the types unknownTypes remembers: the types that
// reach a call are bounded already (module.yaml and the wildcard bound),
// so this is only a backstop.
const maxUnknownTypes = 10_000

// first reports whether t is reported for the first time.
func (u *unknownTypes) first(t address.TypeName) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if _, ok := u.types[t]; ok || len(u.types) >= maxUnknownTypes {
		return false
	}
	if u.types == nil {
		u.types = map[address.TypeName]struct{}{}
	}
	u.types[t] = struct{}{}
	return true
}

// endpointHealth is a Functions that knows whether the endpoint serving a
// type is down (functions.Router.EndpointDown).
type endpointHealth interface {
	EndpointDown(t address.TypeName) bool
}
