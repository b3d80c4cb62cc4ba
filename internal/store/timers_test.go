package store

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/statefun-go/statefun/internal/protocol"
)

// tokenTimer is a delayed message of bob with a cancellation token.
func tokenTimer(token string) *protocol.Envelope {
	env := envelope(addr("example", "greeter", "alice"), token)
	env.Caller = pbAddr(addr("example", "sender", "bob"))
	env.CancellationToken = token
	return env
}

// TestTimerTokenIndex: a timer with a cancellation token is found by it
// until its deletion; a token taken again names the new timer; the index
// is per partition and per sender.
func TestTimerTokenIndex(t *testing.T) {
	db, _ := openTest(t, 4)
	k1 := TimerKey{Partition: 1, Due: -5, ID: 1}
	commit(t, db, func(b *Batch) {
		b.PutTimer(k1, tokenTimer("t"))
		b.PutTimer(TimerKey{Partition: 1, Due: 9, ID: 2}, envelope(addr("example", "greeter", "alice"), "no token"))
	})
	lookup := func(p int, sender, token string) (TimerKey, bool) {
		t.Helper()
		k, ok, err := db.TimerByToken(p, sender, token)
		if err != nil {
			t.Fatal(err)
		}
		return k, ok
	}
	if k, ok := lookup(1, "bob", "t"); !ok || k != k1 {
		t.Fatalf("TimerByToken = %v, %v; want %v", k, ok, k1)
	}
	for _, c := range []struct {
		p             int
		sender, token string
	}{{0, "bob", "t"}, {1, "alice", "t"}, {1, "bob", "u"}, {1, "bob", ""}} {
		if k, ok := lookup(c.p, c.sender, c.token); ok {
			t.Errorf("TimerByToken(%d, %q, %q) = %v, want none", c.p, c.sender, c.token, k)
		}
	}
	// Cancelled, and the token taken again in the same batch: the new
	// timer's entry stands (the engine skips the deletion then).
	k3 := TimerKey{Partition: 1, Due: 100, ID: 3}
	commit(t, db, func(b *Batch) {
		b.PutTimer(k3, tokenTimer("t"))
		b.DeleteTimer(k1)
	})
	if k, ok := lookup(1, "bob", "t"); !ok || k != k3 {
		t.Fatalf("after the token was taken again, TimerByToken = %v, %v; want %v", k, ok, k3)
	}
	commit(t, db, func(b *Batch) {
		b.DeleteTimer(k3)
		b.DeleteTimerToken(1, "bob", "t")
	})
	if k, ok := lookup(1, "bob", "t"); ok {
		t.Fatalf("after the deletion, TimerByToken = %v", k)
	}
}

// TestScanTimersAfter: the scan starts after a key, in due order, and
// stops when told.
func TestScanTimersAfter(t *testing.T) {
	db, _ := openTest(t, 2)
	commit(t, db, func(b *Batch) {
		for i, due := range []int64{-3, -3, 0, 7, 7, 7} {
			b.PutTimer(TimerKey{Partition: 1, Due: due, ID: uint64(i + 1)}, envelope(addr("a", "b", "c"), fmt.Sprint(i)))
		}
		b.PutTimer(TimerKey{Partition: 0, Due: 1, ID: 1}, envelope(addr("a", "b", "c"), "p0"))
	})
	scan := func(after *TimerKey, limit int) []string {
		var out []string
		err := db.ScanTimersAfter(1, after, func(k TimerKey, _ *protocol.Envelope) bool {
			out = append(out, fmt.Sprintf("%d/%d", k.Due, k.ID))
			return len(out) < limit
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if got := fmt.Sprint(scan(nil, 100)); got != "[-3/1 -3/2 0/3 7/4 7/5 7/6]" {
		t.Errorf("from the start: %s", got)
	}
	if got := fmt.Sprint(scan(&TimerKey{Partition: 1, Due: -3, ID: 1}, 2)); got != "[-3/2 0/3]" {
		t.Errorf("after -3/1, two: %s", got)
	}
	if got := fmt.Sprint(scan(&TimerKey{Partition: 1, Due: 7, ID: 6}, 100)); got != "[]" {
		t.Errorf("after the last: %s", got)
	}
	n, maxID, err := db.TimerStats(1)
	if err != nil || n != 6 || maxID != 6 {
		t.Errorf("TimerStats = %d, %d, %v; want 6, 6", n, maxID, err)
	}
}

// TestOpenIndexesOlderTimerTokens: a store whose timers were written
// before the index by token existed gets its entries at Open.
func TestOpenIndexesOlderTimerTokens(t *testing.T) {
	fs := vfs.NewMem()
	db, err := Open("db", Options{FS: fs, Partitions: 2, Logger: quietLogger{}, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	commit(t, db, func(b *Batch) {
		for i := range 5 {
			k := TimerKey{Partition: 1, Due: int64(i), ID: uint64(i + 1)}
			b.key = timerKey(b.key[:0], k)
			b.setProto(b.key, tokenTimer(fmt.Sprint("t", i))) // as an older build wrote it: no index
		}
		b.pb.Delete(metaKey(nil, metaTokensIndexed), nil)
	})
	if _, ok, _ := db.TimerByToken(1, "bob", "t3"); ok {
		t.Fatal("the older store has an index entry before Open built it")
	}
	_ = db.Close()
	db, err = Open("db", Options{FS: fs, Logger: quietLogger{}, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for i := range 5 {
		k, ok, err := db.TimerByToken(1, "bob", fmt.Sprint("t", i))
		if err != nil || !ok || k.ID != uint64(i+1) {
			t.Fatalf("token t%d: %v, %v, %v", i, k, ok, err)
		}
	}
}
