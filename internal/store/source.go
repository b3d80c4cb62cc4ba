package store

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// SourcePosition is how far an ingress has consumed one partition of an
// external source (a Kafka topic partition): the offset of the next record
// to read. The engine writes it in the same batch as the messages made from
// the records before it, so after a crash the position and the messages are
// both there or neither.
type SourcePosition struct {
	// Ingress is the ingress's id (its typename, "namespace/name").
	Ingress string
	// Topic and Partition name the source partition.
	Topic     string
	Partition int32
	// Next is the offset of the first record not yet made durable.
	Next int64
}

const sourcePositionLen = 8

// sourcePositionKey appends the key of one source partition's position.
//
//	+------+--------------+------------+------------------+
//	| 0x0E | str(ingress) | str(topic) | partition u32 BE |
//	+------+--------------+------------+------------------+
//
// The value is next, an i64 BE (two's complement): the offset of the next
// record to read. A longer value is reserved for fields added later;
// readers read the first 8 bytes.
func sourcePositionKey(dst []byte, ingress, topic string, partition int32) []byte {
	dst = sourcePositionPrefix(dst, ingress)
	dst = appendString(dst, topic)
	return binary.BigEndian.AppendUint32(dst, uint32(partition))
}

// sourcePositionPrefix appends 0x0E | str(ingress): the prefix of every
// position of one ingress.
func sourcePositionPrefix(dst []byte, ingress string) []byte {
	dst = append(dst, spaceSourcePosition)
	return appendString(dst, ingress)
}

// decodeSourcePositionKey is the inverse of sourcePositionKey.
func decodeSourcePositionKey(key []byte) (p SourcePosition, err error) {
	if len(key) == 0 || key[0] != spaceSourcePosition {
		return p, errBadKey
	}
	b := key[1:]
	if p.Ingress, b, err = decodeString(b); err != nil {
		return SourcePosition{}, err
	}
	if p.Topic, b, err = decodeString(b); err != nil {
		return SourcePosition{}, err
	}
	if len(b) != 4 {
		return SourcePosition{}, errBadKey
	}
	p.Partition = int32(binary.BigEndian.Uint32(b))
	return p, nil
}

// PutSourcePosition records how far an ingress has consumed a source
// partition. The engine puts it in the batch that writes the messages of
// the records before p.Next.
func (b *Batch) PutSourcePosition(p SourcePosition) {
	if p.Partition < 0 {
		panic(fmt.Sprintf("store: source partition %d is negative", p.Partition))
	}
	b.key = sourcePositionKey(b.key[:0], p.Ingress, p.Topic, p.Partition)
	b.val = binary.BigEndian.AppendUint64(b.val[:0], uint64(p.Next))
	b.set(b.key, b.val)
}

// SourcePositions returns every stored position of an ingress, ordered by
// topic, then partition.
func (db *DB) SourcePositions(ingress string) ([]SourcePosition, error) {
	lower := sourcePositionPrefix(nil, ingress)
	it, err := db.newIter(lower, prefixSuccessor(lower))
	if err != nil {
		return nil, err
	}
	var out []SourcePosition
	for valid := it.First(); valid; valid = it.Next() {
		p, err := decodeSourcePositionKey(it.Key())
		if err != nil {
			return nil, finish(it, corrupt(it.Key(), err))
		}
		val, err := it.ValueAndErr()
		if err != nil {
			return nil, finish(it, err)
		}
		if len(val) < sourcePositionLen {
			return nil, finish(it, corrupt(it.Key(), errors.New("source position value too short")))
		}
		p.Next = int64(binary.BigEndian.Uint64(val))
		out = append(out, p)
	}
	return out, closeIter(it)
}

