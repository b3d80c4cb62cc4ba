package changelog

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
	"github.com/twmb/franz-go/pkg/kfake"
)

// randomOps writes 1 to 8 random store operations of partition p into o,
// over a small set of keys of several spaces (so writes overwrite and
// delete each other), every value tagged with tag. As in the runtime, the
// keys of spaces not keyed by partition (receipts and audit records, by
// mutation id) are written by one partition only.
func randomOps(rng *rand.Rand, o *store.Batch, p int, tag string) {
	for range 1 + rng.IntN(8) {
		a := addrIn(p, rng.IntN(4))
		state := string(rune('a' + rng.IntN(3)))
		ik := store.InboxKey{Partition: p, Arrival: uint64(rng.IntN(6)), Source: store.SourceIngress, Seq: 1}
		tk := store.TimerKey{Partition: p, Due: int64(rng.IntN(5) - 2), ID: uint64(rng.IntN(3))}
		switch rng.IntN(10) {
		case 0, 1:
			// Up to a few KiB, so that Pebble's 32 KiB log blocks fill
			// and reach the filesystem between syncs.
			o.PutState(a, state, entry(tag+strings.Repeat("x", rng.IntN(6000)), rng.Uint64()))
		case 2:
			o.DeleteState(a, state)
		case 3:
			o.PutInbox(ik, env(a, tag))
		case 4:
			o.DeleteInbox(ik)
		case 5:
			o.PutTimer(tk, env(a, tag))
		case 6:
			o.DeleteTimer(tk)
		case 7:
			o.PutReceipt(&protocol.Receipt{Mutation: fmt.Sprint("p", p, "-m", rng.IntN(5)), Status: tag})
		case 8:
			// An audit record and its two index entries, which are empty
			// values: a put of nothing, not a deletion.
			o.PutAudit(&protocol.AuditRecord{At: int64(rng.IntN(3)), Mutation: fmt.Sprint("p", p, "-m", rng.IntN(3)), State: state,
				Target: &protocol.Address{Namespace: a.Type.Namespace, Type: a.Type.Name, Id: a.ID}, Principal: tag})
		case 9:
			o.PutMeta(p, store.PartitionMeta{CommitID: rng.Uint64(), VersionSeq: rng.Uint64()})
			// Specs are the one space several partitions write (the
			// specs of a type); here each partition has a type of its own.
			o.PutSpecs(address.TypeName{Namespace: "ex", Name: fmt.Sprint("fn", p)}, []*protocol.FromFunction_PersistedValueSpec{{StateName: tag}})
		}
	}
}

// crashed is a copy of the store's filesystem as a crash at one point
// could have left it.
type crashed struct {
	fs    *vfs.MemFS
	where string
}

// TestCrashAnywhere is the defect class where a local store kept the
// writes of a transaction that later aborted, or lost track of which
// prefix of the changelog it held. Random transactions of random store
// operations commit or abort; the store's filesystem is crash-cloned at
// every point of every cycle (transaction ended but overlay not applied,
// overlay applied; with a random share of the unsynced data kept) and at
// a random batch of restores. Every clone must hold exactly the committed
// changelog up to the position it records — never a write of an aborted
// transaction — and a restore from there must read exactly the records
// after that position and reach the committed end.
func TestCrashAnywhere(t *testing.T) {
	rng := testRand(t)
	ctx := ctxT(t)
	c := newCluster(t)
	const p = 1
	fs := vfs.NewCrashableMem()
	// The filesystem is also cloned after every write to the write-ahead
	// log: the points inside the apply step.
	wfs := &walWrites{FS: fs}
	db := openStore(t, wfs, "db")
	defer db.Close()
	l, _ := restore(t, ctx, c, db, p, nil)
	prod := producer(t, c, "node-a")
	var m model
	cycles := 24
	if testing.Short() {
		cycles = 8
	}
	var (
		mu     sync.Mutex
		clones []crashed
	)
	crash := func(rng *rand.Rand, where string) {
		mu.Lock()
		defer mu.Unlock()
		cfg := vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rng}
		clones = append(clones, crashed{fs.CrashClone(cfg), fmt.Sprintf("%s (%d%% of unsynced data kept)", where, cfg.UnsyncedDataPercent)})
	}
	// Pebble writes its log from a goroutine of its own, after the commit
	// returned when it is not synced: these clones fall anywhere.
	walRng := rand.New(rand.NewPCG(rng.Uint64(), 1))
	writes := 0
	onWrite := func() { writes++; crash(walRng, fmt.Sprintf("after WAL write %d", writes)) }
	wfs.onWrite.Store(&onWrite)
	for i := range cycles {
		commit := rng.IntN(3) > 0
		tag := fmt.Sprint("committed-", i)
		if !commit {
			tag = fmt.Sprint("aborted-", i)
		}
		cycleHook(t, ctx, prod, l, &m, commit, func(o *store.Batch) { randomOps(rng, o, p, tag) },
			func() { crash(rng, fmt.Sprintf("cycle %d ended (%s), overlay not applied", i, tag)) })
		crash(rng, fmt.Sprintf("cycle %d applied (%s)", i, tag))
		if rng.IntN(3) == 0 {
			// Something makes the log reach the disk (here a synced
			// write of another partition; a full log block, a memtable
			// rotation or the OS do so as well).
			b := db.NewBatch()
			b.PutState(addrIn(3, 0), "sync", entry(tag, 1))
			if err := b.Commit(true); err != nil {
				t.Fatal(err)
			}
			crash(rng, fmt.Sprintf("cycle %d applied (%s) and synced", i, tag))
		}
	}
	wfs.onWrite.Store(nil)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d cycles, %d crash points, %d after a WAL write", cycles, len(clones), writes)
	final := m.at(1 << 62)
	checkEqual(t, db, p, final, &m, "the running store")

	positioned := 0
	for _, cl := range clones {
		t.Run("", func(t *testing.T) {
			if checkClone(t, ctx, c, cl, &m, final, rng) > 0 {
				positioned++
			}
		})
	}
	// The crash points must not all look alike.
	t.Logf("%d of %d crashed stores held a position", positioned, len(clones))
	if positioned == 0 || positioned == len(clones) {
		t.Fatalf("%d of %d crashed stores held a position; the crash points do not cover the apply", positioned, len(clones))
	}
}

