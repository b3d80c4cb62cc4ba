// Package kafkaingress is the Kafka ingress of the embedded engine
// (io.statefun.kafka.v1/ingress): a consumer-group member that turns the
// records of its topics into messages, exactly once. Each batch of records
// of one Kafka partition is made durable in one engine commit together with
// the partition's position (engine.IngestFrom); after a restart consumption
// resumes from the stored positions, and the group's committed offsets,
// written after the local commit, only feed lag tools. docs/reference/kafka-ingress.md
// is the contract.
package kafkaingress

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/statefun-go/statefun/internal/address"
)

// StartupKind says where a Kafka partition without a stored position
// starts (module.yaml's startupPosition.type).
type StartupKind string

// The startup positions of io.statefun.kafka.v1/ingress.
const (
	// StartGroupOffsets starts at the consumer group's committed offset, or
	// at Config.AutoOffsetReset when the group has none.
	StartGroupOffsets StartupKind = "group-offsets"
	// StartEarliest starts at the oldest record still in the log.
	StartEarliest StartupKind = "earliest"
	// StartLatest starts after the newest committed record.
	StartLatest StartupKind = "latest"
	// StartSpecificOffsets starts each listed partition at its offset; the
	// others as StartGroupOffsets.
	StartSpecificOffsets StartupKind = "specific-offsets"
	// StartDate starts at the first record whose timestamp is at or after
	// Startup.Date (the end of the log when there is none).
	StartDate StartupKind = "date"
)

// Startup is module.yaml's startupPosition.
type Startup struct {
	// Kind defaults to StartLatest, StateFun's default.
	Kind StartupKind
	// SpecificOffsets holds, for StartSpecificOffsets, topic → partition →
	// offset.
	SpecificOffsets map[string]map[int32]int64
	// Date is the instant of StartDate.
	Date time.Time
}

// Route is one entry of module.yaml's topics: every record of Topic goes,
// typed ValueType, to each of Targets.
type Route struct {
	Topic     string
	ValueType string
	Targets   []address.TypeName
}

// Config configures one Kafka ingress. The runtime fills it from the
// parsed module.yaml.
type Config struct {
	// ID is the ingress's id (its typename, "namespace/name"); positions
	// and dead letters are stored under it.
	ID string
	// Brokers are the bootstrap servers (module.yaml's address).
	Brokers []string
	// GroupID is the consumer group (consumerGroupId). Required: lag tools
	// read the group's offsets, and the group assigns the partitions.
	GroupID string
	// Routes say where each topic's records go.
	Routes []Route
	// AutoOffsetReset is where a partition starts when its offset is not
	// known or out of range: "earliest" or "latest" (the default).
	AutoOffsetReset string
	// Startup is where partitions without a stored position start.
	Startup Startup
	// ClientOpts are the client properties mapped to franz-go options
	// (security, timeouts, fetch sizes). The options that carry this
	// package's guarantees are applied after them and win: the group, the
	// topics, read_committed, manual offset commits, the cooperative-sticky
	// balancer.
	ClientOpts []kgo.Opt
	// InstanceID is the consumer's group.instance.id (static membership);
	// empty means "statefun-" + ID. A runtime killed without leaving the
	// group (SIGKILL, power loss) is then replaced at once by its restart,
	// instead of after the group's session timeout (45 s by default), and
	// a second runtime consuming with the same group — which embedded mode
	// does not support, positions being local to one store — is fenced
	// with an error instead of silently taking partitions. A
	// group.instance.id client property (in ClientOpts) wins.
	InstanceID string
	// KeepMembership, when true, makes Close keep the consumer a static
	// member of its group instead of leaving it: a restart within the
	// session timeout gets its partitions back without a rebalance, but
	// any other consumer joining the group meanwhile (another application
	// given the same consumerGroupId) waits until that session times out.
	// False, the default, leaves the group on Close (by instance id), so
	// the next consumer to join — this runtime restarted, or another —
	// is assigned the partitions at once.
	KeepMembership bool
	// JoinReportInterval is how long the consumer waits to join its group
	// before it logs, at WARN, what the group waits for (its members and
	// the partitions they hold), and again after each further interval
	// until it joins. Zero means 5s; a negative value never reports.
	JoinReportInterval time.Duration
	// MaxBatchRecords bounds the records of one Kafka partition made
	// durable in one engine commit. Default 500.
	MaxBatchRecords int
	// MaxValueBytes, when positive, refuses (as a dead letter) a record
	// whose value is larger: the function's endpoint could not carry it.
	MaxValueBytes int
	// ReadyTimeout is how long without a successful request to any broker
	// makes Ready fail. Default 15s.
	ReadyTimeout time.Duration
	// CommitInterval is how often the durable positions are committed to
	// the consumer group (for lag tools). Default 1s.
	CommitInterval time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Metrics may be nil.
	Metrics *Metrics
	// Now is the clock of readiness and dead-letter logging; default
	// time.Now.
	Now func() time.Time
}

