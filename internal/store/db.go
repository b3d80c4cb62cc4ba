package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// FormatVersion is the version of the layout described in docs/reference/storage.md
// that this build reads and writes. It is stored under the global meta key
// "format" when a store is created. Part of the file format.
//
// The upgrade rule: Open refuses a store whose version is above
// FormatVersion (ErrFormatTooNew) and leaves it untouched. A store with an
// older version is upgraded by Open, in one synced batch that also rewrites
// the "format" record, before anything reads it; every older version must
// keep its upgrade step here for as long as such stores may exist (see
// upgrade). A change that only adds a key space, or adds protobuf fields that
// old readers ignore, needs no new version; a change that older builds would
// misread does.
//
// Versions: 1, the first. 2 puts the arrival number first in inbox keys, so
// that the inbox replays in arrival order rather than grouped by source.
const FormatVersion uint32 = 2

// DefaultPartitions is the partition count of a store created with
// Options.Partitions zero.
const DefaultPartitions = 16

// pebbleFormat is the Pebble format major version stores are created with
// and ratcheted to. Pinned, rather than pebble.FormatNewest, so that a Pebble
// upgrade never rewrites the on-disk format by itself: raising it is a
// deliberate change (it makes older builds unable to open the store).
const pebbleFormat = pebble.FormatValueSeparation

// Options configures Open. The zero value works: a disk store, adopting the
// partition count of an existing store or DefaultPartitions for a new one.
type Options struct {
	// Partitions is the application's partition count P. A new store records
	// it; an existing store must have been created with the same count, or
	// Open fails with ErrPartitionCount. Zero adopts the count of an
	// existing store and creates a new one with DefaultPartitions. Negative
	// values and values above MaxPartitions are an error.
	Partitions int

	// CacheSize is the size of Pebble's block cache in bytes, overriding the
	// default 64 MiB. Zero means the default; negative is an error.
	CacheSize int64

	// MemTableSize is the size of one Pebble memtable in bytes; zero means
	// DefaultMemTableSize. It sets most of the store's fixed disk footprint:
	// Pebble preallocates each write-ahead log file to 110% of it, and keeps
	// up to one live and three recycled log files, so the logs alone may
	// take 4.4 × MemTableSize on disk (docs/reference/storage.md, "Disk footprint").
	// Larger memtables mean fewer, larger flushes.
	MemTableSize uint64

	// PreallocateWAL makes Pebble reserve 110% of MemTableSize on disk for
	// each new write-ahead log file at once, as Pebble does by default. Off
	// (the default here), log files are preallocated 1 MiB at a time as
	// they grow, so a small store stays small (docs/reference/storage.md, "Disk
	// footprint").
	PreallocateWAL bool

	// DiskSlowThreshold is how long one disk write may take before Pebble
	// reports the disk slow; Health then reports ErrStalled for this long
	// after the last report. Zero means DefaultDiskSlowThreshold.
	DiskSlowThreshold time.Duration

	// Retention bounds receipts, audit records, unread egress records, ingress dead letters and
	// idempotency keys;
	// see Retention. The zero value gives the documented defaults.
	Retention Retention

	// SweepInterval is how often the retention sweeper runs. Zero means
	// DefaultSweepInterval; negative means no background sweeper (Sweep may
	// still be called).
	SweepInterval time.Duration

	// Now is the clock retention measures ages with; nil means time.Now.
	Now func() time.Time

	// Metrics, if not nil, receive the sizes of the retained key spaces
	// after each sweep.
	Metrics *Metrics

	// FS is the filesystem the store lives on. Nil means the operating
	// system's (vfs.Default); tests use vfs.NewMem or vfs.NewCrashableMem.
	FS vfs.FS

	// Logger receives Pebble's log lines. Nil means Pebble's default, the
	// standard library's log package.
	Logger pebble.Logger

	// RecordBeside makes the store record its identity in a file beside
	// its directory (RecordName), and Open refuse a missing or empty
	// directory that the record says held a store (ErrStoreMissing),
	// unless NewStore is set. Without it, a directory holding the store's
	// IDFile but no store files is refused all the same (identity.go).
	RecordBeside bool

	// NewStore lets Open create a new empty store where there is evidence
	// that a store was lost; Replaced then names the lost one.
	NewStore bool

	// DirCheckInterval is how often the store checks, besides at every
	// synced commit, that its directory is still there (CheckDir). Zero
	// means DefaultDirCheckInterval; negative means only at commits.
	DirCheckInterval time.Duration

	// ReadOnly opens an existing store for reading only (a backup being
	// looked into): Pebble is opened read-only, nothing in the directory
	// is created, written or removed (no probe file, no identity file, no
	// upgrade, no retention sweep, no flush at Close), and every commit
	// fails. A store that this build would have to upgrade or index first
	// is refused (ErrNeedsWrite): start on a copy of it without ReadOnly.
	ReadOnly bool
}

