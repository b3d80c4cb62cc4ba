package bench

import (
	"bufio"
	"cmp"
	"log/slog"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"

	"context"
	"encoding/json"
	"fmt"
	"github.com/statefun-go/statefun/internal/app"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/statefun-go/statefun/internal/sdktest"
)

// roleEnv makes the test binary do one job in a child process instead of
// running benchmarks: that is how the function and the load generator get
// processes of their own without a build step. Its values:
//
//	counter  serve sdktest/counter (official Go SDK)
//	empty    serve emptyHandler
//	load     run the load generator described by loadEnv (see runLoadChild)
//	kafka    serve a kfake cluster (see serveKafka)
//	kcounter serve bench/counter, the Kafka benchmark's counter
//	kload    run the Kafka load generator (see runKafkaLoadChild)
//	runtime  run the runtime described by runtimeEnv (see runRuntimeChild)
//	cnode    run a cluster node described by clusterNodeEnv (see runClusterNodeChild)
const roleEnv = "STATEFUN_BENCH_ROLE"

// loadEnv carries a loadSpec, as JSON, to a load generator child.
const loadEnv = "STATEFUN_BENCH_LOAD"

func TestMain(m *testing.M) {
	// The official Go SDK logs every registration through the log package.
	log.SetOutput(io.Discard)
	switch os.Getenv(roleEnv) {
	case "counter":
		serve(sdktest.CounterHandler())
	case "empty":
		serve(emptyHandler{})
	case "load":
		if err := runLoadChild(); err != nil {
			fmt.Fprintln(os.Stderr, "bench: load generator:", err)
			os.Exit(1)
		}
	case "kafka":
		if err := serveKafka(); err != nil {
			fmt.Fprintln(os.Stderr, "bench: kfake:", err)
			os.Exit(1)
		}
	case "runtime":
		if err := runRuntimeChild(); err != nil {
			fmt.Fprintln(os.Stderr, "bench: runtime:", err)
			os.Exit(1)
		}
	case "cnode":
		if err := runClusterNodeChild(); err != nil {
			fmt.Fprintln(os.Stderr, "bench: cluster node:", err)
			os.Exit(1)
		}
	case "kcounter":
		serve(kafkaCounterHandler())
	case "kload":
		if err := runKafkaLoadChild(); err != nil {
			fmt.Fprintln(os.Stderr, "bench: kafka load generator:", err)
			os.Exit(1)
		}
	default:
		os.Exit(m.Run())
	}
}

// emptyHandler reads the request body and answers 200 with no body, as
// the playground ingress does: an HTTP round trip with nothing behind it.
type emptyHandler struct{}

func (emptyHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.WriteHeader(http.StatusOK)
}

// serve serves h on a loopback port, prints "listening on host:port" and
// exits when stdin is closed.
func serve(h http.Handler) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()
	fmt.Printf("listening on %s\n", ln.Addr())
	_ = srv.Serve(ln)
}

// loadSpec is the work of a load generator: post Messages messages to
// IngressPrefix + "id-<i mod Addrs>" from Clients clients.
type loadSpec struct {
	IngressPrefix string
	Addrs         int
	Messages      int
	Clients       int
	MaxTime       time.Duration
	// Rate paces the load at this many messages per second (open loop:
	// message i is not sent before start + i/Rate); 0 sends as fast as
	// Clients allow (closed loop).
	Rate float64
}

func (s loadSpec) urls() []string {
	urls := make([]string, s.Addrs)
	for i := range urls {
		urls[i] = s.IngressPrefix + idName(i)
	}
	return urls
}

func idName(i int) string { return fmt.Sprintf("id-%d", i) }

// run drives the load from this process.
func (s loadSpec) run(ctx context.Context) (loadSummary, error) {
	client := newLoadClient(s.Clients)
	defer client.CloseIdleConnections()
	urls := s.urls()
	op := postOp(client, func(i int) string { return urls[i%len(urls)] }, []byte("1"))
	if s.Rate > 0 {
		op = paced(s.Rate, op)
	}
	res, err := drive(ctx, s.Messages, s.Clients, s.MaxTime, op)
	return res.summary(), err
}

