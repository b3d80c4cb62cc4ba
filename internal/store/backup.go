package store

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"
)

// Backups of a running store.
//
// Backup writes a consistent copy of the store while it serves traffic:
// Pebble's checkpoint, which syncs the write-ahead log, then copies the
// WAL, the MANIFEST and the OPTIONS file and hard-links the immutable
// sstables (copies them when the destination is on another filesystem).
// Commits go on meanwhile; the checkpoint holds exactly the commits
// applied before it, each whole. Then Backup opens the copy read-only,
// reads its identity, format, positions and partition commits, checksums
// every file and writes the manifest (BackupManifestName) last, synced:
// a directory without it is not a complete backup.
//
// A backup holds an empty LOCK file, so that opening it read-only (which
// takes Pebble's lock) creates nothing in it. Restoring is starting on a
// copy of it: restore.go says what the first start does.

// BackupManifestName is the name of a backup's manifest, in its directory.
const BackupManifestName = "statefun-backup.json"

// backupKind and backupManifestVersion mark a manifest this build reads.
const (
	backupKind            = "statefun-backup"
	backupManifestVersion = 1
)

// Errors of Backup.
var (
	// ErrBackupRunning is returned by Backup while another backup of the
	// store runs.
	ErrBackupRunning = errors.New("store: a backup is already running; wait for it to finish")
	// ErrBackupDest is wrapped by the error Backup returns for a
	// destination it refuses: not absolute, not empty, no parent.
	ErrBackupDest = errors.New("store: backup destination refused")
	// ErrNoRoom is wrapped by the error Backup returns when the
	// destination's filesystem lacks room for the backup.
	ErrNoRoom = errors.New("store: no room for the backup")
	// ErrBackupInvalid is wrapped by the error VerifyBackup returns for a
	// backup that does not check out.
	ErrBackupInvalid = errors.New("store: the backup is not valid")
)

// BackupManifest describes a backup: what store it copies, the point in
// time it holds, and its files. It is written as JSON to
// BackupManifestName.
type BackupManifest struct {
	// Kind is "statefun-backup"; Version the manifest's version, 1.
	Kind    string `json:"kind"`
	Version int    `json:"version"`
	// Store is the identity of the store copied.
	Store string `json:"store"`
	// Lineage is the stores it was restored from, nearest first.
	Lineage []Ancestor `json:"lineage,omitempty"`
	// Format is the store's format version (docs/reference/storage.md).
	Format uint32 `json:"format"`
	// Partitions is the store's partition count.
	Partitions int `json:"partitions"`
	// DataDir is the directory of the store copied, and Dir the backup's,
	// both on the host of the runtime that wrote it.
	DataDir string `json:"dataDir"`
	Dir     string `json:"dir"`
	// TakenAt is the backup's point in time: every commit acknowledged
	// before it is in the backup.
	TakenAt time.Time `json:"takenAt"`
	// CheckpointMillis is how long the checkpoint took; TotalMillis the
	// whole backup, checksums included.
	CheckpointMillis int64 `json:"checkpointMillis"`
	TotalMillis      int64 `json:"totalMillis"`
	// EgressPosition is the highest egress position written.
	EgressPosition uint64 `json:"egressPosition"`
	// Commits is the last commit id of each partition (its checkpoint id
	// in the state API), by partition.
	Commits []uint64 `json:"commits"`
	// Sources is how far each Kafka ingress had consumed each topic
	// partition: a restored store resumes there.
	Sources []BackupSource `json:"sources,omitempty"`
	// Bytes is the size of the files; Files each of them.
	Bytes int64        `json:"bytes"`
	Files []BackupFile `json:"files"`
	// Cluster, in a cluster node's backup, is the node's part of a
	// cluster backup (clusterbackup.go): the partitions it served, each
	// with the positions it is at. The node's store holds copies of other
	// partitions too (a warm cache of partitions it owned before): only
	// the ones listed here belong to the cluster backup.
	Cluster *ClusterPart `json:"cluster,omitempty"`
}

// BackupSource is a Kafka source position in a backup.
type BackupSource struct {
	Ingress   string `json:"ingress"`
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Next      int64  `json:"next"`
}

