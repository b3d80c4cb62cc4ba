package e2e

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

var flagCxEntries = flag.Int("cx.entries", 6000, "entries BenchmarkClusterExportImport imports and exports")

// BenchmarkClusterExportImport measures `statefun state import` and
// `statefun state export` against a cluster of three nodes on devkafka
// (three brokers), each the CLI in a process of its own, as an operator
// runs them: -cx.entries entries of one function type (int values)
// imported through one node, then exported through another, three times;
// then single export pages of 1000 asked of a node directly, timed. It
// reports import lines/s, the best export's entries/s and the median
// page's milliseconds.
//
//	go test -run '^$' -bench ClusterExportImport -benchtime 1x ./e2e/ [-cx.entries N]
func BenchmarkClusterExportImport(b *testing.B) {
	for range b.N {
		n := *flagCxEntries
		var in strings.Builder
		for i := range n {
			fmt.Fprintf(&in, `{"address":{"namespace":"kc","type":"counter","id":"s%07d"},"state":"count","typename":%q,"value":%d}`+"\n", i, longType, i)
		}
		dk := startDevkafka(b, "-port", "0", "-brokers", "3", "-topic", "counts:3")
		fn := kafkaCounterFn(b, "kc/out")
		nodes := startApp(b, dk.brokers, fn, "cx-bench", "node-a", "node-b", "node-c")

		start := time.Now()
		cxRun(b, nodes[0], in.String(), "import")
		imp := float64(n) / time.Since(start).Seconds()
		b.Logf("import: %d lines, %.0f lines/s", n, imp)

		best := 0.0
		for range 3 {
			start = time.Now()
			out := cxRun(b, nodes[1], "", "export")
			rate := float64(n) / time.Since(start).Seconds()
			if got := strings.Count(out.stdout, "\n"); got != n {
				b.Fatalf("the export holds %d lines, want %d", got, n)
			}
			b.Logf("export: %.0f entries/s", rate)
			best = max(best, rate)
		}

		var pages []time.Duration
		for range 9 {
			start = time.Now()
			resp, err := http.Get("http://" + nodes[2].runtime.admin + "/export/kc/counter?limit=1000")
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("an export page: %s", resp.Status)
			}
			pages = append(pages, time.Since(start))
		}
		slices.Sort(pages)
		b.Logf("export pages of 1000: %v", pages)
		b.ReportMetric(imp, "import-lines/s")
		b.ReportMetric(best, "export-entries/s")
		b.ReportMetric(float64(pages[len(pages)/2].Microseconds())/1000, "page-ms")
	}
}
