# The two commands a newcomer needs (see README.md):
#   make example   runs the runtime with the greeter example on the embedded store
#   make example-kafka  the same with Kafka in and out (a development Kafka included)
#   make example-cluster  three nodes in cluster mode on a development Kafka (docs/tutorials/cluster.md)
#   make test      runs every test
# And to tell whether a change made the runtime faster or slower:
#   make bench-compare BASE=<rev>  the working tree against BASE, interleaved on this machine
.PHONY: example example-kafka example-cluster test build bench bench-compare bench-kafka bench-cluster bench-restate deps fuzz soak

build:
	@echo "building bin/statefun, bin/greeter, bin/kafka-greeter and bin/devkafka (the first build downloads and compiles the dependencies: a minute or two)"
	go build -o bin/statefun ./cmd/statefun
	go build -o bin/greeter ./examples/greeter
	go build -o bin/kafka-greeter ./examples/kafka-greeter
	go build -o bin/devkafka ./cmd/devkafka

deps:
	cd testdata/jsfn && npm ci --no-audit --no-fund
	cd e2e/testdata/axe && npm ci --no-audit --no-fund

example: build
	./examples/greeter/run.sh

# devkafka, the functions and the runtime; produces a few logins and prints
# the greetings read back read_committed; Ctrl-C stops everything.
example-kafka: build
	./examples/kafka-greeter/run.sh

# devkafka, the kafka-greeter functions and three statefun nodes in cluster
# mode sharing one application; Ctrl-C stops everything.
example-cluster: build
	./examples/cluster/run.sh

test: deps
	go vet ./...
	go test -race -timeout 30m ./...
	@# The migration at full scale (10,000 counters under load, SIGKILLed
	@# and resumed), on the runtime as users run it: under the race
	@# detector (above, 2,000 counters) it takes three minutes more.
	go test ./e2e -run 'TestJobMigrationKilledUnderLoad$$' -jobs.addresses=10000 -e2e.race=false -timeout 20m
	$(MAKE) fuzz
	cd bench/restate && npm ci --no-audit --no-fund && go test ./...
	cd tools/tracejoin && go vet ./...

bench: build
	go test -run '^$$' -bench . -benchtime 1x ./bench/...

# Two builds of the runtime (cmd/statefun) on this machine, interleaved in
# rounds, as ratios HEAD/BASE (docs/benchmarks.md, "Comparing two builds"):
# BASE is required; HEAD defaults to the working tree. ROUNDS (3),
# WORKLOADS (all; e.g. increments-10000,put-committed-16; the list:
# go run ./bench/compare -list), SCALE (1: a few seconds a run; 5 runs five
# times longer), more flags in BENCH_COMPARE_FLAGS. The table goes to
# standard output, the progress to standard error.
ROUNDS ?= 3
SCALE ?= 1
bench-compare:
	@test -n "$(BASE)" || { echo "make bench-compare: set BASE, the revision to compare against, e.g. make bench-compare BASE=HEAD~1" >&2; exit 2; }
	@go run ./bench/compare -base '$(BASE)' -head '$(HEAD)' -rounds '$(ROUNDS)' -workloads '$(WORKLOADS)' -scale '$(SCALE)' \
		-command "make bench-compare BASE=$(BASE)$(if $(HEAD), HEAD=$(HEAD))$(if $(filter-out 3,$(ROUNDS)), ROUNDS=$(ROUNDS))$(if $(WORKLOADS), WORKLOADS=$(WORKLOADS))$(if $(filter-out 1,$(SCALE)), SCALE=$(SCALE))$(if $(BENCH_COMPARE_FLAGS), BENCH_COMPARE_FLAGS='$(BENCH_COMPARE_FLAGS)')" \
		$(BENCH_COMPARE_FLAGS)

# Kafka in, official-SDK counter, Kafka out (exactly-once) at 10,000 keys,
# beside the playground-ingress run at 10,000 addresses of the same
# invocation, both with GOGC 400 as statefun run sets it
# (docs/benchmarks.md). Flags go in BENCH_KAFKA_FLAGS, e.g.
# BENCH_KAFKA_FLAGS='-kafka.window=500 -load.profile=/tmp/prof'.
bench-kafka:
	go test -c -o bin/bench.test ./bench
	cd bench && ../bin/bench.test -test.run '^$$' -test.benchtime 1x \
		-test.bench 'KafkaCounter|EndToEnd' -load.addresses=10000 -load.gogc=400 $(BENCH_KAFKA_FLAGS)