// paced delays op(i) until start + i/rate, start being the first call: a
// load that keeps its pace whatever the latency, as long as the clients
// suffice, and never catches up in a burst after a stall longer than one
// second (the schedule then restarts from now).
func paced(rate float64, op func(context.Context, int) (bool, error)) func(context.Context, int) (bool, error) {
	var (
		mu    sync.Mutex
		start time.Time
		base  int
	)
	return func(ctx context.Context, i int) (bool, error) {
		mu.Lock()
		now := time.Now()
		if start.IsZero() {
			start, base = now, i
		}
		at := start.Add(time.Duration(float64(i-base) / rate * float64(time.Second)))
		if now.Sub(at) > time.Second {
			start, base, at = now, i, now
		}
		mu.Unlock()
		if d := time.Until(at); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return false, ctx.Err()
			case <-t.C:
			}
		}
		return op(ctx, i)
	}
}

// runLoadChild is the load generator process: it reads its loadSpec from
// loadEnv, prints "ready", starts when a line arrives on stdin, prints
// "result <loadSummary as JSON>" when done and exits when stdin closes.
func runLoadChild() error {
	var spec loadSpec
	if err := json.Unmarshal([]byte(os.Getenv(loadEnv)), &spec); err != nil {
		return err
	}
	fmt.Println("ready")
	stdin := bufio.NewReader(os.Stdin)
	if _, err := stdin.ReadString('\n'); err == io.EOF {
		return nil // stdin closed before the start: no load was asked for
	} else if err != nil {
		return err
	}
	// A second line (or the end of stdin) ends the load early: a load
	// beside other measurements lasts as long as they do, not MaxTime.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	closed := make(chan struct{})
	go func() {
		_, _ = stdin.ReadString('\n')
		cancel()
		// Stay until stdin closes, so the parent can still read this
		// process's CPU time.
		_, _ = io.Copy(io.Discard, stdin)
		close(closed)
	}()
	sum, err := spec.run(ctx)
	if err != nil {
		return err
	}
	out, err := json.Marshal(sum)
	if err != nil {
		return err
	}
	fmt.Printf("result %s\n", out)
	<-closed
	return nil
}

// child is this test binary running in another role (see roleEnv).
type child struct {
	pid    int
	stdin  io.WriteCloser
	lines  chan string // stdout, line by line; closed when the process ends
	exited chan struct{}
}

// startChild starts a child in role with extra environment variables. It
// stops when b ends: stdin is closed, and the process is killed if it has
// not exited 5 seconds later.
func startChild(b *testing.B, role string, env ...string) *child {
	b.Helper()
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	argv := childArgv(role, exe)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(append(os.Environ(), roleEnv+"="+role), env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	c := &child{pid: cmd.Process.Pid, stdin: stdin, lines: make(chan string, 16), exited: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 64<<20)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
		_ = cmd.Wait()
		close(c.exited)
	}()
	b.Cleanup(func() {
		stdin.Close()
		select {
		case <-c.exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-c.exited
		}
	})
	return c
}

// childArgv is the command line of a child in role running argv: niced
// (-load.nice) and pinned (-load.pin) as its role says.
func childArgv(role string, argv ...string) []string {
	// The empty server is niced no more than the runtime: it stands for a
	// process beside the runtime (the floor BenchmarkStateAPI reads its
	// figures against), not for another machine.
	if n := *flagNice; n != 0 && role != "runtime" && role != "empty" {
		// nice execs the test binary: the pid stays the child's.
		argv = append([]string{"nice", "-n", strconv.Itoa(n)}, argv...)
	}
	if rt, others, ok := strings.Cut(*flagPin, ":"); ok {
		cpus := others
		if role == "runtime" {
			cpus = rt
		}
		// taskset execs too: the pid stays the child's.
		argv = append([]string{"taskset", "-c", cpus}, argv...)
	}
	return argv
}

// expect waits for the child's next line that starts with prefix and
// returns the rest of it.
func (c *child) expect(b *testing.B, prefix string, timeout time.Duration) string {
	b.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case line, ok := <-c.lines:
			if !ok {
				b.Fatalf("bench: child %d ended before printing %q", c.pid, prefix)
			}
			if rest, ok := strings.CutPrefix(line, prefix); ok {
				return strings.TrimSpace(rest)
			}
		case <-deadline:
			b.Fatalf("bench: child %d did not print %q within %v", c.pid, prefix, timeout)
		}
	}
}

