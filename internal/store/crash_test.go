package store

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/protocol"
)

// The crash test: commits go into a store on a crashable in-memory
// filesystem, some synced and some not; a crash is simulated by cloning the
// filesystem as a crash could leave it (everything synced, plus a random
// part of what was not); the clone is reopened. Every commit writes every
// key space, each commit overwriting or deleting what the one before wrote,
// so the store after recovery must be exactly the store after some commit c:
// c at least the last synced commit (synced means durable) and every key
// from c and none from c+1 (a commit is atomic).

const (
	crashPartitions = 4
	crashAddresses  = 24  // state entries per commit
	crashValueSize  = 700 // bytes per state value: a commit spans several 4 KiB blocks
)

var crashType = address.TypeName{Namespace: "crash", Name: "fn"}

func crashAddr(i int) address.Address {
	return address.Address{Type: crashType, ID: fmt.Sprint("id/", i)}
}

func crashValue(c uint64, i int) []byte {
	return append(bytes.Repeat([]byte{byte(c)}, crashValueSize), fmt.Sprintf("commit %d entry %d", c, i)...)
}

func crashTimer(c uint64) TimerKey {
	return TimerKey{Partition: 2, Due: int64(c) - 5, ID: c}
}

// writeCommit writes commit c (counting from 1), which replaces commit c-1;
// synced ones with Commit(true) or, every other one, Apply and Wait.
func writeCommit(t *testing.T, db *DB, c uint64, sync bool) {
	t.Helper()
	b := db.NewBatch()
	defer b.Close()
	for p := range crashPartitions {
		b.PutMeta(p, PartitionMeta{CommitID: c, VersionSeq: 10*c + uint64(p)})
	}
	for i := range crashAddresses {
		b.PutState(crashAddr(i), "v", Entry{Typename: "t/v", Value: crashValue(c, i), Version: c})
	}
	b.DeleteState(crashAddr(0), fmt.Sprint("gen", c-1))
	b.PutState(crashAddr(0), fmt.Sprint("gen", c), Entry{Version: c})
	b.DeleteInbox(InboxKey{Partition: 1, Source: 0, Seq: c - 1})
	b.PutInbox(InboxKey{Partition: 1, Source: 0, Seq: c}, envelope(crashAddr(1), fmt.Sprint(c)))
	b.DeleteTimer(crashTimer(c - 1))
	b.PutTimer(crashTimer(c), envelope(crashAddr(2), fmt.Sprint(c)))
	b.PutEgress("crash/out", "r", c, &protocol.EgressRecord{EgressNamespace: "crash", EgressType: "out"})
	b.PutSpecs(crashType, []*protocol.FromFunction_PersistedValueSpec{{StateName: fmt.Sprint("gen", c)}})
	if sync && c%2 == 0 {
		// Every other synced commit as the committer writes them: applied,
		// then waited for; durable once Wait returned.
		a, err := b.Apply()
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Wait(); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := b.Commit(sync); err != nil {
		t.Fatal(err)
	}
}

// checkCommit checks that db holds exactly what commit c left.
func checkCommit(t *testing.T, db *DB, c uint64) {
	t.Helper()
	for p := range crashPartitions {
		if m, err := db.Meta(p); err != nil || m != (PartitionMeta{CommitID: c, VersionSeq: 10*c + uint64(p)}) {
			t.Fatalf("commit %d: Meta(%d) = %+v, %v", c, p, m, err)
		}
	}
	for i := range crashAddresses {
		e, ok, err := db.GetState(crashAddr(i), "v")
		if err != nil || !ok || e.Version != c || !bytes.Equal(e.Value, crashValue(c, i)) {
			t.Fatalf("commit %d: entry %d = version %d, %q…, %v, %v", c, i, e.Version, e.Value[len(e.Value)-20:], ok, err)
		}
	}
	var states []string
	if err := db.ScanAddressState(crashAddr(0), func(s string, _ Entry) error { states = append(states, s); return nil }); err != nil {
		t.Fatal(err)
	}
	if want := []string{fmt.Sprint("gen", c), "v"}; !reflect.DeepEqual(states, want) {
		t.Fatalf("commit %d: states of %v = %q, want %q", c, crashAddr(0), states, want)
	}
	var inbox []InboxKey
	if err := db.ScanInbox(1, func(k InboxKey, _ *protocol.Envelope) error { inbox = append(inbox, k); return nil }); err != nil {
		t.Fatal(err)
	}
	if want := []InboxKey{{Partition: 1, Source: 0, Seq: c}}; !reflect.DeepEqual(inbox, want) {
		t.Fatalf("commit %d: inbox = %v, want %v", c, inbox, want)
	}
	var timers []TimerKey
	if err := db.ScanTimers(2, func(k TimerKey, _ *protocol.Envelope) error { timers = append(timers, k); return nil }); err != nil {
		t.Fatal(err)
	}
	if want := []TimerKey{crashTimer(c)}; !reflect.DeepEqual(timers, want) {
		t.Fatalf("commit %d: timers = %v, want %v", c, timers, want)
	}
	if seq, err := db.MaxEgressSeq(); err != nil || seq != c {
		t.Fatalf("commit %d: MaxEgressSeq = %d, %v", c, seq, err)
	}
	if specs, err := db.Specs(crashType); err != nil || len(specs) != 1 || specs[0].StateName != fmt.Sprint("gen", c) {
		t.Fatalf("commit %d: specs = %v, %v", c, specs, err)
	}
}

// walCounter counts the WAL files Pebble creates. Pebble rotates its WAL
// when a memtable fills (the first one at 256 KiB, whatever MemTableSize
// says) and syncs the old WAL as it closes it, so commits written without
// a sync before a rotation are durable after all.
type walCounter struct {
	vfs.FS
	created atomic.Int64
}

func (w *walCounter) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if strings.HasSuffix(name, ".log") {
		w.created.Add(1)
	}
	return w.FS.Create(name, c)
}

