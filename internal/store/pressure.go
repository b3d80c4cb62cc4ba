package store

import "sync/atomic"

// A retention limit is applied by the sweeper, once a minute by default:
// between two sweeps a burst of writes could take a space far past its
// count limit (a client sending a thousand mutations a second adds 60,000
// audit records before the next sweep). So every committed batch counts
// what it added to each bounded space, and once a space took in a tenth of
// its limit since the last sweep, the sweeper runs at once: no space goes
// more than about a tenth past its count limit, however fast it is
// written, and a sweep is paid once per tenth of a limit written, not per
// batch.

// retainedSpace names a space the retention bounds by count.
type retainedSpace int

const (
	retainedReceipts retainedSpace = iota
	retainedAudit
	retainedEgress
	retainedIdempotency
	retainedDeadLetters
	retainedHistory
	retainedMessageDeadLetters
	retainedSpaces // the number of them
)

// historyKick is how many history records since the last sweep start one:
// the history's limit is per entry (Retention.HistoryCount), so its
// pressure is counted in records written.
const historyKick = 100_000

// pressure counts, per space, what committed batches added since the last
// sweep, and wakes the sweeper when a space took in a tenth of its limit.
type pressure struct {
	since [retainedSpaces]atomic.Int64
	kick  chan struct{} // buffered 1; the sweeper reads it
}

// kickAt returns each space's count of writes that starts a sweep; 0 for
// a space without a count limit.
func (r Retention) kickAt() [retainedSpaces]int64 {
	tenth := func(limit int) int64 {
		if limit < 0 {
			return 0
		}
		return max(int64(limit)/10, 1)
	}
	return [retainedSpaces]int64{
		retainedReceipts:           tenth(r.ReceiptCount),
		retainedAudit:              tenth(r.AuditCount),
		retainedEgress:             tenth(r.EgressCount),
		retainedIdempotency:        tenth(r.IdempotencyCount),
		retainedDeadLetters:        tenth(r.DeadLetterCount),
		retainedHistory:            historyKick,
		retainedMessageDeadLetters: tenth(r.MessageDeadLetterCount),
	}
}

// wrote adds a committed batch's writes, and wakes the sweeper when a
// space reached its kick.
func (db *DB) wrote(n *[retainedSpaces]int32) {
	kick := false
	for s, c := range n {
		if c == 0 {
			continue
		}
		total := db.press.since[s].Add(int64(c))
		if at := db.kickAt[s]; at > 0 && total >= at {
			kick = true
		}
	}
	if kick {
		select {
		case db.press.kick <- struct{}{}:
		default:
		}
	}
}

// swept forgets the writes counted before a sweep started.
func (db *DB) swept() {
	for s := range db.press.since {
		db.press.since[s].Store(0)
	}
}
