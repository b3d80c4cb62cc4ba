package store

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

var (
	backupKeys  = flag.Int("backup.keys", 0, "TestBackupImpact: keys in the store (0 skips the test)")
	backupOther = flag.String("backup.other", "", "TestBackupImpact: a directory on another filesystem to back up to as well (the sstables are copied, not linked)")
)

// TestBackupImpact measures a backup of a store of -backup.keys keys (one
// state entry of 100 bytes each) while 4 writers commit, synced, 10
// entries each time: how long the checkpoint and the whole backup take,
// and the writers' commit latency (p50, p99, max) in the 2 s before the
// backup and during it. Run:
//
//	go test ./internal/store -run TestBackupImpact -v -backup.keys 1000000 -backup.other /dev/shm/bk
func TestBackupImpact(t *testing.T) {
	if *backupKeys == 0 {
		t.Skip("-backup.keys not set")
	}
	db, _ := openTest(t, 16)
	val := make([]byte, 100)
	start := time.Now()
	for i := 0; i < *backupKeys; {
		b := db.NewBatch()
		for j := 0; j < 10000 && i < *backupKeys; j++ {
			b.PutState(addr("bench", "fn", fmt.Sprintf("id-%08d", i)), "v", Entry{Typename: "io.statefun.types/bytes", Value: val, Version: uint64(i)})
			i++
		}
		if err := b.Commit(false); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.pdb.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Logf("filled %d keys in %v; store %.1f MiB", *backupKeys, time.Since(start).Round(time.Millisecond), float64(db.pdb.Metrics().DiskSpaceUsage())/(1<<20))

	type sample struct {
		at   time.Time
		took time.Duration
	}
	var (
		mu      sync.Mutex
		samples []sample
		stop    = make(chan struct{})
		wg      sync.WaitGroup
	)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				b := db.NewBatch()
				for j := range 10 {
					b.PutState(addr("bench", "fn", fmt.Sprintf("id-%08d", (w*7919+i*10+j)%*backupKeys)), "v", Entry{Typename: "io.statefun.types/bytes", Value: val})
				}
				s := time.Now()
				if err := b.Commit(true); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				samples = append(samples, sample{s, time.Since(s)})
				mu.Unlock()
			}
		}()
	}
	stats := func(from, to time.Time) string {
		mu.Lock()
		defer mu.Unlock()
		var d []time.Duration
		for _, s := range samples {
			if !s.at.Before(from) && s.at.Before(to) {
				d = append(d, s.took)
			}
		}
		if len(d) == 0 {
			return "no commits"
		}
		slices.Sort(d)
		q := func(p float64) time.Duration { return d[int(p*float64(len(d)-1))].Round(10 * time.Microsecond) }
		return fmt.Sprintf("%d commits (%.0f/s), p50 %v, p99 %v, max %v", len(d), float64(len(d))/to.Sub(from).Seconds(), q(0.5), q(0.99), d[len(d)-1].Round(10*time.Microsecond))
	}
	targets := []string{filepath.Join(t.TempDir(), "same-fs")}
	if *backupOther != "" {
		_ = os.RemoveAll(*backupOther)
		t.Cleanup(func() { _ = os.RemoveAll(*backupOther) })
		targets = append(targets, *backupOther)
	}
	for _, dest := range targets {
		base := time.Now()
		time.Sleep(2 * time.Second)
		bs := time.Now()
		m, err := db.Backup(dest, BackupOptions{})
		be := time.Now()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("backup to %s: checkpoint %d ms, whole backup %d ms (checksums of %d files, %.1f MiB)", dest, m.CheckpointMillis, m.TotalMillis, len(m.Files), float64(m.Bytes)/(1<<20))
		t.Logf("  commits before: %s", stats(base, bs))
		t.Logf("  commits during: %s", stats(bs, be))
		ve := time.Now()
		v, err := VerifyBackup(dest, nil, quietLogger{})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("  verify: %d keys read in %v; commits meanwhile: %s", v.Keys, time.Since(ve).Round(time.Millisecond), stats(ve, time.Now()))
	}
	close(stop)
	wg.Wait()
}
