package app

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// pebbleLogger sends Pebble's log lines to slog, at most one line per kind
// (format string) per pebbleLogEvery: on a failing disk Pebble logs the same
// error for every retry, ~150 lines a second. The next line of a kind after
// a quiet spell carries how many were left out.
type pebbleLogger struct {
	l *slog.Logger

	mu   sync.Mutex
	now  func() time.Time
	seen map[string]*logKind
}

// pebbleLogEvery is how often one kind of Pebble line may be logged.
const pebbleLogEvery = 10 * time.Second

type logKind struct {
	at         time.Time
	suppressed int
}

func newPebbleLogger(l *slog.Logger) *pebbleLogger {
	return &pebbleLogger{l: l, now: time.Now, seen: map[string]*logKind{}}
}

// allow reports whether a line of this format may be logged now, and how
// many were left out since the last one.
func (p *pebbleLogger) allow(format string) (bool, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	k := p.seen[format]
	if k == nil {
		if len(p.seen) > 1000 { // formats are constants; this never grows far
			clear(p.seen)
		}
		p.seen[format] = &logKind{at: now}
		return true, 0
	}
	if now.Sub(k.at) < pebbleLogEvery {
		k.suppressed++
		return false, 0
	}
	n := k.suppressed
	k.at, k.suppressed = now, 0
	return true, n
}

func (p *pebbleLogger) log(level slog.Level, format string, args ...any) {
	ok, suppressed := p.allow(format)
	if !ok {
		return
	}
	attrs := []any{"component", "pebble"}
	if suppressed > 0 {
		attrs = append(attrs, "suppressed", suppressed)
	}
	p.l.Log(context.Background(), level, fmt.Sprintf(format, args...), attrs...)
}

// Infof logs at debug level: Pebble's informational lines are for
// debugging.
func (p *pebbleLogger) Infof(format string, args ...any) { p.log(slog.LevelDebug, format, args...) }

// Errorf logs at error level.
func (p *pebbleLogger) Errorf(format string, args ...any) { p.log(slog.LevelError, format, args...) }

// Fatalf is never called by Pebble through the store, which intercepts it
// (internal/store/health.go explains why it must not panic). Should anything
// else call it, it logs the cause and exits non-zero, as Pebble expects.
func (p *pebbleLogger) Fatalf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "component", "pebble", "fatal", true)
	os.Exit(1)
}
