package store

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Backups in cluster mode (docs/how-to/backup.md, "Cluster mode").
//
// A cluster node's store is a cache of the partitions it serves: each is a
// prefix of its partition's changelog, applied whole commit by commit with
// the changelog position it reaches (changelog.go). A cluster backup is
// therefore made of the nodes' ordinary backups (Backup, a Pebble
// checkpoint, with ClusterPart in the manifest naming the partitions the
// node served and, read from the checkpoint itself, the changelog and
// messages positions each is at), one directory per node under the
// backup's directory, and a top-level manifest (ClusterManifestName) that
// lists every partition of the application and the node part that holds
// it. Each partition is consistent at one of its commits; the partitions
// are not at one common instant (see the how-to page for what that means
// for messages in flight between partitions).
//
// The partitions of a cluster backup are read out of the node parts by
// their changelog index (spaceChangelogKeys): AssembleClusterBackup builds
// one ordinary store holding all of them (read-only mode and restores
// start on it), and ClusterBackupRecords hands out one partition's keys
// and values as changelog records (to seed a new application's changelog
// topic).

// ClusterManifestName is the name of a cluster backup's top-level
// manifest, in the backup's directory.
const ClusterManifestName = "statefun-cluster-backup.json"

const (
	clusterBackupKind            = "statefun-cluster-backup"
	clusterBackupManifestVersion = 1
)

// ClusterPart is a node's part of a cluster backup, in its backup's
// manifest (BackupManifest.Cluster).
type ClusterPart struct {
	// App is the application id; Node the node that wrote the part.
	App  string `json:"app"`
	Node string `json:"node"`
	// Backup is the cluster backup's id: the parts of one backup share it.
	Backup string `json:"backup"`
	// Partitions are the partitions the node served, with their positions.
	Partitions []PartitionBackup `json:"partitions"`
}

// PartitionBackup is one partition in a cluster backup: the commit it is
// at, and the positions in the application's topics that commit reached.
type PartitionBackup struct {
	Partition int `json:"partition"`
	// Node and Dir, in the top-level manifest, are the node that wrote the
	// partition and its part's directory (relative to the backup's).
	Node string `json:"node,omitempty"`
	Dir  string `json:"dir,omitempty"`
	// Commit is the partition's last commit id.
	Commit uint64 `json:"commit"`
	// ChangelogNext is the offset of the first record of the partition's
	// changelog partition not in the backup: the backup holds exactly the
	// records before it. ChangelogTopicID is the changelog topic's id.
	ChangelogNext    int64  `json:"changelogNext"`
	ChangelogTopicID string `json:"changelogTopicId"`
	// MessagesNext is the offset of the first record of the partition's
	// messages topic partition the partition had not applied: messages
	// from it on were in flight (0: it had applied none).
	MessagesNext int64 `json:"messagesNext"`
	// Keys is how many store keys the partition holds.
	Keys int64 `json:"keys"`
}

// ClusterBackupManifest is a cluster backup's top-level manifest.
type ClusterBackupManifest struct {
	// Kind is "statefun-cluster-backup"; Version the manifest's, 1.
	Kind    string `json:"kind"`
	Version int    `json:"version"`
	// App is the application id; Backup the backup's id; Partitions P.
	App        string `json:"app"`
	Backup     string `json:"backup"`
	Partitions int    `json:"partitions"`
	// Format is the stores' format version.
	Format uint32 `json:"format"`
	// TakenAt is when the backup was asked for: every commit acknowledged
	// before it is in the backup. TotalMillis is how long it took.
	TakenAt     time.Time `json:"takenAt"`
	TotalMillis int64     `json:"totalMillis"`
	// Dir is the backup's directory on the host of the node that wrote
	// this manifest.
	Dir string `json:"dir"`
	// Parts is every partition, by partition.
	Parts []PartitionBackup `json:"parts"`
	// Nodes are the node parts.
	Nodes []ClusterBackupNode `json:"nodes"`
}

