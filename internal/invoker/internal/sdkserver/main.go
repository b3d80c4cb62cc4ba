// Command sdkserver serves two functions built with the official StateFun Go
// SDK v3.3.0 for the invoker tests, which build and start it as a child
// process. It cannot run inside the test binary: the SDK's generated
// protobuf code and internal/protocol register the same proto names, and
// the protobuf runtime panics when both are linked into one program.
//
//   - example/counter declares the state "seen" (io.statefun.types/int, no
//     expiration). Each message adds 1 to it and sends the new count, as an
//     io.statefun.types/int, to the egress example/out.
//   - example/failing declares no state and returns the error
//     "failed to invoke example/failing: boom", so the SDK answers HTTP 500.
//
// It is a normal package rather than testdata so that go mod tidy keeps the
// SDK requirement. It answers on every path, prints "listening on <host:port>" once it
// accepts connections, and exits when its stdin reaches end of file, so it
// dies with the test process that holds the other end of the pipe.
package main

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"

	"github.com/apache/flink-statefun/statefun-sdk-go/v3/pkg/statefun"
)

func main() {
	// The SDK logs each registration and each missing state; the tests read
	// stdout for the address only.
	log.SetOutput(io.Discard)

	seen := statefun.ValueSpec{Name: "seen", ValueType: statefun.Int32Type}
	fns := statefun.StatefulFunctionsBuilder()
	must(fns.WithSpec(statefun.StatefulFunctionSpec{
		FunctionType: statefun.TypeNameFrom("example/counter"),
		States:       []statefun.ValueSpec{seen},
		Function: statefun.StatefulFunctionPointer(func(ctx statefun.Context, _ statefun.Message) error {
			var n int32
			ctx.Storage().Get(seen, &n)
			n++
			ctx.Storage().Set(seen, n)
			ctx.SendEgress(statefun.GenericEgressBuilder{
				Target:    statefun.TypeNameFrom("example/out"),
				Value:     n,
				ValueType: statefun.Int32Type,
			})
			return nil
		}),
	}))
	must(fns.WithSpec(statefun.StatefulFunctionSpec{
		FunctionType: statefun.TypeNameFrom("example/failing"),
		Function: statefun.StatefulFunctionPointer(func(ctx statefun.Context, _ statefun.Message) error {
			return fmt.Errorf("failed to invoke %s: boom", ctx.Self().FunctionType)
		}),
	}))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(err)
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	fmt.Printf("listening on %s\n", ln.Addr())
	must(http.Serve(ln, fns.AsHandler()))
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "sdkserver:", err)
		os.Exit(1)
	}
}
