package jobs

import (
	"context"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/partition"
)

// How fast a job writes: an adaptive pace that yields to the functions.
//
// A job must not cost the functions their latency, and a fixed rate gets
// that wrong both ways: on an idle runtime it is slower than it need be,
// under the functions' load it still takes its share of the CPU, of the
// partitions' turns and of the commits. So the pace adapts, the way TCP's
// congestion control does (increase while nothing queues, cut at once when
// something does), steered by delay as a background transfer is (LEDBAT,
// RFC 6817): the runner times each write from its hand-over to the engine
// until the commit that carries it is durable (settled). That is the
// write's turn in its partition's mailbox behind the functions' own
// events, the core's turn on CPUs the functions need too, and the
// committer and the disk that every commit of the functions goes through:
// when the functions' load rises, the job's writes feel it. The least
// latency seen lately is the base, what a write costs on this machine when
// nothing queues; every window (paceWindow, and at least paceMinSamples
// writes) the pace compares the window's median latency with it:
//
//   - above base + target (the window's writes queued): the pace is cut,
//     by half, or in proportion to how far the latency is above its limit
//     (to a tenth at most), to no less than minPace;
//   - otherwise, when the pace held writes back during the window (it,
//     not the writes' latency, bounded the job): it grows, doubling each
//     window until the first cut (so that on an idle runtime the job
//     reaches full speed within a second or two), then by a tenth each
//     window (paceStep);
//   - a write refused because its partition is full (engine.ErrBusy) halves
//     it at once.
//
// The job's own writes raise the latency too once they saturate the
// committer: uncapped, the pace settles below the point where they would,
// which leaves the functions' commits room. The operator's rate
// (Spec.Rate), when given, caps it. The base is the least window latency
// over the last baseBuckets × baseBucket, so it follows the machine (a
// slower disk, another tenant) but not a load that comes and goes within
// a minute.
//
// The job's writes alone yield too little: on a machine with CPU to spare
// their latency rises less than the functions' does (a write that queues
// 2 ms more counts as load, while the functions' messages, two commits
// and a call each, lose their CPU share first), and beside the functions'
// load a job paced by its writes alone doubled their p99
// (docs/how-to/bulk-jobs.md). So the pace hears the functions too: the
// engine keeps the round trips of its latest calls to remote functions
// (Engine.CallLatencies: a lock-free ring each pace reads with its own
// cursor), and every window the pace takes their median, compared with
// its own base (the least window median over the last minute), as it
// does its writes':
//
//   - above base + max(fnTarget, fnTargetRatio × base): cut, as for the
//     writes (the larger of the two cuts when both are above);
//   - fewer than fnMinCalls calls in the window (an idle runtime, a
//     trickle): the functions do not hold the job back, and it goes at
//     its writes' pace;
//   - busy functions whose base the pace does not know (they have just
//     begun, or none was seen for a minute): their latency now may be the
//     job's doing already, so the pace drops to its floor at once (a
//     back-off), as soon as fnMinCalls calls are seen, not at the
//     window's end: a job at full speed when the load arrives would make
//     it queue for a window or two. The window that starts then, at the
//     floor, gives their base;
//   - every fnProbeEvery while they stay busy, one window at the floor (a
//     probe, not a back-off: the pace comes back after it) keeps a base
//     measured without the job in the last minute's, so that a job
//     running when the functions' load arrives, or one that grew with it,
//     does not take its own toll for their base.
//
// The calls' round trips moved with the functions' end-to-end latency in
// BenchmarkJobLoadLatency (e2e, in runs whose runtime was built with the
// race detector, which slows everything alike): beside a job paced by its writes alone
// their median call took 1.3 to 1.4 times as long as without one while
// the messages' p50 took 1.25 times as long, and it rose to 5 to 12 ms
// from 0.8 when the job's pace burst. Over 63 rounds of 6 s (nine runs,
// with and without a job) a round's mean window median correlated with
// the messages' p99 at 0.84 (logarithms), the 90th percentile at 0.89;
// the 90th moved more with a job and was noisier without one (signal to
// noise 1.9 against 1.7, windows of 500 ms). Close enough that the pace
// keeps the median, as for the writes: a single slow call (a GC pause)
// does not move it.
// Their target is tighter than the writes' (half the base above it, not
// the base): their latency is what the job must not cost, and with twice
// the base the job grew until the messages' p50 was 1.1 to 1.3 times
// what it was without it.
//
// A call's round trip includes what the function itself and the network
// take: a function that slows down by itself slows the job until the
// base (a minute) follows it. With the functions on other machines their
// round trips do not include the runtime's CPU: the job's toll on the
// runtime itself then shows in its writes' latency, its first signal,
// and its toll on the functions' machines in their calls'.

