package app

import (
	"fmt"
	"os"
	"os/user"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/statefun-go/statefun/internal/diskguard"
	"github.com/statefun-go/statefun/internal/store"
)

// openStore starts the disk guard and opens the store. The guard measures
// first, so that a start on a full disk stops at once with the cause
// instead of hanging in Pebble's recovery. The guard is nil when
// cfg.DiskReserve is negative.
func openStore(cfg Config, reg prometheus.Registerer) (*diskguard.Guard, *store.DB, error) {
	opts := cfg.Store
	opts.Partitions = cfg.Partitions
	opts.Logger = newPebbleLogger(cfg.Logger)
	opts.Metrics = store.NewMetrics(reg)
	// An embedded store is the only copy of what it holds: record it
	// beside its directory, so that a start on its empty place is refused
	// unless told (--new-store). A cluster node's store is rebuilt from
	// the application's changelog topics, so an empty one is normal.
	opts.RecordBeside = cfg.Cluster == nil
	opts.NewStore = cfg.NewStore || cfg.Cluster != nil
	if cfg.ReadOnly {
		// Nothing is written: no guard, no record, no sweeps.
		opts.ReadOnly, opts.RecordBeside = true, false
		if store.IsClusterBackup(cfg.DataDir) {
			return openClusterBackup(cfg, opts)
		}
		db, err := store.Open(cfg.DataDir, opts)
		if err != nil {
			return nil, nil, err
		}
		cfg.Logger.Info("read-only mode: serving the store without changing it; no function is invoked, no delayed message fires, no Kafka ingress or egress runs, every write is refused",
			"data_dir", cfg.DataDir, "store", db.ID())
		return nil, db, nil
	}
	var guard *diskguard.Guard
	if cfg.DiskReserve >= 0 {
		reserve := cfg.DiskReserve
		if reserve == 0 {
			mem := opts.MemTableSize
			if mem == 0 {
				mem = store.DefaultMemTableSize
			}
			reserve = diskguard.DefaultReserve(mem)
		}
		g, err := diskguard.New(diskguard.Options{Dir: cfg.DataDir, Reserve: reserve, Logger: cfg.Logger})
		if err != nil {
			return nil, nil, fmt.Errorf("app: %w", err)
		}
		guard = g
	}
	db, err := store.Open(cfg.DataDir, opts)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case db.Replaced() != "":
		cfg.Logger.Warn("started a new empty store in place of the lost one (--new-store): everything the lost store held is gone",
			"data_dir", cfg.DataDir, "lost_store", db.Replaced(), "new_store", db.ID(), "by", Operator())
	case cfg.NewStore && cfg.Cluster == nil:
		cfg.Logger.Warn("--new-store is set, but the data directory holds its store; remove the flag: while it is set, a start on a deleted data directory makes a new empty store without refusing",
			"data_dir", cfg.DataDir, "store", db.ID())
	}
	if err := db.RecordErr(); err != nil {
		cfg.Logger.Warn("the store is not recorded beside its data directory, so a start on its empty place will not be refused; make the parent directory writable", "error", err)
	}
	if m := db.Restored(); m != nil {
		cfg.Logger.Warn("started on a restored backup: the store has an identity of its own now, and holds what was acknowledged before the backup was taken, not what came after. "+
			"Kafka ingresses resume from the backup's positions, so records consumed after it are consumed again and their effects produced again; exactly-once Kafka egresses take the original store's markers as proof of delivery up to the backup's egress position only",
			"data_dir", cfg.DataDir, "store", db.ID(), "restored_from", m.Store, "backup_taken_at", m.TakenAt.Format("2006-01-02T15:04:05.000Z07:00"),
			"egress_position", m.EgressPosition, "by", Operator())
	}
	if db.ReplayedAtOpen() {
		cfg.Logger.Info("the store was not closed cleanly; replayed its write-ahead log", "data_dir", cfg.DataDir)
	}
	if guard != nil {
		guard.Start()
	}
	// The engine refuses new work while guard.Admit says so; a nil guard
	// admits everything.
	return guard, db, nil
}

// openClusterBackup opens a cluster backup for read-only mode: its
// partitions, read out of its node parts, are assembled into one store in
// the temporary directory, which is removed when the store closes.
func openClusterBackup(cfg Config, opts store.Options) (*diskguard.Guard, *store.DB, error) {
	start := time.Now()
	db, m, err := store.OpenClusterBackup(cfg.DataDir, "", opts)
	if err != nil {
		return nil, nil, err
	}
	cfg.Logger.Info("read-only mode over a cluster backup: its partitions are assembled in a temporary store, removed at stop; no function is invoked, no delayed message fires, no Kafka ingress or egress runs, every write is refused",
		"data_dir", cfg.DataDir, "app", m.App, "backup", m.Backup, "taken_at", m.TakenAt.Format(time.RFC3339Nano), "partitions", m.Partitions, "assembled_in", time.Since(start))
	return nil, db, nil
}

// Operator says who runs this process, for the log lines of operator
// decisions (--new-store, --kafka-egress-reset-marker): user@host.
func Operator() string {
	name := "uid " + fmt.Sprint(os.Getuid())
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	return name + "@" + host
}
