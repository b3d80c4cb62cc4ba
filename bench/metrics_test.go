package bench

import (
	"bufio"
	"context"
	"crypto/sha256"
	"fmt"
	"math"
	"net/http"
	"os"
	rtmetrics "runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"time"
)

// metrics is one scrape of the admin listener's /metrics: the value of
// every series, keyed by its name and labels as written
// (`statefun_invocations_total{function="a/b",outcome="ok"}`).
type metrics map[string]float64

// scrape reads the Prometheus text exposition at url.
func scrape(ctx context.Context, client *http.Client, url string) (metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("bench: GET %s: %s", url, resp.Status)
	}
	m := metrics{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		m[line[:i]] = v
	}
	return m, sc.Err()
}

// sum adds up every series of a metric whose labels contain all of match
// (each `name="value"`).
func (m metrics) sum(name string, match ...string) float64 {
	total := 0.0
	for series, v := range m {
		base, labels, _ := strings.Cut(series, "{")
		if base != name {
			continue
		}
		ok := true
		for _, l := range match {
			ok = ok && strings.Contains(labels, l)
		}
		if ok {
			total += v
		}
	}
	return total
}

// histogram is a Prometheus histogram: cumulative counts per upper bound.
type histogram struct {
	count, sum float64
	le, cum    []float64 // sorted by le; the last le is +Inf
}

func (m metrics) histogram(name string) histogram { return m.histogramWith(name, "") }

// histogramWith is histogram for the series of a labelled histogram whose
// other labels are exactly labels, as written (`kind="read"`).
func (m metrics) histogramWith(name, labels string) histogram {
	sel, prefix := "", name+`_bucket{le="`
	if labels != "" {
		sel, prefix = "{"+labels+"}", name+`_bucket{`+labels+`,le="`
	}
	h := histogram{count: m[name+"_count"+sel], sum: m[name+"_sum"+sel]}
	type bucket struct{ le, cum float64 }
	var bs []bucket
	for series, v := range m {
		rest, ok := strings.CutPrefix(series, prefix)
		if !ok {
			continue
		}
		le, err := strconv.ParseFloat(strings.TrimSuffix(rest, `"}`), 64)
		if err != nil {
			continue
		}
		bs = append(bs, bucket{le, v})
	}
	slices.SortFunc(bs, func(a, b bucket) int {
		switch {
		case a.le < b.le:
			return -1
		case a.le > b.le:
			return 1
		}
		return 0
	})
	for _, b := range bs {
		h.le = append(h.le, b.le)
		h.cum = append(h.cum, b.cum)
	}
	return h
}

// minus returns what h observed since before.
func (h histogram) minus(before histogram) histogram {
	out := histogram{count: h.count - before.count, sum: h.sum - before.sum, le: h.le}
	out.cum = make([]float64, len(h.cum))
	for i := range h.cum {
		out.cum[i] = h.cum[i]
		if i < len(before.cum) {
			out.cum[i] -= before.cum[i]
		}
	}
	return out
}

func (h histogram) mean() float64 {
	if h.count == 0 {
		return 0
	}
	return h.sum / h.count
}

// quantile estimates the q-quantile as Prometheus's histogram_quantile
// does: linear within the bucket that holds it. A quantile in the +Inf
// bucket is reported as the largest finite bound.
func (h histogram) quantile(q float64) float64 {
	if h.count == 0 || len(h.le) == 0 {
		return 0
	}
	rank := q * h.count
	lower, below := 0.0, 0.0
	for i, le := range h.le {
		if h.cum[i] >= rank {
			if math.IsInf(le, 1) {
				return lower
			}
			in := h.cum[i] - below
			if in <= 0 {
				return le
			}
			return lower + (le-lower)*(rank-below)/in
		}
		lower, below = le, h.cum[i]
	}
	return lower
}

