// Package session is the Kafka side of a cluster-mode node
// (docs/explanation/cluster.md, "The commit protocol" and "Moving partitions"): one
// kgo.GroupTransactSession per process, the restore of partitions the
// consumer group assigns, and the commit cycle that makes the engine's
// work durable in Kafka transactions.
//
// The engine hands its durable work to a Session (it is the engine's
// Durability): every request names its partition and is encoded into that
// partition's overlay, a store batch that is never committed by itself.
// Once per cycle the overlays become changelog records, produced in the
// transaction with the messages and egress records the requests handed to
// the Session during Encode (it is the engine's Outbound) and the offsets
// of the records polled for the engine. Only when the transaction has
// committed do the overlays reach the store, with the changelog position
// they reach, and do the requests hear that they are durable. An aborted
// transaction leaves no trace in the store: its requests fail with
// ErrAborted and the partitions they touched are rebuilt.
//
// Every call into the engine (Assign, Revoke, SubmitArrivals) and every
// request callback (Encode, Durable, AfterGroup, Fail) happens on the
// goroutine running Run.
package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/statefun-go/statefun/internal/cluster/balance"
	"github.com/statefun-go/statefun/internal/cluster/changelog"
	"github.com/statefun-go/statefun/internal/cluster/clusterconfig"
	"github.com/statefun-go/statefun/internal/cluster/cycle"
	"github.com/statefun-go/statefun/internal/cluster/refusals"
	"github.com/statefun-go/statefun/internal/engine/committer"
	"github.com/statefun-go/statefun/internal/kafkaclient"
	"github.com/statefun-go/statefun/internal/store"
)

// Engine is the engine side of the seam (docs/explanation/engine.md, "The
// cluster seam"). The session calls it only from Run's goroutine.
type Engine interface {
	// Assign builds partition p's core from the store, which the session
	// has just restored from p's changelog, and starts serving it. An
	// error stops the session.
	Assign(p int) error
	// Revoke stops serving p: its core is dropped, its waiting callers
	// are answered that it moved. Requests of p the engine submitted
	// before are failed by the session.
	Revoke(p int)
	// SubmitArrivals makes records polled from the messages topic for
	// partition p a request of the current transaction: it must Submit
	// that request (or requests) to the session before it returns, since
	// the records' offsets commit with the transaction. An error aborts
	// the transaction; the records are polled again.
	SubmitArrivals(p int, records []*kgo.Record) error
	// Full reports whether partition p holds as many queued messages as
	// it may: the session stops fetching p's records until it is not.
	Full(p int) bool
	// ForgetReadPosition drops p's stored position in the messages topic
	// (store.ReadPosition) from the engine's view: the session found it
	// past the topic's end, so records now below it are new. Called right
	// after Assign, before p's first arrivals.
	ForgetReadPosition(p int)
}

// Ingress is the module's Kafka ingresses as a node consumes them
// (docs/explanation/cluster.md, "Edges"): their topics are consumed by the node's
// group session beside the messages topic, and each polled record becomes
// messages produced to the messages topic in the transaction that commits
// the record's offset.
type Ingress interface {
	// Topics are the ingress topics. None may be an internal topic of the
	// application.
	Topics() []string
	// Start returns where ingress partitions the application's group has
	// no committed offset for start (the ingress's startupPosition),
	// given the offsets the group knows.
	Start(ctx context.Context, adm *kadm.Client, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]int64, error)
	// Route returns the messages a polled ingress record becomes, or, for
	// a record that cannot become a message, why, with the message that
	// keeps it as a dead letter (to the runtime partition that stores
	// it). Either way the messages are produced in the transaction that
	// commits the record's offset, so each is in the messages topic once.
	// An error aborts the transaction (the record is polled again).
	Route(r *kgo.Record) (msgs []Message, bad string, err error)
	// Committed is told of each ingress record of a committed
	// transaction, in poll order, with the reason Route gave for a bad
	// one: a record is counted (and a bad one logged) once, however many
	// aborted transactions routed it before.
	Committed(r *kgo.Record, bad string)
}

// Message is a record for the messages topic: the partition of its
// target's address, its key and value (docs/explanation/cluster.md, "The messages
// topic's records").
type Message struct {
	Partition  int
	Key, Value []byte
}

// Request is one unit of durable work of a cluster engine: a committer
// request whose writes all belong to one partition.
type Request interface {
	committer.Request
	// Partition is the partition whose overlay and changelog the
	// request's writes go to.
	Partition() int
}

