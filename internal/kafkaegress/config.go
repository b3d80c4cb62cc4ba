package kafkaegress

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Semantic is a Kafka egress's delivery semantic (module.yaml's
// deliverySemantic.type).
type Semantic int

const (
	// AtLeastOnce: an idempotent producer with acks=all; a batch leaves the
	// outbox once Kafka acknowledged every record of it. Never lost; a
	// crash may send a batch again. StateFun's default.
	AtLeastOnce Semantic = iota
	// ExactlyOnce: a transactional producer; each transaction holds a batch
	// and the egress's outbox position. A read_committed consumer sees each
	// record once, across crashes.
	ExactlyOnce
	// None: records are handed to the producer and leave the outbox at
	// once; whatever the producer cannot deliver (a crash, a Kafka error)
	// is lost.
	None
)

// String returns the module.yaml spelling.
func (s Semantic) String() string {
	switch s {
	case AtLeastOnce:
		return "at-least-once"
	case ExactlyOnce:
		return "exactly-once"
	case None:
		return "none"
	}
	return fmt.Sprintf("Semantic(%d)", int(s))
}

// ParseSemantic reads module.yaml's deliverySemantic.type; an empty string
// is StateFun's default, at-least-once.
func ParseSemantic(s string) (Semantic, error) {
	switch s {
	case "", "at-least-once":
		return AtLeastOnce, nil
	case "exactly-once":
		return ExactlyOnce, nil
	case "none":
		return None, nil
	}
	return 0, fmt.Errorf("kafkaegress: delivery semantic %q is not one of exactly-once, at-least-once, none", s)
}

// DefaultMarkerTopic is the compacted topic the exactly-once relays write
// their outbox positions to.
const DefaultMarkerTopic = "statefun-egress-positions"

// Defaults of Config.
const (
	DefaultBatchRecords     = 1000
	DefaultBatchBytes       = 4 << 20
	DefaultPollInterval     = 5 * time.Millisecond
	DefaultPingInterval     = 5 * time.Second
	DefaultStallAfter       = 10 * time.Second
	DefaultRetryBase        = 100 * time.Millisecond
	DefaultRetryMax         = 10 * time.Second
	DefaultTimeout          = 30 * time.Second
	DefaultTransactionIDFmt = "statefun-egress-%s"
)