// The job's writes are never urgent for the committer: they are
// applied-ack mutations, so a commit carrying them is not cut into the
// urgent lane that a caller waiting on a committed write gets
// (engine/requests.go, committer.Urgent); waiting for their durability
// (Engine.WaitDurable) only watches the partitions' positions.

// Parameters of the pace.
const (
	// paceWindow is how often the pace is judged.
	paceWindow = 200 * time.Millisecond
	// minPace is the least writes per second: a job always progresses
	// (20,000 entries in under 17 minutes).
	minPace = 20.0
	// startPace is the pace a job starts at.
	startPace = 50.0
	// paceMinCut is the most a back-off cuts the pace by.
	paceMinCut = 0.1
	// paceTarget is the least queueing delay, above the base, that counts
	// as congestion; paceTargetRatio × base counts too when larger (a
	// machine whose writes take long anyway has noisier latency).
	paceTarget      = 2 * time.Millisecond
	paceTargetRatio = 1.0
	// paceQuantile is the quantile of a window's latencies compared with
	// the base: the median, which a single write delayed by the machine
	// (a GC pause, another process) does not move.
	paceQuantile = 0.5
	// paceStep is the increase per window after the first back-off, as a
	// share of the pace (at least minPace): a tenth, so that from the
	// floor the pace is back at 1,000 writes a second in about 12 s if
	// the load has gone by then, and twice as fast as before a back-off
	// in 1.5 s.
	paceStep = 0.1
	// baseBucket and baseBuckets: the base's history.
	baseBucket  = 10 * time.Second
	baseBuckets = 6
	// paceMinSamples is how many writes a window needs to be judged: at
	// a low pace a window lasts until it has them.
	paceMinSamples = 4
	// paceIdle is a pause in the writes after which the window starts
	// afresh.
	paceIdle = time.Second
	// maxSamples caps the latencies a window keeps.
	maxSamples = 1024

	// fnQuantile is the quantile of a window's function calls compared
	// with their base: the median, as for the writes.
	fnQuantile = 0.5
	// fnMinCalls is how many calls a window needs for the functions'
	// latency to be judged: fewer (an idle runtime, a trickle) tell
	// nothing, and do not hold the pace back.
	fnMinCalls = 8
	// fnTarget and fnTargetRatio: the functions' latency counts as
	// raised above base + max(fnTarget, fnTargetRatio × base).
	fnTarget      = 250 * time.Microsecond
	fnTargetRatio = 0.5
	// fnMaxCalls caps the calls a window keeps.
	fnMaxCalls = 4096
	// fnProbeEvery is how often, while the functions are busy, the pace
	// drops to minPace for one window to see their latency without the
	// job (their base), so that a base stays in the last minute's.
	fnProbeEvery = 30 * time.Second
)

// CallLatencies gives the round trips of the calls to remote functions
// that completed since cursor, and the cursor for the next time
// (Engine.CallLatencies).
type CallLatencies func(cursor uint64, buf []time.Duration) ([]time.Duration, uint64)

