package store

import (
	"bytes"
	"errors"
	"strings"
)

// Strings inside keys (namespaces, type names, ids, state names, egress
// names, routes) are written in an escaped, self-delimiting form, written
// str(s) in the layout diagrams of this package:
//
//	str("ab")      = 61 62 00 01
//	str("a\x00b")  = 61 00 ff 62 00 01
//	str("")        = 00 01
//
//	+------------------------------------------------+-----------+
//	| the bytes of s, each 0x00 written as 0x00 0xff | 0x00 0x01 |
//	+------------------------------------------------+-----------+
//
// Every byte other than 0x00 stands for itself, so '/', 0xff, invalid UTF-8
// and emoji need no care. The encoding has three properties the store relies
// on; all are part of the file format:
//
//   - It is self-delimiting: no encoding is a prefix of another, so parts
//     can be concatenated without lengths and never collide ("a/b"+"c" and
//     "a"+"b/c" are different keys).
//   - It preserves order: bytes.Compare(str(a), str(b)) ==
//     strings.Compare(a, b). Where a is a proper prefix of b, str(a) goes on
//     with 0x00 0x01 and str(b) with either a byte >= 0x01 or 0x00 0xff, both
//     greater. So a scan in key order lists ids in string order.
//   - Prefixes carry over: the ids that start with p are exactly the keys
//     that start with esc(p), str(p) without its terminator, which is what
//     ScanIDs seeks to.
const (
	escMarker = 0x00 // starts a two-byte sequence
	escZero   = 0xff // 0x00 0xff: a 0x00 byte of the string
	escTerm   = 0x01 // 0x00 0x01: the end of the string
)

// errBadString is returned (wrapped as corruption) when a key's string part
// does not decode.
var errBadString = errors.New("bad escaped string")

// appendString appends str(s): s escaped, then the terminator.
func appendString(dst []byte, s string) []byte {
	dst = appendEscaped(dst, s)
	return append(dst, escMarker, escTerm)
}

// appendEscaped appends esc(s): s with every 0x00 written as 0x00 0xff, and
// no terminator. Used to seek to the strings that start with s.
func appendEscaped(dst []byte, s string) []byte {
	for {
		i := strings.IndexByte(s, 0)
		if i < 0 {
			return append(dst, s...)
		}
		dst = append(dst, s[:i]...)
		dst = append(dst, escMarker, escZero)
		s = s[i+1:]
	}
}

// stringLen returns len(str(s)).
func stringLen(s string) int { return len(s) + strings.Count(s, "\x00") + 2 }

// decodeString decodes one str(s) from the front of b and returns s and the
// bytes after it.
func decodeString(b []byte) (s string, rest []byte, err error) {
	i := bytes.IndexByte(b, escMarker)
	if i < 0 || i+1 >= len(b) {
		return "", nil, errBadString
	}
	if b[i+1] == escTerm { // the common case: no 0x00 inside
		return string(b[:i]), b[i+2:], nil
	}
	var sb strings.Builder
	for {
		if i < 0 || i+1 >= len(b) {
			return "", nil, errBadString
		}
		sb.Write(b[:i])
		switch b[i+1] {
		case escTerm:
			return sb.String(), b[i+2:], nil
		case escZero:
			sb.WriteByte(0)
			b = b[i+2:]
			i = bytes.IndexByte(b, escMarker)
		default:
			return "", nil, errBadString
		}
	}
}

// prefixSuccessor returns the smallest key greater than every key that
// starts with prefix: prefix with its last byte below 0xff incremented and
// what follows dropped. It returns nil (no upper bound) when prefix is all
// 0xff. The result is a new slice.
func prefixSuccessor(prefix []byte) []byte {
	for i := len(prefix) - 1; i >= 0; i-- {
		if prefix[i] != 0xff {
			out := make([]byte, i+1)
			copy(out, prefix)
			out[i]++
			return out
		}
	}
	return nil
}

// AddressKey returns str(namespace) str(type) str(id): an address in the
// key form of the store's state entries, which is also the key of a
// cluster's messages-topic record (docs/explanation/cluster.md).
func AddressKey(namespace, typ, id string) []byte {
	b := appendString(nil, namespace)
	b = appendString(b, typ)
	return appendString(b, id)
}
