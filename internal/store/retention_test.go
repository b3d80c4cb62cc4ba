package store

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/statefun-go/statefun/internal/protocol"
)

// clock is a settable clock for retention.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

var t0 = time.UnixMilli(1_700_000_000_000)

func openRetention(t *testing.T, r Retention, c *clock, m *Metrics) *DB {
	t.Helper()
	db, err := Open("db", Options{FS: vfs.NewMem(), Logger: quietLogger{}, SweepInterval: -1, Retention: r, Now: c.now, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func mutationID(at time.Time, n int) string {
	return fmt.Sprintf("%013d-%08x", at.UnixMilli(), n)
}

func auditRec(at time.Time, n int, id, principal, state string) *protocol.AuditRecord {
	return &protocol.AuditRecord{Mutation: mutationID(at, n), At: at.UnixMilli(), Principal: principal,
		Target: &protocol.Address{Namespace: "ns", Type: "fn", Id: id}, State: state}
}

func countSpace(t *testing.T, db *DB, space byte) int {
	t.Helper()
	n, err := db.countKeys([]byte{space}, []byte{space + 1})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestRetentionReceipts: receipts past the age, and the oldest beyond the
// count, are deleted; the rest stay.
func TestRetentionReceipts(t *testing.T) {
	c := &clock{t0}
	db := openRetention(t, Retention{ReceiptAge: time.Hour, ReceiptCount: 5}, c, nil)
	commit(t, db, func(b *Batch) {
		for i := range 10 {
			at := t0.Add(time.Duration(i) * time.Minute)
			b.PutReceipt(&protocol.Receipt{Mutation: mutationID(at, i), At: at.UnixMilli(), Status: "committed"})
		}
	})
	st, err := db.Sweep()
	if err != nil {
		t.Fatal(err)
	}
	if st.DeletedReceipts != 5 || st.Receipts != 5 {
		t.Fatalf("count limit: %+v", st)
	}
	if _, ok, _ := db.Receipt(mutationID(t0.Add(4*time.Minute), 4)); ok {
		t.Error("the 5th oldest receipt survived the count limit")
	}
	if _, ok, _ := db.Receipt(mutationID(t0.Add(5*time.Minute), 5)); !ok {
		t.Error("a receipt within both limits was deleted")
	}
	c.t = t0.Add(time.Hour + 7*time.Minute + time.Millisecond) // receipts at 0..7 min are over an hour old
	if st, err = db.Sweep(); err != nil || st.DeletedReceipts != 3 || st.Receipts != 2 {
		t.Fatalf("age limit: %+v %v", st, err)
	}
}

// TestRetentionAuditDeletesIndexEntries: audit retention removes records
// with their index entries, so filtered queries see exactly what an
// unfiltered one does.
func TestRetentionAuditDeletesIndexEntries(t *testing.T) {
	c := &clock{t0}
	db := openRetention(t, Retention{AuditAge: time.Hour, AuditCount: 2500}, c, nil)
	for chunk := range 3 {
		commit(t, db, func(b *Batch) {
			for i := range 1000 {
				n := chunk*1000 + i
				b.PutAudit(auditRec(t0.Add(time.Duration(n)*time.Second), n, fmt.Sprint("id", n%7), fmt.Sprint("who", n%3), "s"))
			}
		})
	}
	if got := countSpace(t, db, spaceAuditAddr) + countSpace(t, db, spaceAuditWho); got != 6000 {
		t.Fatalf("%d index entries for 3000 records", got)
	}
	st, err := db.Sweep()
	if err != nil || st.DeletedAudit != 500 || st.Audit != 2500 {
		t.Fatalf("count limit: %+v %v", st, err)
	}
	for _, sp := range []byte{spaceAuditAddr, spaceAuditWho} {
		if got := countSpace(t, db, sp); got != 2500 {
			t.Errorf("space %#x holds %d entries after retention, want 2500", sp, got)
		}
	}
	// Move the clock so the records before second 2400 are over an hour
	// old; 600 remain.
	c.t = t0.Add(time.Hour + 2400*time.Second)
	if st, err = db.Sweep(); err != nil || st.Audit != 600 {
		t.Fatalf("age limit: %+v %v", st, err)
	}
	for _, sp := range []byte{spaceAuditAddr, spaceAuditWho} {
		if got := countSpace(t, db, sp); got != 600 {
			t.Errorf("space %#x holds %d entries, want 600", sp, got)
		}
	}
}

// TestRetentionEgress: the count limit applies per outbox; the age limit
// deletes records seen by a sweep at least the age ago.
func TestRetentionEgress(t *testing.T) {
	c := &clock{t0}
	db := openRetention(t, Retention{EgressAge: time.Hour, EgressCount: 3}, c, nil)
	seq := uint64(0)
	put := func(route string, n int) {
		commit(t, db, func(b *Batch) {
			for range n {
				seq++
				b.PutEgress("io/eg", route, seq, &protocol.EgressRecord{EgressNamespace: "io", EgressType: "eg"})
			}
		})
	}
	put("a", 5)
	put("b", 2)
	st, err := db.Sweep()
	if err != nil || st.DeletedEgress != 2 || st.Egress != 5 {
		t.Fatalf("count limit: %+v %v", st, err)
	}
	if s, _, ok, _ := db.NextEgress("io/eg", "a", 0); !ok || s != 3 {
		t.Fatalf("outbox a starts at %d, want 3 (the two oldest deleted)", s)
	}
	// Half an hour on, one more record; an hour after the first sweep the
	// records it saw expire, the new one stays.
	c.t = t0.Add(30 * time.Minute)
	put("b", 1)
	if st, err = db.Sweep(); err != nil || st.Egress != 6 {
		t.Fatalf("nothing is an hour old yet: %+v %v", st, err)
	}
	c.t = t0.Add(time.Hour)
	if st, err = db.Sweep(); err != nil || st.Egress != 1 {
		t.Fatalf("age limit: %+v %v", st, err)
	}
	if s, _, ok, _ := db.NextEgress("io/eg", "b", 0); !ok || s != seq {
		t.Fatalf("outbox b holds %d, want the newest record %d", s, seq)
	}
}

// TestRetentionKeepsKafkaOutboxes: the outboxes of a kept egress (a Kafka
// egress) lose nothing to age or count, while another egress's outbox is
// trimmed as usual.
func TestRetentionKeepsKafkaOutboxes(t *testing.T) {
	c := &clock{t0}
	db := openRetention(t, Retention{EgressAge: time.Hour, EgressCount: 2, KeepEgress: []string{"kafka/out"}}, c, nil)
	seq := uint64(0)
	commit(t, db, func(b *Batch) {
		for range 5 {
			seq++
			b.PutEgress("kafka/out", "kafka/out", seq, &protocol.EgressRecord{EgressNamespace: "kafka", EgressType: "out"})
			seq++
			b.PutEgress("io/eg", "a", seq, &protocol.EgressRecord{EgressNamespace: "io", EgressType: "eg"})
		}
	})
	c.t = t0.Add(time.Hour)
	if _, err := db.Sweep(); err != nil {
		t.Fatal(err)
	}
	c.t = t0.Add(3 * time.Hour)
	st, err := db.Sweep()
	if err != nil {
		t.Fatal(err)
	}
	if st.Egress != 5 {
		t.Fatalf("left %d egress records, want the 5 of the kept outbox: %+v", st.Egress, st)
	}
	if s, _, ok, _ := db.NextEgress("kafka/out", "kafka/out", 0); !ok || s != 1 {
		t.Fatalf("the kept outbox starts at %d (ok %v), want its first record 1", s, ok)
	}
	if _, _, ok, _ := db.NextEgress("io/eg", "a", 0); ok {
		t.Fatal("the playground outbox was not trimmed")
	}
}

// TestRetentionNegativeKeeps: negative limits keep everything.
func TestRetentionNegativeKeeps(t *testing.T) {
	c := &clock{t0}
	db := openRetention(t, Retention{ReceiptAge: -1, ReceiptCount: -1}, c, nil)
	commit(t, db, func(b *Batch) {
		b.PutReceipt(&protocol.Receipt{Mutation: "m", At: 0})
	})
	c.t = t0.Add(1000 * time.Hour)
	if st, err := db.Sweep(); err != nil || st.Receipts != 1 {
		t.Fatalf("%+v %v", st, err)
	}
}

// TestSweepDeletesInBoundedBatches: a large backlog is removed in many
// batches of at most sweepBatch operations, never in one.
func TestSweepDeletesInBoundedBatches(t *testing.T) {
	c := &clock{t0}
	db := openRetention(t, Retention{ReceiptCount: 1}, c, nil)
	for chunk := range 5 {
		commit(t, db, func(b *Batch) {
			for i := range 1000 {
				n := chunk*1000 + i
				b.PutReceipt(&protocol.Receipt{Mutation: mutationID(t0, n), At: t0.UnixMilli()})
			}
		})
	}
	st, err := db.Sweep()
	if err != nil || st.DeletedReceipts != 4999 {
		t.Fatalf("%+v %v", st, err)
	}
	// The deleter Sweep uses commits every sweepBatch deletions.
	d := &deleter{db: db}
	commits := 0
	for i := range 2500 {
		d.batch().delete(receiptKey(nil, fmt.Sprint("x", i)))
		if d.b.Len() >= sweepBatch {
			commits++
		}
		if err := d.done(); err != nil {
			t.Fatal(err)
		}
		if d.b != nil && d.b.Len() > sweepBatch {
			t.Fatalf("a batch grew to %d deletions", d.b.Len())
		}
	}
	if commits != 2 {
		t.Fatalf("%d full batches for 2500 deletions, want 2", commits)
	}
	_ = d.flush()
}

// TestScanAuditFilteredMatchesScan: every filter gives what a full scan and
// a check of each record gives, oldest first (and newest first, reversed),
// and stops when fn says so.
func TestScanAuditFilteredMatchesScan(t *testing.T) {
	c := &clock{t0}
	db := openRetention(t, Retention{}, c, nil)
	commit(t, db, func(b *Batch) {
		for n := range 300 {
			b.PutAudit(auditRec(t0.Add(time.Duration(n)*time.Second), n, fmt.Sprint("id", n%5), fmt.Sprint("who", n%4), fmt.Sprint("s", n%2)))
		}
	})
	min, max := int64(math.MinInt64), int64(math.MaxInt64)
	mid := t0.Add(100 * time.Second).UnixMilli()
	for _, f := range []AuditFilter{
		{From: min, To: max, Namespace: "ns", Type: "fn", ID: "id3"},
		{From: mid, To: max, Namespace: "ns", Type: "fn", ID: "id3", State: "s1"},
		{From: min, To: mid, Principal: "who2"},
		{From: min, To: max, Principal: "who1", ID: "id2"},
		{From: min, To: max, Namespace: "ns", Type: "fn", ID: "nobody"},
		{From: min, To: max, Namespace: "ns", Type: "fn", State: "s0"},
		{From: mid, To: max, Namespace: "ns", Type: "fn"},
		{From: min, To: max, Mutation: mutationID(t0.Add(7*time.Second), 7)},
		{From: min, To: max, Mutation: mutationID(t0.Add(7*time.Second), 7), State: "s0"},
		{From: min, To: max, Mutation: "nobody"},
		{From: mid, To: max},
		{From: min, To: max, ID: "id2"},
		{From: min, To: max, ID: "id2", State: "s1"},
		{From: mid, To: max, Namespace: "ns"},
		{From: min, To: max, Namespace: "other"},
	} {
		got, read := auditFiltered(t, db, f)
		want := auditByScan(t, db, f)
		if !slices.Equal(got, want) {
			t.Errorf("%+v:\n got %v\nwant %v", f, got, want)
		}
		// Through an index, the records read are the ones the index
		// selects, not the log: at most the matches and those the extra
		// fields (state, id) leave out.
		if bound := indexedBound(f, len(want)); read > bound {
			t.Errorf("%+v: read %d records to find %d; want at most %d", f, read, len(want), bound)
		}
		checkNewestFirst(t, db, f, got)
	}
	n := 0
	_ = db.ScanAuditFiltered(AuditFilter{From: min, To: max, Principal: "who0"}, func(*protocol.AuditRecord) bool { n++; return n < 3 })
	if n != 3 {
		t.Errorf("the scan went on after fn returned false: %d calls", n)
	}
	// What no index serves is refused, naming what to add.
	for _, f := range []AuditFilter{
		{From: min, To: max, State: "s0"},
		{From: min, To: max, Type: "fn"},
		{From: min, To: max, Type: "fn", State: "s1"},
	} {
		err := db.ScanAuditFiltered(f, func(*protocol.AuditRecord) bool { return true })
		if !errors.Is(err, ErrAuditFilterUnindexed) || !strings.Contains(err.Error(), "add a mutation, a principal, an id or a namespace") {
			t.Errorf("%+v: %v; want ErrAuditFilterUnindexed saying what to add", f, err)
		}
	}
}

// indexedBound is how many records a scan through an index may read for a
// filter with want matches in TestScanAuditFilteredMatchesScan's log (300
// records, ids n%5, principals n%4, states n%2): the index's selection
// before the extra fields narrow it.
func indexedBound(f AuditFilter, want int) int {
	switch {
	case f.Mutation != "":
		return want + 1 // one mutation: one record here, whatever its state
	case f.ID != "" && f.State != "":
		return 2 * want
	case f.Principal != "" && f.ID != "":
		return 5 * want
	case f.Namespace != "" && f.State != "":
		return 2 * want
	case f.ID != "" && f.State != "":
		return 2 * want
	}
	return want // the index (or the window) selects exactly the matches
}

// TestOpenIndexesAnOlderAuditLog: a store whose audit records were written
// before the index existed gets its index entries at Open.
func TestOpenIndexesAnOlderAuditLog(t *testing.T) {
	fs := vfs.NewMem()
	db, err := Open("db", Options{FS: fs, Logger: quietLogger{}, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	commit(t, db, func(b *Batch) {
		for n := range 10 {
			r := auditRec(t0.Add(time.Duration(n)*time.Second), n, "a", "who", "s")
			b.key = auditKey(b.key[:0], r.GetAt(), r.GetMutation(), r.GetState())
			b.setProto(b.key, r) // as an older build wrote it: no index
		}
		b.pb.Delete(metaKey(nil, metaAuditIndexed), nil)
		b.pb.Delete(metaKey(nil, metaAuditIndexed2), nil)
	})
	_ = db.Close()
	db, err = Open("db", Options{FS: fs, Logger: quietLogger{}, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, f := range []AuditFilter{{Principal: "who"}, {Namespace: "ns", Type: "fn"}, {Namespace: "ns", Type: "fn", ID: "a"}, {ID: "a"}, {Namespace: "ns"}} {
		f.From, f.To = math.MinInt64, math.MaxInt64
		n := 0
		_ = db.ScanAuditFiltered(f, func(*protocol.AuditRecord) bool { n++; return true })
		if n != 10 {
			t.Fatalf("%+v: the index finds %d of 10 older records", f, n)
		}
	}
	n := 0
	_ = db.ScanAuditFiltered(AuditFilter{From: math.MinInt64, To: math.MaxInt64, Mutation: mutationID(t0.Add(3*time.Second), 3)}, func(*protocol.AuditRecord) bool { n++; return true })
	if n != 1 {
		t.Fatalf("the index by mutation finds %d records of m3, want 1", n)
	}
}

// TestRetentionMetrics: a sweep publishes the sizes and the deletions.
func TestRetentionMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := &clock{t0}
	db := openRetention(t, Retention{AuditCount: 1}, c, NewMetrics(reg))
	commit(t, db, func(b *Batch) {
		b.PutAudit(auditRec(t0, 1, "a", "who", "s"))
		b.PutAudit(auditRec(t0.Add(time.Second), 2, "a", "who", "s"))
		b.PutReceipt(&protocol.Receipt{Mutation: "m", At: t0.UnixMilli()})
		b.PutIdempotency("ns/fn", "k", IdempotencyRecord{At: t0.UnixMilli()})
	})
	if _, err := db.Sweep(); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP statefun_store_records Records kept in a retained key space (receipts, audit, egress, idempotency, dead-letters, message-dead-letters), counted at the last retention sweep.
# TYPE statefun_store_records gauge
statefun_store_records{space="audit"} 1
statefun_store_records{space="dead-letters"} 0
statefun_store_records{space="egress"} 0
statefun_store_records{space="idempotency"} 1
statefun_store_records{space="message-dead-letters"} 0
statefun_store_records{space="receipts"} 1
# HELP statefun_store_retention_deleted_total Records deleted by retention, per key space (an egress record deleted here was never taken by a consumer).
# TYPE statefun_store_retention_deleted_total counter
statefun_store_retention_deleted_total{space="audit"} 1
statefun_store_retention_deleted_total{space="dead-letters"} 0
statefun_store_retention_deleted_total{space="egress"} 0
statefun_store_retention_deleted_total{space="history"} 0
statefun_store_retention_deleted_total{space="idempotency"} 0
statefun_store_retention_deleted_total{space="message-dead-letters"} 0
statefun_store_retention_deleted_total{space="receipts"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "statefun_store_records", "statefun_store_retention_deleted_total"); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "statefun_store_bytes"); err != nil || n != 7 {
		t.Fatalf("statefun_store_bytes: %d series, %v", n, err)
	}
}
