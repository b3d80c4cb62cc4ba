package store

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// snapshotFiles returns every file under dir with the SHA-256 of its
// bytes, and its mode and modification time.
func snapshotFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			out[rel] = "dir"
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out[rel] = fmt.Sprintf("%x %v %v", sha256.Sum256(b), fi.Mode(), fi.ModTime().UnixNano())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameFiles(t *testing.T, before, after map[string]string) {
	t.Helper()
	for n, v := range before {
		if after[n] != v {
			t.Errorf("%s changed: %q, then %q", n, v, after[n])
		}
	}
	for n := range after {
		if _, ok := before[n]; !ok {
			t.Errorf("%s was added", n)
		}
	}
}

// A backup taken while commits go on holds every commit acknowledged
// before it started, each whole; it verifies, opens read-only without a
// byte of its directory changing, and has the store's identity.
func TestBackupWhileCommitting(t *testing.T) {
	db, _ := openTest(t, 4)
	var acked atomic.Int64 // commits acknowledged so far
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := int64(1); ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			b := db.NewBatch()
			// Two entries per commit: a backup holds both or neither.
			b.PutState(addr("t", "fn", fmt.Sprintf("id-%d", i)), "a", Entry{Typename: "s", Value: []byte("v"), Version: uint64(i)})
			b.PutState(addr("t", "fn", fmt.Sprintf("id-%d", i)), "b", Entry{Typename: "s", Value: []byte("w"), Version: uint64(i)})
			b.PutEgressSeq(uint64(i))
			if err := b.Commit(i%2 == 0); err != nil {
				t.Error(err)
				return
			}
			acked.Store(i)
		}
	}()
	for acked.Load() < 500 {
	}
	dest := filepath.Join(t.TempDir(), "backup")
	before := acked.Load()
	m, err := db.Backup(dest, BackupOptions{})
	for acked.Load() < before+500 { // commits went on meanwhile, and after
	}
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if m.Store != db.ID() || m.Format != FormatVersion || m.Partitions != 4 || len(m.Files) == 0 || m.Bytes == 0 {
		t.Fatalf("manifest %+v", m)
	}
	if m.EgressPosition < uint64(before) {
		t.Fatalf("the manifest's egress position %d is below the %d commits acknowledged before the backup", m.EgressPosition, before)
	}
	v, err := VerifyBackup(dest, nil, quietLogger{})
	if err != nil {
		t.Fatal(err)
	}
	if v.Keys == 0 {
		t.Fatal("verify read no keys")
	}
	files := snapshotFiles(t, dest)
	rdb, err := Open(dest, Options{ReadOnly: true, Logger: quietLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	if rdb.ID() != db.ID() {
		t.Errorf("the backup opens as store %s, want %s", rdb.ID(), db.ID())
	}
	held := 0
	for i := int64(1); i <= before+1000; i++ {
		_, okA, err := rdb.GetState(addr("t", "fn", fmt.Sprintf("id-%d", i)), "a")
		if err != nil {
			t.Fatal(err)
		}
		_, okB, err := rdb.GetState(addr("t", "fn", fmt.Sprintf("id-%d", i)), "b")
		if err != nil {
			t.Fatal(err)
		}
		if okA != okB {
			t.Fatalf("commit %d is in the backup in part", i)
		}
		if i <= before && !okA {
			t.Fatalf("commit %d was acknowledged before the backup started and is not in it", i)
		}
		if okA {
			held++
		}
	}
	if uint64(held) != m.EgressPosition {
		t.Errorf("the backup holds %d commits, its manifest's egress position is %d", held, m.EgressPosition)
	}
	b := rdb.NewBatch()
	b.PutEgressSeq(1 << 40)
	if err := b.Commit(true); err == nil {
		t.Error("a commit to a read-only store succeeded")
	}
	if err := rdb.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyBackup(dest, nil, quietLogger{}); err != nil {
		t.Fatal(err)
	}
	sameFiles(t, files, snapshotFiles(t, dest))
}

func TestBackupRefuses(t *testing.T) {
	db, dataDir := openTest(t, 2)
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "x"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dir  string
		want string
	}{
		{"relative/dir", "not a clean absolute path"},
		{full, "is not empty"},
		{filepath.Join(full, "x"), "is not a directory"},
		{filepath.Join(t.TempDir(), "no", "parent"), "create it first"},
		{filepath.Join(dataDir, "inside"), "inside the data directory"},
	} {
		_, err := db.Backup(c.dir, BackupOptions{})
		if !errors.Is(err, ErrBackupDest) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Backup(%s): %v, want ErrBackupDest saying %q", c.dir, err, c.want)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(full, "x")); string(b) != "x" {
		t.Error("a refused backup touched the non-empty directory")
	}

	// One at a time.
	db.backingUp.Lock()
	_, err := db.Backup(filepath.Join(t.TempDir(), "b"), BackupOptions{})
	db.backingUp.Unlock()
	if !errors.Is(err, ErrBackupRunning) {
		t.Errorf("a second backup: %v, want ErrBackupRunning", err)
	}

	// No room: a reserve larger than the disk's free space.
	dest := filepath.Join(t.TempDir(), "b")
	_, err = db.Backup(dest, BackupOptions{Reserve: 1 << 62})
	var nr *NoRoomError
	if !errors.As(err, &nr) || !strings.Contains(err.Error(), "are free") {
		t.Errorf("a backup without room: %v, want a NoRoomError", err)
	}
	if _, err := os.Stat(dest); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused backup left %s behind", dest)
	}

	// An empty directory is taken.
	empty := t.TempDir()
	if _, err := db.Backup(empty, BackupOptions{}); err != nil {
		t.Fatal(err)
	}
}

