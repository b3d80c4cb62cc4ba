package store

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// A store's identity, and how the store notices that its directory is gone.
//
// Every store has an identity: 16 random bytes created with it and kept in
// the global meta record "store-id" (a store written by an older build gets
// one when this build first opens it). Whatever the store hands to the
// world outside with its name on it — the exactly-once Kafka egress's
// position markers — carries the identity, so that a store tells its own
// records from those of another store (a new or restored data directory)
// by identity rather than by numbers that a new store reaches too.
//
// The identity is also written to IDFile in the data directory. Open keeps
// the device and inode numbers of the directory and of that file; a synced
// commit, and a check every Options.DirCheckInterval, compare them with
// the path again. A directory that was deleted (rm -rf), emptied or
// replaced under the running process no longer matches: Pebble still
// writes, into files nobody can open again, so the store fails at once
// (Health and Failed report a *DirLostError) instead of acknowledging work
// that a restart will not find.
//
// With Options.RecordBeside, the store also records its identity in a file
// beside its directory (RecordName). Open then refuses a missing or empty
// directory that the record says held a store, and a directory that holds
// IDFile but no store files, unless Options.NewStore is set: a new empty
// store in place of a lost one must be a decision (ErrStoreMissing).

// IDFile is the name of the file in the data directory holding the store's
// identity.
const IDFile = "STATEFUN-STORE"

// Names of the identity's global meta records. Part of the file format.
const (
	// metaStoreID is the store's identity: 16 random bytes.
	metaStoreID = "store-id"
	// metaIDEgressSeq is the highest egress sequence number written before
	// the store had an identity: 0 for a store created with one, and for
	// a store of an older build the MaxEgressSeq when it got one. Records
	// the store handed out without its identity have positions up to it.
	metaIDEgressSeq = "id-egress-seq" // value: u64 BE
)

// Errors about the data directory.
var (
	// ErrDirLost is wrapped by the error Health returns (with ErrFailed)
	// once the data directory was deleted or replaced under the running
	// store (see DirLostError).
	ErrDirLost = errors.New("store: the data directory was deleted or replaced")

	// ErrStoreMissing is wrapped by the error Open returns when the data
	// directory holds no store but there is evidence that it held one (see
	// Options.NewStore).
	ErrStoreMissing = errors.New("store: the data directory lost its store")
)

// DirLostError says that the data directory was deleted or replaced while
// the store ran, and since when acknowledged work may be lost with it.
type DirLostError struct {
	// Dir is the data directory.
	Dir string
	// Why says what changed: the directory is gone, or another one is in
	// its place, or IDFile is gone.
	Why string
	// LastSeen is the last time the directory was checked and found
	// intact: work acknowledged after it may be lost.
	LastSeen time.Time
	// NoticedAt is when the change was noticed.
	NoticedAt time.Time
}

func (e *DirLostError) Error() string {
	return fmt.Sprintf("store: the data directory %s was deleted or replaced (%s; noticed at %s): work acknowledged since %s, when it was last seen intact, may be lost; the store refuses all writes",
		e.Dir, e.Why, e.NoticedAt.UTC().Format(time.RFC3339Nano), e.LastSeen.UTC().Format(time.RFC3339Nano))
}

// Unwrap makes errors.Is(err, ErrDirLost) hold.
func (e *DirLostError) Unwrap() error { return ErrDirLost }

// DefaultDirCheckInterval is Options.DirCheckInterval's default.
const DefaultDirCheckInterval = time.Second

// RecordName returns the path of the record that Options.RecordBeside
// keeps for a data directory: a hidden file beside it, in its parent.
func RecordName(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = filepath.Clean(dir)
	}
	return filepath.Join(filepath.Dir(abs), "."+filepath.Base(abs)+".statefun-store")
}

// ID returns the store's identity, 32 hexadecimal digits.
func (db *DB) ID() string { return db.id }

// PreIDEgressSeq returns the highest egress position the store wrote
// before it had an identity (0 for a store created with one): records it
// delivered without its identity have positions up to it.
func (db *DB) PreIDEgressSeq() uint64 { return db.preIDSeq }

// Replaced returns the identity of the store that Open found recorded for
// this directory and replaced by a new empty one (Options.NewStore), or
// "" when it replaced none.
func (db *DB) Replaced() string { return db.replaced }

// RecordErr returns why Options.RecordBeside could not record the store
// beside its directory (the parent is not writable, say), or nil. The
// store works; only a later deletion of the directory would not be noticed
// at the next start.
func (db *DB) RecordErr() error { return db.recordErr }

