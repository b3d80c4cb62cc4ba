package store

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// How the store copes with a disk that fails, fills up or stalls.
//
// Pebble treats a failed write of its write-ahead log or MANIFEST as fatal:
// it calls Logger.Fatalf and assumes that call never returns (its default
// logger exits the process). Recovering in-process is not possible: the
// commit pipeline and the version set are left half-updated ("horked", in
// Pebble's words), and Pebble's own code leaves locks in states that only an
// exit clears. Unwinding out of Fatalf with a panic, as this program once
// did, runs Pebble's deferred unlocks on mutexes it had released around the
// I/O, and the Go runtime then dies with "fatal error: sync: unlock of
// unlocked mutex" — a fatal error no recover can catch, and which hides the
// cause (for example "permission denied"). So the store intercepts Fatalf:
// it records the cause, makes Health and Failed report it, and parks the
// calling goroutine for good. Nothing acknowledged is lost — an
// acknowledgement waits for a synced commit, and the commit that met the
// error never returns — and the process exits, non-zero, through its
// ordinary failure path (see internal/app).
//
// Pebble retries a failed flush at once, forever, logging each attempt; on a
// full or read-only disk that is ~150 lines a second and, during Open (which
// waits for the flush of the replayed log), a hang. During Open the store
// turns the first such background error into Open's error. Afterwards it
// backs off between attempts and reports the error through Health until a
// flush or compaction succeeds again.

// Errors reported by Health and Failed.
var (
	// ErrFailed is wrapped by the error Health returns, and Close and Open
	// return, after Pebble met an error it cannot recover from (a failed
	// write of its log, say). The store accepts nothing more; the process
	// must exit and start again. Everything acknowledged before is durable.
	ErrFailed = errors.New("store: failed")

	// ErrStalled is wrapped by the error Health returns while Pebble stalls
	// writes (too many memtables or level-0 files waiting for the disk), the
	// disk was reported slow recently, or background work keeps failing.
	ErrStalled = errors.New("store: writes are stalled")
)

// health is the store's view of its disk, fed by Pebble's event listener.
type health struct {
	failOnce sync.Once
	failed   chan struct{} // closed on a fatal error
	fatal    atomic.Pointer[error]

	opening atomic.Bool
	openErr chan error // the first background error during Open

	mu            sync.Mutex
	stall         string    // the write stall's reason, "" when none
	slowUntil     time.Time // a DiskSlow event makes the store unhealthy until then
	slowInfo      string
	bgErr         error // the last background error, until work succeeds again
	bgFailures    int   // consecutive background errors, for the backoff
	slowHold      time.Duration
	openReplayed  atomic.Bool
	backoffCap    time.Duration
	backoffSleeps atomic.Int64 // for tests
}

func newHealth(slowHold time.Duration) *health {
	return &health{failed: make(chan struct{}), openErr: make(chan error, 1), slowHold: slowHold, backoffCap: time.Second}
}

// fail records a fatal error and closes the failed channel, once.
func (h *health) fail(err error) {
	h.failOnce.Do(func() {
		err = fmt.Errorf("%w: %w", ErrFailed, err)
		h.fatal.Store(&err)
		close(h.failed)
	})
}

func (h *health) fatalErr() error {
	if p := h.fatal.Load(); p != nil {
		return *p
	}
	return nil
}

// err returns why the store is not writing normally, or nil.
func (h *health) err(now time.Time) error {
	if err := h.fatalErr(); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.stall != "":
		return fmt.Errorf("%w: Pebble stalls writes: %s", ErrStalled, h.stall)
	case now.Before(h.slowUntil):
		return fmt.Errorf("%w: the disk is slow: %s", ErrStalled, h.slowInfo)
	case h.bgErr != nil:
		return fmt.Errorf("%w: background work fails: %v", ErrStalled, h.bgErr)
	}
	return nil
}

// background returns the background error that has not yet been followed
// by a successful flush or compaction, or nil.
func (h *health) background() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.bgErr
}

