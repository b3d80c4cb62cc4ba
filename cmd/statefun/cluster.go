package main

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/statefun-go/statefun/internal/cluster/clusterconfig"
	"github.com/statefun-go/statefun/internal/cluster/trust"
	"github.com/statefun-go/statefun/internal/module"
)

// clusterFlags are the cluster settings of run (docs/how-to/deploy.md,
// "What every node needs"; docs/reference/cli.md lists them). Given any of them, run is in cluster mode.
type clusterFlags struct {
	fs                          *pflag.FlagSet
	env                         envSource
	brokers, appID, nodeID, adv *string
	partitions, replication     *int
	retention, commitInterval   *time.Duration
	probeInterval, downAfter    *time.Duration
	giveUpAfter                 *time.Duration
	propsFile, secretFile       *string
	leave                       *bool
	props                       []module.KafkaProperty
	propErr                     error
}

// registerClusterFlags registers the cluster flags of run on fs, each with
// its environment variable (applyEnv reads them from env; given and secret
// read env too).
func registerClusterFlags(fs *pflag.FlagSet, env envSource) *clusterFlags {
	c := &clusterFlags{fs: fs, env: env}
	c.brokers = fs.String("cluster-brokers", "", "cluster mode: Kafka bootstrap brokers, host:port separated by commas (docs/explanation/cluster.md)")
	bindEnv(fs, "cluster-brokers", "STATEFUN_CLUSTER_BROKERS")
	c.appID = fs.String("cluster-app-id", "", "cluster mode: the application id every node of the application shares; names its Kafka topics and consumer group")
	bindEnv(fs, "cluster-app-id", "STATEFUN_CLUSTER_APP_ID")
	c.nodeID = fs.String("cluster-node-id", "", "cluster mode: this node's id, stable across restarts, unique among running nodes")
	bindEnv(fs, "cluster-node-id", "STATEFUN_CLUSTER_NODE_ID")
	c.adv = fs.String("cluster-advertise", "", "cluster mode: the http(s) URL other nodes reach this node's admin listener at")
	bindEnv(fs, "cluster-advertise", "STATEFUN_CLUSTER_ADVERTISE")
	c.partitions = fs.Int("cluster-partitions", 0, "cluster mode: P of a new application; 0 adopts the application's, or 16 for a new one")
	bindEnv(fs, "cluster-partitions", "STATEFUN_CLUSTER_PARTITIONS")
	c.replication = fs.Int("cluster-replication", 0, "cluster mode: replication factor of the internal topics this node creates; 0 means 3, or the number of brokers when fewer")
	bindEnv(fs, "cluster-replication", "STATEFUN_CLUSTER_REPLICATION")
	c.retention = fs.Duration("cluster-messages-retention", clusterconfig.DefaultMessagesRetention, "cluster mode: retention of the messages topic when this node creates it; -1s keeps records forever")
	bindEnv(fs, "cluster-messages-retention", "STATEFUN_CLUSTER_MESSAGES_RETENTION")
	c.commitInterval = fs.Duration("cluster-commit-interval", clusterconfig.DefaultCommitInterval, "cluster mode: the longest work waits for its Kafka transaction to begin; a node commits as soon as work waits, a short gap after its previous commit")
	bindEnv(fs, "cluster-commit-interval", "STATEFUN_CLUSTER_COMMIT_INTERVAL")
	c.leave = fs.Bool("cluster-leave-on-stop", false, "cluster mode: a clean stop (SIGTERM) removes this node from the group at once, so its partitions move without waiting for the session timeout; for a node stopped for good")
	bindEnv(fs, "cluster-leave-on-stop", "STATEFUN_CLUSTER_LEAVE_ON_STOP")
	c.probeInterval = fs.Duration("cluster-peer-probe-interval", clusterconfig.DefaultPeerProbeInterval, "cluster mode: how often this node probes the admin URL of each other node that owns partitions")
	bindEnv(fs, "cluster-peer-probe-interval", "STATEFUN_CLUSTER_PEER_PROBE_INTERVAL")
	c.downAfter = fs.Duration("cluster-peer-down-after", clusterconfig.DefaultPeerDownAfter, "cluster mode: how long another node may answer no probe, with no progress in Kafka, before this node removes it from the group so that its partitions move at once; a negative duration turns the probing off")
	bindEnv(fs, "cluster-peer-down-after", "STATEFUN_CLUSTER_PEER_DOWN_AFTER")
	c.giveUpAfter = fs.Duration("cluster-give-up-after", clusterconfig.DefaultGiveUpAfter, "cluster mode: how long Kafka may refuse this node's commits, none committing, before it leaves the group and stops with an error; a negative duration never gives up")
	bindEnv(fs, "cluster-give-up-after", "STATEFUN_CLUSTER_GIVE_UP_AFTER")
	c.propsFile = fs.String("cluster-properties", "", "cluster mode: a Kafka client properties file (key=value lines, as client.properties); --cluster-property overrides it")
	bindEnv(fs, "cluster-properties", "STATEFUN_CLUSTER_PROPERTIES")
	c.secretFile = fs.String("cluster-secret-file", "", "cluster mode: a file holding the cluster secret every node shares (at least 32 characters); nodes trust only member records and requests authenticated with it. STATEFUN_CLUSTER_SECRET may give the secret itself instead. Required with --api-tokens (docs/explanation/cluster.md, \"Trust between nodes\")")
	bindEnv(fs, "cluster-secret-file", "STATEFUN_CLUSTER_SECRET_FILE")
	fs.Func("cluster-property", "cluster mode: one Kafka client property `key=value`, e.g. security.protocol=SASL_SSL; repeatable (docs/how-to/deploy.md, \"Kafka: topics, ACLs and client settings\")", func(v string) error {
		p, err := clusterconfig.ParsePropertyFlag(v)
		if err != nil {
			return errors.New(strings.TrimPrefix(err.Error(), "cluster: "+clusterconfig.PropertyFlag+" "))
		}
		if slices.ContainsFunc(c.props, func(q module.KafkaProperty) bool { return q.Key == p.Key }) && c.propErr == nil {
			c.propErr = fmt.Errorf("--cluster-property %s: set twice", p.Key)
		}
		c.props = append(c.props, p)
		return nil
	})
	return c
}

