// Command statefun runs StateFun applications: `statefun run --module
// module.yaml` starts the runtime on the embedded store.
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
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/statefun-go/statefun/internal/app"
	"github.com/statefun-go/statefun/internal/engine"
	"github.com/statefun-go/statefun/internal/functions"
	"github.com/statefun-go/statefun/internal/kafkaegress"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/stateapi"
	"github.com/statefun-go/statefun/internal/store"
)

const usage = `statefun runs Apache Flink StateFun 3.x applications (module.yaml plus
remote functions built with the official SDKs) on one binary.

Usage:
  statefun run --module FILE [--data-dir DIR] [--admin-addr HOST:PORT]
               [--cluster-brokers HOST:PORT,... --cluster-app-id ID --cluster-node-id ID --cluster-advertise URL
                [--cluster-secret-file FILE]]
  statefun state get|put|delete|ls|edit|revert|receipt|audit|dead-letters|failing|inbox|pause|resume|pauses [flags] [args]
  statefun version

Run "statefun run -h" for the flags of run, "statefun state -h" for the
state commands (read and write a running application's state).
`

func main() {
	os.Exit(mainErr(os.Args[1:], os.Stdout, os.Stderr))
}

func mainErr(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "run":
		return run(args[1:], stderr)
	case "state":
		return stateMain(args[1:], os.Stdin, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "statefun", version())
		return 0
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "statefun: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}

func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// env returns the environment variable's value, or def.
func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// badEnv holds the first environment variable that did not parse, reported
// after the flags are parsed.
var badEnv string

// envDuration returns the duration in the environment variable, or def.
func envDuration(name string, def time.Duration) time.Duration {
	v, ok := os.LookupEnv(name)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil && badEnv == "" {
		badEnv = fmt.Sprintf("%s=%q is not a duration like 24h", name, v)
	}
	return d
}

// envInt returns the integer in the environment variable, or def.
func envInt(name string, def int) int {
	v, ok := os.LookupEnv(name)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil && badEnv == "" {
		badEnv = fmt.Sprintf("%s=%q is not a number", name, v)
	}
	return n
}

// envBool returns the boolean in the environment variable (as
// strconv.ParseBool reads it: true, false, 1, 0, ...), or def.
func envBool(name string, def bool) bool {
	v, ok := os.LookupEnv(name)
	if !ok {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil && badEnv == "" {
		badEnv = fmt.Sprintf("%s=%q is not true or false", name, v)
	}
	return b
}

// parseBytes reads a size: a number of bytes, optionally with a KiB, MiB or
// GiB suffix (KB, MB, GB and K, M, G are read as the same powers of two).
func parseBytes(s string) (uint64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	mult := uint64(1)
	for _, u := range []struct {
		suffix string
		mult   uint64
	}{{"KIB", 1 << 10}, {"MIB", 1 << 20}, {"GIB", 1 << 30}, {"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseUint(t, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: want a number of bytes, optionally with KiB, MiB or GiB", s)
	}
	if n > (1<<63)/mult {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return n * mult, nil
}

// retentionFlags registers the retention flags of run on fs (each with its
// environment variable) and returns the retention they fill.
func retentionFlags(fs *flag.FlagSet) *store.Retention {
	ret := new(store.Retention)
	fs.DurationVar(&ret.ReceiptAge, "receipt-retention", envDuration("STATEFUN_RECEIPT_RETENTION", store.DefaultReceiptAge), "how long mutation receipts are kept; -1s keeps them (env STATEFUN_RECEIPT_RETENTION)")
	fs.IntVar(&ret.ReceiptCount, "receipt-max", envInt("STATEFUN_RECEIPT_MAX", store.DefaultReceiptCount), "most mutation receipts kept; -1 for no limit (env STATEFUN_RECEIPT_MAX)")
	fs.DurationVar(&ret.AuditAge, "audit-retention", envDuration("STATEFUN_AUDIT_RETENTION", store.DefaultAuditAge), "how long audit records are kept; -1s keeps them (env STATEFUN_AUDIT_RETENTION)")
	fs.IntVar(&ret.AuditCount, "audit-max", envInt("STATEFUN_AUDIT_MAX", store.DefaultAuditCount), "most audit records kept; -1 for no limit (env STATEFUN_AUDIT_MAX)")
	fs.DurationVar(&ret.EgressAge, "egress-retention", envDuration("STATEFUN_EGRESS_RETENTION", store.DefaultEgressAge), "how long an egress record waits for a consumer before it is deleted; -1s keeps them (env STATEFUN_EGRESS_RETENTION)")
	fs.IntVar(&ret.EgressCount, "egress-max", envInt("STATEFUN_EGRESS_MAX", store.DefaultEgressCount), "most records waiting in one egress topic; older ones are deleted; -1 for no limit (env STATEFUN_EGRESS_MAX)")
	fs.DurationVar(&ret.IdempotencyAge, "idempotency-retention", envDuration("STATEFUN_IDEMPOTENCY_RETENTION", store.DefaultIdempotencyAge), "how long an ingress Idempotency-Key is remembered; a retry after that makes a new message; -1s keeps them (env STATEFUN_IDEMPOTENCY_RETENTION)")
	fs.IntVar(&ret.IdempotencyCount, "idempotency-max", envInt("STATEFUN_IDEMPOTENCY_MAX", store.DefaultIdempotencyCount), "most ingress Idempotency-Keys remembered; the oldest are forgotten; -1 for no limit (env STATEFUN_IDEMPOTENCY_MAX)")
	fs.DurationVar(&ret.DeadLetterAge, "dead-letter-retention", envDuration("STATEFUN_DEAD_LETTER_RETENTION", store.DefaultDeadLetterAge), "how long records a Kafka ingress could not deliver are kept as dead letters; -1s keeps them (env STATEFUN_DEAD_LETTER_RETENTION)")
	fs.IntVar(&ret.DeadLetterCount, "dead-letter-max", envInt("STATEFUN_DEAD_LETTER_MAX", store.DefaultDeadLetterCount), "most dead letters kept, over every ingress; the oldest are deleted; -1 for no limit (env STATEFUN_DEAD_LETTER_MAX)")
	fs.DurationVar(&ret.HistoryAge, "history-retention", envDuration("STATEFUN_HISTORY_RETENTION", store.DefaultHistoryAge), "how long the changes of a state entry are kept in its history (its latest change with a value always is); -1s keeps them (env STATEFUN_HISTORY_RETENTION)")
	fs.IntVar(&ret.HistoryCount, "history-max", envInt("STATEFUN_HISTORY_MAX", store.DefaultHistoryCount), "most changes kept in the history of one state entry; -1 for no limit (env STATEFUN_HISTORY_MAX)")
	fs.DurationVar(&ret.MessageDeadLetterAge, "message-dead-letter-retention", envDuration("STATEFUN_MESSAGE_DEAD_LETTER_RETENTION", store.DefaultMessageDeadLetterAge), "how long messages an operator skipped out of an inbox are kept to be re-sent; -1s keeps them (env STATEFUN_MESSAGE_DEAD_LETTER_RETENTION)")
	fs.IntVar(&ret.MessageDeadLetterCount, "message-dead-letter-max", envInt("STATEFUN_MESSAGE_DEAD_LETTER_MAX", store.DefaultMessageDeadLetterCount), "most skipped messages kept; the oldest are deleted; -1 for no limit (env STATEFUN_MESSAGE_DEAD_LETTER_MAX)")
	return ret
}

// checkRetention refuses a zero count or duration (0 would silently mean
// the default in store.Retention) and a count below -1, naming the flag.
func checkRetention(ret *store.Retention) error {
	for _, c := range []struct {
		name string
		v    int
	}{{"receipt-max", ret.ReceiptCount}, {"audit-max", ret.AuditCount}, {"egress-max", ret.EgressCount},
		{"idempotency-max", ret.IdempotencyCount}, {"dead-letter-max", ret.DeadLetterCount}, {"history-max", ret.HistoryCount}, {"message-dead-letter-max", ret.MessageDeadLetterCount}} {
		if c.v == 0 || c.v < -1 {
			return fmt.Errorf("--%s %d: want a positive count, or -1 for no limit", c.name, c.v)
		}
	}
	for _, c := range []struct {
		name string
		v    time.Duration
	}{{"receipt-retention", ret.ReceiptAge}, {"audit-retention", ret.AuditAge}, {"egress-retention", ret.EgressAge},
		{"idempotency-retention", ret.IdempotencyAge}, {"dead-letter-retention", ret.DeadLetterAge}, {"history-retention", ret.HistoryAge}, {"message-dead-letter-retention", ret.MessageDeadLetterAge}} {
		if c.v == 0 {
			return fmt.Errorf("--%s 0: want a duration like 24h, or -1s to keep records", c.name)
		}
	}
	return nil
}

func run(args []string, stderr io.Writer) int {
	badEnv = "" // a run reports only its own environment's errors
	fs := flag.NewFlagSet("statefun run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	modulePath := fs.String("module", env("STATEFUN_MODULE", "module.yaml"), "the module.yaml to run (env STATEFUN_MODULE)")
	dataDir := fs.String("data-dir", env("STATEFUN_DATA_DIR", "statefun-data"), "directory of the embedded store (env STATEFUN_DATA_DIR)")
	adminAddr := fs.String("admin-addr", env("STATEFUN_ADMIN_ADDR", "127.0.0.1:8070"), "admin listener: /metrics, /healthz, /readyz (env STATEFUN_ADMIN_ADDR)")
	partitions := fs.Int("partitions", 0, "partitions of a new store; 0 adopts the store's, or 16 for a new one (env STATEFUN_PARTITIONS)")
	listenHost := fs.String("listen-host", env("STATEFUN_LISTEN_HOST", app.DefaultListenHost), "host the module's playground ingress and egress ports bind to; 0.0.0.0 or :: binds every interface, as in a container (env STATEFUN_LISTEN_HOST; docs/ingress.md)")
	playgroundHosts := fs.String("playground-allowed-hosts", env("STATEFUN_PLAYGROUND_ALLOWED_HOSTS", ""), "comma-separated Host names (host or host:port) the playground ingress and egress answer besides localhost, 127.0.0.0/8 and [::1], such as the names they are reached by with --listen-host 0.0.0.0; any other Host is refused, against DNS rebinding (env STATEFUN_PLAYGROUND_ALLOWED_HOSTS; docs/ingress.md)")
	playgroundOrigins := fs.String("playground-allowed-origins", env("STATEFUN_PLAYGROUND_ALLOWED_ORIGINS", ""), "comma-separated origins (scheme://host[:port]) whose browser pages may send requests to the playground ingress and egress; other cross-origin requests, GET included, are refused (env STATEFUN_PLAYGROUND_ALLOWED_ORIGINS)")
	apiTokens := fs.String("api-tokens", env("STATEFUN_API_TOKENS", ""), "file of state API bearer tokens, one \"<name> <secret> <read,write>\" per line; without it the admin listener must be loopback (env STATEFUN_API_TOKENS)")
	requireReason := fs.Bool("api-require-reason", env("STATEFUN_API_REQUIRE_REASON", "") == "true", "refuse state API mutations without a Statefun-Reason header (env STATEFUN_API_REQUIRE_REASON=true)")
	allowedHosts := fs.String("api-allowed-hosts", env("STATEFUN_API_ALLOWED_HOSTS", ""), "comma-separated Host names (host or host:port) the admin listener answers besides localhost, 127.0.0.0/8 and [::1]; without tokens any other Host is refused, against DNS rebinding (env STATEFUN_API_ALLOWED_HOSTS)")
	allowedOrigins := fs.String("api-allowed-origins", env("STATEFUN_API_ALLOWED_ORIGINS", ""), "comma-separated origins (scheme://host[:port]) whose browser pages may change state through the API; other cross-origin changes are refused (env STATEFUN_API_ALLOWED_ORIGINS)")
	tlsCert := fs.String("tls-cert", env("STATEFUN_TLS_CERT", ""), "certificate file: serve the admin listener over https (env STATEFUN_TLS_CERT)")
	tlsKey := fs.String("tls-key", env("STATEFUN_TLS_KEY", ""), "key file for --tls-cert (env STATEFUN_TLS_KEY)")
	logLevel := fs.String("log-level", env("STATEFUN_LOG_LEVEL", "info"), "debug, info, warn or error (env STATEFUN_LOG_LEVEL)")
	memTable := fs.String("store-memtable-size", env("STATEFUN_STORE_MEMTABLE_SIZE", "8MiB"), "size of one memtable of the store: larger absorbs bigger bursts, smaller keeps a small store small (env STATEFUN_STORE_MEMTABLE_SIZE; docs/storage.md)")
	diskReserve := fs.String("disk-reserve", env("STATEFUN_DISK_RESERVE", "auto"), "free disk space below which new work is refused with 503; the runtime does not start below half of it; auto is 4 x memtable + 16MiB, off disables (env STATEFUN_DISK_RESERVE)")
	ret := retentionFlags(fs)
	cluster := registerClusterFlags(fs)
	maxConns := fs.Int("max-conns", envInt("STATEFUN_MAX_CONNS", 0), "connections each listener serves at once; over it the longest-idle one is closed or the new one answered 503; 0 derives it from the file-descriptor limit, at most 4096 (env STATEFUN_MAX_CONNS; docs/limits.md)")
	readHeaderTimeout := fs.Duration("read-header-timeout", envDuration("STATEFUN_READ_HEADER_TIMEOUT", app.DefaultReadHeaderTimeout), "time a client has to send a request's head, on every listener (env STATEFUN_READ_HEADER_TIMEOUT)")
	readTimeout := fs.Duration("read-timeout", envDuration("STATEFUN_READ_TIMEOUT", app.DefaultReadTimeout), "time a client has to send a whole request, on every listener (env STATEFUN_READ_TIMEOUT)")
	writeTimeout := fs.Duration("write-timeout", envDuration("STATEFUN_WRITE_TIMEOUT", app.DefaultWriteTimeout), "time from a request's head to the end of its answer; the admin listener keeps at least the longest ?wait= plus 30s (env STATEFUN_WRITE_TIMEOUT)")
	idleTimeout := fs.Duration("idle-timeout", envDuration("STATEFUN_IDLE_TIMEOUT", app.DefaultIdleTimeout), "keep-alive connections idle this long are closed, on every listener (env STATEFUN_IDLE_TIMEOUT)")
	maxHeaderBytes := fs.Int("max-header-bytes", envInt("STATEFUN_MAX_HEADER_BYTES", app.DefaultMaxHeaderBytes), "largest request head, on every listener (env STATEFUN_MAX_HEADER_BYTES)")
	maxCallsPerType := fs.Int("max-calls-per-type", envInt("STATEFUN_MAX_CALLS_PER_TYPE", 0), "calls in flight per function type on an endpoint; 0 means half the endpoint's pool_size for a namespace endpoint, all of it for a one-type endpoint (env STATEFUN_MAX_CALLS_PER_TYPE)")
	maxWildcardTypes := fs.Int("max-wildcard-types", envInt("STATEFUN_MAX_WILDCARD_TYPES", functions.DefaultMaxWildcardTypes), "distinct function types a namespace endpoint (functions: ns/*) serves; a message to one more is refused (the ingress answers 422); types holding state are always served; negative means no bound (env STATEFUN_MAX_WILDCARD_TYPES; docs/limits.md)")
	fixedCalls := fs.Bool("fixed-calls", envBool("STATEFUN_FIXED_CALLS", false), "keep each function type's calls in flight at --max-calls-per-type instead of adapting them to the fewest that give the most throughput (env STATEFUN_FIXED_CALLS; docs/limits.md)")
	adminLane := fs.Bool("admin-lane", envBool("STATEFUN_ADMIN_LANE", true), "serve admin requests (state API, metrics, console) ahead of the load: the runtime's busy goroutines look for them every 100µs while an admin client is active; false serves them like any other connection (env STATEFUN_ADMIN_LANE; docs/limits.md)")
	ingressAnswers := fs.Int("ingress-answers", envInt("STATEFUN_INGRESS_ANSWERS", 0), "playground ingress requests woken with their answer at once after a group commit, the rest in turn; 0 means two per processor (env STATEFUN_INGRESS_ANSWERS; docs/limits.md)")
	timerWindow := fs.Int("timer-window", envInt("STATEFUN_TIMER_WINDOW", partition.DefaultTimerWindow), "delayed messages one partition keeps in memory, the earliest due; the others wait in the store and are read as these fire (env STATEFUN_TIMER_WINDOW; docs/limits.md)")
	pauseAfter := fs.String("pause-after", env("STATEFUN_PAUSE_AFTER", ""), "poison policy: pause an address after this many failed attempts of one batch, per function type: \"ns/type=5,ns/*=3,*=10\"; a type no rule names retries until it succeeds (env STATEFUN_PAUSE_AFTER; docs/partition.md)")
	keepIngressMembership := fs.Bool("kafka-ingress-keep-membership", envBool("STATEFUN_KAFKA_INGRESS_KEEP_MEMBERSHIP", false), "embedded mode: a clean stop keeps each Kafka ingress a member of its consumer group instead of leaving it; a restart within the session timeout keeps its partitions without a rebalance, but any other consumer joining the group meanwhile waits for that timeout (env STATEFUN_KAFKA_INGRESS_KEEP_MEMBERSHIP; docs/kafka-ingress.md)")
	newStore := fs.Bool("new-store", envBool("STATEFUN_NEW_STORE", false), "start a new empty store where the data directory lost the store it held (deleted, emptied or not mounted); without it such a start is refused. Everything the lost store held is gone for good; remove the flag after use (env STATEFUN_NEW_STORE; docs/failure-model.md)")
	resets := resetMarkers{}
	if v, ok := os.LookupEnv("STATEFUN_KAFKA_EGRESS_RESET_MARKER"); ok {
		for _, item := range splitList(v) {
			if err := resets.Set(item); err != nil && badEnv == "" {
				badEnv = fmt.Sprintf("STATEFUN_KAFKA_EGRESS_RESET_MARKER=%q: %v", v, err)
			}
		}
	}
	fs.Var(resets, "kafka-egress-reset-marker", "EGRESS=STORE@POSITION: replace this position marker of another store, which the exactly-once Kafka egress EGRESS refuses (the refusal prints the value), by one of this store, and deliver this store's whole outbox; repeat for more egresses (env STATEFUN_KAFKA_EGRESS_RESET_MARKER, comma-separated; docs/kafka-egress.md)")
	pauseOnViolation := fs.Bool("pause-on-violation", env("STATEFUN_PAUSE_ON_VIOLATION", "") == "true", "poison policy: pause an address at once when its function breaks the protocol (env STATEFUN_PAUSE_ON_VIOLATION=true)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if badEnv != "" {
		fmt.Fprintf(stderr, "statefun run: %s\n", badEnv)
		return 2
	}
	clusterCfg, err := cluster.config()
	if err != nil {
		printErrors(stderr, "statefun run: ", err)
		return 2
	}
	if clusterCfg != nil && *partitions != 0 {
		fmt.Fprintf(stderr, "statefun run: --partitions is the embedded store's; in cluster mode P is the application's: use --cluster-partitions\n")
		return 2
	}
	if clusterCfg != nil && len(resets) > 0 {
		fmt.Fprintf(stderr, "statefun run: --kafka-egress-reset-marker is the embedded Kafka egress's; in cluster mode egress records are produced in the node's transactions, without position markers\n")
		return 2
	}
	if clusterCfg != nil && *keepIngressMembership {
		fmt.Fprintf(stderr, "statefun run: --kafka-ingress-keep-membership is the embedded Kafka ingress's; in cluster mode the node's session consumes the ingress topics, and --cluster-leave-on-stop decides whether it leaves the group\n")
		return 2
	}
	if *timerWindow < 1 {
		fmt.Fprintf(stderr, "statefun run: --timer-window %d: want at least 1 delayed message per partition\n", *timerWindow)
		return 2
	}
	pausePolicy, err := engine.ParsePauseAfter(*pauseAfter)
	if err != nil {
		fmt.Fprintf(stderr, "statefun run: %v\n", strings.TrimPrefix(err.Error(), "engine: "))
		return 2
	}
	memBytes, err := parseBytes(*memTable)
	if err != nil || memBytes < 1<<20 || memBytes >= 4<<30 {
		fmt.Fprintf(stderr, "statefun run: --store-memtable-size %q: want a size from 1MiB to 4GiB, like 8MiB\n", *memTable)
		return 2
	}
	var reserve int64 // auto
	switch *diskReserve {
	case "auto":
	case "off":
		reserve = -1
	default:
		n, err := parseBytes(*diskReserve)
		if err != nil || n <= 0 {
			fmt.Fprintf(stderr, "statefun run: --disk-reserve %q: want auto, off or a size like 256MiB\n", *diskReserve)
			return 2
		}
		reserve = int64(n)
	}
	if err := checkRetention(ret); err != nil {
		fmt.Fprintf(stderr, "statefun run: %v\n", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "statefun run: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if v, ok := os.LookupEnv("STATEFUN_PARTITIONS"); ok && *partitions == 0 {
		n, err := strconv.Atoi(v)
		if err != nil {
			fmt.Fprintf(stderr, "statefun run: STATEFUN_PARTITIONS=%q is not a number\n", v)
			return 2
		}
		*partitions = n
	}
	if *partitions < 0 || *partitions > 65536 {
		fmt.Fprintf(stderr, "statefun run: --partitions %d: want 0 (adopt the store's) or 1 to 65536\n", *partitions)
		return 2
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(stderr, "statefun run: --log-level %q: want debug, info, warn or error\n", *logLevel)
		return 2
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if _, ok := os.LookupEnv("GOGC"); !ok {
		// The live heap is small (7–9 MiB under load) and garbage comes
		// fast; at the default 100 the collector took about 7% of the CPU.
		// 400 cut the runtime's CPU per message by about 7% for 25–35 MiB
		// more heap (docs/benchmarks.md). GOGC set in the environment wins.
		debug.SetGCPercent(400)
	}

	api := stateapi.Options{RequireReason: *requireReason, AllowedHosts: splitList(*allowedHosts), AllowedOrigins: splitList(*allowedOrigins)}
	if err := api.Validate(); err != nil {
		fmt.Fprintf(stderr, "statefun run: %v\n", err)
		return 2
	}
	playground := app.Config{PlaygroundAllowedHosts: splitList(*playgroundHosts), PlaygroundAllowedOrigins: splitList(*playgroundOrigins)}
	if err := app.PlaygroundGuard(playground).Validate(); err != nil {
		fmt.Fprintf(stderr, "statefun run: %v\n", err)
		return 2
	}
	if *apiTokens != "" {
		tokens, err := stateapi.LoadTokens(*apiTokens)
		if err != nil {
			fmt.Fprintf(stderr, "statefun: %v\n", err)
			return 1
		}
		api.Tokens = tokens
	}
	if clusterCfg != nil {
		if err := clusterCfg.CheckTokens(len(api.Tokens) > 0); err != nil {
			printErrors(stderr, "statefun run: ", err)
			return 2
		}
	}
	// Signals are taken before the runtime starts: its admin listener can
	// answer /readyz before Start returns, and a SIGTERM sent on that
	// answer must stop it cleanly (flushing the store), not kill it. A
	// second signal, as when a start or a stop hangs, ends the process at
	// once.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() { <-ctx.Done(); stop() }()
	a, err := app.Start(app.Config{
		API:        api,
		TLSCert:    *tlsCert,
		TLSKey:     *tlsKey,
		ModulePath: *modulePath,
		DataDir:    *dataDir,
		AdminAddr:  *adminAddr,
		Partitions: *partitions,
		ListenHost: *listenHost,

		PlaygroundAllowedHosts:   playground.PlaygroundAllowedHosts,
		PlaygroundAllowedOrigins: playground.PlaygroundAllowedOrigins,
		Logger:                   logger,
		Store:                    store.Options{MemTableSize: memBytes, Retention: *ret},
		DiskReserve:              reserve,

		PauseAfter:       pausePolicy,
		PauseOnViolation: *pauseOnViolation,
		Listeners: app.ListenerLimits{
			MaxConns:          *maxConns,
			ReadHeaderTimeout: *readHeaderTimeout,
			ReadTimeout:       *readTimeout,
			WriteTimeout:      *writeTimeout,
			IdleTimeout:       *idleTimeout,
			MaxHeaderBytes:    *maxHeaderBytes,
		},
		MaxCallsPerType:  *maxCallsPerType,
		MaxWildcardTypes: *maxWildcardTypes,
		FixedCalls:       *fixedCalls,
		NoAdminLane:      !*adminLane,
		IngressAnswers:   *ingressAnswers,
		TimerWindow:      *timerWindow,
		Cluster:          clusterCfg,

		KafkaIngressKeepMembership: *keepIngressMembership,
		NewStore:                   *newStore,
		KafkaEgressResetMarkers:    resets,
	})
	if err != nil {
		fmt.Fprintf(stderr, "statefun: %v\n", err)
		return 1
	}
	code := 0
	select {
	case <-ctx.Done():
		logger.Info("shutting down")
	case <-a.Failed():
		code = 1
	}
	if err := a.Close(); err != nil && !errors.Is(err, context.Canceled) {
		logger.Error("shutdown", "error", err)
		code = 1
	}
	return code
}

// resetMarkers is the value of --kafka-egress-reset-marker: per egress id,
// the marker to replace.
type resetMarkers map[string]kafkaegress.MarkerRef

func (r resetMarkers) String() string {
	var out []string
	for id, m := range r {
		out = append(out, id+"="+m.String())
	}
	return strings.Join(out, ",")
}

// Set reads one EGRESS=STORE@POSITION.
func (r resetMarkers) Set(v string) error {
	id, ref, ok := strings.Cut(v, "=")
	if !ok || !strings.Contains(id, "/") {
		return fmt.Errorf("%q: want EGRESS=STORE@POSITION, like kc/out=5e1c0b9d7a3f4e21a0b1c2d3e4f50617@50000, as the refusal prints it", v)
	}
	m, err := kafkaegress.ParseMarkerRef(ref)
	if err != nil {
		return err
	}
	if _, dup := r[id]; dup {
		return fmt.Errorf("%q: egress %s is named twice", v, id)
	}
	r[id] = m
	return nil
}
