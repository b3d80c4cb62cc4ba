// Package committer is the group committer of the embedded engine: every
// request waiting when a sync ends goes into the next Pebble batch, so one
// synced write is paid per group, not per request.
//
// It knows nothing of partitions, mailboxes or goroutines other than its
// own: a Request encodes itself into the batch and is told when it is
// durable (or that it never will be). Run is the committer's loop; a driver
// that steps the engine on one goroutine calls CommitGroup instead.
package committer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/statefun-go/statefun/internal/store"
)

// Request is one unit of durable work.
type Request interface {
	// Encode adds the request's writes to b. It runs on the committer's
	// goroutine, in submission order, so it may own state that only the
	// committer touches (sequence numbers). A record that cannot be encoded,
	// or an error returned, fails only this request: its writes are dropped
	// and Fail is called.
	Encode(b *store.Batch) error
	// Durable is called once the batch carrying the request is durable,
	// on the committer's goroutine, in submission order.
	Durable()
	// Fail is called instead of Durable when the request will never be made
	// durable by this committer; err says why.
	Fail(err error)
}

// Answerer is a Request that also answers a waiting caller once durable.
// AfterGroup is called after the Durable calls of every request of the
// group, on the committer's goroutine, in submission order.
//
// Why: a caller waiting for a durable answer (a state API write with
// ack=committed) should not wait behind the hundreds of goroutines a loaded
// group's Durable calls wake. Go runs the goroutine the running one woke
// last first (its "next" slot), and every later wake pushes the earlier one
// to the back of the run queue. So the answers that matter go last.
type Answerer interface {
	Request
	AfterGroup()
}

// Urgent is a Request a caller is waiting on (a state API write with
// ack=committed), for a partition. The next group then carries every
// urgent request queued, each with the requests of its partition queued
// before it, which must be durable first (a partition's commits land in
// order); the others wait for the group after. An operator's committed
// write so waits for one small group instead of a loaded one: its
// encoding, its store write and the Durable calls of hundreds of ingress
// requests. Concurrent committed writes still share one group, and one
// sync, as group commit means them to. Requests of the other partitions
// lose nothing but one sync's time: none of them depends on these.
type Urgent interface {
	Request
	// Lane returns the request's partition, and whether a caller waits for
	// it to be durable.
	Lane() (partition int, urgent bool)
}

// ErrStopped is wrapped by the error every request gets (from Fail, or from
// Submit) once a store error stopped the committer, and by Submit's error
// after Close.
var ErrStopped = errors.New("committer: stopped")

// The errors a request fails with in cluster mode, where the cluster
// session makes the engine's requests durable in Kafka transactions
// (internal/cluster/session). They are defined here, with the contract
// of Request, because both sides of that seam use them: the session fails
// requests with them, the engine and its callers test for them.
var (
	// ErrAborted is wrapped by the error a request's Fail gets when the
	// transaction that carried it was aborted (a rebalance, a fence, a
	// broker error, an unknown outcome), or it was queued for a partition
	// that is rebuilt after such an abort. Not fatal: the partition is
	// rebuilt from the store, which never saw the aborted work.
	ErrAborted = errors.New("the transaction was aborted")
	// ErrMoved is wrapped by the error a request's Fail gets, and by the
	// engine's answers, when its partition is not served by this process
	// (any more): revoked, lost, not restored yet, or rebuilt.
	ErrMoved = errors.New("the partition is not served by this process (it moved, or is moving); retry")
)

// DefaultMaxGroupOps bounds one group commit, so one sync never grows
// without end while requests keep arriving.
const DefaultMaxGroupOps = 50_000

