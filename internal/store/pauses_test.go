package store

import (
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
	})
	commit(t, db, func(bt *Batch) {
		bt.PutPause(a, &protocol.Pause{Mutation: "m4", Principal: "ops", Since: 7})
		bt.DeletePause(b)
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
	err = db.ScanPauses(func(a address.Address, p *protocol.Pause) error {
		got = append(got, a.String()+"="+p.GetMutation())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ns/fn/=m3", "ns/fn/a=m4"}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("ScanPauses = %v, want %v", got, want)
	}
}
