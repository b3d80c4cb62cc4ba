package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	runRole()
	isolate()
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// options are the flags of a run.
type options struct {
	cfg         config
	out         string // markdown file with the markers
	chart       string // PNG
	nodeModules string
	workDir     string
	keep        bool
	systems     string
	command     string
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("bench-restate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	keys := fs.String("keys", "1,100,10000", "key counts of workloads 1-3, comma-separated")
	fs.IntVar(&o.cfg.Messages, "messages", 10_000, "increments per workload-1 run (at least the largest key count, so that every key has a counter)")
	fs.IntVar(&o.cfg.Reads, "reads", 3_000, "state reads per workload-2 run")
	fs.IntVar(&o.cfg.Writes, "writes", 1_000, "state writes per workload-3 run")
	fs.IntVar(&o.cfg.Clients, "clients", 32, "concurrent clients (connections) of the load generator")
	fs.DurationVar(&o.cfg.MaxTime, "maxtime", 30*time.Second, "bound on the sending phase of each load run")
	fs.IntVar(&o.cfg.RestartKeys, "restart-keys", 100_000, "keys of state before the restarts of workload 4 (the issue's figure is 1000000; 0 skips workload 4)")
	fs.DurationVar(&o.cfg.FillTime, "fill-time", 30*time.Minute, "bound on filling workload 4's keys")
	fs.StringVar(&o.cfg.ProfileDir, "profile", "profiles", "directory for the CPU profile of our runtime, taken in an extra increment run after workloads 1-3 (\"\" for none)")
	fs.IntVar(&o.cfg.ProfileMsgs, "profile-messages", 40_000, "increments of the profiled run (over the largest key count)")
	fs.StringVar(&o.out, "out", "../../docs/benchmarks.md", "markdown file whose restate markers section gets the results")
	fs.StringVar(&o.chart, "chart", "", "PNG chart of the ratios (default: benchmarks-restate.png beside -out)")
	fs.StringVar(&o.nodeModules, "node-modules", "node_modules", "where npm installed @restatedev/restate-server")
	fs.StringVar(&o.workDir, "workdir", "", "directory for data, logs and profiles (default: a new temporary directory)")
	fs.BoolVar(&o.keep, "keep", false, "keep the work directory (always kept when the run fails)")
	fs.StringVar(&o.systems, "systems", "statefun,restate", "systems to run (both are needed for the report)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("bench: unexpected argument %q", fs.Arg(0))
	}
	for _, s := range strings.Split(*keys, ",") {
		n, err := strconv.Atoi(strings.ReplaceAll(strings.TrimSpace(s), "_", ""))
		if err != nil || n <= 0 {
			return o, fmt.Errorf("bench: -keys %q: want positive integers separated by commas", *keys)
		}
		o.cfg.Keys = append(o.cfg.Keys, n)
	}
	if o.cfg.Messages <= 0 || o.cfg.Reads <= 0 || o.cfg.Writes <= 0 || o.cfg.Clients <= 0 || o.cfg.RestartKeys < 0 {
		return o, fmt.Errorf("bench: -messages, -reads, -writes and -clients must be positive, -restart-keys at least 0")
	}
	if o.chart == "" {
		o.chart = filepath.Join(filepath.Dir(o.out), "benchmarks-restate.png")
	}
	o.command = commandLine(args)
	return o, nil
}

// commandLine is how the report says the run was made.
func commandLine(args []string) string {
	if cmd := os.Getenv("BENCH_RESTATE_COMMAND"); cmd != "" {
		return cmd
	}
	return strings.TrimSpace("cd bench/restate && npm ci && go run . " + strings.Join(args, " "))
}

func run(args []string, stdout io.Writer) error {
	o, err := parseFlags(args, os.Stderr)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	o.cfg.Log = stdout
	res, err := measure(ctx, o)
	if err != nil {
		return err
	}
	if err := writeReport(o, res); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s and %s\n", o.out, o.chart)
	return nil
}

// results is a whole run.
type results struct {
	Started  time.Time
	Duration time.Duration
	CPU      cpuTimes // the machine's CPU time over the run
	Ours     *systemResults
	Theirs   *systemResults
	WorkDir  string
}

// measure runs every workload on both systems, ours first.
func measure(ctx context.Context, o options) (*results, error) {
	serverBin, cliBin, err := restateBinaries(o.nodeModules)
	if err != nil {
		return nil, err
	}
	dir := o.workDir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "bench-restate-"); err != nil {
			return nil, err
		}
	}
	if o.cfg.ProfileDir != "" {
		if o.cfg.ProfileDir, err = filepath.Abs(o.cfg.ProfileDir); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(o.cfg.ProfileDir, 0o755); err != nil {
			return nil, err
		}
	}
	res := &results{Started: time.Now(), WorkDir: dir}
	cpu0 := readCPUTimes()
	ok := false
	defer func() {
		if ok && !o.keep && o.workDir == "" {
			os.RemoveAll(dir)
		} else {
			fmt.Fprintf(o.cfg.Log, "work directory (data, logs, profiles) kept: %s\n", dir)
		}
	}()
	cfg := o.cfg
	clients := cfg.Clients + 4
	if strings.Contains(o.systems, "statefun") {
		fmt.Fprintln(cfg.Log, "statefun:")
		res.Ours, err = runSystem(ctx, func(d string) system { return newStatefunSystem(d, clients, true) }, filepath.Join(dir, "statefun"), cfg)
		if err != nil {
			return nil, fmt.Errorf("statefun: %w (logs under %s)", err, filepath.Join(dir, "statefun"))
		}
	}
	if strings.Contains(o.systems, "restate") {
		fmt.Fprintln(cfg.Log, "Restate:")
		res.Theirs, err = runSystem(ctx, func(d string) system { return newRestateSystem(d, serverBin, cliBin, clients) }, filepath.Join(dir, "restate"), cfg)
		if err != nil {
			return nil, fmt.Errorf("restate: %w (logs under %s)", err, filepath.Join(dir, "restate"))
		}
	}
	res.Duration = time.Since(res.Started)
	cpu1 := readCPUTimes()
	res.CPU = cpuTimes{busy: cpu1.busy - cpu0.busy, steal: cpu1.steal - cpu0.steal, total: cpu1.total - cpu0.total}
	ok = true
	return res, nil
}
