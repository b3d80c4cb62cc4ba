package types

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
)

// JSONValue returns a stored value as the envelope's "value": a built-in
// scalar as a JSON bool, number or string (NaN and the infinities as the
// strings "NaN", "+Inf" and "-Inf"), a user type's UTF-8 JSON bytes compacted.
// ok is false when the value has no JSON form (a user type whose bytes are not
// UTF-8 JSON); the envelope's valueBase64 carries it then.
//
// It returns an error wrapping ErrMalformed when the bytes of a scalar type do
// not decode as it.
func JSONValue(typename string, value []byte) (v json.RawMessage, ok bool, err error) {
	k := kindOf(typename)
	if k == kindNone {
		if !isJSON(value) {
			return nil, false, nil
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, value); err != nil {
			return nil, false, nil // unreachable: isJSON held
		}
		return buf.Bytes(), true, nil
	}
	s, err := decode(k, value)
	if err != nil {
		return nil, false, err
	}
	return s.json(), true, nil
}

// json renders v as JSONValue does.
func (v scalar) json() json.RawMessage {
	switch v.k {
	case kindFloat, kindDouble:
		f := v.f64
		if v.k == kindFloat {
			f = float64(v.f32)
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return json.RawMessage(strconv.Quote(v.text()))
		}
	case kindString:
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(v.s) // a Go string always encodes
		return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	}
	return json.RawMessage(v.text())
}

// FromJSONValue converts the envelope's "value" of a PUT into the bytes to
// store, the inverse of JSONValue. A scalar takes the JSON form JSONValue
// gives; in addition int and long take a JSON string of digits (for clients
// without 64-bit integers) and float and double a string with a number, "NaN",
// "+Inf", "-Inf" or "Infinity". A user type's JSON value is stored as given.
//
// It returns an error wrapping ErrInvalid when v is not valid JSON or not a
// value of the scalar type.
func FromJSONValue(typename string, v json.RawMessage) ([]byte, error) {
	if !isJSON(v) {
		return nil, newError(ErrInvalid, typename, "%s value is not valid UTF-8 JSON: %s", typename, quote(string(v)))
	}
	k := kindOf(typename)
	if k == kindNone {
		return bytes.Clone(v), nil
	}
	s, err := parseJSONScalar(k, bytes.TrimSpace(v))
	if err != nil {
		return nil, err
	}
	return s.encode()
}

// parseJSONScalar parses one valid JSON value as a value of the scalar kind k.
func parseJSONScalar(k kind, v []byte) (scalar, error) {
	tn := k.typename()
	isString := v[0] == '"'
	var str string
	if isString {
		if err := json.Unmarshal(v, &str); err != nil {
			return scalar{}, newError(ErrInvalid, tn, "%s value is not a valid JSON string: %v", tn, err)
		}
	}
	isNumber := v[0] == '-' || v[0] >= '0' && v[0] <= '9'
	switch k {
	case kindBool:
		if s := string(v); s == "true" || s == "false" {
			return parseScalar(k, s)
		}
		return scalar{}, newError(ErrInvalid, tn, "%s wants JSON true or false, got %s", tn, quote(string(v)))
	case kindString:
		if !isString {
			return scalar{}, newError(ErrInvalid, tn, "%s wants a JSON string, got %s", tn, quote(string(v)))
		}
		return parseScalar(k, str)
	}
	// int, long, float, double
	switch {
	case isNumber:
		return parseScalar(k, string(v))
	case isString:
		return parseScalar(k, str)
	}
	what := "a JSON number or a string of digits"
	if k == kindFloat || k == kindDouble {
		what = `a JSON number or one of the strings "NaN", "+Inf", "-Inf"`
	}
	return scalar{}, newError(ErrInvalid, tn, "%s wants %s, got %s", tn, what, quote(string(v)))
}
