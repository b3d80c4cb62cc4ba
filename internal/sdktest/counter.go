package sdktest

import (
	"os/exec"
	"testing"
)

// CounterServer hosts sdkcmd.CounterFn (package sdkfn, official Go SDK) in
// a child process, with no proxy in front, so that benchmarks measure the
// SDK alone. Every message to sdktest/counter/<id>, whatever its type, adds
// 1 to the long state "count" and egresses the playground record
// {"topic":"counter","payload":"<id>:<new count>"}.
type CounterServer struct {
	// URL is the endpoint to configure for sdktest/counter.
	URL string

	child *child
}

// StartCounterServer starts a CounterServer that stops when t ends. It
// builds the sdkserver binary on first use (see SDKServerBinary). A process
// that must serve the counter itself, and does not link internal/protocol,
// can use sdkfn.CounterHandler instead.
func StartCounterServer(t testing.TB) *CounterServer {
	t.Helper()
	bin := SDKServerBinary(t)
	c := startChild(t, "sdkserver counter", exec.Command(bin, "-fn", "counter", "-exit-on-stdin-eof"))
	return &CounterServer{URL: "http://" + c.addr + "/statefun", child: c}
}

// Close stops the server process, as a crash of the function would; calls
// to URL fail from then on. It is idempotent and also runs when t ends.
func (s *CounterServer) Close() { s.child.stop() }
