package clusterconfig

import (
	"strings"
	"testing"
	"time"

	"github.com/statefun-go/statefun/internal/module"
)

func valid() Config {
	return Config{Brokers: []string{"kafka-0:9092", "127.0.0.1:9093"}, AppID: "shop.orders_v2", NodeID: "statefun-0", Advertise: "http://statefun-0.statefun:8070",
		Secret: []byte("0123456789abcdef0123456789abcdef")}
}

func TestValidConfigAndDerivedNames(t *testing.T) {
	c := valid()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.MessagesTopic() != "shop.orders_v2-messages" || c.ChangelogTopic() != "shop.orders_v2-changelog" || c.MetaTopic() != "shop.orders_v2-meta" ||
		c.Group() != "shop.orders_v2" || c.TransactionalID() != "shop.orders_v2-statefun-0" {
		t.Errorf("names: %s %s %s %s %s", c.MessagesTopic(), c.ChangelogTopic(), c.MetaTopic(), c.Group(), c.TransactionalID())
	}
	if c.ReplicationOrDefault() != 3 || c.MessagesRetentionOrDefault() != 7*24*time.Hour || c.CommitIntervalOrDefault() != 100*time.Millisecond {
		t.Errorf("defaults: %d %v %v", c.ReplicationOrDefault(), c.MessagesRetentionOrDefault(), c.CommitIntervalOrDefault())
	}
	if c.PeerProbeIntervalOrDefault() != 500*time.Millisecond || c.PeerDownAfterOrDefault() != 2*time.Second || c.GiveUpAfterOrDefault() != 30*time.Second {
		t.Errorf("failure detection defaults: %v %v %v", c.PeerProbeIntervalOrDefault(), c.PeerDownAfterOrDefault(), c.GiveUpAfterOrDefault())
	}
	if c.TransactionalIDOf("statefun-2") != "shop.orders_v2-statefun-2" {
		t.Errorf("another node's transactional id: %s", c.TransactionalIDOf("statefun-2"))
	}
	// An application id as long as allowed makes a changelog topic name
	// Kafka still accepts.
	c.AppID = strings.Repeat("a", maxIDLen)
	if err := c.Validate(); err != nil || len(c.ChangelogTopic()) != 249 {
		t.Errorf("longest app id: %v, changelog name %d bytes", err, len(c.ChangelogTopic()))
	}
}

