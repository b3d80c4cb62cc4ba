package idempotency

import (
	"bytes"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	long := strings.Repeat("k", MaxKeyBytes)
	for _, c := range []struct {
		lines []string
		key   string
		ok    bool
		err   string // a fragment of the error; "" for none
	}{
		{nil, "", false, ""},
		{[]string{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`}, "8e03978e-40d5-43e8-bc93-6894a57f9324", true, ""},
		{[]string{`8e03978e-40d5-43e8-bc93-6894a57f9324`}, "8e03978e-40d5-43e8-bc93-6894a57f9324", true, ""},
		{[]string{` "a b" `}, "a b", true, ""},
		{[]string{`"a\"b\\c"`}, `a"b\c`, true, ""},
		{[]string{long}, long, true, ""},
		{[]string{long + "k"}, "", false, "over 255"},
		{[]string{`""`}, "", false, "empty key"},
		{[]string{``}, "", false, "empty key"},
		{[]string{"a", "b"}, "", false, "given 2 times"},
		{[]string{`"abc`}, "", false, "no closing quote"},
		{[]string{`"a"b`}, "", false, "after the closing quote"},
		{[]string{`"a\nb"`}, "", false, "backslash"},
		{[]string{"\"a\x01b\""}, "", false, "0x01"},
		{[]string{"a b"}, "", false, "not visible ASCII"},
		{[]string{"é"}, "", false, "not visible ASCII"},
		{[]string{"\"é\""}, "", false, "not printable ASCII"},
	} {
		key, ok, err := Parse(c.lines)
		if key != c.key || ok != c.ok || (err == nil) != (c.err == "") {
			t.Errorf("Parse(%q) = %q %v %v; want %q %v, error %q", c.lines, key, ok, err, c.key, c.ok, c.err)
			continue
		}
		if err != nil && (!strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), Header)) {
			t.Errorf("Parse(%q): error %q should name %s and say %q", c.lines, err, Header, c.err)
		}
	}
}

func TestFingerprintTellsRequestsApart(t *testing.T) {
	base := Fingerprint("PUT", "/a/b/c", "application/vnd.x/y", []byte("body"))
	if !bytes.Equal(base, Fingerprint("PUT", "/a/b/c", "application/vnd.x/y", []byte("body"))) {
		t.Fatal("the same request gives two fingerprints")
	}
	for _, other := range [][]byte{
		Fingerprint("POST", "/a/b/c", "application/vnd.x/y", []byte("body")),
		Fingerprint("PUT", "/a/b/d", "application/vnd.x/y", []byte("body")),
		Fingerprint("PUT", "/a/b/c", "application/vnd.x/z", []byte("body")),
		Fingerprint("PUT", "/a/b/c", "application/vnd.x/y", []byte("bodY")),
		// Moving bytes between fields changes the fingerprint.
		Fingerprint("PUT", "/a/b/c", "application/vnd.x/yb", []byte("ody")),
	} {
		if bytes.Equal(base, other) {
			t.Fatal("two different requests share a fingerprint")
		}
	}
}

// FuzzParse: any header value is either refused with an error naming the
// header, or gives a key of 1 to MaxKeyBytes printable ASCII bytes — one
// the store can hold and an error message can quote.
func FuzzParse(f *testing.F) {
	for _, s := range []string{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`, "abc", `"a\"b"`, `"a\\`, "\"\x00\"", "é", "", `"`, ` "x" `} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		key, ok, err := Parse([]string{v})
		if err != nil {
			if ok || key != "" || !strings.Contains(err.Error(), Header) {
				t.Fatalf("Parse(%q) = %q %v %v", v, key, ok, err)
			}
			return
		}
		if !ok || key == "" || len(key) > MaxKeyBytes {
			t.Fatalf("Parse(%q) = %q %v", v, key, ok)
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x20 || key[i] > 0x7e {
				t.Fatalf("Parse(%q) = %q: byte 0x%02x", v, key, key[i])
			}
		}
	})
}
