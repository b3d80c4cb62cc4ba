// Command greeter is the StateFun playground's greeter, written with the
// official StateFun Go SDK v3.3.0, to run against this runtime (or Apache
// Flink StateFun 3.x) unchanged.
//
// example/person counts the visits of each person in the int state
// "visits" and sends {"name": ..., "visits": n} (example/GreetRequest) to
// example/greeter/<name>, which egresses a greeting to the playground egress
// topic "greetings". See README.md and module.yaml.
//
// Usage:
//
//	greeter [-addr :8000]
//
// The default address comes from $GREETER_ADDR, else ":8000". Functions are
// served on /statefun.
package main

import (
	"context"
	"errors"
	"flag"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// newMux serves the functions on /statefun, the path module.yaml names.
func newMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/statefun", Handler())
	return mux
}

func main() {
	def := os.Getenv("GREETER_ADDR")
	if def == "" {
		def = ":8000"
	}
	addr := flag.String("addr", def, "listen address (default from $GREETER_ADDR, else :8000)")
	flag.Parse()

	srv := &http.Server{Addr: *addr, Handler: newMux(), ReadHeaderTimeout: 10 * time.Second}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()

	log.Printf("greeter: serving /statefun on %s", *addr)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatalf("greeter: %v", err)
	}
}
