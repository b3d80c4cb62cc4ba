package types

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Errors returned by this package, always wrapped in an *Error; test with
// errors.Is.
var (
	// ErrNoText is returned by Text when the value has no text form (a user
	// type whose bytes are not UTF-8 JSON), and by ParseText when the target
	// is a user type and the text is not UTF-8 JSON. The API answers 406 or
	// 415.
	ErrNoText = errors.New("types: no text form")

	// ErrMalformed is returned when bytes claimed to be of a built-in scalar
	// type are not the canonical encoding of a value of that type (see the
	// package doc, "Strict decoding"): by Validate, Text, JSONValue and
	// DecodeEnvelopeValue. The API answers 422 to a write.
	ErrMalformed = errors.New("types: malformed value bytes")

	// ErrInvalid is returned by ParseText, FromJSONValue and
	// DecodeEnvelopeValue when text or a JSON value is not a value of the
	// target scalar type ("4x" or 3000000000 for an int, "yes" for a bool),
	// or a JSON value is not valid UTF-8 JSON. The API answers 422.
	ErrInvalid = errors.New("types: invalid value for the type")

	// ErrEnvelope is returned by DecodeEnvelopeValue when the body is not a
	// JSON object, when it carries neither value nor valueBase64, when the
	// two disagree, or when valueBase64 is not base64. The API answers 400.
	ErrEnvelope = errors.New("types: bad envelope")
)

// Error is the error of every function in this package. Detail is a sentence
// for an operator that names the typename and what was expected, e.g.
// `io.statefun.types/int wants a 32-bit integer, got "4x"`.
type Error struct {
	Typename string // the target typename
	Kind     error  // ErrNoText, ErrMalformed, ErrInvalid or ErrEnvelope
	Detail   string
}

// Error returns "types: " followed by the detail.
func (e *Error) Error() string { return "types: " + e.Detail }

// Unwrap returns the Kind.
func (e *Error) Unwrap() error { return e.Kind }

func newError(kind error, typename, format string, args ...any) *Error {
	return &Error{Typename: typename, Kind: kind, Detail: fmt.Sprintf(format, args...)}
}

// maxQuote bounds how much of a user's input an error message repeats.
const maxQuote = 64

// quote renders text for an error message: quoted, cut after maxQuote bytes.
func quote(s string) string {
	if len(s) <= maxQuote {
		return strconv.Quote(s)
	}
	cut := maxQuote
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(s[:cut]), len(s))
}

// hexBytes renders bytes for an error message as "0D 2A 00", cut after
// maxQuote/2 bytes.
func hexBytes(b []byte) string {
	if len(b) == 0 {
		return "no bytes"
	}
	if len(b) <= maxQuote/2 {
		return fmt.Sprintf("% X", b)
	}
	return fmt.Sprintf("% X … (%d bytes)", b[:maxQuote/2], len(b))
}
