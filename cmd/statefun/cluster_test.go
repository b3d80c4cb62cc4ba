package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// testSecret is a cluster secret long enough.
const testSecret = "0123456789abcdef0123456789abcdef"

// clusterArgs are valid cluster settings.
var clusterArgs = []string{"--cluster-brokers", "127.0.0.1:9092", "--cluster-app-id", "shop", "--cluster-node-id", "node-a", "--cluster-advertise", "http://127.0.0.1:8070"}

func with(args []string, more ...string) []string {
	return append(append([]string(nil), args...), more...)
}

// Bad cluster settings are refused before anything starts (exit 2), each
// naming the flag, what is wrong and what would be right.
func TestRunRefusesBadClusterSettings(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "client.properties")
	if err := os.WriteFile(file, []byte("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	secretFile, looseSecret, tokens := filepath.Join(dir, "secret"), filepath.Join(dir, "loose-secret"), filepath.Join(dir, "tokens")
	for path, mode := range map[string]os.FileMode{secretFile: 0o600, looseSecret: 0o666} {
		if err := os.WriteFile(path, []byte(testSecret+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(tokens, []byte("ops 0123456789abcdef-ops read,write\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		env  [2]string
		want []string
	}{
		{"only brokers", []string{"--cluster-brokers", "k:9092"}, [2]string{}, []string{
			"statefun run: --cluster-app-id: required: the application's name, shared by all its nodes",
			"statefun run: --cluster-node-id: required: this node's name, stable across restarts",
			"statefun run: --cluster-advertise: required: the URL other nodes reach this node's admin listener at"}},
		{"app id from env", []string{"--cluster-brokers", "k:9092", "--cluster-node-id", "n", "--cluster-advertise", "http://n:8070"}, [2]string{"STATEFUN_CLUSTER_APP_ID", "shop orders"}, nil},
		{"app id charset", with(clusterArgs, "--cluster-app-id", "shop/orders"), [2]string{}, []string{`statefun run: --cluster-app-id: "shop/orders": "/" is not allowed: want only letters, digits, '.', '_' and '-'`}},
		{"node id", with(clusterArgs, "--cluster-node-id", "node a"), [2]string{}, []string{`statefun run: --cluster-node-id: "node a": " " is not allowed`}},
		{"advertise", with(clusterArgs, "--cluster-advertise", "node-a:8070"), [2]string{}, []string{`statefun run: --cluster-advertise: "node-a:8070": want an absolute http or https URL`}},
		{"broker", with(clusterArgs, "--cluster-brokers", "k:9092,kafka"), [2]string{}, []string{`statefun run: --cluster-brokers: "kafka": want host:port`}},
		{"partitions", with(clusterArgs, "--cluster-partitions", "70000"), [2]string{}, []string{"statefun run: --cluster-partitions: 70000: want 0 (adopt the application's, or 16 for a new one) or 1 to 65536"}},
		{"partitions env", clusterArgs, [2]string{"STATEFUN_CLUSTER_PARTITIONS", "many"}, []string{`statefun run: STATEFUN_CLUSTER_PARTITIONS="many" is not a number`}},
		{"replication", with(clusterArgs, "--cluster-replication", "-1"), [2]string{}, []string{"statefun run: --cluster-replication: -1: want 0"}},
		{"retention 0", with(clusterArgs, "--cluster-messages-retention", "0s"), [2]string{}, []string{"statefun run: --cluster-messages-retention 0: want a duration like 168h, or -1s to keep records forever"}},
		{"commit interval", with(clusterArgs, "--cluster-commit-interval", "2m"), [2]string{}, []string{"statefun run: --cluster-commit-interval: 2m0s: want from 1ms to 30s (default 100ms)"}},
		{"commit interval env", clusterArgs, [2]string{"STATEFUN_CLUSTER_COMMIT_INTERVAL", "fast"}, []string{`statefun run: STATEFUN_CLUSTER_COMMIT_INTERVAL="fast" is not a duration`}},
		{"down after 0", with(clusterArgs, "--cluster-peer-down-after", "0s"), [2]string{}, []string{"statefun run: --cluster-peer-down-after 0: want a duration like 2s"}},
		{"down after short", with(clusterArgs, "--cluster-peer-down-after", "100ms"), [2]string{}, []string{"statefun run: --cluster-peer-down-after: 100ms: want at least two probe intervals (1s)"}},
		{"give up env", clusterArgs, [2]string{"STATEFUN_CLUSTER_GIVE_UP_AFTER", "0s"}, []string{"statefun run: --cluster-give-up-after 0: want a duration like 30s"}},
		{"property form", with(clusterArgs, "--cluster-property", "acks"), [2]string{}, []string{`statefun run: invalid value "acks" for --cluster-property: "acks": want key=value`}},
		{"property refused", with(clusterArgs, "--cluster-property", "acks=1"), [2]string{}, []string{`statefun run: --cluster-property: acks: cannot be set in cluster mode (got "1"): cluster mode writes with acks=all`}},
		{"property twice", with(clusterArgs, "--cluster-property", "linger.ms=1", "--cluster-property", "linger.ms=2"), [2]string{}, []string{"statefun run: --cluster-property linger.ms: set twice"}},
		{"properties file", with(clusterArgs, "--cluster-properties", file), [2]string{}, []string{"statefun run: " + file + ":2:1: sasl.mechanism: sasl.mechanism GSSAPI is not supported"}},
		{"properties file missing", with(clusterArgs, "--cluster-properties", filepath.Join(dir, "nope")), [2]string{}, []string{"statefun run: --cluster-properties: open " + filepath.Join(dir, "nope")}},
		{"embedded partitions", with(clusterArgs, "--partitions", "8"), [2]string{}, []string{"statefun run: --partitions is the embedded store's; in cluster mode P is the application's: use --cluster-partitions"}},
		{"advertise elsewhere without a secret", with(clusterArgs, "--cluster-advertise", "http://node-a.statefun:8070"), [2]string{}, []string{
			`statefun run: --cluster-advertise: "http://node-a.statefun:8070": without a cluster secret a node trusts only member records whose admin URL is on its own machine`,
			"--cluster-secret-file or STATEFUN_CLUSTER_SECRET"}},
		{"short secret", clusterArgs, [2]string{"STATEFUN_CLUSTER_SECRET", "hunter2"}, []string{"statefun run: STATEFUN_CLUSTER_SECRET: the cluster secret is 7 bytes long; want at least 32"}},
		{"secret twice", with(clusterArgs, "--cluster-secret-file", secretFile), [2]string{"STATEFUN_CLUSTER_SECRET", testSecret}, []string{"statefun run: --cluster-secret-file and STATEFUN_CLUSTER_SECRET are both given"}},
		{"secret file others write", with(clusterArgs, "--cluster-secret-file", looseSecret), [2]string{}, []string{"statefun run: --cluster-secret-file: cluster secret file: " + looseSecret + " is writable by its group or by others (mode 0666); run chmod 600"}},
		{"tokens without a secret", with(clusterArgs, "--api-tokens", tokens), [2]string{}, []string{
			"statefun run: the state API has bearer tokens (--api-tokens), so cluster mode needs a cluster secret shared by every node of shop (--cluster-secret-file or STATEFUN_CLUSTER_SECRET"}},
		{"embedded ingress membership", with(clusterArgs, "--kafka-ingress-keep-membership"), [2]string{}, []string{"statefun run: --kafka-ingress-keep-membership is the embedded Kafka ingress's; in cluster mode the node's session consumes the ingress topics, and --cluster-leave-on-stop decides whether it leaves the group"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.env[0] != "" {
				t.Setenv(c.env[0], c.env[1])
			}
			if c.want == nil {
				c.want = []string{`statefun run: --cluster-app-id: "shop orders": " " is not allowed`}
			}
			var stderr bytes.Buffer
			data := filepath.Join(t.TempDir(), "data")
			code := run(with(c.args, "--data-dir", data), &stderr)
			if code != 2 {
				t.Errorf("exit %d, want 2: %s", code, stderr.String())
			}
			for _, w := range c.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr.String())
				}
			}
			if _, err := os.Stat(data); !os.IsNotExist(err) {
				t.Errorf("the data directory was created: %v", err)
			}
		})
	}
}

// A module holding what cluster mode does not run is refused with exit 1,
// naming the kind and what to use instead, before Kafka is contacted (the
// brokers here do not exist) or a data directory made: the playground
// egress, a Kafka ingress on other brokers than the cluster's, a topic two
// ingresses share, an ingress topic that is an internal topic.
func TestRunClusterRefusesModuleEdges(t *testing.T) {
	dir := t.TempDir()
	mod := filepath.Join(dir, "module.yaml")
	doc := `kind: io.statefun.endpoints.v2/http
spec:
  functions: ns/*
  urlPathTemplate: http://127.0.0.1:1/{function.name}
---
kind: io.statefun.playground.v1/egress
spec:
  port: 9999
  topics: [out]
---
kind: io.statefun.kafka.v1/ingress
spec:
  id: ns/in
  address: 127.0.0.1:9093
  consumerGroupId: g
  topics:
    - topic: in
      valueType: ns/text
      targets: [ns/fn]
---
kind: io.statefun.kafka.v1/ingress
spec:
  id: ns/in2
  address: 127.0.0.1:9093
  consumerGroupId: g
  topics:
    - topic: in
      valueType: ns/text
      targets: [ns/fn]
    - topic: shop-messages
      valueType: ns/text
      targets: [ns/fn]
`
	if err := os.WriteFile(mod, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
	}{
		{"flags", clusterArgs, nil},
		{"environment", nil, map[string]string{"STATEFUN_CLUSTER_BROKERS": "127.0.0.1:1", "STATEFUN_CLUSTER_APP_ID": "shop",
			"STATEFUN_CLUSTER_NODE_ID": "node-a", "STATEFUN_CLUSTER_ADVERTISE": "https://node-a.statefun:8443/",
			"STATEFUN_CLUSTER_SECRET": testSecret}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			var stderr bytes.Buffer
			data := filepath.Join(t.TempDir(), "data")
			start := time.Now()
			code := run(with(c.args, "--module", mod, "--data-dir", data), &stderr)
			if code != 1 {
				t.Errorf("exit %d, want 1: %s", code, stderr.String())
			}
			for _, w := range []string{
				"(io.statefun.playground.v1/egress): cluster mode does not run the playground egress",
				"send records to an io.statefun.kafka.v1/egress and read its topic instead",
				"(io.statefun.kafka.v1/ingress): address: in cluster mode a Kafka ingress's topics are consumed by the node's group session",
				"topic: topic in is consumed by the Kafka ingress ns/in too",
				"topic: shop-messages is one of the application's internal topics",
			} {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr.String())
				}
			}
			if time.Since(start) > 10*time.Second {
				t.Errorf("the refusal took %v: was Kafka contacted?", time.Since(start))
			}
			if _, err := os.Stat(data); !os.IsNotExist(err) {
				t.Errorf("the data directory was created: %v", err)
			}
		})
	}
}