// VerifyBackup finds a truncated file, a changed byte, a missing file, an
// added one and a missing manifest.
func TestVerifyBackupCatchesDamage(t *testing.T) {
	db, _ := openTest(t, 2)
	b := db.NewBatch()
	for i := range 2000 {
		b.PutState(addr("t", "fn", fmt.Sprintf("id-%d", i)), "a", Entry{Typename: "s", Value: []byte(strings.Repeat("v", 100))})
	}
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
	if err := db.pdb.Flush(); err != nil { // an sstable to damage
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "backup")
	m, err := db.Backup(src, BackupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var sst string
	for _, f := range m.Files {
		if strings.HasSuffix(f.Name, ".sst") {
			sst = f.Name
		}
	}
	if sst == "" {
		t.Fatalf("no sstable in %+v", m.Files)
	}
	damage := []struct {
		name   string
		damage func(dir string) error
		want   string
	}{
		{"truncated", func(dir string) error { return os.Truncate(filepath.Join(dir, sst), 100) }, "truncated or changed"},
		{"a changed byte", func(dir string) error {
			p := filepath.Join(dir, sst)
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			b[len(b)/2] ^= 0xff
			return os.WriteFile(p, b, 0o644)
		}, "does not match its checksum"},
		{"a missing file", func(dir string) error { return os.Remove(filepath.Join(dir, sst)) }, "is missing"},
		{"an added file", func(dir string) error { return os.WriteFile(filepath.Join(dir, "000999.log"), nil, 0o644) }, "not in the manifest"},
		{"no manifest", func(dir string) error { return os.Remove(filepath.Join(dir, BackupManifestName)) }, "holds no " + BackupManifestName},
	}
	for _, d := range damage {
		t.Run(d.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "copy")
			if _, err := vfs.Clone(vfs.Default, vfs.Default, src, dir); err != nil {
				t.Fatal(err)
			}
			if _, err := VerifyBackup(dir, nil, quietLogger{}); err != nil {
				t.Fatalf("the undamaged copy: %v", err)
			}
			if err := d.damage(dir); err != nil {
				t.Fatal(err)
			}
			_, err := VerifyBackup(dir, nil, quietLogger{})
			if !errors.Is(err, ErrBackupInvalid) || !strings.Contains(err.Error(), d.want) {
				t.Fatalf("VerifyBackup: %v, want ErrBackupInvalid saying %q", err, d.want)
			}
		})
	}
}

