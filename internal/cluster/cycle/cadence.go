package cycle

import "time"

// DefaultInterval is Config.Interval's default, --cluster-commit-interval's.
const DefaultInterval = 100 * time.Millisecond

// DefaultMinGap is Config.MinGap's default: the shortest pause between the
// end of one transaction and the begin of the next while work waits.
const DefaultMinGap = 2 * time.Millisecond

// PollFor decides, while a cycle polls, how much longer it polls before
// its transaction begins; zero or less: begin it now. polling is when the
// cycle began polling; work says whether anything waits to commit
// (requests queued, or records polled in this cycle).
//
// The cadence adapts to the load. Work that waits commits as soon as the
// previous transaction is a gap behind, so a lone message is not held
// for a whole interval; the gap is the previous transaction's own
// duration, at least MinGap and at most Interval, so a busy node, whose
// transactions take longer, spends at most about half its time committing
// and batches what arrives meanwhile into the next one. With nothing to
// do a cycle polls for Interval, then ends (the shell discards it and
// begins the next). So Interval is the longest work waits for its
// transaction to begin.
func (m *Machine) PollFor(now, polling time.Time, work bool) time.Duration {
	if !work {
		return polling.Add(m.cfg.Interval).Sub(now)
	}
	return m.lastEnd.Add(m.gap()).Sub(now)
}

// gap is the pause after the previous transaction before the next may
// begin: its duration, bounded by MinGap and Interval.
func (m *Machine) gap() time.Duration {
	return max(min(m.lastDur, m.cfg.Interval), min(m.cfg.MinGap, m.cfg.Interval))
}

// Committing records that the transaction's polling ended and its Kafka
// transaction begins now: the Machine times the gap after it from this.
func (t *Txn) Committing(now time.Time) { t.start = now }
