package store

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statefun-go/statefun/internal/protocol"
)

// TestScanAuditFilteredAcrossTypes: a filter by id alone, by id within a
// namespace, or by namespace alone merges the ranges of several function
// types into the log's order (and its reverse), reading only the records
// it selects, over a log where ids recur across types and namespaces and
// many records share a millisecond.
func TestScanAuditFilteredAcrossTypes(t *testing.T) {
	c := &clock{t0}
	db := openRetention(t, Retention{}, c, nil)
	types := [][2]string{{"ns", "fn"}, {"ns", "gn"}, {"ns", "hn"}, {"other", "fn"}, {"other", "zz"}, {"n\x00s", "fn"}}
	commit(t, db, func(b *Batch) {
		for n := range 600 {
			at := t0.Add(time.Duration(n/7) * time.Second) // seven records a millisecond
			tn := types[(n*7+n/11)%len(types)]
			r := auditRec(at, n, fmt.Sprint("id", n%4), "who", fmt.Sprint("s", n%3))
			r.Target.Namespace, r.Target.Type = tn[0], tn[1]
			b.PutAudit(r)
		}
	})
	min, max := int64(math.MinInt64), int64(math.MaxInt64)
	mid, late := t0.Add(20*time.Second).UnixMilli(), t0.Add(60*time.Second).UnixMilli()
	for _, f := range []AuditFilter{
		{From: min, To: max, ID: "id1"},
		{From: mid, To: late, ID: "id2"},
		{From: min, To: max, ID: "id3", Namespace: "other"},
		{From: min, To: max, ID: "id0", Namespace: "n\x00s"},
		{From: min, To: max, ID: "nobody"},
		{From: min, To: max, Namespace: "ns"},
		{From: mid, To: late, Namespace: "other"},
		{From: min, To: max, Namespace: "n"},
		{From: min, To: max, Namespace: "nobody"},
	} {
		want := auditByScan(t, db, f)
		if len(want) == 0 && f.ID != "nobody" && f.Namespace != "nobody" && f.Namespace != "n" {
			t.Fatalf("%+v selects nothing: the log does not exercise it", f)
		}
		got, read := auditFiltered(t, db, f)
		if !slices.Equal(got, want) {
			t.Errorf("%+v:\n got %v\nwant %v", f, got, want)
		}
		if read != len(want) {
			t.Errorf("%+v: read %d records to find %d", f, read, len(want))
		}
		checkNewestFirst(t, db, f, want)
	}
	n := 0
	_ = db.ScanAuditFiltered(AuditFilter{From: min, To: max, Namespace: "ns"}, func(*protocol.AuditRecord) bool { n++; return n < 3 })
	if n != 3 {
		t.Errorf("the merged scan went on after fn returned false: %d calls", n)
	}
}

// TestOpenRetiresAuditIndexes: a store an older build wrote, with entries
// in the retired audit indexes by id and by namespace (and, in cluster
// mode, their entries in the changelog key index), holds none of them
// after Open, keeps everything else, and still answers those filters.
func TestOpenRetiresAuditIndexes(t *testing.T) {
	fs := vfs.NewMem()
	opts := Options{FS: fs, Logger: quietLogger{}, SweepInterval: -1, Partitions: 4}
	db, err := Open("db", opts)
	if err != nil {
		t.Fatal(err)
	}
	commit(t, db, func(b *Batch) {
		for n := range 10 {
			r := auditRec(t0.Add(time.Duration(n)*time.Second), n, "a", "who", "s")
			b.PutAudit(r)
			// The entries an older build wrote beside the record.
			suffix := auditSuffix(nil, r.GetAt(), r.GetMutation(), r.GetState())
			for _, k := range [][]byte{
				append(appendString([]byte{spaceRetiredAuditID}, "a"), suffix...),
				append(appendString([]byte{spaceRetiredAuditNamespace}, "ns"), suffix...),
			} {
				b.set(k, nil)
				b.set(changelogKeysKey(nil, n%4, k), nil)
			}
		}
		b.set(changelogKeysKey(nil, 2, stateKey(nil, addr("ns", "fn", "a"), "s")), nil)
		b.pb.Delete(metaKey(nil, metaAuditRetired), nil)
	})
	_ = db.Close()
	if db, err = Open("db", opts); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, space := range []byte{spaceRetiredAuditID, spaceRetiredAuditNamespace} {
		if n := countSpace(t, db, space); n != 0 {
			t.Errorf("space %#x holds %d keys after Open", space, n)
		}
	}
	if n := countSpace(t, db, spaceChangelogKeys); n != 1 {
		t.Errorf("the changelog key index holds %d entries, want the 1 that names a live space", n)
	}
	if n := countSpace(t, db, spaceAudit); n != 10 {
		t.Errorf("%d audit records, want 10", n)
	}
	if _, ok, err := db.metaU32(metaAuditRetired); err != nil || !ok {
		t.Fatalf("not marked: %v %v", ok, err)
	}
	for _, f := range []AuditFilter{{ID: "a"}, {Namespace: "ns"}} {
		f.From, f.To = math.MinInt64, math.MaxInt64
		n := 0
		_ = db.ScanAuditFiltered(f, func(*protocol.AuditRecord) bool { n++; return true })
		if n != 10 {
			t.Errorf("%+v finds %d of 10 records", f, n)
		}
	}
}

