package changelog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/statefun-go/statefun/internal/store"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Restore defaults.
const (
	// DefaultBatchRecords is Config.BatchRecords's default.
	DefaultBatchRecords = 1000
	// DefaultBatchBytes is Config.BatchBytes's default.
	DefaultBatchBytes = 4 << 20
	// DefaultDeleteRetention is Config.DeleteRetention's default: Kafka's
	// default delete.retention.ms.
	DefaultDeleteRetention = 24 * time.Hour
)

// Config configures Restore.
type Config struct {
	// DB is the store the partition is restored into.
	DB *store.DB
	// Brokers are the seed brokers; ClientOpts are added to every client
	// Restore makes (security, timeouts). Restore makes its own clients
	// and closes them before it returns.
	Brokers    []string
	ClientOpts []kgo.Opt
	// Topic is the changelog topic; Partition the partition to restore,
	// which is the runtime partition of the same number.
	Topic     string
	Partition int32

	// BatchRecords and BatchBytes bound one applied batch: it is applied
	// once it holds this many records or bytes of keys and values, or the
	// restore reached its end. Zero means the defaults.
	BatchRecords int
	BatchBytes   int

	// DeleteRetention is the changelog topic's delete.retention.ms: how
	// long compaction keeps a tombstone. A store position last known
	// current longer ago than half of it may have missed a deletion, so
	// the partition's data is dropped and restored in full. Zero means
	// DefaultDeleteRetention.
	DeleteRetention time.Duration

	// Now is the clock; nil means time.Now.
	Now func() time.Time

	// Progress, if not nil, is called after each applied batch.
	Progress func(Progress)
}

// Progress reports a restore under way.
type Progress struct {
	// Applied is the number of records applied so far.
	Applied int64
	// Target is the number of offsets between the start and the end of
	// the restore: an upper bound of the records to apply (transaction
	// markers, aborted and compacted records take offsets too).
	Target int64
	// Offset is the position reached.
	Offset int64
	// From is the position the restore started at: Target-(Offset-From)
	// offsets are still to read.
	From int64
}

// Result reports a finished restore.
type Result struct {
	// From and To are the positions the restore started at and reached.
	From, To int64
	// Records is the number of records applied.
	Records int64
	// Dropped says why the partition's data in the store was dropped and
	// restored from the start of the changelog; empty if it was not.
	Dropped string
	// DroppedKeys is the number of keys the drop removed.
	DroppedKeys int
}

