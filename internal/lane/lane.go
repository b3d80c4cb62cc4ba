// Package lane serves the connections of one listener — the operator's
// admin listener — ahead of a busy process's other work.
//
// Go has no goroutine priorities, and under load its scheduler is slow to
// notice a connection that became readable: the network poller is asked
// only when a processor runs out of work, or by the runtime's monitor
// thread at most every 10 ms. A process serving thousands of messages a
// second always has work queued, so an operator's request can sit
// unnoticed in its socket for milliseconds and then wait at the back of a
// run queue, although serving it takes microseconds. (docs/benchmarks.md,
// "Where a slow GET's time goes, and the admin lane", measures it and
// names the tools that join its execution traces.)
//
// The runtime's own busy goroutines do the noticing instead. A Lane belongs
// to one runtime, which hands it to its hot paths — a playground ingress
// request, a partition's turn, a call to a function — and they call Poke. While a lane connection's reader waits, Poke looks
// at most every Interval, without blocking (poll(2)), whether such a
// connection has data. If one has, Poke wakes its reader by moving its read
// deadline into the past, which the Go runtime answers by making the reader
// the next goroutine to run on the caller's processor, and the caller
// yields to it. The reader sees the deadline, puts the real one back and
// reads its request. When the process is idle the network poller wakes the
// reader first, as it always did.
//
// A reader waiting longer than Hot leaves the lane and waits on the network
// poller alone, so an idle keep-alive connection costs nothing. While a
// reader is in the lane, a Poke that does not look costs an atomic load and
// a clock read; a look costs one poll(2), at most once per Interval.
package lane

import (
	"cmp"
	"errors"
	"net"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// Interval is the least time between two looks: a request waits about
	// half of it for a hot path to notice it, and the looks cost at most one
	// poll(2) per Interval (under a microsecond: BenchmarkPoke).
	Interval = 100 * time.Microsecond
	// DefaultHot is Options.Hot by default: long enough for a client's
	// next request (a CLI loop, a console's next view, a scrape), short
	// enough that an idle connection soon leaves the lane.
	DefaultHot = time.Second
)

// Options configure a Lane.
type Options struct {
	// Hot is how long a reader waits in the lane before it is left to the
	// network poller alone; 0 means DefaultHot.
	Hot time.Duration
}

// Lane is the admin lane of one runtime: the listeners whose connections
// it serves ahead of the load, and the looks its hot paths make. The
// runtime that owns it hands it to the code that pokes it (the engine,
// the ingress); two runtimes in one process have two lanes that know
// nothing of each other. A nil *Lane is no lane: Poke returns at once,
// Listen returns the listener as it is, Woken is 0.
type Lane struct {
	hot time.Duration

	waiting  atomic.Int64 // readers in all of the lane's listeners
	lastLook atomic.Int64 // when the last look began, in unix nanoseconds
	woken    atomic.Uint64

	mu        sync.Mutex
	listeners []*Listener // replaced, never changed in place: Poke reads it unlocked
}

// New returns a lane with no listener yet, or nil (no lane) where the
// platform has no poll(2).
func New(opts Options) *Lane {
	if !supported {
		return nil
	}
	return &Lane{hot: cmp.Or(opts.Hot, DefaultHot)}
}

// Poke looks, at most once an Interval, whether a lane connection whose
// reader waits has data; if one has, its reader becomes the next goroutine
// to run here and the caller yields to it. Call it from the hot paths of a
// busy process; it returns at once when no reader waits.
func (l *Lane) Poke() {
	if l == nil || l.waiting.Load() == 0 {
		return
	}
	now := time.Now().UnixNano()
	last := l.lastLook.Load()
	if now-last < int64(Interval) || !l.lastLook.CompareAndSwap(last, now) {
		return
	}
	l.mu.Lock()
	ls := l.listeners
	l.mu.Unlock()
	n := 0
	for _, x := range ls {
		n += x.look(now)
	}
	if n > 0 {
		l.woken.Add(uint64(n))
		// The woken reader is this processor's next goroutine; yielding
		// runs it now instead of after whatever this goroutine readies
		// before it blocks.
		runtime.Gosched()
	}
}

// Woken returns how many readers Poke has woken since the lane was made.
func (l *Lane) Woken() uint64 {
	if l == nil {
		return 0
	}
	return l.woken.Load()
}

// Listener is a net.Listener whose connections are served in a lane.
type Listener struct {
	net.Listener
	lane *Lane

	mu      sync.Mutex
	readers map[*conn]int64 // waiting readers, by when they began to wait
	closed  bool

	lookMu sync.Mutex // one look at a time: the buffers below
	conns  []*conn
	set    pollSet
}

