package changelog

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestCommittedRestoreAbortedNever: the owner of partition 1 commits some
// transactions and aborts others; a process that never owned it restores
// it, and holds exactly the committed writes — not one of an aborted
// transaction — and nothing of partition 1 touches partition 2.
func TestCommittedRestoreAbortedNever(t *testing.T) {
	ctx := ctxT(t)
	c := newCluster(t)
	owner := openStore(t, nil, t.TempDir())
	defer owner.Close()
	l, res := restore(t, ctx, c, owner, 1, nil)
	if res.Records != 0 || l.Position() != 0 {
		t.Fatalf("restore of an empty changelog: %+v, position %d", res, l.Position())
	}
	prod := producer(t, c, "node-a")
	var m model
	a, b := addrIn(1, 0), addrIn(1, 1)
	for i := range 12 {
		commit := i%3 != 1
		cycle(t, ctx, prod, l, &m, commit, func(o *store.Batch) {
			tag := "committed"
			if !commit {
				tag = "aborted"
			}
			o.PutState(a, "count", entry(fmt.Sprint(i), uint64(i)))
			o.PutState(b, fmt.Sprint(tag, i), entry(tag, uint64(i)))
			o.PutInbox(store.InboxKey{Partition: 1, Arrival: uint64(i), Source: store.SourceIngress, Seq: uint64(i)}, env(a, tag))
			if i > 0 {
				o.DeleteInbox(store.InboxKey{Partition: 1, Arrival: uint64(i - 1), Source: store.SourceIngress, Seq: uint64(i - 1)})
			}
			o.PutReceipt(&protocol.Receipt{Mutation: fmt.Sprint("m-", tag, i), Status: "committed"})
			o.PutMeta(1, store.PartitionMeta{CommitID: uint64(i + 1), VersionSeq: uint64(i)})
		})
	}
	end := l.Position()
	checkEqual(t, owner, 1, m.at(end), &m, "the owner's store")

	other := openStore(t, nil, t.TempDir())
	defer other.Close()
	// The other process holds partition 2's data already.
	l2, _ := restore(t, ctx, c, other, 2, nil)
	var m2 model
	cycle(t, ctx, producer(t, c, "node-b"), l2, &m2, true, func(o *store.Batch) {
		o.PutState(addrIn(2, 0), "x", entry("p2", 1))
	})
	before2 := contents(t, other, 2)

	var progress []Progress
	lo, res := restore(t, ctx, c, other, 1, func(cfg *Config) { cfg.Progress = func(p Progress) { progress = append(progress, p) } })
	// The owner's position is after its last record; the changelog ends
	// one later, after the last transaction's commit marker.
	if lo.Position() != end+1 || res.To != end+1 || res.From != 0 {
		t.Fatalf("restore reached %d (%+v), want %d", lo.Position(), res, end+1)
	}
	checkEqual(t, other, 1, m.at(end), &m, "the restored store")
	if e, ok, err := other.GetState(a, "count"); err != nil || !ok || string(e.Value) != "11" {
		t.Fatalf("count = %q %v %v, want the last committed 11", e.Value, ok, err)
	}
	for i := 1; i < 12; i += 3 {
		if _, ok, _ := other.GetState(b, fmt.Sprint("aborted", i)); ok {
			t.Fatalf("a write of aborted transaction %d was restored", i)
		}
		if _, ok, err := other.Receipt(fmt.Sprint("m-aborted", i)); err != nil || ok {
			t.Fatalf("a receipt of aborted transaction %d was restored", i)
		}
	}
	if res.Records != int64(len(m.recs)) {
		t.Fatalf("restore applied %d records, the committed changelog holds %d", res.Records, len(m.recs))
	}
	// Progress: batches of at most about 7 records, counting up to all of
	// them; the target bounds the records from above.
	last := progress[len(progress)-1]
	if len(progress) < 3 || last.Applied != res.Records || last.Offset != end+1 || last.Target != end+1 || last.Applied > last.Target {
		t.Fatalf("progress = %+v", progress)
	}
	if got := contents(t, other, 2); fmt.Sprint(got) != fmt.Sprint(before2) {
		t.Fatalf("restoring partition 1 changed partition 2's data: %v, was %v", got, before2)
	}
}

