// Package types knows StateFun's built-in typed values and converts a stored
// value between its exact bytes, text and JSON, for the HTTP state access API
// (docs/reference/state-api.md: reads and writes).
//
// # Built-in scalar types
//
// Six typenames are built into every StateFun SDK. A value's bytes are the
// serialized protobuf wrapper message, not the raw scalar, and proto3 encodes
// the zero value (false, 0, 0.0, "") as zero bytes. These layouts are part of
// the wire contract with the SDKs:
//
//	io.statefun.types/bool    BooleanWrapper  +----+--------+
//	                                          | 08 | 01     |   true; false is no bytes
//	                                          +----+--------+
//	io.statefun.types/int     IntWrapper      +----+-------------+
//	                                          | 0D | int32 LE(4) |   sfixed32, not a varint
//	                                          +----+-------------+
//	io.statefun.types/long    LongWrapper     +----+-------------+
//	                                          | 09 | int64 LE(8) |   sfixed64, not a varint
//	                                          +----+-------------+
//	io.statefun.types/float   FloatWrapper    +----+---------------+
//	                                          | 0D | IEEE-754 LE(4)|
//	                                          +----+---------------+
//	io.statefun.types/double  DoubleWrapper   +----+---------------+
//	                                          | 09 | IEEE-754 LE(8)|
//	                                          +----+---------------+
//	io.statefun.types/string  StringWrapper   +----+------------+-------+
//	                                          | 0A | len varint | UTF-8 |
//	                                          +----+------------+-------+
//
// Annotated examples: int 42 is 0D 2A 00 00 00; long 42 is 09 2A 00 00 00 00
// 00 00 00; string "hé" is 0A 03 68 C3 A9; -0.0 is not zero, so float -0 is
// 0D 00 00 00 80.
//
// Encoding goes through the generated wrappers in internal/protocol and
// google.golang.org/protobuf/proto, the same path the official Go SDK takes, so
// the bytes are exactly the SDKs' (a test cross-checks against the Go SDK).
//
// # Strict decoding
//
// Bytes are accepted as a built-in scalar only when they are the canonical
// encoding of some value, that is exactly what every SDK writes: empty, or
// field 1 once, with the type's wire type, minimal varints, valid UTF-8, no
// other field, no trailing bytes, and no explicit zero value. The SDKs never
// write anything else, and their readers disagree on everything else (the Java
// SDK reads the first field and rejects "08 00", protobuf readers take the
// last field and skip unknown ones), so a laxer check would let the API store
// bytes that some function reads differently or not at all. The one
// consequence for reads: Text and JSONValue report ErrMalformed for such
// bytes; the exact bytes stay readable as application/octet-stream.
// Validate(t, b) == nil exactly when Text(t, b) succeeds, for a scalar t.
//
// # Text
//
// Text renders bool as "true"/"false", int and long in decimal, float and
// double in the shortest form that parses back to the same value (the format
// of encoding/json: "3.5", "100000000", "1e+21", "1e-7"; NaN and the
// infinities as "NaN", "+Inf", "-Inf"), and string as its text.
//
// ParseText is the inverse. For the numeric types and bool it ignores
// surrounding white space ("42\n" from echo is 42) and is otherwise strict:
// bool is true or false, int must fit 32 bits, long 64 bits, float and double
// are decimal (no hex, no '_'), out of range for the width is an error, and so
// is a non-zero literal that rounds to zero ("1e-50" for a float). NaN, Inf,
// +Inf, -Inf and Infinity (any case) are accepted. A string's text is stored
// as is, white space included, and must be UTF-8.
//
// A float's text loses one thing: the payload of a NaN. Text renders every NaN
// as "NaN" and ParseText writes the canonical quiet NaN. The exact bytes are
// always available as application/octet-stream and valueBase64.
//
// # User types and JSON
//
// Any other typename is a user type whose format this package cannot know.
// Its bytes have a text form when they are UTF-8 JSON (json.Valid plus
// utf8.Valid): Text returns them unchanged, including the trailing "\n" that
// the Go SDK's MakeJsonType (encoding/json Encoder) writes, so that text/plain
// GET followed by text/plain PUT stores the same bytes. ParseText stores text
// that is UTF-8 JSON as is and refuses any other text with ErrNoText (the API's
// 415): a binary (protobuf) type has no text form. Bytes of a protobuf type
// that happen to be valid JSON are shown as JSON; there is no way to tell.
//
// JSONValue returns a user type's JSON bytes compacted (json.Compact), which
// drops the Go SDK's "\n": the envelope's "value" is a view, and the envelope
// always carries the exact bytes in "valueBase64". FromJSONValue for a user
// type stores the JSON value as given in the request (json.RawMessage keeps the
// bytes of the value, so an envelope PUT of a Go SDK JSON value stores it
// without the "\n"; every SDK's JSON reader accepts both).
//
// Scalars in JSON: bool as true/false, int and long as JSON numbers (a long
// beyond 2^53 is exact in the text but not in a JavaScript client; FromJSONValue
// also accepts it as a JSON string of digits), float and double as numbers,
// with NaN and the infinities as the strings "NaN", "+Inf", "-Inf", string as
// a JSON string (no HTML escaping).
//
// # The envelope
//
// Envelope is the application/json representation of a read (docs/reference/state-api.md).
// For a PUT, DecodeEnvelopeValue takes valueBase64 when the key is present
// (even ""), else value; when both are present they must denote the same value
// (for a scalar: the same value after decoding, so "NaN" agrees with any NaN
// payload; for a user type: the same JSON after normalization of white space,
// string escapes and object key order), otherwise it is an error that names
// both, because an operator who edited one and not the other meant something
// and guessing which is wrong. The bytes it returns for a scalar typename have
// passed Validate.
//
// # Errors
//
// Every error is an *Error that wraps one of ErrNoText, ErrMalformed,
// ErrInvalid and ErrEnvelope, and carries a Detail meant for the API's
// problem+json response.
package types