// Pace is a running job's pace as the API shows it (Record.Pace).
type Pace struct {
	// Rate is the writes per second the job allows itself now.
	Rate float64 `json:"rate"`
	// Limit is the operator's cap (the spec's rate); 0: none.
	Limit float64 `json:"limit,omitempty"`
	// LatencyMs is the median latency of the job's writes (until their
	// commit is durable) in the last window judged, in milliseconds;
	// BaseMs the least seen lately.
	LatencyMs float64 `json:"latencyMs"`
	BaseMs    float64 `json:"baseMs"`
	// FunctionsMs is the median round trip of the calls to remote
	// functions in the last window judged, in milliseconds (0: too few
	// calls to judge); FunctionsBaseMs the least such median seen lately
	// (0: none).
	FunctionsMs     float64 `json:"functionsMs"`
	FunctionsBaseMs float64 `json:"functionsBaseMs"`
	// Backoffs counts the times the pace was cut: the functions' load
	// slowed the job's writes or the functions' calls (or a partition
	// was full).
	Backoffs int64 `json:"backoffs"`
}

// pacer spaces a job's writes at its adaptive pace, shared by the job's
// workers.
type pacer struct {
	// now is the clock (time.Now; a test's fake one in a synctest bubble).
	now func() time.Time
	// limit caps the pace (0: none).
	limit float64
	// backoffMetric counts the back-offs of every job (nil: not counted).
	backoffMetric prometheus.Counter

	mu   sync.Mutex
	rate float64
	next time.Time
	// held is set when a write waited for the pace in this window.
	held bool
	// slow is false until the first back-off (slow start).
	slow bool

	winStart  time.Time
	lastEvent time.Time
	samples   []time.Duration
	// last is the last judged window's latency.
	last time.Duration
	// base is the writes' base: the least window latency seen lately.
	base     baseHistory
	backoffs int64

	// fn is the functions' side of the pace: their calls' latency.
	fn fnSignal
}

// fnSignal is what a pace knows of the functions' latency.
type fnSignal struct {
	// calls reads the calls' round trips (nil: none are heard).
	calls  CallLatencies
	cursor uint64
	buf    []time.Duration
	// last is the last judged window's latency (0: too few calls).
	last time.Duration
	// base is the calls' base, as the writes'.
	base baseHistory
	// probedAt is when the last probe window began; probing is set
	// while one runs, and resume is the pace to go back to after it.
	probedAt time.Time
	probing  bool
	resume   float64
}

// newPacer returns a pace capped at limit writes per second (0: none),
// which hears the functions' latency from calls (nil: not at all).
func newPacer(limit float64, now func() time.Time, calls CallLatencies) *pacer {
	if now == nil {
		now = time.Now
	}
	p := &pacer{now: now, limit: limit, rate: startPace}
	if limit > 0 {
		p.rate = min(p.rate, limit)
	}
	t := now()
	p.winStart, p.lastEvent = t, t
	p.fn.calls = calls
	p.fn.skip()
	return p
}

// wait returns when the next write may go, or ctx's error. A worker
// that must wait books no slot: it sleeps until the next one and tries
// again, so that a pace that grows meanwhile counts at once.
func (p *pacer) wait(ctx context.Context) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		p.mu.Lock()
		now := p.now()
		p.judgeLocked(now)
		if !p.next.After(now) {
			p.next = now.Add(time.Duration(float64(time.Second) / p.rate))
			p.mu.Unlock()
			return nil
		}
		p.held = true
		d := p.next.Sub(now)
		p.mu.Unlock()
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

// done records a write's latency, from its hand-over to its receipt.
func (p *pacer) done(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.samples) < maxSamples {
		p.samples = append(p.samples, d)
	}
	p.judgeLocked(p.now())
}

// busy records a write refused by a full partition: the pace halves.
func (p *pacer) busy() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.backOffLocked(0.5)
}

