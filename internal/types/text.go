package types

import (
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Text renders a stored value as text: a built-in scalar as "42", "true" or
// "3.5" (floats in the shortest form that parses back to the same value, NaN
// and the infinities as "NaN", "+Inf", "-Inf"), a string as its text, and a
// user type's bytes unchanged when they are UTF-8 JSON.
//
// It returns an error wrapping ErrMalformed when the bytes of a scalar type do
// not decode as it, and ErrNoText when a user type's bytes are not UTF-8 JSON.
func Text(typename string, value []byte) (string, error) {
	k := kindOf(typename)
	if k == kindNone {
		if !isJSON(value) {
			return "", newError(ErrNoText, typename,
				"%s value has no text form: its %d bytes are not UTF-8 JSON; read it as application/octet-stream or application/json (valueBase64)",
				typename, len(value))
		}
		return string(value), nil
	}
	v, err := decode(k, value)
	if err != nil {
		return "", err
	}
	return v.text(), nil
}

// ParseText parses text into the stored bytes of typename, the inverse of
// Text. Numbers and bool ignore surrounding white space; a string is stored as
// is. For a user type, text that is UTF-8 JSON is stored as is.
//
// It returns an error wrapping ErrInvalid when the text does not parse as the
// scalar type (the detail says what was expected), and ErrNoText when the type
// is a user type and the text is not UTF-8 JSON.
func ParseText(typename, text string) ([]byte, error) {
	k := kindOf(typename)
	if k == kindNone {
		if !isJSON([]byte(text)) {
			return nil, newError(ErrNoText, typename,
				"%s has no text form for this body: the text is not UTF-8 JSON; send the exact bytes as application/octet-stream",
				typename)
		}
		return []byte(text), nil
	}
	v, err := parseScalar(k, text)
	if err != nil {
		return nil, err
	}
	return v.encode()
}

// isJSON reports whether b is one JSON value in UTF-8, surrounding white space
// allowed.
func isJSON(b []byte) bool { return utf8.Valid(b) && json.Valid(b) }

// text renders v as Text does.
func (v scalar) text() string {
	switch v.k {
	case kindBool:
		return strconv.FormatBool(v.b)
	case kindInt, kindLong:
		return strconv.FormatInt(v.i, 10)
	case kindFloat:
		return formatFloat(float64(v.f32), 32)
	case kindDouble:
		return formatFloat(v.f64, 64)
	}
	return v.s
}

// formatFloat formats f as encoding/json does: the shortest decimal that
// parses back to the same value at that bit size, in exponent form only below
// 1e-6 or from 1e21 on, with the exponent's leading zero dropped ("1e-7").
// NaN and the infinities come out as "NaN", "+Inf" and "-Inf".
func formatFloat(f float64, bits int) string {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return strconv.FormatFloat(f, 'g', -1, bits)
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 {
		if bits == 64 && (abs < 1e-6 || abs >= 1e21) ||
			bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	b := strconv.AppendFloat(nil, f, format, -1, bits)
	if format == 'e' {
		// clean up e-09 to e-9
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return string(b)
}

// parseScalar parses text as a value of the scalar kind k.
func parseScalar(k kind, text string) (scalar, error) {
	tn := k.typename()
	v := scalar{k: k}
	if k == kindString {
		if !utf8.ValidString(text) {
			return scalar{}, newError(ErrInvalid, tn, "%s wants UTF-8 text, got %s", tn, quote(text))
		}
		v.s = text
		return v, nil
	}
	t := strings.TrimSpace(text)
	switch k {
	case kindBool:
		switch t {
		case "true":
			v.b = true
		case "false":
		default:
			return scalar{}, newError(ErrInvalid, tn, "%s wants true or false, got %s", tn, quote(text))
		}
	case kindInt, kindLong:
		bits, what := 32, "a 32-bit integer"
		if k == kindLong {
			bits, what = 64, "a 64-bit integer"
		}
		i, err := strconv.ParseInt(t, 10, bits)
		if errors.Is(err, strconv.ErrRange) {
			return scalar{}, newError(ErrInvalid, tn, "%s wants %s (%d to %d), got %s: out of range",
				tn, what, int64(-1)<<(bits-1), uint64(1)<<(bits-1)-1, quote(text))
		}
		if err != nil {
			return scalar{}, newError(ErrInvalid, tn, "%s wants %s, got %s", tn, what, quote(text))
		}
		v.i = i
	case kindFloat, kindDouble:
		bits, what, largest, smallest := 32, "a 32-bit float", math.MaxFloat32, math.SmallestNonzeroFloat32
		if k == kindDouble {
			bits, what, largest, smallest = 64, "a 64-bit float", math.MaxFloat64, math.SmallestNonzeroFloat64
		}
		// strconv also takes hex floats and '_' separators; an operator's
		// typo should not become a value.
		f, err := strconv.ParseFloat(t, bits)
		if err == nil && strings.ContainsAny(t, "_xX") {
			err = strconv.ErrSyntax
		}
		switch {
		case errors.Is(err, strconv.ErrRange):
			return scalar{}, newError(ErrInvalid, tn, "%s wants %s, got %s: out of range (largest magnitude %s)",
				tn, what, quote(text), formatFloat(largest, bits))
		case err != nil:
			return scalar{}, newError(ErrInvalid, tn, "%s wants %s (a decimal number, NaN, +Inf or -Inf), got %s",
				tn, what, quote(text))
		case f == 0 && nonZeroMantissa(t):
			return scalar{}, newError(ErrInvalid, tn, "%s wants %s, got %s: it rounds to 0 (smallest magnitude %s)",
				tn, what, quote(text), formatFloat(smallest, bits))
		}
		if k == kindFloat {
			v.f32 = float32(f)
		} else {
			v.f64 = f
		}
	}
	return v, nil
}

// nonZeroMantissa reports whether a decimal float literal has a non-zero digit
// before its exponent, so that parsing it to 0 lost the value.
func nonZeroMantissa(s string) bool {
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		s = s[:i]
	}
	return strings.ContainsAny(s, "123456789")
}
