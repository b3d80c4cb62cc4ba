package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// A store gets an identity when it is created, keeps it across reopens,
// and writes it to IDFile in its directory; another store has another.
func TestStoreIdentity(t *testing.T) {
	db, dir := openTest(t, 2)
	id := db.ID()
	if len(id) != 32 || db.PreIDEgressSeq() != 0 {
		t.Fatalf("new store: ID %q, PreIDEgressSeq %d", id, db.PreIDEgressSeq())
	}
	b, err := os.ReadFile(filepath.Join(dir, IDFile))
	if err != nil || !strings.HasPrefix(string(b), "statefun store "+id+"\n") {
		t.Fatalf("%s: %q, %v", IDFile, b, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db2, err := Open(dir, Options{Logger: quietLogger{}, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	if db2.ID() != id {
		t.Errorf("reopened: ID %s, want %s", db2.ID(), id)
	}
	other, _ := openTest(t, 2)
	if other.ID() == id {
		t.Errorf("two stores share the identity %s", id)
	}
}

// A store of an older build (no identity) gets one at its first open, and
// remembers the egress positions it wrote before.
func TestStoreIdentityOfOldStore(t *testing.T) {
	db, dir := openTest(t, 2)
	commit(t, db, func(b *Batch) {
		b.PutEgress("kc/out", "kc/out", 41, egressRec("a"))
		b.PutEgressSeq(42)
	})
	// As an older build left it: no identity, no IDFile.
	if err := db.pdb.Delete(metaKey(nil, metaStoreID), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	_ = db.pdb.Delete(metaKey(nil, metaIDEgressSeq), pebble.Sync)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	old := db.ID()
	if err := os.Remove(filepath.Join(dir, IDFile)); err != nil {
		t.Fatal(err)
	}
	db2, err := Open(dir, Options{Logger: quietLogger{}, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	if db2.ID() == old || len(db2.ID()) != 32 {
		t.Errorf("ID %q after the upgrade (was %q)", db2.ID(), old)
	}
	if db2.PreIDEgressSeq() != 42 {
		t.Errorf("PreIDEgressSeq = %d, want 42", db2.PreIDEgressSeq())
	}
	if _, err := os.Stat(filepath.Join(dir, IDFile)); err != nil {
		t.Error(err)
	}
}

// A data directory deleted, emptied or replaced under the store makes the
// next synced commit fail — nothing more is acknowledged — and the store
// failed, saying since when acknowledged work may be lost.
func TestDirLostFailsTheNextCommit(t *testing.T) {
	for _, c := range []struct {
		name string
		lose func(t *testing.T, dir string)
		why  string
	}{
		{"deleted", func(t *testing.T, dir string) { must(t, os.RemoveAll(dir)) }, "the directory is gone"},
		{"emptied", func(t *testing.T, dir string) {
			names, _ := os.ReadDir(dir)
			for _, n := range names {
				must(t, os.RemoveAll(filepath.Join(dir, n.Name())))
			}
		}, "file is gone"},
		{"replaced", func(t *testing.T, dir string) {
			must(t, os.Rename(dir, dir+".old"))
			must(t, os.Mkdir(dir, 0o755))
		}, "another directory is in its place"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			db, err := Open(dir, Options{Partitions: 2, Logger: quietLogger{}, SweepInterval: -1, DirCheckInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			commit(t, db, func(b *Batch) { b.PutEgress("e", "t", 1, egressRec("before")) })
			before := time.Now()
			c.lose(t, dir)
			b := db.NewBatch()
			b.PutEgress("e", "t", 2, egressRec("after"))
			err = b.Commit(true)
			var lost *DirLostError
			if !errors.Is(err, ErrDirLost) || !errors.Is(err, ErrFailed) || !errors.As(err, &lost) {
				t.Fatalf("commit after the directory was %s: %v", c.name, err)
			}
			if !strings.Contains(err.Error(), c.why) || lost.LastSeen.After(before) || lost.LastSeen.IsZero() {
				t.Errorf("error %v (last seen %v, want before %v)", err, lost.LastSeen, before)
			}
			if !errors.Is(db.Health(), ErrDirLost) {
				t.Errorf("Health = %v", db.Health())
			}
			select {
			case <-db.Failed():
			default:
				t.Error("Failed is not closed")
			}
			b = db.NewBatch()
			b.PutEgress("e", "t", 3, egressRec("unsynced"))
			if err := b.Commit(false); !errors.Is(err, ErrDirLost) {
				t.Errorf("an unsynced commit after: %v", err)
			}
			if err := db.Close(); !errors.Is(err, ErrDirLost) {
				t.Errorf("Close = %v, want the lost directory", err)
			}
		})
	}
}

// Without commits, the background check notices a deleted directory.
func TestDirLostNoticedWhileIdle(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	db, err := Open(dir, Options{Partitions: 2, Logger: quietLogger{}, SweepInterval: -1, DirCheckInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Health(); err != nil {
		t.Fatal(err)
	}
	must(t, os.RemoveAll(dir))
	select {
	case <-db.Failed():
	case <-time.After(5 * time.Second):
		t.Fatal("the deleted directory was not noticed within 5s")
	}
	if !errors.Is(db.Health(), ErrDirLost) {
		t.Errorf("Health = %v", db.Health())
	}
}

// With RecordBeside, a start on a missing or empty directory where a store
// was is refused, naming --new-store; NewStore starts a new store and says
// which it replaced. A first start on a missing or empty directory is not
// refused.
func TestOpenRefusesALostStore(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "data")
	opts := Options{Partitions: 2, Logger: quietLogger{}, SweepInterval: -1, RecordBeside: true}
	must(t, os.Mkdir(dir, 0o755)) // an empty directory, first start
	db, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("first start on an empty directory: %v", err)
	}
	id := db.ID()
	if db.Replaced() != "" || db.RecordErr() != nil {
		t.Errorf("Replaced %q, RecordErr %v", db.Replaced(), db.RecordErr())
	}
	if b, err := os.ReadFile(RecordName(dir)); err != nil || !strings.Contains(string(b), id) {
		t.Fatalf("record beside: %q, %v", b, err)
	}
	must(t, db.Close())

	for _, lose := range []struct {
		name string
		fn   func()
	}{
		{"deleted", func() { must(t, os.RemoveAll(dir)) }},
		{"emptied", func() { must(t, os.RemoveAll(dir)); must(t, os.Mkdir(dir, 0o755)) }},
	} {
		lose.fn()
		_, err := Open(dir, opts)
		if !errors.Is(err, ErrStoreMissing) || !strings.Contains(err.Error(), "--new-store") || !strings.Contains(err.Error(), id) {
			t.Fatalf("%s: Open = %v, want ErrStoreMissing naming --new-store and %s", lose.name, err, id)
		}
		if names, _ := os.ReadDir(dir); len(names) != 0 {
			t.Errorf("%s: the refused start left %d files", lose.name, len(names))
		}
	}
	opts.NewStore = true
	db, err = Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	if db.Replaced() != id || db.ID() == id {
		t.Errorf("NewStore: Replaced %q (want %q), ID %q", db.Replaced(), id, db.ID())
	}
	newID := db.ID()
	must(t, db.Close())
	// The record names the new store now; an ordinary restart opens it.
	opts.NewStore = false
	db, err = Open(dir, opts)
	if err != nil || db.ID() != newID || db.Replaced() != "" {
		t.Fatalf("restart: %v, ID %q want %q", err, db.ID(), newID)
	}
	must(t, db.Close())
}

// Without a record beside it, a directory that still holds IDFile but
// lost the store's files is refused all the same.
func TestOpenRefusesStoreFilesLost(t *testing.T) {
	db, dir := openTest(t, 2)
	id := db.ID()
	must(t, db.Close())
	names, _ := os.ReadDir(dir)
	for _, n := range names {
		if n.Name() != IDFile {
			must(t, os.RemoveAll(filepath.Join(dir, n.Name())))
		}
	}
	_, err := Open(dir, Options{Logger: quietLogger{}, SweepInterval: -1})
	if !errors.Is(err, ErrStoreMissing) || !strings.Contains(err.Error(), id) {
		t.Fatalf("Open = %v", err)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// BenchmarkCheckDir is the check every synced commit makes (one stat
// call, next to BenchmarkCommit100States/sync=true's fsync), and the full
// one of the background check.
func BenchmarkCheckDir(b *testing.B) {
	for _, full := range []bool{false, true} {
		b.Run(fmt.Sprintf("full=%v", full), func(b *testing.B) {
			db, _ := openTest(b, 2)
			for b.Loop() {
				if err := db.checkDir(full); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