const (
	defaultCacheSize = 64 << 20

	// DefaultMemTableSize is Options.MemTableSize's default, 8 MiB: a store
	// that holds little takes about 40 MiB of disk, and the group commits of
	// a busy runtime (tens of KiB each) still fill a memtable only every few
	// thousand commits. Pebble's own default, 32 MiB, made each log file
	// 36 MB.
	DefaultMemTableSize = 8 << 20

	// DefaultDiskSlowThreshold is Options.DiskSlowThreshold's default.
	DefaultDiskSlowThreshold = 5 * time.Second

	// DefaultSweepInterval is Options.SweepInterval's default.
	DefaultSweepInterval = time.Minute
)

// withDefaults returns o with every zero field that has a default filled in,
// or an error for a value out of range.
func (o Options) withDefaults() (Options, error) {
	if o.Partitions < 0 || o.Partitions > MaxPartitions {
		return o, fmt.Errorf("store: Options.Partitions is %d, want 0 (adopt) or 1..%d", o.Partitions, MaxPartitions)
	}
	if o.CacheSize < 0 {
		return o, fmt.Errorf("store: Options.CacheSize is %d, want >= 0", o.CacheSize)
	}
	if o.CacheSize == 0 {
		o.CacheSize = defaultCacheSize
	}
	if o.MemTableSize == 0 {
		o.MemTableSize = DefaultMemTableSize
	}
	if o.MemTableSize < 1<<20 || o.MemTableSize >= 4<<30 {
		return o, fmt.Errorf("store: Options.MemTableSize is %d, want 1 MiB to 4 GiB", o.MemTableSize)
	}
	if o.DiskSlowThreshold < 0 {
		return o, fmt.Errorf("store: Options.DiskSlowThreshold is %v, want >= 0", o.DiskSlowThreshold)
	}
	if o.DiskSlowThreshold == 0 {
		o.DiskSlowThreshold = DefaultDiskSlowThreshold
	}
	if o.SweepInterval == 0 {
		o.SweepInterval = DefaultSweepInterval
	}
	if o.DirCheckInterval == 0 {
		o.DirCheckInterval = DefaultDirCheckInterval
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	r, err := o.Retention.withDefaults()
	if err != nil {
		return o, err
	}
	o.Retention = r
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.Logger == nil {
		o.Logger = pebble.DefaultLogger
	}
	return o, nil
}

// DB is the embedded store of one process: one Pebble database holding every
// key space (docs/reference/storage.md). A DB is safe for concurrent use: reads may run
// concurrently with each other and with commits, and see whole commits only. The partition state machines
// never touch a DB; the engine reads from it and writes one Batch per group
// commit.
type DB struct {
	closed     atomic.Bool
	pdb        *pebble.DB
	dir        string
	partitions int
	health     *health
	fsCloser   io.Closer // stops Pebble's disk-health checker
	opts       Options
	scratch    string // a directory Close removes (OpenClusterBackup's)

	sweepMu   sync.Mutex // one sweep at a time
	egressAge egressAges
	stop      chan struct{}
	sweeper   sync.WaitGroup
	// histTouched is the entries given history records since the last
	// sweep (history.go).
	histTouched historyTouched
	// changelogSweep, when set, takes the retention deletions of keys a
	// partition's changelog wrote (cluster mode; retention.go).
	changelogSweep atomic.Pointer[ChangelogSweep]
	// press counts the writes to the spaces the retention bounds since the
	// last sweep, and kickAt is how many start one early (pressure.go).
	press  pressure
	kickAt [retainedSpaces]int64

	id        string          // the store's identity (identity.go)
	preIDSeq  uint64          // the egress positions written before it had one
	lineage   []Ancestor      // the stores it was restored from (restore.go)
	restored  *BackupManifest // the backup this Open took on, or nil
	backingUp sync.Mutex      // one backup at a time (backup.go)
	replaced  string          // the lost store a NewStore start replaced
	recordErr error           // why RecordBeside could not record the store
	watch     *dirWatch
}

// Open opens the store in dir, creating it if it does not exist.
//
// A new store is stamped with FormatVersion and the partition count in one
// synced write. An existing store is checked: Open fails with an error
// wrapping ErrFormatTooNew if it was written by a newer build,
// ErrPartitionCount if Options.Partitions is set and differs, and ErrCorrupt
// if its meta records are missing or malformed. Pebble's own errors (a store
// locked by another process, say) are returned wrapped.
//
// Open fails fast, naming the cause, when the directory cannot be written
// (it writes, syncs and removes a probe file first) and when Pebble's
// recovery meets a disk error (a full disk, say) — rather than hanging in
// Pebble's retries. After a fatal disk error during Open it returns an error
// wrapping ErrFailed; the process should then exit.
func Open(dir string, opts Options) (*DB, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if opts.ReadOnly {
		return openReadOnly(dir, opts)
	}
	replaced, err := checkLost(dir, opts)
	if err != nil {
		return nil, err
	}
	if err := probeWritable(opts.FS, dir); err != nil {
		return nil, err
	}
	h := newHealth(opts.DiskSlowThreshold)
	logger := fatalLogger{Logger: opts.Logger, h: h}
	listener := h.listener(logger)
	fs := opts.FS
	if !opts.PreallocateWAL {
		fs = smallWALPrealloc{fs}
	}
	fs, fsCloser := vfs.WithDiskHealthChecks(fs, opts.DiskSlowThreshold, nil, listener.DiskSlow)
	fs = walGuard{FS: fs, h: h}
	popts := &pebble.Options{
		FS:                 fs,
		CacheSize:          opts.CacheSize,
		MemTableSize:       opts.MemTableSize,
		Logger:             logger,
		EventListener:      &listener,
		FormatMajorVersion: pebbleFormat,
	}
	db, err := openPebble(dir, opts, popts, h, fsCloser)
	if err != nil {
		return nil, err
	}
	if err := db.prepare(); err != nil {
		_ = db.pdb.Close()
		_ = fsCloser.Close()
		return nil, err
	}
	db.replaced = replaced
	if opts.SweepInterval > 0 {
		db.sweeper.Add(1)
		go db.sweepLoop(opts.SweepInterval)
	}
	if opts.DirCheckInterval > 0 {
		db.sweeper.Add(1)
		go db.dirCheckLoop(opts.DirCheckInterval)
	}
	return db, nil
}

// openPebble opens Pebble with popts, failing fast on a recovery stuck in
// Pebble's retries, and returns the DB around it (not yet checked).
func openPebble(dir string, opts Options, popts *pebble.Options, h *health, fsCloser io.Closer) (*DB, error) {
	type result struct {
		pdb *pebble.DB
		err error
	}
	h.opening.Store(true)
	done := make(chan result, 1)
	go func() {
		pdb, err := pebble.Open(dir, popts)
		done <- result{pdb, err}
	}()
	var r result
	select {
	case r = <-done:
	case err := <-h.openErr:
		// Pebble's recovery is stuck retrying; its goroutines stay parked
		// (see health.go) and the caller is expected to exit.
		return nil, fmt.Errorf("store: open %s: %w", dir, err)
	case <-h.failed:
		return nil, fmt.Errorf("store: open %s: %w", dir, h.fatalErr())
	}
	h.opening.Store(false)
	if r.err != nil {
		_ = fsCloser.Close()
		return nil, fmt.Errorf("store: open %s: %w", dir, r.err)
	}
	return &DB{pdb: r.pdb, dir: dir, health: h, fsCloser: fsCloser, opts: opts, stop: make(chan struct{}),
		press: pressure{kick: make(chan struct{}, 1)}, kickAt: opts.Retention.kickAt()}, nil
}

// prepare checks (or stamps) the meta records, brings indexes and the
// identity up to this build, takes on a restored backup (restore.go) and
// writes the identity file.
func (db *DB) prepare() error {
	if err := db.checkMeta(db.opts.Partitions); err != nil {
		return err
	}
	if err := db.indexAudit(); err != nil {
		return err
	}
	if err := db.retireAuditSpaces(); err != nil {
		return err
	}
	if err := db.indexTokens(); err != nil {
		return err
	}
	if err := db.backfillHistory(); err != nil {
		return err
	}
	if err := db.loadIdentity(); err != nil {
		return err
	}
	if err := db.adoptBackup(); err != nil {
		return err
	}
	return db.watchDir()
}

// probeWritable creates dir if needed and writes, syncs and removes a small
// file in it, so that a directory that cannot be written is reported as
// such ("permission denied", "read-only file system", "no space left on
// device") before Pebble starts.
func probeWritable(fs vfs.FS, dir string) error {
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("store: data directory %s: %w", dir, err)
	}
	name := fs.PathJoin(dir, "statefun-write-probe")
	f, err := fs.Create(name, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("store: data directory %s is not writable: %w", dir, err)
	}
	_, err = f.Write([]byte("probe"))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if rerr := fs.Remove(name); err == nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("store: data directory %s is not writable: %w", dir, err)
	}
	return nil
}