// ErrAborted is wrapped by the error a request's Fail gets when the
// transaction that carried it was aborted (a rebalance, a fence, a broker
// error, an unknown outcome), or when it was queued for a partition the
// session rebuilds after such an abort. Not fatal: the partition is
// rebuilt from the store, which never saw the aborted work. It is
// committer.ErrAborted, the engine's too.
var ErrAborted = committer.ErrAborted

// ErrMoved is wrapped by the error a request's Fail gets when its
// partition is not served by this node (any more): revoked, lost, or not
// restored yet. It is committer.ErrMoved, the engine's too.
var ErrMoved = committer.ErrMoved

// ErrGaveUp is wrapped by the error Run returns when Kafka refused this
// node's commits for Config.Cluster's give-up time, none committing: the
// node gives its partitions up (the caller removes it from the group, so
// that other nodes serve them) and stops. It is cycle.ErrGaveUp.
var ErrGaveUp = cycle.ErrGaveUp

// MaxRebuildBackoff bounds the wait before rebuilding a partition whose
// own work keeps aborting the transaction.
const MaxRebuildBackoff = cycle.MaxRebuildBackoff

// Defaults of Config's zero values.
const (
	// DefaultMaxPollRecords bounds the records polled for one
	// transaction.
	DefaultMaxPollRecords = 10_000
	// DefaultMaxQueued is the number of waiting requests at which a cycle
	// stops polling and commits, without waiting out its gap.
	DefaultMaxQueued = 5_000
	// DefaultRestoreConcurrency is how many partitions restore at once.
	DefaultRestoreConcurrency = 2
	// DefaultRebuildBackoff is the first wait before rebuilding a
	// partition whose own work aborted the transaction.
	DefaultRebuildBackoff = time.Second
)

// Config configures a Session.
type Config struct {
	// Cluster is the node's validated configuration: brokers, application
	// and node ids, commit interval and client properties.
	Cluster *clusterconfig.Config
	// DB is the node's store.
	DB *store.DB
	// Metrics, if not nil, receives the session's collectors.
	Metrics prometheus.Registerer
	// Logger receives the session's log lines; nil means slog.Default().
	Logger *slog.Logger

	// MaxPollRecords bounds the records polled for one transaction;
	// MaxQueued is the number of waiting requests that ends a cycle's
	// polling early. Zero means the defaults.
	MaxPollRecords int
	MaxQueued      int
	// RestoreConcurrency bounds the partitions restoring at once; zero
	// means DefaultRestoreConcurrency.
	RestoreConcurrency int
	// RestoreBatchRecords is changelog.Config.BatchRecords of restores;
	// zero means its default.
	RestoreBatchRecords int
	// RebuildBackoff is the first wait before rebuilding a partition
	// whose own work aborted the transaction (an encoding error, a record
	// Kafka refused); it doubles with each such abort in a row, up to
	// MaxRebuildBackoff. Zero means DefaultRebuildBackoff.
	RebuildBackoff time.Duration

	// Ingress, if not nil, is the module's Kafka ingresses: the session
	// consumes their topics too.
	Ingress Ingress

	// Refusals, if not nil, learns the records Kafka refuses for a reason
	// that holds for every record like them (an egress topic that does
	// not exist, a record over a topic's limit), so that the egress's
	// route refuses the next one where a function makes it.
	Refusals *refusals.Guard

	// ClientOpts are added last to the session's Kafka clients (tests:
	// short heartbeat and session timeouts).
	ClientOpts []kgo.Opt
}

