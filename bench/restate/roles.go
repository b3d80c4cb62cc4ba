package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	httppprof "net/http/pprof"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"
	"sync"
	"syscall"
	"time"

	restate "github.com/restatedev/sdk-go"
	restateserver "github.com/restatedev/sdk-go/server"

	"github.com/statefun-go/statefun/internal/app"
	"github.com/statefun-go/statefun/internal/sdktest"
)

// The Restate counter: a virtual object whose exclusive handler does what
// sdktest/counter does on our side.
const (
	restateService = "Counter" // the virtual object
	restateHandler = "add"     // its handler: add the request's delta
	restateState   = "count"   // its only state, a JSON number
)

// restateAdd reads the key's counter, adds delta, writes it back and
// returns (emits) the new value to the caller: the same logic as
// sdktest/counter, which adds 1 per message and egresses "<id>:<count>".
// The harness always sends a delta of 1.
func restateAdd(ctx restate.ObjectContext, delta int64) (int64, error) {
	n, err := restate.Get[int64](ctx, restateState)
	if err != nil {
		return 0, err
	}
	n += delta
	restate.Set(ctx, restateState, n)
	return n, nil
}

// serveUntilStdinCloses serves h on a loopback port, announces
// "bench: listening on host:port" and shuts down when stdin closes.
func serveUntilStdinCloses(h http.Handler, protocols *http.Protocols) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, Protocols: protocols, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		waitStdin(context.Background())
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()
	fmt.Printf("bench: listening on %s\n", ln.Addr())
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// runStatefunCounter serves sdktest/counter with the official StateFun Go
// SDK (HTTP/1.1, as the SDK's handler is served).
func runStatefunCounter() error {
	log.SetOutput(io.Discard) // the SDK logs every registration
	return serveUntilStdinCloses(sdktest.CounterHandler(), nil)
}

// runRestateCounter serves the Counter virtual object with the Restate Go
// SDK over h2c (HTTP/2 without TLS), as the SDK's own Start does.
func runRestateCounter() error {
	logger := slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})
	r := restateserver.NewRestate().WithLogger(logger, true).
		Bind(restate.NewObject(restateService).Handler(restateHandler, restate.NewObjectHandler(restateAdd)))
	h, err := r.Handler()
	if err != nil {
		return err
	}
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	return serveUntilStdinCloses(h, &protocols)
}

// runtimeConfigEnv carries a runtimeConfig, as JSON, to the
// statefun-runtime role.
const runtimeConfigEnv = "BENCH_RESTATE_RUNTIME"

// logLevelEnv sets the runtime's log level (debug shows Pebble's own log
// lines: WAL replay, flushes, compactions); the default is info, as
// shipped. The runtime logs to statefun/*/runtime.log in the work
// directory.
const logLevelEnv = "BENCH_RESTATE_LOG_LEVEL"

// runtimeConfig is how the statefun-runtime role starts our runtime.
type runtimeConfig struct {
	Module    string // module.yaml
	DataDir   string
	AdminAddr string
	// DebugAddr, when set, serves net/http/pprof and the profile control
	// routes of profileControl.
	DebugAddr string
}

// runStatefunRuntime runs our runtime as `statefun run` does: GOGC 400
// unless GOGC is set, app.Start with the shipped defaults (16 partitions
// for a new store, synced group commits), until SIGTERM or SIGINT, then a
// clean Close.
func runStatefunRuntime() error {
	var c runtimeConfig
	if err := json.Unmarshal([]byte(os.Getenv(runtimeConfigEnv)), &c); err != nil {
		return fmt.Errorf("%s: %w", runtimeConfigEnv, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	level := slog.LevelInfo
	if v := os.Getenv(logLevelEnv); v != "" {
		if err := level.UnmarshalText([]byte(v)); err != nil {
			return fmt.Errorf("%s=%q: %w", logLevelEnv, v, err)
		}
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if _, ok := os.LookupEnv("GOGC"); !ok {
		// As cmd/statefun's run does: keep this in step with it.
		debug.SetGCPercent(400)
	}
	if c.DebugAddr != "" {
		ln, err := net.Listen("tcp", c.DebugAddr)
		if err != nil {
			return err
		}
		go func() { _ = http.Serve(ln, newProfileControl()) }()
	}
	a, err := app.Start(app.Config{
		ModulePath: c.Module,
		DataDir:    c.DataDir,
		AdminAddr:  c.AdminAddr,
		ListenHost: "127.0.0.1",
		Logger:     logger,
	})
	if err != nil {
		return err
	}
	failed := false
	select {
	case <-ctx.Done():
	case <-a.Failed():
		failed = true
	}
	if err := a.Close(); err != nil {
		return err
	}
	if failed {
		return errors.New("the engine stopped on an error (see the log above)")
	}
	return nil
}

// profileControl starts and stops CPU profiles of the process on request,
// so that the harness can profile exactly one measured window:
//
//	POST /profile/start?file=PATH   start writing a CPU profile to PATH
//	POST /profile/stop              stop it; answers once the file is complete
//
// and serves net/http/pprof under /debug/pprof/.
type profileControl struct {
	mu   sync.Mutex
	file *os.File
	mux  *http.ServeMux
}

func newProfileControl() *profileControl {
	p := &profileControl{mux: http.NewServeMux()}
	p.mux.HandleFunc("POST /profile/start", p.start)
	p.mux.HandleFunc("POST /profile/stop", p.stop)
	registerPprof(p.mux)
	return p
}

func (p *profileControl) ServeHTTP(w http.ResponseWriter, r *http.Request) { p.mux.ServeHTTP(w, r) }

func (p *profileControl) start(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.file != nil {
		http.Error(w, "a profile is already running", http.StatusConflict)
		return
	}
	f, err := os.Create(r.URL.Query().Get("file"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	p.file = f
}

func (p *profileControl) stop(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.file == nil {
		http.Error(w, "no profile is running", http.StatusConflict)
		return
	}
	pprof.StopCPUProfile()
	err := p.file.Close()
	p.file = nil
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

// registerPprof serves net/http/pprof's handlers on mux.
func registerPprof(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", httppprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", httppprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", httppprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", httppprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", httppprof.Trace)
}
