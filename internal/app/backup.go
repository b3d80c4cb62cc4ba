package app

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/statefun-go/statefun/internal/diskguard"
	"github.com/statefun-go/statefun/internal/stateapi"
	"github.com/statefun-go/statefun/internal/store"
)

// backup takes a backup of the embedded store (POST /backups, statefun
// backup): on the runtime's host, leaving the disk guard's reserve free
// when it is written on the data directory's filesystem. A cluster node
// takes none: the changelog topics are the application's durable copy.
func (a *App) backup(_ context.Context, dir, principal string) (*store.BackupManifest, error) {
	if a.cfg.Cluster != nil {
		return nil, fmt.Errorf("%w: in cluster mode the application's durable copy is its changelog topics in Kafka, and a node's store is a cache of the partitions it serves, rebuilt from them: back up the Kafka cluster (its topics statefun-<app>-*), not the nodes (docs/how-to/backup.md)", stateapi.ErrNoBackups)
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
