// Package clusterconfig is the configuration of a cluster-mode node: the
// Kafka brokers, the application id its nodes share, this node's id and
// the URL other nodes reach it at, the application's partition count and
// the internal topics' settings, and the Kafka client properties
// (docs/how-to/deploy.md, "What every node needs").
//
// Validate explains every problem: which setting, what is wrong, what
// would be right. The names of the internal topics, the consumer group and
// the transactional id derive from the application and node ids here, so
// that every part of cluster mode agrees on them.
package clusterconfig

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/statefun-go/statefun/internal/cluster/trust"
	"github.com/statefun-go/statefun/internal/kafkaclient"
	"github.com/statefun-go/statefun/internal/kafkatopic"
	"github.com/statefun-go/statefun/internal/module"
)

// Defaults of the settings whose zero value means "the default".
const (
	// DefaultPartitions is P for a new application when none is given,
	// as for a new embedded store.
	DefaultPartitions = 16
	// MaxPartitions is the largest P, as for the embedded store.
	MaxPartitions = 65536
	// DefaultReplication is the internal topics' replication factor when
	// none is given: it survives one broker down while another is being
	// restarted. On a cluster of fewer brokers it is lowered to their
	// number, with a warning (docs/explanation/cluster.md).
	DefaultReplication = 3
	// DefaultMessagesRetention is how long records of the messages topic
	// are kept: Kafka's default retention, written explicitly so that a
	// broker default does not decide it.
	DefaultMessagesRetention = 7 * 24 * time.Hour
	// DefaultCommitInterval is the longest work waits for its
	// transaction, Kafka Streams' exactly-once commit interval.
	DefaultCommitInterval = 100 * time.Millisecond
	// MaxCommitInterval bounds the cadence well inside a node's
	// transaction timeout (kafkaclient.DefaultTransactionTimeout, 40 s).
	MaxCommitInterval = 30 * time.Second
	// DefaultPeerProbeInterval is how often a node asks each other node
	// that owns partitions whether it is alive (docs/explanation/cluster.md, "Failure
	// detection").
	DefaultPeerProbeInterval = 500 * time.Millisecond
	// DefaultPeerDownAfter is how long a node that owns partitions may
	// leave every probe unanswered, without progress in Kafka, before the
	// others remove it from the group: well inside the failover budget of
	// 5 s, well beyond a healthy node's answer (milliseconds).
	DefaultPeerDownAfter = 2 * time.Second
	// DefaultGiveUpAfter is how long a node's commits may keep being
	// refused, none committing, before it gives its partitions up.
	DefaultGiveUpAfter = 30 * time.Second
)

// Topic name suffixes of an application's internal topics.
const (
	messagesSuffix  = "-messages"
	changelogSuffix = "-changelog"
	metaSuffix      = "-meta"
)

