// Package bench holds the runtime's benchmarks: end-to-end throughput and
// latency through the playground ingress to an official-SDK function, and
// the limits it is measured against. The figures, the machine and the
// findings are in docs/benchmarks.md.
//
// Everything is in the test files; run it with
//
//	go test -run '^$' -bench . -benchtime 1x ./bench/...
//
// (make bench does exactly that). One benchmark iteration is one whole
// measured run, so ns/op is the length of a run and the figures are the
// custom metrics (msgs/s, p50-ms, p99-ms, ...); -benchtime 1x keeps it to
// one run each.
//
// # Benchmarks
//
//   - BenchmarkEndToEnd/addresses=A: the runtime, started in this process
//     through internal/app (so a CPU profile of this process is a profile
//     of the runtime alone) on a fresh Pebble store on disk (synced commits,
//     as shipped), calls sdktest/counter (official Go SDK) served by a child
//     process. A load generator, another child process, posts N messages
//     to the playground ingress over A distinct ids from C keep-alive
//     clients. committed-msgs/s counts 200 answers (the ingress answers only
//     once the message is durable); processed-msgs/s counts messages the
//     function has answered (the runtime's statefun_batch_size sum), timed
//     from the first request; runtime-cpu-us/msg is this process's CPU time
//     per message. The log lines add the group commits, the function calls,
//     the CPU time of each process and of the machine. After the run the
//     store is reopened and checked: one egress record per message, and the
//     counts of all ids add up to the messages sent. The children are this
//     test binary again (see roleEnv), so nothing is built.
//   - BenchmarkKafkaCounter: Kafka in, Kafka out. The runtime, in this
//     process through internal/app on a fresh synced store, consumes the
//     topic bench-in (Kafka ingress, earliest) into bench/counter (official
//     Go SDK, a child process), which counts per key and sends
//     "<count> <input value>" to the exactly-once Kafka egress bench/out,
//     topic bench-out, keyed by the key. kfake serves both topics from
//     another child process. A third child produces -kafka.records records
//     over -kafka.keys keys, each value its produce time, keeping at most
//     -kafka.window records produced but not yet visible to its
//     read_committed consumer of bench-out (a closed loop, like the HTTP
//     clients above). records/s is the records visible on the output over
//     the time from the first produce to the last visible record; p50-ms
//     and p99-ms are from a record's produce to its count being visible.
//     The consumer checks that each key's counts arrive once each (no
//     duplicate, no count out of range, nothing more within a second), and
//     the store is reopened to check that the counts add up. make
//     bench-kafka runs it beside BenchmarkEndToEnd/addresses=10000.
//   - BenchmarkClusterVsEmbedded: the work of BenchmarkKafkaCounter on an
//     embedded runtime and on a one-node cluster, each a child process
//     started afresh per row with a kfake child of its own, interleaved
//     in one invocation (-vs.rounds rounds, the modes' order alternating):
//     the full-load row gives the runtime's CPU per record of both and the
//     ratio; the light-load rows are BenchmarkClusterLatency's for both.
//     With -load.profile each runtime writes a CPU profile of its measured
//     interval.
//   - BenchmarkLoopbackHTTP/server=inprocess|process: the load generator's
//     client against a handler that only reads the body and answers 200,
//     served in this process or in a child: the price of one loopback
//     round trip on this machine.
//   - BenchmarkFunctionCalls: the runtime's invoker calling the counter in
//     the child process directly, with C calls in flight: what the function
//     and one round trip cost without ingress and store.
//   - BenchmarkConsoleFirstView: the operator's console's first views (the
//     overview, a type's ids, an address) in headless Chromium, driven with
//     chromedp, against the runtime (a child) holding -console.addresses
//     addresses (100,000), filled through the state API (the fill
//     sub-benchmark); the time is the page's own Performance API mark
//     statefun:rendered, from the navigation's start, over -console.loads
//     loads each (20). Skipped without chromium on PATH.
//   - BenchmarkSyncedCommit/messages=M/sync=S: one writer committing
//     batches shaped like the group commits at 10,000 addresses (per
//     message the ingress record and the result), one after the other,
//     synced and not: the price of one group commit and of its fsync.
//
// # Settings
//
// Flags (after the package: go test -run '^$' -bench . -benchtime 1x
// ./bench -load.messages=200000) or environment variables (for make bench):
//
//	-load.messages    STATEFUN_BENCH_MESSAGES    messages per end-to-end run (30000)
//	-load.clients     STATEFUN_BENCH_CLIENTS     concurrent HTTP clients (128)
//	-load.addresses   STATEFUN_BENCH_ADDRESSES   distinct ids, a list (1,100,10000)
//	-load.maxtime     STATEFUN_BENCH_MAXTIME     bound on the sending phase of one run (60s)
//	-load.partitions  STATEFUN_BENCH_PARTITIONS  partitions of the store (0: the default, 16)
//	-load.fn          STATEFUN_BENCH_FN          where the function runs: process or inprocess
//	-load.gen         STATEFUN_BENCH_GEN         where the load generator runs: process or inprocess
//	-load.gogc        STATEFUN_BENCH_GOGC        GOGC of the runtime's process (0: leave it)
//	-load.procs       STATEFUN_BENCH_PROCS       GOMAXPROCS of the runtime's child process (0: leave it)
//	-load.pool        STATEFUN_BENCH_POOL        the function endpoint's pool_size in the runtime child's module
//	-load.trace       STATEFUN_BENCH_TRACE       a file for the runtime child's execution trace of its last seconds
//	-load.apilog      STATEFUN_BENCH_API_LOG     a file: each measured state API request's start and end on
//	                                             CLOCK_MONOTONIC, to join with -load.trace (tools/tracejoin)
//	-load.sched       STATEFUN_BENCH_SCHED       a directory: the kernel's scheduler events (perf record, root)
//	                                             during each loaded one-client GET, for tools/schedjoin
//	-load.profile     STATEFUN_BENCH_PROFILE     a directory: write a CPU profile of each
//	                                             end-to-end run's measured window there
//	-load.bin         STATEFUN_BENCH_BIN         a statefun binary: EndToEnd, KafkaCounter and StateAPI run
//	                                             it (statefun run) as the runtime, in a child process
//	-load.apiphases   STATEFUN_BENCH_API_PHASES  the state API benchmark's phases: idle, load or idle,load
//
// With -load.bin only the runtime is that binary's: the load generator, the
// function and kfake stay this tree's, which is how bench/compare (make
// bench-compare) measures two builds against each other. The binary runs
// with the flags every release has had (--module, --data-dir, --admin-addr,
// --partitions, --listen-host), its log level through STATEFUN_LOG_LEVEL,
// and GOGC as statefun run sets it (400) unless -load.gogc says otherwise.
// Its store is not reopened after the run (its format may not be this
// tree's); the other checks of a run still hold.
//
// Three environment variables only, read by every runtime the benchmarks
// start (for A/B runs of docs/reference/limits.md's mechanisms):
//
//	STATEFUN_BENCH_FIXED_CALLS=true   the runtime runs with --fixed-calls
//	STATEFUN_BENCH_INGRESS_ANSWERS=N  the runtime runs with --ingress-answers N
//	STATEFUN_BENCH_ADMIN_LANE=false   the runtime runs with --admin-lane=false
//
// The limit benchmarks make 2 × -load.messages requests each. The Kafka
// benchmark has its own:
//
//	-kafka.records     STATEFUN_BENCH_KAFKA_RECORDS     records per run (100000)
//	-kafka.keys        STATEFUN_BENCH_KAFKA_KEYS        distinct keys (10000)
//	-kafka.window      STATEFUN_BENCH_KAFKA_WINDOW      records in flight, produce to visible (1000)
//	-kafka.partitions  STATEFUN_BENCH_KAFKA_PARTITIONS  partitions of bench-in and bench-out (8)
//	-kafka.brokers     STATEFUN_BENCH_KAFKA_BROKERS     kfake brokers (1)
//	-kafka.maxtime     STATEFUN_BENCH_KAFKA_MAXTIME     bound on one run (2m)
//
// and -load.partitions, -load.gogc and -load.profile apply to it too (the
// profile is DIR/cpu-kafka.pprof).
//
// With -load.gen inprocess or -load.fn inprocess, their goroutines carry
// the pprof label role=loadgen or role=function, so
//
//	go tool pprof -top -tagignore 'role=loadgen|function' DIR/cpu-10000.pprof
//
// still shows the runtime alone.
package bench
