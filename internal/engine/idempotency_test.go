package engine

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statefun-go/statefun/internal/idempotency"
)

func onceReq(key, body string) idempotency.Request {
	return idempotency.Request{Scope: "test/counter", Key: key,
		Fingerprint: idempotency.Fingerprint("PUT", "/test/counter/a", "", []byte(body))}
}

// The key is written in the commit that writes the message: a crash after
// that commit — before the client heard the answer — and a retry give one
// message; a crash before it and a retry give one message too.
func TestIngestOnceCrashThenRetry(t *testing.T) {
	for _, committed := range []bool{true, false} {
		name := "crash before the commit"
		if committed {
			name = "crash after the commit, before the answer"
		}
		t.Run(name, func(t *testing.T) {
			fs := vfs.NewCrashableMem()
			db := openStore(t, fs, 2)
			e := newEngine(t, db, &counter{}, func(o *Options) { o.Driven = true })
			d := e.Driver()
			f, replayed, err := d.IngestOnce(msg("a", "x"), onceReq("k1", "x"))
			if err != nil || replayed {
				t.Fatalf("first request: %v, replayed %v", err, replayed)
			}
			if committed {
				if err := d.Commit(); err != nil || !f.Done() || f.Err() != nil {
					t.Fatalf("commit: %v, %v", err, f.Err())
				}
			}
			// The process dies here; only what was synced survives.
			crashed := fs.CrashClone(vfs.CrashCloneCfg{})
			e.Close()

			db2 := openStore(t, crashed, 2)
			fn2 := &counter{}
			e2 := newEngine(t, db2, fn2, func(o *Options) { o.Driven = true })
			d2 := e2.Driver()
			if committed {
				if _, _, err := d2.IngestOnce(msg("a", "y"), onceReq("k1", "y")); !errors.Is(err, idempotency.ErrMismatch) {
					t.Fatalf("the key with another body: %v, want ErrMismatch", err)
				}
			}
			f, replayed, err = d2.IngestOnce(msg("a", "x"), onceReq("k1", "x")) // the client's retry
			if err != nil || replayed != committed {
				t.Fatalf("retry: %v, replayed %v; want replayed %v", err, replayed, committed)
			}
			settle(t, d2, 2)
			if f != nil && (!f.Done() || f.Err() != nil) {
				t.Fatalf("retry not durable: %v", f.Err())
			}
			if got := fn2.messages(); !slices.Equal(got, []string{"a:x"}) {
				t.Fatalf("after the restart the function saw %v, want [a:x] once", got)
			}
			if v, ok, err := db2.GetState(addr("a"), "n"); err != nil || !ok || string(v.Value) != "1" {
				t.Fatalf("n = %q (%v, %v), want 1", v.Value, ok, err)
			}
		})
	}
}

// A repeat while the first request is being made durable is refused as in
// progress (409 at the edge); with another body as a mismatch (422); once
// durable, a repeat is a replay. One message in all.
func TestIngestOnceInProgress(t *testing.T) {
	db := openStore(t, vfs.NewMem(), 2)
	fn := &counter{}
	e := newEngine(t, db, fn, func(o *Options) { o.Driven = true })
	d := e.Driver()
	f, _, err := d.IngestOnce(msg("a", "x"), onceReq("k1", "x"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.IngestOnce(msg("a", "x"), onceReq("k1", "x")); !errors.Is(err, idempotency.ErrInProgress) {
		t.Fatalf("repeat in progress: %v, want ErrInProgress", err)
	}
	if _, _, err := d.IngestOnce(msg("a", "z"), onceReq("k1", "z")); !errors.Is(err, idempotency.ErrMismatch) {
		t.Fatalf("other body in progress: %v, want ErrMismatch", err)
	}
	// Another key is not held up.
	if _, _, err := d.IngestOnce(msg("b", "x"), onceReq("k2", "x")); err != nil {
		t.Fatal(err)
	}
	if err := d.Commit(); err != nil || !f.Done() || f.Err() != nil {
		t.Fatalf("commit: %v, %v", err, f.Err())
	}
	if _, replayed, err := d.IngestOnce(msg("a", "x"), onceReq("k1", "x")); err != nil || !replayed {
		t.Fatalf("repeat after the commit: %v, replayed %v", err, replayed)
	}
	settle(t, d, 2)
	got := fn.messages()
	slices.Sort(got)
	if !slices.Equal(got, []string{"a:x", "b:x"}) {
		t.Fatalf("the function saw %v", got)
	}
}

// A request refused for want of room leaves no key: its retry is a new
// attempt, not a replay of a message that never was.
func TestIngestOnceRefusedLeavesNoKey(t *testing.T) {
	db := openStore(t, vfs.NewMem(), 1)
	full := errors.New("disk full")
	admit := full
	e := newEngine(t, db, &counter{}, func(o *Options) { o.Admit = func() error { return admit } })
	e.Start()
	if _, err := e.IngestOnce(context.Background(), msg("a", "x"), onceReq("k1", "x")); !errors.Is(err, ErrBusy) {
		t.Fatalf("refused: %v", err)
	}
	admit = nil
	if replayed, err := e.IngestOnce(context.Background(), msg("a", "x"), onceReq("k1", "x")); err != nil || replayed {
		t.Fatalf("retry: %v, replayed %v; want a new message", err, replayed)
	}
	if replayed, err := e.IngestOnce(context.Background(), msg("a", "x"), onceReq("k1", "x")); err != nil || !replayed {
		t.Fatalf("second retry: %v, replayed %v; want a replay", err, replayed)
	}
}
