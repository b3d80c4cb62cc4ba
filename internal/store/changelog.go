package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// Cluster mode keeps each partition's writes in a Kafka changelog topic,
// and this store is a cache of the partitions the process owns: a prefix
// of each one's committed changelog, with the position it reaches
// (docs/explanation/cluster.md). This file holds what the store needs for that: the
// writes of an unapplied batch (the overlay of a Kafka transaction) as
// plain operations, one atomic apply of such operations together with the
// partition's changelog position, and the removal of everything a
// partition's changelog wrote. The embedded engine uses none of it.

const (
	// spaceChangelogPosition holds, per partition, the changelog position
	// the store reached (cluster mode).
	spaceChangelogPosition byte = 0x17
	// spaceChangelogKeys indexes, per partition, every key the partition's
	// changelog wrote into the store (cluster mode).
	spaceChangelogKeys byte = 0x18
)

// Op is one write of a batch: a put of Value at Key, or the deletion of
// Key. Its slices belong to the batch (or record) it came from.
type Op struct {
	Key    []byte
	Value  []byte // nil for a deletion; a put may have a zero-length value
	Delete bool
}

// ErrNotLoggable is wrapped by the errors of Ops and ApplyChangelog for a
// write a changelog cannot carry: a range deletion, a merge, or a key of a
// space that is local to one process.
var ErrNotLoggable = errors.New("store: write cannot be logged to a changelog")

// Ops calls fn with each write of the batch, which must not be committed,
// in the order they were made. A later write to the same key wins, as in
// the batch itself. It returns an error wrapping ErrNotLoggable, naming
// the write, for anything other than a put or a point deletion of a key a
// changelog may carry (CheckChangelogKey) — notably the range deletion of
// DeleteEgressThrough, the playground egress's acknowledgement, which
// cluster mode refuses at start — and the batch's first encoding error.
func (b *Batch) Ops(fn func(Op) error) error {
	if b.err != nil {
		return b.err
	}
	r := b.live().Reader()
	for {
		kind, key, val, ok, err := r.Next()
		if err != nil {
			return fmt.Errorf("store: read batch: %w", err)
		}
		if !ok {
			return nil
		}
		var op Op
		switch kind {
		case pebble.InternalKeyKindSet:
			op = Op{Key: key, Value: val}
			if op.Value == nil {
				op.Value = []byte{}
			}
		case pebble.InternalKeyKindDelete, pebble.InternalKeyKindSingleDelete, pebble.InternalKeyKindDeleteSized:
			op = Op{Key: key, Delete: true}
		case pebble.InternalKeyKindRangeDelete:
			return fmt.Errorf("%w: a range deletion from %s to %s (a compacted topic deletes single keys only; "+
				"its writer, the playground egress, is refused in cluster mode)", ErrNotLoggable, formatKey(key), formatKey(val))
		default:
			return fmt.Errorf("%w: a write of kind %v to %s", ErrNotLoggable, kind, formatKey(key))
		}
		if err := CheckChangelogKey(op.Key); err != nil {
			return err
		}
		if err := fn(op); err != nil {
			return err
		}
	}
}

// CheckChangelogKey returns an error wrapping ErrNotLoggable if key belongs
// to a space that is local to one process and so must never travel in a
// changelog: the global meta (format, partition count, egress sequence)
// and the changelog bookkeeping itself.
func CheckChangelogKey(key []byte) error {
	if len(key) == 0 {
		return fmt.Errorf("%w: an empty key", ErrNotLoggable)
	}
	switch key[0] {
	case spaceMeta, spaceChangelogPosition, spaceChangelogKeys:
		return fmt.Errorf("%w: %s is local to one process", ErrNotLoggable, formatKey(key))
	}
	return nil
}

// ChangelogPosition is how far the store holds one partition's changelog.
type ChangelogPosition struct {
	// Next is the offset of the first changelog record not in the store:
	// every committed record before it is applied, none after.
	Next int64
	// At is when (unix ms) the store last knew that the changelog ended at
	// or before Next. Compaction removes a tombstone some time after it was
	// written (the topic's delete.retention.ms), so a position older than
	// that may have missed a deletion of a key the store still holds.
	At int64
	// TopicID is the Kafka topic id of the changelog the position is in;
	// a topic deleted and created again under the same name has another.
	TopicID [16]byte
}

const changelogPositionLen = 8 + 8 + 16

// changelogPositionKey appends the key of a partition's changelog position.
//
//	+------+------------------+
//	| 0x17 | partition u16 BE |
//	+------+------------------+
//
// The value is appendChangelogPosition's.
func changelogPositionKey(dst []byte, p int) []byte {
	dst = append(dst, spaceChangelogPosition)
	return binary.BigEndian.AppendUint16(dst, partitionU16(p))
}

// appendChangelogPosition appends the value of a changelog position.
//
//	+----------------+--------------------------+---------------+
//	| next i64 BE    | at i64 BE (unix ms)      | topic id 16 B |
//	+----------------+--------------------------+---------------+
//	       8 B                  8 B                   16 B        = 32 bytes
func appendChangelogPosition(dst []byte, pos ChangelogPosition) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(pos.Next))
	dst = binary.BigEndian.AppendUint64(dst, uint64(pos.At))
	return append(dst, pos.TopicID[:]...)
}

