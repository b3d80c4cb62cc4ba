// Package topics makes and checks an application's internal topics on
// Kafka and the application record every node agrees on
// (docs/explanation/cluster.md, "Internal topics"). A node calls Ensure once at start:
// it returns the application's P, or refuses to start with an error that
// says what is wrong and what to do.
//
// How nodes that start at the same time agree: each node that finds no
// application record in `<app>-meta` proposes one, keyed by its own node
// id, and then reads the meta topic from its start; the FIRST application
// record in the topic wins, for every node, whenever it reads. Proposals
// have distinct keys, so compaction never replaces the winner with a
// later proposal. The data topics are created only after a record exists,
// so data topics without a record are never a starting application's:
// they are refused as another application's.
package topics

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/statefun-go/statefun/internal/cluster/clusterconfig"
	"github.com/statefun-go/statefun/internal/cluster/meta"
	"github.com/statefun-go/statefun/internal/kafkatopic"
)

// FormatVersion is the version of the internal topics' record formats
// this build writes and reads. An application record with a higher
// version was made by a newer build, which this one refuses to run.
const FormatVersion = 1

// Keys of the meta records this package writes.
const (
	// AppKeyPrefix prefixes an application record proposal's key; the
	// proposing node's id follows.
	AppKeyPrefix = "app/"
	// ReadyKey marks that the data topics were created for the
	// application record. Before it, a missing data topic is created
	// (its creator stopped half way); after it, a missing data topic was
	// deleted, and the node refuses to start rather than run on an empty
	// one.
	ReadyKey = "ready"
)

// Application is the application record: what every node of the
// application agrees on.
type Application struct {
	// AppID is the application id.
	AppID string `json:"app_id"`
	// Partitions is P: the partition count of the messages and changelog
	// topics, and the number of runtime partitions.
	Partitions int `json:"partitions"`
	// Format is the FormatVersion of the build that created it.
	Format int `json:"format"`
	// CreatedAt is when the record was proposed.
	CreatedAt time.Time `json:"created_at"`
	// CreatedBy is the node id that proposed it.
	CreatedBy string `json:"created_by"`
}

// ready is the value of the ReadyKey record.
type ready struct {
	At time.Time `json:"at"`
	By string    `json:"by"`
}

// Ensure makes sure the application's internal topics exist with the
// settings of cfg (a validated Config) and returns the application record
// every node agrees on. A node started with another P than the record's,
// topics that are another application's, a deleted data topic, and data
// topics whose partition count or cleanup policy do not match are refused
// with an error naming the topic and what to do. log receives notes (a
// replication factor lowered to the number of brokers).
func Ensure(ctx context.Context, cfg *clusterconfig.Config, log *slog.Logger) (*Application, error) {
	if log == nil {
		log = slog.Default()
	}
	client, err := cfg.Client()
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(client.Opts...)
	if err != nil {
		return nil, fmt.Errorf("topics: %w", err)
	}
	defer cl.Close()
	e := &ensure{cfg: cfg, opts: client.Opts, cl: cl, adm: kadm.NewClient(cl), log: log}
	return e.run(ctx)
}

type ensure struct {
	cfg  *clusterconfig.Config
	opts []kgo.Opt
	cl   *kgo.Client
	adm  *kadm.Client
	log  *slog.Logger
	rf   int16
}

// state is what the meta topic says.
type state struct {
	app   *Application
	ready bool
}

