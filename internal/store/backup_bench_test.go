package store

import (
	"flag"
	"fmt"
	"math/rand/v2"
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

// TestBackupImpact measures backups of a store of -backup.keys keys (one
// state entry of 100 random bytes each) while 4 writers commit, synced,
// 10 entries each time: how long the checkpoint and the whole backup
// take, and the writers' commit latency (p50, p99, max) in 5 s without a
// backup and in 5 s of backups back to back. Run:
//
//	go test ./internal/store -run TestBackupImpact -v -backup.keys 1000000 -backup.other /dev/shm/bk
func TestBackupImpact(t *testing.T) {
	if *backupKeys == 0 {
		t.Skip("-backup.keys not set")
	}
	db, _ := openTest(t, 16)
	rnd := rand.New(rand.NewPCG(1, 2))
	value := func() []byte { // incompressible, as user data often is
		v := make([]byte, 100)
		for i := range v {
			v[i] = byte(rnd.Uint32())
		}
		return v
	}
	val := value()
	start := time.Now()
	for i := 0; i < *backupKeys; {
		b := db.NewBatch()
		for j := 0; j < 10000 && i < *backupKeys; j++ {
			b.PutState(addr("bench", "fn", fmt.Sprintf("id-%08d", i)), "v", Entry{Typename: "io.statefun.types/bytes", Value: value(), Version: uint64(i)})
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
		t.Cleanup(func() {
			dirs, _ := filepath.Glob(*backupOther + "-*")
			for _, d := range dirs {
				_ = os.RemoveAll(d)
			}
		})
		targets = append(targets, *backupOther)
	}
	// For each destination: a window of 5 s without a backup, then 5 s of
	// backups back to back (each into a new directory, the previous one
	// removed), so that the latency during backups rests on as many
	// commits as the one without.
	for _, dest := range targets {
		base := time.Now()
		time.Sleep(5 * time.Second)
		bs := time.Now()
		var cps, totals []int64
		var last *BackupManifest
		for i := 0; time.Since(bs) < 5*time.Second; i++ {
			dir := fmt.Sprintf("%s-%d", dest, i)
			m, err := db.Backup(dir, BackupOptions{})
			if err != nil {
				t.Fatal(err)
			}
			cps, totals, last = append(cps, m.CheckpointMillis), append(totals, m.TotalMillis), m
			if i > 0 {
				_ = os.RemoveAll(fmt.Sprintf("%s-%d", dest, i-1))
			}
		}
		be := time.Now()
		slices.Sort(cps)
		slices.Sort(totals)
		t.Logf("backups to %s: %d back to back; checkpoint median %d ms (max %d), whole backup median %d ms (max %d); %d files, %.1f MiB",
			dest, len(cps), cps[len(cps)/2], cps[len(cps)-1], totals[len(totals)/2], totals[len(totals)-1], len(last.Files), float64(last.Bytes)/(1<<20))
		t.Logf("  commits without a backup: %s", stats(base, bs))
		t.Logf("  commits during backups:   %s", stats(bs, be))
		ve := time.Now()
		v, err := VerifyBackup(last.Dir, nil, quietLogger{})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("  verify of one: %d keys read in %v; commits meanwhile: %s", v.Keys, time.Since(ve).Round(time.Millisecond), stats(ve, time.Now()))
		_ = os.RemoveAll(last.Dir)
	}
	close(stop)
	wg.Wait()
}
