package bench

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/sdktest"
	"github.com/statefun-go/statefun/internal/store"
	"github.com/statefun-go/statefun/internal/testport"
)

// BenchmarkEndToEnd posts -load.messages messages through the playground
// ingress to sdktest/counter over 1, 100 and 10,000 distinct ids (see the
// package comment for what is measured and how).
func BenchmarkEndToEnd(b *testing.B) {
	fn := startCounter(b)
	for _, addrs := range addressCounts(b) {
		b.Run(fmt.Sprintf("addresses=%d", addrs), func(b *testing.B) {
			var r *e2eResult
			for range b.N {
				r = runEndToEnd(b, fn, addrs)
			}
			r.report(b)
		})
	}
}

// e2eResult is one measured run.
type e2eResult struct {
	addrs, clients, partitions int
	rtPID, fnPID, loadPID      int // 0 for this process
	load                       loadSummary
	processed                  time.Duration // first request to the last function answer
	cpuSelf, cpuRuntime        time.Duration // the same process unless -load.bin
	cpuFn, cpuLoad             time.Duration
	cpuOK                      bool
	machine                    machineCPU
	goBefore, goAfter          goRuntime
	before, after              metrics
	profile                    string
	probe                      float64
}

// cpuOf reads the CPU time of the processes of a run: this one, the
// function's and the load generator's (0 for those in this process).
func cpuOf(pids ...int) ([]time.Duration, bool) {
	out := make([]time.Duration, len(pids))
	all := true
	for i, pid := range pids {
		if i > 0 && pid == 0 {
			continue
		}
		d, ok := procCPU(pid)
		out[i], all = d, all && ok
	}
	return out, all
}

func runEndToEnd(b *testing.B, fn *counterFn, addrs int) *e2eResult {
	b.StopTimer()
	ctx := b.Context()
	dir := b.TempDir()
	ingressPort, egressPort := freePort(b), freePort(b)
	module := fmt.Sprintf(`kind: io.statefun.endpoints.v2/http
spec:
  functions: sdktest/*
  urlPathTemplate: %s
  transport:
    type: io.statefun.transports.v1/async
---
kind: io.statefun.playground.v1/ingress
spec:
  port: %d
---
kind: io.statefun.playground.v1/egress
spec:
  port: %d
  topics: [%s]
`, fn.url, ingressPort, egressPort, sdktest.CounterTopic)
	rt, err := startRuntimeProc(b, dir, module)
	if err != nil {
		b.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			rt.close()
		}
	}()
	metricsURL := "http://" + rt.admin + "/metrics"
	ingress := fmt.Sprintf("http://127.0.0.1:%d/%s/", ingressPort, sdktest.CounterFn)
	mc := &http.Client{Timeout: 10 * time.Second}

	// Warm up: one message registers the function's states (one extra
	// round trip, once per store) before the clock starts.
	if st, err := roundTrip(mc, mustRequest(ctx, ingress+"warmup")); err != nil || st != http.StatusOK {
		b.Fatalf("bench: warm-up message: status %d, %v", st, err)
	}
	before, err := waitFor(ctx, mc, metricsURL, 30*time.Second, func(m metrics) bool {
		return m.sum("statefun_batch_size_sum") >= 2 && m.sum("statefun_queue_depth") == 0
	})
	if err != nil {
		b.Fatal(err)
	}

	spec := loadSpec{IngressPrefix: ingress, Addrs: addrs, Messages: *flagMessages, Clients: *flagClients, MaxTime: *flagMaxTime}
	gen := startLoad(b, spec)
	r := &e2eResult{addrs: addrs, clients: *flagClients, partitions: rt.partitions,
		rtPID: rt.pid, fnPID: fn.pid, loadPID: gen.pid, before: before}
	if *flagGOGC != 0 && rt.pid == 0 {
		defer debug.SetGCPercent(debug.SetGCPercent(*flagGOGC))
	}
	r.probe = cpuProbe()
	if *flagProfile != "" {
		if err := os.MkdirAll(*flagProfile, 0o755); err != nil {
			b.Fatal(err)
		}
		r.profile = filepath.Join(*flagProfile, fmt.Sprintf("cpu-%d.pprof", addrs))
		f, err := os.Create(r.profile)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Logf("bench: no CPU profile (%v); is -cpuprofile set?", err)
			r.profile = ""
		}
	}
	cpu0, ok0 := cpuOf(os.Getpid(), rt.pid, fn.pid, gen.pid)
	mach0 := readMachineCPU()
	r.goBefore = readGoRuntime()
	start := time.Now()
	b.StartTimer()

	r.load, err = gen.run()
	if err != nil {
		b.Fatal(err)
	}
	want := before.sum("statefun_batch_size_sum") + float64(r.load.OK)
	r.after, err = waitFor(ctx, mc, metricsURL, 10*time.Minute, func(m metrics) bool {
		return m.sum("statefun_batch_size_sum") >= want
	})
	if err != nil {
		b.Fatal(err)
	}
	r.processed = time.Since(start)

	b.StopTimer()
	r.machine = readMachineCPU().minus(mach0)
	r.goAfter = readGoRuntime()
	cpu1, ok1 := cpuOf(os.Getpid(), rt.pid, fn.pid, gen.pid)
	r.cpuSelf, r.cpuRuntime, r.cpuFn, r.cpuLoad, r.cpuOK = cpu1[0]-cpu0[0], cpu1[1]-cpu0[1], cpu1[2]-cpu0[2], cpu1[3]-cpu0[3], ok0 && ok1
	if rt.pid == 0 {
		r.cpuRuntime = r.cpuSelf
	}
	if r.profile != "" {
		pprof.StopCPUProfile()
	}

	// Let the last commits land, then check the store: one egress record
	// per message, and the counts add up.
	last := -1.0
	if _, err := waitFor(ctx, mc, metricsURL, time.Minute, func(m metrics) bool {
		n := m.sum("statefun_commit_seconds_count")
		stable := n == last && m.sum("statefun_queue_depth") == 0
		last = n
		if !stable {
			time.Sleep(50 * time.Millisecond)
		}
		return stable
	}); err != nil {
		b.Fatal(err)
	}
	if err := rt.close(); err != nil {
		b.Fatal(err)
	}
	closed = true
	if rt.ownFormat {
		verify(b, rt.dataDir, addrs, r.load.OK+1)
	}
	return r
}