func (w *walCounter) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if strings.HasSuffix(newname, ".log") {
		w.created.Add(1)
	}
	return w.FS.ReuseForWrite(oldname, newname, c)
}

func TestCrashKeepsSyncedCommitsWhole(t *testing.T) {
	rng := testRand(t)
	rounds := 40
	if testing.Short() {
		rounds = 5
	}
	for round := range rounds {
		fs := vfs.NewCrashableMem()
		wals := &walCounter{FS: fs}
		opts := Options{Partitions: crashPartitions, FS: wals, Logger: quietLogger{}, MemTableSize: 1 << 20}
		db, err := Open("db", opts)
		if err != nil {
			t.Fatal(err)
		}
		synced := uint64(1 + rng.IntN(12))
		for c := uint64(1); c <= synced; c++ {
			writeCommit(t, db, c, true)
		}
		// Round 0 is the plain case: one unsynced commit, and a crash that
		// keeps exactly what was synced. The others add up to five
		// unsynced commits and keep a random part of the unsynced blocks
		// and files.
		unsynced := uint64(1)
		cfg := vfs.CrashCloneCfg{}
		if round > 0 {
			unsynced = uint64(1 + rng.IntN(5))
			cfg = vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rng}
		}
		walsBefore := wals.created.Load()
		for c := synced + 1; c <= synced+unsynced; c++ {
			writeCommit(t, db, c, false)
		}
		rotated := wals.created.Load() != walsBefore
		// Before the crash, reads see the unsynced commits.
		checkCommit(t, db, synced+unsynced)

		crashed := fs.CrashClone(cfg)
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}

		opts.FS = crashed
		db, err = Open("db", opts)
		if err != nil {
			t.Fatalf("round %d: reopen after crash: %v", round, err)
		}
		m, err := db.Meta(0)
		if err != nil {
			t.Fatal(err)
		}
		c := m.CommitID
		if c < synced || c > synced+unsynced {
			t.Fatalf("round %d: recovered commit %d, want one in [%d, %d]", round, c, synced, synced+unsynced)
		}
		if cfg.UnsyncedDataPercent == 0 && !rotated && c != synced {
			// Nothing unsynced survived the crash and Pebble synced
			// nothing on its own, so nothing beyond the last sync can
			// be there.
			t.Fatalf("round %d: recovered commit %d with no unsynced data kept, want %d", round, c, synced)
		}
		checkCommit(t, db, c)

		// The recovered store takes new commits.
		writeCommit(t, db, c+1, true)
		checkCommit(t, db, c+1)
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: %d synced + %d unsynced commits, %d%% of unsynced data kept, WAL rotated %v: recovered commit %d",
			round, synced, unsynced, cfg.UnsyncedDataPercent, rotated, c)
	}
}
