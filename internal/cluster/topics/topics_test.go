package topics

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/statefun-go/statefun/internal/cluster/clusterconfig"
	"github.com/statefun-go/statefun/internal/cluster/meta"
)

func kafka(t *testing.T, brokers int) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(brokers))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func config(c *kfake.Cluster, node string, p int) *clusterconfig.Config {
	return &clusterconfig.Config{Brokers: c.ListenAddrs(), AppID: "shop", NodeID: node, Advertise: "http://" + node + ":8070", Partitions: p}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func admin(t *testing.T, c *kfake.Cluster) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// metaRecords reads the meta topic from its start: key → values in order.
func metaRecords(t *testing.T, c *kfake.Cluster) (keys []string, values map[string][]byte) {
	t.Helper()
	r, err := meta.Open("shop-meta", []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	values = map[string][]byte{}
	if err := r.CatchUp(ctx(t), func(rec *kgo.Record) {
		keys = append(keys, string(rec.Key))
		values[string(rec.Key)] = rec.Value
	}); err != nil {
		t.Fatal(err)
	}
	return keys, values
}

type topicView struct {
	partitions, replicas int
	configs              map[string]string
}

func describe(t *testing.T, c *kfake.Cluster, names ...string) map[string]topicView {
	t.Helper()
	adm := admin(t, c)
	td, err := adm.ListTopics(ctx(t), names...)
	if err != nil {
		t.Fatal(err)
	}
	rcs, err := adm.DescribeTopicConfigs(ctx(t), names...)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]topicView{}
	for _, n := range names {
		d := td[n]
		if d.Err != nil {
			t.Fatalf("%s: %v", n, d.Err)
		}
		v := topicView{partitions: len(d.Partitions), configs: map[string]string{}}
		for _, p := range d.Partitions {
			v.replicas = len(p.Replicas)
		}
		rc, err := rcs.On(n, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range rc.Configs {
			if c.Value != nil && c.Source == 1 { // set on the topic
				v.configs[c.Key] = *c.Value
			}
		}
		out[n] = v
	}
	return out
}

// A first node creates the three topics with P partitions (meta: one),
// the replication factor, the cleanup policies and retention, and writes
// one application record and the ready mark.
func TestEnsureCreatesFromNothing(t *testing.T) {
	c := kafka(t, 3)
	cfg := config(c, "node-a", 4)
	cfg.MessagesRetention = 36 * time.Hour
	before := time.Now().UTC().Add(-time.Second)
	app, err := Ensure(ctx(t), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if app.Partitions != 4 || app.AppID != "shop" || app.CreatedBy != "node-a" || app.Format != FormatVersion || app.CreatedAt.Before(before) {
		t.Errorf("record: %+v", app)
	}
	v := describe(t, c, "shop-messages", "shop-changelog", "shop-meta")
	want := map[string]topicView{
		"shop-messages":  {4, 3, map[string]string{"cleanup.policy": "delete", "retention.ms": "129600000", "min.insync.replicas": "2"}},
		"shop-changelog": {4, 3, map[string]string{"cleanup.policy": "compact", "min.insync.replicas": "2"}},
		"shop-meta":      {1, 3, map[string]string{"cleanup.policy": "compact", "min.insync.replicas": "2"}},
	}
	if fmt.Sprint(v) != fmt.Sprint(want) {
		t.Errorf("topics:\n got %v\nwant %v", v, want)
	}
	keys, values := metaRecords(t, c)
	if strings.Join(keys, " ") != "app/node-a ready" {
		t.Errorf("meta keys %q", keys)
	}
	var rec Application
	if err := json.Unmarshal(values["app/node-a"], &rec); err != nil || rec != *app {
		t.Errorf("meta record %s (%v) != %+v", values["app/node-a"], err, app)
	}
}

// A node started again, or another node with P unset (adopt) or the same
// P, reads the existing record and writes no new one.
func TestEnsureAgainIsIdempotent(t *testing.T) {
	c := kafka(t, 3)
	first, err := Ensure(ctx(t), config(c, "node-a", 4), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []*clusterconfig.Config{config(c, "node-a", 4), config(c, "node-b", 0), config(c, "node-c", 4)} {
		app, err := Ensure(ctx(t), cfg, nil)
		if err != nil {
			t.Fatalf("%s: %v", cfg.NodeID, err)
		}
		if *app != *first {
			t.Errorf("%s: %+v, want %+v", cfg.NodeID, app, first)
		}
	}
	if keys, _ := metaRecords(t, c); strings.Join(keys, " ") != "app/node-a ready" {
		t.Errorf("meta keys %q", keys)
	}
	if v := describe(t, c, "shop-messages", "shop-changelog"); v["shop-messages"].partitions != 4 || v["shop-changelog"].partitions != 4 {
		t.Errorf("topics %v", v)
	}
}

// Nodes starting at the same moment agree on one record: every node gets
// the same one. Where they were started with different P, exactly the
// nodes whose P is the winner's start; the others are refused.
func TestEnsureConcurrentNodesAgree(t *testing.T) {
	for round := 0; round < 5; round++ {
		c := kafka(t, 3)
		ps := []int{0, 4, 0, 8, 4, 0}
		apps := make([]*Application, len(ps))
		errs := make([]error, len(ps))
		var wg sync.WaitGroup
		for i, p := range ps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				apps[i], errs[i] = Ensure(ctx(t), config(c, fmt.Sprintf("node-%d", i), p), nil)
			}()
		}
		wg.Wait()
		var winner *Application
		for i := range ps {
			if errs[i] == nil {
				if winner == nil {
					winner = apps[i]
				} else if *apps[i] != *winner {
					t.Fatalf("round %d: node-%d got %+v, another node %+v", round, i, apps[i], winner)
				}
			}
		}
		if winner == nil {
			t.Fatalf("round %d: every node refused: %v", round, errs)
		}
		// The winner is the first application record in the meta topic.
		keys, values := metaRecords(t, c)
		var first Application
		for _, k := range keys {
			if strings.HasPrefix(k, AppKeyPrefix) {
				json.Unmarshal(values[k], &first)
				break
			}
		}
		if first != *winner {
			t.Errorf("round %d: nodes agree on %+v, the first record is %+v", round, winner, first)
		}
		for i, p := range ps {
			ok := p == 0 || p == winner.Partitions
			if ok != (errs[i] == nil) {
				t.Errorf("round %d: node-%d with P=%d, winner P=%d: error %v", round, i, p, winner.Partitions, errs[i])
			}
			if errs[i] != nil && !strings.Contains(errs[i].Error(), fmt.Sprintf("--cluster-partitions %d: application shop has %d partitions", p, winner.Partitions)) {
				t.Errorf("round %d: node-%d refused with %v", round, i, errs[i])
			}
		}
		if v := describe(t, c, "shop-messages", "shop-changelog"); v["shop-messages"].partitions != winner.Partitions || v["shop-changelog"].partitions != winner.Partitions {
			t.Errorf("round %d: topics %v, P=%d", round, v, winner.Partitions)
		}
	}
}

func TestEnsureRefusesAnotherP(t *testing.T) {
	c := kafka(t, 3)
	if _, err := Ensure(ctx(t), config(c, "node-a", 4), nil); err != nil {
		t.Fatal(err)
	}
	_, err := Ensure(ctx(t), config(c, "node-b", 8), nil)
	want := "topics: --cluster-partitions 8: application shop has 4 partitions (created "
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "by node node-a); P is fixed when an application is created: start with --cluster-partitions 4 or 0 (adopt it)") {
		t.Errorf("got %v", err)
	}
}

// Topics that are not this application's are refused before anything is
// written into them, naming the topic and what to do.
func TestEnsureRefusesForeignTopics(t *testing.T) {
	t.Run("data topic without a record", func(t *testing.T) {
		c := kafka(t, 3)
		if err := c.CreateTopic("shop-changelog", 4, nil); err != nil {
			t.Fatal(err)
		}
		_, err := Ensure(ctx(t), config(c, "node-a", 4), nil)
		if err == nil || !strings.Contains(err.Error(), "topics: topic shop-changelog exists but shop-meta holds no application record: it belongs to another application, or shop-meta was deleted. Start with another --cluster-app-id") {
			t.Fatalf("got %v", err)
		}
		if keys, _ := metaRecords(t, c); len(keys) != 0 {
			t.Errorf("wrote %q", keys)
		}
	})
	t.Run("meta topic with other records", func(t *testing.T) {
		c := kafka(t, 3)
		if err := c.CreateTopic("shop-meta", 1, map[string]string{"cleanup.policy": "compact"}); err != nil {
			t.Fatal(err)
		}
		if err := meta.Write(ctx(t), "shop-meta", []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, &kgo.Record{Key: []byte("customer-42"), Value: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
		_, err := Ensure(ctx(t), config(c, "node-a", 4), nil)
		if err == nil || !strings.Contains(err.Error(), `topics: shop-meta offset 0 holds a record with key "customer-42", which statefun does not write: the topic is another application's`) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("meta topic with partitions", func(t *testing.T) {
		c := kafka(t, 3)
		if err := c.CreateTopic("shop-meta", 3, map[string]string{"cleanup.policy": "compact"}); err != nil {
			t.Fatal(err)
		}
		_, err := Ensure(ctx(t), config(c, "node-a", 4), nil)
		if err == nil || !strings.Contains(err.Error(), "topics: shop-meta has 3 partitions, want 1: it is not this application's meta topic") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("meta topic not compacted", func(t *testing.T) {
		c := kafka(t, 3)
		if err := c.CreateTopic("shop-meta", 1, nil); err != nil {
			t.Fatal(err)
		}
		_, err := Ensure(ctx(t), config(c, "node-a", 4), nil)
		if err == nil || !strings.Contains(err.Error(), "topics: shop-meta has cleanup.policy=delete, want compact") {
			t.Fatalf("got %v", err)
		}
	})
}

// Data topics changed after creation are refused: a partition count other
// than P, a changelog that is not compacted, a messages topic that is.
func TestEnsureRefusesChangedTopics(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(t *testing.T, adm *kadm.Client)
		want   string
	}{
		{"changelog partitions", func(t *testing.T, adm *kadm.Client) {
			if _, err := adm.CreatePartitions(ctx(t), 2, "shop-changelog"); err != nil {
				t.Fatal(err)
			}
		}, "topics: shop-changelog has 6 partitions, but application shop has P=4: every internal topic has P partitions"},
		{"messages partitions", func(t *testing.T, adm *kadm.Client) {
			if _, err := adm.CreatePartitions(ctx(t), 1, "shop-messages"); err != nil {
				t.Fatal(err)
			}
		}, "topics: shop-messages has 5 partitions, but application shop has P=4"},
		{"changelog not compacted", func(t *testing.T, adm *kadm.Client) {
			if _, err := adm.AlterTopicConfigs(ctx(t), []kadm.AlterConfig{{Name: "cleanup.policy", Value: ptr("delete")}}, "shop-changelog"); err != nil {
				t.Fatal(err)
			}
		}, "topics: shop-changelog has cleanup.policy=delete, want compact"},
		{"messages compacted", func(t *testing.T, adm *kadm.Client) {
			if _, err := adm.AlterTopicConfigs(ctx(t), []kadm.AlterConfig{{Name: "cleanup.policy", Value: ptr("compact")}}, "shop-messages"); err != nil {
				t.Fatal(err)
			}
		}, "topics: shop-messages has cleanup.policy=compact, want delete"},
		{"changelog deleted", func(t *testing.T, adm *kadm.Client) {
			if _, err := adm.DeleteTopic(ctx(t), "shop-changelog"); err != nil {
				t.Fatal(err)
			}
		}, "topics: shop-changelog is missing, but application shop was created with it ("},
	} {
		t.Run(c.name, func(t *testing.T) {
			k := kafka(t, 3)
			if _, err := Ensure(ctx(t), config(k, "node-a", 4), nil); err != nil {
				t.Fatal(err)
			}
			c.change(t, admin(t, k))
			_, err := Ensure(ctx(t), config(k, "node-b", 0), nil)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v\nwant %s", err, c.want)
			}
		})
	}
}

// A node that stopped after the record was written but before the data
// topics were created left a half-created application: the next node
// creates the missing topics with the record's P.
func TestEnsureFinishesHalfCreated(t *testing.T) {
	c := kafka(t, 3)
	if err := c.CreateTopic("shop-meta", 1, map[string]string{"cleanup.policy": "compact"}); err != nil {
		t.Fatal(err)
	}
	rec, _ := json.Marshal(Application{AppID: "shop", Partitions: 6, Format: 1, CreatedAt: time.Now().UTC(), CreatedBy: "node-x"})
	if err := meta.Write(ctx(t), "shop-meta", []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, &kgo.Record{Key: []byte("app/node-x"), Value: rec}); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateTopic("shop-messages", 6, nil); err != nil {
		t.Fatal(err)
	}
	app, err := Ensure(ctx(t), config(c, "node-a", 0), nil)
	if err != nil || app.Partitions != 6 || app.CreatedBy != "node-x" {
		t.Fatalf("%+v %v", app, err)
	}
	if v := describe(t, c, "shop-changelog"); v["shop-changelog"].partitions != 6 || v["shop-changelog"].configs["cleanup.policy"] != "compact" {
		t.Errorf("changelog %v", v)
	}
	if keys, _ := metaRecords(t, c); strings.Join(keys, " ") != "app/node-x ready" {
		t.Errorf("meta keys %q", keys)
	}
}

// A record from a newer build is refused; so is one for another id.
func TestEnsureRefusesNewerFormat(t *testing.T) {
	c := kafka(t, 3)
	if err := c.CreateTopic("shop-meta", 1, map[string]string{"cleanup.policy": "compact"}); err != nil {
		t.Fatal(err)
	}
	rec, _ := json.Marshal(Application{AppID: "shop", Partitions: 6, Format: FormatVersion + 1, CreatedBy: "node-x"})
	if err := meta.Write(ctx(t), "shop-meta", []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, &kgo.Record{Key: []byte("app/node-x"), Value: rec}); err != nil {
		t.Fatal(err)
	}
	_, err := Ensure(ctx(t), config(c, "node-a", 0), nil)
	if err == nil || !strings.Contains(err.Error(), "topics: application shop was created by a newer statefun (record format 2; this build reads up to 1): upgrade this node") {
		t.Fatalf("got %v", err)
	}
}

// The replication factor: the default 3 on three brokers; lowered to the
// broker count, with a warning, on a one-broker Kafka; an explicit factor
// is honoured, or refused when the brokers cannot hold it.
func TestEnsureReplication(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	one := kafka(t, 1)
	if _, err := Ensure(ctx(t), config(one, "node-a", 2), log); err != nil {
		t.Fatal(err)
	}
	for n, v := range describe(t, one, "shop-messages", "shop-changelog", "shop-meta") {
		if v.replicas != 1 || v.configs["min.insync.replicas"] != "" {
			t.Errorf("one broker: %s %+v", n, v)
		}
	}
	if !strings.Contains(logs.String(), "fewer brokers than the default replication factor") || !strings.Contains(logs.String(), "brokers=1 replication=1 default=3") {
		t.Errorf("log: %s", logs.String())
	}

	cfg := config(kafka(t, 1), "node-a", 2)
	cfg.Replication = 3
	if _, err := Ensure(ctx(t), cfg, nil); err == nil || !strings.Contains(err.Error(), "topics: --cluster-replication 3: the Kafka cluster has 1 broker(s), so a topic can have at most 1 replicas") {
		t.Errorf("explicit 3 on one broker: %v", err)
	}

	three := kafka(t, 3)
	cfg = config(three, "node-a", 2)
	cfg.Replication = 2
	logs.Reset()
	if _, err := Ensure(ctx(t), cfg, log); err != nil {
		t.Fatal(err)
	}
	for n, v := range describe(t, three, "shop-messages", "shop-changelog", "shop-meta") {
		if v.replicas != 2 || v.configs["min.insync.replicas"] != "" {
			t.Errorf("explicit 2: %s %+v", n, v)
		}
	}
	if logs.Len() != 0 {
		t.Errorf("log: %s", logs.String())
	}
}

// The meta reader passes transaction markers: a topic whose last records
// are a transaction's is read to its end.
func TestMetaReaderPassesTransactionMarkers(t *testing.T) {
	c := kafka(t, 1)
	if err := c.CreateTopic("shop-meta", 1, map[string]string{"cleanup.policy": "compact"}); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID("t"), kgo.DefaultProduceTopic("shop-meta"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, commit := range []bool{true, false} {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(ctx(t), &kgo.Record{Key: []byte(fmt.Sprint("k-", commit))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := cl.EndTransaction(ctx(t), kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	if keys, _ := metaRecords(t, c); strings.Join(keys, " ") != "k-true" {
		t.Errorf("keys %q", keys)
	}
}

// The client properties reach every client Ensure opens (admin, meta
// reader and writer): against a Kafka that requires SASL, Ensure works
// with the credentials as properties.
func TestEnsureWithSASLProperties(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "bob", "pw"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cfg := config(c, "node-a", 2)
	props, err := clusterconfig.ParseProperties("client.properties", []byte("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"+
		"sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n  username=\"bob\" password=\"pw\";\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Properties = props
	app, err := Ensure(ctx(t), cfg, nil)
	if err != nil || app.Partitions != 2 {
		t.Fatalf("%+v %v", app, err)
	}
}

// MaxMessageBytes reads the internal topics' limit: the brokers' default,
// and a topic's own, smaller one, named.
func TestMaxMessageBytes(t *testing.T) {
	c := kafka(t, 1)
	cfg := config(c, "n1", 4)
	if _, err := Ensure(ctx(t), cfg, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	limit, from, err := MaxMessageBytes(ctx(t), cfg)
	if err != nil || limit != 1048588 {
		t.Fatalf("MaxMessageBytes = %d (%s), %v; want the default 1048588", limit, from, err)
	}
	v := "200000"
	if _, err := admin(t, c).AlterTopicConfigs(ctx(t), []kadm.AlterConfig{{Name: "max.message.bytes", Value: &v}}, "shop-changelog"); err != nil {
		t.Fatal(err)
	}
	limit, from, err = MaxMessageBytes(ctx(t), cfg)
	if err != nil || limit != 200000 || from != "shop-changelog" {
		t.Fatalf("MaxMessageBytes = %d (%s), %v; want 200000 of shop-changelog", limit, from, err)
	}
}
