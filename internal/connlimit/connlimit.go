// Package connlimit bounds the connections an HTTP server holds open on
// one listener, so that no client, by opening connections and leaving them
// idle, can use up the process's file descriptors and with them every other
// listener, the store and the calls to remote functions.
//
// A Listener admits up to MaxConns connections. When a new connection
// arrives at the cap:
//
//  1. The connection that has been idle longest between two requests (an
//     HTTP keep-alive connection, state http.StateIdle) is closed to make
//     room. HTTP lets a server close an idle connection at any time, and
//     clients retry on a fresh one. A connection that has not finished its
//     first request is never closed this way; ReadHeaderTimeout ends it.
//  2. Else, up to Overflow connections more are admitted only to be told
//     "503 Service Unavailable" with Retry-After and Connection: close, as
//     soon as their request head has been read; such a connection has
//     OverflowDeadline in total (TLS handshake, request head, answer).
//  3. Else the connection is closed at once, without a word.
//
// The Listener works with an http.Server through Configure, which installs
// the hooks it needs (ConnState, ConnContext and a handler wrapper).
package connlimit

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Defaults of Options.
const (
	// DefaultOverflowDeadline is the default Options.OverflowDeadline.
	DefaultOverflowDeadline = 5 * time.Second
	// DefaultRetryAfter is the default Options.RetryAfter.
	DefaultRetryAfter = time.Second
)

// Options configure a Listener.
type Options struct {
	// Name names the listener in the 503 answer and in metrics ("admin",
	// "ingress0", ...).
	Name string
	// MaxConns is the number of connections served at once. Required (> 0).
	MaxConns int
	// Overflow is the number of connections beyond MaxConns that are
	// answered 503; 0 means DefaultOverflow(MaxConns).
	Overflow int
	// OverflowDeadline bounds the life of an overflow connection; 0 means
	// DefaultOverflowDeadline.
	OverflowDeadline time.Duration
	// RetryAfter is the Retry-After of the 503 answer, in whole seconds (at
	// least 1); 0 means DefaultRetryAfter.
	RetryAfter time.Duration
	// Metrics receives the listener's counts; nil records nothing.
	Metrics *Metrics
}

// DefaultOverflow is the default Options.Overflow for a cap: a sixteenth of
// it, at least 1.
func DefaultOverflow(maxConns int) int { return max(maxConns/16, 1) }

// Listener is a net.Listener that admits a bounded number of connections.
// Create it with New and hand it to an http.Server configured by Configure.
type Listener struct {
	net.Listener
	opts Options

	mu       sync.Mutex
	open     int                 // served connections open
	overflow int                 // overflow connections open
	idle     map[*conn]time.Time // served connections idle between requests, since when
}

// New wraps inner. It fails when opts.MaxConns is not positive or another
// option is negative.
func New(inner net.Listener, opts Options) (*Listener, error) {
	switch {
	case opts.MaxConns <= 0:
		return nil, fmt.Errorf("connlimit: %s: MaxConns %d, want at least 1", opts.Name, opts.MaxConns)
	case opts.Overflow < 0:
		return nil, fmt.Errorf("connlimit: %s: Overflow %d is negative", opts.Name, opts.Overflow)
	case opts.OverflowDeadline < 0:
		return nil, fmt.Errorf("connlimit: %s: OverflowDeadline %v is negative", opts.Name, opts.OverflowDeadline)
	case opts.RetryAfter < 0:
		return nil, fmt.Errorf("connlimit: %s: RetryAfter %v is negative", opts.Name, opts.RetryAfter)
	}
	if opts.Overflow == 0 {
		opts.Overflow = DefaultOverflow(opts.MaxConns)
	}
	if opts.OverflowDeadline == 0 {
		opts.OverflowDeadline = DefaultOverflowDeadline
	}
	if opts.RetryAfter < time.Second {
		opts.RetryAfter = DefaultRetryAfter
	}
	return &Listener{Listener: inner, opts: opts, idle: map[*conn]time.Time{}}, nil
}

