// Package app assembles a runnable application from a module.yaml: the
// store, the engine, the remote-function clients, the ingress and egress
// listeners and the admin listener. cmd/statefun and the end-to-end tests
// both start the runtime through it.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/admin"
	"github.com/statefun-go/statefun/internal/browserguard"
	"github.com/statefun-go/statefun/internal/cluster/clusterconfig"
	"github.com/statefun-go/statefun/internal/cluster/forward"
	"github.com/statefun-go/statefun/internal/cluster/node"
	"github.com/statefun-go/statefun/internal/cluster/session"
	"github.com/statefun-go/statefun/internal/cluster/topics"
	"github.com/statefun-go/statefun/internal/cluster/trust"
	"github.com/statefun-go/statefun/internal/connlimit"
	"github.com/statefun-go/statefun/internal/diskguard"
	"github.com/statefun-go/statefun/internal/egress"
	"github.com/statefun-go/statefun/internal/engine"
	"github.com/statefun-go/statefun/internal/functions"
	"github.com/statefun-go/statefun/internal/ingress"
	"github.com/statefun-go/statefun/internal/jobs"
	"github.com/statefun-go/statefun/internal/kafkaegress"
	"github.com/statefun-go/statefun/internal/lane"
	"github.com/statefun-go/statefun/internal/module"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/stateapi"
	"github.com/statefun-go/statefun/internal/store"
)

