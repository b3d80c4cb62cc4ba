package app

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/statefun-go/statefun/internal/diskguard"
	"github.com/statefun-go/statefun/internal/stateapi"
	"github.com/statefun-go/statefun/internal/store"
)

// backup takes a backup of the embedded store (POST /backups, statefun
// backup): on the runtime's host, leaving the disk guard's reserve free
// when it is written on the data directory's filesystem. A cluster node
// takes its part of a cluster backup instead (backupPart).
func (a *App) backup(_ context.Context, dir, principal string) (*store.BackupManifest, error) {
	if a.cfg.Cluster != nil {
		return nil, fmt.Errorf("%w: a cluster node writes its part of a cluster backup only (docs/how-to/backup.md)", stateapi.ErrNoBackups)
	}
	start := time.Now()
	m, err := a.db.Backup(dir, store.BackupOptions{Reserve: reserveOf(a.cfg)})
	if err != nil {
		a.log.Warn("backup failed", "to", dir, "by", principal, "error", err)
		return nil, err
	}
	a.log.Info("backup written", "to", dir, "by", principal, "store", m.Store, "taken_at", m.TakenAt.Format(time.RFC3339Nano),
		"bytes", m.Bytes, "files", len(m.Files), "checkpoint", time.Duration(m.CheckpointMillis)*time.Millisecond, "took", time.Since(start))
	return m, nil
}

// backupPart writes this cluster node's part of the cluster backup id
// under dir on the node's host (made if missing; its parent must exist):
// the embedded backup of the node's store, in dir/node-<node id> (or
// node-<node id>.2, ... when the node writes more than one part of a
// backup), recording the partitions parts with their positions.
func (a *App) backupPart(_ context.Context, dir, id string, parts []int, principal string) (*store.BackupManifest, string, error) {
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
		return nil, "", fmt.Errorf("%w: %q is not a clean absolute path; give the directory on the nodes' hosts to write the backup to, e.g. /var/backups/statefun/2026-12-02", store.ErrBackupDest, dir)
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, "", fmt.Errorf("%w: %s cannot be made on node %s's host: %v; create its parent first", store.ErrBackupDest, dir, a.cfg.Cluster.NodeID, err)
	}
	// A node may be sent a second share of one backup (a partition it
	// was restoring when the first came): each gets a directory of its
	// own. A directory of another backup is left alone.
	name := "node-" + a.cfg.Cluster.NodeID
	for i := 2; ; i++ {
		if _, err := os.Lstat(filepath.Join(dir, name)); errors.Is(err, os.ErrNotExist) {
			break
		}
		if m, err := store.ReadBackupManifest(filepath.Join(dir, name)); err != nil || m.Cluster == nil || m.Cluster.Backup != id {
			return nil, "", fmt.Errorf("%w: %s holds another backup's part: write a backup to a new or empty directory", store.ErrBackupDest, filepath.Join(dir, name))
		}
		name = fmt.Sprintf("node-%s.%d", a.cfg.Cluster.NodeID, i)
	}
	ps := make([]store.PartitionBackup, len(parts))
	for i, p := range parts {
		ps[i].Partition = p
	}
	start := time.Now()
	m, err := a.db.Backup(filepath.Join(dir, name), store.BackupOptions{Reserve: reserveOf(a.cfg),
		Cluster: &store.ClusterPart{App: a.cfg.Cluster.AppID, Node: a.cfg.Cluster.NodeID, Backup: id, Partitions: ps}})
	if err != nil {
		a.log.Warn("cluster backup: this node's part failed", "to", dir, "backup", id, "by", principal, "error", err)
		return nil, "", err
	}
	a.log.Info("cluster backup: this node's part written", "to", filepath.Join(dir, name), "backup", id, "by", principal, "partitions", parts,
		"bytes", m.Bytes, "checkpoint", time.Duration(m.CheckpointMillis)*time.Millisecond, "took", time.Since(start))
	return m, name, nil
}

// reserveOf is the disk guard's reserve in bytes (0 with the guard off).
func reserveOf(cfg Config) int64 {
	switch {
	case cfg.DiskReserve < 0:
		return 0
	case cfg.DiskReserve > 0:
		return cfg.DiskReserve
	}
	mem := cfg.Store.MemTableSize
	if mem == 0 {
		mem = store.DefaultMemTableSize
	}
	return diskguard.DefaultReserve(mem)
}

// readOnlyEdge, in read-only mode, answers every request of a playground
// ingress or egress with a 409 naming the mode: a message would be
// written, a read of the egress removes what it reads.
func readOnlyEdge(readOnly bool, what string, h http.Handler) http.Handler {
	if !readOnly {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, fmt.Sprintf("the runtime runs in read-only mode (statefun run --read-only): the %s takes no messages and hands none out. Start statefun on a copy of the store without --read-only to use it", what), http.StatusConflict)
	})
}
