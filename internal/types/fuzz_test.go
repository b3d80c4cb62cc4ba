package types

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/statefun-go/statefun/internal/protocol"
)

// fuzzTypenames are the targets a fuzz input picks from by index.
var fuzzTypenames = []string{Bool, Int, Long, Float, Double, String, "example/user"}

func fuzzTypename(sel uint8) string { return fuzzTypenames[int(sel)%len(fuzzTypenames)] }

// checkError fails unless err is an *Error of one of the package's kinds.
func checkError(t *testing.T, err error) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || e.Detail == "" {
		t.Fatalf("error %#v is not an *Error with a detail", err)
	}
	switch e.Kind {
	case ErrNoText, ErrMalformed, ErrInvalid, ErrEnvelope:
	default:
		t.Fatalf("error %v has kind %v", err, e.Kind)
	}
}

// protoAgrees checks that the protobuf runtime reads valid bytes as decode
// does and re-encodes them to the same bytes.
func protoAgrees(t *testing.T, typename string, b []byte) {
	t.Helper()
	k := kindOf(typename)
	v, err := decode(k, b)
	if err != nil {
		t.Fatalf("decode(%s, % X): %v", typename, b, err)
	}
	var m proto.Message
	var same func() bool
	switch k {
	case kindBool:
		w := &protocol.BooleanWrapper{}
		m, same = w, func() bool { return w.Value == v.b }
	case kindInt:
		w := &protocol.IntWrapper{}
		m, same = w, func() bool { return int64(w.Value) == v.i }
	case kindLong:
		w := &protocol.LongWrapper{}
		m, same = w, func() bool { return w.Value == v.i }
	case kindFloat:
		w := &protocol.FloatWrapper{}
		m, same = w, func() bool { return sameScalar(scalar{k: k, f32: w.Value}, v) }
	case kindDouble:
		w := &protocol.DoubleWrapper{}
		m, same = w, func() bool { return sameScalar(scalar{k: k, f64: w.Value}, v) }
	case kindString:
		w := &protocol.StringWrapper{}
		m, same = w, func() bool { return w.Value == v.s }
	}
	if err := proto.Unmarshal(b, m); err != nil {
		t.Fatalf("proto.Unmarshal(%s, % X): %v, but Validate accepted it", typename, b, err)
	}
	if !same() {
		t.Fatalf("proto.Unmarshal(%s, % X) = %v, decode %+v", typename, b, m, v)
	}
	again, err := proto.Marshal(m)
	if err != nil || !bytes.Equal(again, b) {
		t.Fatalf("proto.Marshal(proto.Unmarshal(%s, % X)) = % X, %v", typename, b, again, err)
	}
}

func FuzzParseText(f *testing.F) {
	for i := range fuzzTypenames {
		for _, s := range []string{"", "0", "-0", "42", " 7\n", "true", "false", "3.5", "NaN", "-Inf",
			"1e-50", "1e39", "2147483648", "9223372036854775807", "hé", "\xff", `{"a":1}` + "\n", "null", "0x1p3"} {
			f.Add(uint8(i), s)
		}
	}
	for _, tc := range canonical {
		f.Add(uint8(kindOf(tc.typename)-1), tc.text)
	}
	f.Fuzz(func(t *testing.T, sel uint8, text string) {
		tn := fuzzTypename(sel)
		out, err := ParseText(tn, text)
		if err != nil {
			checkError(t, err)
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrNoText) {
				t.Fatalf("ParseText(%s, %q): %v", tn, text, err)
			}
			return
		}
		if err := Validate(tn, out); err != nil {
			t.Fatalf("Validate(ParseText(%s, %q) = % X): %v", tn, text, out, err)
		}
		back, err := Text(tn, out)
		if err != nil {
			t.Fatalf("Text(ParseText(%s, %q) = % X): %v", tn, text, out, err)
		}
		if !IsScalar(tn) {
			if string(out) != text || back != text {
				t.Fatalf("user type %q: stored %q, text %q", text, out, back)
			}
			return
		}
		protoAgrees(t, tn, out)
		again, err := ParseText(tn, back)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("ParseText(%s, Text(% X) = %q) = % X, %v", tn, out, back, again, err)
		}
		j, ok, err := JSONValue(tn, out)
		if err != nil || !ok || !json.Valid(j) {
			t.Fatalf("JSONValue(%s, % X) = %s, %v, %v", tn, out, j, ok, err)
		}
		fromJSON, err := FromJSONValue(tn, j)
		if err != nil || !bytes.Equal(fromJSON, out) {
			t.Fatalf("FromJSONValue(%s, %s) = % X, %v; want % X", tn, j, fromJSON, err, out)
		}
	})
}

