package changelog

import (
	"context"
	"time"

	"flag"
	"fmt"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"os"
	"testing"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/store"
)

// benchStores caches one store per size across the runs of a benchmark
// (in directories of their own: a run's b.TempDir is removed when the run
// ends); TestMain closes and removes them.
var (
	benchStores = map[int]*store.DB{}
	benchDirs   []string
)

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	for _, db := range benchStores {
		_ = db.Close()
	}
	for _, d := range benchDirs {
		_ = os.RemoveAll(d)
	}
	os.Exit(code)
}

const benchP = 16

// benchStore returns a store holding n state entries (one per address,
// 100-byte values) spread over benchP partitions, written as restores
// write them: with each partition's changelog key index.
func benchStore(b *testing.B, n int) *store.DB {
	if db, ok := benchStores[n]; ok {
		return db
	}
	dir, err := os.MkdirTemp("", "changelog-bench-")
	if err != nil {
		b.Fatal(err)
	}
	benchDirs = append(benchDirs, dir)
	db, err := store.Open(dir, store.Options{Partitions: benchP, Logger: quietLogger{}, SweepInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	t := address.TypeName{Namespace: "bench", Name: "fn"}
	ops := make([][]store.Op, benchP)
	flush := func(p int) {
		if err := db.ApplyChangelog(p, ops[p], store.ChangelogPosition{Next: 1}); err != nil {
			b.Fatal(err)
		}
		ops[p] = ops[p][:0]
	}
	for i := range n {
		id := fmt.Sprintf("user-%08d", i)
		p := address.Partition(id, benchP)
		ob := db.NewBatch()
		ob.PutState(address.Address{Type: t, ID: id}, "profile", store.Entry{Typename: "t/v", Value: make([]byte, 100), Version: 1})
		if err := ob.Ops(func(op store.Op) error {
			ops[p] = append(ops[p], store.Op{Key: append([]byte(nil), op.Key...), Value: append([]byte(nil), op.Value...)})
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		ob.Close()
		if len(ops[p]) == 1000 {
			flush(p)
		}
	}
	for p := range benchP {
		flush(p)
	}
	benchStores[n] = db
	return db
}

// BenchmarkPartitionKeys measures what finding one partition's state
// entries costs in a store holding all partitions' (a process's warm
// cache): walking every state entry and keeping those whose id hashes to
// the partition, against walking the partition's changelog key index.
//
//	go test ./internal/cluster/changelog -run '^$' -bench PartitionKeys -benchtime 5x
func BenchmarkPartitionKeys(b *testing.B) {
	t := address.TypeName{Namespace: "bench", Name: "fn"}
	const p = 3
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("keys=%d/scan-and-filter", n), func(b *testing.B) {
			db := benchStore(b, n)
			b.ResetTimer()
			for range b.N {
				found := 0
				err := db.ScanIDs(t, "", "", func(id string) bool {
					if address.Partition(id, benchP) == p {
						found++
					}
					return true
				})
				if err != nil || found < n/benchP/2 {
					b.Fatalf("found %d, %v", found, err)
				}
			}
		})
		b.Run(fmt.Sprintf("keys=%d/key-index", n), func(b *testing.B) {
			db := benchStore(b, n)
			b.ResetTimer()
			for range b.N {
				found := 0
				err := db.ChangelogKeys(p, func(k []byte) error {
					found++
					return nil
				})
				if err != nil || found < n/benchP/2 {
					b.Fatalf("found %d, %v", found, err)
				}
			}
		})
	}
}

// BenchmarkRestore measures a partition's restore from its changelog into
// an empty store — what a node pays when a partition moves to it — at
// 10,000, 100,000 and 1,000,000 keys in the one partition restored. The
// changelog is filled first (not timed) as the session writes it:
// transactions of 10,000 records made by Records from overlays of state
// entries of 100-byte values. kfake (three brokers) runs in this process,
// so the figure includes serving the fetches; a real broker does that
// work on its own machine.
//
//	go test ./internal/cluster/changelog -run '^$' -bench Restore -benchtime 1x
//
// keys/s is records applied per second; restore-s the time of one restore.
func BenchmarkRestore(b *testing.B) {
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			c, err := kfake.NewCluster(kfake.NumBrokers(3))
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			fillChangelog(b, ctx, c, n)
			b.ResetTimer()
			var total time.Duration
			for range b.N {
				b.StopTimer()
				dir := b.TempDir()
				db, err := store.Open(dir, store.Options{Partitions: testP, Logger: quietLogger{}, SweepInterval: -1})
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				start := time.Now()
				_, res, err := Restore(ctx, Config{DB: db, Brokers: c.ListenAddrs(), Topic: testTopic, Partition: benchPartition})
				total += time.Since(start)
				b.StopTimer()
				if err != nil {
					b.Fatal(err)
				}
				if res.Records != int64(n) {
					b.Fatalf("restored %d records; want %d", res.Records, n)
				}
				if err := db.Close(); err != nil {
					b.Fatal(err)
				}
			}
			sec := total.Seconds() / float64(b.N)
			b.ReportMetric(sec, "restore-s")
			b.ReportMetric(float64(n)/sec, "keys/s")
		})
	}
}

// benchPartition is the changelog partition BenchmarkRestore fills.
const benchPartition = 1

// fillChangelog writes n state entries (distinct addresses of partition
// benchPartition) to the changelog in committed transactions.
func fillChangelog(b *testing.B, ctx context.Context, c *kfake.Cluster, n int) {
	b.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		b.Fatal(err)
	}
	compact := "compact"
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, testP, 3, map[string]*string{"cleanup.policy": &compact}, testTopic)
	cl.Close()
	if err != nil || resp.Err != nil {
		b.Fatalf("create topic %s: %v %v", testTopic, err, resp.Err)
	}
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID("bench-fill"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(1<<20))
	if err != nil {
		b.Fatal(err)
	}
	defer prod.Close()
	dir := b.TempDir()
	db, err := store.Open(dir, store.Options{Partitions: testP, Logger: quietLogger{}, SweepInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	t := address.TypeName{Namespace: "bench", Name: "fn"}
	const perTxn = 10_000
	written, id := 0, 0
	for written < n {
		ob := db.NewBatch()
		for i := 0; i < perTxn && written < n; id++ {
			key := fmt.Sprintf("user-%08d", id)
			if address.Partition(key, testP) != benchPartition {
				continue
			}
			ob.PutState(address.Address{Type: t, ID: key}, "profile", store.Entry{Typename: "t/v", Value: make([]byte, 100), Version: 1})
			i++
			written++
		}
		recs, err := Records(ob, testTopic, benchPartition)
		ob.Close()
		if err != nil {
			b.Fatal(err)
		}
		if err := prod.BeginTransaction(); err != nil {
			b.Fatal(err)
		}
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			b.Fatal(err)
		}
		if err := prod.EndTransaction(ctx, kgo.TryCommit); err != nil {
			b.Fatal(err)
		}
	}
}
