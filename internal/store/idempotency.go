package store

import (
	"bytes"
	"encoding/binary"
	"errors"
)

// IdempotencyRecord is what the store keeps of an ingress request that
// carried an idempotency key: written in the same batch as the message the
// request produced, so after a crash either both are there or neither.
type IdempotencyRecord struct {
	// At is when the request was accepted, in Unix milliseconds; retention
	// measures the record's age from it.
	At int64
	// Fingerprint identifies the request (a hash of its method, path,
	// content type and body); a later request with the same key and a
	// different fingerprint is a different request.
	Fingerprint []byte
}

const idempotencyFixedLen = 8

// idempotencyKey appends the key of one idempotency record.
//
//	+------+------------+----------+
//	| 0x0C | str(scope) | str(key) |
//	+------+------------+----------+
//
// scope is where the key is unique (the ingress target's function type,
// "namespace/name"); key is the client's Idempotency-Key. The value is an
// idempotency value; see appendIdempotency.
func idempotencyKey(dst []byte, scope, key string) []byte {
	dst = append(dst, spaceIdempotency)
	dst = appendString(dst, scope)
	return appendString(dst, key)
}

// idempotencyAgeKey appends the key of an idempotency record's entry in the
// index by age.
//
//	+------+--------------------------------+------------+----------+
//	| 0x0D | at i64 (unix ms, sign flipped) | str(scope) | str(key) |
//	+------+--------------------------------+------------+----------+
//
// The value is empty. What follows the time is the record's key after its
// space byte, so the sweeper walks this space oldest first and finds each
// record without decoding.
func idempotencyAgeKey(dst []byte, at int64, scope, key string) []byte {
	dst = append(dst, spaceIdempotencyAge)
	dst = binary.BigEndian.AppendUint64(dst, flipSign(at))
	dst = appendString(dst, scope)
	return appendString(dst, key)
}

// appendIdempotency appends the value of an idempotency record.
//
//	+-----------------------------+-------------+
//	| at i64 BE (unix ms)         | fingerprint |
//	+-----------------------------+-------------+
//	             8 B                  the rest
//
// at is two's complement; the fingerprint runs to the end of the value.
func appendIdempotency(dst []byte, r IdempotencyRecord) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(r.At))
	return append(dst, r.Fingerprint...)
}

var errShortIdempotency = errors.New("idempotency value too short")

// decodeIdempotency is the inverse of appendIdempotency. The fingerprint is
// copied.
func decodeIdempotency(val []byte) (IdempotencyRecord, error) {
	if len(val) < idempotencyFixedLen {
		return IdempotencyRecord{}, errShortIdempotency
	}
	return IdempotencyRecord{
		At:          int64(binary.BigEndian.Uint64(val)),
		Fingerprint: bytes.Clone(val[idempotencyFixedLen:]),
	}, nil
}

// PutIdempotency records that the request named by (scope, key) was
// accepted, with its entry in the index by age. The engine puts it in the
// batch that writes the request's message.
func (b *Batch) PutIdempotency(scope, key string, r IdempotencyRecord) {
	b.added[retainedIdempotency]++
	b.key = idempotencyKey(b.key[:0], scope, key)
	b.val = appendIdempotency(b.val[:0], r)
	b.set(b.key, b.val)
	b.key = idempotencyAgeKey(b.key[:0], r.At, scope, key)
	b.set(b.key, nil)
}

// Idempotency returns the record of the request named by (scope, key), and
// ok false when there is none (never seen, or removed by retention).
func (db *DB) Idempotency(scope, key string) (IdempotencyRecord, bool, error) {
	k := idempotencyKey(nil, scope, key)
	val, ok, err := db.get(k)
	if err != nil || !ok {
		return IdempotencyRecord{}, false, err
	}
	r, err := decodeIdempotency(val)
	if err != nil {
		return IdempotencyRecord{}, false, corrupt(k, err)
	}
	return r, true, nil
}

// sweepIdempotency deletes idempotency records older than cutoff or beyond
// limit, oldest first, walking the index by age. A record is deleted only
// if it is the one the index entry names (same time): a key accepted again
// after its record expired has a new record and a new index entry.
func (db *DB) sweepIdempotency(cutoff int64, limit int) (left, deleted int, err error) {
	lower, upper := []byte{spaceIdempotencyAge}, []byte{spaceIdempotencyAge + 1}
	n, err := db.countKeys(lower, upper)
	if err != nil {
		return 0, 0, err
	}
	drop := excess(n, limit)
	it, err := db.newIter(lower, upper)
	if err != nil {
		return 0, 0, err
	}
	d := &deleter{db: db}
	var rec []byte
	for valid := it.First(); valid; valid = it.Next() {
		key := it.Key()
		if len(key) < 9 {
			return 0, 0, finish(it, corrupt(key, errBadKey))
		}
		at := unflipSign(binary.BigEndian.Uint64(key[1:]))
		if d.n >= drop && at >= cutoff {
			break
		}
		rec = append(append(rec[:0], spaceIdempotency), key[9:]...)
		val, ok, err := db.get(rec)
		if err != nil {
			return 0, 0, finish(it, err)
		}
		if ok && len(val) >= idempotencyFixedLen && int64(binary.BigEndian.Uint64(val)) == at {
			d.batch().delete(rec)
		}
		d.batch().delete(key)
		if err := d.done(); err != nil {
			return 0, 0, finish(it, err)
		}
	}
	if err := finish(it, d.flush()); err != nil {
		return 0, 0, err
	}
	return n - d.n, d.n, nil
}
