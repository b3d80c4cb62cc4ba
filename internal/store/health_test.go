package store

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/statefun-go/statefun/internal/address"
)

var testAddr = address.Address{Type: address.TypeName{Namespace: "ns", Name: "fn"}, ID: "a"}

// putState commits one state entry, synced.
func putState(t testing.TB, db *DB, state, value string) {
	t.Helper()
	commit(t, db, func(b *Batch) {
		b.PutState(testAddr, state, Entry{Typename: "t", Value: []byte(value), Version: 1})
	})
}

// TestOpenNotWritable: a data directory that cannot be written is refused at
// once, saying "permission denied" — not a hang in Pebble's retries of the
// flush of the replayed log (a store that was not closed), nor a panic out
// of Pebble's Fatalf that could surface as "sync: unlock of unlocked mutex"
// (a store that was closed cleanly). Root ignores permissions, so as root the
// test hands the files to user nobody, keeps the directory root's, and runs
// itself again as nobody.
func TestOpenNotWritable(t *testing.T) {
	if dirs := os.Getenv("STORE_TEST_READONLY_DIRS"); dirs != "" {
		for _, dir := range strings.Split(dirs, ",") {
			_, err := Open(dir, Options{Logger: quietLogger{}, SweepInterval: -1})
			if err == nil || !strings.Contains(err.Error(), "permission denied") {
				t.Fatalf("Open(%s) = %v, want it to say permission denied", dir, err)
			}
			t.Logf("Open = %v", err)
		}
		return
	}
	base := t.TempDir()
	for _, p := range []string{base, filepath.Dir(base)} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var dirs []string
	for _, clean := range []bool{true, false} {
		dir := filepath.Join(base, fmt.Sprintf("data-clean-%v", clean))
		dirs = append(dirs, dir)
		db, err := Open(dir, Options{Logger: quietLogger{}, SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		putState(t, db, "s", "v")
		if clean {
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
		} // else left open, as by a crash; the lock is per process
		if os.Getuid() == 0 {
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				if err := os.Chown(filepath.Join(dir, e.Name()), 65534, 65534); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(dir, 0o755) })
	}
	if os.Getuid() != 0 {
		for _, dir := range dirs {
			_, err := Open(dir, Options{Logger: quietLogger{}, SweepInterval: -1})
			if err == nil || !strings.Contains(err.Error(), "permission denied") {
				t.Fatalf("Open(%s) = %v, want permission denied", dir, err)
			}
		}
		return
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(base, "store.test")
	copyFile(t, self, bin)
	cmd := exec.Command(bin, "-test.run=^TestOpenNotWritable$", "-test.v", "-test.timeout=60s")
	cmd.Env = append(os.Environ(), "STORE_TEST_READONLY_DIRS="+strings.Join(dirs, ","), "HOME=/", "GOCOVERDIR=")
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	t.Logf("as nobody:\n%s", out)
	if err != nil {
		t.Fatalf("the test as user nobody failed: %v", err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestOpenDataDirIsAFile: a file where the data directory should be is
// refused with the cause.
func TestOpenDataDirIsAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(path, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Open(path, Options{Logger: quietLogger{}, SweepInterval: -1})
	if err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("Open = %v, want not a directory", err)
	}
}

// enospc is the error a full disk gives.
var enospc = &os.PathError{Op: "write", Path: "injected", Err: syscall.ENOSPC}

// TestOpenFailsFastOnFullDisk: a restart on a disk that is still full used to
// hang forever in Pebble's retries of the flush of the replayed log, logging
// ~150 lines a second. Open now returns the cause.
func TestOpenFailsFastOnFullDisk(t *testing.T) {
	mem := vfs.NewCrashableMem()
	db, err := Open("db", Options{FS: mem, Logger: quietLogger{}, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	putState(t, db, "s", "v")
	crashed := mem.CrashClone(vfs.CrashCloneCfg{}) // the log still holds the commit
	_ = db.Close()

	full := errorfs.Wrap(crashed, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpCreate && strings.HasSuffix(op.Path, ".sst") {
			return enospc
		}
		return nil
	}))
	_, err = Open("db", Options{FS: full, Logger: quietLogger{}, SweepInterval: -1})
	if err == nil || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Open on a full disk = %v, want no space left on device", err)
	}
	t.Logf("Open = %v", err)
}

// TestFatalWALErrorFailsStore: a write of the write-ahead log that fails
// with ENOSPC is fatal to Pebble. The store reports it through Failed and
// Health instead of panicking (which crashed the process, sometimes as
// "sync: unlock of unlocked mutex"), and what was synced before survives.
func TestFatalWALErrorFailsStore(t *testing.T) {
	mem := vfs.NewCrashableMem()
	var full atomic.Bool
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if full.Load() && strings.HasSuffix(op.Path, ".log") &&
			(op.Kind == errorfs.OpFileWrite || op.Kind == errorfs.OpFileWriteAt || op.Kind == errorfs.OpFileSync ||
				op.Kind == errorfs.OpFileSyncData || op.Kind == errorfs.OpFileSyncTo) {
			return enospc
		}
		return nil
	}))
	db, err := Open("db", Options{FS: fs, Logger: quietLogger{}, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	putState(t, db, "before", "kept")
	if err := db.Health(); err != nil {
		t.Fatalf("Health before the fault = %v", err)
	}

	full.Store(true)
	go func() {
		b := db.NewBatch()
		b.PutState(testAddr, "after", Entry{Typename: "t", Value: []byte("lost"), Version: 2})
		_ = b.Commit(true) // never returns: Pebble's commit pipeline is gone
	}()
	select {
	case <-db.Failed():
	case <-time.After(30 * time.Second):
		t.Fatal("the store did not report the failed write")
	}
	err = db.Health()
	if !errors.Is(err, ErrFailed) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Health = %v, want ErrFailed with no space left on device", err)
	}
	if cerr := db.Close(); !errors.Is(cerr, ErrFailed) {
		t.Fatalf("Close = %v, want the fatal error", cerr)
	}

	// A restart finds everything that was synced.
	db2, err := Open("db", Options{FS: mem.CrashClone(vfs.CrashCloneCfg{}), Logger: quietLogger{}, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	if e, ok, err := db2.GetState(testAddr, "before"); err != nil || !ok || string(e.Value) != "kept" {
		t.Fatalf("after restart: %v %v %v", e, ok, err)
	}
}

// TestDiskSlowMakesStoreUnhealthy: while a write of the log hangs past the
// slow-disk threshold, Health reports the stall (and /readyz with it); once
// the disk answers, it recovers by itself.
func TestDiskSlowMakesStoreUnhealthy(t *testing.T) {
	var stall atomic.Bool
	release := make(chan struct{})
	fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		if stall.Load() && strings.HasSuffix(op.Path, ".log") && (op.Kind == errorfs.OpFileSync ||
			op.Kind == errorfs.OpFileSyncData || op.Kind == errorfs.OpFileSyncTo) {
			<-release
		}
		return nil
	}))
	const threshold = 50 * time.Millisecond
	db, err := Open("db", Options{FS: fs, Logger: quietLogger{}, SweepInterval: -1, DiskSlowThreshold: threshold})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	stall.Store(true)
	done := make(chan error, 1)
	go func() {
		b := db.NewBatch()
		b.PutState(testAddr, "s", Entry{Typename: "t", Value: []byte("v"), Version: 1})
		done <- b.Commit(true)
	}()
	// The disk-health checker reports the hung sync on its next tick.
	var herr error
	for herr == nil {
		select {
		case <-done:
			t.Fatal("the commit finished while its sync hung")
		case <-time.After(10 * time.Millisecond):
		}
		herr = db.Health()
	}
	if !errors.Is(herr, ErrStalled) || !strings.Contains(herr.Error(), "disk is slow") {
		t.Fatalf("Health during the stall = %v", herr)
	}
	stall.Store(false)
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Healthy again once the hold after the last report has passed.
	if err := db.health.err(time.Now().Add(threshold + time.Millisecond)); err != nil {
		t.Fatalf("Health after the stall = %v", err)
	}
}

