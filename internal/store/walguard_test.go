package store

import (
	"errors"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// TestWALRotationErrorFailsStore: a sync of the write-ahead log that fails
// while Pebble rotates the log (here the flush of a clean Close; a full
// memtable does the same in a commit) fails the store, as a failed commit
// does. Pebble panics on that path instead of calling Fatalf, with a mutex
// it had released, and the process died with "fatal error: sync: unlock
// of unlocked mutex" and no cause. Found by the simulation (internal/sim).
func TestWALRotationErrorFailsStore(t *testing.T) {
	mem := vfs.NewCrashableMem()
	var full atomic.Bool
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if full.Load() && strings.HasSuffix(op.Path, ".log") &&
			(op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData || op.Kind == errorfs.OpFileSyncTo) {
			return enospc
		}
		return nil
	}))
	db, err := Open("db", Options{FS: fs, Logger: quietLogger{}, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	putState(t, db, "before", "kept")
	full.Store(true)
	err = db.Close()
	if !errors.Is(err, ErrFailed) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Close = %v, want ErrFailed with no space left on device", err)
	}
	if herr := db.Health(); !errors.Is(herr, ErrFailed) {
		t.Fatalf("Health = %v, want ErrFailed", herr)
	}
	db2, err := Open("db", Options{FS: mem.CrashClone(vfs.CrashCloneCfg{}), Logger: quietLogger{}, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	if e, ok, err := db2.GetState(testAddr, "before"); err != nil || !ok || string(e.Value) != "kept" {
		t.Fatalf("after restart: %v %v %v", e, ok, err)
	}
}
