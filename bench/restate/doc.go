// Command bench-restate measures our runtime and Restate, the nearest
// peer, side by side on this machine, in one run, and writes the figures
// and the our/their ratios into docs/benchmarks.md (between the markers
// <!-- restate:begin --> and <!-- restate:end -->) with a PNG chart of the
// ratios beside it (docs/benchmarks-restate.png).
//
//	make bench-restate                                        # from the repository root
//	make bench-restate BENCH_RESTATE_FLAGS=-restart-keys=1000000
//	cd bench/restate && npm ci && go run . -out ../../docs/benchmarks.md [flags]
//
// It is a Go module of its own so that the Restate Go SDK never becomes a
// dependency of the runtime's module; it uses the runtime's packages
// through a replace directive. Restate comes from npm (package.json pins
// @restatedev/restate-server and @restatedev/restate 1.7.12, whose
// platform packages carry the binaries); nothing else is downloaded.
//
// # What runs
//
// Same logic on both sides: per key, read a counter, add 1, write it
// back, emit the new value.
//
//   - statefun: our runtime in a child process, started through
//     internal/app.Start exactly as `statefun run` starts it (embedded
//     Pebble store, 16 partitions, synced group commits), with the
//     function sdktest/counter written with the official StateFun Go SDK
//     v3.3.0 in another child process. The runtime's child also serves
//     profile controls: after workloads 1-3 an extra increment run (not in
//     the table, as profiling slows the runtime) leaves a CPU profile of
//     the runtime in -profile (default bench/restate/profiles/), which the
//     report summarizes.
//   - Restate: restate-server from the npm package, single node, on a
//     fresh base directory with its default (durable) configuration;
//     restate.toml only binds loopback TCP on free ports and turns
//     telemetry off. The Counter virtual object, written with the Restate
//     Go SDK v1.2.0, runs in a child process and is registered with POST
//     /deployments.
//
// The load generator is in this process: bounded in count (the flags)
// and in time (-maxtime per load), keep-alive clients, loopback only. On
// Linux the whole run happens in a private network namespace that has
// nothing but a loopback interface (this binary re-executes itself with
// CLONE_NEWNET), so no process of the benchmark can reach another host;
// restate-server would otherwise ask GitHub for its latest release.
//
// # Workloads
//
// Each of 1-3 runs at every -keys count (default 1, 100, 10000):
//
//  1. Increments through each system's ingress, fire-and-forget, counted
//     when the system acknowledges them as durable (ours: playground
//     ingress 200; Restate: /send 202), then until all are applied;
//     throughput, p50/p99 latency, CPU per increment. The counts are then
//     read back and checked against the acknowledged increments.
//  2. Reads of one key's counter through the state access: ours GET
//     /state/...; Restate POST /query (SQL), as `restate kv get` does.
//  3. Writes of one key's counter: ours PUT /state/...?ack=committed;
//     Restate POST /services/Counter/state, then reads until the value is
//     visible.
//  4. Restart with -restart-keys keys of state (default 100,000 to keep
//     the run to minutes; the figure is 1,000,000, about 35
//     minutes on 2 cores): clean stop time, start until ready, start until
//     the first state read; then a second increment on every key and the
//     same after SIGKILL.
//
// # Flags
//
//	-keys          key counts of workloads 1-3 (1,100,10000)
//	-messages      increments per workload-1 run (10000)
//	-reads         reads per workload-2 run (3000)
//	-writes        writes per workload-3 run (1000)
//	-clients       concurrent clients (32)
//	-maxtime       bound on the sending phase of each load (30s)
//	-restart-keys  keys of state for workload 4 (100000; 0 skips it)
//	-out, -chart   the markdown file and the PNG
//	-profile       directory for the CPU profile of our runtime (profiles; "" for none)
//	-profile-messages  increments of the profiled run (40000)
//	-workdir, -keep  where data and logs go, and whether to keep them
//
// BENCH_RESTATE_LOG_LEVEL=debug makes our runtime log Pebble's own lines
// (WAL replay, flushes) into statefun/*/runtime.log of the work directory.
//
// # Test
//
// go test ./... runs both systems on a tiny workload and checks that both
// counters end at the expected values, and that the report replaces only
// its section. It skips when node_modules is missing (run npm ci here).
package main