// ClusterBackupNode is one node's part of a cluster backup.
type ClusterBackupNode struct {
	Node string `json:"node"`
	// Dir is the part's directory, relative to the backup's; the node
	// wrote it on its own host.
	Dir string `json:"dir"`
	// Store is the node's store identity.
	Store string `json:"store"`
	// Partitions are the partitions the part holds for the backup.
	Partitions []int `json:"partitions"`
	// CheckpointMillis and TotalMillis are the node's checkpoint and whole
	// part's durations; Bytes the size of its files.
	CheckpointMillis int64 `json:"checkpointMillis"`
	TotalMillis      int64 `json:"totalMillis"`
	Bytes            int64 `json:"bytes"`
}

// describePart reads from a checkpoint the positions of part's partitions.
func (db *DB) describePart(part *ClusterPart) (*ClusterPart, error) {
	out := &ClusterPart{App: part.App, Node: part.Node, Backup: part.Backup, Partitions: []PartitionBackup{}}
	for _, want := range part.Partitions {
		p := want.Partition
		if err := db.checkPartition(p); err != nil {
			return nil, err
		}
		pos, ok, err := db.ChangelogPosition(p)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("store: partition %d has no changelog position in the checkpoint: the node does not hold it", p)
		}
		pb := PartitionBackup{Partition: p, ChangelogNext: pos.Next, ChangelogTopicID: hex.EncodeToString(pos.TopicID[:])}
		pm, err := db.Meta(p)
		if err != nil {
			return nil, err
		}
		pb.Commit = pm.CommitID
		rps, err := db.ReadPositions(p)
		if err != nil {
			return nil, err
		}
		for _, rp := range rps {
			if rp.Topic == MessagesTopic {
				pb.MessagesNext = rp.Offset + 1
			}
		}
		if err := db.ChangelogKeys(p, func([]byte) error { pb.Keys++; return nil }); err != nil {
			return nil, err
		}
		out.Partitions = append(out.Partitions, pb)
	}
	slices.SortFunc(out.Partitions, func(a, b PartitionBackup) int { return a.Partition - b.Partition })
	return out, nil
}

// samePositions reports whether c and o name the same partitions at the
// same positions.
func (c *ClusterPart) samePositions(o *ClusterPart) bool {
	if c == nil || o == nil {
		return c == o
	}
	return slices.Equal(c.Partitions, o.Partitions)
}

// positions formats the partitions' positions for an error.
func (c *ClusterPart) positions() string {
	if c == nil {
		return "none"
	}
	var b strings.Builder
	for i, p := range c.Partitions {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d@%d", p.Partition, p.ChangelogNext)
	}
	return "[" + b.String() + "]"
}

// NewClusterManifest makes the top-level manifest of a cluster backup in
// dir from its node parts (each node's backup manifest; dirs their
// directories relative to dir). A partition two parts hold is taken from
// the first. It returns the partitions no part holds: a backup missing
// any is incomplete, and its manifest must not be written.
func NewClusterManifest(app, backup, dir string, partitions int, takenAt time.Time, parts []*BackupManifest, dirs []string) (*ClusterBackupManifest, []int) {
	m := &ClusterBackupManifest{Kind: clusterBackupKind, Version: clusterBackupManifestVersion, App: app, Backup: backup,
		Partitions: partitions, TakenAt: takenAt.UTC(), Dir: dir}
	have := make([]*PartitionBackup, partitions)
	for i, part := range parts {
		if part.Cluster == nil {
			continue
		}
		m.Format = max(m.Format, part.Format)
		n := ClusterBackupNode{Node: part.Cluster.Node, Dir: dirs[i], Store: part.Store, Partitions: []int{},
			CheckpointMillis: part.CheckpointMillis, TotalMillis: part.TotalMillis, Bytes: part.Bytes}
		for _, pb := range part.Cluster.Partitions {
			if pb.Partition < 0 || pb.Partition >= partitions || have[pb.Partition] != nil {
				continue
			}
			pb.Node, pb.Dir = part.Cluster.Node, dirs[i]
			have[pb.Partition] = &pb
			n.Partitions = append(n.Partitions, pb.Partition)
		}
		m.Nodes = append(m.Nodes, n)
	}
	var missing []int
	for p, pb := range have {
		if pb == nil {
			missing = append(missing, p)
			continue
		}
		m.Parts = append(m.Parts, *pb)
	}
	slices.SortFunc(m.Nodes, func(a, b ClusterBackupNode) int { return strings.Compare(a.Dir, b.Dir) })
	return m, missing
}

