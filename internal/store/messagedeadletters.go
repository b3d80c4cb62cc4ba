package store

import (
	"github.com/cockroachdb/pebble/v2"

	"github.com/statefun-go/statefun/internal/protocol"
)

// This file is the message dead-letter key space (0x16): the messages an
// operator skipped out of an address's inbox (docs/how-to/repair.md, "A bad message: skip it"),
// kept until they are re-sent or retention removes them. They are not the
// ingress dead letters (0x0F), which are records a Kafka ingress could not
// turn into messages at all.

// spaceMessageDeadLetter holds the skipped messages, by the skip's
// mutation id. (0x10 to 0x12 are the entry history, 0x13 the pauses.)
const spaceMessageDeadLetter byte = 0x16

// messageDeadLetterKey appends the key of a skipped message.
//
//	+------+-----------------------+
//	| 0x16 | str(skip mutation id) |
//	+------+-----------------------+
//
// Mutation ids start with their millisecond in base 36, so the space
// sorts by the time of the skips, oldest first, as retention wants. The
// value is a protocol.MessageDeadLetter.
func messageDeadLetterKey(dst []byte, id string) []byte {
	dst = append(dst, spaceMessageDeadLetter)
	return appendString(dst, id)
}

// PutMessageDeadLetter stores a skipped message.
func (b *Batch) PutMessageDeadLetter(d *protocol.MessageDeadLetter) {
	b.added[retainedMessageDeadLetters]++
	b.key = messageDeadLetterKey(b.key[:0], d.GetId())
	b.setProto(b.key, d)
}

// DeleteMessageDeadLetter removes a skipped message (it was re-sent).
func (b *Batch) DeleteMessageDeadLetter(id string) {
	b.key = messageDeadLetterKey(b.key[:0], id)
	b.delete(b.key)
}

// MessageDeadLetter returns the skipped message of the skip id.
func (db *DB) MessageDeadLetter(id string) (*protocol.MessageDeadLetter, bool, error) {
	key := messageDeadLetterKey(nil, id)
	val, ok, err := db.get(key)
	if err != nil || !ok {
		return nil, false, err
	}
	d := new(protocol.MessageDeadLetter)
	if err := unmarshalValue(key, val, d); err != nil {
		return nil, false, err
	}
	return d, true, nil
}

// ScanMessageDeadLetters calls fn with the skipped messages whose id is
// after after (from the first when empty), oldest first, until fn
// returns false.
func (db *DB) ScanMessageDeadLetters(after string, fn func(*protocol.MessageDeadLetter) bool) error {
	lower := []byte{spaceMessageDeadLetter}
	if after != "" {
		lower = append(messageDeadLetterKey(nil, after), 0)
	}
	it, err := db.newIter(lower, []byte{spaceMessageDeadLetter + 1})
	if err != nil {
		return err
	}
	for valid := it.First(); valid; valid = it.Next() {
		d := new(protocol.MessageDeadLetter)
		if err := iterValue(it, d); err != nil {
			return finish(it, err)
		}
		if !fn(d) {
			break
		}
	}
	return finish(it, nil)
}

// sweepMessageDeadLetters deletes skipped messages older than cutoff or
// beyond limit, oldest first (their ids are time-ordered mutation ids).
func (db *DB) sweepMessageDeadLetters(cutoff int64, limit int) (left, deleted int, err error) {
	return db.sweepInAgeOrder(spaceMessageDeadLetter, cutoff, limit, func(it *pebble.Iterator) (int64, error) {
		r := new(protocol.MessageDeadLetter)
		err := iterValue(it, r)
		return r.GetAt(), err
	})
}
