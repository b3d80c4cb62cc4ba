package bench

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/statefun-go/statefun/internal/sdktest"
)

var (
	flagAPIOps    = flag.Int("load.apiops", envInt("STATEFUN_BENCH_API_OPS", 3000), "state API requests per measured operation and client count")
	flagAPIRate   = flag.Float64("load.apirate", envFloat("STATEFUN_BENCH_API_RATE", 8000), "messages/s of the function load beside the state API measurements (0: as fast as -load.clients allow)")
	flagRuntime   = flag.String("load.runtime", envStr("STATEFUN_BENCH_RUNTIME_IN", "process"), "where the runtime of the state API benchmark runs: process (a child, as an operator's client meets it) or inprocess")
	flagAPIBg     = flag.Duration("load.apibg", envDur("STATEFUN_BENCH_API_BG", 45*time.Second), "how long the function load runs beside the state API measurements")
	flagAPIPhases = flag.String("load.apiphases", envStr("STATEFUN_BENCH_API_PHASES", "idle,load"), "the phases of the state API benchmark to run: idle, load or both (idle,load)")
	flagAPILog    = flag.String("load.apilog", envStr("STATEFUN_BENCH_API_LOG", ""), "a file: each measured state API request's start and end, in CLOCK_MONOTONIC nanoseconds (the clock of -load.trace), one request per line")
)

