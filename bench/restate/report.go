package main

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// The markers that delimit this benchmark's section of the markdown file;
// everything outside them belongs to others and is kept as it is.
const (
	beginMarker = "<!-- restate:begin -->"
	endMarker   = "<!-- restate:end -->"
)

// row is one line of the comparison: a metric of a workload at a key
// count, measured on both systems.
type row struct {
	Short    string // the row's name on the chart
	Workload string
	Keys     string // key count, or "" when it does not apply
	Metric   string // unit included: "ops/s", "p50 ms", ...
	Ours     float64
	Theirs   float64
	Higher   bool   // higher is better
	OursNote string // shown after our figure (a breakdown)
	TheirsNo string // shown after theirs
}

// label is the row's name on the chart.
func (r row) label() string {
	short := r.Short
	if short == "" {
		short = r.Workload
	}
	if r.Keys != "" {
		return fmt.Sprintf("%s, %s, %s", short, r.Metric, plural(r.keyCount(), "key"))
	}
	return short + ", " + r.Metric
}

// ratio is ours/theirs, NaN when either is missing.
func (r row) ratio() float64 {
	if r.Ours <= 0 || r.Theirs <= 0 {
		return math.NaN()
	}
	return r.Ours / r.Theirs
}

// advantage is how many times better ours is (>1) or worse (<1).
func (r row) advantage() float64 {
	q := r.ratio()
	if r.Higher {
		return q
	}
	return 1 / q
}

// ahead names the system that is ahead and by how much.
func (r row) ahead() string {
	a := r.advantage()
	switch {
	case math.IsNaN(a):
		return "—"
	case a >= 1.05:
		return fmt.Sprintf("**statefun %.1f×**", a)
	case a <= 1/1.05:
		return fmt.Sprintf("Restate %.1f×", 1/a)
	}
	return "even"
}

// rows turns the results into the comparison table.
func rows(o options, res *results) []row {
	us, them := res.Ours, res.Theirs
	var out []row
	for _, k := range o.cfg.Keys {
		ks := fmt.Sprint(k)
		a, b := us.Inc[k], them.Inc[k]
		w, sh := "1. increment (ingress, durable ack)", "1 increment ack"
		out = append(out,
			row{Short: sh, Workload: w, Keys: ks, Metric: "ops/s", Ours: a.Ack.Rate(), Theirs: b.Ack.Rate(), Higher: true},
			row{Short: sh, Workload: w, Keys: ks, Metric: "p50 ms", Ours: ms(a.Ack.Quantile(0.5)), Theirs: ms(b.Ack.Quantile(0.5))},
			row{Short: sh, Workload: w, Keys: ks, Metric: "p99 ms", Ours: ms(a.Ack.Quantile(0.99)), Theirs: ms(b.Ack.Quantile(0.99))},
			row{Short: "1 increments applied", Workload: "1. increment, all applied", Keys: ks, Metric: "ops/s", Ours: a.AppliedRate(), Theirs: b.AppliedRate(), Higher: true})
		cpu := row{Short: "1 CPU per increment", Workload: "1. CPU per increment (server + function)", Keys: ks, Metric: "µs"}
		var s, f float64
		s, f, cpu.Ours = a.CPU.perOp(a.Ack.OK)
		cpu.OursNote = fmt.Sprintf(" (%.0f + %.0f)", s, f)
		s, f, cpu.Theirs = b.CPU.perOp(b.Ack.OK)
		cpu.TheirsNo = fmt.Sprintf(" (%.0f + %.0f)", s, f)
		out = append(out, cpu)
	}
	for _, k := range o.cfg.Keys {
		ks := fmt.Sprint(k)
		a, b := us.Reads[k], them.Reads[k]
		w, sh := "2. state read, one key", "2 state read"
		out = append(out,
			row{Short: sh, Workload: w, Keys: ks, Metric: "ops/s", Ours: a.Ops.Rate(), Theirs: b.Ops.Rate(), Higher: true},
			row{Short: sh, Workload: w, Keys: ks, Metric: "p50 ms", Ours: ms(a.Ops.Quantile(0.5)), Theirs: ms(b.Ops.Quantile(0.5))},
			row{Short: sh, Workload: w, Keys: ks, Metric: "p99 ms", Ours: ms(a.Ops.Quantile(0.99)), Theirs: ms(b.Ops.Quantile(0.99))})
	}
	for _, k := range o.cfg.Keys {
		ks := fmt.Sprint(k)
		a, b := us.Writes[k], them.Writes[k]
		w, sh := fmt.Sprintf("3. state write, durable + visible (%s)", plural(a.Clients, "client")), "3 state write"
		out = append(out,
			row{Short: sh, Workload: w, Keys: ks, Metric: "ops/s", Ours: a.Ops.Rate(), Theirs: b.Ops.Rate(), Higher: true},
			row{Short: sh, Workload: w, Keys: ks, Metric: "p50 ms", Ours: ms(a.Ops.Quantile(0.5)), Theirs: ms(b.Ops.Quantile(0.5))},
			row{Short: sh, Workload: w, Keys: ks, Metric: "p99 ms", Ours: ms(a.Ops.Quantile(0.99)), Theirs: ms(b.Ops.Quantile(0.99))})
	}
	if o.cfg.RestartKeys > 0 {
		a, b := us.Restart, them.Restart
		ks := fmt.Sprint(o.cfg.RestartKeys)
		fill := func(r restartResult) float64 {
			if r.FillTime <= 0 {
				return 0
			}
			return float64(r.Keys) / r.FillTime.Seconds()
		}
		out = append(out,
			row{Short: "4 fill", Workload: "4. fill: one increment per key, all applied", Keys: ks, Metric: "ops/s", Ours: fill(a), Theirs: fill(b), Higher: true},
			row{Short: "4 disk per key", Workload: "4. data directory at the clean stop, per key", Keys: ks, Metric: "bytes", Ours: float64(a.DiskBytes) / float64(a.Keys), Theirs: float64(b.DiskBytes) / float64(b.Keys)},
			row{Short: "4 clean stop", Workload: "4. clean stop (SIGTERM → exit)", Keys: ks, Metric: "s", Ours: a.Stop.Seconds(), Theirs: b.Stop.Seconds()},
			row{Short: "4 restart → ready", Workload: "4. clean restart: start → ready", Keys: ks, Metric: "s", Ours: a.Ready.Seconds(), Theirs: b.Ready.Seconds()},
			row{Short: "4 restart → first read", Workload: "4. clean restart: start → first state read", Keys: ks, Metric: "s", Ours: a.FirstRead.Seconds(), Theirs: b.FirstRead.Seconds()},
			row{Short: "4 crash → ready", Workload: "4. crash (SIGKILL) restart: start → ready", Keys: ks, Metric: "s", Ours: a.CrashRdy.Seconds(), Theirs: b.CrashRdy.Seconds()},
			row{Short: "4 crash → first read", Workload: "4. crash (SIGKILL) restart: start → first state read", Keys: ks, Metric: "s", Ours: a.CrashRead.Seconds(), Theirs: b.CrashRead.Seconds()})
	}
	return out
}

