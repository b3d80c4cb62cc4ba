//go:build unix

package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestCompareTellsBuildsApart is the tool's check of itself on this
// machine: two builds of the working tree come out even, and a build of the
// same code with the race detector comes out slower, beyond the spread.
//
// The slowed build is a -race build: its instrumentation makes every memory
// access of the runtime cost more, a slowdown that comes from the code, not
// from timing, so it does not depend on what else the machine does (the
// runtime's CPU per message grew 4–5× in the runs that chose the
// thresholds below). A -race build of cmd/statefun is also one make test
// builds anyway (e2e/), so it costs no extra minutes of compilation.
//
// The workload is increments at one key, where the runtime takes the
// largest share of the CPU, and the figure checked is the runtime's own CPU
// time per message: other processes on a shared machine move the
// throughput by tens of percent from one run to the next, the CPU the
// runtime spends on a message much less. Five short rounds, medians.
func TestCompareTellsBuildsApart(t *testing.T) {
	if testing.Short() {
		t.Skip("compare: builds the runtime and runs it for a minute or two; skipped with -short")
	}
	tr := testTree(t)
	if out, err := exec.Command("go", "env", "CGO_ENABLED").Output(); err != nil || strings.TrimSpace(string(out)) != "1" {
		t.Skip("compare: the slowed build is a -race build, which needs cgo (CGO_ENABLED=1 and a C compiler); skipped")
	}
	ctx := t.Context()
	log := testLog{t}
	builds := []*build{{label: "A"}, {label: "A again"}, {label: "A -race", flags: []string{"-race"}}}
	testBin, err := tr.prepare(ctx, builds, t.TempDir(), log)
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := selectWorkloads([]string{"increments-1"}, 0.25)
	if err != nil {
		t.Fatal(err)
	}
	const rounds = 5
	start := time.Now()
	runs, err := runRounds(ctx, tr.benchDir(), testBin, builds, jobs, rounds, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d runs in %v", len(runs), time.Since(start).Round(time.Second))
	for _, r := range runs {
		if r.err != nil {
			t.Fatalf("round %d, %s: %v", r.round+1, builds[r.build].label, r.err)
		}
	}
	j, w := jobs[0], jobs[0].workloads[0]
	cpu := collect(runs, j.name, w, cpuPerMsg, len(builds), rounds)
	tput := collect(runs, j.name, w, msgsPerSec, len(builds), rounds)
	even, slow := ratios(cpu[0], cpu[1]), ratios(cpu[0], cpu[2])
	t.Logf("runtime CPU µs/msg per round: A %v, A again %v, A -race %v", cpu[0], cpu[1], cpu[2])
	t.Logf("committed msgs/s per round: A %v, A again %v, A -race %v", tput[0], tput[1], tput[2])
	t.Logf("CPU/msg ratios: A again/A %s, A -race/A %s", spread(even), spread(slow))
	t.Logf("msgs/s ratios: A again/A %s, A -race/A %s", spread(ratios(tput[0], tput[1])), spread(ratios(tput[0], tput[2])))

	// Even: the median of the per-round ratios within ±25%. Same-build
	// pairs on the shared 2-core machine differed by up to ~20% in one
	// round, the medians of five by less than 10%.
	if m := median(even); !(m > 0.8 && m < 1.25) {
		t.Errorf("two builds of the same code: CPU/msg ratio median %.2f; want within 0.80–1.25", m)
	}
	// Slower: every round's ratio above 1.5, and the whole spread above the
	// even pair's; the throughput's median ratio below 1.
	if lo := slices.Min(slow); !(lo > 1.5 && lo > slices.Max(even)) {
		t.Errorf("-race build: CPU/msg ratios %s; want every round above 1.5 and above the even pair's %s", spread(slow), spread(even))
	}
	if m := median(ratios(tput[0], tput[2])); !(m < 1) {
		t.Errorf("-race build: committed msgs/s ratio median %.2f; want below 1", m)
	}
}

func spread(rs []float64) string {
	if len(rs) == 0 {
		return "(none)"
	}
	return fmt.Sprintf("median %.2f, %.2f–%.2f over %d", median(rs), slices.Min(rs), slices.Max(rs), len(rs))
}

// testTree is the repository around the test, or a skip when git is not
// there to find it.
func testTree(t *testing.T) *tree {
	t.Helper()
	for _, tool := range []string{"git", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("compare: %s is not on PATH; skipped", tool)
		}
	}
	tr, err := openTree(t.Context(), "")
	if err != nil {
		t.Skipf("compare: not in a git work tree (%v); skipped", err)
	}
	return tr
}

