package kafkaclient

import (
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/statefun-go/statefun/internal/module"
)

// Cluster is the client configuration of a cluster-mode node: the Kafka
// clients of `statefun run` with cluster settings (docs/explanation/cluster.md). The
// node decides its consumer group, instance id, transactional id,
// isolation level and acks itself, so properties that would change those
// are refused rather than silently overridden.
type Cluster struct {
	// Opts are for every client of the node: seed brokers, security,
	// client id, metadata age, idle and dial timeouts, retry backoff.
	Opts []kgo.Opt
	// GroupOpts are for the node's consumer group session: session,
	// heartbeat and rebalance timeouts, fetch sizes, rack, CRC checks.
	GroupOpts []kgo.Opt
	// ProducerOpts are for its producers: compression, linger, largest
	// batch, request and transaction timeouts.
	ProducerOpts []kgo.Opt
	// Warnings are properties that are ignored; log each once.
	Warnings []*module.Error
}

// ForCluster maps the client properties of a cluster-mode node. Errors and
// warnings name each property by its key alone, at the position its Pos
// gives (a properties file and line, or the flag it came from). It returns
// module.Errors when any property cannot be honoured. read may be nil for
// os.ReadFile.
func ForCluster(brokers []string, props []module.KafkaProperty, read ReadFile) (*Cluster, error) {
	m := newMapper(props, "", read)
	m.field = ""
	c := &Cluster{}
	m.opts = append(m.opts, kgo.SeedBrokers(brokers...))
	m.security()
	m.common()
	c.Opts, m.opts = m.opts, nil
	m.clusterFixed()
	rebalance, txn := m.clusterTimeouts()
	m.clusterGroup()
	c.GroupOpts, m.opts = append(m.opts, kgo.RebalanceTimeout(rebalance)), nil
	m.clusterProducer()
	c.ProducerOpts, m.opts = append(m.opts, kgo.TransactionTimeout(txn)), nil
	m.leftovers()
	if len(m.errs) > 0 {
		return nil, m.errs
	}
	c.Warnings = m.warns
	return c, nil
}

// clusterFixed refuses the properties whose value cluster mode decides,
// unless they name that value.
func (m *mapper) clusterFixed() {
	for _, f := range []struct {
		key  string
		fine func(v string) bool // the value cluster mode uses anyway
		why  string
	}{
		{"bootstrap.servers", nil, "give the brokers with --cluster-brokers (STATEFUN_CLUSTER_BROKERS)"},
		{"group.id", nil, "the consumer group is the application id (--cluster-app-id)"},
		{"group.instance.id", nil, "the static-membership instance id is the node id (--cluster-node-id)"},
		{"transactional.id", nil, "the transactional id is <application id>-<node id>"},
		{"partition.assignment.strategy", nil, "cluster mode uses the cooperative-sticky assignor"},
		{"group.protocol", func(v string) bool { return v == "classic" }, "cluster mode uses the classic group protocol (its owner lookup reads the classic assignment)"},
		{"isolation.level", func(v string) bool { return v == "read_committed" }, "cluster mode reads read_committed: records of aborted transactions must have no effect"},
		{"acks", func(v string) bool { return v == "all" || v == "-1" }, "cluster mode writes with acks=all: a record only the leader acknowledged can be lost"},
		{"enable.idempotence", func(v string) bool { return v == "true" }, "cluster mode's transactions need the idempotent producer"},
	} {
		p, ok := m.get(f.key)
		if !ok {
			continue
		}
		if f.fine != nil && f.fine(strings.ToLower(strings.TrimSpace(p.Value))) {
			continue
		}
		m.refuse(p, "cannot be set in cluster mode (got %s): %s", shown(p), f.why)
	}
	for _, k := range []string{"enable.auto.commit", "auto.commit.interval.ms", "max.poll.records", "auto.offset.reset"} {
		if p, ok := m.get(k); ok {
			m.ignore(p, "cluster mode commits consumed offsets inside its transactions, on its own cadence (--cluster-commit-interval)")
		}
	}
}

// intOpt is an integer property honoured as a franz-go option.
type intOpt struct {
	key    string
	lo, hi int64
	opt    func(int64) kgo.Opt
}

func (m *mapper) ints(opts []intOpt) {
	for _, o := range opts {
		if p, ok := m.get(o.key); ok {
			if v, ok := m.integer(p, o.lo, o.hi); ok {
				m.opts = append(m.opts, o.opt(v))
			}
		}
	}
}

func ms(v int64) time.Duration { return time.Duration(v) * time.Millisecond }

// The timeouts of a node's transactions and of its group's rebalances.
const (
	// DefaultTransactionTimeout is a node's transaction.timeout.ms unless
	// set: the Kafka client's default.
	DefaultTransactionTimeout = 40 * time.Second
	// RebalanceShare is how many rebalance timeouts fit in a transaction
	// timeout, at least. A node's offset commit waits for a join of the
	// group in flight to end, with its transaction open: the join phase
	// lasts up to the rebalance timeout (the coordinator waits that long
	// for a member that does not rejoin, such as a node stopped without
	// leaving), and the sync phase after it up to one more. Were the two
	// longer than the transaction timeout, the coordinator would abort the
	// transaction meanwhile and bump the producer epoch, and the node's
	// offset commit would be answered PRODUCER_FENCED: the node stops, as
	// if a newer process had taken its node id. Two rebalance timeouts in
	// at most two thirds of the transaction timeout leave a third for the
	// rest of the transaction (its records, its EndTxn). The Kafka
	// client's defaults (a 60 s rebalance timeout, a 40 s transaction
	// timeout) break this.
	RebalanceShare = 3
)

