package types

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// TestParseTextLenient covers text that is accepted but is not how Text
// renders the value.
func TestParseTextLenient(t *testing.T) {
	for _, tc := range []struct {
		typename, in, hex, text string
	}{
		{Bool, " true\n", "08 01", "true"},
		{Int, "42\n", "0D 2A000000", "42"},
		{Int, "\t+42 ", "0D 2A000000", "42"},
		{Int, "-0", "", "0"},
		{Int, "007", "0D 07000000", "7"},
		{Long, "42\r\n", "09 2A00000000000000", "42"},
		{Float, "3.50", "0D 00006040", "3.5"},
		{Float, ".5", "0D 0000003F", "0.5"},
		{Float, "1e-45", "0D 01000000", "1e-45"}, // 1.4e-45, the smallest denormal
		{Float, "8e-46", "0D 01000000", "1e-45"}, // rounds up to it, not to 0
		{Float, "inf", "0D 0000807F", "+Inf"},
		{Float, "-Infinity", "0D 000080FF", "-Inf"},
		{Float, "nan", "0D 0000C07F", "NaN"},
		{Float, "0.0", "", "0"},
		{Float, "0e10", "", "0"},
		{Double, "1E3", "09 0000000000408F40", "1000"},
		{Double, " 2.5e-1 ", "09 000000000000D03F", "0.25"},
		{String, "", "", ""},
	} {
		got, err := ParseText(tc.typename, tc.in)
		if want := hx(t, tc.hex); err != nil || !bytes.Equal(got, want) {
			t.Errorf("ParseText(%s, %q) = % X, %v; want % X", tc.typename, tc.in, got, err, want)
			continue
		}
		if text, err := Text(tc.typename, got); err != nil || text != tc.text {
			t.Errorf("Text(ParseText(%s, %q)) = %q, %v; want %q", tc.typename, tc.in, text, err, tc.text)
		}
	}
}

// TestParseTextErrors checks each error's kind and its exact message.
func TestParseTextErrors(t *testing.T) {
	long := strings.Repeat("9", 100)
	for _, tc := range []struct {
		typename, in string
		kind         error
		msg          string
	}{
		{Int, "4x", ErrInvalid, `io.statefun.types/int wants a 32-bit integer, got "4x"`},
		{Int, "", ErrInvalid, `io.statefun.types/int wants a 32-bit integer, got ""`},
		{Int, "4.0", ErrInvalid, `io.statefun.types/int wants a 32-bit integer, got "4.0"`},
		{Int, "1_000", ErrInvalid, `io.statefun.types/int wants a 32-bit integer, got "1_000"`},
		{Int, "0x10", ErrInvalid, `io.statefun.types/int wants a 32-bit integer, got "0x10"`},
		{Int, "2147483648", ErrInvalid, `io.statefun.types/int wants a 32-bit integer (-2147483648 to 2147483647), got "2147483648": out of range`},
		{Int, "-2147483649", ErrInvalid, `io.statefun.types/int wants a 32-bit integer (-2147483648 to 2147483647), got "-2147483649": out of range`},
		{Long, "9223372036854775808", ErrInvalid, `io.statefun.types/long wants a 64-bit integer (-9223372036854775808 to 9223372036854775807), got "9223372036854775808": out of range`},
		{Long, "forty-two", ErrInvalid, `io.statefun.types/long wants a 64-bit integer, got "forty-two"`},
		{Long, long, ErrInvalid, `io.statefun.types/long wants a 64-bit integer (-9223372036854775808 to 9223372036854775807), got "` + long[:64] + `"… (100 bytes): out of range`},
		{Bool, "yes", ErrInvalid, `io.statefun.types/bool wants true or false, got "yes"`},
		{Bool, "True", ErrInvalid, `io.statefun.types/bool wants true or false, got "True"`},
		{Bool, "1", ErrInvalid, `io.statefun.types/bool wants true or false, got "1"`},
		{Float, "3,5", ErrInvalid, `io.statefun.types/float wants a 32-bit float (a decimal number, NaN, +Inf or -Inf), got "3,5"`},
		{Float, "0x1p-2", ErrInvalid, `io.statefun.types/float wants a 32-bit float (a decimal number, NaN, +Inf or -Inf), got "0x1p-2"`},
		{Float, "1_0", ErrInvalid, `io.statefun.types/float wants a 32-bit float (a decimal number, NaN, +Inf or -Inf), got "1_0"`},
		{Float, "-NaN", ErrInvalid, `io.statefun.types/float wants a 32-bit float (a decimal number, NaN, +Inf or -Inf), got "-NaN"`},
		{Float, "1e39", ErrInvalid, `io.statefun.types/float wants a 32-bit float, got "1e39": out of range (largest magnitude 3.4028235e+38)`},
		{Float, "1e-50", ErrInvalid, `io.statefun.types/float wants a 32-bit float, got "1e-50": it rounds to 0 (smallest magnitude 1e-45)`},
		{Double, "1e309", ErrInvalid, `io.statefun.types/double wants a 64-bit float, got "1e309": out of range (largest magnitude 1.7976931348623157e+308)`},
		{Double, "-1e-400", ErrInvalid, `io.statefun.types/double wants a 64-bit float, got "-1e-400": it rounds to 0 (smallest magnitude 5e-324)`},
		{String, "\xff", ErrInvalid, `io.statefun.types/string wants UTF-8 text, got "\xff"`},
		{"example/user", "not json", ErrNoText, `example/user has no text form for this body: the text is not UTF-8 JSON; send the exact bytes as application/octet-stream`},
		{"example/user", "", ErrNoText, `example/user has no text form for this body: the text is not UTF-8 JSON; send the exact bytes as application/octet-stream`},
		{"example/user", "\"\xff\"", ErrNoText, `example/user has no text form for this body: the text is not UTF-8 JSON; send the exact bytes as application/octet-stream`},
	} {
		got, err := ParseText(tc.typename, tc.in)
		if !errors.Is(err, tc.kind) {
			t.Errorf("ParseText(%s, %q) = % X, %v; want %v", tc.typename, tc.in, got, err, tc.kind)
			continue
		}
		if err.Error() != "types: "+tc.msg {
			t.Errorf("ParseText(%s, %q) error\n  %s\nwant\n  types: %s", tc.typename, tc.in, err, tc.msg)
		}
		var e *Error
		if !errors.As(err, &e) || e.Typename != tc.typename || e.Detail != tc.msg {
			t.Errorf("ParseText(%s, %q): %#v", tc.typename, tc.in, err)
		}
	}
}