// TestApplyChangelogSkipsRetiredSpaces: a changelog an older build wrote
// holds index entries of the retired spaces; applying it keeps none of
// them, and everything else it carries.
func TestApplyChangelogSkipsRetiredSpaces(t *testing.T) {
	db, _ := openTest(t, 4)
	r := auditRec(t0, 1, "a", "who", "s")
	b := db.NewBatch()
	b.PutAudit(r)
	var ops []Op
	if err := b.Ops(func(op Op) error {
		ops = append(ops, Op{Key: cloneBytes(op.Key), Value: cloneBytes(op.Value), Delete: op.Delete})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	b.Close()
	suffix := auditSuffix(nil, r.GetAt(), r.GetMutation(), r.GetState())
	retired := append(appendString([]byte{spaceRetiredAuditID}, "a"), suffix...)
	ops = append(ops, Op{Key: retired, Value: []byte{}},
		Op{Key: append(appendString([]byte{spaceRetiredAuditNamespace}, "ns"), suffix...), Value: []byte{}},
		Op{Key: append(appendString([]byte{spaceRetiredAuditID}, "b"), suffix...), Delete: true})
	if err := db.ApplyChangelog(1, ops, ChangelogPosition{Next: int64(len(ops))}); err != nil {
		t.Fatal(err)
	}
	for _, space := range []byte{spaceRetiredAuditID, spaceRetiredAuditNamespace} {
		if n := countSpace(t, db, space); n != 0 {
			t.Errorf("space %#x holds %d keys", space, n)
		}
	}
	var named []string
	if err := db.ChangelogKeys(1, func(key []byte) error { named = append(named, formatKey(key)); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(named) != len(ops)-3 {
		t.Errorf("the changelog key index names %q, want the %d keys of live spaces", named, len(ops)-3)
	}
	n := 0
	_ = db.ScanAuditFiltered(AuditFilter{From: math.MinInt64, To: math.MaxInt64, ID: "a"}, func(*protocol.AuditRecord) bool { n++; return true })
	if n != 1 {
		t.Errorf("the applied record is found %d times by id, want 1", n)
	}
}

// auditByScan returns the records (mutation/state) of f as a full scan of
// the log and a check of each record give them.
func auditByScan(t *testing.T, db *DB, f AuditFilter) []string {
	t.Helper()
	var out []string
	if err := db.ScanAudit(f.From, f.To, func(r *protocol.AuditRecord) bool {
		if f.match(r) {
			out = append(out, r.GetMutation()+"/"+r.GetState())
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// auditFiltered returns the records (mutation/state) ScanAuditFiltered
// gives for f, and how many records it read.
func auditFiltered(t *testing.T, db *DB, f AuditFilter) (got []string, read int) {
	t.Helper()
	read, err := db.scanAuditFiltered(f, func(r *protocol.AuditRecord) bool {
		got = append(got, r.GetMutation()+"/"+r.GetState())
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return got, read
}

// checkNewestFirst checks that f, newest first, gives the records want
// (oldest first) the other way round.
func checkNewestFirst(t *testing.T, db *DB, f AuditFilter, want []string) {
	t.Helper()
	f.Newest = true
	newest, _ := auditFiltered(t, db, f)
	slices.Reverse(newest)
	if !slices.Equal(newest, want) {
		t.Errorf("%+v newest first, reversed:\n got %v\nwant %v", f, newest, want)
	}
}

func cloneBytes(b []byte) []byte { return append([]byte(nil), b...) }
