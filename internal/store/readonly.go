package store

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"
)

// ErrNeedsWrite is wrapped by the error Open returns with Options.ReadOnly
// for a store that this build must write before it can read it: one of an
// older format or written before an index existed, or a directory that
// holds no store.
var ErrNeedsWrite = errors.New("store: the store cannot be read without writing to it")

// openReadOnly opens an existing store for reading only (Options.ReadOnly).
// Nothing in dir is created, written or removed: Pebble opens read-only
// (it replays the write-ahead log into memory and never flushes), no probe
// or identity file is written, no sweeper runs. Pebble takes its LOCK file,
// which a backup holds already (backup.go), so a backup's directory stays
// as it was.
func openReadOnly(dir string, opts Options) (*DB, error) {
	switch fi, err := opts.FS.Stat(dir); {
	case errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("%w: %s does not exist", ErrNeedsWrite, dir)
	case err != nil:
		return nil, fmt.Errorf("store: data directory %s: %w", dir, err)
	case !fi.IsDir():
		return nil, fmt.Errorf("store: %s is not a directory", dir)
	}
	if has, _, err := hasStoreFiles(opts.FS, dir); err != nil {
		return nil, err
	} else if !has {
		return nil, fmt.Errorf("%w: %s holds no store (no MANIFEST file)", ErrNeedsWrite, dir)
	}
	h := newHealth(opts.DiskSlowThreshold)
	logger := fatalLogger{Logger: opts.Logger, h: h}
	listener := h.listener(logger)
	base := opts.FS
	if base == vfs.Default {
		base = readLockFS{base}
	}
	fs, fsCloser := vfs.WithDiskHealthChecks(base, opts.DiskSlowThreshold, nil, listener.DiskSlow)
	popts := &pebble.Options{
		FS:            fs,
		CacheSize:     opts.CacheSize,
		MemTableSize:  opts.MemTableSize,
		Logger:        logger,
		EventListener: &listener,
		ReadOnly:      true,
	}
	db, err := openPebble(dir, opts, popts, h, fsCloser)
	if err != nil {
		return nil, err
	}
	if err := db.checkReadable(); err != nil {
		_ = db.pdb.Close()
		_ = fsCloser.Close()
		return nil, err
	}
	return db, nil
}

// checkReadable checks, for a read-only open, what prepare would check or
// write: the store's format and partition count, its indexes and its
// identity. What would need a write is refused with ErrNeedsWrite.
func (db *DB) checkReadable() error {
	format, ok, err := db.metaU32(metaFormat)
	if err != nil {
		return err
	}
	switch {
	case !ok:
		return fmt.Errorf("%w: %s holds no format record (an empty or foreign store)", ErrNeedsWrite, db.dir)
	case format > FormatVersion:
		return fmt.Errorf("%w: %s has format %d, this build reads formats up to %d; run a newer build",
			ErrFormatTooNew, db.dir, format, FormatVersion)
	case format < FormatVersion:
		return fmt.Errorf("%w: %s has format %d and this build reads it only after upgrading it to %d; start on a copy of it without --read-only",
			ErrNeedsWrite, db.dir, format, FormatVersion)
	}
	for _, name := range []string{metaAuditIndexed2, metaTokensIndexed, metaHistory} {
		if _, ok, err := db.metaU32(name); err != nil {
			return err
		} else if !ok {
			return fmt.Errorf("%w: %s was written by an older build and lacks the %q index, which this build writes at its first start; start on a copy of it without --read-only",
				ErrNeedsWrite, db.dir, name)
		}
	}
	p, ok, err := db.metaU32(metaPartitions)
	switch {
	case err != nil:
		return err
	case !ok || p == 0 || p > MaxPartitions:
		return corrupt(metaKey(nil, metaPartitions), fmt.Errorf("partition count %d missing or out of range", p))
	case db.opts.Partitions != 0 && uint32(db.opts.Partitions) != p:
		return fmt.Errorf("%w: %s was created with %d partitions, but %d are configured; the partition count cannot change",
			ErrPartitionCount, db.dir, p, db.opts.Partitions)
	}
	db.partitions = int(p)
	// A store of an older build may have no identity yet: it has none
	// here either (it is given one by a writable start).
	return db.readIdentity()
}

// readLockFS takes Pebble's directory lock without writing: Pebble's own
// Lock creates (truncates) the LOCK file, which changes its modification
// time, and adds it to a directory without one. This one opens an
// existing LOCK file read-only and takes a shared (read) lock on it,
// which a writing Pebble process's exclusive lock excludes; a directory
// without a LOCK file is not locked at all.
type readLockFS struct{ vfs.FS }

func (readLockFS) Lock(name string) (io.Closer, error) {
	f, err := os.Open(name)
	if errors.Is(err, os.ErrNotExist) {
		return io.NopCloser(nil), nil
	}
	if err != nil {
		return nil, err
	}
	spec := unix.Flock_t{Type: unix.F_RDLCK, Whence: io.SeekStart}
	if err := unix.FcntlFlock(f.Fd(), unix.F_SETLK, &spec); err != nil {
		f.Close()
		return nil, fmt.Errorf("store: %s is locked by a process that writes it (a running statefun?): %w", name, err)
	}
	return f, nil
}

// ReadOnly reports whether the store was opened with Options.ReadOnly.
func (db *DB) ReadOnly() bool { return db.opts.ReadOnly }
