package store

import (
	"flag"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/protocol"
)

// quietLogger drops Pebble's log lines, which may come from background
// goroutines after a test has ended.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)         {}
func (quietLogger) Errorf(string, ...any)        {}
func (quietLogger) Fatalf(f string, args ...any) { panic("pebble fatal: " + f) }

// openTest opens a store on disk in a fresh directory, closed when the test
// ends.
func openTest(t testing.TB, partitions int) (*DB, string) {
	t.Helper()
	dir := t.TempDir()
	// No background sweeper: it sweeps at once on open, by the wall clock,
	// and records written at the tests' fixed old times would vanish while
	// a test reads them. Tests of retention call Sweep themselves.
	db, err := Open(dir, Options{Partitions: partitions, Logger: quietLogger{}, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db, dir
}

// commit writes what fill puts into a batch, synced.
func commit(t testing.TB, db *DB, fill func(b *Batch)) {
	t.Helper()
	b := db.NewBatch()
	defer b.Close()
	fill(b)
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
}

func addr(ns, name, id string) address.Address {
	return address.Address{Type: address.TypeName{Namespace: ns, Name: name}, ID: id}
}

func pbAddr(a address.Address) *protocol.Address {
	return &protocol.Address{Namespace: a.Type.Namespace, Type: a.Type.Name, Id: a.ID}
}

// envelope returns a message to target carrying text.
func envelope(target address.Address, text string) *protocol.Envelope {
	return &protocol.Envelope{
		Target:   pbAddr(target),
		Argument: &protocol.TypedValue{Typename: "io.statefun.types/string", HasValue: true, Value: []byte(text)},
	}
}

var seedFlag = flag.Uint64("seed", 0, "seed for the randomized tests (0: from the clock); each test logs the seed it used")

// testRand returns a seeded RNG and logs the seed, so a failure replays with
// -seed.
func testRand(t testing.TB) *rand.Rand {
	t.Helper()
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay with -seed %d)", seed, seed)
	return rand.New(rand.NewPCG(seed, seed))
}
