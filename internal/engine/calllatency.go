package engine

import (
	"sync/atomic"
	"time"
)

// callRingSize is how many of the latest calls' round-trip times the
// engine keeps for its readers (a power of two): at 5,000 calls a second,
// 0.8 s of them, more than a bulk job's pace window (internal/jobs).
const callRingSize = 4096

// callRing holds the round-trip times of the latest successful calls to
// remote functions, for readers that each keep their own cursor (a bulk
// job's pace: internal/jobs/pace.go). A call's completion adds to it
// without a lock (one atomic add and one store), so the hot path of the
// load pays next to nothing and any number of readers take no turn of it.
// A reader that fell more than callRingSize calls behind skips to the
// latest callRingSize; a slot being written while it is read may give the
// round trip of an older call in that slot, which does not matter to a
// latency's quantile.
type callRing struct {
	next  atomic.Uint64 // calls ever added
	slots [callRingSize]atomic.Int64
}

func (r *callRing) add(d time.Duration) {
	i := r.next.Add(1) - 1
	r.slots[i&(callRingSize-1)].Store(int64(d))
}

// since appends to buf the round trips added after cursor (the value a
// previous call returned) and returns them with the cursor to pass next
// time. A cursor ahead of every call (math.MaxUint64) gives none: it
// starts a reader at the present.
func (r *callRing) since(cursor uint64, buf []time.Duration) ([]time.Duration, uint64) {
	end := r.next.Load()
	if cursor > end {
		return buf, end
	}
	if end-cursor > callRingSize {
		cursor = end - callRingSize
	}
	for i := cursor; i < end; i++ {
		buf = append(buf, time.Duration(r.slots[i&(callRingSize-1)].Load()))
	}
	return buf, end
}

// CallLatencies appends to buf the round-trip times of the successful
// calls to remote functions that completed since cursor (the cursor the
// last call returned; math.MaxUint64 the first time, which gives none and
// the present's cursor), at most the latest 4,096, and returns them with
// the next cursor. It is how a bulk job's pace
// hears the functions' latency (internal/jobs): any number of readers may
// call it at once, each with its own cursor.
func (e *Engine) CallLatencies(cursor uint64, buf []time.Duration) ([]time.Duration, uint64) {
	return e.callRTT.since(cursor, buf)
}