// TestRestoreReadsOnlyTheTail: a process that owned a partition, stopped
// and restarted, reads only what others committed meanwhile.
func TestRestoreReadsOnlyTheTail(t *testing.T) {
	ctx := ctxT(t)
	c := newCluster(t)
	dir := filepath.Join(t.TempDir(), "a")
	a := openStore(t, nil, dir)
	la, _ := restore(t, ctx, c, a, 3, nil)
	var m model
	k := addrIn(3, 0)
	for i := range 5 {
		cycle(t, ctx, producer(t, c, "node-a"), la, &m, true, func(o *store.Batch) {
			o.PutState(k, fmt.Sprint("s", i), entry("a", uint64(i)))
		})
	}
	stopped := la.Position()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}

	// The partition moves to b, which commits 4 more records.
	b := openStore(t, nil, t.TempDir())
	defer b.Close()
	lb, res := restore(t, ctx, c, b, 3, nil)
	if res.Records != 5 {
		t.Fatalf("b restored %d records, want 5", res.Records)
	}
	cycle(t, ctx, producer(t, c, "node-b"), lb, &m, true, func(o *store.Batch) {
		o.DeleteState(k, "s0")
		o.PutState(k, "s1", entry("b", 9))
		o.PutState(k, "s9", entry("b", 9))
		o.PutMeta(3, store.PartitionMeta{CommitID: 9})
	})

	a = openStore(t, nil, dir)
	defer a.Close()
	la, res = restore(t, ctx, c, a, 3, nil)
	if res.From != stopped || res.Records != 4 || res.Dropped != "" {
		t.Fatalf("restart restored %+v, want 4 records from %d", res, stopped)
	}
	checkEqual(t, a, 3, m.at(la.Position()), &m, "after the restart")
	if _, ok, _ := a.GetState(k, "s0"); ok {
		t.Fatal("a deletion committed elsewhere did not reach the restarted store")
	}
}

// TestTombstones: a deletion after a put restores to absence, before and
// after compaction removed the put and the tombstone.
func TestTombstones(t *testing.T) {
	ctx := ctxT(t)
	c := newCluster(t)
	db := openStore(t, nil, t.TempDir())
	defer db.Close()
	l, _ := restore(t, ctx, c, db, 0, nil)
	var m model
	k := addrIn(0, 0)
	prod := producer(t, c, "node-a")
	cycle(t, ctx, prod, l, &m, true, func(o *store.Batch) {
		o.PutState(k, "gone", entry("x", 1))
		o.PutState(k, "kept", entry("y", 1))
	})
	stale := openStore(t, nil, t.TempDir()) // restored before the deletion
	defer stale.Close()
	restore(t, ctx, c, stale, 0, nil)
	cycle(t, ctx, prod, l, &m, true, func(o *store.Batch) { o.DeleteState(k, "gone") })
	cycle(t, ctx, prod, l, &m, true, func(o *store.Batch) { o.PutState(k, "later", entry("z", 2)) })

	fresh := openStore(t, nil, t.TempDir())
	defer fresh.Close()
	restore(t, ctx, c, fresh, 0, nil)
	checkEqual(t, fresh, 0, m.at(l.Position()), &m, "before compaction")

	// Compaction with tombstones kept for 0 ms removes the put and its
	// tombstone: a fresh restore sees neither.
	setTopicConfig(t, c, "delete.retention.ms", "0")
	c.Compact()
	fresh2 := openStore(t, nil, t.TempDir())
	defer fresh2.Close()
	_, res := restore(t, ctx, c, fresh2, 0, nil)
	if res.Records >= int64(len(m.recs)) {
		t.Fatalf("compaction removed nothing: %d records restored of %d", res.Records, len(m.recs))
	}
	checkEqual(t, fresh2, 0, m.at(l.Position()), &m, "after compaction, a fresh store")

	// The stale store restored before the deletion; the tombstone it needs
	// is gone. Its position is older than half the tombstone retention,
	// so its data is dropped and read again in full.
	_, res = restore(t, ctx, c, stale, 0, func(cfg *Config) {
		cfg.DeleteRetention = time.Millisecond
		cfg.Now = func() time.Time { return time.Now().Add(time.Second) }
	})
	if !strings.Contains(res.Dropped, "tombstone retention") {
		t.Fatalf("stale store not dropped: %+v", res)
	}
	checkEqual(t, stale, 0, m.at(l.Position()), &m, "after compaction, the stale store")
}

