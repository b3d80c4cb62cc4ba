package changelog

import (
	"flag"
	"fmt"
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
