package store

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// spaceReadPosition holds, per runtime partition, how far the partition
// has applied each Kafka topic partition whose records it applies (cluster
// mode): its partition of the messages topic, and the Kafka ingress topic
// partitions whose records were routed to it. Part of the file format.
const spaceReadPosition byte = 0x19

// MessagesTopic is the ReadPosition.Topic of the application's messages
// topic: the empty string, which names no Kafka ingress topic (an ingress
// topic has a name), so the position does not depend on the application
// id the topic's name is made of.
const MessagesTopic = ""

// ReadPosition is the last record of one Kafka topic partition that a
// runtime partition applied (cluster mode). It is written in the same
// batch as the effects of that record, so it travels in the partition's
// changelog in the same transaction; a partition restored elsewhere knows
// from it which records it has applied, whatever the consumer group's
// offsets say.
type ReadPosition struct {
	// Topic is the Kafka topic: MessagesTopic, or a Kafka ingress topic.
	Topic string
	// Partition is the Kafka partition of Topic.
	Partition int32
	// Offset is the offset of the last record applied.
	Offset int64
	// Index orders the messages one ingress record becomes (one per
	// target): the last one applied of the record at Offset. Always 0 for
	// the messages topic.
	Index uint32
}

// Before reports whether the record at (offset, index) comes before or is
// the position: applied already.
func (p ReadPosition) Before(offset int64, index uint32) bool {
	return offset < p.Offset || offset == p.Offset && index <= p.Index
}

const readPositionValueLen = 8 + 4

// readPositionKey appends the key of one read position.
//
//	+------+------------------+------------+---------------------------+
//	| 0x19 | partition u16 BE | str(topic) | Kafka partition u32 BE    |
//	+------+------------------+------------+---------------------------+
//	  1 B          2 B          2+ B (str)            4 B
//
// partition is the runtime partition that applied the records (the
// changelog that carries the key is its own); topic is MessagesTopic ("")
// for the messages topic. The value:
//
//	+------------------+-----------------+
//	| offset i64 BE    | index u32 BE    |
//	+------------------+-----------------+
//	        8 B               4 B
//
// the last record applied, and the index of its last message applied. A
// longer value is reserved for fields added later; readers read the first
// 12 bytes.
func readPositionKey(dst []byte, p int, topic string, kp int32) []byte {
	dst = readPositionPrefix(dst, p)
	dst = appendString(dst, topic)
	return binary.BigEndian.AppendUint32(dst, uint32(kp))
}

// readPositionPrefix appends 0x19 | partition: the prefix of every read
// position of runtime partition p.
func readPositionPrefix(dst []byte, p int) []byte {
	dst = append(dst, spaceReadPosition)
	return binary.BigEndian.AppendUint16(dst, partitionU16(p))
}

// decodeReadPositionKey is the inverse of readPositionKey.
func decodeReadPositionKey(key []byte) (p int, rp ReadPosition, err error) {
	if len(key) < 3 || key[0] != spaceReadPosition {
		return 0, rp, errBadKey
	}
	p = int(binary.BigEndian.Uint16(key[1:]))
	b := key[3:]
	if rp.Topic, b, err = decodeString(b); err != nil {
		return 0, ReadPosition{}, err
	}
	if len(b) != 4 {
		return 0, ReadPosition{}, errBadKey
	}
	rp.Partition = int32(binary.BigEndian.Uint32(b))
	return p, rp, nil
}

// PutReadPosition records that runtime partition p has applied rp's topic
// partition up to rp. The engine puts it in the batch that writes the
// effects of the records it covers.
func (b *Batch) PutReadPosition(p int, rp ReadPosition) {
	if rp.Partition < 0 || rp.Offset < 0 {
		panic(fmt.Sprintf("store: read position of %q partition %d at offset %d", rp.Topic, rp.Partition, rp.Offset))
	}
	b.key = readPositionKey(b.key[:0], p, rp.Topic, rp.Partition)
	b.val = binary.BigEndian.AppendUint64(b.val[:0], uint64(rp.Offset))
	b.val = binary.BigEndian.AppendUint32(b.val, rp.Index)
	b.set(b.key, b.val)
}

// ReadPositions returns every read position of runtime partition p,
// ordered by topic (the messages topic first), then Kafka partition.
func (db *DB) ReadPositions(p int) ([]ReadPosition, error) {
	lower := readPositionPrefix(nil, p)
	it, err := db.newIter(lower, prefixSuccessor(lower))
	if err != nil {
		return nil, err
	}
	var out []ReadPosition
	for valid := it.First(); valid; valid = it.Next() {
		_, rp, err := decodeReadPositionKey(it.Key())
		if err != nil {
			return nil, finish(it, corrupt(it.Key(), err))
		}
		val, err := it.ValueAndErr()
		if err != nil {
			return nil, finish(it, err)
		}
		if len(val) < readPositionValueLen {
			return nil, finish(it, corrupt(it.Key(), errors.New("read position value too short")))
		}
		rp.Offset = int64(binary.BigEndian.Uint64(val))
		rp.Index = binary.BigEndian.Uint32(val[8:])
		out = append(out, rp)
	}
	return out, closeIter(it)
}

// ReadPositionOf decodes a store key and value of the read positions'
// space (0x19); false for a key of another space or one that does not
// decode. A cluster backup's seed reads the positions out of a
// partition's records with it.
func ReadPositionOf(key, value []byte) (p int, rp ReadPosition, ok bool) {
	if len(key) == 0 || key[0] != spaceReadPosition || len(value) < readPositionValueLen {
		return 0, ReadPosition{}, false
	}
	p, rp, err := decodeReadPositionKey(key)
	if err != nil {
		return 0, ReadPosition{}, false
	}
	rp.Offset = int64(binary.BigEndian.Uint64(value))
	rp.Index = binary.BigEndian.Uint32(value[8:])
	return p, rp, true
}
