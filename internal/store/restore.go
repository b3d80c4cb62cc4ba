package store

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"

	"github.com/cockroachdb/pebble/v2"
)

// A restored backup, and the stores it descends from.
//
// A backup (backup.go) is a copy of the store with the same identity. A
// runtime started on a copy of it would continue the copy's history from
// the backup's point, while the store it was taken from may have gone on:
// both would hand out the same egress positions under the same identity
// for different records, and the exactly-once Kafka egress could not tell
// its own position markers from those of the original (a restored store is
// older than the last marker its original wrote). So the first writable
// Open of a backup — a directory holding the backup's manifest, whose
// store identity is the store's — gives the store a new identity and
// records its lineage: the identity it had, and the highest egress
// position it had written when the backup was taken. Positions up to it
// are the history the two stores share (the same records at the same
// positions); above it, each store numbers its own. The Kafka egress
// takes a marker of an ancestor as proof of delivery for the shared
// positions only (docs/reference/kafka-egress.md, "Whose marker is it").
//
// The manifest is then renamed to RestoredName, which keeps the record of
// where the store came from.

// RestoredName is what the first Open of a restored backup renames its
// manifest to.
const RestoredName = "statefun-restored-from.json"

// metaLineage is the store's lineage: the stores it was restored from,
// nearest first, each 16 bytes of identity and the u64 BE egress position
// up to which it shares that store's history. Part of the file format.
const metaLineage = "lineage"

// maxLineage bounds the lineage: a restore of a restore of ... keeps its
// nearest ancestors.
const maxLineage = 16

// Ancestor is a store this store was restored from (a backup of it, or of
// one of its descendants).
type Ancestor struct {
	// Store is the ancestor's identity.
	Store string `json:"store"`
	// Position is the highest egress position the two stores share: the
	// ancestor's records at positions up to it are this store's too.
	Position uint64 `json:"egressPosition"`
}

// Lineage returns the stores this store was restored from, nearest first.
func (db *DB) Lineage() []Ancestor { return append([]Ancestor(nil), db.lineage...) }

// SharedWith reports whether store is an ancestor of this one, and up to
// which egress position the two share their records: the nearest
// ancestor's position is the bound for every older one too.
func (db *DB) SharedWith(store string) (uint64, bool) {
	if store == "" {
		return 0, false
	}
	var bound uint64
	for i, a := range db.lineage {
		if i == 0 || a.Position < bound {
			bound = a.Position
		}
		if a.Store == store {
			return min(bound, a.Position), true
		}
	}
	return 0, false
}

// Restored returns the manifest of the backup this Open took on (a new
// identity was given), or nil.
func (db *DB) Restored() *BackupManifest { return db.restored }

func (db *DB) readLineage() error {
	key := metaKey(nil, metaLineage)
	v, ok, err := db.get(key)
	if err != nil || !ok {
		return err
	}
	if len(v)%24 != 0 {
		return corrupt(key, fmt.Errorf("lineage of %d bytes, not a multiple of 24", len(v)))
	}
	db.lineage = nil
	for ; len(v) > 0; v = v[24:] {
		db.lineage = append(db.lineage, Ancestor{Store: hex.EncodeToString(v[:16]), Position: binary.BigEndian.Uint64(v[16:24])})
	}
	return nil
}

// adoptBackup gives a restored backup its own identity (see above).
func (db *DB) adoptBackup() error {
	fs := db.opts.FS
	name := fs.PathJoin(db.dir, BackupManifestName)
	m, err := readManifest(fs, name)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("store: %s: %w; it is the manifest of a backup: remove it if this directory is not one", name, err)
	}
	switch {
	case m.Store == db.id:
		// Below.
	case len(db.lineage) > 0 && db.lineage[0].Store == m.Store:
		// Taken on already; the rename did not happen.
		return fs.Rename(name, fs.PathJoin(db.dir, RestoredName))
	default:
		return fmt.Errorf("store: %s names store %s, but this store is %s: it is not this store's backup manifest; remove it", name, m.Store, db.id)
	}
	pos, err := db.MaxEgressSeq()
	if err != nil {
		return err
	}
	old, err := hex.DecodeString(db.id)
	if err != nil {
		return err
	}
	id, err := newIdentity()
	if err != nil {
		return err
	}
	lin := binary.BigEndian.AppendUint64(append([]byte(nil), old...), pos)
	for i, a := range db.lineage {
		if i == maxLineage-1 {
			break
		}
		b, _ := hex.DecodeString(a.Store)
		lin = binary.BigEndian.AppendUint64(append(lin, b...), a.Position)
	}
	b := db.pdb.NewBatch()
	defer b.Close()
	_ = b.Set(metaKey(nil, metaStoreID), id, nil)
	_ = b.Set(metaKey(nil, metaLineage), lin, nil)
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("store: give the restored backup in %s its own identity: %w", db.dir, err)
	}
	db.id = hex.EncodeToString(id)
	if err := db.readLineage(); err != nil {
		return err
	}
	db.restored = m
	if err := fs.Rename(name, fs.PathJoin(db.dir, RestoredName)); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}
