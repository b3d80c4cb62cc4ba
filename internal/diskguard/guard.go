// Package diskguard refuses new work before the disk under the store fills
// up. A Guard measures the free space of the data directory's filesystem on
// an interval (statfs); below a reserve, Admit and Ready return an error, so
// that the edges answer 503 with Retry-After and /readyz turns false, while
// work already accepted is still processed and committed into the reserve.
// When space returns, the Guard admits work again by itself.
//
// Why a reserve: Pebble treats a failed write of its write-ahead log as fatal
// (the process must restart), and a restart on a full disk cannot even
// replay its log. Refusing new work while there is still room keeps both
// from happening.
package diskguard

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// ErrLowSpace is wrapped by the errors Admit, Ready and New return when the
// free space of the data directory's filesystem is below the reserve (New:
// below the start minimum).
var ErrLowSpace = errors.New("diskguard: free disk space is low")

// Defaults of Options.
const (
	// DefaultInterval is how often free space is measured.
	DefaultInterval = time.Second
	// DefaultLogEvery is how often the guard repeats, while space stays
	// low, why it refuses work.
	DefaultLogEvery = 30 * time.Second
	// reserveFixed is the part of the default reserve that does not depend
	// on the memtable size.
	reserveFixed = 16 << 20
)

// DefaultReserve is the reserve for a store whose Pebble memtable is
// memTable bytes: 4 × memTable + 16 MiB. It holds what the work already
// accepted may still need once new work is refused: a new write-ahead log
// file (preallocated to 1.1 × memTable), the flush of a full memtable
// (≤ memTable) and of the one behind it, and room for the commits of the
// accepted backlog and for Pebble's MANIFEST and compaction bookkeeping.
func DefaultReserve(memTable uint64) int64 {
	return int64(4*memTable) + reserveFixed
}

// Options configures a Guard.
type Options struct {
	// Dir is the data directory. It need not exist yet: the nearest
	// existing parent is measured.
	Dir string
	// Reserve is the free space, in bytes, below which work is refused.
	// Required (> 0); see DefaultReserve.
	Reserve int64
	// StartMin is the free space below which New fails, so that a start on
	// a full disk stops at once with the cause. Zero means Reserve/2: enough
	// to open the store and replay its log. Between StartMin and Reserve the
	// runtime starts, refusing new work, and drains what it holds.
	StartMin int64
	// Interval is how often free space is measured; zero means
	// DefaultInterval.
	Interval time.Duration
	// LogEvery is how often a persisting shortage is logged again; zero
	// means DefaultLogEvery.
	LogEvery time.Duration
	// Free returns the bytes available to this process on the filesystem
	// holding path. Nil means statfs(2); tests inject their own.
	Free func(path string) (uint64, error)
	// Logger receives the guard's lines; nil means slog.Default().
	Logger *slog.Logger
	// Now is the clock for LogEvery; nil means time.Now.
	Now func() time.Time
}

// Guard watches the free space of one data directory. Its methods are safe
// for concurrent use.
type Guard struct {
	o Options

	mu       sync.Mutex
	low      error // the current refusal, nil while there is room
	free     uint64
	loggedAt time.Time

	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
	started atomic.Bool
}