// DeadLetter is a record an ingress could not turn into a message (a null
// or non-UTF-8 key, an id over the limit, a topic without a route). It is
// kept, in the same batch as the position that skips it, so that nothing
// consumed is lost without a trace, and removed by retention.
type DeadLetter struct {
	// At is when it was stored, in Unix milliseconds; retention measures
	// its age from it.
	At int64
	// Ingress, Topic, Partition and Offset name the record.
	Ingress   string
	Topic     string
	Partition int32
	Offset    int64
	// Reason says why the record was not delivered (a short word such as
	// "null-key", see the ingress).
	Reason string
	// Timestamp is the record's own timestamp, in Unix milliseconds.
	Timestamp int64
	// KeyNull is true when the record had no key (Key is then empty).
	KeyNull bool
	Key     []byte
	Value   []byte
	// ValueOmitted is true when the record's value was not kept (Value is
	// then empty): in cluster mode, a dead letter travels in a record of
	// the messages topic and its partition's changelog, and a value too
	// large for one is left out; the record stays in its topic at Offset.
	ValueOmitted bool
}

// deadLetterKey appends the key of one dead letter.
//
//	+------+--------------------------------+--------------+------------+------------------+---------------+
//	| 0x0F | at i64 (unix ms, sign flipped) | str(ingress) | str(topic) | partition u32 BE | offset u64 BE |
//	+------+--------------------------------+--------------+------------+------------------+---------------+
//
// Sorted by the time they were stored, so retention walks them oldest first
// and a reader pages through them in time order. The value is a dead-letter
// value; see appendDeadLetter.
func deadLetterKey(dst []byte, d *DeadLetter) []byte {
	dst = append(dst, spaceDeadLetter)
	dst = binary.BigEndian.AppendUint64(dst, flipSign(d.At))
	dst = appendString(dst, d.Ingress)
	dst = appendString(dst, d.Topic)
	dst = binary.BigEndian.AppendUint32(dst, uint32(d.Partition))
	return binary.BigEndian.AppendUint64(dst, uint64(d.Offset))
}

// decodeDeadLetterKey fills the fields of d its key holds.
func decodeDeadLetterKey(key []byte, d *DeadLetter) (err error) {
	if len(key) < 9 || key[0] != spaceDeadLetter {
		return errBadKey
	}
	d.At = unflipSign(binary.BigEndian.Uint64(key[1:]))
	b := key[9:]
	if d.Ingress, b, err = decodeString(b); err != nil {
		return err
	}
	if d.Topic, b, err = decodeString(b); err != nil {
		return err
	}
	if len(b) != 12 {
		return errBadKey
	}
	d.Partition = int32(binary.BigEndian.Uint32(b))
	d.Offset = int64(binary.BigEndian.Uint64(b[4:]))
	return nil
}

// appendDeadLetter appends the value of a dead letter.
//
//	+---------------------+-------+-------------------+--------+----------------+-----+-------------+
//	| timestamp i64 BE    | flags | uvarint len(why)  | reason | uvarint len(k) | key | value bytes |
//	+---------------------+-------+-------------------+--------+----------------+-----+-------------+
//	         8 B             1 B      1 to 10 B                    1 to 10 B           the rest
//
// timestamp is the record's, in Unix milliseconds (two's complement);
// flags bit 0 set means the record had no key (a null key, not an empty
// one); bit 1 set means its value was not kept (ValueOmitted; the value
// bytes are then empty); the other bits are 0.
func appendDeadLetter(dst []byte, d *DeadLetter) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(d.Timestamp))
	var flags byte
	if d.KeyNull {
		flags |= 1
	}
	if d.ValueOmitted {
		flags |= 2
	}
	dst = append(dst, flags)
	dst = binary.AppendUvarint(dst, uint64(len(d.Reason)))
	dst = append(dst, d.Reason...)
	dst = binary.AppendUvarint(dst, uint64(len(d.Key)))
	dst = append(dst, d.Key...)
	return append(dst, d.Value...)
}

var errBadDeadLetter = errors.New("dead letter value malformed")