// Each bad setting is refused with the flag's name, what is wrong and what
// would be right.
func TestValidateExplains(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"no brokers", func(c *Config) { c.Brokers = nil }, "cluster: --cluster-brokers: required: the Kafka bootstrap brokers, host:port"},
		{"broker without port", func(c *Config) { c.Brokers = []string{"kafka"} }, `cluster: --cluster-brokers: "kafka": want host:port, e.g. kafka-0.kafka:9092`},
		{"broker port", func(c *Config) { c.Brokers = []string{"kafka:0"} }, `--cluster-brokers: "kafka:0": port "0": want a number from 1 to 65535`},
		{"no app id", func(c *Config) { c.AppID = "" }, "cluster: --cluster-app-id: required: the application's name"},
		{"app id charset", func(c *Config) { c.AppID = "shop/orders" }, `cluster: --cluster-app-id: "shop/orders": "/" is not allowed: want only letters, digits, '.', '_' and '-'; it names the Kafka topics "shop/orders"-messages`},
		{"app id too long", func(c *Config) { c.AppID = strings.Repeat("a", maxIDLen+1) }, "--cluster-app-id: \"aaaaaaaaaaaaaaaaaaaa\"...: longer than 239 characters"},
		{"app id dot", func(c *Config) { c.AppID = ".." }, "--cluster-app-id: \"..\": . and .. are not allowed"},
		{"no node id", func(c *Config) { c.NodeID = "" }, "cluster: --cluster-node-id: required: this node's name, stable across restarts and unique among running nodes"},
		{"node id charset", func(c *Config) { c.NodeID = "node 1" }, `cluster: --cluster-node-id: "node 1": " " is not allowed: want only letters, digits, '.', '_' and '-'; it is the consumer group's instance id`},
		{"no advertise", func(c *Config) { c.Advertise = "" }, "cluster: --cluster-advertise: required: the URL other nodes reach this node's admin listener at"},
		{"advertise relative", func(c *Config) { c.Advertise = "statefun-0:8070" }, `--cluster-advertise: "statefun-0:8070": want an absolute http or https URL`},
		{"advertise scheme", func(c *Config) { c.Advertise = "ftp://statefun-0:8070" }, `--cluster-advertise: "ftp://statefun-0:8070": want an absolute http or https URL`},
		{"advertise no host", func(c *Config) { c.Advertise = "http://:8070" }, `--cluster-advertise: "http://:8070": no host`},
		{"advertise credentials", func(c *Config) { c.Advertise = "http://u:p@box:8070" }, `must not carry credentials`},
		{"advertise query", func(c *Config) { c.Advertise = "http://box:8070/?x=1" }, `must not have a query or fragment`},
		{"short secret", func(c *Config) { c.Secret = []byte("short") }, "cluster: --cluster-secret-file or STATEFUN_CLUSTER_SECRET: the cluster secret is 5 bytes long; want at least 32 random characters"},
		{"no secret, advertise elsewhere", func(c *Config) { c.Secret = nil }, `--cluster-advertise: "http://statefun-0.statefun:8070": without a cluster secret a node trusts only member records whose admin URL is on its own machine`},
		{"partitions", func(c *Config) { c.Partitions = -1 }, "cluster: --cluster-partitions: -1: want 0 (adopt the application's, or 16 for a new one) or 1 to 65536"},
		{"replication", func(c *Config) { c.Replication = -3 }, "cluster: --cluster-replication: -3: want 0 (the default, 3, or fewer on a smaller Kafka)"},
		{"retention", func(c *Config) { c.MessagesRetention = time.Microsecond }, "cluster: --cluster-messages-retention: 1µs: want at least 1ms"},
		{"commit interval", func(c *Config) { c.CommitInterval = time.Minute }, "cluster: --cluster-commit-interval: 1m0s: want from 1ms to 30s (default 100ms)"},
		{"probe interval", func(c *Config) { c.PeerProbeInterval = time.Millisecond }, "cluster: --cluster-peer-probe-interval: 1ms: want from 10ms to 1m (default 500ms)"},
		{"down after", func(c *Config) { c.PeerDownAfter = 700 * time.Millisecond }, "cluster: --cluster-peer-down-after: 700ms: want at least two probe intervals (1s), so that one lost probe does not remove a node; or a negative duration to turn the probing off"},
		{"down after, probe interval", func(c *Config) { c.PeerProbeInterval, c.PeerDownAfter = 2*time.Second, 3*time.Second }, "--cluster-peer-down-after: 3s: want at least two probe intervals (4s)"},
		{"give up", func(c *Config) { c.GiveUpAfter = time.Millisecond }, "cluster: --cluster-give-up-after: 1ms: want at least 1s, or a negative duration never to give up (default 30s)"},
		{"property", func(c *Config) {
			c.Properties = []module.KafkaProperty{{Key: "acks", Value: "1", Pos: module.Position{File: PropertyFlag}}}
		}, `--cluster-property: acks: cannot be set in cluster mode (got "1"): cluster mode writes with acks=all`},
	} {
		cfg := valid()
		c.edit(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v\nwant %s", c.name, err, c.want)
		}
	}
	// Without a secret, a loopback admin URL is fine.
	cfg := valid()
	cfg.Secret, cfg.Advertise = nil, "http://127.0.0.1:8070"
	if err := cfg.Validate(); err != nil {
		t.Errorf("no secret, loopback advertise: %v", err)
	}
	// Every problem is reported at once, one per line.
	err := (&Config{}).Validate()
	if err == nil || strings.Count(err.Error(), "\n") != 3 {
		t.Errorf("empty config: %v", err)
	}
}