// Session is a node's consumer-group and transaction session. New makes
// it, Bind attaches the engine, Run runs it until its context ends.
type Session struct {
	cfg  Config
	cl   *kafkaclient.Cluster
	log  *slog.Logger
	m    *metrics
	msgs string // the messages topic
	clog string // the changelog topic
	p    int32  // the application's partitions

	eng     Engine
	ingress map[string]bool // the ingress topics
	built   chan struct{}   // closed once gts is set

	// The queue of submitted requests.
	mu     sync.Mutex
	queue  []Request
	err    error // set once: why Submit refuses (stopped)
	wake   chan struct{}
	events []event
	// starts are ingress partitions placed at their startup position and
	// not committed yet: the next transaction commits them (ingressStarts).
	starts map[string]map[int32]int64

	// Readiness, read from any goroutine.
	joined    atomic.Bool
	owned     atomic.Int64 // partitions assigned, restored or restoring
	restoring atomic.Int64
	running   atomic.Bool

	// Owned by Run's goroutine.
	gts *kgo.GroupTransactSession
	// cyc decides the commit cycle: which partitions serve, restore and
	// rebuild, and how each transaction goes; the session does the I/O
	// its decisions call for.
	cyc        *cycle.Machine
	parts      map[int32]*part // the resources of the partitions cyc owns
	restoreSem chan struct{}
	restoreWG  sync.WaitGroup
	txn        atomic.Pointer[producing] // the open transaction, while requests encode

	// What Status reads (status.go).
	st        status
	partsMu   sync.Mutex
	partsView map[int32]bool // assigned partitions: serving (true) or restoring

	// testHookCommit, if set, runs on Run's goroutine after a cycle took
	// its requests and before it begins the transaction, with the
	// requests (tests stall a node there).
	testHookCommit func([]Request)
	// testHookSettled, if set, replaces the client's answer to whether a
	// topic's partitions are settled (topicSettled).
	testHookSettled func(cl *kgo.Client, topic string) bool
}

// part is what the session holds for a partition the group assigned to
// this node; its state (restoring, serving, paused) is the Machine's.
type part struct {
	cancel  context.CancelFunc // stops its restore
	log     *changelog.Log     // set once restored and assigned to the engine
	started time.Time          // when its current restore began
}

// New checks cfg and returns a session; nothing talks to Kafka before Run.
func New(cfg Config) (*Session, error) {
	switch {
	case cfg.Cluster == nil:
		return nil, errors.New("cluster: session: Config.Cluster is nil")
	case cfg.DB == nil:
		return nil, errors.New("cluster: session: Config.DB is nil")
	case cfg.MaxPollRecords < 0 || cfg.MaxQueued < 0 || cfg.RestoreConcurrency < 0 || cfg.RestoreBatchRecords < 0:
		return nil, fmt.Errorf("cluster: session: MaxPollRecords (%d), MaxQueued (%d), RestoreConcurrency (%d) and RestoreBatchRecords (%d) must not be negative",
			cfg.MaxPollRecords, cfg.MaxQueued, cfg.RestoreConcurrency, cfg.RestoreBatchRecords)
	}
	cl, err := cfg.Cluster.Client()
	if err != nil {
		return nil, fmt.Errorf("cluster: session: %w", err)
	}
	if cfg.MaxPollRecords == 0 {
		cfg.MaxPollRecords = DefaultMaxPollRecords
	}
	if cfg.MaxQueued == 0 {
		cfg.MaxQueued = DefaultMaxQueued
	}
	if cfg.RestoreConcurrency == 0 {
		cfg.RestoreConcurrency = DefaultRestoreConcurrency
	}
	if cfg.RebuildBackoff <= 0 {
		cfg.RebuildBackoff = DefaultRebuildBackoff
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Session{
		cfg:        cfg,
		cl:         cl,
		log:        cfg.Logger.With("node", cfg.Cluster.NodeID),
		m:          newMetrics(cfg.Metrics),
		msgs:       cfg.Cluster.MessagesTopic(),
		clog:       cfg.Cluster.ChangelogTopic(),
		p:          int32(cfg.DB.Partitions()),
		wake:       make(chan struct{}, 1),
		parts:      map[int32]*part{},
		restoreSem: make(chan struct{}, cfg.RestoreConcurrency),
		ingress:    map[string]bool{},
		built:      make(chan struct{}),
		cyc: cycle.New(cycle.Config{RebuildBackoff: cfg.RebuildBackoff, GiveUpAfter: cfg.Cluster.GiveUpAfterOrDefault(),
			Interval: cfg.Cluster.CommitIntervalOrDefault()}),
	}
	if cfg.Ingress != nil {
		for _, t := range cfg.Ingress.Topics() {
			switch t {
			case "":
				return nil, errors.New("cluster: session: an ingress topic without a name")
			case s.msgs, s.clog, cfg.Cluster.MetaTopic():
				return nil, fmt.Errorf("cluster: session: ingress topic %s is one of the application's internal topics", t)
			}
			s.ingress[t] = true
		}
	}
	return s, nil
}

// Bind attaches the engine the session drives. Call it once, before Run.
func (s *Session) Bind(e Engine) { s.eng = e }

// Submit queues r for the next transaction. r must be a Request (name its
// partition). It returns an error wrapping committer.ErrStopped once the
// session stopped; r is then not called back.
func (s *Session) Submit(r committer.Request) error {
	req, ok := r.(Request)
	if !ok {
		return fmt.Errorf("cluster: session: request %T names no partition (it needs a Partition() int method)", r)
	}
	if p := req.Partition(); p < 0 || p >= int(s.p) {
		return fmt.Errorf("cluster: session: request %T names partition %d, want 0..%d", r, p, s.p-1)
	}
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return err
	}
	s.queue = append(s.queue, req)
	// The first request waiting wakes the cycle's poll: work commits as
	// soon as the cadence allows (cycle.Machine.PollFor), not at the end
	// of an interval. So does a full queue, which ends polling.
	wake := len(s.queue) == 1 || len(s.queue) >= s.cfg.MaxQueued
	s.mu.Unlock()
	if wake {
		s.signal()
	}
	return nil
}