func (e *ensure) run(ctx context.Context) (*Application, error) {
	cfg := e.cfg
	if err := e.replication(ctx); err != nil {
		return nil, err
	}
	if err := e.create(ctx, cfg.MetaTopic(), 1, map[string]*string{"cleanup.policy": ptr("compact")}); err != nil {
		return nil, err
	}
	// The data topics are listed before the meta topic is read: a data
	// topic is created only after an application record was written, so
	// one seen here has its record in the meta topic read next.
	before, err := e.list(ctx)
	if err != nil {
		return nil, err
	}
	if err := e.checkMeta(before); err != nil {
		return nil, err
	}
	r, err := meta.Open(cfg.MetaTopic(), e.opts)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var st state
	var bad error
	read := func() error {
		err := r.CatchUp(ctx, func(rec *kgo.Record) {
			if bad == nil {
				bad = e.record(&st, rec)
			}
		})
		if err == nil {
			err = bad
		}
		return err
	}
	if err := read(); err != nil {
		return nil, err
	}
	if st.app == nil {
		for _, t := range []string{cfg.MessagesTopic(), cfg.ChangelogTopic()} {
			if _, ok := before[t]; ok {
				return nil, fmt.Errorf("topics: topic %s exists but %s holds no application record: it belongs to another application, or %s was deleted. Start with another --cluster-app-id, or, if %s and %s hold nothing you need, delete them and start again",
					t, cfg.MetaTopic(), cfg.MetaTopic(), cfg.MessagesTopic(), cfg.ChangelogTopic())
			}
		}
		if err := e.propose(ctx); err != nil {
			return nil, err
		}
		if err := read(); err != nil {
			return nil, err
		}
		if st.app == nil {
			return nil, fmt.Errorf("topics: the application record this node wrote to %s was not read back", cfg.MetaTopic())
		}
	}
	app := st.app
	if app.Format > FormatVersion {
		return nil, fmt.Errorf("topics: application %s was created by a newer statefun (record format %d; this build reads up to %d): upgrade this node", app.AppID, app.Format, FormatVersion)
	}
	if app.AppID != cfg.AppID {
		return nil, fmt.Errorf("topics: %s holds the record of application %q, not %q: it is another application's topic", cfg.MetaTopic(), app.AppID, cfg.AppID)
	}
	if cfg.Partitions != 0 && cfg.Partitions != app.Partitions {
		return nil, fmt.Errorf("topics: --cluster-partitions %d: application %s has %d partitions (created %s by node %s); P is fixed when an application is created: start with --cluster-partitions %d or 0 (adopt it), or use another --cluster-app-id",
			cfg.Partitions, app.AppID, app.Partitions, app.CreatedAt.UTC().Format(time.RFC3339), app.CreatedBy, app.Partitions)
	}
	if err := e.data(ctx, app, st.ready); err != nil {
		return nil, err
	}
	if !st.ready {
		v, _ := json.Marshal(ready{At: time.Now().UTC(), By: cfg.NodeID})
		if err := meta.Write(ctx, cfg.MetaTopic(), e.opts, &kgo.Record{Key: []byte(ReadyKey), Value: v}); err != nil {
			return nil, fmt.Errorf("topics: %w", err)
		}
	}
	return app, nil
}

// record folds one meta record into st. Member records are another
// package's and skipped; a record statefun does not write means the topic
// is not statefun's.
func (e *ensure) record(st *state, rec *kgo.Record) error {
	k := string(rec.Key)
	switch {
	case strings.HasPrefix(k, AppKeyPrefix):
		if st.app != nil || rec.Value == nil {
			return nil // the first application record wins
		}
		var a Application
		if err := json.Unmarshal(rec.Value, &a); err != nil || a.Partitions < 1 {
			return fmt.Errorf("topics: %s offset %d: the application record %q is unreadable (%v); the topic is damaged or not statefun's", e.cfg.MetaTopic(), rec.Offset, k, errOr(err, "no partitions"))
		}
		st.app = &a
	case k == ReadyKey:
		st.ready = st.ready || rec.Value != nil
	case strings.HasPrefix(k, "member/"):
	default:
		return fmt.Errorf("topics: %s offset %d holds a record with key %q, which statefun does not write: the topic is another application's; start with another --cluster-app-id", e.cfg.MetaTopic(), rec.Offset, k)
	}
	return nil
}

func errOr(err error, s string) string {
	if err != nil {
		return err.Error()
	}
	return s
}

// propose writes this node's application record proposal.
func (e *ensure) propose(ctx context.Context) error {
	p := e.cfg.Partitions
	if p == 0 {
		p = clusterconfig.DefaultPartitions
	}
	v, err := json.Marshal(Application{AppID: e.cfg.AppID, Partitions: p, Format: FormatVersion, CreatedAt: time.Now().UTC(), CreatedBy: e.cfg.NodeID})
	if err != nil {
		return err
	}
	if err := meta.Write(ctx, e.cfg.MetaTopic(), e.opts, &kgo.Record{Key: []byte(AppKeyPrefix + e.cfg.NodeID), Value: v}); err != nil {
		return fmt.Errorf("topics: proposing the application record: %w", err)
	}
	return nil
}

// replication decides the replication factor of topics this node creates:
// the configured one, which the brokers must be able to hold, or the
// default lowered to the number of brokers.
func (e *ensure) replication(ctx context.Context) error {
	bs, err := e.adm.ListBrokers(ctx)
	if err != nil {
		return fmt.Errorf("topics: listing the brokers: %w", err)
	}
	n := len(bs)
	switch {
	case e.cfg.Replication > n:
		return fmt.Errorf("topics: --cluster-replication %d: the Kafka cluster has %d broker(s), so a topic can have at most %d replicas; lower it, or leave it unset (default %d, lowered to the number of brokers)",
			e.cfg.Replication, n, n, clusterconfig.DefaultReplication)
	case e.cfg.Replication > 0:
		e.rf = int16(e.cfg.Replication)
	case n < clusterconfig.DefaultReplication:
		e.rf = int16(max(n, 1))
		e.log.Warn("cluster: the Kafka cluster has fewer brokers than the default replication factor; new internal topics get fewer replicas, and losing a broker can lose data. Set --cluster-replication to say so explicitly",
			"brokers", n, "replication", e.rf, "default", clusterconfig.DefaultReplication)
	default:
		e.rf = clusterconfig.DefaultReplication
	}
	return nil
}