// Accept returns the next connection admitted, as the package comment
// describes. It returns only the inner listener's errors.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		if l.open < l.opts.MaxConns {
			l.open++
			l.mu.Unlock()
			l.opts.Metrics.admitted(l.opts.Name, "served")
			return &conn{Conn: c, l: l}, nil
		}
		if victim := l.longestIdle(); victim != nil {
			// The victim's slot passes to c: open stays as it is, and the
			// victim's Close must not give the slot back.
			delete(l.idle, victim)
			victim.handedOver = true
			l.mu.Unlock()
			victim.Close()
			l.opts.Metrics.admitted(l.opts.Name, "served_after_closing_idle")
			return &conn{Conn: c, l: l}, nil
		}
		if l.overflow < l.opts.Overflow {
			l.overflow++
			l.mu.Unlock()
			l.opts.Metrics.admitted(l.opts.Name, "answered_503")
			deadline := time.Now().Add(l.opts.OverflowDeadline)
			oc := &conn{Conn: c, l: l, over: true, deadline: deadline}
			_ = c.SetDeadline(deadline)
			return oc, nil
		}
		l.mu.Unlock()
		l.opts.Metrics.admitted(l.opts.Name, "closed")
		c.Close()
	}
}

// longestIdle returns the served connection idle the longest, or nil. The
// caller holds l.mu. The scan is linear: it only runs at the cap.
func (l *Listener) longestIdle() *conn {
	var victim *conn
	var since time.Time
	for c, t := range l.idle {
		if victim == nil || t.Before(since) {
			victim, since = c, t
		}
	}
	return victim
}

// Open returns the number of served and overflow connections open.
func (l *Listener) Open() (served, overflow int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open, l.overflow
}

// Configure installs the Listener's hooks on srv, keeping any ConnState and
// ConnContext srv already has: connection states (to know which are idle),
// the overflow mark, and a handler that answers overflow connections with
// 503. Call it before srv serves.
func (l *Listener) Configure(srv *http.Server) {
	prevState, prevCtx, next := srv.ConnState, srv.ConnContext, srv.Handler
	srv.ConnState = func(nc net.Conn, s http.ConnState) {
		if c := unwrap(nc); c != nil && !c.over {
			l.mu.Lock()
			if s == http.StateIdle && !c.handedOver {
				l.idle[c] = time.Now()
			} else {
				delete(l.idle, c)
			}
			l.mu.Unlock()
		}
		if prevState != nil {
			prevState(nc, s)
		}
	}
	srv.ConnContext = func(ctx context.Context, nc net.Conn) context.Context {
		if prevCtx != nil {
			ctx = prevCtx(ctx, nc)
		}
		if c := unwrap(nc); c != nil && c.over {
			ctx = context.WithValue(ctx, overflowKey{}, true)
		}
		return ctx
	}
	if next == nil {
		next = http.DefaultServeMux
	}
	retry := strconv.Itoa(int(l.opts.RetryAfter / time.Second))
	msg := fmt.Sprintf("%s: too many connections (at most %d), retry later\n", l.opts.Name, l.opts.MaxConns)
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Context().Value(overflowKey{}) != nil {
			w.Header().Set("Retry-After", retry)
			w.Header().Set("Connection", "close")
			http.Error(w, msg, http.StatusServiceUnavailable)
			return
		}
		next.ServeHTTP(w, r)
	})
}

type overflowKey struct{}

// unwrap returns the Listener's conn under nc (through TLS), or nil.
func unwrap(nc net.Conn) *conn {
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	c, _ := nc.(*conn)
	return c
}

// conn is an admitted connection; Close gives its place back.
type conn struct {
	net.Conn
	l        *Listener
	over     bool      // an overflow connection, answered 503
	deadline time.Time // an overflow connection's end; deadlines are clamped to it

	// handedOver is set, under l.mu, when the connection is closed to make
	// room: its slot went to the new connection.
	handedOver bool
	once       sync.Once
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		l := c.l
		l.mu.Lock()
		delete(l.idle, c)
		switch {
		case c.over:
			l.overflow--
		case !c.handedOver:
			l.open--
		}
		l.mu.Unlock()
	})
	return err
}

// clamp keeps an overflow connection's deadlines within its end.
func (c *conn) clamp(t time.Time) time.Time {
	if c.over && (t.IsZero() || t.After(c.deadline)) {
		return c.deadline
	}
	return t
}

func (c *conn) SetDeadline(t time.Time) error      { return c.Conn.SetDeadline(c.clamp(t)) }
func (c *conn) SetReadDeadline(t time.Time) error  { return c.Conn.SetReadDeadline(c.clamp(t)) }
func (c *conn) SetWriteDeadline(t time.Time) error { return c.Conn.SetWriteDeadline(c.clamp(t)) }
