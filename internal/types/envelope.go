package types

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"time"
)

// Envelope is the application/json representation of a state entry
// (docs/reference/state-api.md, "Reads"): what a GET returns and what a PUT may send back.
type Envelope struct {
	Address  EnvelopeAddress `json:"address"`
	State    string          `json:"state"`
	Typename string          `json:"typename"`
	// Version is the entry's ETag without quotes; empty when unknown.
	Version string `json:"version,omitempty"`
	// ExpiresAt is when the entry expires under its TTL; nil without one.
	// It is RFC 3339 on the wire.
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
	// Value is the value as JSON (see JSONValue); nil when it has no JSON form.
	Value json.RawMessage `json:"value,omitempty"`
	// ValueBase64 is the exact stored bytes in standard base64, present in
	// every response ("" for a value of zero bytes, e.g. int 0).
	ValueBase64 string `json:"valueBase64"`
}

// EnvelopeAddress is the function instance of an Envelope.
type EnvelopeAddress struct {
	Namespace string `json:"namespace"`
	Type      string `json:"type"`
	ID        string `json:"id"`
}

// envelopeKeys finds which value keys a request body has. A pointer stays nil
// when its key is absent or null; json.RawMessage receives "null" itself.
// Keys match case-insensitively, as they do when the body is decoded into an
// Envelope.
type envelopeKeys struct {
	Value       json.RawMessage `json:"value"`
	ValueBase64 *string         `json:"valueBase64"`
}

// DecodeEnvelopeValue returns the bytes to store for a PUT of env as typename.
// raw is the request body env was decoded from, used to see which keys it
// has (env may be nil then); with raw nil, a non-empty ValueBase64 and a
// non-nil Value count as present. env.Typename is not consulted: the caller
// resolves the target typename.
//
//   - valueBase64 present (even "", which is zero bytes): its bytes; when value
//     is present too, it must denote the same value (see the package doc).
//   - only value present: FromJSONValue(typename, value); a JSON null is a
//     value (a user type stores "null"; a scalar rejects it).
//   - neither: an error.
//
// The bytes returned for a scalar typename have passed Validate. Errors wrap
// ErrEnvelope (neither key, disagreement, bad base64, a body that is not a
// JSON object), ErrMalformed (valueBase64 bytes that are not the scalar type)
// or ErrInvalid (a value that is not the scalar type).
func DecodeEnvelopeValue(typename string, env *Envelope, raw []byte) ([]byte, error) {
	if env == nil {
		env = &Envelope{}
	}
	var keys envelopeKeys
	if raw != nil {
		if err := json.Unmarshal(raw, &keys); err != nil {
			return nil, newError(ErrEnvelope, typename, "the body is not a JSON envelope object: %v", err)
		}
	}
	b64, hasB64 := env.ValueBase64, env.ValueBase64 != ""
	if keys.ValueBase64 != nil {
		b64, hasB64 = *keys.ValueBase64, true
	}
	value := env.Value
	if keys.Value != nil {
		value = keys.Value
	}
	hasValue := value != nil

	switch {
	case !hasB64 && !hasValue:
		return nil, newError(ErrEnvelope, typename, `the envelope has neither "value" nor "valueBase64"`)
	case !hasB64:
		return FromJSONValue(typename, value)
	}

	stored, err := decodeBase64(b64)
	if err != nil {
		return nil, newError(ErrEnvelope, typename, `"valueBase64" is not standard base64: %v`, err)
	}
	if err := Validate(typename, stored); err != nil {
		return nil, err
	}
	if hasValue {
		if err := agree(typename, stored, value); err != nil {
			return nil, err
		}
	}
	return stored, nil
}

// decodeBase64 takes standard base64, with or without padding.
func decodeBase64(s string) ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		if b2, err2 := base64.RawStdEncoding.DecodeString(s); err2 == nil {
			return b2, nil
		}
		return nil, err
	}
	return b, nil
}

// agree returns nil when value denotes the same value as the stored bytes:
// for a scalar, both decode to the same JSON form; for a user type, the bytes
// are JSON equal to value up to white space, string escapes and key order.
func agree(typename string, stored []byte, value json.RawMessage) error {
	disagree := func(have string) error {
		return newError(ErrEnvelope, typename,
			`"value" and "valueBase64" disagree: value is %s, valueBase64 holds %s; send only the one you edited`,
			quote(string(bytes.TrimSpace(value))), have)
	}
	if IsScalar(typename) {
		fromValue, err := FromJSONValue(typename, value)
		if err != nil {
			return err
		}
		a, _, _ := JSONValue(typename, stored) // stored passed Validate
		b, _, _ := JSONValue(typename, fromValue)
		if !bytes.Equal(a, b) {
			return disagree(string(a))
		}
		return nil
	}
	if !isJSON(value) {
		return newError(ErrInvalid, typename, "%s value is not valid UTF-8 JSON: %s", typename, quote(string(value)))
	}
	if !isJSON(stored) {
		return disagree(hexBytes(stored) + " (not JSON)")
	}
	a, b := normalJSON(stored), normalJSON(value)
	if !bytes.Equal(a, b) {
		return disagree(quote(string(bytes.TrimSpace(stored))))
	}
	return nil
}

// normalJSON re-encodes valid JSON with numbers kept as written, object keys
// sorted, and strings escaped one way.
func normalJSON(b []byte) []byte {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return b
	}
	out, err := json.Marshal(v)
	if err != nil {
		return b
	}
	return out
}