// create creates topic when it does not exist.
func (e *ensure) create(ctx context.Context, topic string, partitions int32, configs map[string]*string) error {
	if e.rf >= 3 {
		// acks=all then waits for at least two copies, so one broker's
		// loss never loses an acknowledged record.
		configs["min.insync.replicas"] = ptr("2")
	}
	res, err := e.adm.CreateTopic(ctx, partitions, e.rf, configs, topic)
	if errors.Is(err, kerr.TopicAlreadyExists) {
		return nil // another node created it
	}
	if err != nil && res.ErrMessage != "" {
		err = fmt.Errorf("%w: %s", err, res.ErrMessage)
	}
	if err != nil {
		return fmt.Errorf("topics: creating %s (%d partitions, replication %d): %w", topic, partitions, e.rf, err)
	}
	return nil
}

// topicInfo is an existing topic's partition count and cleanup policy.
type topicInfo struct {
	partitions int
	cleanup    []string
}

// list describes the application's three topics that exist.
func (e *ensure) list(ctx context.Context) (map[string]topicInfo, error) {
	names := []string{e.cfg.MessagesTopic(), e.cfg.ChangelogTopic(), e.cfg.MetaTopic()}
	for _, n := range names {
		if err := kafkatopic.Check(n); err != nil {
			return nil, fmt.Errorf("topics: topic %s: %v", kafkatopic.Quote(n), err)
		}
	}
	// A metadata request of its own, not kadm's ListTopics: that answers
	// from the client's metadata cache, which would still miss a topic
	// this node has just created.
	req := kmsg.NewPtrMetadataRequest()
	for _, n := range names {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(n)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, e.cl)
	if err != nil {
		return nil, fmt.Errorf("topics: describing %s: %w", strings.Join(names, ", "), err)
	}
	out := map[string]topicInfo{}
	var exist []string
	for _, t := range resp.Topics {
		if t.Topic == nil || !slices.Contains(names, *t.Topic) {
			continue
		}
		n := *t.Topic
		switch err := kerr.ErrorForCode(t.ErrorCode); {
		case errors.Is(err, kerr.UnknownTopicOrPartition):
			continue
		case err != nil:
			return nil, fmt.Errorf("topics: describing %s: %w", n, err)
		}
		out[n] = topicInfo{partitions: len(t.Partitions)}
		exist = append(exist, n)
	}
	if len(exist) == 0 {
		return out, nil
	}
	rcs, err := e.adm.DescribeTopicConfigs(ctx, exist...)
	if err != nil {
		return nil, fmt.Errorf("topics: reading the configuration of %s: %w", strings.Join(exist, ", "), err)
	}
	for _, rc := range rcs {
		if rc.Err != nil {
			return nil, fmt.Errorf("topics: reading the configuration of %s: %w", rc.Name, rc.Err)
		}
		ti := out[rc.Name]
		ti.cleanup = []string{"delete"} // Kafka's default
		for _, c := range rc.Configs {
			if c.Key == "cleanup.policy" && c.Value != nil {
				ti.cleanup = strings.Split(strings.ReplaceAll(*c.Value, " ", ""), ",")
			}
		}
		out[rc.Name] = ti
	}
	return out, nil
}

// checkMeta refuses a meta topic that cannot be the application's: more
// than one partition (records would not be in one order) or not compacted
// (member records would pile up, or the application record expire).
func (e *ensure) checkMeta(ts map[string]topicInfo) error {
	t := e.cfg.MetaTopic()
	m, ok := ts[t]
	if !ok {
		return fmt.Errorf("topics: %s was created but is not listed; try again", t)
	}
	if m.partitions != 1 {
		return fmt.Errorf("topics: %s has %d partitions, want 1: it is not this application's meta topic; start with another --cluster-app-id", t, m.partitions)
	}
	if !slices.Contains(m.cleanup, "compact") || slices.Contains(m.cleanup, "delete") {
		return fmt.Errorf("topics: %s has cleanup.policy=%s, want compact: the application record must never expire; set cleanup.policy=compact on it (kafka-configs --alter --add-config cleanup.policy=compact)", t, strings.Join(m.cleanup, ","))
	}
	return nil
}

