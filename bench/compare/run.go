//go:build unix

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// workload is one row group of the table: a sub-benchmark of bench/ and the
// metrics it reports that the table shows.
type workload struct {
	name    string // what -workloads selects
	title   string // what the table calls it
	job     string // the workloads of one job run in one bench.test invocation
	bench   string // the sub-benchmark's name as bench.test prints it, without -GOMAXPROCS
	metrics []metric
}

// metric is one figure a benchmark reports (b.ReportMetric).
type metric struct {
	unit  string // as reported, e.g. committed-msgs/s
	label string // as the table shows it
	lower bool   // lower is better (latency, CPU per message)
}

// job is one bench.test invocation: a -test.bench pattern and flags, and
// the selected workloads it measures.
type job struct {
	name      string
	pattern   string
	args      []string
	workloads []workload
}

var (
	msgsPerSec    = metric{unit: "committed-msgs/s", label: "committed msgs/s"}
	cpuPerMsg     = metric{unit: "runtime-cpu-us/msg", label: "runtime CPU µs/msg", lower: true}
	allocsPerMsg  = metric{unit: "runtime-allocs/msg", label: "runtime allocations/msg", lower: true}
	cpuPerReq     = metric{unit: "runtime-cpu-us/req", label: "runtime CPU µs/request", lower: true}
	allocsPerReq  = metric{unit: "runtime-allocs/req", label: "runtime allocations/request", lower: true}
	reqPerSec     = metric{unit: "req/s", label: "requests/s"}
	p50ms         = metric{unit: "p50-ms", label: "p50 ms", lower: true}
	p99ms         = metric{unit: "p99-ms", label: "p99 ms", lower: true}
	recordsPerSec = metric{unit: "records/s", label: "records/s"}
	cpuPerRecord  = metric{unit: "runtime-cpu-us/record", label: "runtime CPU µs/record", lower: true}
)