// Pending returns the number of requests waiting for a transaction.
func (s *Session) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

// Close stops the session: requests still waiting are failed with an error
// wrapping committer.ErrStopped, later Submits fail. Call it when Run is
// not running.
func (s *Session) Close() { s.stop(committer.ErrStopped) }

// Ready reports whether the node serves every partition the group assigned
// to it: it joined the group and no partition is restoring (for /readyz;
// see Owned for a node assigned none).
func (s *Session) Ready() bool {
	return s.running.Load() && s.joined.Load() && s.restoring.Load() == 0
}

// Owned returns the number of partitions the group assigned to this node,
// restored or restoring.
func (s *Session) Owned() int { return int(s.owned.Load()) }

// Rejoin makes the node's group member rejoin the group now rather than at
// its next heartbeat: another member was removed (internal/cluster/failover),
// and the rebalance completes only once every member has rejoined. A no-op
// before Run built the client.
func (s *Session) Rejoin() {
	select {
	case <-s.built:
		s.gts.Client().ForceRebalance()
	default:
	}
}

// stop refuses later Submits with err (the first one wins) and fails the
// waiting requests with it.
func (s *Session) stop(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	err = s.err
	q := s.queue
	s.queue = nil
	s.mu.Unlock()
	for _, r := range q {
		r.Fail(err)
	}
}

// signal wakes Run's goroutine from a poll.
func (s *Session) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// take returns the waiting requests, in submission order.
func (s *Session) take() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queue
	s.queue = nil
	return q
}

// purge fails the waiting requests of partition p with err: the core that
// submitted them is gone (revoked, or rebuilt after an abort).
func (s *Session) purge(p int32, err error) {
	s.mu.Lock()
	var gone []Request
	kept := s.queue[:0]
	for _, r := range s.queue {
		if int32(r.Partition()) == p {
			gone = append(gone, r)
		} else {
			kept = append(kept, r)
		}
	}
	clear(s.queue[len(kept):])
	s.queue = kept
	s.mu.Unlock()
	for _, r := range gone {
		r.Fail(err)
	}
}

func (s *Session) aborted(cause error) error {
	return fmt.Errorf("%w: %w", ErrAborted, cause)
}

func (s *Session) moved(p int32, why string) error {
	return fmt.Errorf("%w: partition %d %s", ErrMoved, p, why)
}