// checkMeta stamps a new store or checks an existing one against this build
// and the configured partition count (0 = adopt), and sets db.partitions.
func (db *DB) checkMeta(want int) error {
	format, ok, err := db.metaU32(metaFormat)
	if err != nil {
		return err
	}
	if !ok {
		return db.create(want)
	}
	switch {
	case format > FormatVersion:
		return fmt.Errorf("%w: %s has format %d, this build reads formats up to %d; run a newer build",
			ErrFormatTooNew, db.dir, format, FormatVersion)
	case format < 1:
		return corrupt(metaKey(nil, metaFormat), fmt.Errorf("format %d does not exist", format))
	}
	if format < FormatVersion {
		if err := db.upgrade(format); err != nil {
			return err
		}
	}

	p, ok, err := db.metaU32(metaPartitions)
	if err != nil {
		return err
	}
	switch {
	case !ok:
		return corrupt(metaKey(nil, metaPartitions), errors.New("missing"))
	case p == 0 || p > MaxPartitions:
		return corrupt(metaKey(nil, metaPartitions), fmt.Errorf("partition count %d out of range", p))
	case want != 0 && uint32(want) != p:
		return fmt.Errorf("%w: %s was created with %d partitions, but %d are configured; the partition count cannot change",
			ErrPartitionCount, db.dir, p, want)
	}
	db.partitions = int(p)
	return nil
}