// readIdentity reads the store's identity, its pre-identity egress
// position and its lineage (restore.go); db.id stays "" when the store has
// no identity yet.
func (db *DB) readIdentity() error {
	key := metaKey(nil, metaStoreID)
	val, ok, err := db.get(key)
	if err != nil || !ok {
		return err
	}
	if len(val) != 16 {
		return corrupt(key, fmt.Errorf("store identity of %d bytes, want 16", len(val)))
	}
	db.id = hex.EncodeToString(val)
	seqKey := metaKey(nil, metaIDEgressSeq)
	v, ok, err := db.get(seqKey)
	if err != nil {
		return err
	}
	if ok {
		if len(v) != 8 {
			return corrupt(seqKey, errors.New("not a u64"))
		}
		db.preIDSeq = binary.BigEndian.Uint64(v)
	}
	return db.readLineage()
}

// newIdentity returns 16 random bytes.
func newIdentity() ([]byte, error) {
	id := make([]byte, 16)
	if _, err := io.ReadFull(rand.Reader, id); err != nil {
		return nil, fmt.Errorf("store: a store identity: %w", err)
	}
	return id, nil
}

// loadIdentity reads the store's identity, giving it one if it has none.
func (db *DB) loadIdentity() error {
	if err := db.readIdentity(); err != nil || db.id != "" {
		return err
	}
	key := metaKey(nil, metaStoreID)
	id, err := newIdentity()
	if err != nil {
		return err
	}
	seq, err := db.MaxEgressSeq()
	if err != nil {
		return err
	}
	b := db.pdb.NewBatch()
	defer b.Close()
	_ = b.Set(key, id, nil)
	_ = b.Set(metaKey(nil, metaIDEgressSeq), binary.BigEndian.AppendUint64(nil, seq), nil)
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("store: record the identity of %s: %w", db.dir, err)
	}
	db.id, db.preIDSeq = hex.EncodeToString(id), seq
	return nil
}

// fileID is what tells one file or directory from another at the same
// path: its device and inode numbers. ok is false on a filesystem that
// does not give them (an in-memory one, in tests).
type fileID struct {
	dev, ino uint64
	ok       bool
}

func idOf(fi os.FileInfo) fileID {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fileID{dev: uint64(st.Dev), ino: uint64(st.Ino), ok: true}
	}
	return fileID{}
}

// dirWatch remembers the data directory and its IDFile as Open found them.
type dirWatch struct {
	fs       vfs.FS
	dir      string
	idPath   string // dir's IDFile, joined once: check runs on every synced commit
	dirID    fileID
	fileID   fileID
	mu       sync.Mutex
	lastSeen time.Time
}

// check compares the IDFile, and with full the directory too, with what
// Open found: nil while they are the same, or a *DirLostError. The IDFile
// alone tells a deleted, emptied or replaced directory (its path no longer
// leads to the same file), at the cost of one stat call; the directory's
// own inode says which of these it was.
func (w *dirWatch) check(now time.Time, full bool) error {
	why := ""
	switch fi, err := w.fs.Stat(w.idPath); {
	case err != nil:
		why = fmt.Sprintf("its %s file is gone: %v", IDFile, err)
		full = true
	case idOf(fi) != w.fileID:
		why = fmt.Sprintf("another %s file is in its place", IDFile)
		full = true
	}
	if full {
		switch fi, err := w.fs.Stat(w.dir); {
		case err != nil:
			why = fmt.Sprintf("the directory is gone: %v", err)
		case !fi.IsDir():
			why = "it is no longer a directory"
		case idOf(fi) != w.dirID:
			why = "another directory is in its place"
		case why != "":
			why += " (was the directory emptied?)"
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if why == "" {
		w.lastSeen = now
		return nil
	}
	return &DirLostError{Dir: w.dir, Why: why, LastSeen: w.lastSeen, NoticedAt: now}
}

// CheckDir checks that the data directory is still the one Open opened,
// and fails the store (Health and Failed report a *DirLostError, wrapping
// ErrFailed and ErrDirLost) if it is not. A background check calls it
// every Options.DirCheckInterval; synced commits make the one-stat form of
// it (checkDir).
func (db *DB) CheckDir() error { return db.checkDir(true) }

func (db *DB) checkDir(full bool) error {
	if err := db.health.fatalErr(); err != nil {
		return err
	}
	if db.watch == nil {
		return nil
	}
	if err := db.watch.check(time.Now(), full); err != nil {
		db.health.fail(err)
		return db.health.fatalErr()
	}
	return nil
}

// dirCheckLoop runs CheckDir every interval until Close or a failure.
func (db *DB) dirCheckLoop(interval time.Duration) {
	defer db.sweeper.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-db.stop:
			return
		case <-db.health.failed:
			return
		case <-t.C:
			_ = db.CheckDir()
		}
	}
}