func (c Config) withDefaults() (Config, error) {
	switch {
	case c.DB == nil:
		return c, errors.New("changelog: Config.DB is nil")
	case len(c.Brokers) == 0:
		return c, errors.New("changelog: Config.Brokers is empty")
	case c.Topic == "":
		return c, errors.New("changelog: Config.Topic is empty")
	case c.Partition < 0 || int(c.Partition) >= c.DB.Partitions():
		return c, fmt.Errorf("changelog: Config.Partition is %d, want 0..%d (the store's partitions)", c.Partition, c.DB.Partitions()-1)
	case c.BatchRecords < 0 || c.BatchBytes < 0 || c.DeleteRetention < 0:
		return c, fmt.Errorf("changelog: Config.BatchRecords (%d), BatchBytes (%d) and DeleteRetention (%v) must not be negative",
			c.BatchRecords, c.BatchBytes, c.DeleteRetention)
	}
	if c.BatchRecords == 0 {
		c.BatchRecords = DefaultBatchRecords
	}
	if c.BatchBytes == 0 {
		c.BatchBytes = DefaultBatchBytes
	}
	if c.DeleteRetention == 0 {
		c.DeleteRetention = DefaultDeleteRetention
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c, nil
}

// Restore brings the store's data of one partition to the end of its
// changelog and returns the partition's Log, ready for its owner's
// transactions.
//
// It reads the changelog read_committed — records of aborted transactions
// are never delivered — from the position the store holds (the start, if
// none) up to the last stable offset at the time it starts, and applies
// the records in batches, each with the position it reaches
// (store.DB.ApplyChangelog). A crash part way leaves the store at the end
// of the last applied batch, and the next Restore resumes there; a restart
// of a process that owned the partition reads only the tail.
//
// The store's data of the partition is dropped, and the changelog read
// from its start, when the position cannot be trusted: the topic was
// deleted and created again (another topic id), the position is past the
// changelog's end (the topic lost records, or was recreated and refilled)
// or before its start (records were deleted), the position was last known
// current more than half of DeleteRetention ago (a tombstone may have been
// compacted away unseen), or a drop was interrupted. Result.Dropped says
// which. The store is a cache of Kafka, so Kafka wins.
func Restore(ctx context.Context, cfg Config) (*Log, Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, Result{}, err
	}
	p := int(cfg.Partition)
	db := cfg.DB
	started := cfg.Now()

	admCl, err := kgo.NewClient(append(append([]kgo.Opt(nil), cfg.ClientOpts...), kgo.SeedBrokers(cfg.Brokers...))...)
	if err != nil {
		return nil, Result{}, fmt.Errorf("changelog: client: %w", err)
	}
	defer admCl.Close()
	bounds, err := listBounds(ctx, kadm.NewClient(admCl), cfg.Topic, cfg.Partition)
	if err != nil {
		return nil, Result{}, err
	}

	pos, ok, err := db.ChangelogPosition(p)
	if err != nil {
		return nil, Result{}, fmt.Errorf("changelog: %w", err)
	}
	var res Result
	switch {
	case !ok:
		has, err := db.HasChangelogKeys(p)
		if err != nil {
			return nil, Result{}, fmt.Errorf("changelog: %w", err)
		}
		if has {
			res.Dropped = "the store holds data of the partition without a changelog position (an interrupted drop)"
		}
	case pos.TopicID != bounds.id:
		res.Dropped = fmt.Sprintf("the changelog topic %s has another topic id than the store's position (deleted and created again)", cfg.Topic)
	case pos.Next > bounds.high:
		res.Dropped = fmt.Sprintf("the store's position %d is past the changelog's end %d (the topic lost records, or was recreated)", pos.Next, bounds.high)
	case pos.Next < bounds.start:
		res.Dropped = fmt.Sprintf("the store's position %d is before the changelog's start %d (records were deleted)", pos.Next, bounds.start)
	case started.Sub(time.UnixMilli(pos.At)) >= cfg.DeleteRetention/2:
		res.Dropped = fmt.Sprintf("the store's position was last current at %s, more than half of the tombstone retention (%v) ago",
			time.UnixMilli(pos.At).UTC().Format(time.RFC3339), cfg.DeleteRetention)
	}
	from := pos.Next
	if res.Dropped != "" || !ok {
		if res.Dropped != "" {
			if res.DroppedKeys, err = db.DropChangelogPartition(p); err != nil {
				return nil, res, fmt.Errorf("changelog: %w", err)
			}
		}
		from = bounds.start
	}
	res.From, res.To = from, from
	target := max(bounds.stable, from)
	cur := store.ChangelogPosition{Next: from, At: started.UnixMilli(), TopicID: bounds.id}

	if from < target {
		n, err := consume(ctx, cfg, from, target, cur)
		res.Records, res.To = n, target
		if err != nil {
			res.To = -1
			if pos, ok, perr := db.ChangelogPosition(p); perr == nil && ok {
				res.To = pos.Next
			}
			return nil, res, err
		}
	}
	// The position is current as of the start: every record before target
	// is applied, and records after it were written after the start.
	cur.Next = target
	if err := db.ApplyChangelog(p, nil, cur); err != nil {
		return nil, res, fmt.Errorf("changelog: %w", err)
	}
	return &Log{db: db, topic: cfg.Topic, partition: cfg.Partition, pos: cur, now: cfg.Now}, res, nil
}

// bounds are a changelog partition's offsets when a restore starts.
type bounds struct {
	id     [16]byte
	start  int64 // the log start offset
	stable int64 // the last stable offset: read_committed reads up to it
	high   int64 // the high watermark
}