func decodeChangelogPosition(v []byte) (ChangelogPosition, error) {
	if len(v) != changelogPositionLen {
		return ChangelogPosition{}, fmt.Errorf("changelog position of %d bytes, want %d", len(v), changelogPositionLen)
	}
	pos := ChangelogPosition{Next: int64(binary.BigEndian.Uint64(v)), At: int64(binary.BigEndian.Uint64(v[8:]))}
	copy(pos.TopicID[:], v[16:])
	if pos.Next < 0 {
		return ChangelogPosition{}, fmt.Errorf("changelog position %d is negative", pos.Next)
	}
	return pos, nil
}

// changelogKeysKey appends the entry of key in partition p's index of the
// keys its changelog wrote.
//
//	+------+------------------+-----------------------------+
//	| 0x18 | partition u16 BE | the store key (to the end)  |
//	+------+------------------+-----------------------------+
//
// The value is empty.
func changelogKeysKey(dst []byte, p int, key []byte) []byte {
	dst = changelogKeysPrefix(dst, p)
	return append(dst, key...)
}

func changelogKeysPrefix(dst []byte, p int) []byte {
	dst = append(dst, spaceChangelogKeys)
	return binary.BigEndian.AppendUint16(dst, partitionU16(p))
}

// ChangelogPosition returns the changelog position of partition p, and
// false if the store holds none (the partition was never restored or
// applied in cluster mode, or its data was dropped). One point read.
func (db *DB) ChangelogPosition(p int) (ChangelogPosition, bool, error) {
	if err := db.checkPartition(p); err != nil {
		return ChangelogPosition{}, false, err
	}
	key := changelogPositionKey(nil, p)
	v, ok, err := db.get(key)
	if err != nil || !ok {
		return ChangelogPosition{}, false, err
	}
	pos, err := decodeChangelogPosition(v)
	if err != nil {
		return ChangelogPosition{}, false, corrupt(key, err)
	}
	return pos, true, nil
}

// ApplyChangelog writes ops, the changelog records of partition p that
// follow its current position (or an overlay whose records a committed
// Kafka transaction put there), and the position pos they reach, in one
// atomic batch: after a crash the store holds all of them with pos, or
// none of them with the position before. Each put of a key outside p's
// own ranges (ownedByPrefix) also enters the key in p's index (0x18), each
// deletion removes it, so DropChangelogPartition finds what p wrote.
// Records of a retired space, which an older build wrote, are skipped.
//
// The batch is not synced: the changelog is the truth, and a tail lost by
// a crash is read from it again from the position that survived.
func (db *DB) ApplyChangelog(p int, ops []Op, pos ChangelogPosition) error {
	if err := db.checkPartition(p); err != nil {
		return err
	}
	if pos.Next < 0 {
		return fmt.Errorf("store: changelog position %d of partition %d is negative", pos.Next, p)
	}
	pb := db.pdb.NewBatch()
	defer pb.Close()
	var idx []byte
	var touched []string
	for _, op := range ops {
		if err := CheckChangelogKey(op.Key); err != nil {
			return fmt.Errorf("%w (partition %d)", err, p)
		}
		if skipRetired(op.Key) {
			continue
		}
		if ownedByPrefix(op.Key, p) {
			// Found by its prefix: no index entry (ownedByPrefix).
			if op.Delete {
				_ = pb.Delete(op.Key, nil)
			} else {
				_ = pb.Set(op.Key, op.Value, nil)
			}
			continue
		}
		idx = changelogKeysKey(idx[:0], p, op.Key)
		if op.Delete {
			_ = pb.Delete(op.Key, nil)
			_ = pb.Delete(idx, nil)
			continue
		}
		_ = pb.Set(op.Key, op.Value, nil)
		_ = pb.Set(idx, nil, nil)
		if op.Key[0] == spaceHistory && len(op.Key) > 9 {
			// The retention sweep trims the entries that got records.
			touched = append(touched, string(op.Key[1:len(op.Key)-8]))
		}
	}
	_ = pb.Set(changelogPositionKey(nil, p), appendChangelogPosition(nil, pos), nil)
	if err := pb.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("store: apply changelog of partition %d: %w", p, err)
	}
	if len(touched) > 0 {
		db.histTouched.add(touched)
	}
	return nil
}

// skipRetired reports whether key lies in a retired space: an older build
// wrote it to the changelog, and this one neither reads nor keeps it.
func skipRetired(key []byte) bool {
	return key[0] == spaceRetiredAuditID || key[0] == spaceRetiredAuditNamespace
}