// num formats a figure with about three significant digits.
func num(v float64) string {
	switch {
	case v == 0 || math.IsNaN(v):
		return "—"
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	case math.Abs(v) >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3f", v)
}

// machine describes this machine for the report.
func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	mem := "unknown"
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		for _, line := range strings.Split(string(b), "\n") {
			if _, err := fmt.Sscanf(line, "MemTotal: %d kB", &kb); err == nil {
				mem = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
				break
			}
		}
	}
	kernel := runtime.GOOS
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel += " " + strings.TrimSpace(string(b))
	}
	return fmt.Sprintf("nproc %d (%s), %s memory, %s, %s", runtime.NumCPU(), model, mem, kernel, runtime.Version())
}

// renderSection is the markdown between the markers.
func renderSection(o options, res *results, rs []row, chartName string) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("## Side by side with Restate\n\n")
	p("Written by `bench/restate` (its own Go module); re-running it replaces everything between the `restate` markers, nothing else.\n\n")
	p("- **Date:** %s (the run took %s)\n", res.Started.UTC().Format("2006-01-02 15:04 MST"), res.Duration.Round(time.Second))
	p("- **Machine:** %s", machine())
	if c := res.CPU; c.total > 0 {
		p("; over the run %.2f of %d cores busy on average, %.1f%% of CPU time stolen by the hypervisor", c.busy/res.Duration.Seconds(), runtime.NumCPU(), 100*c.steal/c.total)
	}
	p("\n")
	p("- **Command:** `%s`\n", o.command)
	p("- **Load:** a Go load generator in the harness process, %d concurrent keep-alive clients, every run bounded to its count (increments %d, reads %d, writes %d per key count) and to %s of sending; the systems ran one after the other, ours first, each on a fresh data directory on the same disk; everything on loopback inside a private network namespace.\n",
		o.cfg.Clients, o.cfg.Messages, o.cfg.Reads, o.cfg.Writes, o.cfg.MaxTime)
	p("- **statefun:** %s\n", strings.Join(res.Ours.Settings, "; "))
	p("- **Restate:** %s\n", strings.Join(res.Theirs.Settings, "; "))
	if o.cfg.RestartKeys < 1_000_000 {
		p("- **Workload 4** ran with %d keys of state, the default that keeps the run to a few minutes; `make bench-restate BENCH_RESTATE_FLAGS=-restart-keys=1000000` runs the issue's 1 million.\n", o.cfg.RestartKeys)
	}
	p("- **Reading it:** one run per figure; repeated runs on this kind of VM differ by up to about a quarter, so a ratio within 1.3× is close to even. *statefun/Restate* is the raw ratio; *ahead* says who is better and by how much (for latencies, times and CPU, lower is better).\n")
	p("\n| workload | keys | metric | statefun | Restate | statefun/Restate | ahead |\n|---|--:|---|--:|--:|--:|---|\n")
	for _, r := range rs {
		p("| %s | %s | %s | %s%s | %s%s | %s | %s |\n", r.Workload, r.Keys, r.Metric, num(r.Ours), r.OursNote, num(r.Theirs), r.TheirsNo, num(r.ratio()), r.ahead())
	}
	p("\n![statefun vs Restate: how many times better, per row](%s)\n\n", chartName)
	p(`### What the rows measure

1. **Increments** go through each system's ingress, fire-and-forget, key i mod keys: ours `+"`POST /sdktest/counter/<key>`"+` on the playground ingress, answered 200 once the message is in a synced commit; Restate `+"`POST /Counter/<key>/add/send`"+`, answered 202 once the invocation is durably in its log. Both promise the increment will be applied exactly once. Latency is per request; *all applied* is the acknowledged increments over the time from the first request until the last one is applied (ours: the runtime's `+"`statefun_batch_size_sum`"+`, messages the function has answered, whose results are committed with the next group commit a few ms later; Restate: the sum of the counters in its `+"`state`"+` table), polled every 20 ms or every fiftieth of the time so far, whichever is longer (so within 2%%; a Restate poll is an SQL query over every counter and must not slow it down). Afterwards the counters of up to %d keys are read back until each equals the acknowledged increments of its key (more is a failure). CPU is the server's plus the function's, from /proc, over the same window.
2. **Reads** of one key's counter through each system's state access: ours `+"`GET /state/sdktest/counter/<key>/count`"+`; Restate `+"`POST /query`"+` with `+"`SELECT value_utf8 FROM state WHERE service_name = 'Counter' AND service_key = '<key>' AND key = 'count'`"+` (what `+"`restate kv get`"+` runs).
3. **Writes** of one key's counter, each until durable and visible: ours `+"`PUT /state/...?ack=committed`"+`; Restate `+"`POST /services/Counter/state`"+` (answered 202, applied asynchronously), then `+"`POST /query`"+` every %s until the new value shows. No two clients write the same key, so with 1 key there is 1 client.
4. **Restart**: a fresh instance gets one increment on each of the keys (*fill*), then is stopped with SIGTERM and started again; *ready* is our `+"`/readyz`"+`, Restate's admin `+"`/health`"+` and ingress `+"`/restate/health`"+`; *first state read* is when a read of a filled key returns its count. Then every key gets a second increment, the server is killed with SIGKILL and started again, measured the same way (so both restarts follow the same writes).

`, maxChecked, writePoll)
	behind := slices.DeleteFunc(slices.Clone(rs), func(r row) bool { a := r.advantage(); return math.IsNaN(a) || a > 1/1.05 })
	slices.SortFunc(behind, func(x, y row) int {
		switch ax, ay := x.advantage(), y.advantage(); {
		case ax < ay:
			return -1
		case ax > ay:
			return 1
		}
		return 0
	})
	p("### Where statefun is behind\n\n")
	if len(behind) == 0 {
		p("Nowhere in this run.\n\n")
	}
	for _, r := range behind {
		keys := ""
		if r.Keys != "" {
			keys = ", " + r.Keys + " keys"
		}
		p("- %s%s, %s: Restate %.1f× (%s vs %s)\n", r.Workload, keys, r.Metric, 1/r.advantage(), num(r.Theirs), num(r.Ours))
	}
	if len(behind) > 0 {
		p("\n")
	}
	p("%s", profileSection(o, res))
	return b.String()
}