// BackupFile is one file of a backup.
type BackupFile struct {
	Name   string `json:"name"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// BackupOptions tune Backup.
type BackupOptions struct {
	// Reserve is the free space, in bytes, that must be left on the data
	// directory's filesystem after the backup when the backup is written
	// there (the disk guard's reserve): a backup never takes the room the
	// runtime needs to go on committing.
	Reserve int64
	// Cluster, on a cluster node, makes the backup a node's part of a
	// cluster backup: the manifest records Cluster with the position of
	// each of Cluster.Partitions, read from the checkpoint itself.
	Cluster *ClusterPart
}

// NoRoomError says that the destination lacks room for a backup.
type NoRoomError struct {
	Dir        string
	Need, Free uint64
	Reserve    int64
	Cause      error // the write that failed, if the room ran out during it
}

func (e *NoRoomError) Error() string {
	if e.Cause != nil {
		return fmt.Sprintf("store: no room for the backup in %s: %v; nothing was left there. Free space or choose another filesystem", e.Dir, e.Cause)
	}
	msg := fmt.Sprintf("store: no room for the backup in %s: it needs about %s and %s are free", e.Dir, mib(e.Need), mib(e.Free))
	if e.Reserve > 0 {
		msg += fmt.Sprintf(", of which %s are the data directory's reserve (--disk-reserve)", mib(uint64(e.Reserve)))
	}
	return msg + ". Free space or choose another filesystem"
}

// Unwrap makes errors.Is(err, ErrNoRoom) hold.
func (e *NoRoomError) Unwrap() error { return ErrNoRoom }

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// Backup writes a consistent copy of the store to dir, an absolute path
// that does not exist or is an empty directory, on the filesystem of the
// store (the host the runtime runs on), while commits go on. One backup
// runs at a time (ErrBackupRunning). It returns the backup's manifest.
func (db *DB) Backup(dir string, o BackupOptions) (*BackupManifest, error) {
	if db.opts.ReadOnly {
		return nil, fmt.Errorf("%w: the store is open read-only; copy its directory instead", ErrBackupDest)
	}
	if !db.backingUp.TryLock() {
		if db.closed.Load() {
			return nil, fmt.Errorf("store: backup: the store is closed")
		}
		return nil, ErrBackupRunning
	}
	defer db.backingUp.Unlock()
	if db.closed.Load() {
		return nil, fmt.Errorf("store: backup: the store is closed")
	}
	if err := db.health.fatalErr(); err != nil {
		return nil, err
	}
	fs := db.opts.FS
	if err := checkBackupDest(fs, db.dir, dir); err != nil {
		return nil, err
	}
	if err := db.checkRoom(dir, o.Reserve); err != nil {
		return nil, err
	}
	start := time.Now()
	// An empty directory is taken: the checkpoint makes its own. A failed
	// backup leaves it as it found it.
	_, statErr := fs.Stat(dir)
	existed := statErr == nil
	if err := fs.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s: %v", ErrBackupDest, dir, err)
	}
	undo := func() {
		_ = fs.RemoveAll(dir)
		if existed {
			_ = fs.MkdirAll(dir, 0o755)
		}
	}
	takenAt := time.Now().UTC()
	if err := db.pdb.Checkpoint(dir, pebble.WithFlushedWAL()); err != nil {
		undo()
		if errors.Is(err, syscall.ENOSPC) {
			return nil, &NoRoomError{Dir: dir, Cause: err}
		}
		return nil, fmt.Errorf("store: backup to %s: %w", dir, err)
	}
	checkpointed := time.Since(start)
	m, err := writeBackupManifest(fs, dir, db.dir, db.opts.Logger, takenAt, o.Cluster, func(m *BackupManifest) error {
		if m.Store != db.id {
			return fmt.Errorf("store: the backup in %s names store %s, this is %s", dir, m.Store, db.id)
		}
		m.CheckpointMillis = checkpointed.Milliseconds()
		return nil
	}, start)
	if err != nil {
		undo()
		if errors.Is(err, syscall.ENOSPC) {
			return nil, &NoRoomError{Dir: dir, Cause: err}
		}
		return nil, err
	}
	return m, nil
}

// checkBackupDest refuses a destination that is not absolute, is inside
// the data directory, exists and is not an empty directory, or whose
// parent does not exist.
func checkBackupDest(fs vfs.FS, dataDir, dir string) error {
	if dir == "" || !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
		return fmt.Errorf("%w: %q is not a clean absolute path; give the directory on the runtime's host to write the backup to, e.g. /var/backups/statefun/2026-12-02", ErrBackupDest, dir)
	}
	if abs, err := filepath.Abs(dataDir); err == nil && (dir == abs || strings.HasPrefix(dir, abs+string(filepath.Separator))) {
		return fmt.Errorf("%w: %s is inside the data directory %s; choose a directory outside it", ErrBackupDest, dir, abs)
	}
	fi, err := fs.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		pfi, err := fs.Stat(filepath.Dir(dir))
		if err != nil || !pfi.IsDir() {
			return fmt.Errorf("%w: the parent of %s is not a directory on the runtime's host; create it first", ErrBackupDest, dir)
		}
		return nil
	case err != nil:
		return fmt.Errorf("%w: %s: %v", ErrBackupDest, dir, err)
	case !fi.IsDir():
		return fmt.Errorf("%w: %s exists and is not a directory", ErrBackupDest, dir)
	}
	names, err := fs.List(dir)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrBackupDest, dir, err)
	}
	if len(names) > 0 {
		return fmt.Errorf("%w: %s is not empty (it holds %d entries, e.g. %s); a backup is written to a new or empty directory only", ErrBackupDest, dir, len(names), names[0])
	}
	return nil
}

// checkRoom refuses a backup that would not fit: on the data directory's
// filesystem the sstables are hard-linked, so the new bytes are about the
// write-ahead log, and the disk guard's reserve must stay free; on
// another, the store's whole size. Only for the operating system's
// filesystem.
func (db *DB) checkRoom(dir string, reserve int64) error {
	if db.opts.FS != vfs.Default {
		return nil
	}
	parent := filepath.Dir(dir)
	var st unix.Statfs_t
	if err := unix.Statfs(parent, &st); err != nil {
		return nil // the checkpoint reports what is wrong
	}
	free := st.Bavail * uint64(st.Bsize)
	met := db.pdb.Metrics()
	need := met.DiskSpaceUsage()
	same := sameDevice(db.dir, parent)
	if same {
		need = met.WAL.PhysicalSize
	} else {
		reserve = 0
	}
	need += 1 << 20 // the MANIFEST, OPTIONS and the backup's manifest
	if free < need+uint64(max(reserve, 0)) {
		return &NoRoomError{Dir: dir, Need: need, Free: free, Reserve: reserve}
	}
	return nil
}

func sameDevice(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	if err != nil {
		return false
	}
	sa, ok1 := fa.Sys().(*syscall.Stat_t)
	sb, ok2 := fb.Sys().(*syscall.Stat_t)
	return ok1 && ok2 && sa.Dev == sb.Dev
}

// writeBackupManifest reads the checkpoint in dir (read-only), checksums
// its files and writes the manifest, synced.
func writeBackupManifest(fs vfs.FS, dir, dataDir string, logger pebble.Logger, takenAt time.Time, part *ClusterPart,
	check func(*BackupManifest) error, start time.Time) (*BackupManifest, error) {
	// The empty LOCK file, so that a read-only open creates nothing.
	lock, err := fs.Create(fs.PathJoin(dir, "LOCK"), vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, fmt.Errorf("store: backup to %s: %w", dir, err)
	}
	if err := lock.Close(); err != nil {
		return nil, fmt.Errorf("store: backup to %s: %w", dir, err)
	}
	m, err := describeStore(fs, dir, logger, part)
	if err != nil {
		return nil, fmt.Errorf("store: read the backup in %s back: %w", dir, err)
	}
	m.DataDir, m.Dir, m.TakenAt = dataDir, dir, takenAt
	if abs, err := filepath.Abs(dataDir); err == nil {
		m.DataDir = abs
	}
	if err := check(m); err != nil {
		return nil, err
	}
	if m.Files, m.Bytes, err = checksumFiles(fs, dir); err != nil {
		return nil, err
	}
	m.TotalMillis = time.Since(start).Milliseconds()
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := writeFileSynced(fs, fs.PathJoin(dir, BackupManifestName), append(b, '\n')); err != nil {
		return nil, fmt.Errorf("store: write the backup's manifest in %s: %w", dir, err)
	}
	return m, nil
}

// describeStore opens the store in dir read-only and reads what a
// manifest says of it; with part, the positions of part's partitions.
func describeStore(fs vfs.FS, dir string, logger pebble.Logger, part *ClusterPart) (*BackupManifest, error) {
	rdb, err := Open(dir, Options{ReadOnly: true, FS: fs, Logger: logger, CacheSize: 8 << 20, SweepInterval: -1, DirCheckInterval: -1})
	if err != nil {
		return nil, err
	}
	defer rdb.Close()
	format, _, err := rdb.metaU32(metaFormat)
	if err != nil {
		return nil, err
	}
	m := &BackupManifest{Kind: backupKind, Version: backupManifestVersion, Store: rdb.id, Lineage: rdb.lineage,
		Format: format, Partitions: rdb.partitions, Commits: make([]uint64, rdb.partitions)}
	for p := range m.Commits {
		pm, err := rdb.Meta(p)
		if err != nil {
			return nil, err
		}
		m.Commits[p] = pm.CommitID
	}
	if m.EgressPosition, err = rdb.MaxEgressSeq(); err != nil {
		return nil, err
	}
	if m.Sources, err = rdb.allSourcePositions(); err != nil {
		return nil, err
	}
	if part != nil {
		if m.Cluster, err = rdb.describePart(part); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// allSourcePositions returns every stored Kafka source position.
func (db *DB) allSourcePositions() ([]BackupSource, error) {
	it, err := db.newIter([]byte{spaceSourcePosition}, []byte{spaceSourcePosition + 1})
	if err != nil {
		return nil, err
	}
	var out []BackupSource
	for valid := it.First(); valid; valid = it.Next() {
		p, err := decodeSourcePositionKey(it.Key())
		if err != nil {
			return nil, finish(it, corrupt(it.Key(), err))
		}
		val, err := it.ValueAndErr()
		if err != nil {
			return nil, finish(it, err)
		}
		if len(val) < 8 {
			return nil, finish(it, corrupt(it.Key(), errors.New("source position value too short")))
		}
		out = append(out, BackupSource{Ingress: p.Ingress, Topic: p.Topic, Partition: p.Partition, Next: int64(binary.BigEndian.Uint64(val))})
	}
	return out, closeIter(it)
}

// backupExtra are the files of a backup its manifest does not list.
func backupExtra(name string) bool { return name == "LOCK" || name == BackupManifestName }

// checksumFiles lists the files of dir with their sizes and SHA-256.
func checksumFiles(fs vfs.FS, dir string) ([]BackupFile, int64, error) {
	names, err := fs.List(dir)
	if err != nil {
		return nil, 0, err
	}
	slices.Sort(names)
	var files []BackupFile
	var total int64
	for _, n := range names {
		if backupExtra(n) {
			continue
		}
		sum, size, err := checksum(fs, fs.PathJoin(dir, n))
		if err != nil {
			return nil, 0, err
		}
		files = append(files, BackupFile{Name: n, Bytes: size, SHA256: sum})
		total += size
	}
	return files, total, nil
}

func checksum(fs vfs.FS, name string) (string, int64, error) {
	f, err := fs.Open(name)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("read %s: %w", name, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// writeFileSynced writes name durably: a temporary file, synced, renamed
// into place, the directory synced.
func writeFileSynced(fs vfs.FS, name string, b []byte) error {
	tmp := name + ".tmp"
	f, err := fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fs.Rename(tmp, name)
	}
	if err != nil {
		_ = fs.Remove(tmp)
		return err
	}
	d, err := fs.OpenDir(fs.PathDir(name))
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// readManifest reads a backup manifest (os.ErrNotExist when there is none).
func readManifest(fs vfs.FS, name string) (*BackupManifest, error) {
	f, err := fs.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var m BackupManifest
	if err := decodeManifest(f, &m); err != nil {
		return nil, fmt.Errorf("not a backup manifest: %w", err)
	}
	if m.Kind != backupKind {
		return nil, fmt.Errorf("not a backup manifest (kind %q, want %q)", m.Kind, backupKind)
	}
	if m.Version != backupManifestVersion {
		return nil, fmt.Errorf("a backup manifest of version %d, this build reads version %d", m.Version, backupManifestVersion)
	}
	return &m, nil
}

// maxManifestBytes bounds what a manifest is read to: a file far larger
// is not one of ours, and reading it whole would cost its size in memory.
const maxManifestBytes = 16 << 20

// decodeManifest reads a manifest's JSON from r into v.
func decodeManifest(r io.Reader, v any) error {
	b, err := io.ReadAll(io.LimitReader(r, maxManifestBytes))
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// Verified is what VerifyBackup found.
type Verified struct {
	// Manifest is the backup's manifest.
	Manifest *BackupManifest
	// Keys is how many keys the store holds: every one was read.
	Keys int64
}

// VerifyBackup checks the backup in dir: its manifest against its files
// (each present, of its size and checksum, none missing or added), then
// the store, opened read-only, against the manifest (identity, format,
// partitions, positions), and that every key and value reads (Pebble
// checks each block's checksum). It writes nothing to dir. A backup that
// does not check out is an error wrapping ErrBackupInvalid that lists
// every problem found. fs nil means the operating system's.
func VerifyBackup(dir string, fs vfs.FS, logger pebble.Logger) (*Verified, error) {
	if fs == nil {
		fs = vfs.Default
	}
	if logger == nil {
		logger = pebble.DefaultLogger
	}
	m, err := readManifest(fs, fs.PathJoin(dir, BackupManifestName))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s holds no %s: it is not a backup, or its backup did not finish", ErrBackupInvalid, dir, BackupManifestName)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBackupInvalid, fs.PathJoin(dir, BackupManifestName), err)
	}
	var problems []string
	names, err := fs.List(dir)
	if err != nil {
		return nil, fmt.Errorf("store: %s: %w", dir, err)
	}
	listed := map[string]bool{}
	for _, f := range m.Files {
		listed[f.Name] = true
		sum, size, err := checksum(fs, fs.PathJoin(dir, f.Name))
		switch {
		case errors.Is(err, os.ErrNotExist):
			problems = append(problems, fmt.Sprintf("%s is missing", f.Name))
		case err != nil:
			problems = append(problems, fmt.Sprintf("%s: %v", f.Name, err))
		case size != f.Bytes:
			problems = append(problems, fmt.Sprintf("%s has %d bytes, the manifest says %d (truncated or changed)", f.Name, size, f.Bytes))
		case sum != f.SHA256:
			problems = append(problems, fmt.Sprintf("%s does not match its checksum (changed or corrupt)", f.Name))
		}
	}
	for _, n := range names {
		if !listed[n] && !backupExtra(n) {
			problems = append(problems, fmt.Sprintf("%s is not in the manifest (a file added after the backup; was the backup started on?)", n))
		}
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%w: %s: %s", ErrBackupInvalid, dir, strings.Join(problems, "; "))
	}
	got, err := describeStore(fs, dir, logger, m.Cluster)
	if err != nil {
		return nil, fmt.Errorf("%w: %s does not open: %v", ErrBackupInvalid, dir, err)
	}
	if got.Store != m.Store {
		problems = append(problems, fmt.Sprintf("the store is %s, the manifest says %s", got.Store, m.Store))
	}
	if got.Format != m.Format || got.Format > FormatVersion {
		problems = append(problems, fmt.Sprintf("the store has format %d, the manifest says %d, this build reads up to %d", got.Format, m.Format, FormatVersion))
	}
	if got.Partitions != m.Partitions || !slices.Equal(got.Commits, m.Commits) {
		problems = append(problems, fmt.Sprintf("the store's partitions and commits (%d, %v) are not the manifest's (%d, %v)", got.Partitions, got.Commits, m.Partitions, m.Commits))
	}
	if got.EgressPosition != m.EgressPosition {
		problems = append(problems, fmt.Sprintf("the store's egress position is %d, the manifest says %d", got.EgressPosition, m.EgressPosition))
	}
	if m.Cluster != nil && !got.Cluster.samePositions(m.Cluster) {
		problems = append(problems, fmt.Sprintf("the store's partition positions %s are not the manifest's %s", got.Cluster.positions(), m.Cluster.positions()))
	}
	keys, err := readEveryKey(fs, dir, logger)
	if err != nil {
		problems = append(problems, fmt.Sprintf("reading every key: %v", err))
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%w: %s: %s", ErrBackupInvalid, dir, strings.Join(problems, "; "))
	}
	return &Verified{Manifest: m, Keys: keys}, nil
}

// readEveryKey opens the store in dir read-only and reads every key and
// value once.
func readEveryKey(fs vfs.FS, dir string, logger pebble.Logger) (int64, error) {
	rdb, err := Open(dir, Options{ReadOnly: true, FS: fs, Logger: logger, CacheSize: 8 << 20, SweepInterval: -1, DirCheckInterval: -1})
	if err != nil {
		return 0, err
	}
	defer rdb.Close()
	it, err := rdb.newIter(nil, nil)
	if err != nil {
		return 0, err
	}
	var n int64
	for valid := it.First(); valid; valid = it.Next() {
		if _, err := it.ValueAndErr(); err != nil {
			return n, finish(it, fmt.Errorf("at %s: %w", formatKey(it.Key()), err))
		}
		n++
	}
	return n, closeIter(it)
}