# Cluster mode: 1, 2 and 3 nodes, a node killed with SIGKILL, and the
# restore of a partition at 10k/100k/1M keys (docs/benchmarks.md, "Cluster
# mode"). Flags go in BENCH_CLUSTER_FLAGS, e.g.
# BENCH_CLUSTER_FLAGS='-kafka.records=50000 -cluster.nodes=3'.
bench-cluster:
	go test -c -o bin/bench.test ./bench
	cd bench && ../bin/bench.test -test.run '^$$' -test.benchtime 1x -test.v \
		-test.bench 'Cluster' $(BENCH_CLUSTER_FLAGS)
	go test ./internal/cluster/changelog -run '^$$' -bench Restore -benchtime 1x -timeout 30m

# Side by side with Restate (bench/restate, its own Go module): writes its
# section of docs/benchmarks.md and docs/benchmarks-restate.png. Flags go
# in BENCH_RESTATE_FLAGS, e.g. BENCH_RESTATE_FLAGS=-restart-keys=1000000.
bench-restate:
	cd bench/restate && npm ci --no-audit --no-fund && \
	BENCH_RESTATE_COMMAND='make bench-restate$(if $(BENCH_RESTATE_FLAGS), BENCH_RESTATE_FLAGS="$(BENCH_RESTATE_FLAGS)")' \
	go run . -out ../../docs/benchmarks.md $(BENCH_RESTATE_FLAGS)

# Every Go fuzz target, each for FUZZTIME (bounded in make test; make soak
# runs them longer). The seed corpora also run in plain go test. A failing
# input is written under the package's testdata/fuzz and reproduces with
# go test -run <Target>/<file>.
FUZZTIME ?= 10s
FUZZ_TARGETS = \
	./internal/ingress:FuzzParse \
	./internal/idempotency:FuzzParse \
	./internal/partition:FuzzFromFunction \
	./internal/module:FuzzParse \
	./internal/endpointurl:FuzzParse \
	./internal/stateapi:FuzzSplitPath \
	./internal/stateapi:FuzzPutBody \
	./internal/stateapi:FuzzConditionHeader \
	./internal/types:FuzzParseText \
	./internal/types:FuzzText \
	./internal/types:FuzzDecodeEnvelopeValue \
	./internal/store:FuzzStringEncoding
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t##*:}; \
		echo "fuzz $$pkg $$fn for $(FUZZTIME)"; \
		.ci/fuzz $$pkg $$fn $(FUZZTIME); \
	done

# The long budget: fuzzing for minutes per target, the deterministic
# simulation over a thousand seeds, embedded and in cluster mode (a failing
# seed prints the command that replays it), and the process tests' longer
# variants (crashes under Kafka traffic, nine failovers in a row).
soak:
	$(MAKE) fuzz FUZZTIME=5m
	@# A seed whose disk fails abandons its store, whose goroutines Pebble
	@# parks for good (internal/store/health.go), so a process keeps its
	@# memory: a hundred seeds per process keeps that within a few GiB.
	set -e; for first in 1 101 201 301 401 501 601 701 801 901; do \
		go test ./internal/sim -run 'TestSimulation(Cluster)?$$' -sim.first=$$first -sim.seeds=100 -sim.steps=1200 -timeout 1h; \
	done
	STATEFUN_KAFKA_SOAK=1 go test -race ./e2e -run 'TestKafkaCrashExactlyOnce$$' -timeout 30m
	STATEFUN_CLUSTER_SOAK=1 go test -race ./e2e -run 'TestClusterFailover$$|TestClusterBrokerRestart$$' -timeout 30m
	@# A write answered committed as a restarted node's first transaction,
	@# then a kill: rare interleavings inside the Kafka client show up only
	@# over many restarts.
	go test ./e2e -run 'TestStateAPICommittedSurvivesKill$$/engine=cluster' -count=300 -timeout 60m
	go test -race ./e2e -run 'TestJobMigrationKilledUnderLoad$$' -jobs.addresses=10000 -timeout 60m