// TestUserTypeText: a user type has a text form exactly when its bytes are
// UTF-8 JSON, and that text is the bytes unchanged, so that text/plain GET
// then PUT stores the same bytes.
func TestUserTypeText(t *testing.T) {
	const tn = "example/user"
	for _, b := range []string{
		"{\"name\":\"Ada\",\"visits\":3}\n", // the Go SDK's MakeJsonType: Encoder.Encode ends with "\n"
		`{"name":"Ada","visits":3}`,         // JS JSON.stringify, Python json.dumps
		"[1, 2,\n 3]",
		`"just a string"`,
		"null\n",
		"42",
		`{"é":"😀"}`,
	} {
		text, err := Text(tn, []byte(b))
		if err != nil || text != b {
			t.Errorf("Text(%q) = %q, %v; want it unchanged", b, text, err)
		}
		back, err := ParseText(tn, text)
		if err != nil || string(back) != b {
			t.Errorf("ParseText(Text(%q)) = %q, %v", b, back, err)
		}
	}
}

func TestBinaryUserTypeHasNoText(t *testing.T) {
	const tn = "type.googleapis.com/example.Greeting"
	for _, b := range [][]byte{
		nil,                         // a protobuf message with all fields at their defaults
		hx(t, "0A 03 416461 10 03"), // name: "Ada", visits: 3
		{0xFF, 0xFE},
		[]byte("\"\xff\""), // JSON syntax but not UTF-8
	} {
		text, err := Text(tn, b)
		if !errors.Is(err, ErrNoText) {
			t.Errorf("Text(% X) = %q, %v; want ErrNoText", b, text, err)
			continue
		}
		if !strings.Contains(err.Error(), tn+" value has no text form") {
			t.Errorf("Text(% X) error %q does not name the typename", b, err)
		}
		if _, ok, err := JSONValue(tn, b); ok || err != nil {
			t.Errorf("JSONValue(% X) = ok %v, %v; want no JSON form", b, ok, err)
		}
	}
}

func TestQuoteCutsAtRuneBoundary(t *testing.T) {
	s := strings.Repeat("a", 63) + "é" + "tail" // é straddles byte 64
	got := quote(s)
	want := `"` + strings.Repeat("a", 63) + `"… (69 bytes)`
	if got != want {
		t.Errorf("quote = %s, want %s", got, want)
	}
}