// Config is how a node joins an application on Kafka. The zero values of
// Partitions, Replication, MessagesRetention and CommitInterval mean their
// defaults; Brokers, AppID, NodeID and Advertise are required.
type Config struct {
	// Brokers are the bootstrap brokers, host:port each
	// (--cluster-brokers).
	Brokers []string
	// AppID names the application: every node started with the same
	// brokers and application id shares it. It prefixes the internal
	// topics and is the consumer group (--cluster-app-id).
	AppID string
	// NodeID names this node, stable across its restarts: the consumer
	// group's static-membership instance id and the suffix of its
	// transactional id. Two running nodes must never share one
	// (--cluster-node-id).
	NodeID string
	// Advertise is the absolute http or https URL of this node's admin
	// listener as other nodes reach it, to forward state API requests to
	// the owner of an address (--cluster-advertise).
	Advertise string
	// Partitions is P for a new application; 0 adopts the existing
	// application's P, or DefaultPartitions for a new one. A P other than
	// the application's is refused (--cluster-partitions).
	Partitions int
	// Replication is the replication factor of the internal topics when
	// they are created; 0 means DefaultReplication, lowered to the number
	// of brokers when there are fewer (--cluster-replication).
	Replication int
	// MessagesRetention is the retention of the messages topic when it is
	// created; 0 means DefaultMessagesRetention, negative keeps records
	// forever (--cluster-messages-retention).
	MessagesRetention time.Duration
	// CommitInterval is the longest work waits for its transaction to
	// begin: a node commits as soon as work waits, a short gap after its
	// previous commit (internal/cluster/cycle, PollFor); 0 means
	// DefaultCommitInterval (--cluster-commit-interval).
	CommitInterval time.Duration
	// LeaveOnStop makes a clean stop remove the node from the consumer
	// group at once (by its instance id), so that its partitions move now
	// instead of after the session timeout: for a node stopped for good,
	// scaling down. Without it a stopped node keeps its partitions for one
	// session timeout, which a restart within it finds again
	// (--cluster-leave-on-stop).
	LeaveOnStop bool
	// PeerProbeInterval is how often this node probes the admin URL of
	// each other node that owns partitions; 0 means
	// DefaultPeerProbeInterval (--cluster-peer-probe-interval).
	PeerProbeInterval time.Duration
	// PeerDownAfter is how long such a node may answer no probe, and show
	// no progress in Kafka, before this node removes it from the consumer
	// group (and aborts its open transaction) so that its partitions move
	// at once instead of after the session timeout; 0 means
	// DefaultPeerDownAfter, negative turns the probing off
	// (--cluster-peer-down-after).
	PeerDownAfter time.Duration
	// GiveUpAfter is how long this node's transactions may keep being
	// refused by Kafka (aborted for a group or fencing reason), none
	// committing, before the node leaves the group and stops with an error,
	// so that other nodes serve its partitions; 0 means DefaultGiveUpAfter,
	// negative never gives up (--cluster-give-up-after).
	GiveUpAfter time.Duration
	// Properties are Kafka client properties (security, timeouts, tuning)
	// with the Java client's names, mapped by kafkaclient.ForCluster
	// (--cluster-property, --cluster-properties).
	Properties []module.KafkaProperty
	// Secret is the cluster secret every node of the application shares
	// (--cluster-secret-file, STATEFUN_CLUSTER_SECRET): member records are
	// authenticated with it and the requests nodes send each other are
	// signed with it (package trust). Empty: the nodes trust only member
	// records whose admin URL is a loopback name, so every node must run
	// on one machine; with state API tokens it is required (CheckTokens).
	// It is never serialized.
	Secret []byte `json:"-"`
}

// MessagesTopic is the application's messages topic: P partitions, keyed
// by address.
func (c *Config) MessagesTopic() string { return c.AppID + messagesSuffix }

// ChangelogTopic is the application's compacted state changelog: P
// partitions, co-partitioned with the messages topic.
func (c *Config) ChangelogTopic() string { return c.AppID + changelogSuffix }

// MetaTopic is the application's compacted meta topic: one partition
// holding the application record and the member records.
func (c *Config) MetaTopic() string { return c.AppID + metaSuffix }

// Group is the application's consumer group.
func (c *Config) Group() string { return c.AppID }

// TransactionalID is this node's transactional id.
func (c *Config) TransactionalID() string { return c.TransactionalIDOf(c.NodeID) }

// TransactionalIDOf is the transactional id of node id node of this
// application.
func (c *Config) TransactionalIDOf(node string) string { return c.AppID + "-" + node }

// PeerProbeIntervalOrDefault is PeerProbeInterval, or its default when
// unset.
func (c *Config) PeerProbeIntervalOrDefault() time.Duration {
	return cmp.Or(c.PeerProbeInterval, DefaultPeerProbeInterval)
}

// PeerDownAfterOrDefault is PeerDownAfter, or its default when unset;
// negative when the probing is off.
func (c *Config) PeerDownAfterOrDefault() time.Duration {
	return cmp.Or(c.PeerDownAfter, DefaultPeerDownAfter)
}

// GiveUpAfterOrDefault is GiveUpAfter, or its default when unset; negative
// when the node never gives up.
func (c *Config) GiveUpAfterOrDefault() time.Duration {
	return cmp.Or(c.GiveUpAfter, DefaultGiveUpAfter)
}

// ReplicationOrDefault is Replication, or DefaultReplication when unset.
func (c *Config) ReplicationOrDefault() int {
	return cmp.Or(c.Replication, DefaultReplication)
}