// State API tokens without a cluster secret are refused, naming the
// settings that give one; with a secret, or without tokens, a node starts.
func TestCheckTokens(t *testing.T) {
	c := valid()
	if err := c.CheckTokens(true); err != nil {
		t.Errorf("tokens and a secret: %v", err)
	}
	c.Secret = nil
	if err := c.CheckTokens(false); err != nil {
		t.Errorf("no tokens, no secret: %v", err)
	}
	err := c.CheckTokens(true)
	if err == nil || !strings.Contains(err.Error(), "--api-tokens") || !strings.Contains(err.Error(), SecretSettings) || !strings.Contains(err.Error(), "openssl rand -hex 32") {
		t.Errorf("tokens without a secret: %v", err)
	}
}

func TestProperties(t *testing.T) {
	file := "# Kafka client settings\n" +
		"security.protocol=SASL_SSL\n" +
		"  sasl.mechanism : SCRAM-SHA-512\n" +
		"! another comment\n" +
		"\n" +
		"sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n" +
		"    username=\"alice\" \\\n" +
		"    password=\"s=cr\\\\et\";\n" +
		"client.id bill\\u0020ing\n" +
		"linger.ms:5\n"
	props, err := ParseProperties("client.properties", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	lines := map[string]int{}
	for _, p := range props {
		got[p.Key], lines[p.Key] = p.Value, p.Pos.Line
	}
	want := map[string]string{
		"security.protocol": "SASL_SSL",
		"sasl.mechanism":    "SCRAM-SHA-512",
		"sasl.jaas.config":  `org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="s=cr\et";`,
		"client.id":         "bill ing",
		"linger.ms":         "5",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if lines["sasl.jaas.config"] != 6 || lines["linger.ms"] != 10 || lines["sasl.mechanism"] != 3 {
		t.Errorf("lines: %v", lines)
	}

	_, err = ParseProperties("c.properties", []byte("acks=all\nacks=1\nx=\\u12\n"))
	if err == nil || !strings.Contains(err.Error(), "c.properties:2:1: acks: set twice (first on line 1)") ||
		!strings.Contains(err.Error(), `c.properties:3:1: malformed \uXXXX escape`) {
		t.Errorf("bad file: %v", err)
	}

	if _, err := ParsePropertyFlag("sasl.password"); err == nil || !strings.Contains(err.Error(), "(value hidden)") {
		t.Errorf("a sensitive argument without '=': %v", err)
	}
	p, err := ParsePropertyFlag("sasl.jaas.config=a b=c;")
	if err != nil || p.Key != "sasl.jaas.config" || p.Value != "a b=c;" || p.Pos.File != PropertyFlag {
		t.Errorf("flag: %+v %v", p, err)
	}
	for _, bad := range []string{"acks", "=x", "", "sasl.jaas.config org.apache required password=hunter2"} {
		if _, err := ParsePropertyFlag(bad); err == nil || !strings.Contains(err.Error(), "want key=value") || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("flag %q: %v", bad, err)
		}
	}
}

// A refused property in a file is reported at its line, by key, without
// its value when it is a secret.
func TestPropertiesRefusedAtLine(t *testing.T) {
	props, err := ParseProperties("client.properties", []byte("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.jaas.config=nonsense password=\"hunter2\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	c := valid()
	c.Properties = props
	err = c.Validate()
	if err == nil || !strings.Contains(err.Error(), "client.properties:3:1: sasl.jaas.config: ") || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("got %v", err)
	}
	cl, err := (&Config{Brokers: []string{"k:1"}, Properties: []module.KafkaProperty{{Key: "linger.ms", Value: "5"}, {Key: "session.timeout.ms", Value: "6000"}, {Key: "max.poll.records", Value: "9"}}}).Client()
	if err != nil || len(cl.Opts) == 0 || len(cl.GroupOpts) != 2 || len(cl.ProducerOpts) != 2 || len(cl.Warnings) != 1 || !strings.Contains(cl.Warnings[0].Error(), "max.poll.records: ignored") {
		t.Errorf("client: %+v %v", cl, err)
	}
}
