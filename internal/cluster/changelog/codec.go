// Package changelog keeps a partition's store writes in its Kafka changelog
// partition and the local store a prefix of that changelog (cluster mode,
// docs/explanation/cluster.md).
//
// The three steps of a partition's life on one process:
//
//   - Restore, when the partition is assigned: read its changelog
//     read_committed from the position the store holds to the end, applying
//     bounded batches, each with the position it reaches.
//   - Log.Records, in each Kafka transaction: the partition's overlay (a
//     store.Batch that is never committed by itself) becomes changelog
//     records, produced in the transaction.
//   - Log.Apply, once the transaction committed: the overlay reaches the
//     store in one batch with the changelog position its records reach. An
//     aborted transaction's overlay is closed instead; nothing of it
//     reaches the store.
//
// So the store never holds a write of a transaction that did not commit,
// and always records which prefix of the changelog it holds.
package changelog

import (
	"errors"
	"fmt"

	"github.com/statefun-go/statefun/internal/store"
	"github.com/twmb/franz-go/pkg/kgo"
)

// valuePut is the first byte of the value of every changelog record that
// puts a key: format 1. Part of the changelog format.
const valuePut byte = 0x01

// ErrFormat is wrapped by the error for a changelog record this build
// cannot read: a value with an unknown first byte (written by a newer
// build, or not by this runtime), or a key the store refuses.
var ErrFormat = errors.New("changelog: record not in the changelog format")

// encodeOp returns the changelog record of one store write.
//
// A record of the changelog topic, partition = the writing partition:
//
//	key:   the store key, as the store writes it (docs/reference/storage.md)
//
//	value, a put:
//	+------+------------------------------------------+
//	| 0x01 | the store value, as the store writes it  |
//	+------+------------------------------------------+
//	  1 B     the rest (may be empty)
//
//	value, a deletion: null (a tombstone; compaction drops the key)
//
//	headers: none; timestamp: the producer's.
//
// The first byte is the format version and tells a put of a zero-length
// store value (the audit indexes hold nothing but keys) from a tombstone
// without relying on a client keeping null and empty values apart.
func encodeOp(op store.Op) (key, value []byte) {
	key = append([]byte(nil), op.Key...)
	if op.Delete {
		return key, nil
	}
	value = make([]byte, 0, 1+len(op.Value))
	value = append(value, valuePut)
	return key, append(value, op.Value...)
}

// decodeRecord is the inverse of encodeOp. The returned slices alias the
// record's.
func decodeRecord(key, value []byte) (store.Op, error) {
	if err := store.CheckChangelogKey(key); err != nil {
		return store.Op{}, fmt.Errorf("%w: %w", ErrFormat, err)
	}
	if value == nil {
		return store.Op{Key: key, Delete: true}, nil
	}
	if len(value) == 0 || value[0] != valuePut {
		first := "nothing"
		if len(value) > 0 {
			first = fmt.Sprintf("%#02x", value[0])
		}
		return store.Op{}, fmt.Errorf("%w: the value starts with %s, want %#02x (a put of format 1); written by a newer build?",
			ErrFormat, first, valuePut)
	}
	return store.Op{Key: key, Value: value[1:]}, nil
}

// Records returns the changelog records of an overlay: one per key it
// writes, carrying the key's last write (a batch applies its writes in
// order, so only the last one counts), in the order the keys were first
// written. The records are for partition of topic; produce them with a
// client whose partitioner honours Record.Partition
// (kgo.ManualPartitioner). The overlay is left as it is.
//
// It fails, writing nothing, for a write a changelog cannot carry
// (store.ErrNotLoggable): a range deletion (the playground egress's
// acknowledgement; cluster mode refuses the playground egress) or a key
// local to one process.
func Records(overlay *store.Batch, topic string, partition int32) ([]*kgo.Record, error) {
	var recs []*kgo.Record
	index := map[string]int{}
	err := overlay.Ops(func(op store.Op) error {
		key, value := encodeOp(op)
		if i, ok := index[string(key)]; ok {
			recs[i].Value = value
			return nil
		}
		index[string(key)] = len(recs)
		recs = append(recs, &kgo.Record{Topic: topic, Partition: partition, Key: key, Value: value})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("changelog: partition %d: %w", partition, err)
	}
	return recs, nil
}

// PutRecord returns the changelog record that puts value at the store key
// key, for partition of topic (a cluster backup's seed writes a
// partition's keys with it).
func PutRecord(topic string, partition int32, key, value []byte) *kgo.Record {
	k, v := encodeOp(store.Op{Key: key, Value: value})
	return &kgo.Record{Topic: topic, Partition: partition, Key: k, Value: v}
}
