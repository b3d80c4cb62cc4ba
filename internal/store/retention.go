package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/statefun-go/statefun/internal/protocol"
)

// Retention bounds the key spaces that nothing else trims: mutation
// receipts, the audit log, and egress records no consumer has taken. Each
// has a maximum age and a maximum count; a record is deleted once either is
// exceeded, oldest first. A zero field means its default; a negative one
// means no bound.
type Retention struct {
	// ReceiptAge and ReceiptCount bound the receipts of state API mutations
	// (defaults 24 h and 100,000). A client asks for a receipt right after
	// its mutation; a day is ample.
	ReceiptAge   time.Duration
	ReceiptCount int
	// AuditAge and AuditCount bound the audit log (defaults 30 days and
	// 1,000,000 records, one per entry a mutation changed).
	AuditAge   time.Duration
	AuditCount int
	// EgressAge and EgressCount bound the records waiting in each egress
	// outbox (defaults 7 days and 1,000,000 per outbox). A record deleted
	// here is lost to its consumer; the count protects the disk from a
	// consumer that never comes.
	EgressAge   time.Duration
	EgressCount int
	// KeepEgress lists egress ids ("namespace/type") whose outboxes
	// EgressAge and EgressCount never trim: the Kafka egresses, whose
	// records are acknowledged effects that must reach Kafka however long
	// it is away. Their outboxes are bounded by the disk guard instead,
	// which refuses new work before the disk fills.
	KeepEgress []string
	// IdempotencyAge and IdempotencyCount bound the idempotency keys of
	// ingress requests (defaults 24 h and 1,000,000). A request retried
	// with its key after its record is gone makes a new message.
	IdempotencyAge   time.Duration
	IdempotencyCount int
	// DeadLetterAge and DeadLetterCount bound the records ingresses could
	// not deliver (defaults 7 days and 100,000): long enough for an
	// operator to look after a weekend, few enough to protect the disk
	// from a topic full of bad records.
	DeadLetterAge   time.Duration
	DeadLetterCount int
	// HistoryAge and HistoryCount bound the history of each state entry
	// (defaults 7 days and 100 changes per entry; history.go). The newest
	// change of an entry that has a value is kept whatever its age.
	HistoryAge   time.Duration
	HistoryCount int
	// MessageDeadLetterAge and MessageDeadLetterCount bound the messages
	// operators skipped out of inboxes (defaults 30 days and 100,000):
	// each is a deliberate repair, kept as long as the audit log that
	// tells it, to be re-sent once the function is fixed.
	MessageDeadLetterAge   time.Duration
	MessageDeadLetterCount int
}

// Retention defaults; docs/reference/storage.md explains them.
const (
	DefaultReceiptAge   = 24 * time.Hour
	DefaultReceiptCount = 100_000
	DefaultAuditAge     = 30 * 24 * time.Hour
	DefaultAuditCount   = 1_000_000
	DefaultEgressAge    = 7 * 24 * time.Hour
	DefaultEgressCount  = 1_000_000
	// DefaultIdempotencyAge and DefaultIdempotencyCount bound idempotency
	// keys: clients retry within minutes; a day covers a retry after an
	// outage, and a million keys (about 150 MB) the keys of a busy day.
	DefaultIdempotencyAge   = 24 * time.Hour
	DefaultIdempotencyCount = 1_000_000
	// DefaultDeadLetterAge and DefaultDeadLetterCount bound ingress dead
	// letters.
	DefaultDeadLetterAge   = 7 * 24 * time.Hour
	DefaultDeadLetterCount = 100_000
	// DefaultMessageDeadLetterAge and DefaultMessageDeadLetterCount bound
	// skipped messages.
	DefaultMessageDeadLetterAge   = 30 * 24 * time.Hour
	DefaultMessageDeadLetterCount = 100_000
)

// sweepBatch is the most deletions one sweep commits at once, so that a
// sweep of a large backlog never builds one huge batch (nor holds the
// commit pipeline for long).
const sweepBatch = 1000