// MessagesRetentionOrDefault is MessagesRetention, or its default when
// unset.
func (c *Config) MessagesRetentionOrDefault() time.Duration {
	return cmp.Or(c.MessagesRetention, DefaultMessagesRetention)
}

// CommitIntervalOrDefault is CommitInterval, or its default when unset.
func (c *Config) CommitIntervalOrDefault() time.Duration {
	return cmp.Or(c.CommitInterval, DefaultCommitInterval)
}

// maxIDLen is the longest application id: its longest topic name,
// <app>-changelog, must stay within Kafka's limit.
const maxIDLen = kafkatopic.MaxLen - len(changelogSuffix)

// Validate returns every problem of c, one per line, each naming the
// setting by its flag, what is wrong and what would be right; nil when c
// is usable. It checks the client properties too (see Client).
func (c *Config) Validate() error {
	var errs []error
	bad := func(flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("cluster: --%s: %s", flag, fmt.Sprintf(format, args...)))
	}
	if len(c.Brokers) == 0 {
		bad("cluster-brokers", "required: the Kafka bootstrap brokers, host:port separated by commas")
	}
	for _, b := range c.Brokers {
		if err := checkBroker(b); err != nil {
			bad("cluster-brokers", "%q: %v", b, err)
		}
	}
	switch err := checkName(c.AppID, maxIDLen); {
	case c.AppID == "":
		bad("cluster-app-id", "required: the application's name, shared by all its nodes (letters, digits, '.', '_' and '-'), e.g. shop-orders")
	case err != nil:
		bad("cluster-app-id", "%s: %v; it names the Kafka topics %s-messages, -changelog, -meta and the consumer group", quote(c.AppID), err, quote(c.AppID))
	}
	switch err := checkName(c.NodeID, kafkatopic.MaxLen); {
	case c.NodeID == "":
		bad("cluster-node-id", "required: this node's name, stable across restarts and unique among running nodes (letters, digits, '.', '_' and '-'), e.g. the pod name statefun-0")
	case err != nil:
		bad("cluster-node-id", "%s: %v; it is the consumer group's instance id and part of the transactional id", quote(c.NodeID), err)
	}
	switch err := CheckAdvertise(c.Advertise); {
	case c.Advertise == "":
		bad("cluster-advertise", "required: the URL other nodes reach this node's admin listener at, e.g. http://statefun-0.statefun:8070")
	case err != nil:
		bad("cluster-advertise", "%q: %v", c.Advertise, err)
	case len(c.Secret) == 0 && !trust.LoopbackURL(c.Advertise):
		bad("cluster-advertise", "%q: without a cluster secret a node trusts only member records whose admin URL is on its own machine (a loopback name such as 127.0.0.1), "+
			"so that a record someone writes into %s cannot draw requests elsewhere; to run nodes on several machines, give every node the same secret (%s)",
			c.Advertise, c.MetaTopic(), SecretSettings)
	}
	if len(c.Secret) > 0 {
		if err := trust.CheckSecret(c.Secret); err != nil {
			errs = append(errs, fmt.Errorf("cluster: %s: %v", SecretSettings, strings.TrimPrefix(err.Error(), "trust: ")))
		}
	}
	if c.Partitions < 0 || c.Partitions > MaxPartitions {
		bad("cluster-partitions", "%d: want 0 (adopt the application's, or %d for a new one) or 1 to %d", c.Partitions, DefaultPartitions, MaxPartitions)
	}
	if c.Replication < 0 || c.Replication > 32767 {
		bad("cluster-replication", "%d: want 0 (the default, %d, or fewer on a smaller Kafka) or a replication factor from 1 to 32767", c.Replication, DefaultReplication)
	}
	if r := c.MessagesRetention; r > 0 && r < time.Millisecond {
		bad("cluster-messages-retention", "%v: want at least 1ms, or a negative duration to keep records forever", r)
	}
	if ci := c.CommitInterval; ci < 0 || ci > MaxCommitInterval || (ci > 0 && ci < time.Millisecond) {
		bad("cluster-commit-interval", "%v: want from 1ms to %v (default %v)", ci, MaxCommitInterval, DefaultCommitInterval)
	}
	if pi := c.PeerProbeInterval; pi < 0 || (pi > 0 && pi < 10*time.Millisecond) || pi > time.Minute {
		bad("cluster-peer-probe-interval", "%v: want from 10ms to 1m (default %v)", pi, DefaultPeerProbeInterval)
	}
	if d := c.PeerDownAfter; d > 0 && d < 2*c.PeerProbeIntervalOrDefault() {
		bad("cluster-peer-down-after", "%v: want at least two probe intervals (%v), so that one lost probe does not remove a node; or a negative duration to turn the probing off (default %v)",
			d, 2*c.PeerProbeIntervalOrDefault(), DefaultPeerDownAfter)
	}
	if g := c.GiveUpAfter; g > 0 && g < time.Second {
		bad("cluster-give-up-after", "%v: want at least 1s, or a negative duration never to give up (default %v)", g, DefaultGiveUpAfter)
	}
	if _, err := kafkaclient.ForCluster(c.Brokers, c.Properties, nil); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// SecretSettings names the settings that give the cluster secret, for