// Options configure a Committer. The zero value of each field is usable.
type Options struct {
	// MaxGroupOps is the number of store writes after which a group is
	// cut; requests beyond it wait for the next group. Default
	// DefaultMaxGroupOps.
	MaxGroupOps int
	// Sync, when set, makes a group durable in place of the store's own
	// synced write (b.Apply, then the wait for its sync, overlapped with
	// the next group's encoding in Run). Tests inject store errors
	// through it.
	Sync func(b *store.Batch) error
	// Now is the clock for Observe; default time.Now.
	Now func() time.Time
	// Observe, when set, is told about every durable group: how long the
	// sync took, how many requests, store writes and bytes it carried.
	Observe func(d time.Duration, reqs, ops, bytes int)
}

// Committer collects requests and writes them in synced groups.
type Committer struct {
	db   *store.DB
	opts Options

	mu   sync.Mutex
	reqs []Request
	err  error // set once: the store error that stopped it, or ErrStopped
	wake chan struct{}
	// urgent is signalled, besides wake, by the submission of an urgent
	// request: Run writes its lane even when the pipe is full.
	urgent chan struct{}
}

// New returns a committer writing to db. Nothing runs until Run or
// CommitGroup.
func New(db *store.DB, opts Options) *Committer {
	if opts.MaxGroupOps <= 0 {
		opts.MaxGroupOps = DefaultMaxGroupOps
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Committer{db: db, opts: opts, wake: make(chan struct{}, 1), urgent: make(chan struct{}, 1)}
}

// Submit queues r for the next group. It returns an error wrapping
// ErrStopped (and the store error, if one stopped the committer) when the
// committer no longer writes; r is then not called back.
func (c *Committer) Submit(r Request) error {
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return err
	}
	c.reqs = append(c.reqs, r)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	if u, ok := r.(Urgent); ok {
		if _, urgent := u.Lane(); urgent {
			select {
			case c.urgent <- struct{}{}:
			default:
			}
		}
	}
	return nil
}

// Pending returns the number of requests waiting for a group.
func (c *Committer) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.reqs)
}

