package store

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/statefun-go/statefun/internal/protocol"
)

// diskUsage returns the bytes allocated on disk to the files in dir (what
// du reports) and the number of write-ahead log files.
func diskUsage(t testing.TB, dir string) (bytes int64, wals int) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			bytes += st.Blocks * 512
		} else {
			bytes += fi.Size()
		}
		if filepath.Ext(e.Name()) == ".log" {
			wals++
		}
	}
	return bytes, wals
}

// fillMessages commits n group commits shaped like the engine's for one
// message each: the message into an inbox, then its consumption with a state
// change and an egress record.
func fillMessages(t testing.TB, db *DB, n int) {
	t.Helper()
	arg := &protocol.TypedValue{Typename: "example/greet", HasValue: true, Value: make([]byte, 100)}
	for i := range n {
		k := InboxKey{Partition: i % db.Partitions(), Source: SourceIngress, Seq: uint64(i)}
		commit(t, db, func(b *Batch) {
			b.PutInbox(k, &protocol.Envelope{Target: &protocol.Address{Namespace: "example", Type: "greeter", Id: fmt.Sprint("user", i%100)}, Argument: arg})
		})
		commit(t, db, func(b *Batch) {
			b.DeleteInbox(k)
			b.PutState(testAddr, fmt.Sprint("seen", i%100), Entry{Typename: "int", Value: []byte{byte(i)}, Version: uint64(i + 1)})
			b.PutEgress("io/eg", "greetings", uint64(i+1), &protocol.EgressRecord{EgressNamespace: "io", EgressType: "eg", Argument: arg})
		})
	}
}

var footprintFlag = flag.Int("footprint", 0, "TestFootprint: messages per store, and every memtable size (0: a quick check)")

// TestFootprint prints the disk footprint of a fresh store after a few
// messages, for several memtable sizes, closed cleanly and not, and checks
// that a small store with the default options stays small (each
// write-ahead log file used to take 36 MB up front, and an 85 MB volume
// filled after 31 messages). Run with -v to see the table in
// docs/reference/storage.md:
//
//	go test ./internal/store -run TestFootprint -v -footprint 20000
func TestFootprint(t *testing.T) {
	messages, mems := 300, []uint64{0}
	if *footprintFlag > 0 {
		messages, mems = *footprintFlag, []uint64{0, 2 << 20, 32 << 20, 64 << 20}
	}
	for _, mem := range mems {
		dir := t.TempDir()
		db, err := Open(dir, Options{MemTableSize: mem, Logger: quietLogger{}, SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		fillMessages(t, db, messages)
		open, openWALs := diskUsage(t, dir)
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		closed, closedWALs := diskUsage(t, dir)
		if mem == 0 {
			mem = DefaultMemTableSize
		}
		t.Logf("memtable %3d MiB, %d messages: running %6.1f MiB (%d log files), closed %6.1f MiB (%d log files)",
			mem>>20, messages, float64(open)/(1<<20), openWALs, float64(closed)/(1<<20), closedWALs)
		if mem == DefaultMemTableSize && messages <= 1000 {
			// Two log files preallocated 1 MiB at a time, a little data
			// and Pebble's small files; it was 2 x 36 MB.
			if limit := int64(4 << 20); open > limit {
				t.Errorf("a fresh default store takes %d bytes after %d messages, want at most %d", open, messages, limit)
			}
		}
	}
}