// given reports whether any cluster setting was given, by flag or
// environment variable.
func (c *clusterFlags) given() bool {
	set := false
	c.fs.Visit(func(f *pflag.Flag) {
		if strings.HasPrefix(f.Name, "cluster-") {
			set = true
		}
	})
	for _, kv := range c.env.environ() {
		if strings.HasPrefix(kv, "STATEFUN_CLUSTER_") {
			set = true
		}
	}
	return set
}

// config returns the cluster configuration, validated; nil without cluster
// settings.
func (c *clusterFlags) config() (*clusterconfig.Config, error) {
	if !c.given() {
		return nil, nil
	}
	if c.propErr != nil {
		return nil, c.propErr
	}
	// Zero would silently mean the default: refuse it, as the store's
	// retention flags do.
	if *c.retention == 0 {
		return nil, errors.New("--cluster-messages-retention 0: want a duration like 168h, or -1s to keep records forever")
	}
	if *c.commitInterval == 0 {
		return nil, fmt.Errorf("--cluster-commit-interval 0: want a duration from 1ms to %v, like 100ms", clusterconfig.MaxCommitInterval)
	}
	for _, f := range []struct {
		flag      string
		got, like time.Duration
	}{
		{"cluster-peer-probe-interval", *c.probeInterval, clusterconfig.DefaultPeerProbeInterval},
		{"cluster-peer-down-after", *c.downAfter, clusterconfig.DefaultPeerDownAfter},
		{"cluster-give-up-after", *c.giveUpAfter, clusterconfig.DefaultGiveUpAfter},
	} {
		if f.got == 0 {
			return nil, fmt.Errorf("--%s 0: want a duration like %v", f.flag, f.like)
		}
	}
	var props []module.KafkaProperty
	if *c.propsFile != "" {
		data, err := os.ReadFile(*c.propsFile)
		if err != nil {
			return nil, fmt.Errorf("--cluster-properties: %w", err)
		}
		fileProps, err := clusterconfig.ParseProperties(*c.propsFile, data)
		if err != nil {
			return nil, err
		}
		for _, p := range fileProps {
			if !slices.ContainsFunc(c.props, func(q module.KafkaProperty) bool { return q.Key == p.Key }) {
				props = append(props, p)
			}
		}
	}
	props = append(props, c.props...)
	secret, err := c.secret()
	if err != nil {
		return nil, err
	}
	cfg := &clusterconfig.Config{
		Secret:            secret,
		Brokers:           splitList(*c.brokers),
		AppID:             *c.appID,
		NodeID:            *c.nodeID,
		Advertise:         *c.adv,
		Partitions:        *c.partitions,
		Replication:       *c.replication,
		MessagesRetention: *c.retention,
		CommitInterval:    *c.commitInterval,
		LeaveOnStop:       *c.leave,
		PeerProbeInterval: *c.probeInterval,
		PeerDownAfter:     *c.downAfter,
		GiveUpAfter:       *c.giveUpAfter,
		Properties:        props,
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// secret returns the cluster secret, from --cluster-secret-file or the
// environment variable STATEFUN_CLUSTER_SECRET; nil when neither is
// given. The secret itself has no flag: a command line is visible to
// every user of the machine (ps).
func (c *clusterFlags) secret() ([]byte, error) {
	v, inEnv := c.env.lookup("STATEFUN_CLUSTER_SECRET")
	switch {
	case *c.secretFile != "" && inEnv:
		return nil, errors.New("--cluster-secret-file and STATEFUN_CLUSTER_SECRET are both given: give the cluster secret one way")
	case *c.secretFile != "":
		s, err := trust.LoadSecret(*c.secretFile)
		if err != nil {
			return nil, fmt.Errorf("--cluster-secret-file: %s", strings.TrimPrefix(err.Error(), "trust: "))
		}
		return s, nil
	case inEnv:
		s := []byte(strings.TrimSpace(v))
		if err := trust.CheckSecret(s); err != nil {
			return nil, fmt.Errorf("STATEFUN_CLUSTER_SECRET: %s", strings.TrimPrefix(err.Error(), "trust: "))
		}
		return s, nil
	}
	return nil, nil
}