// checkClone opens a crashed store, checks it against the changelog up
// to its position, restores it (crashing once more mid-restore, checked
// the same way) and checks it reached the committed end.
func checkClone(t *testing.T, ctx context.Context, c *kfake.Cluster, cl crashed, m *model, final map[string][]byte, rng *rand.Rand) int64 {
	const p = 1
	db := openStore(t, cl.fs, "db")
	from := checkPrefix(t, db, p, m, cl.where)
	crashedAt := from

	// Restore in batches of 2, crash-cloning after a random batch.
	crashAt := 1 + rng.IntN(4)
	var mid *vfs.MemFS
	batches := 0
	_, res := restore(t, ctx, c, db, p, func(cfg *Config) {
		cfg.BatchRecords = 2
		cfg.Progress = func(Progress) {
			if batches++; batches == crashAt {
				mid = cl.fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rng})
			}
		}
	})
	checkEqual(t, db, p, final, m, cl.where+", restored")
	if want := m.after(from); res.Records != want || res.Dropped != "" {
		t.Fatalf("%s: restore from %d read %d records (dropped %q), the committed changelog holds %d after it",
			cl.where, from, res.Records, res.Dropped, want)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if mid == nil {
		return crashedAt
	}
	where := fmt.Sprintf("%s, then a crash after restore batch %d", cl.where, crashAt)
	db = openStore(t, mid, "db")
	defer db.Close()
	from = checkPrefix(t, db, p, m, where)
	_, res = restore(t, ctx, c, db, p, nil)
	checkEqual(t, db, p, final, m, where+", restored")
	if want := m.after(from); res.Records != want {
		t.Fatalf("%s: restore from %d read %d records, want %d", where, from, res.Records, want)
	}
	return crashedAt
}

// checkPrefix checks that the store holds exactly the committed changelog
// before its recorded position, and returns the position.
func checkPrefix(t *testing.T, db *store.DB, p int, m *model, where string) int64 {
	t.Helper()
	pos, ok, err := db.ChangelogPosition(p)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		// Nothing since the store was created survived.
		checkEqual(t, db, p, nil, m, where+", no position")
		return 0
	}
	checkEqual(t, db, p, m.at(pos.Next), m, fmt.Sprintf("%s, at its position %d", where, pos.Next))
	return pos.Next
}

// walWrites calls onWrite, if set, after each write to a write-ahead log
// file.
type walWrites struct {
	vfs.FS
	onWrite atomic.Pointer[func()]
}

func (w *walWrites) wrap(f vfs.File, name string, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return walFile{File: f, w: w}, nil
}

func (w *walWrites) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := w.FS.Create(name, c)
	return w.wrap(f, name, err)
}

func (w *walWrites) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := w.FS.ReuseForWrite(oldname, newname, c)
	return w.wrap(f, newname, err)
}

type walFile struct {
	vfs.File
	w *walWrites
}

func (f walFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	if fn := f.w.onWrite.Load(); fn != nil && n > 0 {
		(*fn)()
	}
	return n, err
}

// after returns the number of committed records at or after offset x.
func (m *model) after(x int64) int64 {
	n := int64(0)
	for _, r := range m.recs {
		if r.offset >= x {
			n++
		}
	}
	return n
}
