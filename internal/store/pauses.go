package store

import (
	"encoding/binary"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/protocol"
)

// This file is the pause key space (0x13): the pauses in force, one record
// per paused address or function type, written by the commit of the
// partition that decided the pause and read back at recovery. In cluster
// mode every partition keeps its own copy of a type-level pause.

// pauseKey appends the key of the pause of address a, or of every address
// of a's type when a.ID is empty (an address id is never empty).
//
//	+------+----------------+-----------+---------+
//	| 0x13 | str(namespace) | str(type) | str(id) |
//	+------+----------------+-----------+---------+
//
// In cluster mode each partition keeps its own record of a type-level
// pause, in its own changelog partition, so the key of a type-level pause
// then ends with the partition (part ≥ 0):
//
//	+------+----------------+-----------+---------+------------------+
//	| 0x13 | str(namespace) | str(type) | str("") | partition u16 BE |
//	+------+----------------+-----------+---------+------------------+
//
// The value is a protocol.Pause.
func pauseKey(dst []byte, a address.Address, part int) []byte {
	dst = append(dst, spacePause)
	dst = appendString(dst, a.Type.Namespace)
	dst = appendString(dst, a.Type.Name)
	dst = appendString(dst, a.ID)
	if part >= 0 {
		dst = binary.BigEndian.AppendUint16(dst, partitionU16(part))
	}
	return dst
}

// decodePauseKey returns the address of a pause key and its partition, -1
// for a key without one.
func decodePauseKey(key []byte) (a address.Address, part int, err error) {
	if len(key) == 0 || key[0] != spacePause {
		return a, -1, errBadKey
	}
	b := key[1:]
	if a.Type.Namespace, b, err = decodeString(b); err != nil {
		return address.Address{}, -1, err
	}
	if a.Type.Name, b, err = decodeString(b); err != nil {
		return address.Address{}, -1, err
	}
	if a.ID, b, err = decodeString(b); err != nil {
		return address.Address{}, -1, err
	}
	switch {
	case len(b) == 0:
		return a, -1, nil
	case len(b) == 2 && a.ID == "":
		return a, int(binary.BigEndian.Uint16(b)), nil
	}
	return address.Address{}, -1, errBadKey
}

// PutPause records the pause of address a (of its whole type when a.ID is
// empty), replacing the one there was.
func (b *Batch) PutPause(a address.Address, p *protocol.Pause) {
	if p == nil {
		panic("store: PutPause with a nil pause")
	}
	b.key = pauseKey(b.key[:0], a, -1)
	b.setProto(b.key, p)
}

// DeletePause removes the pause of address a (or of its type).
func (b *Batch) DeletePause(a address.Address) {
	b.key = pauseKey(b.key[:0], a, -1)
	b.delete(b.key)
}

// PutTypePause records partition part's own copy of the pause of every
// address of type t (cluster mode: each partition's copy travels in its
// own changelog, so it moves with the partition), replacing the one there
// was.
func (b *Batch) PutTypePause(t address.TypeName, part int, p *protocol.Pause) {
	if p == nil {
		panic("store: PutTypePause with a nil pause")
	}
	b.key = pauseKey(b.key[:0], address.Address{Type: t}, part)
	b.setProto(b.key, p)
}

// DeleteTypePause removes partition part's copy of the pause of type t.
func (b *Batch) DeleteTypePause(t address.TypeName, part int) {
	b.key = pauseKey(b.key[:0], address.Address{Type: t}, part)
	b.delete(b.key)
}

// ScanPauses calls fn with every pause in force, in key order (by type,
// the type-level pause first — without a partition, then each partition's
// copy — then by id). part is the partition of a type-level copy
// (PutTypePause), else -1.
func (db *DB) ScanPauses(fn func(a address.Address, part int, p *protocol.Pause) error) error {
	prefix := []byte{spacePause}
	it, err := db.newIter(prefix, prefixSuccessor(prefix))
	if err != nil {
		return err
	}
	for valid := it.First(); valid; valid = it.Next() {
		a, part, err := decodePauseKey(it.Key())
		if err != nil {
			return finish(it, corrupt(it.Key(), err))
		}
		p := new(protocol.Pause)
		if err := iterValue(it, p); err != nil {
			return finish(it, err)
		}
		if err := fn(a, part, p); err != nil {
			return finish(it, err)
		}
	}
	return finish(it, nil)
}
