// Package idempotency holds what the ingress and the engine share about
// idempotent requests (the IETF httpapi draft "The Idempotency-Key HTTP
// Header Field"): the header's syntax, the request fingerprint, and the
// errors of a key that is reused or still in progress. See docs/reference/ingress.md.
package idempotency

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// Header is the request header that carries the key.
const Header = "Idempotency-Key"

// ReplayedHeader is set to "true" on the answer to a request whose key was
// already accepted: the answer repeats the first one, no message was made.
const ReplayedHeader = "Idempotent-Replayed"

// MaxKeyBytes caps a key. The draft recommends a UUID (36 characters); 255
// leaves room for any client's scheme while keeping the store's keys small.
const MaxKeyBytes = 255

// Request names one request for deduplication.
type Request struct {
	// Scope is where keys are unique: the ingress uses the target's
	// function type, "namespace/name".
	Scope string
	// Key is the client's Idempotency-Key.
	Key string
	// Fingerprint identifies the request's content (see Fingerprint).
	Fingerprint []byte
}

// ErrInProgress is returned when a request with the same key in the same
// scope is still being made durable; the draft answers 409 Conflict.
var ErrInProgress = errors.New("idempotency: a request with this key is still in progress")

// ErrMismatch is returned when the key was already used, in the same scope,
// by a request with a different fingerprint; the draft answers 422.
var ErrMismatch = errors.New("idempotency: the key was already used for a different request")

// Parse returns the key of a request's Idempotency-Key header lines, ok
// false when there is none. The draft makes the field a Structured Field
// String (RFC 8941): a quoted string of printable ASCII where `\"` and `\\`
// are the only escapes. Many clients send the key bare; a value that does
// not start with a quote is taken as it is if it is visible ASCII (no
// spaces). Either way the key is 1 to MaxKeyBytes bytes. The error names the
// header.
func Parse(lines []string) (key string, ok bool, err error) {
	switch len(lines) {
	case 0:
		return "", false, nil
	case 1:
	default:
		return "", false, fmt.Errorf("%s: given %d times; send one key", Header, len(lines))
	}
	v := strings.Trim(lines[0], " \t")
	if strings.HasPrefix(v, `"`) {
		key, err = parseString(v)
	} else {
		key, err = v, checkBare(v)
	}
	if err != nil {
		return "", false, err
	}
	switch {
	case key == "":
		return "", false, fmt.Errorf("%s: empty key", Header)
	case len(key) > MaxKeyBytes:
		return "", false, fmt.Errorf("%s: key of %d bytes, over %d", Header, len(key), MaxKeyBytes)
	}
	return key, true, nil
}

// parseString parses an RFC 8941 sf-string that makes up the whole value.
func parseString(v string) (string, error) {
	var sb strings.Builder
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\':
			i++
			if i == len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", fmt.Errorf(`%s: in a quoted key only \" and \\ may follow a backslash`, Header)
			}
			sb.WriteByte(v[i])
		case c == '"':
			if i != len(v)-1 {
				return "", fmt.Errorf("%s: characters after the closing quote", Header)
			}
			return sb.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", fmt.Errorf("%s: byte 0x%02x is not printable ASCII", Header, c)
		default:
			sb.WriteByte(c)
		}
	}
	return "", fmt.Errorf("%s: no closing quote", Header)
}

// checkBare accepts a bare key of visible ASCII.
func checkBare(v string) error {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c <= 0x20 || c > 0x7e {
			return fmt.Errorf("%s: byte 0x%02x is not visible ASCII (quote the key to include spaces)", Header, c)
		}
	}
	return nil
}

// Fingerprint is the SHA-256 of a request's method, path (as sent, escaped),
// Content-Type and body, each length-prefixed so that no two different
// requests give the same input.
func Fingerprint(method, path, contentType string, body []byte) []byte {
	h := sha256.New()
	for _, part := range [][]byte{[]byte(method), []byte(path), []byte(contentType), body} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	return h.Sum(nil)
}