func FuzzText(f *testing.F) {
	for i := range fuzzTypenames {
		for _, h := range []string{"", "0D 2A000000", "09 2A00000000000000", "08 01", "08 02", "0A 03 68C3A9",
			"0D 0100807F", "09 000000000000F8FF", "0D 00000000", "0D 2A00", "7B7D0A", "0A 8100 61", "15 2A000000"} {
			f.Add(uint8(i), hx(f, h))
		}
	}
	f.Fuzz(func(t *testing.T, sel uint8, b []byte) {
		tn := fuzzTypename(sel)
		text, err := Text(tn, b)
		verr := Validate(tn, b)
		j, ok, jerr := JSONValue(tn, b)
		if err != nil {
			checkError(t, err)
			if IsScalar(tn) != (verr != nil) || IsScalar(tn) != errors.Is(err, ErrMalformed) {
				t.Fatalf("%s % X: Text error %v, Validate %v", tn, b, err, verr)
			}
			if ok || (jerr != nil) != IsScalar(tn) {
				t.Fatalf("%s % X: Text error %v, but JSONValue = %s, %v, %v", tn, b, err, j, ok, jerr)
			}
			return
		}
		if verr != nil || jerr != nil || !ok || !json.Valid(j) {
			t.Fatalf("%s % X: Text ok, Validate %v, JSONValue %s, %v, %v", tn, b, verr, j, ok, jerr)
		}
		if !IsScalar(tn) {
			if text != string(b) {
				t.Fatalf("user type % X: text %q", b, text)
			}
			return
		}
		protoAgrees(t, tn, b)
		out, err := ParseText(tn, text)
		if err != nil {
			t.Fatalf("ParseText(%s, Text(% X) = %q): %v", tn, b, text, err)
		}
		v, _ := decode(kindOf(tn), b)
		if !bytes.Equal(out, b) && !v.isNaN() {
			t.Fatalf("ParseText(%s, Text(% X) = %q) = % X", tn, b, text, out)
		}
		if again, _ := Text(tn, out); again != text {
			t.Fatalf("Text(ParseText(%s, %q)) = %q", tn, text, again)
		}
	})
}

func FuzzDecodeEnvelopeValue(f *testing.F) {
	for i := range fuzzTypenames {
		for _, s := range []string{`{"value":43}`, `{"valueBase64":"DSsAAAA="}`, `{"value":0,"valueBase64":""}`,
			`{"value":"NaN","valueBase64":"DQEAgH8="}`, `{"value":{"a":1},"valueBase64":"eyJhIjoxfQo="}`,
			`{"value":null}`, `{}`, `[]`, `{"valueBase64":"DS*"}`, `{"value":"hé","valueBase64":null}`} {
			f.Add(uint8(i), []byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, sel uint8, body []byte) {
		tn := fuzzTypename(sel)
		var env Envelope
		_ = json.Unmarshal(body, &env)
		for _, e := range []*Envelope{&env, nil} {
			out, err := DecodeEnvelopeValue(tn, e, body)
			if err != nil {
				checkError(t, err)
				continue
			}
			if err := Validate(tn, out); err != nil {
				t.Fatalf("DecodeEnvelopeValue(%s, %q) = % X, which Validate rejects: %v", tn, body, out, err)
			}
			if IsScalar(tn) {
				protoAgrees(t, tn, out)
			}
		}
	})
}