// allWorkloads lists every workload in the table's order.
func allWorkloads() []workload {
	var ws []workload
	for _, keys := range []int{1, 100, 10000} {
		ws = append(ws, workload{
			name:    fmt.Sprintf("increments-%d", keys),
			title:   fmt.Sprintf("increments through the playground ingress, %s key%s", thousands(float64(keys)), plural(keys)),
			job:     fmt.Sprintf("increments-%d", keys),
			bench:   fmt.Sprintf("BenchmarkEndToEnd/addresses=%d", keys),
			metrics: []metric{msgsPerSec, cpuPerMsg, allocsPerMsg},
		})
	}
	for _, op := range []struct{ name, bench, title string }{
		{"get", "GET", "state GET"},
		{"put-committed", "PUT-committed", "state PUT, ack=committed"},
	} {
		for _, c := range []int{1, 16} {
			name := fmt.Sprintf("%s-%d", op.name, c)
			ws = append(ws, workload{
				name:    name,
				title:   fmt.Sprintf("%s, %d client%s, idle runtime", op.title, c, plural(c)),
				job:     name,
				bench:   fmt.Sprintf("BenchmarkStateAPI/idle/%s/clients=%d", op.bench, c),
				metrics: []metric{reqPerSec, cpuPerReq, allocsPerReq},
			})
		}
	}
	ws = append(ws,
		workload{name: "loaded-get", title: "state GET, 1 client, beside the function load", job: "loaded",
			bench: "BenchmarkStateAPI/load/GET/clients=1", metrics: []metric{p99ms}},
		workload{name: "loaded-put-committed", title: "state PUT ack=committed, 1 client, beside the function load", job: "loaded",
			bench: "BenchmarkStateAPI/load/PUT-committed/clients=1", metrics: []metric{p50ms}},
		workload{name: "kafka", title: "Kafka in → counter → Kafka out (exactly-once), 10,000 keys", job: "kafka",
			bench: "BenchmarkKafkaCounter", metrics: []metric{recordsPerSec, cpuPerRecord}},
	)
	return ws
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// selectWorkloads returns the jobs of the workloads that sel names (each a
// name or a prefix of names followed by "-", e.g. "increments"), in the
// table's order; all of them when sel is empty.
func selectWorkloads(sel []string, scale float64) ([]job, error) {
	all := allWorkloads()
	chosen := map[string]bool{}
	for _, s := range sel {
		found := false
		for _, w := range all {
			if w.name == s || strings.HasPrefix(w.name, s+"-") {
				chosen[w.name], found = true, true
			}
		}
		if !found {
			var names []string
			for _, w := range all {
				names = append(names, w.name)
			}
			return nil, fmt.Errorf("compare: no workload %q; the workloads are %s (a prefix such as increments selects a group)", s, strings.Join(names, ", "))
		}
	}
	var jobs []job
	index := map[string]int{}
	for _, w := range all {
		if len(sel) > 0 && !chosen[w.name] {
			continue
		}
		i, ok := index[w.job]
		if !ok {
			i = len(jobs)
			index[w.job] = i
			jobs = append(jobs, job{name: w.job})
		}
		jobs[i].workloads = append(jobs[i].workloads, w)
	}
	for i := range jobs {
		jobs[i].pattern, jobs[i].args = jobCommand(jobs[i], scale)
	}
	return jobs, nil
}

// jobCommand returns the -test.bench pattern and the flags of bench.test
// for j's workloads. The defaults keep a run to a few seconds on a 2-core
// machine; scale lengthens it.
func jobCommand(j job, scale float64) (string, []string) {
	n := func(base int) string { return strconv.Itoa(max(1, int(math.Round(float64(base)*scale)))) }
	// The idle state API's workloads each run alone, for about a second on
	// an idle 2-core machine: -load.apiops requests (a tenth of them for
	// committed writes).
	idleOps := map[string]int{"get-1": 5000, "get-16": 20000, "put-committed-1": 10000, "put-committed-16": 100000}
	if ops, ok := idleOps[j.name]; ok {
		parts := strings.Split(j.workloads[0].bench, "/") // BenchmarkStateAPI/idle/<op>/clients=<c>
		pattern := fmt.Sprintf("^BenchmarkStateAPI$/^idle$/^%s$/^%s$", regexp.QuoteMeta(parts[2]), regexp.QuoteMeta(parts[3]))
		return pattern, []string{"-load.apiphases=idle", "-load.apiops=" + n(ops)}
	}
	switch j.name {
	case "loaded":
		ops := map[string]bool{}
		for _, w := range j.workloads {
			ops[strings.Split(w.bench, "/")[2]] = true // BenchmarkStateAPI/load/<op>/clients=1
		}
		pattern := fmt.Sprintf("^BenchmarkStateAPI$/^load$/^(%s)$/^clients=1$", alternatives(ops))
		// 2,000 GETs and 200 committed PUTs; the function load beside
		// stops when they are done, at two minutes at most.
		return pattern, []string{"-load.apiphases=load", "-load.apiops=" + n(2000), "-load.apibg=2m"}
	case "kafka":
		return "^BenchmarkKafkaCounter$", []string{"-kafka.records=" + n(20000)}
	default: // increments-<keys>
		keys := strings.TrimPrefix(j.name, "increments-")
		return fmt.Sprintf("^BenchmarkEndToEnd$/^addresses=%s$", keys),
			[]string{"-load.addresses=" + keys, "-load.messages=" + n(20000)}
	}
}

// alternatives joins a set's keys, sorted, with |, quoted for a regexp.
func alternatives(set map[string]bool) string {
	var out []string
	for k := range set {
		out = append(out, regexp.QuoteMeta(k))
	}
	slices.Sort(out)
	return strings.Join(out, "|")
}

// run is one bench.test invocation of one job against one build.
type run struct {
	round, build int
	job          string
	values       map[string]map[string]float64 // benchmark → unit → value
	err          error                         // the run failed; values may be partial
	wall         time.Duration
	cpu          time.Duration // user+system of bench.test and every process it waited for
	machine      cpuTimes      // the machine's CPU times over the run
}

// value returns w's metric m, and whether the run reported it.
func (r *run) value(w workload, m metric) (float64, bool) {
	v, ok := r.values[w.bench][m.unit]
	return v, ok && !math.IsNaN(v) && !math.IsInf(v, 0)
}

// order returns the builds' order in round r (0-based): rotated by one each
// round, so that with two builds BASE goes first in every other round.
func order(r, builds int) []int {
	out := make([]int, builds)
	for i := range out {
		out[i] = (i + r) % builds
	}
	return out
}

// runRounds runs every job against every build in each round, the builds of
// a job back to back. When ctx ends it returns the runs made so far, and
// ctx's error.
func runRounds(ctx context.Context, dir, testBin string, builds []*build, jobs []job, rounds int, extra []string, log io.Writer) ([]*run, error) {
	var runs []*run
	for r := range rounds {
		for _, j := range jobs {
			for _, bi := range order(r, len(builds)) {
				if err := ctx.Err(); err != nil {
					return runs, fmt.Errorf("compare: interrupted after %d runs: %w", len(runs), err)
				}
				b := builds[bi]
				res := runJob(ctx, dir, testBin, j, b.bin, b.env, extra)
				if ctx.Err() != nil {
					// Killed half way: not a run of the build.
					return runs, fmt.Errorf("compare: interrupted after %d runs: %w", len(runs), ctx.Err())
				}
				res.round, res.build = r, bi
				runs = append(runs, res)
				fmt.Fprintf(log, "compare: round %d/%d %-16s %-4s %s\n", r+1, rounds, j.name, b.label, res.summary(j))
			}
		}
	}
	return runs, nil
}

// summary is a run's figures on one line, for the progress log.
func (r *run) summary(j job) string {
	if r.err != nil {
		return "FAILED: " + firstLine(r.err.Error())
	}
	var parts []string
	for _, w := range j.workloads {
		for _, m := range w.metrics {
			if v, ok := r.value(w, m); ok {
				parts = append(parts, fmt.Sprintf("%s %s %s", w.name, format(v), m.label))
			}
		}
	}
	return strings.Join(parts, ", ") + fmt.Sprintf(" (%.1fs)", r.wall.Seconds())
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// runJob runs bench.test for j against the statefun binary bin, with env
// added to its environment (and so to the runtime's). bench.test
// runs in a process group of its own, which is killed when ctx ends and
// after the run (a runtime child left behind by a failed run goes with it).
func runJob(ctx context.Context, dir, testBin string, j job, bin string, env, extra []string) *run {
	args := []string{"-test.run", "^$", "-test.bench", j.pattern, "-test.benchtime", "1x", "-test.timeout", "15m",
		"-load.bin=" + bin}
	args = append(append(args, j.args...), extra...)
	cmd := exec.CommandContext(ctx, testBin, args...)
	cmd.Dir = dir
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	res := &run{job: j.name}
	m0, t0 := readCPUTimes(), time.Now()
	err := cmd.Run()
	res.wall, res.machine = time.Since(t0), readCPUTimes().minus(m0)
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if cmd.ProcessState != nil {
		// The rusage of a reaped process covers the children it reaped:
		// the runtime, the function, the load generator, kfake.
		res.cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	res.values = parseBench(out.String())
	switch {
	case err != nil:
		res.err = fmt.Errorf("bench.test %s: %v\n%s", strings.Join(args, " "), err, failureLines(out.String()))
	default:
		for _, w := range j.workloads {
			if _, ok := res.values[w.bench]; !ok {
				res.err = fmt.Errorf("bench.test reported no %s\n%s", w.bench, tail(out.String(), 20))
			}
		}
	}
	return res
}

// failureLines picks the lines of a failed run that say why: those of the
// bench package's errors and testing's FAIL lines, or else its last lines.
func failureLines(out string) string {
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		t := strings.TrimSpace(l)
		if strings.Contains(t, "bench:") || strings.HasPrefix(t, "--- FAIL") || strings.HasPrefix(t, "panic:") || strings.Contains(t, "statefun:") {
			keep = append(keep, t)
		}
	}
	if len(keep) == 0 {
		return tail(out, 15)
	}
	if len(keep) > 15 {
		keep = keep[:15]
	}
	return strings.Join(keep, "\n")
}

var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(-\d+)?\s+\d+\s+(.*)$`)

// parseBench reads the result lines of go test -bench output: the
// benchmark's name (without its -GOMAXPROCS suffix) and each value and unit
// after the iteration count.
func parseBench(out string) map[string]map[string]float64 {
	res := map[string]map[string]float64{}
	for _, line := range strings.Split(out, "\n") {
		m := benchLine.FindStringSubmatch(strings.TrimRight(line, "\r"))
		if m == nil {
			continue
		}
		f := strings.Fields(m[3])
		vals := map[string]float64{}
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				break
			}
			vals[f[i+1]] = v
		}
		if len(vals) > 0 {
			res[m[1]] = vals
		}
	}
	return res
}

// cpuTimes is the machine's CPU time from the first line of /proc/stat, in
// seconds summed over all CPUs (Linux; zero elsewhere).
type cpuTimes struct {
	busy  float64 // user, nice, system, irq, softirq
	irq   float64 // irq and softirq: loopback traffic is handled there, for no process in particular
	total float64 // busy, idle, iowait and steal
	ok    bool
}

func readCPUTimes() cpuTimes {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return cpuTimes{}
	}
	var v [8]float64 // user nice system idle iowait irq softirq steal, in USER_HZ (100 on Linux)
	for i := range v {
		n, err := strconv.ParseFloat(f[i+1], 64)
		if err != nil {
			return cpuTimes{}
		}
		v[i] = n / 100
	}
	busy := v[0] + v[1] + v[2] + v[5] + v[6]
	return cpuTimes{busy: busy, irq: v[5] + v[6], total: busy + v[3] + v[4] + v[7], ok: true}
}

func (c cpuTimes) minus(before cpuTimes) cpuTimes {
	return cpuTimes{busy: c.busy - before.busy, irq: c.irq - before.irq, total: c.total - before.total, ok: c.ok && before.ok}
}

func (c cpuTimes) plus(o cpuTimes) cpuTimes {
	return cpuTimes{busy: c.busy + o.busy, irq: c.irq + o.irq, total: c.total + o.total, ok: c.ok && o.ok}
}
