# The two commands a newcomer needs (see README.md):
#   make example   runs the runtime with the greeter example on the embedded store
#   make test      runs every test
.PHONY: example test build bench bench-restate deps

build:
	go build -o bin/statefun ./cmd/statefun
	go build -o bin/greeter ./examples/greeter

deps:
	cd testdata/jsfn && npm ci --no-audit --no-fund

example: build
	./examples/greeter/run.sh

test: deps
	go vet ./...
	go test -race -timeout 30m ./...
	cd bench/restate && npm ci --no-audit --no-fund && go test ./...

bench: build
	go test -run '^$$' -bench . -benchtime 1x ./bench/...

# Side by side with Restate (bench/restate, its own Go module): writes its
# section of docs/benchmarks.md and docs/benchmarks-restate.png. Flags go
# in BENCH_RESTATE_FLAGS, e.g. BENCH_RESTATE_FLAGS=-restart-keys=1000000.
bench-restate:
	cd bench/restate && npm ci --no-audit --no-fund && \
	BENCH_RESTATE_COMMAND='make bench-restate$(if $(BENCH_RESTATE_FLAGS), BENCH_RESTATE_FLAGS="$(BENCH_RESTATE_FLAGS)")' \
	go run . -out ../../docs/benchmarks.md $(BENCH_RESTATE_FLAGS)