// Config is one Kafka egress (io.statefun.kafka.v1/egress).
type Config struct {
	// ID is the egress's typename, "namespace/type" (module.yaml's id).
	// Required.
	ID string
	// Brokers are the seed brokers, host:port (module.yaml's address).
	// Required.
	Brokers []string
	// Semantic is the delivery semantic.
	Semantic Semantic
	// TransactionTimeout is the Kafka transaction timeout of an
	// exactly-once egress (module.yaml's transactionTimeout). Required for
	// ExactlyOnce, ignored otherwise.
	TransactionTimeout time.Duration
	// TransactionalID is the producer's transactional id (exactly-once).
	// It must stay the same across restarts of this runtime — it is what
	// fences a crashed predecessor and keys the position marker — and
	// differ from every other producer on the cluster. Empty means
	// "statefun-egress-<ID>": set it when two runtimes with an egress of
	// the same id share a Kafka cluster.
	TransactionalID string
	// MarkerTopic is the compacted topic of outbox positions; empty means
	// DefaultMarkerTopic. It is created (one partition,
	// cleanup.policy=compact) when missing.
	MarkerTopic string
	// ClientOpts are the client properties of module.yaml, mapped to
	// franz-go options (security, client.id, batching, timeouts). They are
	// applied first; the relay's own options (seed brokers, transactional
	// id, transaction timeout, acks and idempotence of the semantic) come
	// after them and win. They must not set a transactional id.
	ClientOpts []kgo.Opt
	// Store, when set, is the store whose outbox the relay delivers: the
	// exactly-once relay writes its identity into every position marker
	// and, at start, accepts only a marker it can prove was written from
	// this store (docs/reference/kafka-egress.md, "Whose marker is it"). The store
	// (*store.DB) implements it. Nil trusts any marker (tests).
	Store Store
	// ResetMarker, when set, names the one marker of another store (or an
	// unprovable one) that the operator chose to replace: met at start,
	// the relay commits a marker of this store in its place and delivers
	// the outbox from its oldest record. A marker it does not name is
	// still refused.
	ResetMarker *MarkerRef
	// Operator says who asked for ResetMarker, for the log (user@host).
	Operator string
	// BatchRecords and BatchBytes bound one batch (one transaction, for
	// exactly-once): at most this many records, and the batch is closed
	// once its values and keys reach BatchBytes.
	BatchRecords int
	BatchBytes   int
	// PollInterval is how long the relay waits before looking at an empty
	// outbox again.
	PollInterval time.Duration
	// PingInterval is how often an idle relay checks that a broker answers,
	// for readiness.
	PingInterval time.Duration
	// StallAfter is how long delivering a batch may take before readiness
	// reports the egress as not connected.
	StallAfter time.Duration
	// Timeout bounds each step with Kafka — connecting and fencing,
	// delivering a batch, committing — before it is abandoned and retried.
	// Zero means TransactionTimeout for exactly-once, DefaultTimeout
	// otherwise.
	Timeout time.Duration
	// RetryBase and RetryMax bound the backoff between attempts after a
	// failure (doubling from RetryBase up to RetryMax).
	RetryBase, RetryMax time.Duration
	// Logger receives failures and reconnections; nil means slog.Default.
	Logger *slog.Logger
	// Metrics are the shared collectors (NewMetrics); nil means none.
	Metrics *Metrics
}

// resolve fills the defaults and checks the fields.
func (c *Config) resolve() error {
	ns, typ, ok := strings.Cut(c.ID, "/")
	if !ok || ns == "" || typ == "" {
		return fmt.Errorf("kafkaegress: egress id %q is not namespace/type", c.ID)
	}
	if len(c.Brokers) == 0 {
		return fmt.Errorf("kafkaegress: egress %s: no broker address", c.ID)
	}
	switch c.Semantic {
	case ExactlyOnce:
		if c.TransactionTimeout <= 0 {
			return fmt.Errorf("kafkaegress: egress %s: exactly-once needs a positive transaction timeout", c.ID)
		}
		if c.TransactionalID == "" {
			c.TransactionalID = fmt.Sprintf(DefaultTransactionIDFmt, c.ID)
		}
	case AtLeastOnce, None:
	default:
		return fmt.Errorf("kafkaegress: egress %s: unknown delivery semantic %d", c.ID, int(c.Semantic))
	}
	if c.MarkerTopic == "" {
		c.MarkerTopic = DefaultMarkerTopic
	}
	if err := checkTopic(c.MarkerTopic); err != nil {
		return fmt.Errorf("kafkaegress: egress %s: marker topic: %v", c.ID, err)
	}
	if c.BatchRecords <= 0 {
		c.BatchRecords = DefaultBatchRecords
	}
	if c.BatchBytes <= 0 {
		c.BatchBytes = DefaultBatchBytes
	}
	if c.PollInterval <= 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.PingInterval <= 0 {
		c.PingInterval = DefaultPingInterval
	}
	if c.StallAfter <= 0 {
		c.StallAfter = DefaultStallAfter
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
		if c.Semantic == ExactlyOnce {
			c.Timeout = c.TransactionTimeout
		}
	}
	if c.RetryBase <= 0 {
		c.RetryBase = DefaultRetryBase
	}
	if c.RetryMax < c.RetryBase {
		c.RetryMax = max(DefaultRetryMax, c.RetryBase)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// errCrashed ends a relay without any cleanup: tests use it to stand in for
// a process that dies at a chosen point.
var errCrashed = errors.New("kafkaegress: crashed (test)")
