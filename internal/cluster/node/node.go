// Package node joins the parts of a cluster-mode node (docs/explanation/cluster.md):
// the Kafka session (internal/cluster/session) and the engine
// (internal/engine) meet here, through adapters between their interfaces,
// which were written apart: the session's Engine (records polled from the
// messages topic) and the engine's Outbound (messages for other partitions,
// Kafka egress records). Besides, a Node is the playground ingress's sink on
// a cluster node (it produces to the messages topic), its member record,
// and the owner lookup the state API names in a 503.
//
// The record format of the messages topic is defined here: key
// str(namespace) str(type) str(id) of the target address (store.AddressKey),
// value the protocol.Envelope's protobuf encoding, as the store keeps it in
// an inbox; partition address.Partition(id, P).
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/cluster/clusterconfig"
	"github.com/statefun-go/statefun/internal/cluster/failover"
	"github.com/statefun-go/statefun/internal/cluster/members"
	"github.com/statefun-go/statefun/internal/cluster/refusals"
	"github.com/statefun-go/statefun/internal/cluster/session"
	"github.com/statefun-go/statefun/internal/engine"
	"github.com/statefun-go/statefun/internal/idempotency"
	"github.com/statefun-go/statefun/internal/ingress"
	"github.com/statefun-go/statefun/internal/kafkaegress"
	"github.com/statefun-go/statefun/internal/kafkaingress"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// ErrNotAcknowledged is wrapped by the playground ingress's error when
// Kafka did not acknowledge a message in time (a broker unreachable, the
// request ended): the message may or may not be in the messages topic. The
// ingress answers 503 with Retry-After.
var ErrNotAcknowledged = errors.New("cluster: Kafka did not acknowledge the message")

// Config configures a Node.
type Config struct {
	// Cluster is the node's validated configuration.
	Cluster *clusterconfig.Config
	// DB is the node's store, opened with the application's P.
	DB *store.DB
	// Metrics receives the session's collectors and the node's.
	Metrics prometheus.Registerer
	// Logger receives the node's log lines; nil means slog.Default().
	Logger *slog.Logger
	// Ingresses are the module's Kafka ingresses: the node's session
	// consumes their topics and routes their records through the
	// messages topic (docs/explanation/cluster.md, "Edges"). Two may not share a
	// topic.
	Ingresses []*kafkaingress.Mapping
	// Now is the clock that stamps the Kafka ingress dead letters' stored
	// time (the engine's, so that retention ages them alike); nil means
	// time.Now.
	Now func() time.Time
	// MaxMessageBytes, if > 0, is the largest record batch the brokers
	// take for the internal topics (topics.MaxMessageBytes), and
	// MaxMessageBytesOf the topic that sets it: records are bounded by it
	// where it is below the producer's max.request.size.
	MaxMessageBytes   int
	MaxMessageBytesOf string
}

// Node is a cluster-mode node's Kafka side and its adapters to the engine.
// New, then engine.New with Durability and Outbound, then Bind; Start
// (after the engine started) publishes the member record; Withdraw and
// Close on shutdown.
type Node struct {
	cfg         Config
	log         *slog.Logger
	p           int
	sess        *session.Session
	eng         Engine
	producer    *kgo.Client // the playground ingress's: idempotent, acks=all
	adm         *kadm.Client
	maxRecord   int // bytes of key plus value a Kafka egress record may have
	incarnation string
	watcher     atomic.Pointer[members.Watcher] // set by Start, read by the API's handlers, which serve before it
	published   atomic.Bool                     // read by /readyz
	stopKeep    func()                          // stops keeping the member record published (members.Keep) and waits
	detector    *failover.Detector              // nil when the probing is off
	skipped     *prometheus.CounterVec
	refusals    *refusals.Guard
}