// startServer runs a server role in a child and returns its address.
func startServer(b *testing.B, role string) (addr string, pid int) {
	c := startChild(b, role)
	return c.expect(b, "listening on ", time.Minute), c.pid
}

// counterFn is sdktest/counter, served either by a child process or by an
// httptest server in this process.
type counterFn struct {
	url string
	pid int // the child's, or 0 when in process
}

// startCounter starts the function as -load.fn says.
func startCounter(b *testing.B) *counterFn {
	b.Helper()
	switch *flagFn {
	case "process":
		addr, pid := startServer(b, "counter")
		return &counterFn{url: "http://" + addr + "/statefun", pid: pid}
	case "inprocess":
		// The server's goroutines inherit the label of the goroutine that
		// starts it, so a profile can tell the function apart.
		var s *sdktest.CounterServer
		pprof.Do(context.Background(), pprof.Labels("role", "function"), func(context.Context) {
			s = sdktest.StartCounterServer(b)
		})
		return &counterFn{url: s.URL}
	}
	b.Fatalf("bench: -load.fn %q: want process or inprocess", *flagFn)
	return nil
}

// loadGen is a load generator ready to start: run sends the load and
// returns what it measured; stop, called while run runs, ends the load
// early (run then returns what was sent until then); pid is its process,
// 0 for this one.
type loadGen struct {
	run  func() (loadSummary, error)
	stop func()
	pid  int
}

// startLoad prepares the load generator as -load.gen says.
func startLoad(b *testing.B, spec loadSpec) loadGen {
	b.Helper()
	switch *flagGen {
	case "inprocess":
		ctx, cancel := context.WithCancel(b.Context())
		b.Cleanup(cancel)
		return loadGen{run: func() (loadSummary, error) { return spec.run(ctx) }, stop: cancel}
	case "process":
		js, err := json.Marshal(spec)
		if err != nil {
			b.Fatal(err)
		}
		c := startChild(b, "load", loadEnv+"="+string(js))
		c.expect(b, "ready", time.Minute)
		return loadGen{pid: c.pid, run: func() (loadSummary, error) {
			if _, err := io.WriteString(c.stdin, "go\n"); err != nil {
				return loadSummary{}, err
			}
			var sum loadSummary
			err := json.Unmarshal([]byte(c.expect(b, "result ", spec.MaxTime+time.Minute)), &sum)
			return sum, err
		}, stop: func() { _, _ = io.WriteString(c.stdin, "stop\n") }}
	}
	b.Fatalf("bench: -load.gen %q: want process or inprocess", *flagGen)
	return loadGen{}
}

// runtimeEnv carries a runtimeSpec, as JSON, to a runtime child.
const runtimeEnv = "STATEFUN_BENCH_RUNTIME"

// runtimeSpec is what a runtime child runs: the module's text, the store's
// partitions (0: the default) and GOGC (0: 400, as statefun run sets it).
type runtimeSpec struct {
	Module     string
	Partitions int
	GOGC       int
	Procs      int    // GOMAXPROCS (0: leave it)
	Trace      string // a file for the execution trace of the child's last seconds ("": none)
}