// testLog writes the tool's progress to the test's log.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func TestCheckoutIsRemoved(t *testing.T) {
	tr := testTree(t)
	ctx := t.Context()
	commit, err := gitOutput(ctx, tr.root, "rev-parse", "HEAD")
	if err != nil {
		t.Skipf("compare: no commit to check out (%v); skipped", err)
	}
	dir := filepath.Join(t.TempDir(), "src")
	remove, err := tr.checkout(ctx, commit, dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "cmd", "statefun", "main.go")); err != nil {
		t.Errorf("the worktree holds no cmd/statefun/main.go: %v", err)
	}
	if err := remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the worktree's directory is still there after remove: %v", err)
	}
	list, err := gitOutput(ctx, tr.root, "worktree", "list", "--porcelain")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(list, dir) {
		t.Errorf("git still lists the worktree %s:\n%s", dir, list)
	}
}

func TestParseBench(t *testing.T) {
	out := `goos: linux
BenchmarkEndToEnd/addresses=100-2         	       1	6789984423 ns/op	      3089 committed-msgs/s	        35.06 p50-ms	       139.0 runtime-cpu-us/msg
--- BENCH: BenchmarkEndToEnd/addresses=100-2
    e2e_test.go:264: 20000 messages over 100 ids
BenchmarkStateAPI/idle/GET/clients=16-2 	       1	 412345 ns/op	      5120 req/s	 0.25 p50-ms
BenchmarkKafkaCounter 	       1	 412345 ns/op	      8100 records/s
--- FAIL: BenchmarkStateAPI/idle/PUT-committed/clients=1
PASS
`
	got := parseBench(out)
	want := map[string]map[string]float64{
		"BenchmarkEndToEnd/addresses=100":       {"ns/op": 6789984423, "committed-msgs/s": 3089, "p50-ms": 35.06, "runtime-cpu-us/msg": 139},
		"BenchmarkStateAPI/idle/GET/clients=16": {"ns/op": 412345, "req/s": 5120, "p50-ms": 0.25},
		"BenchmarkKafkaCounter":                 {"ns/op": 412345, "records/s": 8100},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("parseBench:\n got %v\nwant %v", got, want)
	}
}

