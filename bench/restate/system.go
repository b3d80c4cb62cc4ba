package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/statefun-go/statefun/internal/testport"
)

// system is one of the two systems under test, with its counter, on this
// machine. Start launches it; after that its methods may be called from
// many goroutines. Each system keeps its data in its own directory, which
// survives Stop so that Start restarts it on the same state.
type system interface {
	// Name is how the report calls the system.
	Name() string
	// Start starts the server on its data directory and returns once it
	// answers its readiness check; the first Start also starts the counter
	// and registers it where the system requires that.
	Start(ctx context.Context) error
	// Stop stops the server with SIGTERM and returns how long it took to
	// exit; the counter keeps running.
	Stop() (time.Duration, error)
	// Kill stops the server with SIGKILL (a crash).
	Kill()
	// Close stops everything: server and counter.
	Close()

	// Increment sends one increment of key through the system's ingress,
	// fire-and-forget: it returns once the system has made the request
	// durable (it will be applied exactly once, later).
	Increment(ctx context.Context, key string) error
	// Applied returns a number that grows by one for every increment
	// applied: only differences between two calls mean something.
	Applied(ctx context.Context) (int64, error)
	// Read reads key's counter through the system's state access; found
	// is false when the key has no counter.
	Read(ctx context.Context, key string) (n int64, found bool, err error)
	// Write sets key's counter to n through the system's state access and
	// returns once the new value is durable and visible to Read.
	Write(ctx context.Context, key string, n int64) error

	// PIDs are the processes whose CPU time the system uses: server and
	// counter.
	PIDs() []int
	// DataDir holds the server's durable state.
	DataDir() string
	// Settings describes how the server runs: versions and durability.
	Settings() []string
	// Logs are the log files of its processes.
	Logs() []string
}

// freePorts returns n distinct loopback TCP ports that were free a moment
// ago, outside the kernel's ephemeral range (see internal/testport).
func freePorts(n int) ([]int, error) {
	ports := make([]int, n)
	for i := range ports {
		p, err := testport.Free()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	return ports, nil
}

// waitHTTP polls url with GET every 5ms until it answers 200, the process
// exits or timeout passes.
func waitHTTP(ctx context.Context, client *http.Client, p *proc, url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		status, _, err := do(client, req)
		if err == nil && status == http.StatusOK {
			return nil
		}
		if !p.alive() {
			return fmt.Errorf("bench: %s exited while starting; its log: %s\n%s", p.name, p.logPath, p.tail())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: %s: %s not ready within %v (last: status %d, %v); its log: %s", p.name, url, timeout, status, err, p.logPath)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}
