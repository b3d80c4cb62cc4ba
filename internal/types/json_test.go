package types

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

func TestFromJSONValueLenient(t *testing.T) {
	for _, tc := range []struct {
		typename, in, hex string
	}{
		{Int, `"42"`, "0D 2A000000"},
		{Int, " 42 ", "0D 2A000000"},
		{Long, `"9223372036854775807"`, "09 FFFFFFFFFFFFFF7F"},
		{Float, `"NaN"`, "0D 0000C07F"},
		{Float, `"Infinity"`, "0D 0000807F"},
		{Float, `"3.5"`, "0D 00006040"},
		{Double, "3.50", "09 0000000000000C40"},
		{Double, "35e-1", "09 0000000000000C40"},
		{String, `"\u00e9"`, "0A 02 C3A9"},
		{String, `"\u003c"`, "0A 01 3C"},
	} {
		got, err := FromJSONValue(tc.typename, json.RawMessage(tc.in))
		if want := hx(t, tc.hex); err != nil || !bytes.Equal(got, want) {
			t.Errorf("FromJSONValue(%s, %s) = % X, %v; want % X", tc.typename, tc.in, got, err, want)
		}
	}
}

func TestFromJSONValueErrors(t *testing.T) {
	for _, tc := range []struct {
		typename, in, msg string
	}{
		{Int, `4.0`, `io.statefun.types/int wants a 32-bit integer, got "4.0"`},
		{Int, `1e3`, `io.statefun.types/int wants a 32-bit integer, got "1e3"`},
		{Int, `true`, `io.statefun.types/int wants a JSON number or a string of digits, got "true"`},
		{Int, `null`, `io.statefun.types/int wants a JSON number or a string of digits, got "null"`},
		{Int, `3000000000`, `io.statefun.types/int wants a 32-bit integer (-2147483648 to 2147483647), got "3000000000": out of range`},
		{Int, ``, `io.statefun.types/int value is not valid UTF-8 JSON: ""`},
		{Int, `{`, `io.statefun.types/int value is not valid UTF-8 JSON: "{"`},
		{Double, `[1]`, `io.statefun.types/double wants a JSON number or one of the strings "NaN", "+Inf", "-Inf", got "[1]"`},
		{Double, `"lots"`, `io.statefun.types/double wants a 64-bit float (a decimal number, NaN, +Inf or -Inf), got "lots"`},
		{Bool, `"true"`, `io.statefun.types/bool wants JSON true or false, got "\"true\""`},
		{Bool, `1`, `io.statefun.types/bool wants JSON true or false, got "1"`},
		{String, `42`, `io.statefun.types/string wants a JSON string, got "42"`},
		{String, `null`, `io.statefun.types/string wants a JSON string, got "null"`},
		{"example/user", `{"a":`, `example/user value is not valid UTF-8 JSON: "{\"a\":"`},
	} {
		got, err := FromJSONValue(tc.typename, json.RawMessage(tc.in))
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("FromJSONValue(%s, %s) = % X, %v; want ErrInvalid", tc.typename, tc.in, got, err)
			continue
		}
		if err.Error() != "types: "+tc.msg {
			t.Errorf("FromJSONValue(%s, %s) error\n  %s\nwant\n  types: %s", tc.typename, tc.in, err, tc.msg)
		}
	}
}

// TestUserTypeJSON: JSONValue compacts (the envelope carries the exact bytes
// in valueBase64) and FromJSONValue stores the value as given.
func TestUserTypeJSON(t *testing.T) {
	const tn = "example/user"
	for _, tc := range []struct{ stored, value string }{
		{"{\"name\":\"Ada\", \"tags\": [ \"<b>\" ]}\n", `{"name":"Ada","tags":["<b>"]}`},
		{"null\n", "null"},
		{`"x"`, `"x"`},
	} {
		v, ok, err := JSONValue(tn, []byte(tc.stored))
		if err != nil || !ok || string(v) != tc.value {
			t.Errorf("JSONValue(%q) = %s, %v, %v; want %s", tc.stored, v, ok, err, tc.value)
		}
		if !json.Valid(v) {
			t.Errorf("JSONValue(%q) = %s is not valid JSON", tc.stored, v)
		}
	}
	in := json.RawMessage("{ \"a\" : 1 }")
	got, err := FromJSONValue(tn, in)
	if err != nil || string(got) != string(in) {
		t.Errorf("FromJSONValue(%s) = %q, %v; want it as given", in, got, err)
	}
	in[2] = 'b' // the result must not alias the input
	if string(got) != "{ \"a\" : 1 }" {
		t.Errorf("FromJSONValue result aliases its input: %q", got)
	}
}