// upgrade brings a store of an older format to FormatVersion in one synced
// batch that also rewrites the "format" record.
func (db *DB) upgrade(from uint32) error {
	b := db.pdb.NewBatch()
	defer b.Close()
	if from < 2 {
		if err := db.upgradeInboxV2(b); err != nil {
			return err
		}
	}
	_ = b.Set(metaKey(nil, metaFormat), appendU32(nil, FormatVersion), nil)
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("store: upgrade %s from format %d to %d: %w", db.dir, from, FormatVersion, err)
	}
	return nil
}

// upgradeInboxV2 rewrites every format-1 inbox key (partition, source, seq)
// as a format-2 key with an arrival number: per partition, in the old key
// order, which is the order a format-1 build would have replayed them.
func (db *DB) upgradeInboxV2(b *pebble.Batch) error {
	lower := []byte{spaceInbox}
	it, err := db.newIter(lower, prefixSuccessor(lower))
	if err != nil {
		return err
	}
	arrival := map[uint16]uint64{}
	for valid := it.First(); valid; valid = it.Next() {
		k := it.Key()
		if len(k) != inboxKeyV1Len {
			return finish(it, corrupt(k, errBadKey))
		}
		p := binary.BigEndian.Uint16(k[1:])
		nk := make([]byte, 0, inboxKeyLen)
		nk = append(nk, k[:3]...)
		nk = binary.BigEndian.AppendUint64(nk, arrival[p])
		nk = append(nk, k[3:]...)
		arrival[p]++
		v, err := it.ValueAndErr()
		if err != nil {
			return finish(it, fmt.Errorf("store: %w", err))
		}
		_ = b.Delete(k, nil)
		_ = b.Set(nk, v, nil)
	}
	return finish(it, nil)
}

