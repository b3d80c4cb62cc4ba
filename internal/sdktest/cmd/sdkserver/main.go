// Command sdkserver serves the official-SDK test functions of package sdkfn
// over HTTP. Package sdktest builds and starts it as a child process.
//
// Usage:
//
//	sdkserver [-fn features|counter] [-addr 127.0.0.1:0] [-exit-on-stdin-eof]
//
// It answers on every path. Once listening it prints one line,
// "listening on <host:port>", to stdout. With -exit-on-stdin-eof it exits
// when its stdin reaches end of file, so that it dies with the process that
// holds the other end of the pipe.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/statefun-go/statefun/internal/sdktest/sdkfn"
)

func main() {
	fn := flag.String("fn", "features", "functions to serve: features or counter")
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	stdinEOF := flag.Bool("exit-on-stdin-eof", false, "exit when stdin is closed")
	flag.Parse()

	var h http.Handler
	switch *fn {
	case "features":
		h = sdkfn.FeatureHandler()
	case "counter":
		h = sdkfn.CounterHandler()
	default:
		log.Fatalf("sdkserver: unknown -fn %q", *fn)
	}

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatalf("sdkserver: %v", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *stdinEOF {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			stop()
		}()
	}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()

	fmt.Printf("listening on %s\n", ln.Addr())
	if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
		log.Fatalf("sdkserver: %v", err)
	}
}