func TestSelectWorkloads(t *testing.T) {
	jobs, err := selectWorkloads([]string{"put-committed-16", "increments-10000", "get-1"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, j := range jobs {
		var names []string
		for _, w := range j.workloads {
			names = append(names, w.name)
		}
		got = append(got, fmt.Sprintf("%s %s %v %v", j.name, j.pattern, j.args, names))
	}
	want := []string{
		"increments-10000 ^BenchmarkEndToEnd$/^addresses=10000$ [-load.addresses=10000 -load.messages=20000] [increments-10000]",
		"get-1 ^BenchmarkStateAPI$/^idle$/^GET$/^clients=1$ [-load.apiphases=idle -load.apiops=5000] [get-1]",
		"put-committed-16 ^BenchmarkStateAPI$/^idle$/^PUT-committed$/^clients=16$ [-load.apiphases=idle -load.apiops=100000] [put-committed-16]",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("selectWorkloads:\n got %q\nwant %q", got, want)
	}
	jobs, err = selectWorkloads([]string{"increments"}, 2)
	if err != nil || len(jobs) != 3 || jobs[2].args[1] != "-load.messages=40000" {
		t.Errorf("selectWorkloads(increments, scale 2) = %+v, %v; want the three increments jobs of 40,000 messages", jobs, err)
	}
	jobs, err = selectWorkloads([]string{"loaded", "get-1"}, 0.5)
	if err != nil || len(jobs) != 2 || jobs[1].pattern != "^BenchmarkStateAPI$/^load$/^(GET|PUT-committed)$/^clients=1$" || jobs[1].args[1] != "-load.apiops=1000" {
		t.Errorf("selectWorkloads(loaded, get-1, scale 0.5) = %+v, %v; want get-1, then both loaded workloads in one job of 1,000 requests", jobs, err)
	}
	if _, err := selectWorkloads([]string{"incr"}, 1); err == nil || !strings.Contains(err.Error(), "increments-10000") {
		t.Errorf("an unknown workload: error %v; want one that lists the workloads", err)
	}
}

func TestOrderAlternates(t *testing.T) {
	var got []string
	for r := range 4 {
		got = append(got, fmt.Sprint(order(r, 2)))
	}
	if want := "[0 1] [1 0] [0 1] [1 0]"; strings.Join(got, " ") != want {
		t.Errorf("order over four rounds: %v; want %s", got, want)
	}
}

func TestReport(t *testing.T) {
	w := allWorkloads()[2] // increments-10000
	j := job{name: w.job, workloads: []workload{w}}
	cfg := config{rounds: 4, command: "make bench-compare BASE=abc"}
	// HEAD does 10–20% more messages per second in every round; its CPU
	// per message is lower in two rounds and higher in one. BASE failed in
	// round 3, which leaves three pairs.
	mk := func(round, b int, msgs, cpu float64, err error) *run {
		return &run{round: round, build: b, job: j.name, err: err, wall: 10 * time.Second, cpu: 15 * time.Second,
			machine: cpuTimes{busy: 19, irq: 1, total: 20, ok: true},
			values:  map[string]map[string]float64{w.bench: {msgsPerSec.unit: msgs, cpuPerMsg.unit: cpu}}}
	}
	runs := []*run{
		mk(0, 0, 1000, 100, nil), mk(0, 1, 1100, 90, nil),
		mk(1, 1, 1200, 110, nil), mk(1, 0, 1000, 100, nil),
		mk(2, 0, 0, 0, fmt.Errorf("bench: boom")), mk(2, 1, 1150, 95, nil),
	}
	delete(runs[4].values, w.bench)
	runs = append(runs, mk(3, 0, 900, 100, nil), mk(3, 1, 1080, 95, nil))
	builds := []*build{{label: "BASE", commit: "abc", desc: "abc old"}, {label: "HEAD", commit: "def", desc: "def new"}}
	rep := newReport(cfg, builds, []job{j}, runs, time.Now(), machine{cpus: 2, model: "Test CPU", goVer: "go"})
	var buf bytes.Buffer
	rep.writeMarkdown(&buf)
	out := buf.String()
	for _, want := range []string{
		"`make bench-compare BASE=abc`",
		"2 CPUs (nproc), Test CPU",
		"| increments through the playground ingress, 10,000 keys | committed msgs/s (more is better) | 1,000 | 1,125 | 1.20 | 1.10–1.20 | 3 | 95% | 0.30 | HEAD better (+20%) |",
		"| increments through the playground ingress, 10,000 keys | runtime CPU µs/msg (less is better) | 100 | 95 | 0.95 | 0.90–1.10 | 3 | 95% | 0.30 | within the spread |",
		"Failed: increments-10000 against BASE, round 3: bench: boom",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
	if math.IsNaN(median([]float64{1, 2})) || median([]float64{1, 2}) != 1.5 {
		t.Errorf("median of 1 and 2: %v; want 1.5", median([]float64{1, 2}))
	}
}
