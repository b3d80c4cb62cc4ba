package changelog

import (
	"fmt"
	"time"

	"github.com/statefun-go/statefun/internal/store"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Log is one changelog partition whose store data is restored to its end:
// it turns the partition's overlays into records and applies the overlays
// of committed transactions. Restore returns it. A Log is not safe for
// concurrent use; the partition's owner uses it from one goroutine.
type Log struct {
	db        *store.DB
	topic     string
	partition int32
	pos       store.ChangelogPosition
	now       func() time.Time
}

// Topic returns the changelog topic.
func (l *Log) Topic() string { return l.topic }

// Partition returns the changelog partition, the runtime partition.
func (l *Log) Partition() int32 { return l.partition }

// Position returns the position the store holds: the offset of the first
// changelog record not applied.
func (l *Log) Position() int64 { return l.pos.Next }

// Records returns the changelog records of the partition's overlay, to
// produce in the transaction (see the package function Records).
func (l *Log) Records(overlay *store.Batch) ([]*kgo.Record, error) {
	return Records(overlay, l.topic, l.partition)
}

// Apply writes the overlay of a committed transaction into the store, in
// one batch together with the changelog position its records reach (the
// offset after the last of recs, which the producer filled in), and closes
// the overlay. Call it only after the transaction committed; after an
// abort, close the overlay instead, so nothing of it reaches the store.
//
// recs are the records Records made of this overlay, as produced. An
// overlay without writes needs no records and changes nothing. The batch
// is not synced: the transaction made the records durable in Kafka, and a
// tail of applies a crash loses is read back from the changelog by the
// next Restore, from the position that survived with the data it covers.
func (l *Log) Apply(overlay *store.Batch, recs []*kgo.Record) error {
	defer overlay.Close()
	var ops []store.Op
	if err := overlay.Ops(func(op store.Op) error { ops = append(ops, op); return nil }); err != nil {
		return fmt.Errorf("changelog: partition %d: %w", l.partition, err)
	}
	if len(ops) == 0 && len(recs) == 0 {
		return nil
	}
	if len(recs) == 0 {
		return fmt.Errorf("changelog: partition %d: an overlay of %d writes applied without its changelog records", l.partition, len(ops))
	}
	next := l.pos.Next
	for _, r := range recs {
		if r.Topic != l.topic || r.Partition != l.partition {
			return fmt.Errorf("changelog: partition %d of %s: applying a record of partition %d of %s", l.partition, l.topic, r.Partition, r.Topic)
		}
		if r.Offset < l.pos.Next {
			return fmt.Errorf("changelog: partition %d: record at offset %d is before the store's position %d (not produced, or produced before the last restore)",
				l.partition, r.Offset, l.pos.Next)
		}
		next = max(next, r.Offset+1)
	}
	pos := l.pos
	pos.Next, pos.At = next, l.now().UnixMilli()
	if err := l.db.ApplyChangelog(int(l.partition), ops, pos); err != nil {
		return fmt.Errorf("changelog: %w", err)
	}
	l.pos = pos
	return nil
}