// Run is the node's session: it joins the consumer group, restores the
// partitions assigned to it, and runs the commit cycle, until ctx ends
// (it then returns nil) or a fatal error (a fenced transactional id, a
// store error, an engine that cannot take a partition), which it returns
// after failing every waiting request with it. Bind must have been
// called.
func (s *Session) Run(ctx context.Context) (err error) {
	if s.eng == nil {
		return errors.New("cluster: session: Run before Bind: no engine to drive")
	}
	if s.running.Swap(true) {
		return errors.New("cluster: session: Run called twice")
	}
	defer s.running.Store(false)
	gts, err := kgo.NewGroupTransactSession(s.clientOpts()...)
	if err != nil {
		return fmt.Errorf("cluster: session: Kafka client: %w", err)
	}
	if err := checkTimeouts(gts.Client()); err != nil {
		gts.Close()
		return err
	}
	s.gts = gts
	close(s.built)
	rctx, cancelRestores := context.WithCancel(ctx)
	defer func() {
		cancelRestores()
		s.restoreWG.Wait()
		// A static member does not leave the group when it closes: its
		// partitions wait for it for the session timeout, so that a
		// restart keeps them.
		gts.Close()
		stopErr := committer.ErrStopped
		if err != nil {
			stopErr = fmt.Errorf("%w: %w", committer.ErrStopped, err)
		}
		s.stop(stopErr)
	}()
	for {
		if ctx.Err() != nil {
			return nil
		}
		if err := s.handleEvents(rctx); err != nil {
			return err
		}
		if err := s.rearmRevocations(ctx); err != nil {
			return err
		}
		s.resumeDrained()
		t := s.cyc.Begin()
		pl, err := s.poll(ctx, t)
		if err != nil {
			t.Discard()
			return err
		}
		if ctx.Err() != nil {
			t.Discard()
			return nil
		}
		if err := s.handleEvents(rctx); err != nil {
			t.Discard()
			return err
		}
		reqs := s.take()
		if len(reqs) == 0 && t.Idle() && len(pl.ingress) == 0 && !s.hasStarts() {
			t.Discard()
			continue
		}
		if s.testHookCommit != nil {
			s.testHookCommit(reqs)
		}
		if err := s.commit(ctx, rctx, t, reqs, pl); err != nil {
			return err
		}
	}
}

// checkTimeouts refuses a client whose rebalances may outlast its
// transactions (kafkaclient.RebalanceShare says why): the properties are
// checked where they are read, this guards the options a caller adds.
func checkTimeouts(cl *kgo.Client) error {
	rebalance, _ := cl.OptValue(kgo.RebalanceTimeout).(time.Duration)
	txn, _ := cl.OptValue(kgo.TransactionTimeout).(time.Duration)
	if kafkaclient.RebalanceShare*rebalance > txn {
		return fmt.Errorf("cluster: session: the rebalance timeout %v is longer than a third of the transaction timeout %v: a transaction that waits for a rebalance to end would outlive its timeout and fence this node; lower max.poll.interval.ms or raise transaction.timeout.ms", rebalance, txn)
	}
	return nil
}

// DefaultFetchMaxWait is how long a fetch of the session waits for records
// unless fetch.max.wait.ms says otherwise: the Kafka consumer's default.
// The client's own default (5 s) held up every partition resumed while a
// fetch was in flight — after a restore, a rebuild or a full queue — for up
// to that long: a node that had just reported ready took 5.1 s to take the
// first message in.
const DefaultFetchMaxWait = 500 * time.Millisecond

// clientOpts are the options of the node's group transact session.
func (s *Session) clientOpts() []kgo.Opt {
	c := s.cfg.Cluster
	// First, so that fetch.max.wait.ms (in GroupOpts) overrides it.
	opts := []kgo.Opt{kgo.FetchMaxWait(DefaultFetchMaxWait)}
	opts = append(opts, s.cl.Opts...)
	opts = append(opts, s.cl.GroupOpts...)
	opts = append(opts, s.cl.ProducerOpts...)
	topics := []string{s.msgs}
	for t := range s.ingress {
		topics = append(topics, t)
	}
	opts = append(opts,
		kgo.ConsumerGroup(c.Group()),
		kgo.ConsumeTopics(topics...),
		kgo.InstanceID(c.NodeID),
		kgo.TransactionalID(c.TransactionalID()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Where a partition without a usable offset starts: the start of
		// what Kafka keeps. The messages topic's partitions do not depend
		// on it (a restored partition resumes from its own read position,
		// seekStored); ingress partitions without a committed offset are
		// placed at their ingress's startup position (ingressOffsets), so
		// this is where one resumes whose offset fell out of retention.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.RequireStableFetchOffsets(),
		// Cooperative-sticky, each topic balanced on its own: runtime
		// partitions spread evenly beside ingress topics.
		kgo.Balancers(balance.CooperativeSticky()),
		kgo.RecordPartitioner(newPartitioner(s.msgs, s.clog)),
		kgo.OnPartitionsAssigned(s.onAssigned),
		kgo.OnPartitionsRevoked(s.onRevoked),
		kgo.OnPartitionsLost(s.onLost),
	)
	if len(s.ingress) > 0 {
		opts = append(opts, kgo.AdjustFetchOffsetsFn(s.ingressOffsets))
	}
	return append(opts, s.cfg.ClientOpts...)
}