// runRuntimeChild is the runtime in a process of its own, as an operator's
// client meets it: it prints "admin <addr>" and "ingress <addr>", then runs
// until stdin closes.
func runRuntimeChild() error {
	var spec runtimeSpec
	if err := json.Unmarshal([]byte(os.Getenv(runtimeEnv)), &spec); err != nil {
		return err
	}
	debug.SetGCPercent(cmp.Or(spec.GOGC, 400))
	if spec.Procs > 0 {
		runtime.GOMAXPROCS(spec.Procs)
	}
	if spec.Trace != "" {
		// A flight recorder keeps the last seconds: written at exit, they
		// cover the end of the measured operation, not the whole run.
		fr := trace.NewFlightRecorder(trace.FlightRecorderConfig{MinAge: 8 * time.Second, MaxBytes: 512 << 20})
		if err := fr.Start(); err != nil {
			return err
		}
		defer func() {
			if f, err := os.Create(spec.Trace); err == nil {
				fr.WriteTo(f)
				f.Close()
			}
			fr.Stop()
		}()
	}
	dir, err := os.MkdirTemp("", "statefun-bench-runtime-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	a, err := startApp(dir, spec.Module, spec.Partitions)
	if err != nil {
		return err
	}
	fmt.Printf("admin %s\n", a.Addr("admin"))
	fmt.Printf("ingress %s\n", a.Addr("ingress0"))
	_, _ = io.Copy(io.Discard, os.Stdin)
	return a.Close()
}

// benchRuntime is a runtime under measurement: in a child process (pid
// set) or in this one.
type benchRuntime struct {
	admin, ingress string // host:port
	pid            int    // 0 when in this process
}

// benchModule is a module's text and the port of its playground ingress.
type benchModule struct {
	text        string
	ingressPort int
}

// startRuntime runs the module as -load.runtime says, or with -load.bin
// that binary in a child process.
func startRuntime(b *testing.B, mod benchModule) benchRuntime {
	b.Helper()
	module := mod.text
	if *flagBin != "" {
		r, err := startBinRuntime(b, *flagBin, b.TempDir(), module)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			if err := r.stop(); err != nil {
				b.Error(err)
			}
		})
		return benchRuntime{admin: r.admin, ingress: fmt.Sprintf("127.0.0.1:%d", mod.ingressPort), pid: r.pid}
	}
	switch *flagRuntime {
	case "process":
		js, err := json.Marshal(runtimeSpec{Module: module, Partitions: *flagPartitions, GOGC: *flagGOGC, Procs: *flagProcs, Trace: *flagTrace})
		if err != nil {
			b.Fatal(err)
		}
		c := startChild(b, "runtime", runtimeEnv+"="+string(js))
		admin := c.expect(b, "admin ", time.Minute)
		return benchRuntime{admin: admin, ingress: c.expect(b, "ingress ", time.Minute), pid: c.pid}
	case "inprocess":
		a, err := startApp(b.TempDir(), module, *flagPartitions)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { a.Close() })
		return benchRuntime{admin: a.Addr("admin"), ingress: a.Addr("ingress0")}
	}
	b.Fatalf("bench: -load.runtime %q: want process or inprocess", *flagRuntime)
	return benchRuntime{}
}

// startApp runs module (its text) on a store in dir/data, listening on
// loopback, logging warnings and worse.
func startApp(dir, module string, partitions int) (*app.App, error) {
	modPath := filepath.Join(dir, "module.yaml")
	if err := os.WriteFile(modPath, []byte(module), 0o644); err != nil {
		return nil, err
	}
	return app.Start(app.Config{ModulePath: modPath, DataDir: filepath.Join(dir, "data"), AdminAddr: "127.0.0.1:0",
		Partitions: partitions, ListenHost: "127.0.0.1",
		// STATEFUN_BENCH_FIXED_CALLS=true (inherited by the children) runs
		// the runtime with --fixed-calls, to compare with the adaptive limit.
		FixedCalls: os.Getenv("STATEFUN_BENCH_FIXED_CALLS") == "true",
		// STATEFUN_BENCH_INGRESS_ANSWERS sets --ingress-answers.
		IngressAnswers: envInt("STATEFUN_BENCH_INGRESS_ANSWERS", 0),
		// STATEFUN_BENCH_ADMIN_LANE=false runs --admin-lane=false.
		NoAdminLane: os.Getenv("STATEFUN_BENCH_ADMIN_LANE") == "false",
		Logger:      slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
}

// counterModule is the module of the state API and console benchmarks:
// sdktest/* served by fn, a playground ingress and egress on free ports.
func counterModule(b *testing.B, fn *counterFn) benchModule {
	transport := ""
	if *flagPool > 0 {
		transport = fmt.Sprintf("  transport:\n    type: io.statefun.transports.v1/async\n    pool_size: %d\n", *flagPool)
	}
	ingress := freePort(b)
	return benchModule{ingressPort: ingress, text: fmt.Sprintf(`kind: io.statefun.endpoints.v2/http
spec:
  functions: sdktest/*
  urlPathTemplate: %s
%s---
kind: io.statefun.playground.v1/ingress
spec:
  port: %d
---
kind: io.statefun.playground.v1/egress
spec:
  port: %d
  topics: [%s]
`, fn.url, transport, ingress, freePort(b), sdktest.CounterTopic)}
}
