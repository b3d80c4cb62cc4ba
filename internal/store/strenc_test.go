package store

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestStringEncodingExamples(t *testing.T) {
	for _, tc := range []struct {
		s    string
		want string // hex
	}{
		{"", "00 01"},
		{"ab", "61 62 00 01"},
		{"a/b", "61 2f 62 00 01"},
		{"\x00", "00 ff 00 01"},
		{"a\x00b", "61 00 ff 62 00 01"},
		{"\x00\x00", "00 ff 00 ff 00 01"},
		{"\xff", "ff 00 01"},
		{"\x01", "01 00 01"},
		{"🙂", "f0 9f 99 82 00 01"},
	} {
		got := appendString(nil, tc.s)
		if hexSpaced(got) != tc.want {
			t.Errorf("str(%q) = %s, want %s", tc.s, hexSpaced(got), tc.want)
		}
		dec, rest, err := decodeString(append(got, 0xAB))
		if err != nil || dec != tc.s || !bytes.Equal(rest, []byte{0xAB}) {
			t.Errorf("decode(str(%q)) = %q, %x, %v", tc.s, dec, rest, err)
		}
	}
}

func TestDecodeStringRejectsMalformed(t *testing.T) {
	for _, b := range []string{"", "abc", "a\x00", "a\x00\x02", "\x00\x00", "a\x00\xffb", "a\x00\xfe\x00\x01"} {
		if s, _, err := decodeString([]byte(b)); err == nil {
			t.Errorf("decodeString(%q) = %q, want an error", b, s)
		}
	}
}

// interesting are the bytes around the escape: every string property test
// draws from them, so that 0x00, 0x01 and 0xff meet each other often.
var interesting = []string{"\x00", "\x01", "\x02", "/", "a", "b", "\xfe", "\xff", "🙂", "é"}

func randString(rng *rand.Rand) string {
	var sb strings.Builder
	for n := rng.IntN(7); n > 0; n-- {
		sb.WriteString(interesting[rng.IntN(len(interesting))])
	}
	return sb.String()
}

func sign(v int) int {
	switch {
	case v < 0:
		return -1
	case v > 0:
		return 1
	}
	return 0
}

// checkStringPair checks the three properties of the encoding that the
// store relies on for one pair of strings.
func checkStringPair(t *testing.T, a, b string) {
	t.Helper()
	ea, eb := appendString(nil, a), appendString(nil, b)
	if got, want := sign(bytes.Compare(ea, eb)), sign(strings.Compare(a, b)); got != want {
		t.Fatalf("order: compare(str(%q), str(%q)) = %d, strings.Compare = %d", a, b, got, want)
	}
	if a != b && (bytes.HasPrefix(ea, eb) || bytes.HasPrefix(eb, ea)) {
		t.Fatalf("not self-delimiting: str(%q) = %x, str(%q) = %x", a, ea, b, eb)
	}
	if got, want := bytes.HasPrefix(eb, appendEscaped(nil, a)), strings.HasPrefix(b, a); got != want {
		t.Fatalf("prefix: esc(%q) prefix of str(%q) = %v, strings.HasPrefix = %v", a, b, got, want)
	}
	// Concatenations decode back into their parts.
	cat := append(append([]byte(nil), ea...), eb...)
	da, rest, err := decodeString(cat)
	if err != nil || da != a {
		t.Fatalf("decode first of %x = %q, %v; want %q", cat, da, err, a)
	}
	db, rest, err := decodeString(rest)
	if err != nil || db != b || len(rest) != 0 {
		t.Fatalf("decode second of %x = %q, %x, %v; want %q", cat, db, rest, err, b)
	}
	if len(ea) != stringLen(a) {
		t.Fatalf("stringLen(%q) = %d, want %d", a, stringLen(a), len(ea))
	}
}

func TestStringEncodingProperties(t *testing.T) {
	rng := testRand(t)
	for range 50000 {
		a := randString(rng)
		b := randString(rng)
		if rng.IntN(4) == 0 { // often make one a prefix of the other
			b = a + b
		}
		checkStringPair(t, a, b)
	}
}

func FuzzStringEncoding(f *testing.F) {
	for _, s := range []string{"", "a", "a/b", "\x00", "a\x00", "\x00\x01", "\xff\x00", "🙂"} {
		for _, u := range []string{"", "a", "a\x00", "\x01", "\xff"} {
			f.Add(s, u)
			f.Add(s, s+u)
		}
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		checkStringPair(t, a, b)
		// Any bytes either decode to a string whose encoding they start
		// with, or are rejected.
		if s, rest, err := decodeString([]byte(a)); err == nil {
			if enc := appendString(nil, s); !bytes.Equal(append(enc, rest...), []byte(a)) {
				t.Fatalf("decode(%x) = %q + %x, which does not re-encode", a, s, rest)
			}
		}
	})
}

func TestPrefixSuccessor(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"\x01", "\x02"},
		{"a\x00\x01", "a\x00\x02"},
		{"a\xff", "b"},
		{"a\xff\xff", "b"},
		{"\xff\xff", ""},
		{"", ""},
	} {
		got := prefixSuccessor([]byte(tc.in))
		if string(got) != tc.want || (tc.want == "" && got != nil) {
			t.Errorf("prefixSuccessor(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