// Err returns the error that stopped the committer, or nil while it writes.
func (c *Committer) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Run commits groups until ctx ends (it then finishes the groups written,
// fails the requests still waiting with ErrStopped and returns nil) or a
// store error stops it (it returns that error, every waiting request
// having been failed with it).
//
// Run keeps the disk busy: while one group's sync runs, it encodes and
// writes the next — the requests that arrived meanwhile — so that its
// sync starts the moment the first one's ends, and the first group's
// callbacks (the wakes of hundreds of callers, in a loaded group) run
// while the second one syncs. At most pipelineDepth groups are written
// and not yet durable, and one more for the urgent lane (see Urgent): a
// caller waiting for its write then shares the next sync instead of
// waiting for a free slot. The callbacks still run on this goroutine, in
// submission order, once each group is durable.
func (c *Committer) Run(ctx context.Context) error {
	p := newPipe()
	defer p.close()
	for {
		if p.n < pipelineDepth {
			wrote, err := c.take(p, false)
			if err != nil {
				return err
			}
			if wrote {
				continue
			}
		}
		var synced <-chan *group
		if p.n > 0 {
			synced = p.synced
		}
		wake, urgent := c.wake, c.urgent
		if p.n >= pipelineDepth {
			wake = nil // the next group waits for a free slot
		}
		if p.n > pipelineDepth {
			urgent = nil // the urgent lane has its group in the pipe
		}
		select {
		case g := <-synced:
			p.n--
			if err := c.finish(g); err != nil {
				c.abandon(p, err)
				return err
			}
		case <-wake:
		case <-urgent:
			if p.n < pipelineDepth {
				continue // the loop writes the lane first anyway
			}
			if _, err := c.take(p, true); err != nil {
				return err
			}
		case <-ctx.Done():
			if err := c.drain(p); err != nil {
				return err
			}
			c.stop(ErrStopped)
			return nil
		}
	}
}

// take writes a group of the requests waiting (with laneOnly, of the
// urgent lane only) into the pipe, and reports whether there was one. A
// store error that refused it is returned once the groups written before
// have been called back: they stand, as their syncs end.
func (c *Committer) take(p *pipe, laneOnly bool) (bool, error) {
	g, err := c.write(laneOnly)
	if err != nil {
		c.drain(p)
		return false, err
	}
	if g == nil {
		return false, nil
	}
	p.push(g)
	return true, nil
}

// pipe holds the groups Run has written and not yet called back. A
// goroutine of its own (syncWaitLoop) waits for their syncs, oldest
// first, and hands each back on synced once it is over, so that Run can
// write the next group meanwhile.
type pipe struct {
	written chan *group // to syncWaitLoop
	synced  chan *group // from it, in the order written
	n       int         // groups written and not yet taken from synced
}

func newPipe() *pipe {
	p := &pipe{written: make(chan *group, pipelineDepth+1), synced: make(chan *group, pipelineDepth+1)}
	go syncWaitLoop(p.written, p.synced)
	return p
}

// push hands a written group to syncWaitLoop.
func (p *pipe) push(g *group) {
	p.written <- g
	p.n++
}

// close ends syncWaitLoop; every group pushed must have been taken back.
func (p *pipe) close() { close(p.written) }

// syncWaitLoop waits for each group's sync in turn.
func syncWaitLoop(written <-chan *group, synced chan<- *group) {
	for g := range written {
		g.wait()
		synced <- g
	}
}

// pipelineDepth is the most groups Run has written and not yet seen
// durable: one syncing, one written behind it. More would not sync any
// sooner (the store syncs its log one sync at a time, each covering what
// was written before it began) and would only cut the groups smaller.
const pipelineDepth = 2

// CommitGroup writes the requests waiting now (up to MaxGroupOps writes) in
// one synced batch and calls them back. It returns how many requests it
// handled, and the store error that stopped the committer, if any: then
// every request it took or that was waiting has been failed with it, and
// later Submits fail too.
func (c *Committer) CommitGroup() (int, error) {
	g, err := c.write(false)
	if err != nil || g == nil {
		return 0, err
	}
	g.wait()
	return len(g.reqs), c.finish(g)
}

// group is requests written to the store in one batch.
type group struct {
	reqs  []Request
	bad   []int // the requests that failed to encode (and were failed)
	start time.Time
	ops   int
	size  int
	// applied is the batch whose sync is awaited; nil once it is over
	// (or with Options.Sync, which syncs in place), err its outcome.
	applied *store.Applied
	err     error
}

// wait waits for the group's sync, if it is not over, and returns its
// outcome.
func (g *group) wait() error {
	if g.applied != nil {
		g.err = g.applied.Wait()
		g.applied = nil
	}
	return g.err
}

// write takes the requests waiting now (the urgent lane first, up to
// MaxGroupOps writes; with laneOnly, the urgent lane or nothing), encodes
// them into one batch and writes it without waiting for its sync. It
// returns nil when nothing waits, or the committer stopped; and the store
// error that refused the batch, if any, having failed its requests and
// stopped the committer.
func (c *Committer) write(laneOnly bool) (*group, error) {
	c.mu.Lock()
	reqs := c.reqs
	c.reqs = nil
	if rest, lane, ok := cutLane(reqs); ok {
		reqs, c.reqs = lane, rest
	} else if laneOnly {
		reqs, c.reqs = nil, reqs
	}
	stopped := c.err
	c.mu.Unlock()
	if stopped != nil || len(reqs) == 0 {
		return nil, nil
	}
	g := &group{start: c.opts.Now()}
	b := c.db.NewBatch()
	n := 0
	for n < len(reqs) && (n == 0 || b.Len() < c.opts.MaxGroupOps) {
		if err := b.Stage(reqs[n].Encode); err != nil {
			g.bad = append(g.bad, n)
			reqs[n].Fail(err)
		}
		n++
	}
	if n < len(reqs) {
		c.mu.Lock()
		c.reqs = append(reqs[n:len(reqs):len(reqs)], c.reqs...)
		c.mu.Unlock()
		reqs = reqs[:n]
	}
	g.reqs, g.ops, g.size = reqs, b.Len(), b.Size()
	if c.opts.Sync != nil {
		g.err = c.opts.Sync(b)
		b.Close()
		return g, nil
	}
	applied, err := b.Apply()
	if err != nil {
		g.err = err
		return nil, c.fail(g, err)
	}
	g.applied = applied
	return g, nil
}

// finish calls back the requests of a group whose wait is over (g.err
// set): Durable, then AfterGroup; or, when the sync failed, Fail, and the
// committer stops.
func (c *Committer) finish(g *group) error {
	if g.err != nil {
		return c.fail(g, g.err)
	}
	if c.opts.Observe != nil {
		c.opts.Observe(c.opts.Now().Sub(g.start), len(g.reqs), g.ops, g.size)
	}
	for i, r := range g.reqs {
		if !contains(g.bad, i) {
			r.Durable()
		}
	}
	for i, r := range g.reqs {
		if a, ok := r.(Answerer); ok && !contains(g.bad, i) {
			a.AfterGroup()
		}
	}
	return nil
}

// fail fails the requests of g with the store error err and stops the
// committer; it returns the error the requests got.
func (c *Committer) fail(g *group, err error) error {
	err = fmt.Errorf("%w: %w", ErrStopped, err)
	g.fail(err)
	c.stop(err)
	return err
}

// fail calls Fail of the group's requests that encoded (the others were
// failed already).
func (g *group) fail(err error) {
	for i, r := range g.reqs {
		if !contains(g.bad, i) {
			r.Fail(err)
		}
	}
}

// drain calls back the groups of p as their syncs end, and returns the
// first error; the groups after a failed one are abandoned.
func (c *Committer) drain(p *pipe) error {
	for p.n > 0 {
		g := <-p.synced
		p.n--
		if err := c.finish(g); err != nil {
			c.abandon(p, err)
			return err
		}
	}
	return nil
}

// abandon fails the requests of the groups of p, written after one whose
// write or sync failed: the committer stopped with err before they were
// known durable (the store treats a failed log write as fatal, so they
// never will be).
func (c *Committer) abandon(p *pipe, err error) {
	for ; p.n > 0; p.n-- {
		(<-p.synced).fail(err)
	}
}

// stop records err (the first one wins) and fails every waiting request.
func (c *Committer) stop(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	err = c.err
	reqs := c.reqs
	c.reqs = nil
	c.mu.Unlock()
	for _, r := range reqs {
		r.Fail(err)
	}
}

// Close stops the committer: requests still waiting are failed with
// ErrStopped, later Submits fail. Call it when Run is not running.
func (c *Committer) Close() { c.stop(ErrStopped) }

func contains(s []int, i int) bool {
	for _, v := range s {
		if v == i {
			return true
		}
	}
	return false
}

// cutLane splits off the group of the urgent requests (see Urgent): every
// one queued, each with the requests of its partition queued before it, in
// order. rest keeps the others in order. ok is false when no request is
// urgent.
func cutLane(reqs []Request) (rest, lane []Request, ok bool) {
	// The last urgent request of each partition: that partition's
	// requests up to it go in the lane.
	var last map[int]int
	for i, r := range reqs {
		if u, isU := r.(Urgent); isU {
			if p, urgent := u.Lane(); urgent {
				if last == nil {
					last = map[int]int{}
				}
				last[p] = i
			}
		}
	}
	if last == nil {
		return reqs, nil, false
	}
	rest = make([]Request, 0, len(reqs))
	for i, r := range reqs {
		if u, isU := r.(Urgent); isU {
			if p, _ := u.Lane(); i <= lastOr(last, p) {
				lane = append(lane, r)
				continue
			}
		}
		rest = append(rest, r)
	}
	return rest, lane, true
}

// lastOr is last[p], or -1 when p has no urgent request.
func lastOr(last map[int]int, p int) int {
	if i, ok := last[p]; ok {
		return i
	}
	return -1
}