func setTopicConfig(t *testing.T, c interface{ ListenAddrs() []string }, key, value string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).AlterTopicConfigs(ctxT(t), []kadm.AlterConfig{{Op: kadm.SetConfig, Name: key, Value: &value}}, testTopic)
	if err == nil {
		err = resp[0].Err
	}
	if err != nil {
		t.Fatalf("set %s=%s: %v", key, value, err)
	}
}

// TestRestoreDropsUntrustedPosition: a position the changelog cannot back
// (a recreated topic, a position past the end) drops the partition's data
// and restores from the start, saying why; other partitions keep theirs.
func TestRestoreDropsUntrustedPosition(t *testing.T) {
	ctx := ctxT(t)
	c := newCluster(t)
	db := openStore(t, nil, t.TempDir())
	defer db.Close()
	l, _ := restore(t, ctx, c, db, 2, nil)
	var m model
	cycle(t, ctx, producer(t, c, "node-a"), l, &m, true, func(o *store.Batch) {
		o.PutState(addrIn(2, 0), "old", entry("old", 1))
	})
	l1, _ := restore(t, ctx, c, db, 1, nil)
	var m1 model
	cycle(t, ctx, producer(t, c, "node-b"), l1, &m1, true, func(o *store.Batch) {
		o.PutState(addrIn(1, 0), "p1", entry("p1", 1))
	})

	// Position past the end, same topic.
	pos, _, _ := db.ChangelogPosition(2)
	pos.Next += 100
	if err := db.ApplyChangelog(2, nil, pos); err != nil {
		t.Fatal(err)
	}
	_, res := restore(t, ctx, c, db, 2, nil)
	if !strings.Contains(res.Dropped, "past the changelog's end") || res.DroppedKeys != 1 || res.Records != 1 {
		t.Fatalf("position past the end: %+v", res)
	}
	checkEqual(t, db, 2, m.at(l.Position()), &m, "after the drop")

	// The topic is deleted and created again, and gets a new record.
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).DeleteTopic(ctx, testTopic); err != nil {
		t.Fatal(err)
	}
	createTopic(t, c, testTopic)
	lnew := &Log{db: db, topic: testTopic, partition: 2, now: time.Now}
	var mnew model
	cycle(t, ctx, producer(t, c, "node-c"), lnew, &mnew, true, func(o *store.Batch) {
		o.PutState(addrIn(2, 0), "new", entry("new", 1))
	})
	_, res = restore(t, ctx, c, db, 2, nil)
	if !strings.Contains(res.Dropped, "another topic id") || res.Records != 1 {
		t.Fatalf("recreated topic: %+v", res)
	}
	checkEqual(t, db, 2, mnew.at(1<<62), &mnew, "after the topic was recreated")
	checkEqual(t, db, 1, m1.at(1<<62), &m1, "partition 1, untouched")
}

// TestApplyRefuses: an overlay with a range deletion cannot be logged, and
// an overlay cannot be applied without the records of its transaction.
func TestApplyRefuses(t *testing.T) {
	ctx := ctxT(t)
	c := newCluster(t)
	db := openStore(t, nil, t.TempDir())
	defer db.Close()
	l, _ := restore(t, ctx, c, db, 0, nil)
	o := db.NewBatch()
	o.DeleteEgressThrough("ex/out", "r", 5)
	if _, err := l.Records(o); !errors.Is(err, store.ErrNotLoggable) || !strings.Contains(err.Error(), "playground egress") {
		t.Fatalf("range deletion: %v", err)
	}
	o.Close()
	o = db.NewBatch()
	o.PutState(addrIn(0, 0), "s", entry("v", 1))
	if err := l.Apply(o, nil); err == nil || !strings.Contains(err.Error(), "without its changelog records") {
		t.Fatalf("apply without records: %v", err)
	}
	if _, ok, _ := db.GetState(addrIn(0, 0), "s"); ok {
		t.Fatal("a refused apply wrote")
	}
	if _, err := decodeRecord([]byte{0x01}, []byte{0x02, 1}); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "0x02") {
		t.Fatalf("unknown value format: %v", err)
	}
	if _, err := decodeRecord([]byte{0x17, 0, 1}, []byte{0x01}); !errors.Is(err, ErrFormat) {
		t.Fatalf("a changelog record for a process-local key: %v", err)
	}
}
