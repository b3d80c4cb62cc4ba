package store

import (
	"fmt"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// walGuard is a filesystem on which an error creating, writing or syncing
// a write-ahead log file fails the store at once: the store records the
// cause (Health, Failed) and the goroutine that met it parks for good, as
// fatalLogger does with Pebble's Fatalf (see health.go). Pebble treats such
// an error as fatal anyway, but on two paths it panics instead of calling
// Fatalf — closing the previous log and creating the next one when it
// rotates the log (a memtable filled by a commit, a flush, the flush of
// Close) — and that panic unwinds through a mutex Pebble had released: the
// runtime then dies with "fatal error: sync: unlock of unlocked mutex",
// which no recover catches and which hides the cause. Parking before
// Pebble sees the error keeps every path on the store's one policy.
//
// It wraps the filesystem outside the disk-health checks, so that a parked
// goroutine is not an operation in progress reported as a slow disk.
type walGuard struct {
	vfs.FS
	h *health
}

func isWAL(name string) bool { return strings.HasSuffix(name, ".log") }

// fatal records err as the store's fatal error and never returns.
func (g walGuard) fatal(op, name string, err error) {
	g.h.fail(fmt.Errorf("write-ahead log %s %s: %w", op, name, err))
	select {}
}

func (g walGuard) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := g.FS.Create(name, category)
	if !isWAL(name) {
		return f, err
	}
	if err != nil {
		g.fatal("create", name, err)
	}
	return walFile{File: f, g: g, name: name}, nil
}

func (g walGuard) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := g.FS.ReuseForWrite(oldname, newname, category)
	if !isWAL(newname) {
		return f, err
	}
	if err != nil {
		g.fatal("reuse", newname, err)
	}
	return walFile{File: f, g: g, name: newname}, nil
}

// Unwrap returns the wrapped filesystem.
func (g walGuard) Unwrap() vfs.FS { return g.FS }

// walFile is a write-ahead log file opened for writing on a walGuard.
type walFile struct {
	vfs.File
	g    walGuard
	name string
}

func (f walFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	if err != nil {
		f.g.fatal("write", f.name, err)
	}
	return n, nil
}

func (f walFile) WriteAt(p []byte, off int64) (int, error) {
	n, err := f.File.WriteAt(p, off)
	if err != nil {
		f.g.fatal("write", f.name, err)
	}
	return n, nil
}

func (f walFile) Sync() error {
	if err := f.File.Sync(); err != nil {
		f.g.fatal("sync", f.name, err)
	}
	return nil
}

func (f walFile) SyncData() error {
	if err := f.File.SyncData(); err != nil {
		f.g.fatal("sync", f.name, err)
	}
	return nil
}

func (f walFile) SyncTo(length int64) (bool, error) {
	full, err := f.File.SyncTo(length)
	if err != nil {
		f.g.fatal("sync", f.name, err)
	}
	return full, nil
}