// messages that ask for it.
const SecretSettings = "--cluster-secret-file or STATEFUN_CLUSTER_SECRET"

// CheckTokens refuses a node whose state API has bearer tokens (tokens is
// true) but no cluster secret: a node sends requests to other nodes on
// behalf of its callers, and without a secret it could not tell a member
// record written by a node from one written by anyone who may write the
// meta topic, nor prove to the owner whom it speaks for.
func (c *Config) CheckTokens(tokens bool) error {
	if tokens && len(c.Secret) == 0 {
		return fmt.Errorf("cluster: the state API has bearer tokens (--api-tokens), so cluster mode needs a cluster secret shared by every node of %s (%s; at least %d random characters, e.g. openssl rand -hex 32): "+
			"nodes authenticate member records and the requests they send each other with it, and never pass a caller's token on", c.AppID, SecretSettings, trust.MinSecretLen)
	}
	return nil
}

// Client maps the brokers and client properties to franz-go options (see
// kafkaclient.Cluster). Call it on a validated Config.
func (c *Config) Client() (*kafkaclient.Cluster, error) {
	return kafkaclient.ForCluster(c.Brokers, c.Properties, nil)
}

// checkBroker checks one bootstrap broker, host:port.
func checkBroker(b string) error {
	host, port, err := net.SplitHostPort(b)
	if err != nil || host == "" {
		return errors.New("want host:port, e.g. kafka-0.kafka:9092")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q: want a number from 1 to 65535", port)
	}
	return nil
}

// checkName checks an application or node id: Kafka's rule for topic
// names (and for group.instance.id), within max bytes.
func checkName(s string, max int) error {
	if s == "" {
		return nil
	}
	if s == "." || s == ".." {
		return errors.New(". and .. are not allowed")
	}
	if len(s) > max {
		return fmt.Errorf("longer than %d characters", max)
	}
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '.' || ch == '_' || ch == '-') {
			return fmt.Errorf("%q is not allowed: want only letters, digits, '.', '_' and '-'", string(rune(s[i])))
		}
	}
	return nil
}

// quote quotes an id for a message, cut when it is far too long.
func quote(s string) string {
	if len(s) > 64 {
		return strconv.Quote(s[:20]) + "..."
	}
	return strconv.Quote(s)
}

// CheckAdvertise checks an advertised admin URL: absolute http or https,
// with a host, without credentials, query or fragment. It is checked again
// on every member record a node reads: a node sends requests only to such
// a URL.
func CheckAdvertise(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return errors.New("not a URL; want an absolute http or https URL such as http://statefun-0.statefun:8070")
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return errors.New("want an absolute http or https URL such as http://statefun-0.statefun:8070")
	case u.Host == "" || u.Hostname() == "":
		return errors.New("no host; want an absolute http or https URL such as http://statefun-0.statefun:8070")
	case u.User != nil:
		return errors.New("must not carry credentials: every node of the application reads it from the meta topic")
	case u.RawQuery != "" || u.Fragment != "" || strings.HasSuffix(s, "?") || strings.HasSuffix(s, "#"):
		return errors.New("must not have a query or fragment")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("port %q: want a number from 1 to 65535", p)
		}
	}
	return nil
}
