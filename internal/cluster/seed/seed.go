// Package seed restores a cluster backup into a new cluster-mode
// application (docs/how-to/backup.md, "Restore a cluster"): it creates
// the application's internal topics with the backup's P, writes each
// partition of the backup into the new changelog topic as the records
// compaction would leave (one put per key), in one Kafka transaction, and
// commits the new consumer group's offsets of the Kafka ingress topics
// from the read positions the partitions hold. Nodes started on the new
// application then restore every partition from its changelog, as they
// do when a partition moves.
package seed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/statefun-go/statefun/internal/cluster/changelog"
	"github.com/statefun-go/statefun/internal/cluster/clusterconfig"
	"github.com/statefun-go/statefun/internal/cluster/topics"
	"github.com/statefun-go/statefun/internal/kafkatxn"
	"github.com/statefun-go/statefun/internal/store"
)

// NodeID is the name the seed gives itself where the application record
// names its creator.
const NodeID = "backup-seed"

// Result is what Seed wrote.
type Result struct {
	// App is the application record of the new application.
	App *topics.Application
	// Records is how many changelog records each partition got.
	Records []int64
	// IngressOffsets are the consumer group offsets committed for the
	// Kafka ingress topics, by topic and partition.
	IngressOffsets map[string]map[int32]int64
	// MissingTopics are Kafka ingress topics the backup holds positions
	// of that this Kafka does not have: no offset was committed for them.
	MissingTopics []string
	// Took is how long the seed took.
	Took time.Duration
}

// ErrNotEmpty is wrapped by Seed's error when the application's changelog
// topic holds records already: a seed writes a new application only.
var ErrNotEmpty = errors.New("seed: the application's changelog topic is not empty")

// Seed writes the cluster backup in dir, verified first, into the new
// application cfg names (cfg.Partitions is set to the backup's).
func Seed(ctx context.Context, cfg *clusterconfig.Config, dir string, logger pebble.Logger, log *slog.Logger) (*Result, error) {
	start := time.Now()
	v, err := store.VerifyClusterBackup(dir, logger)
	if err != nil {
		return nil, err
	}
	m := v.Manifest
	c := *cfg
	c.Partitions = m.Partitions
	app, err := topics.Ensure(ctx, &c, log)
	if err != nil {
		return nil, err
	}
	client, err := c.Client()
	if err != nil {
		return nil, err
	}
	opts := append(append([]kgo.Opt{}, client.Opts...), client.ProducerOpts...)
	opts = append(opts, kgo.TransactionalID(c.TransactionalIDOf(NodeID)), kgo.TransactionTimeout(10*time.Minute),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RequiredAcks(kgo.AllISRAcks()))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("seed: Kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, c.ChangelogTopic())
	if err != nil {
		return nil, fmt.Errorf("seed: the end offsets of %s: %w", c.ChangelogTopic(), err)
	}
	var nonEmpty error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil && o.Offset > 0 && nonEmpty == nil {
			nonEmpty = fmt.Errorf("%w: %s partition %d ends at offset %d. A backup is restored into a new application only: choose another --cluster-app-id, or delete %s, %s, %s and the group %s first",
				ErrNotEmpty, c.ChangelogTopic(), o.Partition, o.Offset, c.MessagesTopic(), c.ChangelogTopic(), c.MetaTopic(), c.Group())
		}
		if o.Err != nil && nonEmpty == nil {
			nonEmpty = fmt.Errorf("seed: the end offset of %s partition %d: %w", c.ChangelogTopic(), o.Partition, o.Err)
		}
	})
	if nonEmpty != nil {
		return nil, nonEmpty
	}
	res := &Result{App: app, Records: make([]int64, m.Partitions), IngressOffsets: map[string]map[int32]int64{}}
	if err := cl.BeginTransaction(); err != nil {
		return nil, fmt.Errorf("seed: begin the transaction: %w", err)
	}
	var produceErr error
	failed := func(_ *kgo.Record, err error) {
		if err != nil && produceErr == nil {
			produceErr = err
		}
	}
	parts := store.NewClusterBackupReader(dir, m, logger)
	defer parts.Close()
	for p := range m.Partitions {
		err := parts.Records(p, func(key, value []byte) error {
			if _, rp, ok := store.ReadPositionOf(key, value); ok {
				if rp.Topic == store.MessagesTopic {
					// An offset of the old messages topic: the new one
					// starts empty.
					return nil
				}
				ofTopic := res.IngressOffsets[rp.Topic]
				if ofTopic == nil {
					ofTopic = map[int32]int64{}
					res.IngressOffsets[rp.Topic] = ofTopic
				}
				// The lowest position any partition holds: records from
				// it on are routed again, and each partition skips those
				// it applied (its own read position).
				if o, ok := ofTopic[rp.Partition]; !ok || rp.Offset < o {
					ofTopic[rp.Partition] = rp.Offset
				}
			}
			cl.Produce(ctx, changelog.PutRecord(c.ChangelogTopic(), int32(p), key, value), failed)
			res.Records[p]++
			return ctx.Err()
		})
		if err != nil {
			_ = cl.AbortBufferedRecords(ctx)
			_ = cl.EndTransaction(ctx, kgo.TryAbort)
			return nil, fmt.Errorf("seed: partition %d: %w", p, err)
		}
	}
	if err := cl.Flush(ctx); err != nil || produceErr != nil {
		_ = cl.EndTransaction(ctx, kgo.TryAbort)
		return nil, fmt.Errorf("seed: producing the changelog: %w", errors.Join(err, produceErr))
	}
	var produced []string
	if slices.ContainsFunc(res.Records, func(n int64) bool { return n > 0 }) {
		produced = []string{c.ChangelogTopic()}
	}
	if err := kafkatxn.Await(ctx, produced, 10*time.Second, func(t string) bool { return kafkatxn.Settled(cl, t) }); err != nil {
		_ = cl.EndTransaction(ctx, kgo.TryAbort)
		return nil, fmt.Errorf("seed: the changelog's transaction is aborted, nothing was written: %w", err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return nil, fmt.Errorf("seed: committing the changelog's transaction: %w", err)
	}
	if len(res.IngressOffsets) > 0 {
		// Offsets of topics this Kafka does not have (a restore into
		// another Kafka cluster) mean nothing here: reported, not
		// committed.
		var names []string
		for t := range res.IngressOffsets {
			names = append(names, t)
		}
		listed, err := adm.ListTopics(ctx, names...)
		if err != nil {
			return nil, fmt.Errorf("seed: the changelog is written, but the Kafka ingress topics could not be listed (%v): commit group %s's offsets with Kafka's tools: %v", err, c.Group(), res.IngressOffsets)
		}
		for _, t := range names {
			if d, ok := listed[t]; !ok || d.Err != nil {
				res.MissingTopics = append(res.MissingTopics, t)
				delete(res.IngressOffsets, t)
			}
		}
		slices.Sort(res.MissingTopics)
	}
	if len(res.IngressOffsets) > 0 {
		var offs kadm.Offsets
		for t, ps := range res.IngressOffsets {
			for kp, o := range ps {
				offs.AddOffset(t, kp, o, -1)
			}
		}
		resp, err := adm.CommitOffsets(ctx, c.Group(), offs)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			return nil, fmt.Errorf("seed: the changelog is written, but the Kafka ingress offsets of group %s were not committed (%v): its ingress topics would start at their startupPosition. Commit them with Kafka's tools: %v",
				c.Group(), err, res.IngressOffsets)
		}
	}
	res.Took = time.Since(start)
	return res, nil
}
