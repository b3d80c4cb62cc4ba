package main

// `statefun run`: the runtime. Every flag has an environment variable
// (bindEnv); a flag beats its variable, which beats the default.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/signal"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/statefun-go/statefun/internal/app"
	"github.com/statefun-go/statefun/internal/engine"
	"github.com/statefun-go/statefun/internal/functions"
	"github.com/statefun-go/statefun/internal/kafkaegress"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/stateapi"
	"github.com/statefun-go/statefun/internal/store"
)

// run runs `statefun run args...` with stderr and returns the exit code;
// tests call it in-process.
func run(args []string, stderr io.Writer) int {
	return newCLI(strings.NewReader(""), io.Discard, stderr).execute(append([]string{"run"}, args...))
}

// newRunCmd builds `statefun run`.
func newRunCmd(c *cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run [flags]",
		Short: "Run the runtime: the module's functions, ingresses and egresses, and the admin listener",
		Long: `Runs the application module.yaml describes on the embedded store in --data-dir, or,
given the --cluster-* settings, as one node of an application on Kafka
(docs/explanation/cluster.md). The admin listener (--admin-addr) serves the state API,
/metrics, /healthz, /readyz and the console.

SIGINT or SIGTERM stops it cleanly; a second signal ends it at once.

Besides the flags' variables: STATEFUN_CLUSTER_SECRET gives the cluster
secret itself (it has no flag: a command line is visible to every user of the
machine); GOGC, when set, replaces the collector setting of 400 run uses
(docs/benchmarks.md).`,
		Args: noArgs,
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	modulePath := fs.String("module", "module.yaml", "the module.yaml to run")
	bindEnv(fs, "module", "STATEFUN_MODULE")
	dataDir := fs.String("data-dir", "statefun-data", "directory of the embedded store")
	bindEnv(fs, "data-dir", "STATEFUN_DATA_DIR")
	adminAddr := fs.String("admin-addr", "127.0.0.1:8070", "admin listener: /metrics, /healthz, /readyz")
	bindEnv(fs, "admin-addr", "STATEFUN_ADMIN_ADDR")
	partitions := fs.Int("partitions", 0, "partitions of a new store; 0 adopts the store's, or 16 for a new one")
	bindEnv(fs, "partitions", "STATEFUN_PARTITIONS")
	listenHost := fs.String("listen-host", app.DefaultListenHost, "host the module's playground ingress and egress ports bind to; 0.0.0.0 or :: binds every interface, as in a container (docs/how-to/secure.md)")
	bindEnv(fs, "listen-host", "STATEFUN_LISTEN_HOST")
	playgroundHosts := fs.String("playground-allowed-hosts", "", "comma-separated Host names (host or host:port) the playground ingress and egress answer besides localhost, 127.0.0.0/8 and [::1], such as the names they are reached by with --listen-host 0.0.0.0; any other Host is refused, against DNS rebinding (docs/how-to/secure.md)")
	bindEnv(fs, "playground-allowed-hosts", "STATEFUN_PLAYGROUND_ALLOWED_HOSTS")
	playgroundOrigins := fs.String("playground-allowed-origins", "", "comma-separated origins (scheme://host[:port]) whose browser pages may send requests to the playground ingress and egress; other cross-origin requests, GET included, are refused")
	bindEnv(fs, "playground-allowed-origins", "STATEFUN_PLAYGROUND_ALLOWED_ORIGINS")
	apiTokens := fs.String("api-tokens", "", "file of state API bearer tokens, one \"<name> <secret> <read,write>\" per line; without it the admin listener must be loopback")
	bindEnv(fs, "api-tokens", "STATEFUN_API_TOKENS")
	requireReason := fs.Bool("api-require-reason", false, "refuse state API mutations without a Statefun-Reason header")
	bindEnv(fs, "api-require-reason", "STATEFUN_API_REQUIRE_REASON")
	allowedHosts := fs.String("api-allowed-hosts", "", "comma-separated Host names (host or host:port) the admin listener answers besides localhost, 127.0.0.0/8 and [::1]; without tokens any other Host is refused, against DNS rebinding")
	bindEnv(fs, "api-allowed-hosts", "STATEFUN_API_ALLOWED_HOSTS")
	allowedOrigins := fs.String("api-allowed-origins", "", "comma-separated origins (scheme://host[:port]) whose browser pages may change state through the API; other cross-origin changes are refused")
	bindEnv(fs, "api-allowed-origins", "STATEFUN_API_ALLOWED_ORIGINS")
	tlsCert := fs.String("tls-cert", "", "certificate file: serve the admin listener over https")
	bindEnv(fs, "tls-cert", "STATEFUN_TLS_CERT")
	tlsKey := fs.String("tls-key", "", "key file for --tls-cert")
	bindEnv(fs, "tls-key", "STATEFUN_TLS_KEY")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	bindEnv(fs, "log-level", "STATEFUN_LOG_LEVEL")
	memTable := fs.String("store-memtable-size", "8MiB", "size of one memtable of the store: larger absorbs bigger bursts, smaller keeps a small store small (docs/reference/storage.md)")
	bindEnv(fs, "store-memtable-size", "STATEFUN_STORE_MEMTABLE_SIZE")
	diskReserve := fs.String("disk-reserve", "auto", "free disk space below which new work is refused with 503; the runtime does not start below half of it; auto is 4 x memtable + 16MiB, off disables")
	bindEnv(fs, "disk-reserve", "STATEFUN_DISK_RESERVE")
	ret := retentionFlags(fs)
	cluster := registerClusterFlags(fs, c.env)
	maxConns := fs.Int("max-conns", 0, "connections each listener serves at once; over it the longest-idle one is closed or the new one answered 503; 0 derives it from the file-descriptor limit, at most 4096 (docs/reference/limits.md)")
	bindEnv(fs, "max-conns", "STATEFUN_MAX_CONNS")
	readHeaderTimeout := fs.Duration("read-header-timeout", app.DefaultReadHeaderTimeout, "time a client has to send a request's head, on every listener")
	bindEnv(fs, "read-header-timeout", "STATEFUN_READ_HEADER_TIMEOUT")
	readTimeout := fs.Duration("read-timeout", app.DefaultReadTimeout, "time a client has to send a whole request, on every listener")
	bindEnv(fs, "read-timeout", "STATEFUN_READ_TIMEOUT")
	writeTimeout := fs.Duration("write-timeout", app.DefaultWriteTimeout, "time from a request's head to the end of its answer; the admin listener keeps at least the longest ?wait= plus 30s")
	bindEnv(fs, "write-timeout", "STATEFUN_WRITE_TIMEOUT")
	idleTimeout := fs.Duration("idle-timeout", app.DefaultIdleTimeout, "keep-alive connections idle this long are closed, on every listener")
	bindEnv(fs, "idle-timeout", "STATEFUN_IDLE_TIMEOUT")
	maxHeaderBytes := fs.Int("max-header-bytes", app.DefaultMaxHeaderBytes, "largest request head, on every listener")
	bindEnv(fs, "max-header-bytes", "STATEFUN_MAX_HEADER_BYTES")
	maxCallsPerType := fs.Int("max-calls-per-type", 0, "calls in flight per function type on an endpoint; 0 means half the endpoint's pool_size for a namespace endpoint, all of it for a one-type endpoint")
	bindEnv(fs, "max-calls-per-type", "STATEFUN_MAX_CALLS_PER_TYPE")
	maxWildcardTypes := fs.Int("max-wildcard-types", functions.DefaultMaxWildcardTypes, "distinct function types a namespace endpoint (functions: ns/*) serves; a message to one more is refused (the ingress answers 422); types holding state are always served; negative means no bound (docs/reference/limits.md)")
	bindEnv(fs, "max-wildcard-types", "STATEFUN_MAX_WILDCARD_TYPES")
	maxBacklog := fs.Int("max-backlog", engine.DefaultMaxBacklog, "messages one partition holds in memory (queued for its addresses or in calls); past it the ingresses and the state API answer busy, and messages functions send it or that fall due wait in its inbox in the store, paged in as it drains (docs/reference/limits.md)")
	bindEnv(fs, "max-backlog", "STATEFUN_MAX_BACKLOG")
	maxBacklogBytes := fs.Int64("max-backlog-bytes", engine.DefaultMaxBacklogBytes, "bytes of messages one partition holds in memory, the same way as --max-backlog (docs/reference/limits.md)")
	bindEnv(fs, "max-backlog-bytes", "STATEFUN_MAX_BACKLOG_BYTES")
	timerWindow := fs.Int("timer-window", partition.DefaultTimerWindow, "delayed messages one partition keeps in memory, the earliest due; the others wait in the store and are read as these fire (docs/reference/limits.md)")
	bindEnv(fs, "timer-window", "STATEFUN_TIMER_WINDOW")
	fixedCalls := fs.Bool("fixed-calls", false, "keep each function type's calls in flight at --max-calls-per-type instead of adapting them to the fewest that give the most throughput (docs/reference/limits.md)")
	bindEnv(fs, "fixed-calls", "STATEFUN_FIXED_CALLS")
	adminLane := fs.Bool("admin-lane", true, "serve admin requests (state API, metrics, console) ahead of the load: the runtime's busy goroutines look for them every 100µs while an admin client is active; false serves them like any other connection (docs/reference/limits.md)")
	bindEnv(fs, "admin-lane", "STATEFUN_ADMIN_LANE")
	ingressAnswers := fs.Int("ingress-answers", 0, "playground ingress requests woken with their answer at once after a group commit, the rest in turn; 0 means two per processor, a negative number wakes every one at once (docs/reference/limits.md)")
	bindEnv(fs, "ingress-answers", "STATEFUN_INGRESS_ANSWERS")
	pauseAfter := fs.String("pause-after", "", "poison policy: pause an address after this many failed attempts of one batch, per function type: \"ns/type=5,ns/*=3,*=10\"; a type no rule names retries until it succeeds (docs/explanation/partition.md)")
	bindEnv(fs, "pause-after", "STATEFUN_PAUSE_AFTER")
	keepIngressMembership := fs.Bool("kafka-ingress-keep-membership", false, "embedded mode: a clean stop keeps each Kafka ingress a member of its consumer group instead of leaving it; a restart within the session timeout keeps its partitions without a rebalance, but any other consumer joining the group meanwhile waits for that timeout (docs/reference/kafka-ingress.md)")
	bindEnv(fs, "kafka-ingress-keep-membership", "STATEFUN_KAFKA_INGRESS_KEEP_MEMBERSHIP")
	newStore := fs.Bool("new-store", false, "start a new empty store where the data directory lost the store it held (deleted, emptied or not mounted); without it such a start is refused. Everything the lost store held is gone for good; remove the flag after use (docs/explanation/guarantees.md)")
	bindEnv(fs, "new-store", "STATEFUN_NEW_STORE")
	readOnly := fs.Bool("read-only", false, "serve the state API and the console over the store in --data-dir (a backup, or a stopped runtime's store) without changing a byte of it: no function is invoked, no delayed message fires, no Kafka ingress or egress runs, and every write is refused with a 409 naming read-only mode (docs/how-to/backup.md)")
	bindEnv(fs, "read-only", "STATEFUN_READ_ONLY")
	resets := resetMarkers{}
	fs.Var(resets, "kafka-egress-reset-marker", "EGRESS=STORE@POSITION: replace this position marker of another store, which the exactly-once Kafka egress EGRESS refuses (the refusal prints the value), by one of this store, and deliver this store's whole outbox; repeat for more egresses; the environment variable takes a comma-separated list (docs/reference/kafka-egress.md)")
	bindEnv(fs, "kafka-egress-reset-marker", "STATEFUN_KAFKA_EGRESS_RESET_MARKER")
	pauseOnViolation := fs.Bool("pause-on-violation", false, "poison policy: pause an address at once when its function breaks the protocol")
	bindEnv(fs, "pause-on-violation", "STATEFUN_PAUSE_ON_VIOLATION")

	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := applyEnv(fs, c.env); err != nil {
			return err
		}
		clusterCfg, err := cluster.config()
		if err != nil {
			return clusterUsage(err)
		}
		if clusterCfg != nil && *partitions != 0 {
			return usagef("--partitions is the embedded store's; in cluster mode P is the application's: use --cluster-partitions")
		}
		if *maxBacklog < 1 || *maxBacklogBytes < 1 {
			return usagef("--max-backlog %d, --max-backlog-bytes %d: want at least 1 message and 1 byte per partition", *maxBacklog, *maxBacklogBytes)
		}
		if *timerWindow < 1 {
			return usagef("--timer-window %d: want at least 1 delayed message per partition", *timerWindow)
		}
		if clusterCfg != nil && len(resets) > 0 {
			return usagef("--kafka-egress-reset-marker is the embedded Kafka egress's; in cluster mode egress records are produced in the node's transactions, without position markers")
		}
		if clusterCfg != nil && *keepIngressMembership {
			return usagef("--kafka-ingress-keep-membership is the embedded Kafka ingress's; in cluster mode the node's session consumes the ingress topics, and --cluster-leave-on-stop decides whether it leaves the group")
		}
		pausePolicy, err := engine.ParsePauseAfter(*pauseAfter)
		if err != nil {
			return usagef("%v", strings.TrimPrefix(err.Error(), "engine: "))
		}
		memBytes, err := parseBytes(*memTable)
		if err != nil || memBytes < 1<<20 || memBytes >= 4<<30 {
			return usagef("--store-memtable-size %q: want a size from 1MiB to 4GiB, like 8MiB", *memTable)
		}
		var reserve int64 // auto
		switch *diskReserve {
		case "auto":
		case "off":
			reserve = -1
		default:
			n, err := parseBytes(*diskReserve)
			if err != nil || n <= 0 {
				return usagef("--disk-reserve %q: want auto, off or a size like 256MiB", *diskReserve)
			}
			reserve = int64(n)
		}
		if err := checkRetention(ret); err != nil {
			return usagef("%v", err)
		}
		if *partitions < 0 || *partitions > 65536 {
			return usagef("--partitions %d: want 0 (adopt the store's) or 1 to 65536", *partitions)
		}
		var level slog.Level
		if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
			return usagef("--log-level %q: want debug, info, warn or error", *logLevel)
		}
		logger := slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: level}))
		if _, ok := c.env.lookup("GOGC"); !ok {
			// The live heap is small (7–9 MiB under load) and garbage comes
			// fast; at the default 100 the collector took about 7% of the CPU.
			// 400 cut the runtime's CPU per message by about 7% for 25–35 MiB
			// more heap (an interleaved A/B of BenchmarkEndToEnd at 10,000
			// addresses). GOGC set in the environment wins.
			debug.SetGCPercent(400)
		}

		api := stateapi.Options{RequireReason: *requireReason, AllowedHosts: splitList(*allowedHosts), AllowedOrigins: splitList(*allowedOrigins)}
		if err := api.Validate(); err != nil {
			return usagef("%v", err)
		}
		playground := app.Config{PlaygroundAllowedHosts: splitList(*playgroundHosts), PlaygroundAllowedOrigins: splitList(*playgroundOrigins)}
		if err := app.PlaygroundGuard(playground).Validate(); err != nil {
			return usagef("%v", err)
		}
		if *apiTokens != "" {
			tokens, err := stateapi.LoadTokens(*apiTokens)
			if err != nil {
				return runtimeError{err}
			}
			api.Tokens = tokens
		}
		if clusterCfg != nil {
			if err := clusterCfg.CheckTokens(len(api.Tokens) > 0); err != nil {
				return clusterUsage(err)
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
			TimerWindow:      *timerWindow,
			MaxBacklog:       *maxBacklog,
			MaxBacklogBytes:  *maxBacklogBytes,
			FixedCalls:       *fixedCalls,
			NoAdminLane:      !*adminLane,
			IngressAnswers:   *ingressAnswers,
			Cluster:          clusterCfg,

			KafkaIngressKeepMembership: *keepIngressMembership,
			NewStore:                   *newStore,
			KafkaEgressResetMarkers:    resets,
			ReadOnly:                   *readOnly,
		})
		if err != nil {
			return runtimeError{err}
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
		if code != 0 {
			return exitError{code}
		}
		return nil
	}
	return cmd
}

