//go:build unix

// Command compare measures two builds of the runtime against each other on
// this machine: it builds cmd/statefun at BASE and at HEAD (the working tree
// unless given), runs the same benchmarks of bench/ against each build in
// turn, interleaved in rounds (BASE then HEAD, then HEAD then BASE, ...), and
// prints a Markdown table of the medians and of the ratio HEAD/BASE, the
// median of the per-round ratios with their min–max. Only the runtime binary
// differs between the two: the load generator, the function and kfake are
// those of the working tree, built once into bench.test.
//
// A virtual machine's speed can move by a factor of two from one hour to the
// next, so a figure measured on another day says nothing about a change;
// two builds measured back to back, alternately, on the same machine do.
//
//	make bench-compare BASE=<rev> [HEAD=<rev>] [ROUNDS=3] [WORKLOADS=a,b] [SCALE=1]
//
// or, from the repository's root,
//
//	go run ./bench/compare -base <rev> [-head <rev>] [-rounds 3] [-workloads a,b] [-scale 1]
//
// -base-env and -head-env put settings in the environment of each build's
// runs, which the runtime inherits: one build can be compared with itself
// under two settings of a flag that has an environment variable.
//
// The workloads are listed by -list; docs/benchmarks.md explains the table.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := mainErr(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// config is one comparison, as the command line describes it.
type config struct {
	base, head string   // revisions; head "" is the working tree
	baseFlags  []string // extra go build flags of each build
	headFlags  []string
	baseEnv    []string // extra environment of each build's runs (KEY=VALUE)
	headEnv    []string
	rounds     int
	workloads  []string // names or name prefixes; empty: all
	scale      float64  // multiplies the length of every run
	benchArgs  []string // more flags for bench.test, after the workloads' own
	command    string   // the command line to print in the header
}

func mainErr(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	var baseFlags, headFlags, baseEnv, headEnv, workloads, benchArgs string
	fs.StringVar(&cfg.base, "base", "", "the revision to compare against (required), e.g. HEAD~1 or a commit")
	fs.StringVar(&cfg.head, "head", "", "the revision to measure; empty: the working tree, uncommitted changes included")
	fs.StringVar(&baseFlags, "base-buildflags", "", "more go build flags for BASE, separated by spaces (e.g. -race)")
	fs.StringVar(&headFlags, "head-buildflags", "", "more go build flags for HEAD, separated by spaces")
	fs.StringVar(&baseEnv, "base-env", "", "KEY=VALUE settings, separated by spaces, in the environment of BASE's runs (the runtime inherits them: e.g. STATEFUN_ADMIN_LANE=false)")
	fs.StringVar(&headEnv, "head-env", "", "KEY=VALUE settings, separated by spaces, in the environment of HEAD's runs")
	fs.IntVar(&cfg.rounds, "rounds", 3, "rounds; each runs every workload once against each build")
	fs.StringVar(&workloads, "workloads", "", "the workloads to run, comma-separated names or prefixes of names (see -list); empty: all")
	fs.Float64Var(&cfg.scale, "scale", 1, "multiplies the messages, requests or records of every run (1: a few seconds each)")
	fs.StringVar(&benchArgs, "bench-args", "", "more flags for bench.test, separated by spaces (e.g. -load.clients=64)")
	fs.StringVar(&cfg.command, "command", "", "the command line to name in the report's header (make passes its own)")
	list := fs.Bool("list", false, "list the workloads and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *list {
		for _, w := range allWorkloads() {
			fmt.Fprintf(stdout, "%-22s %s\n", w.name, w.title)
		}
		return 0
	}
	cfg.baseFlags, cfg.headFlags, cfg.benchArgs = strings.Fields(baseFlags), strings.Fields(headFlags), strings.Fields(benchArgs)
	cfg.baseEnv, cfg.headEnv = strings.Fields(baseEnv), strings.Fields(headEnv)
	for _, kv := range append(slices.Clone(cfg.baseEnv), cfg.headEnv...) {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			fmt.Fprintf(stderr, "compare: environment setting %q: want KEY=VALUE\n", kv)
			return 2
		}
	}
	for _, w := range strings.Split(workloads, ",") {
		if w = strings.TrimSpace(w); w != "" {
			cfg.workloads = append(cfg.workloads, w)
		}
	}
	if cfg.command == "" {
		cfg.command = "go run ./bench/compare " + strings.Join(args, " ")
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "compare: unexpected argument %q; flags only (see -h)\n", fs.Arg(0))
		return 2
	case cfg.base == "":
		fmt.Fprintln(stderr, "compare: -base is required: the revision to compare against, e.g. -base HEAD~1")
		return 2
	case cfg.rounds < 1:
		fmt.Fprintf(stderr, "compare: -rounds %d: want 1 or more (3 or more to read a spread)\n", cfg.rounds)
		return 2
	case !(cfg.scale > 0):
		fmt.Fprintf(stderr, "compare: -scale %v: want a positive number\n", cfg.scale)
		return 2
	}
	if _, err := selectWorkloads(cfg.workloads, cfg.scale); err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	rep, err := compare(ctx, cfg, stderr)
	if rep != nil {
		rep.writeMarkdown(stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

// compare builds the two revisions and bench.test, runs the rounds and
// returns the report. Progress goes to log. When ctx ends during the
// rounds, the report covers the runs made until then.
func compare(ctx context.Context, cfg config, log io.Writer) (*report, error) {
	start := time.Now()
	tree, err := openTree(ctx, "")
	if err != nil {
		return nil, err
	}
	jobs, err := selectWorkloads(cfg.workloads, cfg.scale)
	if err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "statefun-compare-")
	if err != nil {
		return nil, fmt.Errorf("compare: a temporary directory for the builds: %w", err)
	}
	defer os.RemoveAll(work)
	// -trimpath: the packages BASE and HEAD share come from the build
	// cache whatever directory they were checked out in.
	builds := []*build{
		{label: "BASE", rev: cfg.base, flags: append([]string{"-trimpath"}, cfg.baseFlags...), env: cfg.baseEnv},
		{label: "HEAD", rev: cfg.head, flags: append([]string{"-trimpath"}, cfg.headFlags...), env: cfg.headEnv},
	}
	testBin, err := tree.prepare(ctx, builds, work, log)
	if err != nil {
		return nil, err
	}
	runs, err := runRounds(ctx, tree.benchDir(), testBin, builds, jobs, cfg.rounds, cfg.benchArgs, log)
	if len(runs) == 0 {
		return nil, err
	}
	rep := newReport(cfg, builds, jobs, runs, start, readMachine())
	if err != nil {
		rep.interrupted = len(runs)
	}
	return rep, err
}