// verify reopens the store of a finished run and checks that every message
// was processed exactly once: total egress records and the sum of the
// counts (warm-up included) are both want.
func verify(b *testing.B, dataDir string, addrs, want int) {
	db, err := store.Open(dataDir, store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	egressed, err := db.MaxEgressSeq()
	if err != nil {
		b.Fatal(err)
	}
	counter, err := address.ParseTypeName(sdktest.CounterFn)
	if err != nil {
		b.Fatal(err)
	}
	total := int64(0)
	for i := -1; i < addrs; i++ {
		id := "warmup"
		if i >= 0 {
			id = idName(i)
		}
		e, ok, err := db.GetState(address.Address{Type: counter, ID: id}, sdktest.CounterState)
		if err != nil {
			b.Fatal(err)
		}
		if !ok {
			continue
		}
		n, err := sdktest.DecodeInt64(&protocol.TypedValue{Typename: e.Typename, HasValue: true, Value: e.Value})
		if err != nil {
			b.Fatal(err)
		}
		total += n
	}
	if egressed != uint64(want) || total != int64(want) {
		b.Errorf("bench: after the run the store holds %d egress records and counts summing to %d; want %d of each", egressed, total, want)
	}
}

func (r *e2eResult) report(b *testing.B) {
	l := r.load
	wall := r.processed.Seconds()
	perMsg := func(d time.Duration) float64 { return 1e6 * d.Seconds() / float64(l.OK) }
	b.ReportMetric(l.rate(), "committed-msgs/s")
	b.ReportMetric(float64(l.OK)/wall, "processed-msgs/s")
	b.ReportMetric(ms(l.P50), "p50-ms")
	b.ReportMetric(ms(l.P99), "p99-ms")
	if r.cpuOK {
		b.ReportMetric(perMsg(r.cpuRuntime), "runtime-cpu-us/msg")
	}

	d := func(name string, match ...string) float64 {
		return r.after.sum(name, match...) - r.before.sum(name, match...)
	}
	// The runtime's heap allocations per message, from its own /metrics:
	// unlike its CPU time they do not move with the machine's load.
	b.ReportMetric(d("go_memstats_mallocs_total")/float64(l.OK), "runtime-allocs/msg")
	b.ReportMetric(d("go_memstats_alloc_bytes_total")/float64(l.OK), "runtime-B/msg")
	h := func(name string) histogram { return r.after.histogram(name).minus(r.before.histogram(name)) }
	commits, calls, batch := h("statefun_commit_seconds"), h("statefun_call_seconds"), h("statefun_batch_size")
	ops, size := h("statefun_commit_ops"), h("statefun_commit_bytes")

	where := func(pid int) string {
		if pid == 0 {
			return "in this process"
		}
		return "in a child process"
	}
	partitions := "the binary's default partitions"
	if r.partitions > 0 {
		partitions = fmt.Sprintf("%d partitions", r.partitions)
	}
	b.Logf("%d messages over %d ids, %d clients (load generator %s), %s, runtime %s, function %s",
		l.OK, r.addrs, r.clients, where(r.loadPID), partitions, where(r.rtPID), where(r.fnPID))
	if r.rtPID != 0 {
		b.Logf("runtime: %s; its store is not reopened to check the counts (its format may not be this tree's)", *flagBin)
	}
	b.Logf("ingress: %.0f msgs/s committed in %.2fs; latency p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.2f ms; %d busy (503) answers retried",
		l.rate(), l.Elapsed.Seconds(), ms(l.P50), ms(l.P90), ms(l.P99), ms(l.PMax), l.Busy)
	b.Logf("processed: %.0f msgs/s, all function answers %.2fs after the first request", float64(l.OK)/wall, wall)
	b.Logf("group commits: %.0f (%.0f/s), %.2f ms mean, p50 %.2f ms, p99 %.2f ms; %.0f ops and %.1f KiB mean per commit; %.1f messages per commit",
		commits.count, commits.count/wall, 1e3*commits.mean(), 1e3*commits.quantile(0.5), 1e3*commits.quantile(0.99),
		ops.mean(), size.mean()/1024, float64(l.OK)/commits.count)
	b.Logf("function calls: %.0f (%.0f/s), %.2f ms mean, p50 %.2f ms, p99 %.2f ms; %.2f messages per call; %.0f retries",
		calls.count, calls.count/wall, 1e3*calls.mean(), 1e3*calls.quantile(0.5), 1e3*calls.quantile(0.99),
		batch.mean(), d("statefun_retries_total"))
	if r.cpuOK {
		b.Logf("cpu per message: this process %.0f µs (%.2f cores), function process %.0f µs (%.2f cores), load generator process %.0f µs (%.2f cores)",
			perMsg(r.cpuSelf), r.cpuSelf.Seconds()/wall, perMsg(r.cpuFn), r.cpuFn.Seconds()/wall, perMsg(r.cpuLoad), r.cpuLoad.Seconds()/wall)
		if r.rtPID != 0 {
			b.Logf("cpu per message: runtime process %.0f µs (%.2f cores)", perMsg(r.cpuRuntime), r.cpuRuntime.Seconds()/wall)
		}
	}
	// The Go runtime of this process is the runtime's only when it runs
	// here.
	if g0, g1 := r.goBefore, r.goAfter; r.rtPID == 0 {
		b.Logf("go runtime of this process: %d GC cycles (%.0f/s), GC %.2f cores (%.0f%% of GC+user CPU), live heap %.1f MiB, heap goal %.1f MiB, %d goroutines at the end",
			g1.gcCycles-g0.gcCycles, float64(g1.gcCycles-g0.gcCycles)/wall, (g1.gcCPU-g0.gcCPU)/wall,
			100*(g1.gcCPU-g0.gcCPU)/(g1.gcCPU-g0.gcCPU+g1.userCPU-g0.userCPU), float64(g1.liveHeap)/(1<<20), float64(g1.heapGoal)/(1<<20), g1.goroutines)
	}
	if m := r.machine; m.ok {
		b.Logf("machine: %.2f cores busy (of which irq+softirq %.2f), %.2f idle, %.2f iowait, %.2f steal; cpu probe %.0f MB/s sha256",
			m.busy/wall, m.irq/wall, m.idle/wall, m.iowait/wall, m.steal/wall, r.probe)
		ours := []time.Duration{r.cpuSelf, r.cpuFn, r.cpuLoad}
		if r.rtPID != 0 {
			ours = append(ours, r.cpuRuntime)
		}
		if other := m.others(wall, ours...); r.cpuOK && other > 0.1 {
			b.Logf("WARNING: other processes took %.2f cores during the run; these figures are not clean", other)
		}
	}
	if r.profile != "" {
		b.Logf("cpu profile: go tool pprof -top %s", r.profile)
	}
}

func mustRequest(ctx context.Context, u string) *http.Request {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader([]byte("1")))
	if err != nil {
		panic(err)
	}
	return req
}

func freePort(b testing.TB) int {
	b.Helper()
	p, err := testport.Free()
	if err != nil {
		b.Fatal(err)
	}
	return p
}
