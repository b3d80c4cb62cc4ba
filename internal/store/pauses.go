package store

import (
	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/protocol"
)

// This file is the pause key space (0x13): the pauses in force, one record
// per paused address or function type, written by the commit of the
// partition that decided the pause and read back at recovery.

// pauseKey appends the key of the pause of address a, or of every address
// of a's type when a.ID is empty (an address id is never empty).
//
//	+------+----------------+-----------+---------+
//	| 0x13 | str(namespace) | str(type) | str(id) |
//	+------+----------------+-----------+---------+
//
// The value is a protocol.Pause.
func pauseKey(dst []byte, a address.Address) []byte {
	dst = append(dst, spacePause)
	dst = appendString(dst, a.Type.Namespace)
	dst = appendString(dst, a.Type.Name)
	return appendString(dst, a.ID)
}

func decodePauseKey(key []byte) (a address.Address, err error) {
	if len(key) == 0 || key[0] != spacePause {
		return a, errBadKey
	}
	b := key[1:]
	if a.Type.Namespace, b, err = decodeString(b); err != nil {
		return address.Address{}, err
	}
	if a.Type.Name, b, err = decodeString(b); err != nil {
		return address.Address{}, err
	}
	if a.ID, b, err = decodeString(b); err != nil {
		return address.Address{}, err
	}
	if len(b) != 0 {
		return address.Address{}, errBadKey
	}
	return a, nil
}

// PutPause records the pause of address a (of its whole type when a.ID is
// empty), replacing the one there was.
func (b *Batch) PutPause(a address.Address, p *protocol.Pause) {
	if p == nil {
		panic("store: PutPause with a nil pause")
	}
	b.key = pauseKey(b.key[:0], a)
	b.setProto(b.key, p)
}

// DeletePause removes the pause of address a (or of its type).
func (b *Batch) DeletePause(a address.Address) {
	b.key = pauseKey(b.key[:0], a)
	b.delete(b.key)
}

// ScanPauses calls fn with every pause in force, in key order (by type,
// the type-level pause first, then by id).
func (db *DB) ScanPauses(fn func(a address.Address, p *protocol.Pause) error) error {
	prefix := []byte{spacePause}
	it, err := db.newIter(prefix, prefixSuccessor(prefix))
	if err != nil {
		return err
	}
	for valid := it.First(); valid; valid = it.Next() {
		a, err := decodePauseKey(it.Key())
		if err != nil {
			return finish(it, corrupt(it.Key(), err))
		}
		p := new(protocol.Pause)
		if err := iterValue(it, p); err != nil {
			return finish(it, err)
		}
		if err := fn(a, p); err != nil {
			return finish(it, err)
		}
	}
	return finish(it, nil)
}
