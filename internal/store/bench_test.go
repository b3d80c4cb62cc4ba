package store

import (
	"bytes"
	"fmt"
	"math"
	"testing"

	"github.com/statefun-go/statefun/internal/protocol"
)

// BenchmarkCommit100States commits batches of 100 state writes (100-byte
// values over 10,000 instances) to a store on disk, the shape of one group
// commit. With sync, each op pays one write-ahead log fsync.
func BenchmarkCommit100States(b *testing.B) {
	for _, sync := range []bool{true, false} {
		b.Run(fmt.Sprintf("sync=%v", sync), func(b *testing.B) {
			db, _ := openTest(b, 16)
			val := bytes.Repeat([]byte{'x'}, 100)
			ids := make([]string, 10_000)
			for i := range ids {
				ids[i] = fmt.Sprintf("user-%d", i)
			}
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				batch := db.NewBatch()
				for range 100 {
					batch.PutState(addr("example", "greeter", ids[n%len(ids)]), "seen_count",
						Entry{Typename: "io.statefun.types/int", Value: val, Version: uint64(n)})
					n++
				}
				b.SetBytes(int64(batch.Size()))
				if err := batch.Commit(sync); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAuditQueries times the first page (100 records, newest first)
// of each kind of audit filter on a log of a million records (-benchtime
// 1x is enough: each op is one query): every filter the API accepts reads
// what one index selects, so its time does not grow with the log. The log:
// 1,000,000 mutations of one entry, over 20 types in 4 namespaces, 50,000
// ids, 10 principals and 5 state names, one per millisecond.
func BenchmarkAuditQueries(b *testing.B) {
	const records = 1_000_000
	db, _ := openTest(b, 16)
	t0 := int64(1_700_000_000_000)
	rec := func(n int) *protocol.AuditRecord {
		return &protocol.AuditRecord{Mutation: fmt.Sprintf("m-%08d", n), At: t0 + int64(n),
			Principal: fmt.Sprintf("who%d", n%10),
			Target:    &protocol.Address{Namespace: fmt.Sprintf("ns%d", n%4), Type: fmt.Sprintf("fn%d", n%20), Id: fmt.Sprintf("id%d", n%50_000)},
			State:     fmt.Sprintf("s%d", n%5)}
	}
	for n := 0; n < records; {
		batch := db.NewBatch()
		for end := min(n+10_000, records); n < end; n++ {
			batch.PutAudit(rec(n))
		}
		if err := batch.Commit(false); err != nil {
			b.Fatal(err)
		}
	}
	if err := db.pdb.Flush(); err != nil {
		b.Fatal(err)
	}
	all := AuditFilter{From: math.MinInt64, To: math.MaxInt64, Newest: true}
	with := func(mod func(*AuditFilter)) AuditFilter { f := all; mod(&f); return f }
	for _, q := range []struct {
		name string
		f    AuditFilter
	}{
		{"time-window", all},
		{"mutation", with(func(f *AuditFilter) { f.Mutation = "m-00123456" })},
		{"address", with(func(f *AuditFilter) { f.Namespace, f.Type, f.ID = "ns0", "fn0", "id0" })},
		{"type", with(func(f *AuditFilter) { f.Namespace, f.Type = "ns1", "fn1" })},
		{"type-and-state", with(func(f *AuditFilter) { f.Namespace, f.Type, f.State = "ns1", "fn1", "s1" })},
		{"id", with(func(f *AuditFilter) { f.ID = "id7" })},
		{"namespace", with(func(f *AuditFilter) { f.Namespace = "ns2" })},
		{"principal", with(func(f *AuditFilter) { f.Principal = "who3" })},
		{"principal-and-state", with(func(f *AuditFilter) { f.Principal, f.State = "who3", "s3" })},
	} {
		b.Run(q.name, func(b *testing.B) {
			var read int
			for b.Loop() {
				n := 0
				var err error
				read, err = db.scanAuditFiltered(q.f, func(*protocol.AuditRecord) bool { n++; return n < 100 })
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(read), "records-read/op")
		})
	}
}

// BenchmarkSweepHistory is the history retention's share of a busy store:
// each op changes 1,000 entries once (one history record each, with a
// 100-byte value and its cause, as a function's increments write) and
// sweeps, so every entry the commit touched is trimmed. The entries carry
// the default count of records (100) before the run, so each sweep also
// deletes the oldest record of each. Allocations per op / 1,000 are the
// sweep's allocations per changed entry.
//
//	go test -run '^$' -bench SweepHistory -benchmem ./internal/store
func BenchmarkSweepHistory(b *testing.B) {
	db, _ := openTest(b, 16)
	val := bytes.Repeat([]byte{'x'}, 100)
	const entries = 1000
	commit := uint64(0)
	write := func() {
		commit++
		batch := db.NewBatch()
		for i := range entries {
			batch.PutHistory(addr("example", "counter", fmt.Sprintf("id-%d", i)), "count", commit,
				&protocol.HistoryRecord{At: db.opts.Now().UnixMilli(), Version: commit, Typename: "io.statefun.types/int", Value: val,
					Cause: &protocol.HistoryCause{Kind: 1, MessageCount: 1}})
		}
		if err := batch.Commit(false); err != nil {
			b.Fatal(err)
		}
	}
	for range DefaultHistoryCount {
		write()
	}
	if _, err := db.Sweep(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		write()
		b.StartTimer()
		st, err := db.Sweep()
		if err != nil {
			b.Fatal(err)
		}
		if st.DeletedHistory != entries {
			b.Fatalf("a sweep deleted %d history records; want %d", st.DeletedHistory, entries)
		}
	}
}