func (r Retention) withDefaults() (Retention, error) {
	for _, d := range []struct {
		p   *time.Duration
		def time.Duration
	}{{&r.ReceiptAge, DefaultReceiptAge}, {&r.AuditAge, DefaultAuditAge}, {&r.EgressAge, DefaultEgressAge}, {&r.IdempotencyAge, DefaultIdempotencyAge}, {&r.DeadLetterAge, DefaultDeadLetterAge}, {&r.HistoryAge, DefaultHistoryAge}, {&r.MessageDeadLetterAge, DefaultMessageDeadLetterAge}} {
		if *d.p == 0 {
			*d.p = d.def
		}
	}
	for _, c := range []struct {
		p   *int
		def int
	}{{&r.ReceiptCount, DefaultReceiptCount}, {&r.AuditCount, DefaultAuditCount}, {&r.EgressCount, DefaultEgressCount}, {&r.IdempotencyCount, DefaultIdempotencyCount}, {&r.DeadLetterCount, DefaultDeadLetterCount}, {&r.HistoryCount, DefaultHistoryCount}, {&r.MessageDeadLetterCount, DefaultMessageDeadLetterCount}} {
		if *c.p == 0 {
			*c.p = c.def
		}
	}
	return r, nil
}

// ageCutoff returns the Unix millisecond before which records are too old,
// or MinInt64 when age is unbounded.
func ageCutoff(now time.Time, age time.Duration) int64 {
	if age < 0 {
		return -1 << 63
	}
	return now.Add(-age).UnixMilli()
}

// excess returns how many of n records a count limit removes.
func excess(n, limit int) int {
	if limit < 0 || n <= limit {
		return 0
	}
	return n - limit
}

// SweepStats is what one Sweep found and removed.
type SweepStats struct {
	// Receipts, Audit, Egress and Idempotency count the records left in
	// each space.
	Receipts, Audit, Egress, Idempotency, DeadLetters, MessageDeadLetters int
	// Deleted counts the records removed, per space.
	DeletedReceipts, DeletedAudit, DeletedEgress, DeletedIdempotency, DeletedDeadLetters, DeletedMessageDeadLetters int
	// DeletedHistory counts the history records removed. (The history is
	// not counted: it is trimmed per entry, without a scan of it all.)
	DeletedHistory int
}

// sweepLoop runs Sweep every interval until Close.
func (db *DB) sweepLoop(interval time.Duration) {
	defer db.sweeper.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, err := db.Sweep(); err != nil {
			db.opts.Logger.Errorf("retention sweep: %v", err)
		}
		select {
		case <-db.stop:
			return
		case <-t.C:
		case <-db.press.kick:
			// A space took in a tenth of its limit since the last
			// sweep (pressure.go).
		}
	}
}

// Sweep applies the retention once: it deletes, oldest first, the receipts,
// audit records (with their index entries), egress records, idempotency
// keys (with their index entries) and ingress dead letters beyond
// Options.Retention, in batches of at most 1,000 deletions, and updates the
// size metrics. The background sweeper calls it every
// Options.SweepInterval; tests call it directly.
func (db *DB) Sweep() (SweepStats, error) {
	db.sweepMu.Lock()
	defer db.sweepMu.Unlock()
	db.swept()
	var st SweepStats
	if err := db.health.err(time.Now()); err != nil {
		return st, nil // no deletions on a failing disk; try again later
	}
	now := db.opts.Now()
	r := db.opts.Retention
	var err error
	if st.Receipts, st.DeletedReceipts, err = db.sweepReceipts(ageCutoff(now, r.ReceiptAge), r.ReceiptCount); err != nil {
		return st, err
	}
	if st.Audit, st.DeletedAudit, err = db.sweepAudit(ageCutoff(now, r.AuditAge), r.AuditCount); err != nil {
		return st, err
	}
	if st.Egress, st.DeletedEgress, err = db.sweepEgress(now, r.EgressAge, r.EgressCount); err != nil {
		return st, err
	}
	if st.Idempotency, st.DeletedIdempotency, err = db.sweepIdempotency(ageCutoff(now, r.IdempotencyAge), r.IdempotencyCount); err != nil {
		return st, err
	}
	if st.DeadLetters, st.DeletedDeadLetters, err = db.sweepDeadLetters(ageCutoff(now, r.DeadLetterAge), r.DeadLetterCount); err != nil {
		return st, err
	}
	if st.DeletedHistory, err = db.sweepHistory(ageCutoff(now, r.HistoryAge), r.HistoryCount); err != nil {
		return st, err
	}
	if st.MessageDeadLetters, st.DeletedMessageDeadLetters, err = db.sweepMessageDeadLetters(ageCutoff(now, r.MessageDeadLetterAge), r.MessageDeadLetterCount); err != nil {
		return st, err
	}
	db.opts.Metrics.observe(db, st)
	return st, nil
}

// deleter commits deletions in batches of sweepBatch.
type deleter struct {
	db *DB
	b  *Batch
	n  int // deletions in total
}

func (d *deleter) batch() *Batch {
	if d.b == nil {
		d.b = d.db.NewBatch()
	}
	return d.b
}

