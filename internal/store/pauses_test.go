package store

import (
	"fmt"
	"slices"
	"testing"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/protocol"
)

// TestPauses writes, replaces and deletes pauses and reads them back in
// key order, type-level first, and through a reopen.
func TestPauses(t *testing.T) {
	db, dir := openTest(t, 2)
	typ := address.TypeName{Namespace: "ns", Name: "fn"}
	a := address.Address{Type: typ, ID: "a"}
	b := address.Address{Type: typ, ID: "b/x"}
	commit(t, db, func(bt *Batch) {
		bt.PutPause(b, &protocol.Pause{Mutation: "m1", Principal: "ops", Reason: "r1", Since: 5})
		bt.PutPause(a, &protocol.Pause{Mutation: "m2", Principal: "runtime", Since: 6, Auto: true})
		bt.PutPause(address.Address{Type: typ}, &protocol.Pause{Mutation: "m3", ExpiresAt: 100})
		bt.PutTypePause(typ, 1, &protocol.Pause{Mutation: "m5"})
		bt.PutTypePause(typ, 0, &protocol.Pause{Mutation: "m6"})
	})
	commit(t, db, func(bt *Batch) {
		bt.PutPause(a, &protocol.Pause{Mutation: "m4", Principal: "ops", Since: 7})
		bt.DeletePause(b)
		bt.DeleteTypePause(typ, 0)
	})
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := Open(dir, Options{Logger: quietLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	var got []string
	err = db.ScanPauses(func(a address.Address, part int, p *protocol.Pause) error {
		got = append(got, fmt.Sprintf("%s@%d=%s", a, part, p.GetMutation()))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The type's record without a partition, then partition 1's copy (0's
	// was deleted), then the addresses.
	want := []string{"ns/fn/@-1=m3", "ns/fn/@1=m5", "ns/fn/a@-1=m4"}
	if !slices.Equal(got, want) {
		t.Fatalf("ScanPauses = %v, want %v", got, want)
	}
}
