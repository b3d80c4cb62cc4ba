package store

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/statefun-go/statefun/internal/address"
)

// scanIDs collects what ScanIDs lists, at most limit ids (0 = all).
func scanIDs(t *testing.T, db *DB, tn address.TypeName, prefix, after string, limit int) []string {
	t.Helper()
	var ids []string
	err := db.ScanIDs(tn, prefix, after, func(id string) bool {
		ids = append(ids, id)
		return limit == 0 || len(ids) < limit
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func TestScanIDs(t *testing.T) {
	db, _ := openTest(t, 4)
	greeter := address.TypeName{Namespace: "example", Name: "greeter"}
	ids := []string{"a", "a/b", "a\x00b", "a\x00", "a\xff", "ab", "b", "\x00", "\xff", "🙂", "a/🙂", "user-1", "user-10", "user-2"}
	commit(t, db, func(b *Batch) {
		for i, id := range ids {
			// Some ids hold many states, so ScanIDs has to seek past them.
			for s := range 1 + i%6 {
				b.PutState(address.Address{Type: greeter, ID: id}, fmt.Sprint("s", s), Entry{Value: []byte(id)})
			}
		}
		// Neighbouring types whose encodings are close to greeter's.
		b.PutState(addr("example", "greeter\x00", "zz"), "s", Entry{})
		b.PutState(addr("example", "greete", "zz"), "s", Entry{})
		b.PutState(addr("example\x00", "greeter", "zz"), "s", Entry{})
	})
	sorted := slices.Clone(ids)
	slices.Sort(sorted)

	if got := scanIDs(t, db, greeter, "", "", 0); !reflect.DeepEqual(got, sorted) {
		t.Errorf("all ids = %q\nwant %q", got, sorted)
	}

	// Paging with the last id as the cursor lists everything once.
	for _, page := range []int{1, 2, 3, 5, 100} {
		var all []string
		after := ""
		for {
			got := scanIDs(t, db, greeter, "", after, page)
			all = append(all, got...)
			if len(got) < page {
				break
			}
			after = got[len(got)-1]
		}
		if !reflect.DeepEqual(all, sorted) {
			t.Errorf("paged by %d = %q", page, all)
		}
	}

	// Prefixes, alone and with a cursor.
	for _, tc := range []struct {
		prefix, after string
		want          []string
	}{
		{"a", "", []string{"a", "a\x00", "a\x00b", "a/b", "a/🙂", "ab", "a\xff"}},
		{"a\x00", "", []string{"a\x00", "a\x00b"}},
		{"a/", "", []string{"a/b", "a/🙂"}},
		{"user-1", "", []string{"user-1", "user-10"}},
		{"user-", "user-1", []string{"user-10", "user-2"}},
		{"a", "a\x00b", []string{"a/b", "a/🙂", "ab", "a\xff"}},
		{"a", "0", []string{"a", "a\x00", "a\x00b", "a/b", "a/🙂", "ab", "a\xff"}}, // cursor before the prefix
		{"a", "b", nil}, // cursor past the prefix
		{"\xff", "", []string{"\xff"}},
		{"nobody", "", nil},
		{"", "🙂", []string{"\xff"}},
	} {
		if got := scanIDs(t, db, greeter, tc.prefix, tc.after, 0); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ScanIDs(prefix %q, after %q) = %q, want %q", tc.prefix, tc.after, got, tc.want)
		}
	}
	if got := scanIDs(t, db, address.TypeName{Namespace: "example", Name: "none"}, "", "", 0); got != nil {
		t.Errorf("ids of a type without state = %q", got)
	}
}

// TestScanIDsRandom compares ScanIDs with a reference model over random ids,
// prefixes and cursors.
func TestScanIDsRandom(t *testing.T) {
	rng := testRand(t)
	db, _ := openTest(t, 4)
	tn := address.TypeName{Namespace: "n", Name: "t"}
	set := map[string]bool{}
	commit(t, db, func(b *Batch) {
		for range 300 {
			id := randString(rng)
			set[id] = true
			for s := range rng.IntN(5) + 1 {
				b.PutState(address.Address{Type: tn, ID: id}, fmt.Sprint(s), Entry{})
			}
		}
	})
	for range 300 {
		prefix, after := randString(rng), randString(rng)
		if rng.IntN(3) == 0 {
			prefix = ""
		}
		var want []string
		for id := range set {
			if strings.HasPrefix(id, prefix) && id > after {
				want = append(want, id)
			}
		}
		slices.Sort(want)
		if got := scanIDs(t, db, tn, prefix, after, 0); !reflect.DeepEqual(got, want) {
			t.Fatalf("ScanIDs(prefix %q, after %q) = %q, want %q", prefix, after, got, want)
		}
	}
}

func TestScanTypes(t *testing.T) {
	db, _ := openTest(t, 4)
	types := []address.TypeName{
		{Namespace: "example", Name: "greeter"},
		{Namespace: "example", Name: "greeter\x00"},
		{Namespace: "example", Name: "greete"},
		{Namespace: "example\x00", Name: "greeter"},
		{Namespace: "com.shop", Name: "cart"},
		{Namespace: "com.shop/x", Name: "cart"},
		{Namespace: "", Name: ""},
	}
	commit(t, db, func(b *Batch) {
		for i, tn := range types {
			for n := range 10 * i { // many ids, so skipping seeks
				b.PutState(address.Address{Type: tn, ID: fmt.Sprint(n)}, "s", Entry{})
			}
			b.PutState(address.Address{Type: tn, ID: "last"}, "s", Entry{})
		}
		b.PutSpecs(address.TypeName{Namespace: "only", Name: "specs"}, nil) // not state
	})
	var got []address.TypeName
	if err := db.ScanTypes(func(tn address.TypeName) bool { got = append(got, tn); return true }); err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(types)
	slices.SortFunc(want, func(a, b address.TypeName) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ScanTypes = %q\nwant %q", got, want)
	}
	got = nil
	_ = db.ScanTypes(func(tn address.TypeName) bool { got = append(got, tn); return len(got) < 2 })
	if !reflect.DeepEqual(got, want[:2]) {
		t.Errorf("ScanTypes stopped after 2 = %q", got)
	}
}
