package store

import (
	"bytes"
	"fmt"
	"testing"
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