// done counts one deletion and commits the batch when it is full.
func (d *deleter) done() error {
	d.n++
	if d.b.Len() >= sweepBatch {
		return d.flush()
	}
	return nil
}

func (d *deleter) flush() error {
	if d.b == nil {
		return nil
	}
	b := d.b
	d.b = nil
	if sink := d.db.changelogSweep.Load(); sink != nil {
		return d.db.routeSweep(b, *sink)
	}
	// Retention deletions need no sync: lost ones are redone next sweep.
	return b.Commit(false)
}

// ChangelogSweep takes, in cluster mode, the retention deletions of keys
// that partition p's changelog wrote into the store. It must delete them
// through the changelog — tombstones in the transaction of p's owner,
// applied to the store once committed — or not at all: a key deleted only
// here would come back with the next restore from the changelog, on this
// node or another, and the compacted changelog would keep every key ever
// written. It is called from the sweep's goroutine and must not block on
// the sweep; keys are the callee's to keep.
type ChangelogSweep func(p int, keys [][]byte)

// SetChangelogSweep makes Sweep hand the deletions of keys a partition's
// changelog wrote to fn instead of deleting them itself (cluster mode);
// deletions of keys no changelog wrote stay local. nil restores local
// deletion of everything.
func (db *DB) SetChangelogSweep(fn ChangelogSweep) {
	if fn == nil {
		db.changelogSweep.Store(nil)
		return
	}
	db.changelogSweep.Store(&fn)
}

// routeSweep splits a batch of retention deletions: a key in a
// partition's changelog index goes to sink with the other keys of its
// partition; the rest is deleted here.
func (db *DB) routeSweep(b *Batch, sink ChangelogSweep) error {
	defer b.Close()
	local := db.NewBatch()
	defer local.Close()
	byPart := map[int][][]byte{}
	var idx []byte
	// Retention only deletes; Ops lists each key once.
	err := b.Ops(func(op Op) error {
		key := op.Key
		for p := range db.partitions {
			idx = changelogKeysKey(idx[:0], p, key)
			_, found, err := db.get(idx)
			if err != nil {
				return err
			}
			if found {
				byPart[p] = append(byPart[p], append([]byte(nil), key...))
				return nil
			}
		}
		local.delete(key)
		return nil
	})
	if err != nil {
		return err
	}
	for p := range db.partitions {
		if keys := byPart[p]; len(keys) > 0 {
			sink(p, keys)
		}
	}
	if local.Len() == 0 {
		return nil
	}
	return local.Commit(false)
}

// countKeys counts the keys in [lower, upper) without reading values.
func (db *DB) countKeys(lower, upper []byte) (int, error) {
	it, err := db.newIter(lower, upper)
	if err != nil {
		return 0, err
	}
	n := 0
	for valid := it.First(); valid; valid = it.Next() {
		n++
	}
	return n, closeIter(it)
}

// sweepReceipts deletes receipts older than cutoff or beyond limit. Receipts
// are keyed by mutation id, which the state API makes time-ordered, so key
// order is age order.
func (db *DB) sweepReceipts(cutoff int64, limit int) (left, deleted int, err error) {
	return db.sweepInAgeOrder(spaceReceipt, cutoff, limit, func(it *pebble.Iterator) (int64, error) {
		r := new(protocol.Receipt)
		err := iterValue(it, r)
		return r.GetAt(), err
	})
}

// sweepInAgeOrder deletes the records of a key space whose key order is
// age order: first the oldest beyond limit, then those older than cutoff.
// It walks from the oldest and stops at the first record it keeps; at
// reads a record's time (unix ms) from its value.
func (db *DB) sweepInAgeOrder(space byte, cutoff int64, limit int, at func(*pebble.Iterator) (int64, error)) (left, deleted int, err error) {
	lower, upper := []byte{space}, []byte{space + 1}
	n, err := db.countKeys(lower, upper)
	if err != nil {
		return 0, 0, err
	}
	drop := excess(n, limit)
	it, err := db.newIter(lower, upper)
	if err != nil {
		return 0, 0, err
	}
	d := &deleter{db: db}
	for valid := it.First(); valid; valid = it.Next() {
		if d.n >= drop {
			t, err := at(it)
			if err != nil {
				return 0, 0, finish(it, err)
			}
			if t >= cutoff {
				break
			}
		}
		d.batch().delete(it.Key())
		if err := d.done(); err != nil {
			return 0, 0, finish(it, err)
		}
	}
	if err := finish(it, d.flush()); err != nil {
		return 0, 0, err
	}
	return n - d.n, d.n, nil
}

