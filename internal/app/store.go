package app

import (
	"fmt"

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
