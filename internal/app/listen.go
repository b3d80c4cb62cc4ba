package app

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/statefun-go/statefun/internal/connlimit"
	"github.com/statefun-go/statefun/internal/functions"
	"github.com/statefun-go/statefun/internal/module"
)

// Defaults of ListenerLimits (docs/reference/limits.md).
const (
	// DefaultReadHeaderTimeout is the default ListenerLimits.ReadHeaderTimeout.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultReadTimeout is the default ListenerLimits.ReadTimeout.
	DefaultReadTimeout = time.Minute
	// DefaultWriteTimeout is the default ListenerLimits.WriteTimeout.
	DefaultWriteTimeout = time.Minute
	// DefaultIdleTimeout is the default ListenerLimits.IdleTimeout.
	DefaultIdleTimeout = time.Minute
	// DefaultMaxHeaderBytes is the default ListenerLimits.MaxHeaderBytes.
	DefaultMaxHeaderBytes = 64 << 10
	// longPollMargin is what the admin listener's write timeout keeps beyond
	// the longest state API long-poll, to write the answer.
	longPollMargin = 30 * time.Second
)

// ListenerLimits bound what clients can hold on each listener (admin,
// playground ingresses and egresses). Zero fields take their defaults;
// negative ones are refused.
type ListenerLimits struct {
	// MaxConns caps the connections each listener serves at once; over it
	// the longest-idle keep-alive connection is closed, or else the new one
	// is answered 503 with Retry-After (package connlimit). 0 derives it
	// from RLIMIT_NOFILE (connlimit.DefaultMaxConns), at most 4096.
	MaxConns int
	// ReadHeaderTimeout bounds reading a request's head; it ends slowloris
	// connections and connections that never send a request.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, head and body.
	ReadTimeout time.Duration
	// WriteTimeout bounds a request from the end of its head to the end of
	// its answer. The admin listener's is raised to the state API's longest
	// long-poll (stateapi.Options.MaxWait) plus 30 s when shorter, so that
	// GET /mutations/<id>?wait= is never cut.
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection idle this long between
	// requests.
	IdleTimeout time.Duration
	// MaxHeaderBytes caps a request's head (Go's server allows 4 KiB more).
	MaxHeaderBytes int
}

// resolveLimits fills in the defaults of cfg.Listeners and checks them.
func resolveLimits(cfg Config, mod *module.Module) (ListenerLimits, error) {
	l := cfg.Listeners
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"ReadHeaderTimeout", l.ReadHeaderTimeout}, {"ReadTimeout", l.ReadTimeout},
		{"WriteTimeout", l.WriteTimeout}, {"IdleTimeout", l.IdleTimeout}} {
		if f.d < 0 {
			return l, fmt.Errorf("app: listener %s %v is negative", f.name, f.d)
		}
	}
	if l.MaxConns < 0 {
		return l, fmt.Errorf("app: listener MaxConns %d is negative", l.MaxConns)
	}
	if l.MaxHeaderBytes < 0 {
		return l, fmt.Errorf("app: listener MaxHeaderBytes %d is negative", l.MaxHeaderBytes)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&l.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	def(&l.ReadTimeout, DefaultReadTimeout)
	def(&l.WriteTimeout, DefaultWriteTimeout)
	def(&l.IdleTimeout, DefaultIdleTimeout)
	if l.MaxHeaderBytes == 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if l.MaxConns == 0 {
		b := connlimit.Budget{NoFile: connlimit.NoFile(), Listeners: 1 + len(mod.Ingresses) + len(mod.Egresses)}
		for _, ep := range mod.Endpoints {
			b.Outbound += functions.PoolSize(ep)
		}
		n, ok := connlimit.DefaultMaxConns(b)
		if !ok {
			cfg.Logger.Warn("the file-descriptor limit leaves little room for connections: raise it (ulimit -n) or set --max-conns",
				"rlimit_nofile", b.NoFile, "outbound_pool_connections", b.Outbound, "listeners", b.Listeners, "max_conns", n)
		}
		l.MaxConns = n
	}
	return l, nil
}

func (a *App) listen(name, addr string, h http.Handler) error {
	return a.listenTLS(name, addr, h, "", "")
}

// listenTLS serves h on addr, over https when cert and key are set, within
// the listener limits.
func (a *App) listenTLS(name, addr string, h http.Handler, cert, key string) error {
	desc := name
	if d, ok := a.names[name]; ok {
		desc = d
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("app: %s listener: %w", desc, err)
	}
	if name == "admin" {
		ln = a.lane.Listen(ln)
	}
	limited, err := connlimit.New(ln, connlimit.Options{Name: name, MaxConns: a.lim.MaxConns, Metrics: a.connM})
	if err != nil {
		ln.Close()
		return fmt.Errorf("app: %s listener: %w", desc, err)
	}
	write := a.lim.WriteTimeout
	if name == "admin" {
		write = max(write, a.cfg.API.MaxWait+longPollMargin)
	}
	srv := &http.Server{
		Handler:           closeAfterAmbiguousFraming(h),
		ReadHeaderTimeout: a.lim.ReadHeaderTimeout,
		ReadTimeout:       a.lim.ReadTimeout,
		WriteTimeout:      write,
		IdleTimeout:       a.lim.IdleTimeout,
		MaxHeaderBytes:    a.lim.MaxHeaderBytes,
	}
	limited.Configure(srv)
	closeNewOnShutdown(srv)
	a.servers = append(a.servers, srv)
	a.addrs[name] = ln.Addr().String()
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		var err error
		if cert != "" {
			err = srv.ServeTLS(limited, cert, key)
		} else {
			err = srv.Serve(limited)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("listener stopped", "listener", name, "error", err)
		}
	}()
	return nil
}

// closeAfterAmbiguousFraming closes the connection after answering a
// request whose body framing a proxy in front may have read differently,
// so that no request it carries behind it is served (request smuggling).
// RFC 9112 §6.1 and §6.3 require it after a request with both
// Transfer-Encoding and Content-Length, and after an HTTP/1.0 request
// with Transfer-Encoding. Go's server reads such a request by its
// Transfer-Encoding (or, for HTTP/1.0, its Content-Length), drops the
// other header before a handler sees it, and keeps the connection open.
// What is left to see is that the request came chunked, or was HTTP/1.0:
// those requests are answered with Connection: close. A client sending a
// chunked body opens a new connection for its next request; nothing else
// changes.
func closeAfterAmbiguousFraming(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 1 && (len(r.TransferEncoding) > 0 || r.ProtoMinor == 0) {
			w.Header().Set("Connection", "close")
		}
		h.ServeHTTP(w, r)
	})
}
