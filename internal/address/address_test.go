package address

import "testing"

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
