package store

import (
	"fmt"
	"testing"

	"github.com/statefun-go/statefun/internal/address"
)

// StateStats counts one type's ids, entries and bytes, not its
// neighbours', and stops at its cap with lower bounds and an estimate.
func TestStateStats(t *testing.T) {
	db, _ := openTest(t, 4)
	greeter := address.TypeName{Namespace: "example", Name: "greeter"}
	commit(t, db, func(b *Batch) {
		for i := range 10 {
			// ids "a", "a\x00" and "ab" share byte prefixes; each id holds
			// 1 to 3 entries.
			id := []string{"a", "a\x00", "ab", "b", "c", "d", "e", "f", "g", "h"}[i]
			for s := range 1 + i%3 {
				b.PutState(address.Address{Type: greeter, ID: id}, fmt.Sprint("s", s), Entry{Value: []byte("0123456789")})
			}
		}
		b.PutState(addr("example", "greeter\x00", "zz"), "s", Entry{Value: []byte("x")})
		b.PutState(addr("example", "greete", "zz"), "s", Entry{Value: []byte("x")})
	})
	st, err := db.StateStats(greeter, 1000)
	if err != nil {
		t.Fatal(err)
	}
	// 10 ids, entries 1+2+3+1+2+3+1+2+3+1 = 19.
	if st.IDs != 10 || st.Entries != 19 || !st.Complete || st.Bytes < 19*10 || st.EstimatedBytes != 0 {
		t.Fatalf("stats = %+v, want 10 ids, 19 entries, complete, at least 190 bytes", st)
	}
	capped, err := db.StateStats(greeter, 5)
	if err != nil {
		t.Fatal(err)
	}
	// The first five entries belong to "a" (1), "a\x00" (2), "ab" (2 of 3).
	if capped.IDs != 3 || capped.Entries != 5 || capped.Complete {
		t.Fatalf("capped stats = %+v, want 3 ids, 5 entries, not complete", capped)
	}
	empty, err := db.StateStats(address.TypeName{Namespace: "example", Name: "none"}, 5)
	if err != nil {
		t.Fatal(err)
	}
	if empty.IDs != 0 || empty.Entries != 0 || !empty.Complete {
		t.Fatalf("stats of a type without state = %+v", empty)
	}
}