// judgeLocked ends the window when it is over and holds enough writes:
// the pace moves by their latency and by the functions' calls'.
func (p *pacer) judgeLocked(now time.Time) {
	if now.Sub(p.lastEvent) >= paceIdle {
		// Nothing for a while (the page's commits awaited, a full
		// partition): what came before does not tell the present.
		p.winStart, p.held, p.samples = now, false, p.samples[:0]
		p.fn.skip()
	}
	p.lastEvent = now
	p.fn.read()
	if !p.fn.probing && p.fn.arrived(now) {
		// The functions are busy and the pace knows no base of theirs
		// (they have just begun, or nothing was seen of them in the last
		// minute): their latency now may be raised by the job already.
		// The job drops to the floor at once, not at the window's end,
		// and the window that starts now, at the floor, gives their base.
		p.backOffLocked(0)
		p.fn.probing, p.fn.resume, p.fn.probedAt = true, p.rate, now
		p.winStart, p.held, p.samples = now, false, p.samples[:0]
		p.fn.buf = p.fn.buf[:0]
		return
	}
	if now.Sub(p.winStart) < paceWindow || len(p.samples) < paceMinSamples {
		return
	}
	held := p.held
	p.winStart, p.held = now, false
	samples := p.samples
	p.samples = p.samples[:0]
	slices.Sort(samples)
	lat := samples[int(paceQuantile*float64(len(samples)-1))]
	p.last = lat
	base := p.base.note(now, samples[0])
	// cut is the factor the pace is cut by (1: none): halved, or cut in
	// proportion when a latency is far above its limit, so that a load
	// that arrives finds the job at a tenth of its pace within a window,
	// not after four halvings.
	cut := 1.0
	if limit := base + max(paceTarget, time.Duration(paceTargetRatio*float64(base))); lat > limit {
		cut = cutFor(limit, lat)
	}
	verdict, fcut := p.fn.judge(now)
	switch verdict {
	case fnProbed:
		// The probe window is over: back to the pace before it.
		p.rate = p.fn.resume
		return
	case fnProbe:
		// Keep to the floor for a window: the functions' latency then is
		// their base. Not a back-off: the pace comes back after it.
		p.fn.probing, p.fn.resume, p.fn.probedAt = true, p.rate, now
		p.rate = minPace
		return
	}
	if cut = min(cut, fcut); cut < 1 {
		p.backOffLocked(cut)
		return
	}
	if !held {
		return // the writes, not the pace, bounded the job
	}
	if !p.slow {
		p.rate *= 2
	} else {
		p.rate += max(minPace, paceStep*p.rate)
	}
	if p.limit > 0 {
		p.rate = min(p.rate, p.limit)
	}
	p.rate = min(p.rate, MaxRate)
}

// cutFor is the factor a latency lat above its limit cuts the pace by.
func cutFor(limit, lat time.Duration) float64 {
	return max(paceMinCut, min(0.5, float64(limit)/float64(lat)))
}

// skip forgets the calls so far: the next window starts now.
func (f *fnSignal) skip() {
	if f.calls != nil {
		_, f.cursor = f.calls(math.MaxUint64, nil)
	}
	f.buf = f.buf[:0]
}

// read adds the calls completed since the last read to the window's (at
// most fnMaxCalls of them: more say no more of their median).
func (f *fnSignal) read() {
	switch {
	case f.calls == nil:
	case len(f.buf) >= fnMaxCalls:
		_, f.cursor = f.calls(math.MaxUint64, nil)
	default:
		f.buf, f.cursor = f.calls(f.cursor, f.buf)
	}
}

// known reports whether the pace has a base of the functions' seen in
// the last minute.
func (f *fnSignal) known(now time.Time) bool {
	return f.base.seenWithin(now, baseBucket*baseBuckets)
}

// arrived reports whether the window has calls enough to judge and the
// pace knows no base of theirs.
func (f *fnSignal) arrived(now time.Time) bool {
	return len(f.buf) >= fnMinCalls && !f.known(now)
}

// What a window's calls say of the pace (fnSignal.judge).
const (
	fnJudged = iota // judged (or too few calls): the cut says
	fnProbe         // time for a probe window
	fnProbed        // a probe window ended
)