// Config is how the runtime is started.
type Config struct {
	// ModulePath is the module.yaml to run. Required.
	ModulePath string
	// DataDir holds the store. Required.
	DataDir string
	// AdminAddr is the admin listener's address; default 127.0.0.1:8070.
	AdminAddr string
	// Partitions is P for a new store; 0 adopts an existing store's P (16
	// for a new one). A different P than the store's is refused.
	Partitions int
	// ListenHost is the host the module's playground ingress and egress
	// ports bind to; default "127.0.0.1", this machine only (StateFun's
	// playground binds every interface). "0.0.0.0" or "::" binds every
	// interface, as a container needs.
	ListenHost string
	// PlaygroundAllowedHosts are Host header values the playground
	// ingress and egress answer besides the loopback names (localhost,
	// 127.0.0.0/8, [::1]): a host name or IP, matching any port, or
	// host:port; the names they are reached by when ListenHost is not
	// loopback. Any other Host is a 421, against DNS rebinding
	// (browserguard.Options.AllowedHosts).
	PlaygroundAllowedHosts []string
	// PlaygroundAllowedOrigins are origins (scheme://host[:port]) whose
	// browser pages may send requests to the playground ingress and
	// egress; any other cross-origin request, GET included (a GET pops
	// the egress), is a 403.
	PlaygroundAllowedOrigins []string
	// RetryBase and RetryMax bound the backoff of failed calls (defaults
	// 50ms and 10s).
	RetryBase, RetryMax time.Duration
	// PauseAfter and PauseOnViolation are the poison policy (engine.Options,
	// engine.ParsePauseAfter); the zero values retry a failed batch until
	// it succeeds.
	PauseAfter       func(t address.TypeName) int
	PauseOnViolation bool
	// API configures the state access API served on the admin listener.
	// Without tokens the admin listener must be on a loopback address.
	API stateapi.Options
	// TLSCert and TLSKey, when both set, make the admin listener serve
	// https.
	TLSCert, TLSKey string
	Logger          *slog.Logger
	// Store tunes the embedded store: MemTableSize, DiskSlowThreshold,
	// Retention, SweepInterval. Start sets Partitions, Logger and Metrics.
	Store store.Options
	// DiskReserve is the free space, in bytes, of the data directory's
	// filesystem below which new work is refused (and below half of which
	// the runtime does not start). Zero means
	// diskguard.DefaultReserve(memtable size); negative turns the guard off.
	DiskReserve int64
	// MaxCallsPerType caps the calls in flight per function type on each
	// endpoint; 0 means half the endpoint's pool for an endpoint that
	// serves a namespace, the whole pool for one that serves one type
	// (functions.Options.MaxCallsPerType, docs/reference/limits.md).
	MaxCallsPerType int
	// FixedCalls keeps calls in flight at MaxCallsPerType instead of an
	// adaptive limit (functions.Options.FixedCalls, docs/reference/limits.md).
	FixedCalls bool
	// MaxWildcardTypes bounds the distinct function types a namespace
	// wildcard endpoint serves; 0 means functions.DefaultMaxWildcardTypes,
	// negative no bound (functions.Options.MaxWildcardTypes,
	// docs/reference/limits.md).
	MaxWildcardTypes int
	// NoAdminLane serves the admin listener like the others, without the
	// priority lane that lets its requests go ahead of the load
	// (internal/lane, docs/reference/limits.md).
	NoAdminLane bool
	// IngressAnswers is how many playground ingress requests are woken
	// with their answer at once (engine.Options.IngressAnswers); 0 means
	// two per processor.
	IngressAnswers int
	// TimerWindow is how many pending delayed messages one partition keeps
	// in memory (engine.Options.TimerWindow); 0 means the default.
	TimerWindow int
	// MaxBacklog and MaxBacklogBytes bound the messages one partition
	// holds in memory (engine.Options); 0 means the defaults.
	MaxBacklog      int
	MaxBacklogBytes int64
	// Listeners bounds the connections and timeouts of every listener
	// (docs/reference/limits.md).
	Listeners ListenerLimits
	// KafkaIngressKeepMembership makes each Kafka ingress keep its static
	// membership of its consumer group when the runtime stops, instead of
	// leaving the group (kafkaingress.Config.KeepMembership). Embedded
	// mode only: a cluster node's ingress topics are consumed by its
	// session.
	KafkaIngressKeepMembership bool
	// NewStore lets the runtime start a new empty store where the data
	// directory lost the store it held (store.Options.NewStore,
	// docs/explanation/guarantees.md); without it such a start is refused.
	NewStore bool
	// KafkaEgressResetMarkers names, per exactly-once Kafka egress id, the
	// position marker of another store that the operator chose to replace
	// (kafkaegress.Config.ResetMarker, docs/reference/kafka-egress.md).
	KafkaEgressResetMarkers map[string]kafkaegress.MarkerRef
	// Cluster, when set, runs the application in cluster mode on Kafka
	// (docs/explanation/cluster.md); nil runs it embedded. Partitions must then be 0:
	// P is the application's.
	Cluster *clusterconfig.Config
	// ReadOnly serves the state API and the console over the store in
	// DataDir (a backup, or a stopped runtime's store) without changing
	// it: the store is opened read-only, no function is invoked, no
	// delayed message fires, no Kafka ingress or egress starts, and every
	// write is refused with a 409 naming read-only mode (readonly.go).
	// Embedded mode only.
	ReadOnly bool
}

// App is a running runtime.
type App struct {
	cfg     Config
	log     *slog.Logger
	db      *store.DB
	guard   *diskguard.Guard // nil when turned off
	failed  chan struct{}    // closed when the engine or the store failed
	closing chan struct{}    // closed by Close
	eng     *engine.Engine
	fns     *functions.Router
	kafka   *kafkaEdges
	node    *node.Node // cluster mode; nil embedded
	servers []*http.Server
	addrs   map[string]string
	names   map[string]string // listener name → what to call it in errors
	wg      sync.WaitGroup
	once    sync.Once
	lim     ListenerLimits // resolved: no zero field
	// up is set once every listener is bound: /readyz answers 503 before,
	// because the admin listener is bound first and a client that waits
	// for readiness must then find the ingress and egress listening.
	up    atomic.Bool
	connM *connlimit.Metrics
	lane  *lane.Lane // the admin listener's; nil without it
	jobs  *jobs.Manager
	// clusterJobs is the jobs' backend in cluster mode (nil embedded).
	clusterJobs *stateapi.ClusterJobs
}