// Listen returns ln with its connections in the lane (ln itself for a nil
// lane).
func (l *Lane) Listen(ln net.Listener) net.Listener {
	if l == nil {
		return ln
	}
	x := &Listener{Listener: ln, lane: l, readers: map[*conn]int64{}}
	l.mu.Lock()
	l.listeners = append(slices.Clip(l.listeners), x)
	l.mu.Unlock()
	return x
}

// Accept returns the next connection, in the lane when its descriptor can
// be polled.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	fd, ok := descriptor(c)
	if !ok {
		return c, nil
	}
	return &conn{Conn: c, l: l, fd: fd}, nil
}

// Close closes the listener and takes it out of its lane; its connections
// keep working, their readers woken by the network poller alone.
func (l *Listener) Close() error {
	l.lane.mu.Lock()
	l.lane.listeners = slices.DeleteFunc(slices.Clone(l.lane.listeners), func(x *Listener) bool { return x == l })
	l.lane.mu.Unlock()
	l.mu.Lock()
	l.closed = true
	l.lane.waiting.Add(-int64(len(l.readers)))
	clear(l.readers)
	l.mu.Unlock()
	return l.Listener.Close()
}

// enter puts c's reader in the lane.
func (l *Listener) enter(c *conn) {
	l.mu.Lock()
	if _, ok := l.readers[c]; !ok && !l.closed {
		l.readers[c] = time.Now().UnixNano()
		l.lane.waiting.Add(1)
	}
	l.mu.Unlock()
}

// leave takes c's reader out of the lane.
func (l *Listener) leave(c *conn) {
	l.mu.Lock()
	if _, ok := l.readers[c]; ok {
		delete(l.readers, c)
		l.lane.waiting.Add(-1)
	}
	l.mu.Unlock()
}

// look wakes the readers whose connection has data and returns how many it
// woke; readers waiting longer than Hot leave the lane.
func (l *Listener) look(now int64) int {
	l.lookMu.Lock()
	defer l.lookMu.Unlock()
	l.conns = l.conns[:0]
	l.mu.Lock()
	for c, since := range l.readers {
		if now-since > int64(l.lane.hot) {
			delete(l.readers, c)
			l.lane.waiting.Add(-1)
			continue
		}
		l.conns = append(l.conns, c)
	}
	l.mu.Unlock()
	n := 0
	for i, ready := range l.set.poll(l.conns) {
		if ready && l.conns[i].wake() {
			n++
		}
	}
	clear(l.conns) // keep no closed connection alive
	return n
}

// aLongTimeAgo returns a read deadline that has passed: setting it wakes a
// waiting reader. A function, not a package variable: the package keeps no
// state outside the lanes it makes.
func aLongTimeAgo() time.Time { return time.Unix(1, 0) }

// conn is a connection in the lane. The read deadline its user set is kept
// here, so that a look can move the real one into the past to wake the
// reader and the reader can put it back.
type conn struct {
	net.Conn
	l  *Listener
	fd int

	mu      sync.Mutex
	rd      time.Time // the read deadline the connection's user set
	reading bool      // a Read is in progress
	woken   bool      // a look moved the deadline; Read puts rd back
}

// Read reads as net.Conn.Read does; a wake by a look is invisible to the
// caller.
func (c *conn) Read(b []byte) (int, error) {
	for {
		c.setReading(true)
		c.l.enter(c)
		n, err := c.Conn.Read(b)
		c.l.leave(c)
		if c.setReading(false) && n == 0 && errors.Is(err, os.ErrDeadlineExceeded) {
			continue // woken: the data that woke it is there to read
		}
		return n, err
	}
}

// setReading marks whether a Read is in progress; when one ends, it puts
// back the deadline a look moved and reports whether there was one.
func (c *conn) setReading(r bool) (woken bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reading = r
	if r || !c.woken {
		return false
	}
	c.woken = false
	_ = c.Conn.SetReadDeadline(c.rd)
	return true
}

// wake readies the connection's reader by moving its read deadline into
// the past; false if no Read is in progress or it is woken already.
func (c *conn) wake() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.reading || c.woken {
		return false
	}
	c.woken = true
	_ = c.Conn.SetReadDeadline(aLongTimeAgo())
	return true
}

func (c *conn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rd = t
	if c.woken {
		return nil // the reader puts t in place as it wakes
	}
	return c.Conn.SetReadDeadline(t)
}

func (c *conn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rd = t
	if c.woken {
		return c.Conn.SetWriteDeadline(t)
	}
	return c.Conn.SetDeadline(t)
}

func (c *conn) Close() error {
	c.l.leave(c)
	return c.Conn.Close()
}
