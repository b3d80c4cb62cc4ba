# The two commands a newcomer needs (see README.md):
#   make example   runs the runtime with the greeter example on the embedded store
#   make test      runs every test
.PHONY: example test build bench deps

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

bench: build
	go test -run '^$$' -bench . -benchtime 1x ./bench/...