// BenchmarkStateAPI measures the state access API on the idle runtime, then
// while the function load of BenchmarkEndToEnd (10,000 addresses) runs
// beside it: GET, PUT with ack=applied and PUT with ack=committed of one key
// of sdktest/counter, at 1 and 16 concurrent clients; throughput, p50/p99
// latency, and where the time went (see measure below).
//
// Two floors are measured the same way, at one client, so that a state GET's
// figure can be read against them: GET-healthz is the runtime's /healthz (a
// handler that does nothing, in the runtime's process: what the process adds
// to any request), GET-empty-process a handler that does nothing in a
// process of its own at the runtime's priority (what the machine, its
// kernel and this client add).
func BenchmarkStateAPI(b *testing.B) {
	phases := map[string]bool{}
	for _, p := range strings.Split(*flagAPIPhases, ",") {
		if p = strings.TrimSpace(p); p != "idle" && p != "load" {
			b.Fatalf("bench: -load.apiphases %q: want idle, load or idle,load", *flagAPIPhases)
		}
		phases[strings.TrimSpace(p)] = true
	}
	fn := startCounter(b)
	ctx := b.Context()
	rt := startRuntime(b, counterModule(b, fn))
	ingress := "http://" + rt.ingress + "/" + sdktest.CounterFn + "/"
	entry := "http://" + rt.admin + "/state/" + sdktest.CounterFn + "/api-key/" + sdktest.CounterState
	mc := &http.Client{Timeout: 10 * time.Second}
	if st, err := roundTrip(mc, mustRequest(ctx, ingress+"api-key")); err != nil || st != http.StatusOK {
		b.Fatalf("bench: warm-up message: status %d, %v", st, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, entry, nil)
		if st, _ := roundTrip(mc, req); st == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("bench: the counter's state never appeared")
		}
		time.Sleep(10 * time.Millisecond)
	}

	api := newLoadClient(16)
	put := func(ack string) func(ctx context.Context, i int) (bool, error) {
		u := entry + "?ack=" + ack
		return func(ctx context.Context, i int) (bool, error) {
			return putText(ctx, api, u, []byte(strconv.Itoa(i)))
		}
	}
	emptyAddr, emptyPid := startServer(b, "empty")
	gen := startLoad(b, loadSpec{IngressPrefix: ingress, Addrs: 10000, Messages: 1 << 30, Clients: *flagClients, MaxTime: *flagAPIBg, Rate: *flagAPIRate})
	sched := newSchedRecorder(b, map[string]int{"client": os.Getpid(), "runtime": rt.pid, "empty": emptyPid, "function": fn.pid, "load": gen.pid})
	apiLog := *flagAPILog
	if apiLog == "" && sched != nil {
		apiLog = sched.requests()
	}
	reqLog := newRequestLog(apiLog)
	get := func(u string) func(ctx context.Context, i int) (bool, error) {
		return func(ctx context.Context, i int) (bool, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
			if err != nil {
				return false, err
			}
			start := reqLog.now()
			st, err := roundTrip(api, req)
			reqLog.add(start)
			if err == nil && st != http.StatusOK {
				err = fmt.Errorf("bench: GET %s answered %d", u, st)
			}
			return false, err
		}
	}
	// A committed write waits for a synced group commit, which the function
	// load keeps busy: a tenth of the requests measure it as well. kind is
	// the label of statefun_state_request_seconds the operation counts in
	// (none for the two floors, which the engine does not see).
	ops := []struct {
		name, kind string
		op         func(context.Context, int) (bool, error)
		ops        int
		clients    []int
	}{
		{"GET-healthz", "", get("http://" + rt.admin + "/healthz"), *flagAPIOps, []int{1}},
		{"GET-empty-process", "", get("http://" + emptyAddr + "/"), *flagAPIOps, []int{1}},
		{"GET", "read", get(entry), *flagAPIOps, []int{1, 16}},
		{"PUT-applied", "applied", put("applied"), *flagAPIOps, []int{1, 16}},
		{"PUT-committed", "committed", put("committed"), max(*flagAPIOps/10, 1), []int{1, 16}},
	}
	metricsURL := "http://" + rt.admin + "/metrics"

	// Every operation is measured twice in one run: on the idle runtime
	// (phase idle), then beside the function load (phase load). Besides the
	// client's latency each reports where the time went: the engine's share
	// (statefun_state_request_seconds: from handing the request to its
	// partition until the answer), the synced group commits, the Go
	// scheduler's latency in the runtime (sched: how long its goroutines
	// waited for a CPU) and in the API client's process (client-sched: the
	// same process as the runtime with -load.runtime=inprocess), and the
	// cores other processes of the machine used.
	var bgEnd time.Time
	measure := func(phase string) {
		for _, op := range ops {
			for _, clients := range op.clients {
				b.Run(fmt.Sprintf("%s/%s/clients=%d", phase, op.name, clients), func(b *testing.B) {
					var s loadSummary
					m0, err := scrape(ctx, mc, metricsURL)
					if err != nil {
						b.Fatal(err)
					}
					sched0, mach0, start := schedLatencies(), readMachineCPU(), time.Now()
					cpu0, cpuOK0 := cpuOf(os.Getpid(), rt.pid, fn.pid, gen.pid)
					stopSched := func() {}
					if sched != nil && phase == "load" && clients == 1 && strings.HasPrefix(op.name, "GET") {
						stopSched = sched.record(b, op.name)
					}
					for range b.N {
						r, err := drive(ctx, op.ops, clients, *flagMaxTime, op.op)
						if err != nil {
							b.Fatal(err)
						}
						s = r.summary()
					}
					stopSched()
					wall := time.Since(start).Seconds()
					cpu1, cpuOK1 := cpuOf(os.Getpid(), rt.pid, fn.pid, gen.pid)
					mach, sched1 := readMachineCPU().minus(mach0), schedLatencies()
					m1, err := scrape(ctx, mc, metricsURL)
					if err != nil {
						b.Fatal(err)
					}
					eng := m1.histogramWith("statefun_state_request_seconds", `kind="`+op.kind+`"`).
						minus(m0.histogramWith("statefun_state_request_seconds", `kind="`+op.kind+`"`))
					commits := m1.histogram("statefun_commit_seconds").minus(m0.histogram("statefun_commit_seconds"))
					b.ReportMetric(s.rate(), "req/s")
					b.ReportMetric(ms(s.P50), "p50-ms")
					b.ReportMetric(ms(s.P99), "p99-ms")
					if op.kind != "" {
						b.ReportMetric(eng.quantile(0.5)*1000, "engine-p50-ms")
						b.ReportMetric(eng.quantile(0.99)*1000, "engine-p99-ms")
					}
					// The runtime's own cost of a request: its CPU time and
					// heap allocations, steadier than the latency on a shared
					// machine (the idle phase: the request's alone).
					if n := float64(s.OK); n > 0 {
						if cpuOK0 && cpuOK1 && rt.pid != 0 {
							b.ReportMetric(1e6*(cpu1[1]-cpu0[1]).Seconds()/n, "runtime-cpu-us/req")
						}
						b.ReportMetric((m1.sum("go_memstats_mallocs_total")-m0.sum("go_memstats_mallocs_total"))/n, "runtime-allocs/req")
					}
					if commits.count > 0 {
						// How many requests shared a synced group commit.
						b.ReportMetric(float64(s.OK)/commits.count, "req/commit")
					}
					b.ReportMetric(commits.quantile(0.5)*1000, "commit-p50-ms")
					b.ReportMetric(commits.quantile(0.99)*1000, "commit-p99-ms")
					rsched := m1.histogram("go_sched_latencies_seconds").minus(m0.histogram("go_sched_latencies_seconds"))
					b.ReportMetric(rsched.quantile(0.99)*1000, "sched-p99-ms")
					b.ReportMetric(schedQuantile(sched0, sched1, 0.99)*1000, "client-sched-p99-ms")
					if mach.ok && cpuOK0 && cpuOK1 {
						ours := make([]time.Duration, len(cpu1))
						for i := range cpu1 {
							ours[i] = cpu1[i] - cpu0[i]
						}
						b.ReportMetric(max(mach.others(wall, ours...), 0), "other-cores")
						b.ReportMetric(100*mach.steal/(wall*float64(runtime.NumCPU())), "steal-%")
					}
					if !bgEnd.IsZero() && time.Now().After(bgEnd) {
						b.Log("bench: WARNING: the function load had ended before this measurement did; raise -load.apibg")
					}
				})
			}
		}
	}
	if phases["idle"] {
		measure("idle")
	}
	if !phases["load"] {
		return
	}

	// The function load beside: as BenchmarkEndToEnd at 10,000 ids, for
	// at most -load.apibg (it stops when the measurements are done); each
	// measurement says whether it ran inside that window.
	bgEnd = time.Now().Add(*flagAPIBg)
	loadDone := make(chan loadSummary, 1)
	go func() {
		s, err := gen.run()
		if err != nil {
			b.Log("bench: background load:", err)
		}
		loadDone <- s
	}()
	time.Sleep(time.Second) // let the load reach its pace
	measure("load")
	gen.stop()
	bg := <-loadDone
	if err := reqLog.write(); err != nil {
		b.Error(err)
	}
	b.Logf("bench: function load beside: %d messages in %s (%.0f/s)", bg.OK, bg.Elapsed.Round(time.Millisecond), bg.rate())
}