// WriteClusterManifest writes m to its directory (m.Dir), synced; a
// directory that holds one already is refused.
func WriteClusterManifest(m *ClusterBackupManifest) error {
	fs := vfs.Default
	name := filepath.Join(m.Dir, ClusterManifestName)
	if _, err := fs.Stat(name); err == nil {
		return fmt.Errorf("%w: %s exists: the directory holds another cluster backup", ErrBackupDest, name)
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFileSynced(fs, name, append(b, '\n')); err != nil {
		return fmt.Errorf("store: write the cluster backup's manifest %s: %w", name, err)
	}
	return nil
}

// IsClusterBackup reports whether dir holds a cluster backup's manifest.
func IsClusterBackup(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, ClusterManifestName))
	return err == nil
}

// ReadClusterManifest reads the top-level manifest of the cluster backup
// in dir.
func ReadClusterManifest(dir string) (*ClusterBackupManifest, error) {
	name := filepath.Join(dir, ClusterManifestName)
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var m ClusterBackupManifest
	if err := decodeManifest(f, &m); err != nil {
		return nil, fmt.Errorf("%s: not a cluster backup manifest: %w", name, err)
	}
	switch {
	case m.Kind != clusterBackupKind:
		return nil, fmt.Errorf("%s: not a cluster backup manifest (kind %q, want %q)", name, m.Kind, clusterBackupKind)
	case m.Version != clusterBackupManifestVersion:
		return nil, fmt.Errorf("%s: a cluster backup manifest of version %d, this build reads version %d", name, m.Version, clusterBackupManifestVersion)
	case m.Partitions < 1 || m.Partitions > MaxPartitions:
		return nil, fmt.Errorf("%s: %d partitions is out of range", name, m.Partitions)
	}
	for _, pb := range m.Parts {
		if !localName(pb.Dir) {
			return nil, fmt.Errorf("%s: partition %d's directory %q is not a name inside the backup", name, pb.Partition, pb.Dir)
		}
	}
	return &m, nil
}

