//go:build unix

package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// report is the outcome of a comparison: a row per workload and metric.
type report struct {
	cfg      config
	builds   []*build
	start    time.Time
	elapsed  time.Duration
	machine  machine
	rows     []row
	usage    usage    // over every run
	failures []string // one note per job and build that failed
	// interrupted is the number of runs made before the comparison was
	// interrupted; 0 when it ran to the end.
	interrupted int
}

// machine is what the header says about the computer.
type machine struct {
	cpus  int    // the CPUs this process may use, as nproc counts them
	model string // /proc/cpuinfo's model name
	goVer string
}

func readMachine() machine {
	m := machine{cpus: runtime.NumCPU(), model: "unknown CPU model", goVer: runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH}
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return m
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			m.model = strings.TrimSpace(v)
			break
		}
	}
	return m
}

// usage is how the machine's CPUs were used during some runs.
type usage struct {
	wall    time.Duration
	cpu     time.Duration // the benchmarks' processes
	machine cpuTimes
}

func (u *usage) add(r *run) {
	if u.wall == 0 {
		u.machine.ok = true
	}
	u.wall += r.wall
	u.cpu += r.cpu
	u.machine = u.machine.plus(r.machine)
}

// busy is the share of all CPUs' time that was busy.
func (u usage) busy() (float64, bool) {
	if !u.machine.ok || u.machine.total <= 0 {
		return 0, false
	}
	return u.machine.busy / u.machine.total, true
}

// others is the cores that processes other than the benchmarks' used on
// average: the machine's busy time less interrupts and the benchmarks' own
// CPU time.
func (u usage) others() (float64, bool) {
	if !u.machine.ok || u.wall <= 0 {
		return 0, false
	}
	return max(0, u.machine.busy-u.machine.irq-u.cpu.Seconds()) / u.wall.Seconds(), true
}

// row is one metric of one workload, compared.
type row struct {
	w      workload
	m      metric
	values [][]float64 // per build: the rounds' values (NaN where the run failed)
	ratios []float64   // HEAD/BASE of each round both reported
	usage  usage       // of the job's runs
}

// stats are a row's figures.
func (r row) medians() (base, head float64) {
	return median(finite(r.values[0])), median(finite(r.values[1]))
}

func (r row) ratio() (med, lo, hi float64, n int) {
	if len(r.ratios) == 0 {
		return math.NaN(), math.NaN(), math.NaN(), 0
	}
	return median(r.ratios), slices.Min(r.ratios), slices.Max(r.ratios), len(r.ratios)
}

// reading says which way the rounds point: HEAD better or worse in every
// round, or some rounds each way.
func (r row) reading() string {
	med, lo, hi, n := r.ratio()
	switch {
	case n == 0:
		return "no pair"
	case n < 3:
		return "too few rounds"
	case lo > 1 && !r.m.lower, hi < 1 && r.m.lower:
		return fmt.Sprintf("HEAD better (%s)", pct(med))
	case hi < 1 && !r.m.lower, lo > 1 && r.m.lower:
		return fmt.Sprintf("HEAD worse (%s)", pct(med))
	}
	return "within the spread"
}

// pct is a ratio as the change it means, in percent.
func pct(ratio float64) string {
	return fmt.Sprintf("%+.0f%%", 100*(ratio-1))
}

func newReport(cfg config, builds []*build, jobs []job, runs []*run, start time.Time, m machine) *report {
	rep := &report{cfg: cfg, builds: builds, start: start, elapsed: time.Since(start), machine: m}
	failed := map[string]bool{}
	for _, r := range runs {
		rep.usage.add(r)
		if r.err != nil {
			key := r.job + "/" + builds[r.build].label
			if !failed[key] {
				failed[key] = true
				rep.failures = append(rep.failures, fmt.Sprintf("%s against %s, round %d: %s", r.job, builds[r.build].label, r.round+1, r.err))
			}
		}
	}
	for _, j := range jobs {
		var u usage
		for _, r := range runs {
			if r.job == j.name {
				u.add(r)
			}
		}
		for _, w := range j.workloads {
			for _, m := range w.metrics {
				vals := collect(runs, j.name, w, m, len(builds), cfg.rounds)
				rep.rows = append(rep.rows, row{w: w, m: m, usage: u, values: vals, ratios: ratios(vals[0], vals[1])})
			}
		}
	}
	return rep
}

// collect returns, per build and round, the value of workload w's metric m
// in the runs of job (NaN where a run failed or did not report it).
func collect(runs []*run, job string, w workload, m metric, builds, rounds int) [][]float64 {
	vals := make([][]float64, builds)
	for b := range vals {
		vals[b] = make([]float64, rounds)
		for i := range vals[b] {
			vals[b][i] = math.NaN()
		}
	}
	for _, r := range runs {
		if r.job != job {
			continue
		}
		if v, ok := r.value(w, m); ok {
			vals[r.build][r.round] = v
		}
	}
	return vals
}

