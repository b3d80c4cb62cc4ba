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
//   - BenchmarkLoopbackHTTP/server=inprocess|process: the load generator's
//     client against a handler that only reads the body and answers 200,
//     served in this process or in a child: the price of one loopback
//     round trip on this machine.
//   - BenchmarkFunctionCalls: the runtime's invoker calling the counter in
//     the child process directly, with C calls in flight: what the function
//     and one round trip cost without ingress and store.
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
//	-load.profile     STATEFUN_BENCH_PROFILE     a directory: write a CPU profile of each
//	                                             end-to-end run's measured window there
//
// The limit benchmarks make 2 × -load.messages requests each.
//
// With -load.gen inprocess or -load.fn inprocess, their goroutines carry
// the pprof label role=loadgen or role=function, so
//
//	go tool pprof -top -tagignore 'role=loadgen|function' DIR/cpu-10000.pprof
//
// still shows the runtime alone.
package bench
