package bench

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"
)

var flagExportEntries = flag.Int("load.exportentries", envInt("STATEFUN_BENCH_EXPORT_ENTRIES", 100_000),
	"entries of BenchmarkExportImport's round trip")

// BenchmarkExportImport measures `statefun state export` and `statefun
// state import` end to end, as an operator runs them (the CLI in a process
// of its own against a runtime in another): a file of -load.exportentries
// entries (ids of one function type, int values) is imported into an empty
// runtime (mode absent), exported from it, and the export imported into a
// second empty runtime, whose export must hold the same entries. It reports
// each step's entries per second. The runtime is -load.bin, else this
// tree's cmd/statefun built without the race detector.
//
//	go test -run '^$' -bench ExportImport -benchtime 1x ./bench -load.exportentries 1000000
func BenchmarkExportImport(b *testing.B) {
	bin := *flagBin
	if bin == "" {
		bin = filepath.Join(b.TempDir(), "statefun")
		out, err := exec.Command("go", "build", "-o", bin, "github.com/statefun-go/statefun/cmd/statefun").CombinedOutput()
		if err != nil {
			b.Fatalf("bench: build statefun: %v\n%s", err, out)
		}
	}
	n := *flagExportEntries
	dir := b.TempDir()
	input := filepath.Join(dir, "input.jsonl")
	f, err := os.Create(input)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriter(f)
	for i := range n {
		fmt.Fprintf(w, `{"address":{"namespace":"bench","type":"person","id":"person-%08d"},"state":"visits","typename":"io.statefun.types/int","value":%d}`+"\n", i, i%100000)
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	// No function is called: the module names one endpoint for the type.
	module := "kind: io.statefun.endpoints.v2/http\nspec:\n  functions: bench/*\n  urlPathTemplate: http://127.0.0.1:9/none\n"
	for range b.N {
		a, err := startBinRuntime(b, bin, filepath.Join(b.TempDir()), module)
		if err != nil {
			b.Fatal(err)
		}
		c, err := startBinRuntime(b, bin, filepath.Join(b.TempDir()), module)
		if err != nil {
			b.Fatal(err)
		}
		step := func(name, admin, in, out string, args ...string) {
			start := time.Now()
			cmd := exec.Command(bin, append([]string{"state", "--server", "http://" + admin, "--timeout", "5m"}, args...)...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if in != "" {
				fin, err := os.Open(in)
				if err != nil {
					b.Fatal(err)
				}
				defer fin.Close()
				cmd.Stdin = fin
			}
			if out != "" {
				fout, err := os.Create(out)
				if err != nil {
					b.Fatal(err)
				}
				defer fout.Close()
				cmd.Stdout = fout
			}
			if err := cmd.Run(); err != nil {
				b.Fatalf("bench: statefun state %v: %v\n%s", args, err, stderr.String())
			}
			el := time.Since(start)
			b.ReportMetric(float64(n)/el.Seconds(), name+"-entries/s")
			b.Logf("%s: %d entries in %s, %.0f entries/s", name, n, el.Round(time.Millisecond), float64(n)/el.Seconds())
		}
		exportA, exportC := filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "c.jsonl")
		step("import", a.admin, input, "", "import", "--batch", "1000")
		step("export", a.admin, "", exportA, "export")
		step("reimport", c.admin, exportA, "", "import", "--batch", "1000")
		step("reexport", c.admin, "", exportC, "export")
		ha, na := contentDigest(b, exportA)
		hc, nc := contentDigest(b, exportC)
		if na != n || nc != n || !bytes.Equal(ha, hc) {
			b.Fatalf("bench: the round trip changed the entries: %d entries (digest %x), then %d (digest %x), want %d", na, ha, nc, hc, n)
		}
		a.stop()
		c.stop()
	}
}

// contentDigest digests an export's entries without their versions, in
// order, and counts them.
func contentDigest(b *testing.B, file string) ([]byte, int) {
	f, err := os.Open(file)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var lines []string
	r := bufio.NewReaderSize(f, 1<<20)
	for {
		l, err := r.ReadBytes('\n')
		if len(l) > 0 {
			var m map[string]json.RawMessage
			if err := json.Unmarshal(l, &m); err != nil {
				b.Fatalf("bench: %s: %v", file, err)
			}
			delete(m, "version")
			k, _ := json.Marshal(m)
			lines = append(lines, string(k))
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	sort.Strings(lines)
	h := sha256.New()
	for _, l := range lines {
		h.Write([]byte(l))
	}
	return h.Sum(nil), len(lines)
}
