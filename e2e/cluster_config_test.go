package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestClusterSettingsCheckedFirst runs the statefun binary with cluster
// settings against a devkafka process. Invalid ones exit 2 naming the
// setting (state API tokens without a cluster secret among them), before
// the module is read; valid ones go on to read the module,
// which does not exist here, so they exit 1 saying so. Either way neither
// Kafka (no topic is created) nor the disk is touched: the module is read
// before anything is made.
func TestClusterSettingsCheckedFirst(t *testing.T) {
	dk := startDevkafka(t, "-port", "0", "-brokers", "3")
	dir := t.TempDir()
	valid := []string{"run", "--module", "module.yaml", "--data-dir", "data",
		"--cluster-brokers", dk.brokers, "--cluster-app-id", "shop", "--cluster-node-id", "node-a", "--cluster-advertise", "http://127.0.0.1:8070"}
	for _, c := range []struct {
		name string
		args []string
		env  []string
		code int
		want string
	}{
		{"valid flags", valid, nil, 1, "statefun: module: reading module file: open module.yaml: no such file or directory"},
		{"valid environment", []string{"run", "--data-dir", "data"}, []string{"STATEFUN_CLUSTER_BROKERS=" + dk.brokers, "STATEFUN_CLUSTER_APP_ID=shop",
			"STATEFUN_CLUSTER_NODE_ID=node-b", "STATEFUN_CLUSTER_ADVERTISE=https://node-b.statefun:8443", "STATEFUN_CLUSTER_PROPERTIES=client.properties",
			"STATEFUN_CLUSTER_SECRET=e2e-cluster-secret-0123456789abcdef"},
			1, "statefun: module: reading module file: open module.yaml: no such file or directory"},
		{"advertise elsewhere without a secret", append(valid, "--cluster-advertise", "https://node-b.statefun:8443"), nil, 2,
			`statefun run: --cluster-advertise: "https://node-b.statefun:8443": without a cluster secret a node trusts only member records whose admin URL is on its own machine`},
		{"tokens without a secret", append(valid, "--api-tokens", "tokens"), nil, 2,
			"statefun run: the state API has bearer tokens (--api-tokens), so cluster mode needs a cluster secret shared by every node of shop (--cluster-secret-file or STATEFUN_CLUSTER_SECRET"},
		{"bad node id", append(valid, "--cluster-node-id", "node/a"), nil, 2, `statefun run: --cluster-node-id: "node/a": "/" is not allowed: want only letters, digits, '.', '_' and '-'`},
		{"bad advertise from environment", valid[:len(valid)-2], []string{"STATEFUN_CLUSTER_ADVERTISE=127.0.0.1:8070"}, 2,
			`statefun run: --cluster-advertise: "127.0.0.1:8070": not a URL; want an absolute http or https URL`},
		{"refused property", append(valid, "--cluster-property", "isolation.level=read_uncommitted"), nil, 2,
			`statefun run: --cluster-property: isolation.level: cannot be set in cluster mode (got "read_uncommitted")`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := os.WriteFile(filepath.Join(dir, "client.properties"), []byte("client.id=statefun\nlinger.ms=5\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "tokens"), []byte("ops 0123456789abcdef-ops read,write\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			ex := badRunBinary(t, dir, c.env, c.args...)
			if ex.code != c.code || !strings.Contains(ex.stderr, c.want) {
				t.Errorf("exit %d (want %d):\n%s\nwant %s", ex.code, c.code, ex.stderr, c.want)
			}
			if _, err := os.Stat(filepath.Join(dir, "data")); !os.IsNotExist(err) {
				t.Errorf("a data directory was created: %v", err)
			}
		})
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(dk.brokers, ",")...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ts, err := kadm.NewClient(cl).ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range ts.Names() {
		if strings.HasPrefix(name, "shop") {
			t.Errorf("topic %s was created by a node that refused to start", name)
		}
	}
}