// requestLog keeps each measured request's start and end on CLOCK_MONOTONIC,
// the clock of the runtime's execution trace (-load.trace), so that a slow
// request can be found in that trace and its time split between the
// client's side and the runtime's. A requestLog without a file keeps
// nothing.
type requestLog struct {
	path  string
	mu    sync.Mutex
	spans [][2]int64
}

func newRequestLog(path string) *requestLog { return &requestLog{path: path} }

// now is CLOCK_MONOTONIC in nanoseconds (Go's time.Now hides it: its
// monotonic reading counts from the process's start).
func (l *requestLog) now() int64 {
	if l.path == "" {
		return 0
	}
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// add records a request that started at start and ends now.
func (l *requestLog) add(start int64) {
	if l.path == "" {
		return
	}
	end := l.now()
	l.mu.Lock()
	l.spans = append(l.spans, [2]int64{start, end})
	l.mu.Unlock()
}

// write writes the requests, "start end" a line, to the file.
func (l *requestLog) write() error {
	if l.path == "" {
		return nil
	}
	var buf bytes.Buffer
	l.mu.Lock()
	for _, s := range l.spans {
		fmt.Fprintf(&buf, "%d %d\n", s[0], s[1])
	}
	l.mu.Unlock()
	return os.WriteFile(l.path, buf.Bytes(), 0o644)
}