// Start loads the module, opens the store, restores the partitions and
// starts every listener. Errors name what was wrong (a module error carries
// file, line and field).
func Start(cfg Config) (*App, error) {
	if cfg.ReadOnly && (cfg.Cluster != nil || cfg.NewStore || len(cfg.KafkaEgressResetMarkers) > 0) {
		return nil, errors.New("app: read-only mode (--read-only) looks into an embedded store without changing it: not with cluster mode, --new-store or --kafka-egress-reset-marker")
	}
	if cfg.Cluster != nil {
		// Refused before the module is read or a store created, so a
		// refused start leaves nothing behind.
		if err := cfg.Cluster.Validate(); err != nil {
			return nil, err
		}
		if cfg.Partitions != 0 {
			return nil, errors.New("app: Partitions is the embedded store's; in cluster mode P is the application's")
		}
		if len(cfg.KafkaEgressResetMarkers) > 0 {
			return nil, errors.New("app: --kafka-egress-reset-marker is the embedded Kafka egress's; in cluster mode egress records are produced in the node's transactions, without position markers")
		}
		if err := cfg.Cluster.CheckTokens(len(cfg.API.Tokens) > 0); err != nil {
			return nil, err
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.AdminAddr == "" {
		cfg.AdminAddr = "127.0.0.1:8070"
	}
	if cfg.ListenHost == "" {
		cfg.ListenHost = DefaultListenHost
	}
	if err := PlaygroundGuard(cfg).Validate(); err != nil {
		return nil, fmt.Errorf("app: %w", err)
	}
	if cfg.DataDir == "" {
		return nil, errors.New("app: a data directory is required")
	}
	if _, _, err := net.SplitHostPort(cfg.AdminAddr); err != nil {
		return nil, fmt.Errorf("app: admin listener address %q: %w", cfg.AdminAddr, err)
	}
	if len(cfg.API.Tokens) == 0 && !isLoopback(cfg.AdminAddr) {
		return nil, fmt.Errorf("app: the state API has no tokens, so the admin listener must be on a loopback address, not %s: give it tokens (--api-tokens) or a loopback --admin-addr", cfg.AdminAddr)
	}
	if (cfg.TLSCert == "") != (cfg.TLSKey == "") {
		return nil, errors.New("app: https needs both a certificate and a key")
	}
	if cfg.API.MaxWait <= 0 {
		cfg.API.MaxWait = time.Minute
	}
	mod, err := module.Load(cfg.ModulePath)
	if err != nil {
		return nil, err
	}
	for _, w := range mod.Warnings {
		cfg.Logger.Warn("module: " + w.Error())
	}
	if cfg.Cluster != nil {
		if err := refuseInCluster(mod, cfg); err != nil {
			return nil, err
		}
	}
	lim, err := resolveLimits(cfg, mod)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	// Besides the default Go metrics, the scheduler's latency histogram
	// (go_sched_latencies_seconds): how long goroutines wait for a CPU,
	// which is where an operator request's time goes on a saturated host.
	reg.MustRegister(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
		collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/sched/latencies:seconds$`)})),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// The admin lane is this runtime's: the admin listener joins it, the
	// engine and the playground ingress poke it (internal/lane).
	var adminLane *lane.Lane
	if !cfg.NoAdminLane {
		adminLane = lane.New(lane.Options{})
	}
	if adminLane != nil {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "statefun_admin_lane_wakes_total",
			Help: "Admin requests the runtime's busy goroutines noticed and ran ahead of the load (the admin listener's priority lane).",
		}, func() float64 { return float64(adminLane.Woken()) }))
	}
	fns, err := functions.New(mod, functions.Options{MaxCallsPerType: cfg.MaxCallsPerType, FixedCalls: cfg.FixedCalls,
		MaxWildcardTypes: cfg.MaxWildcardTypes, Metrics: functions.NewMetrics(reg), Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	kplan, err := planKafka(mod, fns)
	if err == nil {
		err = checkResets(kplan, cfg.KafkaEgressResetMarkers)
	}
	if err != nil {
		fns.Close()
		return nil, err
	}
	cfg.Store.Retention.KeepEgress = append(cfg.Store.Retention.KeepEgress, keepEgress(mod)...)
	var capp *topics.Application
	if cfg.Cluster != nil {
		// The application's P, agreed through its meta topic, is the
		// store's.
		if capp, err = ensureApplication(cfg); err != nil {
			fns.Close()
			return nil, err
		}
		cfg.Partitions = capp.Partitions
	}
	guard, db, err := openStore(cfg, reg)
	if err != nil {
		fns.Close()
		if capp != nil {
			err = storeForApplication(err, cfg, capp)
		}
		return nil, err
	}
	if err := admitStoredTypes(db, fns); err != nil {
		guard.Stop()
		db.Close()
		fns.Close()
		return nil, err
	}
	var (
		kafka  *kafkaEdges
		routes *egress.Routes
		cn     *node.Node
	)
	if cfg.Cluster == nil {
		kafka, routes, err = kafkaEgresses(mod, kplan, db, reg, cfg.Logger, cfg.KafkaEgressResetMarkers)
		if err == nil && cfg.ReadOnly {
			// The routes check what functions send, and none is invoked;
			// no relay delivers.
			kafka.close()
			kafka = &kafkaEdges{log: cfg.Logger}
		}
	} else {
		// Kafka egress records are produced in the node's transaction;
		// Kafka ingress topics are consumed by the node's session.
		kafka = &kafkaEdges{log: cfg.Logger}
		if cn, err = newNode(cfg, db, reg, kplan, fns); err == nil {
			if routes, err = clusterRoutes(mod, cfg, cn.MaxRecord(), cn.Refusals()); err != nil {
				cn.Close()
			}
		}
	}
	if err != nil {
		guard.Stop()
		db.Close()
		fns.Close()
		return nil, err
	}
	eopts := engine.Options{
		IngressAnswers:  cfg.IngressAnswers,
		Lane:            adminLane,
		TimerWindow:     cfg.TimerWindow,
		MaxBacklog:      cfg.MaxBacklog,
		MaxBacklogBytes: cfg.MaxBacklogBytes,
		Store:           db,
		Functions:       fns,
		MaxBatch:        fns.MaxBatch,
		MaxBatchBytes:   fns.MaxBatchBytes,
		Routable:        fns.Routable,
		Egress:          routes.Route,
		RetryBase:       cfg.RetryBase,
		RetryMax:        cfg.RetryMax,
		PauseAfter:      cfg.PauseAfter,
		Logger:          cfg.Logger,
		Metrics:         engine.NewMetrics(reg),
		Admit:           guard.Admit,
		ReadOnly:        cfg.ReadOnly,
	}
	if cfg.PauseOnViolation {
		eopts.PauseOnViolation = func(address.TypeName) bool { return true }
	}
	if cn != nil {
		eopts.Owned, eopts.Durability, eopts.Outbound = true, cn.Durability(), cn.Outbound()
		eopts.MaxRecordBytes = cn.MaxRecord()
	}
	eng, err := engine.New(eopts)
	if err != nil {
		if cn != nil {
			cn.Close()
		}
		guard.Stop()
		db.Close()
		fns.Close()
		return nil, err
	}
	if cn != nil {
		cn.Bind(eng)
	}
	if cfg.ReadOnly {
		kplan.ingresses = nil // no Kafka ingress consumes
	}
	if err := kafka.addIngresses(kplan, fns, eng, reg, cfg.KafkaIngressKeepMembership); err != nil {
		kafka.close()
		eng.Close()
		guard.Stop()
		db.Close()
		fns.Close()
		return nil, err
	}
	a := &App{cfg: cfg, log: cfg.Logger, db: db, guard: guard, eng: eng, fns: fns, kafka: kafka, node: cn, addrs: map[string]string{}, names: map[string]string{},
		lim: lim, connM: connlimit.NewMetrics(reg), lane: adminLane}
	a.failed, a.closing = make(chan struct{}), make(chan struct{})
	go func() {
		select {
		case <-eng.Failed():
		case <-db.Failed():
			var lost *store.DirLostError
			if errors.As(db.Health(), &lost) {
				// Pebble wrote on into files nobody can open again: what
				// was acknowledged since the directory was last seen
				// intact is not where a restart will look.
				a.log.Error("the data directory was deleted or replaced under the running store; stopping. Work acknowledged since it was last seen intact may be lost: restore the directory from a backup, or start a new empty store with --new-store",
					"data_dir", cfg.DataDir, "last_seen_intact", lost.LastSeen.UTC().Format(time.RFC3339Nano),
					"noticed_at", lost.NoticedAt.UTC().Format(time.RFC3339Nano), "why", lost.Why)
			} else {
				a.log.Error("the store failed; stopping (everything acknowledged is durable)", "error", db.Health())
			}
		case <-a.closing:
			return
		}
		close(a.failed)
	}()
	eng.Start()
	kafka.start(eng)

	ready := func() error {
		if !a.up.Load() {
			return errors.New("app: starting: not every listener is bound yet")
		}
		if err := eng.Err(); err != nil {
			return err
		}
		if err := db.Health(); err != nil {
			return err
		}
		if err := guard.Ready(); err != nil {
			return err
		}
		if cn != nil {
			if err := cn.Ready(); err != nil {
				return err
			}
		}
		return kafka.ready()
	}
	// The API serves its routes on the path exactly as sent (no redirects
	// to a cleaned path: a 307 would re-send a write to another entry);
	// everything else goes to the admin mux.
	apiOpts := cfg.API
	apiOpts.Metrics = reg // GET /overview reads the engine's counters and gauges
	if cn != nil {
		apiOpts.ClusterView = func(ctx context.Context) stateapi.ClusterView { return clusterView(cn.View(ctx)) }
	}
	apiOpts.Endpoints = func() []stateapi.EndpointStatus {
		var out []stateapi.EndpointStatus
		for _, e := range fns.Endpoints() {
			out = append(out, stateapi.EndpointStatus(e))
		}
		return out
	}
	var (
		sink ingress.Sink = eng
		api  *stateapi.Server
	)
	if cn != nil {
		apiOpts.Owner, apiOpts.NodeID, apiOpts.Distrusted = cn.Owner, cfg.Cluster.NodeID, cn.Distrusted
		// Requests to other nodes are signed with the cluster secret on
		// behalf of the caller this node authenticated; the caller's token
		// is never sent on (docs/explanation/cluster.md, "Trust between nodes").
		if len(cfg.Cluster.Secret) > 0 {
			apiOpts.Nodes = trust.NewNodeAuth(cfg.Cluster.Secret, cfg.Cluster.AppID, cfg.Cluster.NodeID)
		}
		// Reads and listings about partitions other nodes own are answered
		// through them.
		fw, err := forward.New(forward.Config{NodeID: cfg.Cluster.NodeID, Partitions: eng.Partitions(),
			Assignment: cn.Assignment, Owned: eng.Owned, Metrics: reg,
			Auth: apiOpts.Nodes, Caller: func(r *http.Request) trust.Caller { return api.Caller(r) }})
		if err != nil {
			a.Close()
			return nil, err
		}
		apiOpts.Cluster = fw
		sink = cn // the playground ingress produces to the messages topic
		if apiOpts.Commands, err = newCommands(cfg, cn, eng.WaitReceipt, db.Partitions(), apiOpts.Nodes); err != nil {
			a.Close()
			return nil, err
		}
	}
	apiOpts.ReadOnly = cfg.ReadOnly
	apiOpts.Backup = a.backup
	deployed := func(t address.TypeName) bool { _, ok := mod.EndpointFor(t); return ok }
	if cn != nil {
		apiOpts.BackupPart = a.backupPart
	}
	if cn == nil {
		jm, err := jobs.New(jobs.Config{Engine: eng, Store: db, Logger: cfg.Logger, Metrics: reg, Deployed: deployed})
		if err != nil {
			a.Close()
			return nil, err
		}
		a.jobs, apiOpts.Jobs = jm, jm
		if !cfg.ReadOnly {
			// Read-only mode lists the jobs a backup holds and runs
			// none of them.
			jm.Start()
		}
	}
	api = stateapi.New(eng, eng.Reads(), apiOpts)
	if cn != nil {
		// A job's record travels in its home partition's changelog; the
		// job reads and writes every partition through its owner
		// (stateapi/jobscluster.go).
		cj := stateapi.NewClusterJobs(api, db, eng)
		jm, err := jobs.New(jobs.Config{Engine: cj.Engine(), Store: cj.Store(), StoreAs: cj.StoreAs, Local: db,
			Owned: eng.Owned, NodeID: cfg.Cluster.NodeID, IdempotentWrites: true, Logger: cfg.Logger, Metrics: reg, Deployed: deployed,
			// A write waits for a command's committed receipt, a
			// transaction round trip or two: more in flight keep the
			// pace, which rate still bounds.
			Workers: clusterJobWorkers})
		if err != nil {
			cj.Close()
			a.Close()
			return nil, err
		}
		a.jobs, a.clusterJobs = jm, cj
		api.UseJobs(jm, cj)
		jm.Start()
	}
	if err := a.listenTLS("admin", cfg.AdminAddr, api.Handler(admin.Handler(reg, ready, fns.Down)), cfg.TLSCert, cfg.TLSKey); err != nil {
		a.Close()
		return nil, err
	}
	// The playground listeners trust whoever reaches them: a web page
	// must not reach them through its visitor's browser.
	browsers := browserguard.New(PlaygroundGuard(cfg))
	for i, in := range mod.Ingresses {
		h := browsers.Handler(readOnlyEdge(cfg.ReadOnly, "playground ingress", &ingress.Playground{Sink: sink, Busy: unavailable,
			MaxBody: fns.MaxMessage, Logger: cfg.Logger, Admit: fns.Admit, Lane: adminLane}))
		a.names[fmt.Sprintf("ingress%d", i)] = fmt.Sprintf("playground ingress (%s)", in.Pos)
		if err := a.listen(fmt.Sprintf("ingress%d", i), net.JoinHostPort(cfg.ListenHost, strconv.Itoa(in.Port)), h); err != nil {
			a.Close()
			return nil, err
		}
	}
	for i, eg := range mod.Egresses {
		h := browsers.Handler(readOnlyEdge(cfg.ReadOnly, "playground egress", &egress.Playground{Source: eng, Topics: eg.Topics, Logger: cfg.Logger, Unavailable: unavailable,
			NotRead: func(err error) bool { return errors.Is(err, engine.ErrNotRead) }}))
		a.names[fmt.Sprintf("egress%d", i)] = fmt.Sprintf("playground egress (%s)", eg.Pos)
		if err := a.listen(fmt.Sprintf("egress%d", i), net.JoinHostPort(cfg.ListenHost, strconv.Itoa(eg.Port)), h); err != nil {
			a.Close()
			return nil, err
		}
	}
	if cn != nil {
		// Published once the admin listener serves: other nodes name its
		// URL as this node's.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := cn.Start(ctx)
		cancel()
		if err != nil {
			a.Close()
			return nil, err
		}
	}
	a.up.Store(true)
	a.log.Info("statefun running", "module", cfg.ModulePath, "data_dir", cfg.DataDir, "store", db.ID(),
		"partitions", eng.Partitions(), "admin", a.addrs["admin"], "read_only", cfg.ReadOnly)
	return a, nil
}

// clusterJobWorkers is how many writes of one job are in flight at once
// in cluster mode.
const clusterJobWorkers = 32

// DefaultListenHost is the default Config.ListenHost.
const DefaultListenHost = "127.0.0.1"

// PlaygroundGuard is the browser guard of the playground ingress and
// egress: loopback Host names and cfg.PlaygroundAllowedHosts; no request
// from another origin, whatever its method, but from
// cfg.PlaygroundAllowedOrigins.
func PlaygroundGuard(cfg Config) browserguard.Options {
	return browserguard.Options{
		AllowedHosts:   cfg.PlaygroundAllowedHosts,
		AllowedOrigins: cfg.PlaygroundAllowedOrigins,
		EveryMethod:    true,
		HostsSetting:   "--playground-allowed-hosts",
		OriginsSetting: "--playground-allowed-origins",
	}
}

// unavailable reports whether an engine error means "not now": a full
// partition, work refused for lack of disk, or an engine that is stopping
// or stopped on a store error. The edges answer it with 503 and
// Retry-After, so clients retry (against the restarted runtime at the
// latest) instead of taking a 500 for a final answer.
func unavailable(err error) bool {
	return errors.Is(err, engine.ErrBusy) || errors.Is(err, engine.ErrClosed) || errors.Is(err, node.ErrNotAcknowledged)
}

// isLoopback reports whether a listen address can only be reached from
// this machine.
func isLoopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Addr returns the bound address of a listener: "admin", "ingress0",
// "egress0", ...
func (a *App) Addr(name string) string { return a.addrs[name] }

// Partitions returns P, the application's partition count.
func (a *App) Partitions() int { return a.eng.Partitions() }

// Failed is closed when the engine stopped on an error or the store met a
// fatal one.
func (a *App) Failed() <-chan struct{} { return a.failed }

// Close shuts down cleanly: listeners stop taking requests (those in
// progress finish, up to a few seconds; connections that have not sent a
// request are closed at once), the engine stops, the store flushes and
// closes. Every message that was acknowledged is durable.
//
// After the store failed (Pebble met a fatal disk error) Close stops the
// listeners and returns the store's error without waiting for the engine or
// the store, which cannot finish: the process is to exit non-zero.
func (a *App) Close() error {
	var err error
	a.once.Do(func() {
		close(a.closing)
		dead := a.db.Health()
		if !errors.Is(dead, store.ErrFailed) {
			dead = nil
		}
		if a.node != nil && dead == nil && a.eng.Err() == nil {
			// First, so that no node names this one as an owner while it
			// stops, and no node takes it for dead while its listeners
			// finish their requests: a node that withdrew its record is
			// not probed, and keeps its partitions for its restart. A node
			// stopping on a failure keeps its record, as a crash does: the
			// others find it down and take its partitions.
			a.node.Withdraw()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		for _, s := range a.servers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if dead != nil {
					s.Close()
					return
				}
				s.Shutdown(ctx)
			}()
		}
		wg.Wait()
		a.wg.Wait()
		if a.clusterJobs != nil {
			a.clusterJobs.Close() // ends the waits of the jobs' reads and writes
		}
		if a.jobs != nil {
			a.jobs.Close() // before the engine: a job writes through it
		}
		a.guard.Stop()
		a.kafka.close()
		if dead != nil {
			if a.node != nil {
				a.node.Close()
			}
			a.fns.Close()
			err = dead
			return
		}
		a.eng.Close() // in cluster mode, stops the session too
		if a.node != nil {
			switch {
			case a.cfg.Cluster.LeaveOnStop:
				a.node.Leave("stopped for good (--cluster-leave-on-stop)")
			case errors.Is(a.eng.Err(), session.ErrGaveUp):
				// Its partitions are served by the others at once, not
				// after the session timeout.
				a.node.Leave("gave up: Kafka refused its commits")
			}
			a.node.Close()
		}
		a.fns.Close()
		err = a.db.Close()
	})
	return err
}

// admitStoredTypes admits the function types that hold state or registered
// states in the store to their wildcard endpoints, past any bound: a type
// that lives in the store is never refused after a restart
// (functions.Router.Admitted).
func admitStoredTypes(db *store.DB, fns *functions.Router) error {
	if err := db.ScanTypes(func(t address.TypeName) bool {
		fns.Admitted(t)
		return true
	}); err != nil {
		return fmt.Errorf("app: listing the function types that hold state: %w", err)
	}
	if err := db.AllSpecs(func(t address.TypeName, _ []*protocol.FromFunction_PersistedValueSpec) error {
		fns.Admitted(t)
		return nil
	}); err != nil {
		return fmt.Errorf("app: listing the function types with registered states: %w", err)
	}
	return nil
}