func listBounds(ctx context.Context, adm *kadm.Client, topic string, partition int32) (bounds, error) {
	var b bounds
	topics, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return b, fmt.Errorf("changelog: describe topic %s: %w", topic, err)
	}
	td, ok := topics[topic]
	switch {
	case !ok:
		return b, fmt.Errorf("changelog: topic %s was not described", topic)
	case td.Err != nil:
		return b, fmt.Errorf("changelog: topic %s: %w", topic, td.Err)
	case int(partition) >= len(td.Partitions):
		return b, fmt.Errorf("changelog: topic %s has %d partitions, partition %d does not exist", topic, len(td.Partitions), partition)
	}
	b.id = td.ID
	for _, l := range []struct {
		what string
		list func(context.Context, ...string) (kadm.ListedOffsets, error)
		into *int64
	}{
		{"start", adm.ListStartOffsets, &b.start},
		{"last stable", adm.ListCommittedOffsets, &b.stable},
		{"end", adm.ListEndOffsets, &b.high},
	} {
		offs, err := l.list(ctx, topic)
		if err != nil {
			return b, fmt.Errorf("changelog: list %s offsets of %s: %w", l.what, topic, err)
		}
		o, ok := offs.Lookup(topic, partition)
		if !ok {
			return b, fmt.Errorf("changelog: no %s offset listed for partition %d of %s", l.what, partition, topic)
		}
		if o.Err != nil {
			return b, fmt.Errorf("changelog: %s offset of partition %d of %s: %w", l.what, partition, topic, o.Err)
		}
		*l.into = o.Offset
	}
	return b, nil
}

// consume reads [from, target) of the partition and applies it in
// batches, each with the position it reaches. It returns the number of
// records applied.
//
// The consumer keeps control records (transaction markers): read_committed
// never delivers an aborted record, and a marker is often the last offset
// before target, so seeing markers is how the position reaches target.
func consume(ctx context.Context, cfg Config, from, target int64, cur store.ChangelogPosition) (int64, error) {
	p := int(cfg.Partition)
	cl, err := kgo.NewClient(append(append([]kgo.Opt(nil), cfg.ClientOpts...),
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{cfg.Topic: {cfg.Partition: kgo.NewOffset().At(from)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		// A position that falls out of range while reading is an error,
		// never a silent jump.
		kgo.ConsumeResetOffset(kgo.NoResetOffset()),
	)...)
	if err != nil {
		return 0, fmt.Errorf("changelog: client: %w", err)
	}
	defer cl.Close()

	var (
		ops     []store.Op
		size    int
		applied int64
		next    = from
	)
	flush := func() error {
		pos := cur
		pos.Next, pos.At = next, cfg.Now().UnixMilli()
		if err := cfg.DB.ApplyChangelog(p, ops, pos); err != nil {
			return fmt.Errorf("changelog: %w", err)
		}
		applied += int64(len(ops))
		ops, size = ops[:0], 0
		if cfg.Progress != nil {
			cfg.Progress(Progress{Applied: applied, Target: target - from, Offset: next, From: from})
		}
		return nil
	}
	for next < target {
		fs := cl.PollRecords(ctx, cfg.BatchRecords)
		if err := ctx.Err(); err != nil {
			return applied, fmt.Errorf("changelog: restore of partition %d stopped at offset %d of %d: %w", p, next, target, err)
		}
		var ferr error
		fs.EachError(func(t string, part int32, err error) {
			if ferr == nil {
				ferr = fmt.Errorf("changelog: read partition %d of %s at offset %d: %w", part, t, next, err)
			}
		})
		if ferr != nil {
			return applied, ferr
		}
		var derr error
		fs.EachRecord(func(r *kgo.Record) {
			if derr != nil || r.Offset < next || r.Offset >= target {
				return
			}
			next = r.Offset + 1
			if r.Attrs.IsControl() {
				return
			}
			op, err := decodeRecord(r.Key, r.Value)
			if err != nil {
				derr = fmt.Errorf("changelog: partition %d of %s, offset %d: %w", r.Partition, r.Topic, r.Offset, err)
				return
			}
			ops = append(ops, op)
			size += len(op.Key) + len(op.Value)
		})
		if derr != nil {
			return applied, derr
		}
		if len(ops) >= cfg.BatchRecords || size >= cfg.BatchBytes || next >= target {
			if err := flush(); err != nil {
				return applied, err
			}
		}
	}
	return applied, nil
}