// data creates the data topics that are missing (unless the application
// was ready, when a missing one was deleted) and checks them against the
// application record.
func (e *ensure) data(ctx context.Context, app *Application, wasReady bool) error {
	cfg := e.cfg
	ts, err := e.list(ctx)
	if err != nil {
		return err
	}
	retention := int64(-1)
	if r := cfg.MessagesRetentionOrDefault(); r > 0 {
		retention = r.Milliseconds()
	}
	want := []struct {
		topic   string
		configs map[string]*string
	}{
		{cfg.MessagesTopic(), map[string]*string{"cleanup.policy": ptr("delete"), "retention.ms": ptr(strconv.FormatInt(retention, 10))}},
		{cfg.ChangelogTopic(), map[string]*string{"cleanup.policy": ptr("compact")}},
	}
	created := false
	for _, w := range want {
		if _, ok := ts[w.topic]; ok {
			continue
		}
		if wasReady {
			return fmt.Errorf("topics: %s is missing, but application %s was created with it (%s by node %s): it was deleted, and with it the application's %s. Restore it, or delete %s, %s, %s and the consumer group %s to start the application afresh",
				w.topic, app.AppID, app.CreatedAt.UTC().Format(time.RFC3339), app.CreatedBy, what(w.topic, cfg), cfg.MessagesTopic(), cfg.ChangelogTopic(), cfg.MetaTopic(), cfg.Group())
		}
		if err := e.create(ctx, w.topic, int32(app.Partitions), w.configs); err != nil {
			return err
		}
		created = true
	}
	if created {
		if ts, err = e.list(ctx); err != nil {
			return err
		}
	}
	for _, w := range want {
		ti, ok := ts[w.topic]
		if !ok {
			return fmt.Errorf("topics: %s was created but is not listed; try again", w.topic)
		}
		if ti.partitions != app.Partitions {
			return fmt.Errorf("topics: %s has %d partitions, but application %s has P=%d: every internal topic has P partitions (runtime partition i is Kafka partition i), so it cannot run. Was it changed with kafka-topics --alter? Partitions cannot be removed: restore the application into a new --cluster-app-id",
				w.topic, ti.partitions, app.AppID, app.Partitions)
		}
	}
	if ti := ts[cfg.ChangelogTopic()]; !slices.Contains(ti.cleanup, "compact") || slices.Contains(ti.cleanup, "delete") {
		return fmt.Errorf("topics: %s has cleanup.policy=%s, want compact: a changelog that deletes old records loses state a partition move restores; set cleanup.policy=compact on it", cfg.ChangelogTopic(), strings.Join(ti.cleanup, ","))
	}
	if ti := ts[cfg.MessagesTopic()]; slices.Contains(ti.cleanup, "compact") {
		return fmt.Errorf("topics: %s has cleanup.policy=%s, want delete: compaction would keep only the last message per address and drop the others; set cleanup.policy=delete on it", cfg.MessagesTopic(), strings.Join(ti.cleanup, ","))
	}
	return nil
}

// what says what a data topic holds, for the error about its deletion.
func what(topic string, cfg *clusterconfig.Config) string {
	if topic == cfg.ChangelogTopic() {
		return "state (every partition's store)"
	}
	return "messages not yet processed"
}

func ptr(s string) *string { return &s }

// MaxMessageBytes returns the largest record batch the brokers take for
// the application's messages and changelog topics: the smaller of their
// max.message.bytes (the topic's own, or the brokers' message.max.bytes
// it defaults to), and which topic sets it. A node whose producer would
// send larger batches (max.request.size) refuses larger records where they
// are made instead: produced, every transaction carrying one would abort.
// It returns 0 when the brokers do not say.
func MaxMessageBytes(ctx context.Context, cfg *clusterconfig.Config) (int, string, error) {
	client, err := cfg.Client()
	if err != nil {
		return 0, "", err
	}
	cl, err := kgo.NewClient(client.Opts...)
	if err != nil {
		return 0, "", fmt.Errorf("topics: Kafka client: %w", err)
	}
	defer cl.Close()
	names := []string{cfg.MessagesTopic(), cfg.ChangelogTopic()}
	rcs, err := kadm.NewClient(cl).DescribeTopicConfigs(ctx, names...)
	if err != nil {
		return 0, "", fmt.Errorf("topics: reading the configuration of %s: %w", strings.Join(names, ", "), err)
	}
	least, from := 0, ""
	for _, rc := range rcs {
		if rc.Err != nil {
			return 0, "", fmt.Errorf("topics: reading the configuration of %s: %w", rc.Name, rc.Err)
		}
		for _, c := range rc.Configs {
			if c.Key != "max.message.bytes" || c.Value == nil {
				continue
			}
			n, err := strconv.Atoi(*c.Value)
			if err != nil || n <= 0 {
				return 0, "", fmt.Errorf("topics: %s has max.message.bytes %q, not a positive number", rc.Name, *c.Value)
			}
			if least == 0 || n < least {
				least, from = n, rc.Name
			}
		}
	}
	return least, from, nil
}
