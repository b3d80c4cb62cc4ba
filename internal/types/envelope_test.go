package types

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// envelopeFor builds the envelope a GET returns for stored bytes.
func envelopeFor(t *testing.T, typename string, stored []byte) Envelope {
	t.Helper()
	v, ok, err := JSONValue(typename, stored)
	if err != nil {
		t.Fatalf("JSONValue(%s, % X): %v", typename, stored, err)
	}
	if !ok {
		v = nil
	}
	return Envelope{
		Address:     EnvelopeAddress{Namespace: "example", Type: "greeter", ID: "ada/lovelace 😀"},
		State:       "seen",
		Typename:    typename,
		Version:     "17",
		Value:       v,
		ValueBase64: base64.StdEncoding.EncodeToString(stored),
	}
}

func TestEnvelopeJSON(t *testing.T) {
	exp := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	env := envelopeFor(t, Int, hx(t, "0D 2A000000"))
	env.ExpiresAt = &exp
	got, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"address":{"namespace":"example","type":"greeter","id":"ada/lovelace 😀"},"state":"seen",` +
		`"typename":"io.statefun.types/int","version":"17","expiresAt":"2024-05-06T07:08:09Z","value":42,"valueBase64":"DSoAAAA="}`
	if string(got) != want {
		t.Errorf("json.Marshal(envelope)\n  %s\nwant\n  %s", got, want)
	}

	// int 0 is zero bytes: valueBase64 is present and empty.
	env = envelopeFor(t, Int, nil)
	env.Version = ""
	got, _ = json.Marshal(env)
	if !strings.HasSuffix(string(got), `"typename":"io.statefun.types/int","value":0,"valueBase64":""}`) {
		t.Errorf("json.Marshal(int 0 envelope) = %s", got)
	}

	// A binary user type: no value, only valueBase64.
	env = envelopeFor(t, "type.googleapis.com/example.Greeting", hx(t, "0A 03 416461"))
	got, _ = json.Marshal(env)
	if strings.Contains(string(got), `"value":`) || !strings.Contains(string(got), `"valueBase64":"CgNBZGE="`) {
		t.Errorf("json.Marshal(binary envelope) = %s", got)
	}
}

// TestEnvelopeRoundTrip: GET's envelope, PUT back unchanged, stores the exact
// bytes, whatever json.Marshal did to the value (compacting, HTML escaping).
func TestEnvelopeRoundTrip(t *testing.T) {
	for _, tc := range []struct{ typename, hex string }{
		{Int, "0D 2A000000"},
		{Int, ""},
		{Bool, "08 01"},
		{Long, "09 FFFFFFFFFFFFFF7F"},
		{Float, "0D 0100807F"}, // a signaling NaN: "NaN" agrees with it
		{Double, "09 000000000000F0FF"},
		{String, "0A 05 3C6126623E"}, // "<a&b>", which json.Marshal escapes
		{"example/user", hexOf("{\"html\": \"<b>&</b>\", \"n\": 1.50}\n")},
		{"example/user", ""}, // no JSON form
		{"type.googleapis.com/example.Greeting", "0A 03 416461"},
	} {
		stored := hx(t, tc.hex)
		body, err := json.Marshal(envelopeFor(t, tc.typename, stored))
		if err != nil {
			t.Fatal(err)
		}
		var env Envelope
		if err := json.Unmarshal(body, &env); err != nil {
			t.Fatal(err)
		}
		got, err := DecodeEnvelopeValue(tc.typename, &env, body)
		if err != nil || !bytes.Equal(got, stored) {
			t.Errorf("PUT of GET's envelope %s = % X, %v; want % X", body, got, err, stored)
		}
		// An operator edits the value and drops valueBase64.
		if env.Value == nil {
			continue
		}
		edited := strings.Replace(string(body), `"valueBase64":"`+env.ValueBase64+`"`, `"other":1`, 1)
		got, err = DecodeEnvelopeValue(tc.typename, nil, []byte(edited))
		if err != nil {
			t.Errorf("PUT of value only %s: %v", edited, err)
			continue
		}
		if IsScalar(tc.typename) && tc.typename != Float { // the NaN payload is not in "NaN"
			if !bytes.Equal(got, stored) {
				t.Errorf("PUT of value only %s = % X; want % X", edited, got, stored)
			}
		}
	}
}

func hexOf(s string) string { return hex.EncodeToString([]byte(s)) }

func TestDecodeEnvelopeValue(t *testing.T) {
	const user = "example/user"
	for _, tc := range []struct {
		name, typename, body string
		hex                  string // want, when err is nil
		err                  error
		msg                  string // the error's detail, when err is set
	}{
		{name: "value only", typename: Int, body: `{"value":43}`, hex: "0D 2B000000"},
		{name: "value as string", typename: Long, body: `{"value":"43"}`, hex: "09 2B00000000000000"},
		{name: "valueBase64 only", typename: Int, body: `{"valueBase64":"DSsAAAA="}`, hex: "0D 2B000000"},
		{name: "valueBase64 without padding", typename: Int, body: `{"valueBase64":"DSsAAAA"}`, hex: "0D 2B000000"},
		{name: "empty valueBase64 is zero bytes", typename: Int, body: `{"valueBase64":""}`, hex: ""},
		{name: "empty valueBase64 and value 0 agree", typename: Int, body: `{"value":0,"valueBase64":""}`, hex: ""},
		{name: "null valueBase64 is absent", typename: Int, body: `{"value":7,"valueBase64":null}`, hex: "0D 07000000"},
		{name: "keys match case-insensitively", typename: Int, body: `{"ValueBase64":"DSsAAAA="}`, hex: "0D 2B000000"},
		{name: "agree after decoding", typename: Double, body: `{"value":"3.50","valueBase64":"CQAAAAAAAAxA"}`, hex: "09 0000000000000C40"},
		{name: "user null", typename: user, body: `{"value":null}`, hex: hexOf("null")},
		{name: "user value as given", typename: user, body: `{"value": {"b":1, "a":[1,2]} }`, hex: hexOf(`{"b":1, "a":[1,2]}`)},
		{
			name: "user agree: whitespace, key order, escapes", typename: user,
			body: `{"value":{"a":"\u003c","b":[1, 2]},"valueBase64":"` + base64.StdEncoding.EncodeToString([]byte("{\"b\":[1,2],\"a\":\"<\"}\n")) + `"}`,
			hex:  hexOf("{\"b\":[1,2],\"a\":\"<\"}\n"),
		},

		{name: "neither", typename: Int, body: `{"typename":"io.statefun.types/int"}`, err: ErrEnvelope,
			msg: `the envelope has neither "value" nor "valueBase64"`},
		{name: "disagree", typename: Int, body: `{"value":43,"valueBase64":"DSoAAAA="}`, err: ErrEnvelope,
			msg: `"value" and "valueBase64" disagree: value is "43", valueBase64 holds 42; send only the one you edited`},
		{name: "user disagree", typename: user, body: `{"value":{"a":2},"valueBase64":"eyJhIjoxfQo="}`, err: ErrEnvelope,
			msg: `"value" and "valueBase64" disagree: value is "{\"a\":2}", valueBase64 holds "{\"a\":1}"; send only the one you edited`},
		{name: "user binary with value", typename: user, body: `{"value":1,"valueBase64":"CgNBZGE="}`, err: ErrEnvelope,
			msg: `"value" and "valueBase64" disagree: value is "1", valueBase64 holds 0A 03 41 64 61 (not JSON); send only the one you edited`},
		{name: "bad base64", typename: Int, body: `{"valueBase64":"DS*"}`, err: ErrEnvelope,
			msg: `"valueBase64" is not standard base64: illegal base64 data at input byte 2`},
		{name: "not an object", typename: Int, body: `[1]`, err: ErrEnvelope,
			msg: `the body is not a JSON envelope object: json: cannot unmarshal array into Go value of type types.envelopeKeys`},
		{name: "valueBase64 not a string", typename: Int, body: `{"valueBase64":42}`, err: ErrEnvelope},
		{name: "malformed bytes", typename: Int, body: `{"valueBase64":"CSoAAAAAAAAA"}`, err: ErrMalformed,
			msg: `io.statefun.types/int value is malformed: field 1 has wire type fixed64, want fixed32; these look like the bytes of io.statefun.types/long or io.statefun.types/double (bytes: 09 2A 00 00 00 00 00 00 00)`},
		{name: "invalid value", typename: Int, body: `{"value":"4x"}`, err: ErrInvalid,
			msg: `io.statefun.types/int wants a 32-bit integer, got "4x"`},
		{name: "invalid value beside valueBase64", typename: Int, body: `{"value":"4x","valueBase64":"DSoAAAA="}`, err: ErrInvalid},
		{name: "scalar null", typename: String, body: `{"value":null}`, err: ErrInvalid,
			msg: `io.statefun.types/string wants a JSON string, got "null"`},
	} {
		var env Envelope
		_ = json.Unmarshal([]byte(tc.body), &env) // may fail for the bad bodies; DecodeEnvelopeValue must say so
		got, err := DecodeEnvelopeValue(tc.typename, &env, []byte(tc.body))
		if tc.err == nil {
			if want := hx(t, tc.hex); err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s: DecodeEnvelopeValue(%s) = % X, %v; want % X", tc.name, tc.body, got, err, want)
			}
			continue
		}
		if !errors.Is(err, tc.err) {
			t.Errorf("%s: DecodeEnvelopeValue(%s) = % X, %v; want %v", tc.name, tc.body, got, err, tc.err)
			continue
		}
		var e *Error
		if tc.msg != "" && (!errors.As(err, &e) || e.Detail != tc.msg) {
			t.Errorf("%s: error\n  %v\nwant detail\n  %s", tc.name, err, tc.msg)
		}
	}
}

// TestDecodeEnvelopeValueWithoutBody: with raw nil, presence is read from env.
func TestDecodeEnvelopeValueWithoutBody(t *testing.T) {
	got, err := DecodeEnvelopeValue(Int, &Envelope{ValueBase64: "DSoAAAA="}, nil)
	if err != nil || !bytes.Equal(got, hx(t, "0D 2A000000")) {
		t.Errorf("valueBase64 from env = % X, %v", got, err)
	}
	got, err = DecodeEnvelopeValue(Int, &Envelope{Value: json.RawMessage("7")}, nil)
	if err != nil || !bytes.Equal(got, hx(t, "0D 07000000")) {
		t.Errorf("value from env = % X, %v", got, err)
	}
	if _, err := DecodeEnvelopeValue(Int, &Envelope{}, nil); !errors.Is(err, ErrEnvelope) {
		t.Errorf("empty env: %v, want ErrEnvelope", err)
	}
	if _, err := DecodeEnvelopeValue(Int, nil, nil); !errors.Is(err, ErrEnvelope) {
		t.Errorf("nil env: %v, want ErrEnvelope", err)
	}
}