// New makes the node's session and ingress producer; nothing talks to
// Kafka yet.
func New(cfg Config) (*Node, error) {
	if cfg.Cluster == nil || cfg.DB == nil {
		return nil, errors.New("cluster: node: Config.Cluster and Config.DB are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	n := &Node{cfg: cfg, log: cfg.Logger.With("node", cfg.Cluster.NodeID), p: cfg.DB.Partitions(), incarnation: members.NewIncarnation()}
	n.refusals = refusals.New(refusals.Config{Now: cfg.Now})
	scfg := session.Config{Cluster: cfg.Cluster, DB: cfg.DB, Metrics: cfg.Metrics, Logger: cfg.Logger, Refusals: n.refusals}
	if len(cfg.Ingresses) > 0 {
		in, err := newIngresses(n, cfg.Ingresses)
		if err != nil {
			return nil, err
		}
		scfg.Ingress = in
	}
	sess, err := session.New(scfg)
	if err != nil {
		return nil, err
	}
	n.sess = sess
	cl, err := cfg.Cluster.Client()
	if err != nil {
		return nil, fmt.Errorf("cluster: node: %w", err)
	}
	// No linger unless linger.ms says otherwise: a playground ingress
	// request waits for its record's acknowledgement, and franz-go's
	// default (10 ms) would add that to every request at light load.
	// Under load, records batch behind the requests in flight anyway.
	opts := append(append([]kgo.Opt{kgo.ProducerLinger(0)}, cl.Opts...), cl.ProducerOpts...)
	// The record names its partition (address.Partition, not Kafka's key
	// hash); idempotent writes are kgo's default, acks=all with them.
	opts = append(opts, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RequiredAcks(kgo.AllISRAcks()))
	if n.producer, err = kgo.NewClient(opts...); err != nil {
		return nil, fmt.Errorf("cluster: node: Kafka client: %w", err)
	}
	n.adm = kadm.NewClient(n.producer)
	n.maxRecord = 1 << 20
	if v, ok := n.producer.OptValue(kgo.ProducerBatchMaxBytes).(int32); ok {
		// A batch of one record carries about a hundred bytes besides its
		// key and value (as the Kafka egress relay reckons).
		n.maxRecord = max(int(v)-256, 1)
	}
	if b := cfg.MaxMessageBytes; b > 0 && b-256 < n.maxRecord {
		// The brokers would refuse what the producer sends: say so, and
		// refuse such records where they are made.
		n.log.Warn("cluster: the brokers take smaller records than this node's producer would send; records are limited to what they take (raise max.message.bytes of the topic, or lower max.request.size with --cluster-property, to silence this)",
			"topic", cfg.MaxMessageBytesOf, "max_message_bytes", b, "producer_max_bytes", n.maxRecord+256, "record_limit", max(b-256, 1))
		n.maxRecord = max(b-256, 1)
	}
	n.skipped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "statefun_cluster_skipped_records_total",
		Help: "Records of the messages topic that no statefun node wrote and that were skipped, by reason.",
	}, []string{"reason"})
	if cfg.Metrics != nil {
		cfg.Metrics.MustRegister(n.skipped)
	}
	return n, nil
}

func (n *Node) now() time.Time {
	if n.cfg.Now != nil {
		return n.cfg.Now()
	}
	return time.Now()
}

// MaxRecord is the largest key plus value of a Kafka egress record the
// node's producer takes: a function's record over it is a protocol
// violation at the egress's Route, as in embedded mode.
func (n *Node) MaxRecord() int { return n.maxRecord }

// Refusals is what Kafka refused of this node's transactions: the Kafka
// egress's route asks it about each record a function sends (a topic
// that does not exist, a record over a topic's limit), so that the record
// is a protocol violation of its response instead of an aborted
// transaction.
func (n *Node) Refusals() *refusals.Guard { return n.refusals }

// Durability is the engine's Options.Durability: the session.
func (n *Node) Durability() engine.Durability { return n.sess }

// Outbound is the engine's Options.Outbound: messages for other partitions
// and Kafka egress records, produced in the session's open transaction.
func (n *Node) Outbound() engine.Outbound { return outbound{n} }

// Engine is the engine as the node hands it to its session: the
// partitions this node runs and the records of the messages topic for
// them (the *engine.Engine made with the node's Durability and Outbound,
// and Options.Owned). The session calls it from its Run goroutine only
// (session.Engine).
type Engine interface {
	// Assign builds partition p's core from the store, which holds p's
	// changelog to its end, and runs it. It refuses a partition assigned
	// already, and one whose previous assignment still has requests that
	// heard neither Durable nor Fail.
	Assign(p int) error
	// Revoke stops running p: its core is dropped and the callers waiting
	// on it get engine.ErrMoved; its requests still in Durability settle
	// harmlessly. Revoking a partition not assigned does nothing.
	Revoke(p int)
	// Full reports whether p is at its limit of queued messages or bytes,
	// so its records are not fetched until it is not; false for a
	// partition not owned.
	Full(p int) bool
	// ForgetReadPosition drops p's stored position in the messages topic:
	// records now below it are new. Called after Assign, before p's first
	// arrivals.
	ForgetReadPosition(p int)
	// SubmitArrivals makes records of the messages topic for p, in offset
	// order, one request of Durability, submitted before it returns (their
	// offsets commit with the transaction it is encoded into). A command
	// whose mutation id was taken before is skipped, and a message whose
	// ingress key was; it is never refused for a full partition. The
	// channel gets nil once the request is durable, or its Fail error.
	SubmitArrivals(p int, recs []engine.Arrival) (<-chan error, error)
}