// TestCleanCloseLeavesNoLogToReplay: Close flushes, so the next Open replays
// nothing (a crash, by contrast, leaves the log to replay).
func TestCleanCloseLeavesNoLogToReplay(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir, Options{Logger: quietLogger{}, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		putState(t, db, "s"+string(rune('a'+i%26)), "value")
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open(dir, Options{Logger: quietLogger{}, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if db.ReplayedAtOpen() {
		t.Error("Open after a clean Close replayed the write-ahead log")
	}
	if e, ok, err := db.GetState(testAddr, "sa"); err != nil || !ok || string(e.Value) != "value" {
		t.Fatalf("after reopen: %v %v %v", e, ok, err)
	}
	_ = db.Close()

	// The signal works: a store that was not closed has a log to replay.
	mem := vfs.NewCrashableMem()
	db, err = Open("db", Options{FS: mem, Logger: quietLogger{}, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	putState(t, db, "s", "v")
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	_ = db.Close()
	db, err = Open("db", Options{FS: crashed, Logger: quietLogger{}, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if !db.ReplayedAtOpen() {
		t.Error("Open after a crash did not replay the write-ahead log")
	}
}

// A write committed without sync is visible at once but lost by a crash;
// after SyncWAL it survives one. (The relay and the egress readers call
// SyncWAL before handing on what they read.)
func TestSyncWALMakesVisibleWritesDurable(t *testing.T) {
	mem := vfs.NewCrashableMem()
	db, err := Open("db", Options{FS: mem, Logger: quietLogger{}, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	write := func(state string) {
		b := db.NewBatch()
		b.PutState(testAddr, state, Entry{Typename: "t", Value: []byte(state), Version: 1})
		if err := b.Commit(false); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := db.GetState(testAddr, state); err != nil || !ok {
			t.Fatalf("%s not visible after its commit: %v", state, err)
		}
	}
	durable := func(state string) bool {
		db2, err := Open("db", Options{FS: mem.CrashClone(vfs.CrashCloneCfg{}), Logger: quietLogger{}, SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer db2.Close()
		_, ok, err := db2.GetState(testAddr, state)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}

	write("a")
	if durable("a") {
		t.Skip("Pebble synced an unsynced commit by itself: nothing to show")
	}
	if err := db.SyncWAL(); err != nil {
		t.Fatal(err)
	}
	if !durable("a") {
		t.Fatal("a write read before SyncWAL was lost by a crash after it")
	}
}
