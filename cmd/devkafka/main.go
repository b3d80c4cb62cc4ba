// Command devkafka serves a fake Kafka cluster on loopback for development
// and tests: franz-go's kfake, which speaks the Kafka protocol (produce,
// fetch, consumer groups, transactions, read_committed) but has no
// replication, no durability guarantees worth the name and no security
// defaults. It is a development tool, NOT a Kafka broker for production.
//
//	devkafka [-port 9092] [-brokers 3] [-data-dir DIR] [-topic NAME[:PARTITIONS]]... [-control 127.0.0.1:PORT]
//
// It prints the bootstrap servers (comma-separated) as the first line on
// standard output, then serves until SIGINT or SIGTERM. With -control it
// also serves an HTTP API on loopback that injects Kafka faults (requests
// failed with a given error, coordinators moved), for tests
// that run it as a process of their own (control.go).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

const banner = "DEVELOPMENT AND TEST BROKER (franz-go kfake): not Kafka, never for production"

const usage = `devkafka serves a fake Kafka cluster on 127.0.0.1 for development and tests.

  ` + banner + `

It speaks the Kafka protocol (produce, fetch, consumer groups, transactions,
read_committed), so kcat, franz-go and the Java client work against it, but
it has no replication and no security. Data lives in memory unless -data-dir
is given. It prints the bootstrap servers as its first line on stdout.

It is a development tool: the -control listener below lets anyone who
reaches it break the cluster on purpose, for tests of how clients survive
Kafka faults.

Usage:
  devkafka [flags]

Flags:
`

// topicList collects repeated -topic flags.
type topicList []string

func (t *topicList) String() string     { return strings.Join(*t, ",") }
func (t *topicList) Set(s string) error { *t = append(*t, s); return nil }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run parses args, serves until ctx ends and returns the exit code: 0 on a
// clean stop, 2 on bad flags, 1 when the cluster cannot start.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("devkafka", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
		fmt.Fprint(stderr, "\n"+controlUsage)
	}
	port := fs.Int("port", 9092, "port of the first broker; the others take the next ones (0: any free ports)")
	brokers := fs.Int("brokers", 3, "number of brokers")
	dataDir := fs.String("data-dir", "", "directory that keeps topics, offsets and groups across restarts (empty: memory only)")
	sync := fs.Bool("sync", false, "fsync every write to -data-dir")
	partitions := fs.Int("partitions", 3, "partitions of a -topic without :N, and of auto-created topics")
	controlAddr := fs.String("control", "", "serve the fault-injection API on this loopback address, e.g. 127.0.0.1:9080 (see below; empty: none)")
	var topics topicList
	fs.Var(&topics, "topic", "topic to create at start, NAME or NAME:PARTITIONS (repeatable)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	bad := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "devkafka: "+format+"\n", a...)
		return 2
	}
	switch {
	case fs.NArg() > 0:
		return bad("unexpected argument %q", fs.Arg(0))
	case *brokers < 1 || *brokers > 64:
		return bad("-brokers %d: want 1 to 64", *brokers)
	case *port < 0 || *port != 0 && *port+*brokers-1 > 65535:
		return bad("-port %d: the brokers' ports must be 1 to 65535 (or 0 for any)", *port)
	case *partitions < 1:
		return bad("-partitions %d: want at least 1", *partitions)
	case *sync && *dataDir == "":
		return bad("-sync needs -data-dir")
	}
	if *controlAddr != "" {
		if err := checkControlAddr(*controlAddr); err != nil {
			return bad("%v", err)
		}
	}
	opts := []kfake.Opt{kfake.NumBrokers(*brokers), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(*partitions)}
	ports := make([]int, *brokers)
	for i := range ports {
		if *port != 0 {
			ports[i] = *port + i
		}
	}
	opts = append(opts, kfake.Ports(ports...))
	for _, t := range topics {
		name, n := t, *partitions
		if i := strings.LastIndexByte(t, ':'); i >= 0 {
			v, err := strconv.Atoi(t[i+1:])
			if err != nil || v < 1 {
				return bad("-topic %q: want NAME or NAME:PARTITIONS with PARTITIONS at least 1", t)
			}
			name, n = t[:i], v
		}
		if name == "" {
			return bad("-topic %q: the name is empty", t)
		}
		opts = append(opts, kfake.SeedTopics(int32(n), name))
	}
	if *dataDir != "" {
		if err := os.MkdirAll(*dataDir, 0o755); err != nil {
			fmt.Fprintf(stderr, "devkafka: %v\n", err)
			return 1
		}
		opts = append(opts, kfake.DataDir(*dataDir))
		if *sync {
			opts = append(opts, kfake.SyncWrites())
		}
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		fmt.Fprintf(stderr, "devkafka: starting: %v\n", err)
		return 1
	}
	defer c.Close()
	if *controlAddr != "" {
		ln, err := serveControl(c, *controlAddr)
		if err != nil {
			fmt.Fprintf(stderr, "devkafka: %v\n", err)
			return 1
		}
		defer ln.Close()
		log.Warn("devkafka: fault injection enabled", "control", "http://"+ln.Addr().String())
	}
	addrs := strings.Join(c.ListenAddrs(), ",")
	fmt.Fprintln(stdout, addrs)
	log.Warn(banner)
	log.Info("devkafka serving", "bootstrap", addrs, "brokers", *brokers, "data_dir", *dataDir, "topics", topics.String())
	<-ctx.Done()
	log.Info("devkafka stopping")
	return 0
}