// waitFor polls /metrics until done says so, or fails after timeout.
func waitFor(ctx context.Context, client *http.Client, url string, timeout time.Duration, done func(metrics) bool) (metrics, error) {
	deadline := time.Now().Add(timeout)
	for {
		m, err := scrape(ctx, client, url)
		if err != nil {
			return nil, err
		}
		if done(m) {
			return m, nil
		}
		if time.Now().After(deadline) {
			return m, fmt.Errorf("bench: condition on %s not met within %v", url, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// procCPU returns the CPU time (user and system) a process has used so far,
// from /proc (Linux); ok is false elsewhere.
func procCPU(pid int) (time.Duration, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// The command name, field 2, is in parentheses and may hold spaces;
	// utime and stime are fields 14 and 15, in clock ticks (USER_HZ, 100
	// on Linux).
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, false
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(ut+st) * (time.Second / 100), true
}

// machineCPU is the machine-wide CPU time from /proc/stat (Linux), in
// seconds summed over all CPUs.
type machineCPU struct {
	busy                float64 // user, nice, system, irq, softirq
	irq                 float64 // irq and softirq (loopback traffic lands here)
	idle, iowait, steal float64
	ok                  bool
}

func readMachineCPU() machineCPU {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineCPU{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return machineCPU{}
	}
	var v [8]float64 // user nice system idle iowait irq softirq steal, in USER_HZ
	for i := range v {
		n, err := strconv.ParseFloat(f[i+1], 64)
		if err != nil {
			return machineCPU{}
		}
		v[i] = n / 100
	}
	return machineCPU{busy: v[0] + v[1] + v[2] + v[5] + v[6], irq: v[5] + v[6], idle: v[3], iowait: v[4], steal: v[7], ok: true}
}

func (c machineCPU) minus(before machineCPU) machineCPU {
	return machineCPU{busy: c.busy - before.busy, irq: c.irq - before.irq, idle: c.idle - before.idle,
		iowait: c.iowait - before.iowait, steal: c.steal - before.steal, ok: c.ok && before.ok}
}

// others returns the cores (over wall seconds) that the machine spent on
// neither irq/softirq work nor the given processes' CPU time: other work
// that makes a measurement unclean.
func (c machineCPU) others(wall float64, ours ...time.Duration) float64 {
	o := c.busy - c.irq
	for _, d := range ours {
		o -= d.Seconds()
	}
	return o / wall
}

// goRuntime is what runtime/metrics says about this process's Go runtime:
// garbage collection, which runs for the runtime and the load generator
// alike (and for the function when it is in process).
type goRuntime struct {
	gcCycles   uint64
	gcCPU      float64 // seconds of CPU the collector used (estimate)
	userCPU    float64 // seconds of CPU user code used (estimate)
	liveHeap   uint64  // bytes marked live by the last cycle
	heapGoal   uint64
	goroutines uint64
}

func readGoRuntime() goRuntime {
	samples := []rtmetrics.Sample{
		{Name: "/gc/cycles/total:gc-cycles"},
		{Name: "/cpu/classes/gc/total:cpu-seconds"},
		{Name: "/cpu/classes/user:cpu-seconds"},
		{Name: "/gc/heap/live:bytes"},
		{Name: "/gc/heap/goal:bytes"},
		{Name: "/sched/goroutines:goroutines"},
	}
	rtmetrics.Read(samples)
	u := func(i int) uint64 {
		if samples[i].Value.Kind() == rtmetrics.KindUint64 {
			return samples[i].Value.Uint64()
		}
		return 0
	}
	f := func(i int) float64 {
		if samples[i].Value.Kind() == rtmetrics.KindFloat64 {
			return samples[i].Value.Float64()
		}
		return 0
	}
	return goRuntime{gcCycles: u(0), gcCPU: f(1), userCPU: f(2), liveHeap: u(3), heapGoal: u(4), goroutines: u(5)}
}

// schedLatencies reads this process's Go scheduler latencies (how long
// goroutines sat runnable before they ran), cumulative since start.
func schedLatencies() *rtmetrics.Float64Histogram {
	s := []rtmetrics.Sample{{Name: "/sched/latencies:seconds"}}
	rtmetrics.Read(s)
	if s[0].Value.Kind() != rtmetrics.KindFloat64Histogram {
		return &rtmetrics.Float64Histogram{}
	}
	h := s[0].Value.Float64Histogram()
	return &rtmetrics.Float64Histogram{Counts: slices.Clone(h.Counts), Buckets: h.Buckets}
}

// schedQuantile returns the upper bound, in seconds, of the bucket that
// holds the q-quantile of the scheduler latencies between before and
// after (0 when nothing was scheduled).
func schedQuantile(before, after *rtmetrics.Float64Histogram, q float64) float64 {
	var total uint64
	d := make([]uint64, len(after.Counts))
	for i := range after.Counts {
		d[i] = after.Counts[i]
		if i < len(before.Counts) {
			d[i] -= before.Counts[i]
		}
		total += d[i]
	}
	if total == 0 {
		return 0
	}
	var acc uint64
	for i, c := range d {
		acc += c
		if float64(acc) >= q*float64(total) {
			if math.IsInf(after.Buckets[i+1], 1) {
				return after.Buckets[i]
			}
			return after.Buckets[i+1]
		}
	}
	return after.Buckets[len(after.Buckets)-1]
}

// cpuProbe measures how fast this machine runs a fixed piece of CPU work
// right now (SHA-256, MB/s on one core). On a virtual machine the answer
// drifts by tens of percent over minutes; runs are only comparable when
// their probes are.
func cpuProbe() float64 {
	buf := make([]byte, 1<<20)
	start := time.Now()
	const rounds = 32
	for range rounds {
		sum := sha256.Sum256(buf)
		buf[0] = sum[0]
	}
	return rounds / time.Since(start).Seconds()
}