// clusterUsage is a usage error of every line of a cluster configuration
// error, without the package's prefix.
func clusterUsage(err error) error {
	var lines []string
	for _, line := range strings.Split(err.Error(), "\n") {
		lines = append(lines, strings.TrimPrefix(line, "cluster: "))
	}
	return usageError{strings.Join(lines, "\n")}
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
func retentionFlags(fs *pflag.FlagSet) *store.Retention {
	ret := new(store.Retention)
	fs.DurationVar(&ret.ReceiptAge, "receipt-retention", store.DefaultReceiptAge, "how long mutation receipts are kept; -1s keeps them")
	bindEnv(fs, "receipt-retention", "STATEFUN_RECEIPT_RETENTION")
	fs.IntVar(&ret.ReceiptCount, "receipt-max", store.DefaultReceiptCount, "most mutation receipts kept; -1 for no limit")
	bindEnv(fs, "receipt-max", "STATEFUN_RECEIPT_MAX")
	fs.DurationVar(&ret.AuditAge, "audit-retention", store.DefaultAuditAge, "how long audit records are kept; -1s keeps them")
	bindEnv(fs, "audit-retention", "STATEFUN_AUDIT_RETENTION")
	fs.IntVar(&ret.AuditCount, "audit-max", store.DefaultAuditCount, "most audit records kept; -1 for no limit")
	bindEnv(fs, "audit-max", "STATEFUN_AUDIT_MAX")
	fs.DurationVar(&ret.EgressAge, "egress-retention", store.DefaultEgressAge, "how long an egress record waits for a consumer before it is deleted; -1s keeps them")
	bindEnv(fs, "egress-retention", "STATEFUN_EGRESS_RETENTION")
	fs.IntVar(&ret.EgressCount, "egress-max", store.DefaultEgressCount, "most records waiting in one egress topic; older ones are deleted; -1 for no limit")
	bindEnv(fs, "egress-max", "STATEFUN_EGRESS_MAX")
	fs.DurationVar(&ret.IdempotencyAge, "idempotency-retention", store.DefaultIdempotencyAge, "how long an ingress Idempotency-Key is remembered; a retry after that makes a new message; -1s keeps them")
	bindEnv(fs, "idempotency-retention", "STATEFUN_IDEMPOTENCY_RETENTION")
	fs.IntVar(&ret.IdempotencyCount, "idempotency-max", store.DefaultIdempotencyCount, "most ingress Idempotency-Keys remembered; the oldest are forgotten; -1 for no limit")
	bindEnv(fs, "idempotency-max", "STATEFUN_IDEMPOTENCY_MAX")
	fs.DurationVar(&ret.DeadLetterAge, "dead-letter-retention", store.DefaultDeadLetterAge, "how long records a Kafka ingress could not deliver are kept as dead letters; -1s keeps them")
	bindEnv(fs, "dead-letter-retention", "STATEFUN_DEAD_LETTER_RETENTION")
	fs.IntVar(&ret.DeadLetterCount, "dead-letter-max", store.DefaultDeadLetterCount, "most dead letters kept, over every ingress; the oldest are deleted; -1 for no limit")
	bindEnv(fs, "dead-letter-max", "STATEFUN_DEAD_LETTER_MAX")
	fs.DurationVar(&ret.HistoryAge, "history-retention", store.DefaultHistoryAge, "how long the changes of a state entry are kept in its history (its latest change with a value always is); -1s keeps them")
	bindEnv(fs, "history-retention", "STATEFUN_HISTORY_RETENTION")
	fs.IntVar(&ret.HistoryCount, "history-max", store.DefaultHistoryCount, "most changes kept in the history of one state entry; -1 for no limit")
	bindEnv(fs, "history-max", "STATEFUN_HISTORY_MAX")
	fs.DurationVar(&ret.MessageDeadLetterAge, "message-dead-letter-retention", store.DefaultMessageDeadLetterAge, "how long messages an operator skipped out of an inbox are kept to be re-sent; -1s keeps them")
	bindEnv(fs, "message-dead-letter-retention", "STATEFUN_MESSAGE_DEAD_LETTER_RETENTION")
	fs.IntVar(&ret.MessageDeadLetterCount, "message-dead-letter-max", store.DefaultMessageDeadLetterCount, "most skipped messages kept; the oldest are deleted; -1 for no limit")
	bindEnv(fs, "message-dead-letter-max", "STATEFUN_MESSAGE_DEAD_LETTER_MAX")
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

// resetMarkers is the value of --kafka-egress-reset-marker: per egress id,
// the marker to replace.
type resetMarkers map[string]kafkaegress.MarkerRef

func (r resetMarkers) String() string {
	var out []string
	for id, m := range r {
		out = append(out, id+"="+m.String())
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

// Type names the value in help.
func (r resetMarkers) Type() string { return "EGRESS=STORE@POSITION" }

// SetEnv reads the environment variable: a comma-separated list.
func (r resetMarkers) SetEnv(v string) error {
	for _, item := range splitList(v) {
		if err := r.Set(item); err != nil {
			return err
		}
	}
	return nil
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