// judge takes the window's calls and returns what they say of the pace,
// and the factor their latency cuts it by (1: none). A window with fewer
// than fnMinCalls calls cuts nothing: on an idle runtime the functions do
// not hold the job back.
func (f *fnSignal) judge(now time.Time) (verdict int, cut float64) {
	cut = 1
	probing := f.probing
	f.probing = false
	calls := f.buf
	defer func() { f.buf = calls[:0] }()
	f.last = 0
	if len(calls) < fnMinCalls {
		if probing {
			return fnProbed, cut
		}
		return fnJudged, cut
	}
	slices.Sort(calls)
	lat := calls[int(fnQuantile*float64(len(calls)-1))]
	f.last = lat
	if !f.known(now) {
		f.base.reset() // nothing seen of them for a minute
	}
	base := f.base.note(now, lat)
	if probing {
		return fnProbed, cut
	}
	if limit := base + max(fnTarget, time.Duration(fnTargetRatio*float64(base))); lat > limit {
		cut = cutFor(limit, lat)
	}
	if cut == 1 && now.Sub(f.probedAt) >= fnProbeEvery {
		return fnProbe, cut
	}
	return fnJudged, cut
}

// baseHistory is a latency's base: the least window latency of each
// baseBucket over the last baseBuckets of them, so that it follows the
// machine but not a load that comes and goes within a minute.
type baseHistory struct {
	buckets []time.Duration // newest last
	start   time.Time       // when the newest began
}

// note adds a window's latency and returns the base.
func (h *baseHistory) note(now time.Time, lat time.Duration) time.Duration {
	if len(h.buckets) == 0 || now.Sub(h.start) >= baseBucket {
		h.buckets = append(h.buckets, lat)
		if len(h.buckets) > baseBuckets {
			h.buckets = h.buckets[1:]
		}
		h.start = now
	} else if n := len(h.buckets) - 1; lat < h.buckets[n] {
		h.buckets[n] = lat
	}
	return slices.Min(h.buckets)
}

// get returns the base, 0 when nothing was noted.
func (h *baseHistory) get() time.Duration {
	if len(h.buckets) == 0 {
		return 0
	}
	return slices.Min(h.buckets)
}

// seenWithin reports whether a latency was noted within d of now.
func (h *baseHistory) seenWithin(now time.Time, d time.Duration) bool {
	return len(h.buckets) > 0 && now.Sub(h.start) < d
}

// reset forgets every latency noted.
func (h *baseHistory) reset() { h.buckets = h.buckets[:0] }

// backOffLocked cuts the pace by factor.
func (p *pacer) backOffLocked(factor float64) {
	p.backoffs++
	if p.backoffMetric != nil {
		p.backoffMetric.Inc()
	}
	p.rate = max(p.rate*factor, minPace)
	if p.limit > 0 {
		p.rate = min(p.rate, p.limit)
	}
	p.slow = true
}

// view is the pace as the API shows it.
func (p *pacer) view() *Pace {
	p.mu.Lock()
	defer p.mu.Unlock()
	return &Pace{Rate: p.rate, Limit: p.limit, LatencyMs: ms(p.last), BaseMs: ms(p.base.get()),
		FunctionsMs: ms(p.fn.last), FunctionsBaseMs: ms(p.fn.base.get()), Backoffs: p.backoffs}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// settled feeds the pace with a write's latency: from its hand-over to
// the engine (sent) until the commit that carries it is durable. The
// worker waits for that commit before its next write, so a job has at
// most Workers writes not yet durable, and the commits' own latency —
// the committer and the disk the functions' commits need too — is part
// of what the pace sees. A write that changed nothing (a rejected one)
// carries no commit: its latency does not count. In cluster mode a write
// is answered once its owner's commit is durable already (it carries no
// checkpoint of this node's): its latency counts as it is.
func (rn *run) settled(a address.Address, rc partition.Receipt, sent time.Time) {
	if rc.Reject != partition.Applied {
		return
	}
	if rc.Checkpoint != 0 {
		p := address.Partition(a.ID, rn.m.cfg.Engine.Partitions())
		if _, ok, err := rn.m.cfg.Engine.WaitDurable(rn.m.ctx, p, rc.Checkpoint); err != nil || !ok {
			return // the process stops
		}
	}
	rn.pace.done(time.Since(sent))
}