// DefaultJoinReportInterval is Config.JoinReportInterval's default: longer
// than a join usually takes (a Kafka broker delays the first join of an
// empty group by group.initial.rebalance.delay.ms, 3 s by default), so a
// normal start logs no warning.
const DefaultJoinReportInterval = 5 * time.Second

// ErrConfig is wrapped by every error New returns for a bad Config.
var ErrConfig = errors.New("kafkaingress: bad configuration")

func (c *Config) check() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: ingress %s: %s", ErrConfig, c.ID, fmt.Sprintf(format, args...))
	}
	switch {
	case c.ID == "":
		return fmt.Errorf("%w: ID is required", ErrConfig)
	case len(c.Brokers) == 0:
		return bad("address (the brokers) is required")
	case c.GroupID == "":
		return bad("consumerGroupId is required")
	case len(c.Routes) == 0:
		return bad("topics is empty")
	}
	seen := map[string]bool{}
	for _, r := range c.Routes {
		switch {
		case r.Topic == "":
			return bad("a topic without a name")
		case seen[r.Topic]:
			return bad("topic %q is routed twice", r.Topic)
		case len(r.Targets) == 0:
			return bad("topic %q has no targets", r.Topic)
		}
		if err := address.CheckTypename(r.ValueType); err != nil {
			return bad("topic %q: valueType: %v", r.Topic, err)
		}
		for _, t := range r.Targets {
			if err := address.CheckFunctionType(t); err != nil {
				return bad("topic %q: target %s: %v", r.Topic, t, err)
			}
		}
		seen[r.Topic] = true
	}
	switch c.AutoOffsetReset {
	case "":
		c.AutoOffsetReset = "latest"
	case "earliest", "latest":
	default:
		return bad("autoOffsetResetPosition %q is not earliest or latest", c.AutoOffsetReset)
	}
	switch c.Startup.Kind {
	case "":
		c.Startup.Kind = StartLatest
	case StartGroupOffsets, StartEarliest, StartLatest:
	case StartSpecificOffsets:
		for topic, ps := range c.Startup.SpecificOffsets {
			if !seen[topic] {
				return bad("startupPosition.offsets names topic %q, which is not among the topics", topic)
			}
			for p, off := range ps {
				if p < 0 || off < 0 {
					return bad("startupPosition.offsets: %s/%d: %d is not a partition and offset", topic, p, off)
				}
			}
		}
	case StartDate:
		if c.Startup.Date.IsZero() {
			return bad("startupPosition.date is required for type date")
		}
	default:
		return bad("startupPosition.type %q is not one of group-offsets, earliest, latest, specific-offsets, date", c.Startup.Kind)
	}
	if c.MaxBatchRecords <= 0 {
		c.MaxBatchRecords = 500
	}
	if c.ReadyTimeout <= 0 {
		c.ReadyTimeout = 15 * time.Second
	}
	if c.CommitInterval <= 0 {
		c.CommitInterval = time.Second
	}
	if c.JoinReportInterval == 0 {
		c.JoinReportInterval = DefaultJoinReportInterval
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics(nil)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}