// clusterTimeouts decides the rebalance timeout (max.poll.interval.ms, as
// the Java consumer uses it) and the transaction timeout
// (transaction.timeout.ms) of a node: given ones as they are, a missing
// rebalance timeout a RebalanceShare-th of the transaction timeout, a
// missing transaction timeout DefaultTransactionTimeout or RebalanceShare
// rebalance timeouts, whichever is longer. A rebalance timeout longer than
// a RebalanceShare-th of the transaction timeout is refused.
func (m *mapper) clusterTimeouts() (rebalance, txn time.Duration) {
	rp, rok := m.get("max.poll.interval.ms")
	tp, tok := m.get("transaction.timeout.ms")
	var rset, tset bool
	if rok {
		rebalance, rset = m.millis(rp, 100, maxInt32) // the client's least
	}
	if tok {
		txn, tset = m.millis(tp, 1, maxInt32)
	}
	switch {
	case rset && tset:
		if RebalanceShare*rebalance > txn {
			m.refuse(rp, "%s (the rebalance timeout) is longer than a third of transaction.timeout.ms (%v): a transaction that waits for a rebalance to end would outlive its timeout and fence this node; set it to at most %d, or raise transaction.timeout.ms",
				shown(rp), txn, (txn / RebalanceShare).Milliseconds())
		}
	case rset:
		txn = max(DefaultTransactionTimeout, RebalanceShare*rebalance)
		if txn > maxInt32*time.Millisecond {
			m.refuse(rp, "%s (the rebalance timeout) needs a transaction timeout of three times it, more than Kafka's transaction.timeout.ms can hold; set it to at most %d", shown(rp), maxInt32/RebalanceShare)
		}
	case tset:
		rebalance = max(txn/RebalanceShare, 100*time.Millisecond) // the client's least
		if RebalanceShare*rebalance > txn {
			m.refuse(tp, "%s is too short to hold a rebalance: want at least %d", shown(tp), RebalanceShare*100)
		}
	default:
		txn = DefaultTransactionTimeout
		rebalance = txn / RebalanceShare
	}
	return rebalance, txn
}

// clusterGroup maps the consumer group's tuning properties.
func (m *mapper) clusterGroup() {
	m.ints([]intOpt{
		{"session.timeout.ms", 1, maxInt32, func(v int64) kgo.Opt { return kgo.SessionTimeout(ms(v)) }},
		{"heartbeat.interval.ms", 1, maxInt32, func(v int64) kgo.Opt { return kgo.HeartbeatInterval(ms(v)) }},
		{"fetch.min.bytes", 1, maxInt32, func(v int64) kgo.Opt { return kgo.FetchMinBytes(int32(v)) }},
		{"fetch.max.bytes", 1, maxInt32, func(v int64) kgo.Opt { return kgo.FetchMaxBytes(int32(v)) }},
		{"max.partition.fetch.bytes", 1, maxInt32, func(v int64) kgo.Opt { return kgo.FetchMaxPartitionBytes(int32(v)) }},
		{"fetch.max.wait.ms", 0, maxInt32, func(v int64) kgo.Opt { return kgo.FetchMaxWait(ms(v)) }},
	})
	if p, ok := m.get("client.rack"); ok {
		m.opts = append(m.opts, kgo.Rack(p.Value))
	}
	if p, ok := m.get("check.crcs"); ok {
		if v, ok := m.boolean(p); ok && !v {
			m.opts = append(m.opts, kgo.DisableFetchCRCValidation())
		}
	}
}

// clusterProducer maps the producers' tuning properties.
func (m *mapper) clusterProducer() {
	if p, ok := m.get("compression.type"); ok {
		codecs := map[string]kgo.CompressionCodec{"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(),
			"snappy": kgo.SnappyCompression(), "lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression()}
		if c, ok := codecs[strings.ToLower(strings.TrimSpace(p.Value))]; ok {
			m.opts = append(m.opts, kgo.ProducerBatchCompression(c))
		} else {
			m.refuse(p, "want none, gzip, snappy, lz4 or zstd, got %s", shown(p))
		}
	}
	m.ints([]intOpt{
		{"linger.ms", 0, maxInt32, func(v int64) kgo.Opt { return kgo.ProducerLinger(ms(v)) }},
		{"max.request.size", 1, maxInt32, func(v int64) kgo.Opt { return kgo.ProducerBatchMaxBytes(int32(v)) }},
		{"request.timeout.ms", 1, maxInt32, func(v int64) kgo.Opt { return kgo.ProduceRequestTimeout(ms(v)) }},
	})
	if p, ok := m.get("batch.size"); ok {
		m.ignore(p, "franz-go fills a batch up to max.request.size and sends it after linger.ms")
	}
}