// ratios returns head/base of every round both have a value for.
func ratios(base, head []float64) []float64 {
	var out []float64
	for i := range base {
		if a, b := base[i], head[i]; !math.IsNaN(a) && !math.IsNaN(b) && a != 0 {
			out = append(out, b/a)
		}
	}
	return out
}

// writeMarkdown writes the header and the table, ready for
// docs/benchmarks.md.
func (rep *report) writeMarkdown(w io.Writer) {
	base, head := rep.builds[0], rep.builds[1]
	fmt.Fprintf(w, "### HEAD `%s` against BASE `%s`\n\n", head.commit, base.commit)
	fmt.Fprintf(w, "- Command: `%s`\n", rep.cfg.command)
	fmt.Fprintf(w, "- Date: %s, %s in all\n", rep.start.UTC().Format("2006-01-02 15:04 MST"), rep.elapsed.Round(time.Second))
	fmt.Fprintf(w, "- BASE: %s%s%s\n", base.desc, flagsNote(base.flags), envNote(base.env))
	fmt.Fprintf(w, "- HEAD: %s%s%s\n", head.desc, flagsNote(head.flags), envNote(head.env))
	fmt.Fprintf(w, "- Machine: %d CPUs (nproc), %s; %s\n", rep.machine.cpus, rep.machine.model, rep.machine.goVer)
	fmt.Fprintf(w, "- Method: %d round%s; in each round every workload ran against both builds back to back, "+
		"BASE first in odd rounds and HEAD first in even ones. The load generator, the function and kfake are the working tree's; only the runtime binary differs.",
		rep.cfg.rounds, plural(rep.cfg.rounds))
	if busy, ok := rep.usage.busy(); ok {
		fmt.Fprintf(w, " During the runs the CPUs were %.0f%% busy", 100*busy)
		if o, ok := rep.usage.others(); ok {
			fmt.Fprintf(w, ", %.2f cores of it for processes other than the benchmarks'", o)
		}
		fmt.Fprint(w, ".")
	}
	if rep.interrupted > 0 {
		fmt.Fprintf(w, "\n- Interrupted after %d runs: the table covers those.", rep.interrupted)
	}
	fmt.Fprint(w, "\n\n")
	fmt.Fprintln(w, "| workload | metric | BASE | HEAD | HEAD/BASE | min–max | rounds | busy | others | reading |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|--:|--:|--:|---|")
	for _, r := range rep.rows {
		b, h := r.medians()
		med, lo, hi, n := r.ratio()
		better := "more is better"
		if r.m.lower {
			better = "less is better"
		}
		busy, others := "—", "—"
		if v, ok := r.usage.busy(); ok {
			busy = fmt.Sprintf("%.0f%%", 100*v)
		}
		if v, ok := r.usage.others(); ok {
			others = fmt.Sprintf("%.2f", v)
		}
		spread := "—"
		if n > 0 {
			spread = fmt.Sprintf("%.2f–%.2f", lo, hi)
		}
		fmt.Fprintf(w, "| %s | %s (%s) | %s | %s | %s | %s | %d | %s | %s | %s |\n",
			r.w.title, r.m.label, better, format(b), format(h), ratioText(med), spread, n, busy, others, r.reading())
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "BASE and HEAD are medians over the rounds; HEAD/BASE is the median of the per-round ratios, min–max their spread. "+
		"busy is the share of all CPUs' time busy during the workload's runs; others the cores used by other processes than "+
		"the benchmark's (the machine's busy time from /proc/stat, less interrupts and the benchmark processes' CPU time). "+
		"The reading says HEAD better or worse only when every round agrees.")
	for _, f := range rep.failures {
		fmt.Fprintf(w, "\nFailed: %s\n", indent(f))
	}
}

func indent(s string) string {
	return strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}

func ratioText(v float64) string {
	if math.IsNaN(v) {
		return "—"
	}
	return fmt.Sprintf("%.2f", v)
}

// format prints a figure: whole numbers with thousands separators from
// 100 up, three significant digits below.
func format(v float64) string {
	switch {
	case math.IsNaN(v):
		return "—"
	case math.Abs(v) >= 100:
		return thousands(v)
	case v == 0:
		return "0"
	}
	return fmt.Sprintf("%.3g", v)
}

func thousands(v float64) string {
	s := fmt.Sprintf("%.0f", math.Abs(v))
	var b strings.Builder
	if v < 0 {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func finite(vs []float64) []float64 {
	var out []float64
	for _, v := range vs {
		if !math.IsNaN(v) {
			out = append(out, v)
		}
	}
	return out
}

// median of vs (NaN when empty); the mean of the middle two for an even
// count.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