// replaceSection puts section between the markers of doc, adding the
// markers at the end when doc has none.
func replaceSection(doc []byte, section string) ([]byte, error) {
	body := beginMarker + "\n" + section + endMarker
	i := bytes.Index(doc, []byte(beginMarker))
	j := bytes.Index(doc, []byte(endMarker))
	switch {
	case i < 0 && j < 0:
		out := bytes.TrimRight(doc, "\n")
		if len(out) > 0 {
			out = append(out, "\n\n"...)
		}
		return append(out, body+"\n"...), nil
	case i < 0 || j < i:
		return nil, errors.New("bench: the restate markers are broken (one is missing or they are out of order); fix them by hand")
	}
	out := append([]byte{}, doc[:i]...)
	out = append(out, body...)
	return append(out, doc[j+len(endMarker):]...), nil
}

// writeReport writes the section into o.out and the chart beside it.
func writeReport(o options, res *results) error {
	if res.Ours == nil || res.Theirs == nil {
		return errors.New("bench: the report needs both systems (-systems statefun,restate)")
	}
	rs := rows(o, res)
	rel, err := filepath.Rel(filepath.Dir(o.out), o.chart)
	if err != nil {
		rel = o.chart
	}
	if err := writeChart(o.chart, rs, res.Started); err != nil {
		return err
	}
	doc, err := os.ReadFile(o.out)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	out, err := replaceSection(doc, renderSection(o, res, rs, filepath.ToSlash(rel)))
	if err != nil {
		return err
	}
	return os.WriteFile(o.out, out, 0o644)
}

// keyCount is the row's key count.
func (r row) keyCount() int {
	var n int
	fmt.Sscan(r.Keys, &n)
	return n
}

// plural is "1 key", "2 keys".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
