package bench

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The settings of a run; see the package comment. Each flag's default comes
// from its environment variable, so make bench can be given them.
var (
	flagMessages   = flag.Int("load.messages", envInt("STATEFUN_BENCH_MESSAGES", 30_000), "messages per end-to-end run")
	flagClients    = flag.Int("load.clients", envInt("STATEFUN_BENCH_CLIENTS", 128), "concurrent HTTP clients (connections)")
	flagAddresses  = flag.String("load.addresses", envStr("STATEFUN_BENCH_ADDRESSES", "1,100,10000"), "distinct ids per run, comma-separated")
	flagMaxTime    = flag.Duration("load.maxtime", envDur("STATEFUN_BENCH_MAXTIME", 60*time.Second), "bound on the sending phase of one run")
	flagPartitions = flag.Int("load.partitions", envInt("STATEFUN_BENCH_PARTITIONS", 0), "partitions of the store (0: the runtime's default)")
	flagFn         = flag.String("load.fn", envStr("STATEFUN_BENCH_FN", "process"), "where sdktest/counter runs: process (a child process) or inprocess")
	flagGen        = flag.String("load.gen", envStr("STATEFUN_BENCH_GEN", "process"), "where the load generator runs: process (a child process) or inprocess")
	flagGOGC       = flag.Int("load.gogc", envInt("STATEFUN_BENCH_GOGC", 0), "GOGC of the runtime's process during end-to-end runs (0: leave it)")
	flagNice       = flag.Int("load.nice", envInt("STATEFUN_BENCH_NICE", 0), "niceness of the function and load generator processes: they stand in for machines of their own, so with a positive value they take only the CPU the runtime leaves")
	flagPin        = flag.String("load.pin", envStr("STATEFUN_BENCH_PIN", ""), "RT:OTHERS pins the runtime child to the CPUs RT and every other child to OTHERS (taskset lists, e.g. 0:1): the runtime then has processors of its own, as on a machine of its own")
	flagProcs      = flag.Int("load.procs", envInt("STATEFUN_BENCH_PROCS", 0), "GOMAXPROCS of the runtime's child process (-load.runtime process; 0: leave it)")
	flagPool       = flag.Int("load.pool", envInt("STATEFUN_BENCH_POOL", 0), "the function endpoint's transport pool_size in the runtime child's module (calls in flight at most; 0: the default)")
	flagTrace      = flag.String("load.trace", envStr("STATEFUN_BENCH_TRACE", ""), "a file: the runtime child's execution trace of its last seconds, written when it exits (-load.runtime process)")
	flagProfile    = flag.String("load.profile", envStr("STATEFUN_BENCH_PROFILE", ""), "directory for a CPU profile of each end-to-end run")
)

func envStr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}

func envInt(name string, def int) int {
	v := envStr(name, "")
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(strings.ReplaceAll(v, "_", ""))
	if err != nil {
		panic(fmt.Sprintf("bench: %s=%q is not an integer", name, v))
	}
	return n
}

func envDur(name string, def time.Duration) time.Duration {
	v := envStr(name, "")
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		panic(fmt.Sprintf("bench: %s=%q is not a duration: %v", name, v, err))
	}
	return d
}

// addressCounts returns the -load.addresses list.
func addressCounts(b *testing.B) []int {
	var out []int
	for _, s := range strings.Split(*flagAddresses, ",") {
		n, err := strconv.Atoi(strings.ReplaceAll(strings.TrimSpace(s), "_", ""))
		if err != nil || n <= 0 {
			b.Fatalf("bench: -load.addresses %q: want positive integers separated by commas", *flagAddresses)
		}
		out = append(out, n)
	}
	return out
}

func envFloat(name string, def float64) float64 {
	v := envStr(name, "")
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(strings.ReplaceAll(v, "_", ""), 64)
	if err != nil {
		panic(fmt.Sprintf("bench: %s=%q is not a number", name, v))
	}
	return f
}