// ChangelogKeys calls fn with each key partition p's changelog wrote into
// the store and that is still there, in key order. The key is valid only
// during the call.
func (db *DB) ChangelogKeys(p int, fn func(key []byte) error) error {
	if err := db.checkPartition(p); err != nil {
		return err
	}
	// The index's entries and p's own ranges, merged in key order: the
	// ranges lie between index entries of other spaces. An index entry of
	// a key in p's own ranges (written by an older build) is skipped: the
	// range has the key if it is still there.
	lower := changelogKeysPrefix(nil, p)
	idx, err := db.newIter(lower, prefixSuccessor(lower))
	if err != nil {
		return err
	}
	valid := idx.First()
	for _, space := range prefixSpaces {
		for ; valid && idx.Key()[len(lower)] < space; valid = idx.Next() {
			if err := fn(idx.Key()[len(lower):]); err != nil {
				return finish(idx, err)
			}
		}
		for ; valid && idx.Key()[len(lower)] == space; valid = idx.Next() {
		}
		own := ownPrefix(space, p)
		it, err := db.newIter(own, prefixSuccessor(own))
		if err != nil {
			return finish(idx, err)
		}
		for v := it.First(); v; v = it.Next() {
			if err := fn(it.Key()); err != nil {
				_ = finish(it, nil)
				return finish(idx, err)
			}
		}
		if err := finish(it, nil); err != nil {
			return finish(idx, err)
		}
	}
	for ; valid; valid = idx.Next() {
		if err := fn(idx.Key()[len(lower):]); err != nil {
			return finish(idx, err)
		}
	}
	return finish(idx, nil)
}

// prefixSpaces are the changelogged spaces whose keys begin with their
// partition (inbox, timers, cancellation tokens, partition meta), in key
// order. Partition p's commits alone write p's range of each, so that
// range is what p's changelog wrote there: it needs no index entries. The
// inbox alone takes a put and a deletion per message, which the index
// would double.
var prefixSpaces = []byte{spaceInbox, spaceTimer, spaceToken, spacePartition}

// ownPrefix is the prefix of partition p's range of space.
func ownPrefix(space byte, p int) []byte {
	return binary.BigEndian.AppendUint16([]byte{space}, partitionU16(p))
}

// ownedByPrefix reports whether key lies in partition p's own range of one
// of prefixSpaces.
func ownedByPrefix(key []byte, p int) bool {
	if len(key) < 3 || !slices.Contains(prefixSpaces, key[0]) {
		return false
	}
	return binary.BigEndian.Uint16(key[1:3]) == partitionU16(p)
}

// DropChangelogPartition removes everything partition p's changelog wrote
// into the store, and its position, in batches of at most 1,000 keys. The
// first batch removes the position, so a crash part way leaves keys in p's
// index and no position: a state HasChangelogKeys reports and that the
// caller resolves by dropping again. Registered specs are left in place:
// several partitions write the specs of one function type, and they are a
// cache the function's next reply corrects. Returns the number of keys
// removed. Not synced, like ApplyChangelog: a drop a crash undid is
// decided again from the same position.
func (db *DB) DropChangelogPartition(p int) (int, error) {
	if err := db.checkPartition(p); err != nil {
		return 0, err
	}
	pb := db.pdb.NewBatch()
	defer func() { _ = pb.Close() }()
	_ = pb.Delete(changelogPositionKey(nil, p), nil)
	removed, first := 0, true
	// The index first, then p's own ranges (ownedByPrefix).
	lowers := [][]byte{changelogKeysPrefix(nil, p)}
	for _, space := range prefixSpaces {
		lowers = append(lowers, ownPrefix(space, p))
	}
	for i, lower := range lowers {
		index := i == 0
		for {
			it, err := db.newIter(lower, prefixSuccessor(lower))
			if err != nil {
				return removed, err
			}
			n := 0
			for valid := it.First(); valid && n < sweepBatch; valid = it.Next() {
				k := it.Key()
				if key := k[len(lower):]; index && len(key) > 0 && key[0] != spaceSpecs {
					_ = pb.Delete(key, nil)
				}
				_ = pb.Delete(k, nil)
				n++
			}
			if err := closeIter(it); err != nil {
				return removed, err
			}
			if n == 0 && !first {
				break
			}
			first = false
			if err := pb.Commit(pebble.NoSync); err != nil {
				return removed, fmt.Errorf("store: drop changelog data of partition %d: %w", p, err)
			}
			removed += n
			_ = pb.Close()
			pb = db.pdb.NewBatch()
			if n < sweepBatch {
				break
			}
		}
	}
	return removed, nil
}

// HasChangelogKeys reports whether partition p's index holds any key: with
// no ChangelogPosition, the trace of an interrupted drop (or of data that
// was never positioned), which must be dropped before a restore.
func (db *DB) HasChangelogKeys(p int) (bool, error) {
	found := false
	err := db.ChangelogKeys(p, func([]byte) error { found = true; return errStop })
	if errors.Is(err, errStop) {
		err = nil
	}
	return found, err
}

var errStop = errors.New("stop")

// RawGet returns a copy of the value stored at key, whatever its space,
// and false if there is none: cluster mode compares the store with what
// a changelog holds, record by record.
func (db *DB) RawGet(key []byte) ([]byte, bool, error) { return db.get(key) }
