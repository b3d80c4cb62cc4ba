package cycle

import "time"

// DefaultInterval is Config.Interval's default, --cluster-commit-interval's.
const DefaultInterval = 100 * time.Millisecond

// DefaultMinGap is Config.MinGap's default: the shortest pause between the
// end of one transaction and the begin of the next while work waits.
const DefaultMinGap = 2 * time.Millisecond

// backlogGap is how many times its duration a transaction that ended with
// work already waiting is followed by a pause: a busy node then spends at
// most a third of its time committing.
const backlogGap = 2

// PollFor decides, while a cycle polls, how much longer it polls before
// its transaction begins; zero or less: begin it now. polling is when the
// cycle began polling; work says whether anything waits to commit
// (requests queued, or records polled in this cycle).
//
// The cadence adapts to the load. Work that waits commits as soon as the
// previous transaction is a gap behind, so a lone message is not held
// for an interval. The gap is MinGap, unless work was already waiting
// when the cycle began (the first PollFor of the open transaction): the
// node is busy, and the gap is twice the previous transaction's
// duration, so that a busy node batches what arrives meanwhile into
// fewer, larger transactions. The gap is never longer than Interval.
// With nothing to do a cycle polls for Interval, then ends (the shell
// discards it and begins the next). So Interval is the longest work
// waits for its transaction to begin.
func (m *Machine) PollFor(now, polling time.Time, work bool) time.Duration {
	if t := m.txn; t != nil && !t.asked {
		t.asked, t.backlog = true, work
	}
	if !work {
		return polling.Add(m.cfg.Interval).Sub(now)
	}
	gap := m.cfg.MinGap
	if m.txn != nil && m.txn.backlog {
		gap = max(gap, backlogGap*m.lastDur)
	}
	return m.lastEnd.Add(min(gap, m.cfg.Interval)).Sub(now)
}

// Committing records that the transaction's polling ended and its Kafka
// transaction begins now: the Machine times the gap after it from this.
func (t *Txn) Committing(now time.Time) { t.start = now }
