package address

import (
	"errors"
	"strings"
	"testing"
)

func TestParseTypeName(t *testing.T) {
	for _, tc := range []struct {
		in      string
		ok, lax bool
		ns, n   string
	}{
		{"example/greeter", true, true, "example", "greeter"},
		{"io.statefun.types/int", true, true, "io.statefun.types", "int"},
		{"type.googleapis.com/a/b.C", false, true, "type.googleapis.com/a", "b.C"},
		{"noslash", false, false, "", ""},
		{"/x", false, false, "", ""},
		{"x/", false, false, "", ""},
		{"", false, false, "", ""},
	} {
		got, err := ParseTypeName(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("ParseTypeName(%q) err = %v, want ok=%v", tc.in, err, tc.ok)
		}
		if tc.ok && (got.Namespace != tc.ns || got.Name != tc.n) {
			t.Errorf("ParseTypeName(%q) = %+v", tc.in, got)
		}
		lax, err := ParseTypeNameLax(tc.in)
		if (err == nil) != tc.lax {
			t.Errorf("ParseTypeNameLax(%q) err = %v, want ok=%v", tc.in, err, tc.lax)
		}
		if tc.lax && (lax.Namespace != tc.ns || lax.Name != tc.n) {
			t.Errorf("ParseTypeNameLax(%q) = %+v", tc.in, lax)
		}
	}
}

// The partition function is part of the storage format; these values must
// never change.
func TestPartitionIsStable(t *testing.T) {
	for id, want := range map[string]int{"": 5, "alice": 7, "bob": 4, "0": 15, "héllo/wörld": 11} {
		if got := Partition(id, 16); got != want {
			t.Errorf("Partition(%q, 16) = %d, want %d (the hash must never change)", id, got, want)
		}
	}
}

func TestValidators(t *testing.T) {
	long := strings.Repeat("x", MaxSegmentBytes)
	ok := TypeName{Namespace: "example", Name: "greeter"}
	for _, tc := range []struct {
		name  string
		err   error
		field string // in the message
	}{
		{"id at the limit", CheckID(long), ""},
		{"id with '/' and NUL", CheckID("a/b\x00"), ""},
		{"id over the limit", CheckID(long + "x"), "id is 4097 bytes"},
		{"empty id", CheckID(""), "id is empty"},
		{"id not UTF-8", CheckID("\xff"), "id is not valid UTF-8"},
		{"id .", CheckID("."), `id "." is a dot segment`},
		{"id ..", CheckID(".."), `id ".." is a dot segment`},
		{"id with dots", CheckID("..."), ""},
		{"namespace ..", CheckFunctionType(TypeName{Namespace: "..", Name: "x"}), `namespace ".." is a dot segment`},
		{"function name .", CheckFunctionType(TypeName{Namespace: "a", Name: "."}), `function name "." is a dot segment`},
		{"function type", CheckFunctionType(ok), ""},
		{"empty namespace", CheckFunctionType(TypeName{Name: "x"}), "namespace is empty"},
		{"long function name", CheckFunctionType(TypeName{Namespace: "x", Name: long + "x"}), "function name is 4097 bytes"},
		{"slash in namespace", CheckFunctionType(TypeName{Namespace: "a/b", Name: "x"}), "namespace \"a/b\" contains '/'"},
		{"control in name", CheckFunctionType(TypeName{Namespace: "a", Name: "x\ny"}), "function name contains the control character U+000A"},
		{"address", CheckAddress(Address{Type: ok, ID: "1"}), ""},
		{"address without id", CheckAddress(Address{Type: ok}), "id is empty"},
		{"typename", CheckTypename("type.googleapis.com/a/b.C"), ""},
		{"typename not UTF-8", CheckTypename("a/\xc3"), "typename is not valid UTF-8"},
		{"typename without slash", CheckTypename("string"), "is not <namespace>/<name>"},
		{"empty typename", CheckTypename(""), "is not <namespace>/<name>"},
		{"typename with space", CheckTypename("a/b c"), "typename contains the character U+0020"},
		{"long typename", CheckTypename("a/" + long), "typename is 4098 bytes"},
		{"state name", CheckStateName("seen"), ""},
		{"empty state name", CheckStateName(""), "state name is empty"},
	} {
		if tc.field == "" {
			if tc.err != nil {
				t.Errorf("%s: unexpected error %v", tc.name, tc.err)
			}
			continue
		}
		if !errors.Is(tc.err, ErrBadAddress) || !strings.Contains(tc.err.Error(), tc.field) {
			t.Errorf("%s: error %v, want ErrBadAddress naming %q", tc.name, tc.err, tc.field)
		}
	}
}
