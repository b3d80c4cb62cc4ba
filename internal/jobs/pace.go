package jobs

import (
	"context"
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
)

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
	// Backoffs counts the times the pace was cut: the functions' load (or
	// a full partition) slowed the job's writes.
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
	// buckets hold the least window latency of each baseBucket, newest
	// last; bucketStart is when the newest began.
	buckets     []time.Duration
	bucketStart time.Time
	backoffs    int64
}

// newPacer returns a pace capped at limit writes per second (0: none).
func newPacer(limit float64, now func() time.Time) *pacer {
	if now == nil {
		now = time.Now
	}
	p := &pacer{now: now, limit: limit, rate: startPace}
	if limit > 0 {
		p.rate = min(p.rate, limit)
	}
	t := now()
	p.winStart, p.bucketStart, p.lastEvent = t, t, t
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
// the pace moves by their latency.
func (p *pacer) judgeLocked(now time.Time) {
	if now.Sub(p.lastEvent) >= paceIdle {
		// Nothing for a while (the page's commits awaited, a full
		// partition): what came before does not tell the present.
		p.winStart, p.held, p.samples = now, false, p.samples[:0]
	}
	p.lastEvent = now
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
	base := p.baseLocked(now, samples[0])
	if limit := base + max(paceTarget, time.Duration(paceTargetRatio*float64(base))); lat > limit {
		// Halved, or cut in proportion when the latency is far above
		// its limit: a load that arrives finds the job at a tenth of its
		// pace within a window, not after four halvings.
		p.backOffLocked(max(paceMinCut, min(0.5, float64(limit)/float64(lat))))
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

// baseLocked notes a window's least latency and returns the base.
func (p *pacer) baseLocked(now time.Time, least time.Duration) time.Duration {
	if len(p.buckets) == 0 || now.Sub(p.bucketStart) >= baseBucket {
		p.buckets = append(p.buckets, least)
		if len(p.buckets) > baseBuckets {
			p.buckets = p.buckets[1:]
		}
		p.bucketStart = now
	} else if n := len(p.buckets) - 1; least < p.buckets[n] {
		p.buckets[n] = least
	}
	return slices.Min(p.buckets)
}

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
	v := &Pace{Rate: p.rate, Limit: p.limit, LatencyMs: ms(p.last), Backoffs: p.backoffs}
	if len(p.buckets) > 0 {
		v.BaseMs = ms(slices.Min(p.buckets))
	}
	return v
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
