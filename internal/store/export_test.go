package store

import (
	"fmt"
	"strings"
	"testing"

	"github.com/statefun-go/statefun/internal/address"
)

// ScanState pages a type's entries in key order: a page that ends at any
// entry goes on at the next one, whatever the ids hold (an id that is a
// prefix of another, NUL bytes), and a prefix keeps only its ids.
func TestScanStatePages(t *testing.T) {
	db, _ := openTest(t, 4)
	ty := address.TypeName{Namespace: "ns", Name: "t"}
	other := address.TypeName{Namespace: "ns", Name: "t2"}
	ids := []string{"a", "a\x00", "a\x00b", "ab", "b", "b/c"}
	b := db.NewBatch()
	var want []string
	for i, id := range ids {
		for _, st := range []string{"s1", "s2"} {
			b.PutState(address.Address{Type: ty, ID: id}, st, Entry{Typename: "x/T", Value: []byte(fmt.Sprint(i)), Version: uint64(i + 1)})
			want = append(want, fmt.Sprintf("%q/%s=%d", id, st, i))
		}
		b.PutState(address.Address{Type: other, ID: id}, "s1", Entry{Typename: "x/T", Value: []byte("other")})
	}
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
	for _, page := range []int{1, 2, 5, 100} {
		var got []string
		var after *StateCursor
		for {
			n := 0
			err := db.ScanState(ty, "", after, func(id, st string, e Entry) bool {
				if n == page {
					return false
				}
				n++
				got = append(got, fmt.Sprintf("%q/%s=%s", id, st, e.Value))
				after = &StateCursor{ID: id, State: st}
				return true
			})
			if err != nil {
				t.Fatal(err)
			}
			if n < page {
				break
			}
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("pages of %d:\n%s\nwant:\n%s", page, strings.Join(got, " "), strings.Join(want, " "))
		}
	}
	var got []string
	if err := db.ScanState(ty, "a\x00", nil, func(id, st string, e Entry) bool {
		got = append(got, fmt.Sprintf("%q/%s", id, st))
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, " ") != `"a\x00"/s1 "a\x00"/s2 "a\x00b"/s1 "a\x00b"/s2` {
		t.Errorf("prefix a\\x00: %s", strings.Join(got, " "))
	}
	// A cursor before the prefix starts at the prefix; one past it ends.
	got = nil
	db.ScanState(ty, "b", &StateCursor{ID: "a", State: "s9"}, func(id, st string, e Entry) bool {
		got = append(got, id+"/"+st)
		return true
	})
	if strings.Join(got, " ") != "b/s1 b/s2 b/c/s1 b/c/s2" {
		t.Errorf("prefix b after a/s9: %s", got)
	}
	got = nil
	db.ScanState(ty, "a", &StateCursor{ID: "b", State: ""}, func(id, st string, e Entry) bool {
		got = append(got, id+"/"+st)
		return true
	})
	if len(got) != 0 {
		t.Errorf("prefix a after b: %s", got)
	}
}