// Flags, environment variables and a properties file reach the
// configuration; a flag beats its environment variable, --cluster-property
// beats the file; the defaults are clusterconfig's.
func TestClusterFlagsToConfig(t *testing.T) {
	parse := func(args ...string) *clusterFlags {
		t.Helper()
		fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
		fs.SetOutput(io.Discard)
		c := registerClusterFlags(fs, processEnv())
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		if err := applyEnv(fs, processEnv()); err != nil {
			t.Fatal(err)
		}
		return c
	}
	if cfg, err := parse().config(); cfg != nil || err != nil {
		t.Fatalf("no cluster settings: %+v %v", cfg, err)
	}
	file := filepath.Join(t.TempDir(), "client.properties")
	if err := os.WriteFile(file, []byte("client.id=from-file\nlinger.ms=7\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("STATEFUN_CLUSTER_NODE_ID", "env-node")
	t.Setenv("STATEFUN_CLUSTER_APP_ID", "env-app")
	t.Setenv("STATEFUN_CLUSTER_REPLICATION", "2")
	t.Setenv("STATEFUN_CLUSTER_PROPERTIES", file)
	t.Setenv("STATEFUN_CLUSTER_SECRET", " "+testSecret+"\n")
	cfg, err := parse("--cluster-brokers", "a:1, b:2", "--cluster-app-id", "shop", "--cluster-advertise", "http://a:8070",
		"--cluster-partitions", "12", "--cluster-messages-retention", "-1s", "--cluster-commit-interval", "250ms",
		"--cluster-peer-probe-interval", "200ms", "--cluster-peer-down-after", "-1s", "--cluster-give-up-after", "1m",
		"--cluster-property", "client.id=from-flag", "--cluster-property", "sasl.jaas.config=x=y").config()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(cfg.Brokers, "|") != "a:1|b:2" || cfg.AppID != "shop" || cfg.NodeID != "env-node" || cfg.Advertise != "http://a:8070" ||
		cfg.Partitions != 12 || cfg.Replication != 2 || cfg.MessagesRetention != -time.Second || cfg.CommitInterval != 250*time.Millisecond ||
		string(cfg.Secret) != testSecret ||
		cfg.PeerProbeInterval != 200*time.Millisecond || cfg.PeerDownAfter != -time.Second || cfg.GiveUpAfter != time.Minute {
		t.Errorf("config %+v", cfg)
	}
	props := map[string]string{}
	for _, p := range cfg.Properties {
		props[p.Key] = p.Value
	}
	if len(cfg.Properties) != 3 || props["client.id"] != "from-flag" || props["linger.ms"] != "7" || props["sasl.jaas.config"] != "x=y" {
		t.Errorf("properties %v", cfg.Properties)
	}
	os.Unsetenv("STATEFUN_CLUSTER_PROPERTIES")
	os.Unsetenv("STATEFUN_CLUSTER_REPLICATION")
	cfg, err = parse("--cluster-brokers", "a:1", "--cluster-advertise", "http://a:8070").config()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.AppID != "env-app" || cfg.Replication != 0 || cfg.MessagesRetention != 7*24*time.Hour || cfg.CommitInterval != 100*time.Millisecond || cfg.Partitions != 0 ||
		cfg.PeerProbeInterval != 500*time.Millisecond || cfg.PeerDownAfter != 2*time.Second || cfg.GiveUpAfter != 30*time.Second {
		t.Errorf("defaults %+v", cfg)
	}
}