// decodeDeadLetter fills the fields of d its value holds; the bytes are
// copied, unless skipPayload leaves Key and Value nil.
func decodeDeadLetter(val []byte, d *DeadLetter, skipPayload bool) error {
	if len(val) < 9 {
		return errBadDeadLetter
	}
	d.Timestamp = int64(binary.BigEndian.Uint64(val))
	d.KeyNull = val[8]&1 != 0
	d.ValueOmitted = val[8]&2 != 0
	b := val[9:]
	n, w := binary.Uvarint(b)
	if w <= 0 || uint64(len(b)-w) < n {
		return errBadDeadLetter
	}
	d.Reason = string(b[w : w+int(n)])
	b = b[w+int(n):]
	n, w = binary.Uvarint(b)
	if w <= 0 || uint64(len(b)-w) < n {
		return errBadDeadLetter
	}
	if !skipPayload {
		d.Key = append([]byte(nil), b[w:w+int(n)]...)
		d.Value = append([]byte(nil), b[w+int(n):]...)
	}
	return nil
}

// PutDeadLetter stores a record an ingress could not deliver. The engine
// puts it in the batch that writes the position past it.
func (b *Batch) PutDeadLetter(d *DeadLetter) {
	b.added[retainedDeadLetters]++
	if d.Partition < 0 || d.Offset < 0 {
		panic(fmt.Sprintf("store: dead letter at partition %d offset %d", d.Partition, d.Offset))
	}
	b.key = deadLetterKey(b.key[:0], d)
	b.val = appendDeadLetter(b.val[:0], d)
	b.set(b.key, b.val)
}

// DeadLetterFilter selects dead letters for ScanDeadLetters.
type DeadLetterFilter struct {
	// Ingress, when not empty, keeps only that ingress's records.
	Ingress string
	// Since keeps records stored at or after it (Unix milliseconds); 0
	// means from the oldest.
	Since int64
	// Until, when not 0, keeps records stored at or before it (Unix
	// milliseconds); the scan ends there.
	Until int64
	// Match, when set, is called with the fields the key holds (At,
	// Ingress, Topic, Partition, Offset) and keeps the record when it
	// returns true. It runs before the value is read, so a record it drops
	// costs no read of its (possibly large) value.
	Match func(*DeadLetter) bool
	// SkipPayload leaves Key and Value nil (KeyNull, ValueOmitted, Reason
	// and Timestamp are still filled): for counting without copying record
	// bodies.
	SkipPayload bool
}

// ScanDeadLetters calls fn with the dead letters f selects, oldest first
// (in key order: stored time, ingress, topic, partition, offset), until fn
// returns false.
func (db *DB) ScanDeadLetters(f DeadLetterFilter, fn func(DeadLetter) bool) error {
	lower := []byte{spaceDeadLetter}
	if f.Since != 0 {
		lower = binary.BigEndian.AppendUint64(lower, flipSign(f.Since))
	}
	upper := []byte{spaceDeadLetter + 1}
	if f.Until != 0 && f.Until < 1<<63-1 {
		upper = binary.BigEndian.AppendUint64([]byte{spaceDeadLetter}, flipSign(f.Until+1))
	}
	it, err := db.newIter(lower, upper)
	if err != nil {
		return err
	}
	for valid := it.First(); valid; valid = it.Next() {
		var d DeadLetter
		if err := decodeDeadLetterKey(it.Key(), &d); err != nil {
			return finish(it, corrupt(it.Key(), err))
		}
		if f.Ingress != "" && d.Ingress != f.Ingress || f.Match != nil && !f.Match(&d) {
			continue
		}
		val, err := it.ValueAndErr()
		if err != nil {
			return finish(it, err)
		}
		if err := decodeDeadLetter(val, &d, f.SkipPayload); err != nil {
			return finish(it, corrupt(it.Key(), err))
		}
		if !fn(d) {
			break
		}
	}
	return closeIter(it)
}

// sweepDeadLetters deletes dead letters older than cutoff or beyond limit,
// oldest first (the space is keyed by time).
func (db *DB) sweepDeadLetters(cutoff int64, limit int) (left, deleted int, err error) {
	return db.sweepInAgeOrder(spaceDeadLetter, cutoff, limit, func(it *pebble.Iterator) (int64, error) {
		key := it.Key()
		if len(key) < 9 {
			return 0, corrupt(key, errBadKey)
		}
		return unflipSign(binary.BigEndian.Uint64(key[1:])), nil
	})
}
