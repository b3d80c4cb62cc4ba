package store

import (
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/statefun-go/statefun/internal/protocol"
)

// histRec is a record of value v (or a deletion) at time at.
func histRec(at time.Time, v string, del bool) *protocol.HistoryRecord {
	r := &protocol.HistoryRecord{At: at.UnixMilli(), Deleted: del, Cause: &protocol.HistoryCause{Kind: 1}}
	if !del {
		r.Version, r.Typename, r.Value = uint64(len(v))+1000, "t/s", []byte(v)
	}
	return r
}

// history lists the records of one entry, oldest first, as "commit:value"
// ("commit:-" for a deletion, "!" after a truncated one).
func history(t *testing.T, db *DB, state string) []string {
	t.Helper()
	var out []string
	err := db.ScanHistory(addr("ns", "fn", "a"), state, true, 0, func(r HistoryRecord) bool {
		s := fmt.Sprintf("%d:%s", r.Commit, r.GetValue())
		if r.GetDeleted() {
			s = fmt.Sprintf("%d:-", r.Commit)
		}
		if r.GetTruncated() {
			s += "!"
		}
		out = append(out, s)
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestHistoryScanBothWaysAndPaged(t *testing.T) {
	db, _ := openTest(t, 1)
	a := addr("ns", "fn", "a")
	for c := uint64(1); c <= 5; c++ {
		commit(t, db, func(b *Batch) {
			b.PutHistory(a, "s", c, histRec(t0, fmt.Sprint("v", c), c == 3))
			b.PutHistory(a, "s2", c, histRec(t0, "other", false)) // a longer name sharing the prefix
		})
	}
	if got := fmt.Sprint(history(t, db, "s")); got != "[1:v1 2:v2 3:- 4:v4 5:v5]" {
		t.Fatalf("oldest first: %s", got)
	}
	var newest []uint64
	_ = db.ScanHistory(a, "s", false, 4, func(r HistoryRecord) bool { newest = append(newest, r.Commit); return true })
	if fmt.Sprint(newest) != "[3 2 1]" {
		t.Fatalf("newest first after 4: %v", newest)
	}
	var oldest []uint64
	_ = db.ScanHistory(a, "s", true, 2, func(r HistoryRecord) bool { oldest = append(oldest, r.Commit); return len(oldest) < 2 })
	if fmt.Sprint(oldest) != "[3 4]" {
		t.Fatalf("oldest first after 2, two of them: %v", oldest)
	}
}

// TestHistoryAt: the value at a commit or a time is the newest change at or
// before it; before the first change the entry had no value; an entry
// whose older records retention removed is not known before the oldest
// kept.
func TestHistoryAt(t *testing.T) {
	c := &clock{t: t0}
	db := openRetention(t, Retention{HistoryCount: 2}, c, nil)
	a := addr("ns", "fn", "a")
	for n := uint64(1); n <= 4; n++ {
		commit(t, db, func(b *Batch) {
			b.PutHistory(a, "x", 10*n, histRec(t0.Add(time.Duration(n)*time.Second), fmt.Sprint("x", n), false))
		})
	}
	commit(t, db, func(b *Batch) { b.PutHistory(a, "y", 25, histRec(t0.Add(25*time.Second/10), "y", false)) })
	at := func(p Point) string {
		es, complete, err := db.HistoryAt(a, "", p)
		if err != nil {
			t.Fatal(err)
		}
		s := ""
		for _, e := range es {
			switch {
			case !e.Known:
				s += e.State + "=? "
			case e.HasValue():
				s += fmt.Sprintf("%s=%s ", e.State, e.Record.GetValue())
			default:
				s += e.State + "=absent "
			}
		}
		return fmt.Sprintf("%scomplete=%v", s, complete)
	}
	for _, tc := range []struct {
		p    Point
		want string
	}{
		{Point{Commit: 5}, "x=absent y=absent complete=true"},
		{Point{Commit: 20}, "x=x2 y=absent complete=true"},
		{Point{Commit: 25}, "x=x2 y=y complete=true"},
		{Point{Commit: 1000}, "x=x4 y=y complete=true"},
		{Point{ByTime: true, Time: t0.Add(2500 * time.Millisecond).UnixMilli()}, "x=x2 y=y complete=true"},
		{Point{ByTime: true, Time: t0.UnixMilli()}, "x=absent y=absent complete=true"},
	} {
		if got := at(tc.p); got != tc.want {
			t.Errorf("at %+v: %s, want %s", tc.p, got, tc.want)
		}
	}
	// Keep 2 per entry: x loses 10 and 20, its oldest kept (30) is marked.
	if _, err := db.Sweep(); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(history(t, db, "x")); got != "[30:x3! 40:x4]" {
		t.Fatalf("after the sweep: %s", got)
	}
	if got := at(Point{Commit: 20}); got != "x=? y=absent complete=false" {
		t.Errorf("at 20 after the sweep: %s", got)
	}
	if got := at(Point{Commit: 35}); got != "x=x3 y=y complete=true" {
		t.Errorf("at 35 after the sweep: %s", got)
	}
}

// TestHistoryRetention: the count per entry and the age, across a restart;
// the newest change of an entry with a value stays whatever its age, an
// entry whose newest change is an old deletion loses its history and moves
// its partition's horizon.
func TestHistoryRetention(t *testing.T) {
	fs := vfs.NewMem()
	c := &clock{t: t0}
	ret := Retention{HistoryCount: 3, HistoryAge: time.Hour}
	open := func() *DB {
		db, err := Open("db", Options{FS: fs, Logger: quietLogger{}, SweepInterval: -1, Retention: ret, Now: c.now})
		if err != nil {
			t.Fatal(err)
		}
		return db
	}
	db := open()
	a := addr("ns", "fn", "a")
	for n := uint64(1); n <= 5; n++ {
		commit(t, db, func(b *Batch) {
			b.PutHistory(a, "live", n, histRec(t0, fmt.Sprint("v", n), false))
			b.PutHistory(a, "gone", n, histRec(t0, fmt.Sprint("g", n), n == 5))
		})
	}
	if _, err := db.Sweep(); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(history(t, db, "live")); got != "[3:v3! 4:v4 5:v5]" {
		t.Fatalf("count: %s", got)
	}
	// A restart, then more changes: the count still holds.
	_ = db.Close()
	db = open()
	commit(t, db, func(b *Batch) { b.PutHistory(a, "live", 6, histRec(t0, "v6", false)) })
	if _, err := db.Sweep(); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(history(t, db, "live")); got != "[4:v4! 5:v5 6:v6]" {
		t.Fatalf("count after a restart: %s", got)
	}
	// Two hours later, after another restart: the age removes all but the
	// newest change of live, and all of gone (its newest is a deletion).
	_ = db.Close()
	c.t = t0.Add(2 * time.Hour)
	db = open()
	defer db.Close()
	st, err := db.Sweep()
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(history(t, db, "live")); got != "[6:v6!]" {
		t.Fatalf("age: live %s", got)
	}
	if got := history(t, db, "gone"); len(got) != 0 {
		t.Fatalf("age: gone %s", got)
	}
	if st.DeletedHistory == 0 {
		t.Fatalf("no deletions counted: %+v", st)
	}
	// gone's history is gone: before its last deletion (commit 5) it is
	// not known; after it, it had no value.
	for _, tc := range []struct {
		p    Point
		want bool
	}{{Point{Commit: 4}, false}, {Point{Commit: 5}, true}, {Point{Commit: 9}, true}} {
		es, _, err := db.HistoryAt(a, "gone", tc.p)
		if err != nil || len(es) != 1 || es[0].Known != tc.want || es[0].HasValue() {
			t.Errorf("gone at %d: %+v, %v; want known=%v and no value", tc.p.Commit, es, err, tc.want)
		}
	}
	// A sweep with nothing to do deletes nothing, and the age index no
	// longer lists the kept newest record.
	if st, err := db.Sweep(); err != nil || st.DeletedHistory != 0 {
		t.Fatalf("second sweep: %+v, %v", st, err)
	}
	if n := countSpace(t, db, spaceHistoryAge); n != 0 {
		t.Fatalf("%d age index entries left", n)
	}
}

// TestOpenStartsHistoryOfAnOlderStore: the entries of a store written
// before the history existed get one record each, marked truncated, at
// their partition's last commit.
func TestOpenStartsHistoryOfAnOlderStore(t *testing.T) {
	fs := vfs.NewMem()
	db, err := Open("db", Options{FS: fs, Logger: quietLogger{}, SweepInterval: -1, Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	a := addr("ns", "fn", "a")
	commit(t, db, func(b *Batch) {
		b.PutState(a, "s", Entry{Typename: "t/s", Value: []byte("old"), Version: 7})
		b.PutMeta(0, PartitionMeta{CommitID: 42, VersionSeq: 7})
		b.pb.Delete(metaKey(nil, metaHistory), nil)
	})
	_ = db.Close()
	db, err = Open("db", Options{FS: fs, Logger: quietLogger{}, SweepInterval: -1, Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got := fmt.Sprint(history(t, db, "s")); got != "[42:old!]" {
		t.Fatalf("history after the upgrade: %s", got)
	}
	es, _, _ := db.HistoryAt(a, "s", Point{Commit: 41})
	if len(es) != 1 || es[0].Known {
		t.Fatalf("before the upgrade's commit: %+v, want unknown", es)
	}
}

// The retention reads a record's time and flags off its encoding: what it
// reads is what proto.Unmarshal gives, whatever else the record holds, and
// a record cut short is corrupt.
func TestHistoryMetaOfMatchesUnmarshal(t *testing.T) {
	for _, r := range []*protocol.HistoryRecord{
		{},
		{At: 1700000000000, Version: 7, Typename: "io.statefun.types/int", Value: []byte("12345"),
			ExpiresAt: 99, Cause: &protocol.HistoryCause{Kind: 1, MessageCount: 3, Principal: "op"}},
		{At: -5, Deleted: true},
		{At: 42, Truncated: true, Value: make([]byte, 300)},
	} {
		val, err := proto.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		m, err := historyMetaOf(nil, val)
		if err != nil || m.at != r.GetAt() || m.deleted != r.GetDeleted() || m.truncated != r.GetTruncated() {
			t.Errorf("%v: read %+v, %v", r, m, err)
		}
		if len(r.GetValue()) > 0 {
			if _, err := historyMetaOf(nil, val[:len(val)-1]); err == nil {
				t.Errorf("%v cut short: no error", r)
			}
		}
	}
	// A field repeated on the wire: the last one wins, as in proto.
	val := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 5)
	val = protowire.AppendVarint(protowire.AppendTag(val, 1, protowire.VarintType), 9)
	if m, err := historyMetaOf(nil, val); err != nil || m.at != 9 {
		t.Errorf("repeated at: %+v, %v; want 9", m, err)
	}
}