// listener returns the Pebble event listener feeding h; logger receives the
// events worth a log line.
func (h *health) listener(logger pebble.Logger) pebble.EventListener {
	l := pebble.EventListener{
		BackgroundError: func(err error) {
			if h.opening.Load() {
				// Open waits for the flush of the replayed log, which Pebble
				// would retry forever. Hand the cause to Open and park this
				// goroutine, which holds Pebble's lock, so that it stops.
				select {
				case h.openErr <- err:
				default:
				}
				select {}
			}
			logger.Errorf("background error: %s", err)
			h.mu.Lock()
			h.bgErr = err
			h.bgFailures++
			n := h.bgFailures
			h.mu.Unlock()
			// Pebble calls this with its lock held and retries at once;
			// sleeping here spaces out the retries (10 ms doubling to
			// backoffCap) instead of spinning on a broken disk.
			d := min(10*time.Millisecond<<min(n-1, 10), h.backoffCap)
			h.backoffSleeps.Add(1)
			time.Sleep(d)
		},
		FlushEnd: func(info pebble.FlushInfo) {
			if info.Err == nil {
				if h.opening.Load() && info.Input > 0 {
					h.openReplayed.Store(true)
				}
				h.clearBackground()
			}
		},
		CompactionEnd: func(info pebble.CompactionInfo) {
			if info.Err == nil {
				h.clearBackground()
			}
		},
		WriteStallBegin: func(info pebble.WriteStallBeginInfo) {
			logger.Errorf("write stall: %s", info.Reason)
			h.mu.Lock()
			h.stall = info.Reason
			h.mu.Unlock()
		},
		WriteStallEnd: func() {
			logger.Infof("write stall ended")
			h.mu.Lock()
			h.stall = ""
			h.mu.Unlock()
		},
		DiskSlow: func(info pebble.DiskSlowInfo) {
			h.diskSlow(time.Now(), info.String())
			logger.Errorf("disk slow: %s", info)
		},
	}
	l.EnsureDefaults(logger)
	return l
}

// diskSlow marks the disk slow from now for slowHold.
func (h *health) diskSlow(now time.Time, info string) {
	h.mu.Lock()
	h.slowUntil = now.Add(h.slowHold)
	h.slowInfo = info
	h.mu.Unlock()
}

func (h *health) clearBackground() {
	h.mu.Lock()
	h.bgErr = nil
	h.bgFailures = 0
	h.mu.Unlock()
}

// fatalLogger passes Pebble's log lines on and intercepts Fatalf: see the
// comment at the top of this file.
type fatalLogger struct {
	pebble.Logger
	h *health
}

func (l fatalLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.Logger.Errorf("fatal: %s; the store cannot continue in this process and stops taking writes", msg)
	if !strings.HasPrefix(msg, "pebble: ") {
		msg = "pebble: " + msg
	}
	fe := &fatalError{msg: msg}
	for _, a := range args {
		if err, ok := a.(error); ok {
			fe.errs = append(fe.errs, err)
		}
	}
	l.h.fail(fe)
	select {} // Pebble assumes Fatalf never returns
}

// fatalError is a Fatalf line that keeps the errors among its arguments, so
// that errors.Is finds the cause (syscall.ENOSPC, say).
type fatalError struct {
	msg  string
	errs []error
}

func (e *fatalError) Error() string   { return e.msg }
func (e *fatalError) Unwrap() []error { return e.errs }

// Health returns nil while the store writes normally, or an error saying why
// it does not: one wrapping ErrFailed after a fatal error (the process must
// restart), or one wrapping ErrStalled while Pebble stalls writes, the disk
// was slow within the last Options.DiskSlowThreshold, or background flushes
// or compactions keep failing. /readyz reports it.
func (db *DB) Health() error { return db.health.err(time.Now()) }

// Failed is closed when the store met a fatal error; Health then says which.
func (db *DB) Failed() <-chan struct{} { return db.health.failed }

// ReplayedAtOpen reports whether Open found write-ahead log records to
// replay, that is whether the store was not closed cleanly (Close flushes
// them away).
func (db *DB) ReplayedAtOpen() bool { return db.health.openReplayed.Load() }
