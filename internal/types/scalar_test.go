package types

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

// hx parses annotated hex: "0D 2A00 0000" → bytes; "" → empty.
func hx(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

// canonical is the golden table: every scalar's text, exact bytes and JSON.
var canonical = []struct {
	typename, text, hex, json string
}{
	{Bool, "false", "", "false"},
	{Bool, "true", "08 01", "true"},

	{Int, "0", "", "0"},
	{Int, "42", "0D 2A000000", "42"},
	{Int, "-1", "0D FFFFFFFF", "-1"},
	{Int, "2147483647", "0D FFFFFF7F", "2147483647"},
	{Int, "-2147483648", "0D 00000080", "-2147483648"},

	{Long, "0", "", "0"},
	{Long, "42", "09 2A00000000000000", "42"},
	{Long, "-1", "09 FFFFFFFFFFFFFFFF", "-1"},
	{Long, "9223372036854775807", "09 FFFFFFFFFFFFFF7F", "9223372036854775807"},
	{Long, "-9223372036854775808", "09 0000000000000080", "-9223372036854775808"},
	{Long, "4294967296", "09 0000000001000000", "4294967296"},

	{Float, "0", "", "0"},
	{Float, "-0", "0D 00000080", "-0"}, // -0 is not the zero value: its bits are not 0
	{Float, "3.5", "0D 00006040", "3.5"},
	{Float, "0.1", "0D CDCCCC3D", "0.1"},
	{Float, "16777216", "0D 0000804B", "16777216"},
	{Float, "1e-45", "0D 01000000", "1e-45"},
	{Float, "3.4028235e+38", "0D FFFF7F7F", "3.4028235e+38"},
	{Float, "NaN", "0D 0000C07F", `"NaN"`},
	{Float, "+Inf", "0D 0000807F", `"+Inf"`},
	{Float, "-Inf", "0D 000080FF", `"-Inf"`},

	{Double, "0", "", "0"},
	{Double, "-0", "09 0000000000000080", "-0"},
	{Double, "3.5", "09 0000000000000C40", "3.5"},
	{Double, "0.1", "09 9A9999999999B93F", "0.1"},
	{Double, "100000000", "09 0000000084D79741", "100000000"},
	{Double, "1e+21", "09 50EFE2D6E41A4B44", "1e+21"},
	{Double, "1e-7", "09 48AFBC9AF2D77A3E", "1e-7"},
	{Double, "1.7976931348623157e+308", "09 FFFFFFFFFFFFEF7F", "1.7976931348623157e+308"},
	{Double, "NaN", "09 010000000000F87F", `"NaN"`},
	{Double, "+Inf", "09 000000000000F07F", `"+Inf"`},
	{Double, "-Inf", "09 000000000000F0FF", `"-Inf"`},

	{String, "", "", `""`},
	{String, "hé", "0A 03 68C3A9", `"hé"`},
	{String, " x\n", "0A 03 20780A", `" x\n"`},
	{String, "<a&b>", "0A 05 3C6126623E", `"<a&b>"`},
	{String, `"q"`, "0A 03 227122", `"\"q\""`},
	{String, "😀", "0A 04 F09F9880", `"😀"`},
	{String, strings.Repeat("a", 200), "0A C801" + strings.Repeat("61", 200), `"` + strings.Repeat("a", 200) + `"`},
}

func TestCanonical(t *testing.T) {
	for _, tc := range canonical {
		want := hx(t, tc.hex)
		name := tc.typename + " " + quote(tc.text)

		got, err := ParseText(tc.typename, tc.text)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("ParseText(%s) = % X, %v; want % X", name, got, err, want)
		}
		if err := Validate(tc.typename, want); err != nil {
			t.Errorf("Validate(%s): %v", name, err)
		}
		text, err := Text(tc.typename, want)
		if err != nil || text != tc.text {
			t.Errorf("Text(%s) = %q, %v; want %q", name, text, err, tc.text)
		}
		j, ok, err := JSONValue(tc.typename, want)
		if err != nil || !ok || string(j) != tc.json {
			t.Errorf("JSONValue(%s) = %s, %v, %v; want %s", name, j, ok, err, tc.json)
		}
		back, err := FromJSONValue(tc.typename, []byte(tc.json))
		if err != nil || !bytes.Equal(back, want) {
			t.Errorf("FromJSONValue(%s, %s) = % X, %v; want % X", tc.typename, tc.json, back, err, want)
		}
	}
}

func TestIsScalar(t *testing.T) {
	for _, tn := range []string{Bool, Int, Long, Float, Double, String} {
		if !IsScalar(tn) {
			t.Errorf("IsScalar(%q) = false", tn)
		}
	}
	for _, tn := range []string{"", "io.statefun.types/bytes", "io.statefun.types/Int", "example/user",
		"type.googleapis.com/google.protobuf.Int32Value"} {
		if IsScalar(tn) {
			t.Errorf("IsScalar(%q) = true", tn)
		}
	}
}