// The first writable start on a copy of a backup gives it an identity of
// its own and records the store it came from, with the egress position
// they share; a restore in the place of a lost data directory needs no
// NewStore.
func TestRestoredBackupGetsItsOwnIdentity(t *testing.T) {
	parent := t.TempDir()
	dataDir := filepath.Join(parent, "data")
	db, err := Open(dataDir, Options{Partitions: 2, Logger: quietLogger{}, SweepInterval: -1, RecordBeside: true})
	if err != nil {
		t.Fatal(err)
	}
	b := db.NewBatch()
	b.PutState(addr("t", "fn", "a"), "s", Entry{Typename: "s", Value: []byte("before")})
	b.PutEgressSeq(7)
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
	backup := filepath.Join(t.TempDir(), "backup")
	if _, err := db.Backup(backup, BackupOptions{}); err != nil {
		t.Fatal(err)
	}
	b = db.NewBatch()
	b.PutState(addr("t", "fn", "a"), "s", Entry{Typename: "s", Value: []byte("after")})
	b.PutEgressSeq(9)
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
	orig := db.ID()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// The data directory is lost; the backup is copied into its place.
	if err := os.RemoveAll(dataDir); err != nil {
		t.Fatal(err)
	}
	if _, err := vfs.Clone(vfs.Default, vfs.Default, backup, dataDir); err != nil {
		t.Fatal(err)
	}
	rdb, err := Open(dataDir, Options{Partitions: 2, Logger: quietLogger{}, SweepInterval: -1, RecordBeside: true})
	if err != nil {
		t.Fatalf("a start on the restored backup: %v", err)
	}
	if rdb.ID() == orig || rdb.ID() == "" {
		t.Fatalf("the restored store is %s, the original was %s: want an identity of its own", rdb.ID(), orig)
	}
	if got := rdb.Lineage(); len(got) != 1 || got[0] != (Ancestor{Store: orig, Position: 7}) {
		t.Fatalf("lineage %+v, want the original at egress position 7", got)
	}
	if pos, ok := rdb.SharedWith(orig); !ok || pos != 7 {
		t.Fatalf("SharedWith(original) = %d, %v", pos, ok)
	}
	if rdb.Restored() == nil || rdb.Restored().Store != orig {
		t.Fatalf("Restored() = %+v", rdb.Restored())
	}
	if e, ok, err := rdb.GetState(addr("t", "fn", "a"), "s"); err != nil || !ok || string(e.Value) != "before" {
		t.Fatalf("the restored entry: %q %v %v", e.Value, ok, err)
	}
	if _, err := os.Stat(filepath.Join(dataDir, BackupManifestName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the manifest is still in the restored data directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dataDir, RestoredName)); err != nil {
		t.Errorf("no record of the restore: %v", err)
	}
	id := rdb.ID()
	// A backup of the restored store carries its lineage.
	again := filepath.Join(t.TempDir(), "again")
	m, err := rdb.Backup(again, BackupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Lineage) != 1 || m.Lineage[0].Store != orig {
		t.Errorf("the manifest of a restored store's backup: lineage %+v", m.Lineage)
	}
	if err := rdb.Close(); err != nil {
		t.Fatal(err)
	}
	// The next start is the same store.
	rdb, err = Open(dataDir, Options{Partitions: 2, Logger: quietLogger{}, SweepInterval: -1, RecordBeside: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	if rdb.ID() != id {
		t.Fatalf("a restart changed the identity again: %s, then %s", id, rdb.ID())
	}
}