// New measures the free space once and returns a Guard, or an error wrapping
// ErrLowSpace if there is less than Options.StartMin (the process should
// exit, naming the cause), or the error of the measurement.
func New(o Options) (*Guard, error) {
	if o.Reserve <= 0 {
		return nil, fmt.Errorf("diskguard: Reserve is %d, want > 0", o.Reserve)
	}
	if o.StartMin < 0 || o.StartMin > o.Reserve {
		return nil, fmt.Errorf("diskguard: StartMin is %d, want 0 to Reserve (%d)", o.StartMin, o.Reserve)
	}
	if o.StartMin == 0 {
		o.StartMin = o.Reserve / 2
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.LogEvery <= 0 {
		o.LogEvery = DefaultLogEvery
	}
	if o.Free == nil {
		o.Free = statfsFree
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	g := &Guard{o: o, stop: make(chan struct{}), done: make(chan struct{})}
	path := existingParent(o.Dir)
	free, err := o.Free(path)
	if err != nil {
		return nil, fmt.Errorf("diskguard: free space of %s: %w", path, err)
	}
	if int64(free) < o.StartMin {
		return nil, fmt.Errorf("%w: %s has %s free, below the %s needed to start (half the reserve of %s); free some space or lower the reserve",
			ErrLowSpace, o.Dir, mib(free), mib(uint64(o.StartMin)), mib(uint64(o.Reserve)))
	}
	g.apply(free)
	return g, nil
}

// statfsFree returns the bytes available to unprivileged users on the
// filesystem holding path.
func statfsFree(path string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// existingParent returns dir, or its nearest ancestor that exists.
func existingParent(dir string) string {
	p := filepath.Clean(dir)
	for {
		if _, err := os.Stat(p); err == nil {
			return p
		}
		parent := filepath.Dir(p)
		if parent == p {
			return p
		}
		p = parent
	}
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// Start measures every Options.Interval until Stop.
func (g *Guard) Start() {
	if g.started.Swap(true) {
		return
	}
	go func() {
		defer close(g.done)
		t := time.NewTicker(g.o.Interval)
		defer t.Stop()
		for {
			select {
			case <-g.stop:
				return
			case <-t.C:
				g.Check()
			}
		}
	}()
}

// Stop ends the measurements started by Start, waiting for them. It may be
// called more than once, and without Start.
func (g *Guard) Stop() {
	if g == nil {
		return
	}
	g.once.Do(func() {
		close(g.stop)
	})
	if g.started.Load() {
		<-g.done
	}
}

// Check measures the free space now and updates what Admit and Ready say. A
// failed measurement is logged and leaves the last verdict in place.
func (g *Guard) Check() {
	free, err := g.o.Free(existingParent(g.o.Dir))
	if err != nil {
		g.mu.Lock()
		now := g.o.Now()
		if now.Sub(g.loggedAt) >= g.o.LogEvery {
			g.loggedAt = now
			g.mu.Unlock()
			g.o.Logger.Error("diskguard: cannot measure free space", "dir", g.o.Dir, "error", err)
			return
		}
		g.mu.Unlock()
		return
	}
	g.apply(free)
}

// apply sets the verdict for free bytes and logs a change, or a persisting
// shortage once per LogEvery.
func (g *Guard) apply(free uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.free = free
	now := g.o.Now()
	if int64(free) >= g.o.Reserve {
		if g.low != nil {
			g.o.Logger.Info("diskguard: free space is back above the reserve; accepting new work",
				"dir", g.o.Dir, "free", mib(free), "reserve", mib(uint64(g.o.Reserve)))
		}
		g.low = nil
		return
	}
	was := g.low
	g.low = fmt.Errorf("%w: %s has %s free, below the reserve of %s; new work is refused until space returns",
		ErrLowSpace, g.o.Dir, mib(free), mib(uint64(g.o.Reserve)))
	if was == nil || now.Sub(g.loggedAt) >= g.o.LogEvery {
		g.loggedAt = now
		g.o.Logger.Warn(g.low.Error(), "free_bytes", free, "reserve_bytes", g.o.Reserve)
	}
}

// Admit returns nil while there is room for new work, or an error wrapping
// ErrLowSpace that says why not. It only reads the last verdict, so it is
// cheap enough to call for every request; the engine calls it before it
// accepts a message or a state mutation. A nil Guard (the guard turned off)
// admits everything.
func (g *Guard) Admit() error {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.low
}

// Ready is Admit for /readyz: not ready while work is refused.
func (g *Guard) Ready() error { return g.Admit() }

// Free returns the free bytes at the last measurement.
func (g *Guard) Free() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.free
}
