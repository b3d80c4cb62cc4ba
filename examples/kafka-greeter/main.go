// Command kafka-greeter is an example application for this runtime, shaped
// like the StateFun playground's Go showcase and written with the official
// StateFun Go SDK v3.3.0: user logins come in from a Kafka topic, a
// stateful function per user counts them, a second function writes a
// personal greeting to the Kafka topic "greetings", exactly once. See
// README.md and module.yaml.
//
// Usage:
//
//	kafka-greeter [-addr :8000]                     serve the functions on /statefun
//	kafka-greeter produce -brokers B -topic T [FILE] produce JSON logins, one a line, keyed by user_id
//	kafka-greeter consume -brokers B -topic T -n N   print N records, read_committed
//
// The serving address comes from -addr, else $KAFKA_GREETER_ADDR, else
// ":8000". produce and consume stand in for kcat where it is not
// installed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdin, os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "kafka-greeter:", err)
		os.Exit(1)
	}
}

// run dispatches to the subcommand named by the first argument; without
// one it serves the functions.
func run(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	cmd := "serve"
	if len(args) > 0 && (args[0] == "produce" || args[0] == "consume" || args[0] == "serve") {
		cmd, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("kafka-greeter "+cmd, flag.ContinueOnError)
	switch cmd {
	case "produce":
		brokers := fs.String("brokers", "127.0.0.1:9092", "bootstrap servers, comma-separated")
		topic := fs.String("topic", "user-logins", "topic to produce to")
		if err := fs.Parse(args); err != nil {
			return err
		}
		in := stdin
		if fs.NArg() > 1 {
			return fmt.Errorf("produce: more than one file given")
		}
		if fs.NArg() == 1 {
			f, err := os.Open(fs.Arg(0))
			if err != nil {
				return err
			}
			defer f.Close()
			in = f
		}
		n, err := ProduceLogins(ctx, splitBrokers(*brokers), *topic, in)
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "kafka-greeter: produced %d logins to %s\n", n, *topic)
		return nil
	case "consume":
		brokers := fs.String("brokers", "127.0.0.1:9092", "bootstrap servers, comma-separated")
		topic := fs.String("topic", GreetingsTopic, "topic to read from the beginning, read_committed")
		n := fs.Int("n", 0, "stop after this many records (0: never)")
		timeout := fs.Duration("timeout", 0, "give up after this long (0: never)")
		if err := fs.Parse(args); err != nil {
			return err
		}
		if fs.NArg() > 0 {
			return fmt.Errorf("consume: unexpected argument %q", fs.Arg(0))
		}
		if *timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, *timeout)
			defer cancel()
		}
		return Consume(ctx, splitBrokers(*brokers), *topic, *n, func(key, value string) {
			fmt.Fprintf(stdout, "%s: %s\n", key, value)
		})
	}
	def := os.Getenv("KAFKA_GREETER_ADDR")
	if def == "" {
		def = ":8000"
	}
	addr := fs.String("addr", def, "listen address (default from $KAFKA_GREETER_ADDR, else :8000)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (subcommands: serve, produce, consume)", fs.Arg(0))
	}
	return serve(ctx, *addr)
}

// newMux serves the functions on /statefun, the path module.yaml names.
func newMux(f Functions) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/statefun", f.Handler())
	return mux
}

func serve(ctx context.Context, addr string) error {
	lg := log.New(os.Stderr, "kafka-greeter: ", log.LstdFlags)
	srv := &http.Server{Addr: addr, Handler: newMux(Functions{Log: lg}), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	lg.Printf("serving /statefun on %s", addr)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