// Bind attaches the engine (made with Durability, Outbound and Owned) to
// the session. Call it before the engine starts.
func (n *Node) Bind(e Engine) {
	n.eng = e
	n.sess.Bind(arrivals{n})
}

// Start reads the member records (for Owner) and publishes this node's,
// with its advertised admin URL, and keeps it published until Withdraw or
// Close (members.Watcher.Keep); it starts probing the other nodes
// (internal/cluster/failover). Call it once the admin listener serves.
func (n *Node) Start(ctx context.Context) error {
	w, err := members.Watch(ctx, n.cfg.Cluster, n.log)
	if err != nil {
		return fmt.Errorf("cluster: node: reading member records: %w", err)
	}
	n.watcher.Store(w)
	started := time.Now()
	if err := members.Publish(ctx, n.cfg.Cluster, started, n.incarnation); err != nil {
		return err
	}
	n.published.Store(true)
	kctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Keep(kctx, n.cfg.Cluster, started, n.incarnation)
	}()
	n.stopKeep = func() { cancel(); <-done }
	d, err := failover.New(failover.Config{Cluster: n.cfg.Cluster, Members: w.All, Client: n.producer,
		Rejoin: n.sess.Rejoin, Logger: n.cfg.Logger, Metrics: n.cfg.Metrics})
	if err != nil {
		return fmt.Errorf("cluster: node: %w", err)
	}
	if d != nil {
		d.Start()
		n.detector = d
	}
	return nil
}

// Ready is nil once the node is assigned partitions, has restored them and
// serves them (for /readyz). A node the group assigns none is ready only
// when the group is stable and every partition has another owner (more
// nodes than partitions): right after it joined, the cooperative protocol
// gives it nothing in its first rebalance, and it must not report ready
// before the second one gives it its share.
func (n *Node) Ready() error {
	if !n.sess.Ready() {
		return fmt.Errorf("cluster: node %s: not serving every partition assigned to it yet (joining the group, or restoring)", n.cfg.Cluster.NodeID)
	}
	if !n.published.Load() {
		return fmt.Errorf("cluster: node %s: its member record is not published yet", n.cfg.Cluster.NodeID)
	}
	if n.sess.Owned() == 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		o, err := members.Owners(ctx, n.adm, n.cfg.Cluster)
		if err != nil {
			return fmt.Errorf("cluster: node %s: assigned no partition, and the group cannot be read: %w", n.cfg.Cluster.NodeID, err)
		}
		if o.State != "Stable" || len(o.Owners) < n.p {
			return fmt.Errorf("cluster: node %s: assigned no partition yet (the group is %s, %d of %d partitions assigned)", n.cfg.Cluster.NodeID, o.State, len(o.Owners), n.p)
		}
	}
	return nil
}

// Owner names the node that owns partition p now and its admin URL (empty
// when no member record of it is trusted), from the consumer group's
// assignment; ok is false when p has no owner at the moment or the group
// cannot be read.
func (n *Node) Owner(ctx context.Context, p int) (node, adminURL string, ok bool) {
	o, err := members.Owners(ctx, n.adm, n.cfg.Cluster)
	if err != nil {
		n.log.Debug("cluster: reading the group's assignment", "err", err)
		return "", "", false
	}
	node, ok = o.Owners[int32(p)]
	if !ok {
		return "", "", false
	}
	if w := n.watcher.Load(); w != nil {
		if m, found := w.Lookup(node); found {
			adminURL = m.AdminURL
		}
	}
	return node, adminURL, true
}

// Distrusted says why this node does not trust the member record of node
// (members.Watcher.Distrusted); "" when it has nothing against it. Owner
// and Assignment give no admin URL for such a node.
func (n *Node) Distrusted(node string) string {
	w := n.watcher.Load()
	if w == nil {
		return ""
	}
	return w.Distrusted(node)
}

// Assignment returns the consumer group's assignment now: the node that
// owns each partition (one without an owner is absent) and the admin URL
// of each of those nodes whose member record is known. The state API
// forwards and gathers with it (internal/cluster/forward).
func (n *Node) Assignment(ctx context.Context) (map[int]string, map[string]string, error) {
	o, err := members.Owners(ctx, n.adm, n.cfg.Cluster)
	if err != nil {
		return nil, nil, err
	}
	owners := make(map[int]string, len(o.Owners))
	urls := map[string]string{}
	w := n.watcher.Load()
	for p, node := range o.Owners {
		owners[int(p)] = node
		if _, seen := urls[node]; seen || w == nil {
			continue
		}
		if m, found := w.Lookup(node); found {
			urls[node] = m.AdminURL
		}
	}
	return owners, urls, nil
}