// TestMalformed covers bytes that are not the canonical encoding of the type
// they claim, each with the reason the detail gives.
func TestMalformed(t *testing.T) {
	for _, tc := range []struct {
		typename, hex, why string
	}{
		{Int, "09 2A00000000000000", "field 1 has wire type fixed64, want fixed32; these look like the bytes of io.statefun.types/long or io.statefun.types/double"},
		{Long, "0D 2A000000", "field 1 has wire type fixed32, want fixed64; these look like the bytes of io.statefun.types/int or io.statefun.types/float"},
		{Int, "08 2A", "field 1 has wire type varint, want fixed32; these look like the bytes of io.statefun.types/bool"},
		{Bool, "0A 01 31", "field 1 has wire type length-delimited, want varint; these look like the bytes of io.statefun.types/string"},
		{Int, "0D 2A00", "truncated: 4 bytes after the tag wanted, 2 present"},
		{Long, "09 2A", "truncated: 8 bytes after the tag wanted, 1 present"},
		{Int, "0D 2A000000 0D 2B000000", "5 bytes after field 1"},
		{Int, "0D 2A000000 00", "1 bytes after field 1"},
		{Int, "15 2A000000", "field 2, but the wrapper has only field 1"},
		{Int, "0D 00000000", "an explicit zero value; the SDKs write 0 as no bytes"},
		{Double, "09 0000000000000000", "an explicit zero value; the SDKs write 0 as no bytes"},
		{Bool, "08 00", "an explicit zero value; the SDKs write false as no bytes"},
		{Bool, "08 02", "a bool is 0 or 1, got 2"},
		{Bool, "08 81 00", "not the canonical encoding; the SDKs write true as 08 01"},
		{Bool, "08", "truncated varint"},
		{Bool, "80", "no field tag at the start"},
		{Bool, "00", "no field tag at the start"},
		{String, "0A 00", "an explicit zero value; the SDKs write  as no bytes"},
		{String, "0A 05 6869", "truncated: the length prefix is longer than the bytes"},
		{String, "0A 02 C328", "the string is not valid UTF-8"},
		{String, "0A 8100 61", "not the canonical encoding; the SDKs write a as 0A 01 61"},
		{String, "7B 7D", "field 15, but the wrapper has only field 1"}, // "{}", JSON sent as a string's bytes
	} {
		b := hx(t, tc.hex)
		err := Validate(tc.typename, b)
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("Validate(%s, % X) = %v, want ErrMalformed", tc.typename, b, err)
			continue
		}
		var e *Error
		if !errors.As(err, &e) || e.Typename != tc.typename {
			t.Errorf("Validate(%s, % X): %#v is not an *Error for the typename", tc.typename, b, err)
		}
		want := tc.typename + " value is malformed: " + tc.why
		if !strings.HasPrefix(e.Detail, want) || !strings.HasSuffix(e.Detail, "(bytes: "+hexBytes(b)+")") {
			t.Errorf("Validate(%s, % X) detail\n  %s\nwant prefix\n  %s", tc.typename, b, e.Detail, want)
		}
		if !strings.HasPrefix(err.Error(), "types: ") {
			t.Errorf("error %q lacks the package prefix", err)
		}
		if _, err := Text(tc.typename, b); !errors.Is(err, ErrMalformed) {
			t.Errorf("Text(%s, % X) = %v, want ErrMalformed", tc.typename, b, err)
		}
		if _, _, err := JSONValue(tc.typename, b); !errors.Is(err, ErrMalformed) {
			t.Errorf("JSONValue(%s, % X) = %v, want ErrMalformed", tc.typename, b, err)
		}
	}
}

func TestValidateUserTypes(t *testing.T) {
	for _, b := range [][]byte{nil, {0xFF}, []byte("{}\n"), hx(t, "0D 2A000000")} {
		if err := Validate("example/user", b); err != nil {
			t.Errorf("Validate(user, % X) = %v", b, err)
		}
	}
}

// TestNaNPayload: a NaN's bits survive decode, so any NaN an SDK wrote is
// valid, and its text is "NaN".
func TestNaNPayload(t *testing.T) {
	for _, tc := range []struct{ typename, hex string }{
		{Float, "0D 0100807F"}, // signaling NaN
		{Float, "0D 0000C0FF"}, // negative quiet NaN
		{Double, "09 0100000000 00F07F"},
		{Double, "09 000000000000F8FF"},
	} {
		b := hx(t, tc.hex)
		if err := Validate(tc.typename, b); err != nil {
			t.Errorf("Validate(%s, % X) = %v", tc.typename, b, err)
		}
		if text, err := Text(tc.typename, b); err != nil || text != "NaN" {
			t.Errorf("Text(%s, % X) = %q, %v", tc.typename, b, text, err)
		}
		if j, _, err := JSONValue(tc.typename, b); err != nil || string(j) != `"NaN"` {
			t.Errorf("JSONValue(%s, % X) = %s, %v", tc.typename, b, j, err)
		}
	}
}

func TestHexBytesCut(t *testing.T) {
	got := hexBytes(bytes.Repeat([]byte{0xAB}, 100))
	if !strings.HasSuffix(got, "AB … (100 bytes)") || strings.Count(got, "AB") != 32 {
		t.Errorf("hexBytes(100 bytes) = %q", got)
	}
	if got := hexBytes(nil); got != "no bytes" {
		t.Errorf("hexBytes(nil) = %q", got)
	}
}
