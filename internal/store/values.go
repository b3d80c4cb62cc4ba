package store

import (
	"encoding/binary"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"
)

// Entry is one stored state value of one function instance.
type Entry struct {
	// Typename is the typename of Value, as the function declared it (for
	// example "io.statefun.types/int"). It may be empty.
	Typename string
	// Value is the value's bytes. An entry that exists holds a value,
	// possibly zero-length; a deleted state has no entry at all. Entries read
	// from the store have a non-nil Value owned by the caller.
	Value []byte
	// Version is the partition's version counter at the entry's last change
	// (see PartitionMeta.VersionSeq).
	Version uint64
	// ExpiresAt is when the entry expires, in Unix milliseconds; 0 means
	// never.
	ExpiresAt int64
}

const entryFixedLen = 8 + 8

// appendEntry appends the value of a state entry.
//
//	+----------------+------------------+------------------+----------+-------------+
//	| version u64 BE | expiresAt i64 BE | uvarint len(typ) | typename | value bytes |
//	+----------------+------------------+------------------+----------+-------------+
//	       8 B               8 B            1 to 10 B       len(typ)    the rest
//
// expiresAt is Unix milliseconds in two's complement, 0 meaning never. The
// value bytes run to the end of the record, so they have no length of their
// own and may be empty.
func appendEntry(dst []byte, e Entry) []byte {
	dst = binary.BigEndian.AppendUint64(dst, e.Version)
	dst = binary.BigEndian.AppendUint64(dst, uint64(e.ExpiresAt))
	dst = binary.AppendUvarint(dst, uint64(len(e.Typename)))
	dst = append(dst, e.Typename...)
	return append(dst, e.Value...)
}

var errShortEntry = errors.New("entry value too short")

// decodeEntry is the inverse of appendEntry. The returned entry does not
// alias b.
func decodeEntry(b []byte) (Entry, error) {
	if len(b) < entryFixedLen+1 {
		return Entry{}, errShortEntry
	}
	e := Entry{
		Version:   binary.BigEndian.Uint64(b),
		ExpiresAt: int64(binary.BigEndian.Uint64(b[8:])),
	}
	b = b[entryFixedLen:]
	n, w := binary.Uvarint(b)
	if w <= 0 || n > uint64(len(b)-w) {
		return Entry{}, fmt.Errorf("entry typename length %d does not fit", n)
	}
	b = b[w:]
	e.Typename = string(b[:n])
	e.Value = append([]byte{}, b[n:]...)
	return e, nil
}

// appendU32 appends a global meta value: a u32, big-endian.
//
//	+--------------+
//	| value u32 BE |
//	+--------------+
func appendU32(dst []byte, v uint32) []byte { return binary.BigEndian.AppendUint32(dst, v) }

// decodeU32 is the inverse of appendU32.
func decodeU32(b []byte) (uint32, error) {
	if len(b) != 4 {
		return 0, fmt.Errorf("meta value is %d bytes, want 4", len(b))
	}
	return binary.BigEndian.Uint32(b), nil
}

// marshalOpts encodes the protobuf values. Deterministic, so that equal
// records are equal bytes (and the encoding goldens are stable).
var marshalOpts = proto.MarshalOptions{Deterministic: true}

// unmarshalValue decodes a protobuf value stored at key into m, reporting a
// failure as corruption.
func unmarshalValue(key, val []byte, m proto.Message) error {
	if err := proto.Unmarshal(val, m); err != nil {
		return corrupt(key, err)
	}
	return nil
}