// Withdraw stops probing the other nodes (a node that stops removes
// nobody) and deletes this node's member record, on a clean shutdown.
func (n *Node) Withdraw() {
	n.detector.Stop()
	if !n.published.Load() {
		return
	}
	// Keep would answer the withdrawal with a new publication.
	n.stopKeep()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := members.Withdraw(ctx, n.cfg.Cluster, n.incarnation); err != nil {
		n.log.Warn("cluster: the member record was not withdrawn; other nodes may name this node as an owner until its partitions move", "err", err)
	}
	n.published.Store(false)
}

// Leave removes this node from the application's consumer group at once,
// by its static-membership instance id, so that its partitions move now
// rather than after the session timeout: a permanent stop (scaling down,
// --cluster-leave-on-stop), or a node that gave up because Kafka refused
// its commits; why says which, for the group's log. Call it after the
// engine, and with it the session, stopped: a node that left must commit
// nothing more. A failure is logged; the partitions then move after the
// session timeout (or when the other nodes find this one down), as
// without it.
func (n *Node) Leave(why string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := n.cfg.Cluster
	resps, err := n.adm.LeaveGroup(ctx, kadm.LeaveGroup(c.AppID).InstanceIDs(c.NodeID).
		Reason("statefun: node "+c.NodeID+" "+why))
	if err == nil {
		err = resps.Error()
	}
	if err != nil {
		n.log.Warn("cluster: the node did not leave the group; its partitions move after the session timeout", "err", err)
		return
	}
	n.log.Info("cluster: the node left the group; its partitions move to the other nodes now")
}

// Close stops the detector, the member watcher and the ingress producer;
// the session stops with the engine.
func (n *Node) Close() {
	n.detector.Stop()
	if n.stopKeep != nil {
		n.stopKeep()
	}
	if w := n.watcher.Load(); w != nil {
		w.Close()
	}
	n.producer.Close()
}

// Ingest produces a playground ingress message (or a state mutation's
// command) to the messages topic, at its address's partition, and returns
// once Kafka acknowledged it (all replicas in sync). A record over what
// the producer takes is refused with ingress.ErrTooLarge. It implements
// ingress.Sink.
func (n *Node) Ingest(ctx context.Context, env *protocol.Envelope) error {
	rec, err := n.record(env)
	if err != nil {
		return err
	}
	// Kafka would refuse it every time; ErrNotAcknowledged would have the
	// client retry forever.
	if size := len(rec.Key) + len(rec.Value); size > n.maxRecord {
		return fmt.Errorf("%w: its record in %s would be %d bytes (key and value), over the %d this node's Kafka producer takes (max.request.size, --cluster-property)",
			ingress.ErrTooLarge, rec.Topic, size, n.maxRecord)
	}
	if err := n.producer.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return fmt.Errorf("%w (%s, partition %d): %w", ErrNotAcknowledged, rec.Topic, rec.Partition, err)
	}
	return nil
}

// IngestOnce produces a message sent with an Idempotency-Key, the key in
// the record (Envelope.IngressKey), scoped to the target address: the
// owner of the address delivers the first message of each key and drops
// repeats (engine.SubmitArrivals), so a client that retries until it gets
// a 200 has sent one message. It never reports a replay — whether the key
// was seen before is known only to the owner, after the answer — so a
// repeat is answered 200 like the first (docs/explanation/cluster.md, "Edges").
func (n *Node) IngestOnce(ctx context.Context, env *protocol.Envelope, r idempotency.Request) (bool, error) {
	t := env.GetTarget()
	keyed := proto.Clone(env).(*protocol.Envelope)
	keyed.IngressKey = &protocol.IngressKey{Scope: r.Scope + "/" + t.GetId(), Key: r.Key, Fingerprint: r.Fingerprint}
	return false, n.Ingest(ctx, keyed)
}

// record is the messages-topic record of env.
func (n *Node) record(env *protocol.Envelope) (*kgo.Record, error) {
	key, p, err := Key(env, n.p)
	if err != nil {
		return nil, err
	}
	v, err := proto.MarshalOptions{Deterministic: true}.Marshal(env)
	if err != nil {
		return nil, fmt.Errorf("cluster: encoding a message: %w", err)
	}
	return &kgo.Record{Topic: n.cfg.Cluster.MessagesTopic(), Partition: int32(p), Key: key, Value: v}, nil
}