// create stamps an empty store with the format version and partition count.
// A store that holds keys but no format record is refused: it was not
// written by this package, or lost its meta.
func (db *DB) create(partitions int) error {
	it, err := db.pdb.NewIter(nil)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	hasData := it.First()
	var first []byte
	if hasData {
		first = append(first, it.Key()...)
	}
	if err := closeIter(it); err != nil {
		return err
	}
	if hasData {
		return corrupt(first, fmt.Errorf("%s holds data but no format record", db.dir))
	}
	if partitions == 0 {
		partitions = DefaultPartitions
	}
	b := db.pdb.NewBatch()
	defer b.Close()
	_ = b.Set(metaKey(nil, metaFormat), appendU32(nil, FormatVersion), nil)
	_ = b.Set(metaKey(nil, metaPartitions), appendU32(nil, uint32(partitions)), nil)
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("store: stamp new store %s: %w", db.dir, err)
	}
	db.partitions = partitions
	return nil
}

// metaU32 reads a u32 global meta record.
func (db *DB) metaU32(name string) (v uint32, ok bool, err error) {
	key := metaKey(nil, name)
	val, found, err := db.get(key)
	if err != nil || !found {
		return 0, false, err
	}
	v, err = decodeU32(val)
	if err != nil {
		return 0, false, corrupt(key, err)
	}
	return v, true, nil
}

// Partitions returns the store's partition count P.
func (db *DB) Partitions() int { return db.partitions }

// SyncWAL returns once every write a reader can see so far is durable.
// Pebble shows a committed batch to readers as soon as it is applied,
// before its write-ahead log record is synced: the committer waits for the
// sync, a reader does not. A reader that hands what it read to the world
// outside the store (an egress relay, an egress consumer) calls SyncWAL
// first, so that nothing it hands on can be lost by a crash. The log is
// sequential, so one synced record after the ones read covers them; the
// group commits' own syncs usually carry it.
func (db *DB) SyncWAL() error {
	if err := db.pdb.LogData(nil, pebble.Sync); err != nil {
		return fmt.Errorf("store: sync the write-ahead log: %w", err)
	}
	return nil
}

// Close closes the store: it stops the retention sweeper, flushes the
// memtables (so that the next Open has no write-ahead log to replay) and
// closes Pebble, syncing the write-ahead log, so writes committed without
// sync are durable once Close returns nil. Every iteration must have ended;
// no other method may be called after Close. Closing a closed DB does
// nothing and returns nil.
//
// After a fatal error (Health wraps ErrFailed) Close touches nothing and
// returns that error: Pebble cannot be closed then, and what was
// acknowledged is already durable. While background work fails (a full
// disk) Close skips the flush, which could not finish.
func (db *DB) Close() error {
	if db.closed.Swap(true) {
		return nil
	}
	if db.scratch != "" {
		defer os.RemoveAll(db.scratch)
	}
	// A backup in progress finishes first: Pebble may not close under
	// its checkpoint.
	db.backingUp.Lock()
	defer db.backingUp.Unlock()
	close(db.stop)
	db.sweeper.Wait()
	if err := db.health.fatalErr(); err != nil {
		return err
	}
	if !db.opts.ReadOnly && db.health.background() == nil {
		if err := db.flush(); err != nil {
			return err
		}
	}
	if err := db.pdb.Close(); err != nil {
		return fmt.Errorf("store: close: %w", err)
	}
	_ = db.fsCloser.Close()
	return nil
}

// flush flushes the memtables, giving up (and leaving Pebble open) if the
// flush meets a fatal error or keeps failing, which Pebble would retry
// forever.
func (db *DB) flush() error {
	done := make(chan error, 1)
	go func() { done <- db.pdb.Flush() }()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("store: flush on close: %w", err)
			}
			return nil
		case <-db.health.failed:
			return db.health.fatalErr()
		case <-tick.C:
			if err := db.health.background(); err != nil {
				return fmt.Errorf("store: flush on close: %w; the store was not closed", err)
			}
		}
	}
}