// hasStoreFiles reports whether dir holds a Pebble store (a MANIFEST) and
// the identity in its IDFile ("" when it has none).
func hasStoreFiles(fs vfs.FS, dir string) (store bool, id string, err error) {
	names, err := fs.List(dir)
	if errors.Is(err, os.ErrNotExist) {
		return false, "", nil
	}
	if err != nil {
		return false, "", fmt.Errorf("store: data directory %s: %w", dir, err)
	}
	for _, n := range names {
		if strings.HasPrefix(n, "MANIFEST-") {
			store = true
		}
	}
	id, err = readIDFile(fs, fs.PathJoin(dir, IDFile))
	return store, id, err
}

// readIDFile returns the identity in an IDFile or a record beside a
// directory, "" when there is no such file.
func readIDFile(fs vfs.FS, name string) (string, error) {
	f, err := fs.Open(name)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("store: %s: %w", name, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return "", fmt.Errorf("store: %s: %w", name, err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	id := strings.TrimSpace(strings.TrimPrefix(line, "statefun store "))
	if len(id) != 32 {
		return "", fmt.Errorf("store: %s does not hold a store identity (%q); remove it if it is not the record of a store", name, line)
	}
	if _, err := hex.DecodeString(id); err != nil {
		return "", fmt.Errorf("store: %s does not hold a store identity (%q); remove it if it is not the record of a store", name, line)
	}
	return id, nil
}

// writeIDFile writes the identity to name, durably (writeFileSynced).
func writeIDFile(fs vfs.FS, name, id, note string) error {
	return writeFileSynced(fs, name, fmt.Appendf(nil, "statefun store %s\n%s", id, note))
}

// checkLost refuses, before anything is created, a data directory without
// a store where there is evidence of one (unless opts.NewStore), and
// returns the identity of the store the evidence names ("" for none).
func checkLost(dir string, opts Options) (string, error) {
	hasStore, id, err := hasStoreFiles(opts.FS, dir)
	if err != nil || hasStore {
		return "", err
	}
	evidence := ""
	if id != "" {
		evidence = fmt.Sprintf("it holds the %s file of store %s but none of its files", IDFile, id)
	} else if opts.RecordBeside {
		rec := RecordName(dir)
		rid, err := readIDFile(opts.FS, rec)
		if err != nil {
			return "", err
		}
		if rid != "" {
			id = rid
			evidence = fmt.Sprintf("%s records that store %s was there", rec, rid)
		}
	}
	if evidence == "" {
		return "", nil
	}
	if !opts.NewStore {
		return "", fmt.Errorf("%w: %s holds no store, but %s: it was deleted, emptied or is not mounted. Restore it (or mount it), or start a new empty store in its place with --new-store (everything the old store held is then gone for good)",
			ErrStoreMissing, dir, evidence)
	}
	return id, nil
}

// watchDir writes the IDFile (and the record beside the directory, with
// Options.RecordBeside) and remembers the directory as it is now.
func (db *DB) watchDir() error {
	fs := db.opts.FS
	name := fs.PathJoin(db.dir, IDFile)
	have, err := readIDFile(fs, name)
	if err != nil || have != db.id {
		// Missing (a new store, or one of an older build), unreadable, or
		// another store's (copied files): this store's identity it is.
		if err := writeIDFile(fs, name, db.id, "This directory holds a statefun store; this file names it. Do not remove it while statefun runs.\n"); err != nil {
			return fmt.Errorf("store: write %s: %w", name, err)
		}
	}
	if db.opts.RecordBeside {
		rec := RecordName(db.dir)
		if have, err := readIDFile(fs, rec); err != nil || have != db.id {
			if err := writeIDFile(fs, rec, db.id, "statefun keeps this record of the store in the directory beside it, to notice at a start that the store was deleted.\n"); err != nil {
				db.recordErr = fmt.Errorf("store: record the store beside its directory in %s: %w", rec, err)
			}
		}
	}
	dfi, err := fs.Stat(db.dir)
	if err != nil {
		return fmt.Errorf("store: data directory %s: %w", db.dir, err)
	}
	ffi, err := fs.Stat(name)
	if err != nil {
		return fmt.Errorf("store: %s: %w", name, err)
	}
	db.watch = &dirWatch{fs: fs, dir: db.dir, idPath: fs.PathJoin(db.dir, IDFile), dirID: idOf(dfi), fileID: idOf(ffi), lastSeen: time.Now()}
	return nil
}
