// Package meta reads and writes an application's meta topic, `<app>-meta`:
// one compacted partition that holds the application record (written by
// package topics) and the member records (package members). Every node
// reads it from its start, read_committed, in offset order, so every node
// sees the same records in the same order; "the first application record"
// means the same record everywhere.
//
// This package knows the topic, not the records: each record's key prefix
// and value belong to the package that writes it.
package meta

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Reader reads the meta topic's partition from its start.
type Reader struct {
	topic string
	cl    *kgo.Client
	adm   *kadm.Client
	pos   int64 // offset after the last record handed out or skipped
}

// Open starts reading topic (partition 0) from its start. opts are the
// node's client options (seed brokers, security).
func Open(topic string, opts []kgo.Opt) (*Reader, error) {
	opts = append(append([]kgo.Opt(nil), opts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Control records (transaction markers) are handed out too, so
		// that the reader's position passes them: the end offset it waits
		// for may be a marker's.
		kgo.KeepControlRecords(),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("meta: reading %s: %w", topic, err)
	}
	return &Reader{topic: topic, cl: cl, adm: kadm.NewClient(cl)}, nil
}

// Close stops reading.
func (r *Reader) Close() { r.cl.Close() }

// CatchUp hands every record up to the topic's current end (its last
// stable offset, as listed when CatchUp starts) to fn, in offset order,
// and returns. Transaction markers are skipped. A record fn has seen is
// not handed out again by a later CatchUp or Poll.
func (r *Reader) CatchUp(ctx context.Context, fn func(*kgo.Record)) error {
	ends, err := r.adm.ListCommittedOffsets(ctx, r.topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return fmt.Errorf("meta: listing the end of %s: %w", r.topic, err)
	}
	end, ok := ends.Lookup(r.topic, 0)
	if !ok {
		return fmt.Errorf("meta: %s has no partition 0", r.topic)
	}
	starts, err := r.adm.ListStartOffsets(ctx, r.topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return fmt.Errorf("meta: listing the start of %s: %w", r.topic, err)
	}
	if start, ok := starts.Lookup(r.topic, 0); ok && start.Offset > r.pos {
		// Records before the log start were deleted; the reader begins at
		// the log start.
		r.pos = start.Offset
	}
	for r.pos < end.Offset {
		if err := r.Poll(ctx, fn); err != nil {
			return err
		}
	}
	return nil
}

// Poll waits for the next records (or ctx) and hands them to fn.
func (r *Reader) Poll(ctx context.Context, fn func(*kgo.Record)) error {
	fs := r.cl.PollFetches(ctx)
	if err := ctx.Err(); err != nil {
		return err
	}
	var ferr error
	fs.EachError(func(t string, p int32, err error) {
		if ferr == nil && !errors.Is(err, context.Canceled) && !kerr.IsRetriable(err) {
			ferr = fmt.Errorf("meta: reading %s: %w", r.topic, err)
		}
	})
	fs.EachRecord(func(rec *kgo.Record) {
		if rec.Offset < r.pos {
			return
		}
		r.pos = rec.Offset + 1
		if !rec.Attrs.IsControl() {
			fn(rec)
		}
	})
	return ferr
}

// Write appends recs to topic and returns once all replicas in sync have
// them. The writer is idempotent (no record is written twice by a retry)
// and not transactional, so the records are visible to read_committed
// readers at once. opts are the node's client options.
func Write(ctx context.Context, topic string, opts []kgo.Opt, recs ...*kgo.Record) error {
	opts = append(append([]kgo.Opt(nil), opts...), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("meta: writing %s: %w", topic, err)
	}
	defer cl.Close()
	for _, rec := range recs {
		rec.Topic, rec.Partition = topic, 0
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("meta: writing %s: %w", topic, err)
	}
	return nil
}