// sweepAudit deletes audit records older than cutoff or beyond limit, with
// their index entries. The audit log is keyed by time, so the oldest come
// first.
func (db *DB) sweepAudit(cutoff int64, limit int) (left, deleted int, err error) {
	lower, upper := []byte{spaceAudit}, []byte{spaceAudit + 1}
	n, err := db.countKeys(lower, upper)
	if err != nil {
		return 0, 0, err
	}
	drop := excess(n, limit)
	it, err := db.newIter(lower, upper)
	if err != nil {
		return 0, 0, err
	}
	d := &deleter{db: db}
	for valid := it.First(); valid; valid = it.Next() {
		key := it.Key()
		if len(key) < 9 {
			return 0, 0, finish(it, corrupt(key, errBadKey))
		}
		if d.n >= drop && unflipSign(binary.BigEndian.Uint64(key[1:])) >= cutoff {
			break
		}
		r := new(protocol.AuditRecord)
		if err := iterValue(it, r); err != nil {
			return 0, 0, finish(it, err)
		}
		d.batch().deleteAudit(r)
		if err := d.done(); err != nil {
			return 0, 0, finish(it, err)
		}
	}
	if err := finish(it, d.flush()); err != nil {
		return 0, 0, err
	}
	return n - d.n, d.n, nil
}

// egressAges remembers, for the age limit of egress records (which carry no
// time), the highest egress sequence number seen at each sweep: egress
// sequence numbers grow over all outboxes, so every record whose number is
// at most the one seen at time t was written before t. The memory is lost
// on restart, so after a restart a record is kept for at least the age
// limit from the start — never deleted too early.
type egressAges struct {
	mu      sync.Mutex
	samples []egressSample // oldest first
}

type egressSample struct {
	at  time.Time
	seq uint64
}

// observe records that every record up to seq existed at now, and returns
// the highest sequence number whose records are older than age (0: none).
func (e *egressAges) observe(now time.Time, seq uint64, age time.Duration) uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if n := len(e.samples); n > 0 && e.samples[n-1].seq > seq {
		seq = e.samples[n-1].seq // outboxes emptied; numbers still grew
	}
	e.samples = append(e.samples, egressSample{now, seq})
	if age < 0 {
		e.samples = e.samples[len(e.samples)-1:]
		return 0
	}
	// The newest sample at least age old bounds the expired records; older
	// samples are no longer needed.
	var expired uint64
	i := 0
	for i < len(e.samples) && !e.samples[i].at.After(now.Add(-age)) {
		expired = e.samples[i].seq
		i++
	}
	if i > 1 {
		e.samples = append(e.samples[:0], e.samples[i-1:]...)
	}
	return expired
}

// sweepEgress deletes, in every outbox, the records beyond the per-outbox
// limit and those older than age.
func (db *DB) sweepEgress(now time.Time, age time.Duration, limit int) (left, deleted int, err error) {
	maxSeq, err := db.MaxEgressSeq()
	if err != nil {
		return 0, 0, err
	}
	expired := db.egressAge.observe(now, maxSeq, age)

	// Count each outbox's records: key minus its 8-byte seq is the outbox.
	lower, upper := []byte{spaceEgress}, []byte{spaceEgress + 1}
	counts := map[string]int{}
	total := 0
	it, err := db.newIter(lower, upper)
	if err != nil {
		return 0, 0, err
	}
	for valid := it.First(); valid; valid = it.Next() {
		key := it.Key()
		if len(key) < 9 {
			return 0, 0, finish(it, corrupt(key, errBadKey))
		}
		counts[string(key[:len(key)-8])]++
		total++
	}
	if err := closeIter(it); err != nil {
		return 0, 0, err
	}
	var kept [][]byte
	for _, id := range db.opts.Retention.KeepEgress {
		kept = append(kept, appendString([]byte{spaceEgress}, id))
	}
	keep := func(outbox []byte) bool {
		for _, k := range kept {
			if bytes.HasPrefix(outbox, k) {
				return true
			}
		}
		return false
	}
	drop := map[string]int{}
	for outbox, n := range counts {
		drop[outbox] = excess(n, limit)
	}

	it, err = db.newIter(lower, upper)
	if err != nil {
		return 0, 0, err
	}
	d := &deleter{db: db}
	var outbox []byte
	for valid := it.First(); valid; {
		key := it.Key()
		outbox = append(outbox[:0], key[:len(key)-8]...)
		seq := binary.BigEndian.Uint64(key[len(key)-8:])
		if keep(outbox) || drop[string(outbox)] == 0 && seq > expired {
			// Records are in seq order within an outbox: the rest of this
			// one is kept.
			next := prefixSuccessor(outbox)
			if next == nil {
				break
			}
			valid = it.SeekGE(next)
			continue
		}
		if drop[string(outbox)] > 0 {
			drop[string(outbox)]--
		}
		d.batch().delete(key)
		if err := d.done(); err != nil {
			return 0, 0, finish(it, err)
		}
		valid = it.Next()
	}
	if err := finish(it, d.flush()); err != nil {
		return 0, 0, err
	}
	return total - d.n, d.n, nil
}

