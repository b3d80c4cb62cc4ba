package engine

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statefun-go/statefun/internal/partition"
)

// While Admit refuses, Ingest and Mutate in every ack mode answer an
// ErrBusy that carries the reason, and nothing is written; reads go on.
// When it admits again, work is taken again.
func TestAdmitRefusesNewWork(t *testing.T) {
	db := openStore(t, vfs.NewMem(), 2)
	full := errors.New("disk almost full")
	var refuse atomic.Bool
	refuse.Store(true)
	e := newEngine(t, db, &counter{}, func(o *Options) {
		o.Admit = func() error {
			if refuse.Load() {
				return full
			}
			return nil
		}
	})
	e.Start()
	ctx := context.Background()
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrBusy) || !errors.Is(err, full) {
			t.Fatalf("%s = %v, want ErrBusy carrying the reason", what, err)
		}
	}
	check("Ingest", e.Ingest(ctx, msg("a", "1")))
	for _, ack := range []struct {
		name string
		mode partition.AckMode
	}{{"committed", AckCommitted}, {"applied", AckApplied}, {"accepted", AckAccepted}} {
		_, err := e.Mutate(ctx, mutation("m-"+ack.name, ack.mode))
		check("Mutate ack="+ack.name, err)
	}
	if _, err := e.Read(ctx, addr("a"), ""); err != nil {
		t.Fatalf("a read was refused: %v", err)
	}
	if _, ok, _ := db.Receipt("m-accepted"); ok {
		t.Fatal("a refused mutation left a receipt")
	}
	refuse.Store(false)
	if err := e.Ingest(ctx, msg("a", "1")); err != nil {
		t.Fatalf("Ingest once admitted: %v", err)
	}
	if _, err := e.Mutate(ctx, mutation("m-ok", AckCommitted)); err != nil {
		t.Fatalf("Mutate once admitted: %v", err)
	}
}