// localName reports whether dir names a directory right inside another.
func localName(dir string) bool {
	return dir != "" && dir != "." && dir != ".." && !strings.ContainsAny(dir, `/\`)
}

// ClusterVerified is what VerifyClusterBackup found.
type ClusterVerified struct {
	// Manifest is the top-level manifest.
	Manifest *ClusterBackupManifest
	// Nodes are the node parts, each verified as a backup of its own.
	Nodes []*Verified
}

// VerifyClusterBackup checks the cluster backup in dir: that the top-level
// manifest lists every partition of the application once, that every
// node part it names is there and checks out as a backup of its own
// (VerifyBackup: files, checksums, store, every key), belongs to this
// backup and holds each of its partitions at the position the top-level
// manifest says. A missing part is named with its partitions and node.
// It writes nothing to dir.
func VerifyClusterBackup(dir string, logger pebble.Logger) (*ClusterVerified, error) {
	m, err := ReadClusterManifest(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s holds no %s: it is not a cluster backup, or its backup did not finish", ErrBackupInvalid, dir, ClusterManifestName)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBackupInvalid, err)
	}
	var problems []string
	seen := make([]bool, m.Partitions)
	byDir := map[string][]PartitionBackup{}
	var dirs []string
	for _, pb := range m.Parts {
		if pb.Partition < 0 || pb.Partition >= m.Partitions || seen[pb.Partition] {
			problems = append(problems, fmt.Sprintf("partition %d is listed twice or out of range", pb.Partition))
			continue
		}
		seen[pb.Partition] = true
		if byDir[pb.Dir] == nil {
			dirs = append(dirs, pb.Dir)
		}
		byDir[pb.Dir] = append(byDir[pb.Dir], pb)
	}
	var missing []int
	for p, ok := range seen {
		if !ok {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		problems = append(problems, fmt.Sprintf("partitions %v are in no part", missing))
	}
	out := &ClusterVerified{Manifest: m}
	for _, d := range dirs {
		parts := byDir[d]
		ps := make([]int, len(parts))
		for i, pb := range parts {
			ps[i] = pb.Partition
		}
		sub := filepath.Join(dir, d)
		if _, err := os.Stat(sub); errors.Is(err, os.ErrNotExist) {
			problems = append(problems, fmt.Sprintf("the part %s of node %s (partitions %v) is missing: copy %s from node %s's host into %s",
				d, parts[0].Node, ps, filepath.Join(m.Dir, d), parts[0].Node, dir))
			continue
		}
		v, err := VerifyBackup(sub, nil, logger)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		out.Nodes = append(out.Nodes, v)
		c := v.Manifest.Cluster
		if c == nil || c.Backup != m.Backup || c.App != m.App {
			problems = append(problems, fmt.Sprintf("%s is not a part of this backup (%s of %s)", d, m.Backup, m.App))
			continue
		}
		for _, pb := range parts {
			i := slices.IndexFunc(c.Partitions, func(x PartitionBackup) bool { return x.Partition == pb.Partition })
			want := pb
			want.Node, want.Dir = "", ""
			if i < 0 || c.Partitions[i] != want {
				problems = append(problems, fmt.Sprintf("%s does not hold partition %d at the position the manifest says", d, pb.Partition))
			}
		}
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%w: %s: %s", ErrBackupInvalid, dir, strings.Join(problems, "; "))
	}
	return out, nil
}

// ClusterBackupReader reads the partitions of a cluster backup out of its
// node parts, each part opened read-only once.
type ClusterBackupReader struct {
	dir    string
	m      *ClusterBackupManifest
	logger pebble.Logger
	open   map[string]*DB
}

// NewClusterBackupReader reads the cluster backup in dir, whose manifest
// is m. Close it when done.
func NewClusterBackupReader(dir string, m *ClusterBackupManifest, logger pebble.Logger) *ClusterBackupReader {
	return &ClusterBackupReader{dir: dir, m: m, logger: logger, open: map[string]*DB{}}
}

// Records calls fn with every key and value partition p holds in the
// backup, in key order: the partition's changelog as compaction would
// leave it at the backup's position. The slices are valid only during
// the call.
func (r *ClusterBackupReader) Records(p int, fn func(key, value []byte) error) error {
	db, _, err := r.part(p)
	if err != nil {
		return err
	}
	return db.partitionRecords(p, fn)
}

// part returns the open store of the part holding p, and p's entry.
func (r *ClusterBackupReader) part(p int) (*DB, PartitionBackup, error) {
	i := slices.IndexFunc(r.m.Parts, func(pb PartitionBackup) bool { return pb.Partition == p })
	if i < 0 {
		return nil, PartitionBackup{}, fmt.Errorf("%w: %s holds no partition %d", ErrBackupInvalid, r.dir, p)
	}
	pb := r.m.Parts[i]
	if db := r.open[pb.Dir]; db != nil {
		return db, pb, nil
	}
	sub := filepath.Join(r.dir, pb.Dir)
	db, err := Open(sub, Options{ReadOnly: true, Logger: r.logger, CacheSize: 8 << 20, SweepInterval: -1, DirCheckInterval: -1})
	if err != nil {
		return nil, pb, fmt.Errorf("store: the part %s of node %s (partition %d): %w", sub, pb.Node, p, err)
	}
	r.open[pb.Dir] = db
	return db, pb, nil
}

// Close closes the parts opened.
func (r *ClusterBackupReader) Close() error {
	var errs []error
	for _, db := range r.open {
		errs = append(errs, db.Close())
	}
	r.open = map[string]*DB{}
	return errors.Join(errs...)
}

// ClusterBackupRecords is Records of one partition, the part opened for
// the call.
func ClusterBackupRecords(dir string, m *ClusterBackupManifest, p int, logger pebble.Logger, fn func(key, value []byte) error) error {
	r := NewClusterBackupReader(dir, m, logger)
	defer r.Close()
	return r.Records(p, fn)
}

// partitionRecords calls fn with each key partition p's changelog wrote
// and its value.
func (db *DB) partitionRecords(p int, fn func(key, value []byte) error) error {
	return db.ChangelogKeys(p, func(key []byte) error {
		v, ok, err := db.get(key)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("store: partition %d's index names %s, which the store does not hold", p, formatKey(key))
		}
		return fn(key, v)
	})
}

// AssembleClusterBackup builds, in dest (new or empty), one store holding
// every partition of the cluster backup in dir, each with the changelog
// position it is at: an ordinary store, which read-only mode serves and a
// restore starts on. Nothing in dir is written.
func AssembleClusterBackup(dir, dest string, logger pebble.Logger) (*ClusterBackupManifest, error) {
	m, err := ReadClusterManifest(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBackupInvalid, err)
	}
	if len(m.Parts) != m.Partitions {
		return nil, fmt.Errorf("%w: %s lists %d of its %d partitions", ErrBackupInvalid, dir, len(m.Parts), m.Partitions)
	}
	db, err := Open(dest, Options{Partitions: m.Partitions, Logger: logger, SweepInterval: -1, DirCheckInterval: -1})
	if err != nil {
		return nil, err
	}
	r := NewClusterBackupReader(dir, m, logger)
	defer r.Close()
	for _, pb := range m.Parts {
		src, _, err := r.part(pb.Partition)
		if err == nil {
			err = assemblePartition(db, src, pb)
		}
		if err != nil {
			_ = db.Close()
			return nil, err
		}
	}
	if err := db.Close(); err != nil {
		return nil, err
	}
	return m, nil
}

// assemblePartition copies partition pb from src into db, in batches, the
// last with pb's changelog position.
func assemblePartition(db, src *DB, pb PartitionBackup) error {
	var pos ChangelogPosition
	pos.Next = pb.ChangelogNext
	if id, err := hex.DecodeString(pb.ChangelogTopicID); err == nil && len(id) == len(pos.TopicID) {
		copy(pos.TopicID[:], id)
	}
	var ops []Op
	size := 0
	flush := func() error {
		err := db.ApplyChangelog(pb.Partition, ops, pos)
		ops, size = ops[:0], 0
		return err
	}
	err := src.partitionRecords(pb.Partition, func(key, value []byte) error {
		ops = append(ops, Op{Key: slices.Clone(key), Value: slices.Clone(value)})
		if size += len(key) + len(value); size > 4<<20 || len(ops) >= sweepBatch {
			return flush()
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: assemble partition %d: %w", pb.Partition, err)
	}
	return flush()
}

// OpenClusterBackup opens the cluster backup in dir for reading only:
// its partitions are assembled (AssembleClusterBackup) into a new
// directory under scratch (the system's temporary directory when empty),
// which is opened with opts (ReadOnly set) and removed at Close. Nothing
// in dir is written.
func OpenClusterBackup(dir, scratch string, opts Options) (*DB, *ClusterBackupManifest, error) {
	tmp, err := os.MkdirTemp(scratch, "statefun-cluster-backup-")
	if err != nil {
		return nil, nil, fmt.Errorf("store: a directory to assemble the cluster backup %s in: %w", dir, err)
	}
	m, err := AssembleClusterBackup(dir, tmp, opts.Logger)
	if err != nil {
		_ = os.RemoveAll(tmp)
		return nil, nil, err
	}
	opts.ReadOnly = true
	if opts.Partitions != 0 && opts.Partitions != m.Partitions {
		_ = os.RemoveAll(tmp)
		return nil, nil, fmt.Errorf("%w: the cluster backup %s has %d partitions, not %d", ErrPartitionCount, dir, m.Partitions, opts.Partitions)
	}
	opts.Partitions = 0
	db, err := Open(tmp, opts)
	if err != nil {
		_ = os.RemoveAll(tmp)
		return nil, nil, err
	}
	db.scratch = tmp
	return db, m, nil
}

// ReadBackupManifest reads the manifest of the backup in dir
// (os.ErrNotExist when there is none).
func ReadBackupManifest(dir string) (*BackupManifest, error) {
	return readManifest(vfs.Default, filepath.Join(dir, BackupManifestName))
}