// Key returns the messages-topic key of a command (its target address,
// str(namespace) str(type) str(id)) and its partition among p: the
// message's target, or a mutation's. A Kafka ingress dead letter has no
// address: its key is str(ingress) str(topic) str("<partition>/<offset>")
// of its record, its partition engine.IngressDeadLetterPartition's.
func Key(env *protocol.Envelope, p int) ([]byte, int, error) {
	if d := env.GetIngressDeadLetter(); d != nil {
		return store.AddressKey(d.GetIngress(), d.GetTopic(), fmt.Sprintf("%d/%d", d.GetPartition(), d.GetOffset())),
			engine.IngressDeadLetterPartition(d.GetPartition(), p), nil
	}
	t := target(env)
	if t == nil {
		return nil, 0, errors.New("cluster: a command without a target address")
	}
	return store.AddressKey(t.GetNamespace(), t.GetType(), t.GetId()), address.Partition(t.GetId(), p), nil
}

// Decode reads a messages-topic record's value.
func Decode(value []byte) (*protocol.Envelope, error) {
	env := &protocol.Envelope{}
	if err := proto.Unmarshal(value, env); err != nil {
		return nil, err
	}
	return env, nil
}

func target(env *protocol.Envelope) *protocol.Address {
	if m := env.GetMutation(); m != nil {
		return m.GetTarget()
	}
	return env.GetTarget()
}

// outbound is the engine's Outbound over the session's.
type outbound struct{ n *Node }

// Message produces a message for another partition in the transaction.
func (o outbound) Message(key partition.InboxKey, env *protocol.Envelope) error {
	rec, err := o.n.record(env)
	if err != nil {
		return err
	}
	if int(rec.Partition) != key.Partition {
		return fmt.Errorf("cluster: a message for partition %d addressed to partition %d", key.Partition, rec.Partition)
	}
	return o.n.sess.Message(key.Partition, rec.Key, rec.Value)
}

// Egress produces a Kafka egress record in the transaction, mapped as the
// Kafka egress relay maps it (kafkaegress.ToRecord).
func (o outbound) Egress(from int, eg partition.Egress) error {
	rec, err := kafkaegress.ToRecord(eg.Record.GetArgument(), o.n.maxRecord)
	if err != nil {
		return fmt.Errorf("cluster: a record for egress %s from partition %d: %w", eg.Egress, from, err)
	}
	return o.n.sess.Egress(rec)
}

// arrivals is the session's Engine over the engine.
type arrivals struct{ n *Node }

func (a arrivals) Assign(p int) error { return a.n.eng.Assign(p) }
func (a arrivals) Revoke(p int)       { a.n.eng.Revoke(p) }
func (a arrivals) Full(p int) bool    { return a.n.eng.Full(p) }

func (a arrivals) ForgetReadPosition(p int) { a.n.eng.ForgetReadPosition(p) }

// SubmitArrivals decodes the records polled from partition p and submits
// them to the engine as one request. A record no statefun node could have
// written (it does not decode, names no target — or, for an ingress dead
// letter, no ingress — or belongs to another partition) is skipped with a
// log line and a metric: handing it over would make the engine refuse the
// whole run, and the session poll it again forever.
func (a arrivals) SubmitArrivals(p int, recs []*kgo.Record) error {
	arr := make([]engine.Arrival, 0, len(recs))
	for _, r := range recs {
		env, err := Decode(r.Value)
		reason := ""
		switch {
		case err != nil:
			reason = "undecodable"
		case env.GetIngressDeadLetter() != nil:
			reason = engine.IngressDeadLetterFault(env.GetIngressDeadLetter(), p, a.n.p)
		case target(env) == nil || env.GetMutation() != nil && env.GetMutation().GetId() == "":
			reason = "no-target"
		case address.Partition(target(env).GetId(), a.n.p) != p:
			reason = "wrong-partition"
		}
		if reason != "" {
			a.n.skipped.WithLabelValues(reason).Inc()
			a.n.log.Error("cluster: skipping a record of the messages topic that no statefun node wrote", "partition", p, "offset", r.Offset, "reason", reason, "err", err)
			continue
		}
		arr = append(arr, engine.Arrival{Offset: r.Offset, Env: env})
	}
	if len(arr) == 0 {
		return nil
	}
	_, err := a.n.eng.SubmitArrivals(p, arr)
	return err
}