// indexAudit builds the audit index entries of a store written before
// the indexes existed (or before some of them did), in batches, then marks
// the store indexed. A store created by this build is marked at once.
func (db *DB) indexAudit() error {
	if _, ok, err := db.metaU32(metaAuditIndexed2); err != nil || ok {
		return err
	}
	it, err := db.newIter([]byte{spaceAudit}, []byte{spaceAudit + 1})
	if err != nil {
		return err
	}
	b := db.NewBatch()
	defer func() { b.Close() }()
	for valid := it.First(); valid; valid = it.Next() {
		r := new(protocol.AuditRecord)
		if err := iterValue(it, r); err != nil {
			return finish(it, err)
		}
		b.putAuditIndex(r)
		if b.Len() >= sweepBatch {
			if err := b.Commit(false); err != nil {
				return finish(it, err)
			}
			b = db.NewBatch()
		}
	}
	if err := closeIter(it); err != nil {
		return err
	}
	b.set(metaKey(nil, metaAuditIndexed), appendU32(nil, 1))
	b.set(metaKey(nil, metaAuditIndexed2), appendU32(nil, 1))
	if err := b.Commit(true); err != nil {
		return fmt.Errorf("store: index the audit log: %w", err)
	}
	return nil
}

// retireAuditSpaces empties the spaces of the retired audit indexes (by id
// and by namespace, 0x1C and 0x1D) in a store an older build wrote, with
// the entries of the changelog key index (cluster mode) that name keys in
// them, then marks the store. A store created by this build is marked at
// once.
func (db *DB) retireAuditSpaces() error {
	if _, ok, err := db.metaU32(metaAuditRetired); err != nil || ok {
		return err
	}
	b := db.pdb.NewBatch()
	defer b.Close()
	_ = b.DeleteRange([]byte{spaceRetiredAuditID}, []byte{spaceRetiredAuditNamespace + 1}, nil)
	for p := range db.partitions {
		idx := changelogKeysPrefix(nil, p)
		_ = b.DeleteRange(append(bytes.Clone(idx), spaceRetiredAuditID), append(idx, spaceRetiredAuditNamespace+1), nil)
	}
	_ = b.Set(metaKey(nil, metaAuditRetired), appendU32(nil, 1), nil)
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("store: remove the retired audit indexes: %w", err)
	}
	return nil
}

// indexTokens builds the index by cancellation token (0x04) of a store
// written before it existed, in batches, then marks the store indexed. A
// store created by this build is marked at once.
func (db *DB) indexTokens() error {
	if _, ok, err := db.metaU32(metaTokensIndexed); err != nil || ok {
		return err
	}
	it, err := db.newIter([]byte{spaceTimer}, []byte{spaceTimer + 1})
	if err != nil {
		return err
	}
	b := db.NewBatch()
	defer func() { b.Close() }()
	for valid := it.First(); valid; valid = it.Next() {
		k, err := decodeTimerKey(it.Key())
		if err != nil {
			return finish(it, corrupt(it.Key(), err))
		}
		env := new(protocol.Envelope)
		if err := iterValue(it, env); err != nil {
			return finish(it, err)
		}
		if tok := env.GetCancellationToken(); tok != "" {
			b.putToken(k, env.GetCaller().GetId(), tok)
		}
		if b.Len() >= sweepBatch {
			if err := b.Commit(false); err != nil {
				return finish(it, err)
			}
			b = db.NewBatch()
		}
	}
	if err := closeIter(it); err != nil {
		return err
	}
	b.set(metaKey(nil, metaTokensIndexed), appendU32(nil, 1))
	if err := b.Commit(true); err != nil {
		return fmt.Errorf("store: index the timers by cancellation token: %w", err)
	}
	return nil
}

// spaceBytes estimates the disk bytes of the key spaces [lower, upper).
func (db *DB) spaceBytes(lower, upper byte) uint64 {
	n, err := db.pdb.EstimateDiskUsage([]byte{lower}, []byte{upper})
	if err != nil {
		return 0
	}
	return n
}
