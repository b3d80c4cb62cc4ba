package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/protocol"
	"google.golang.org/protobuf/proto"
)

// Reads. Every scan runs on one Pebble iterator, so it sees one consistent
// snapshot: whole commits, never part of one. A scan stops at the first
// error its callback returns and returns that error as it is.

// PartitionMeta is the bookkeeping of one partition, rewritten by each of
// its commits.
type PartitionMeta struct {
	// CommitID is the id of the partition's last durable commit, counting
	// from 1; 0 means it never committed. The state API calls it the
	// checkpoint id.
	CommitID uint64
	// VersionSeq is the last version given to a state entry of the
	// partition; the next change gets VersionSeq+1.
	VersionSeq uint64
}

// get returns a copy of the value at key.
func (db *DB) get(key []byte) (val []byte, ok bool, err error) {
	v, closer, err := db.pdb.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("store: get %s: %w", formatKey(key), err)
	}
	val = append([]byte{}, v...)
	if err := closer.Close(); err != nil {
		return nil, false, fmt.Errorf("store: get %s: %w", formatKey(key), err)
	}
	return val, true, nil
}

// newIter returns an iterator over [lower, upper); a nil upper means no
// upper bound.
func (db *DB) newIter(lower, upper []byte) (*pebble.Iterator, error) {
	it, err := db.pdb.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, fmt.Errorf("store: new iterator: %w", err)
	}
	return it, nil
}

// closeIter closes it and returns the error it met, if any.
func closeIter(it *pebble.Iterator) error {
	if err := it.Close(); err != nil {
		return fmt.Errorf("store: iterate: %w", err)
	}
	return nil
}

// finish closes it and returns err, or else the iterator's own error.
func finish(it *pebble.Iterator, err error) error {
	if cerr := closeIter(it); err == nil {
		err = cerr
	}
	return err
}

// checkPartition returns an error if p is not a partition of the store.
func (db *DB) checkPartition(p int) error {
	if p < 0 || p >= db.partitions {
		return fmt.Errorf("store: partition %d out of range [0, %d)", p, db.partitions)
	}
	return nil
}

// GetState returns the entry of state of instance a, and false if there is
// none.
func (db *DB) GetState(a address.Address, state string) (Entry, bool, error) {
	key := stateKey(nil, a, state)
	val, ok, err := db.get(key)
	if err != nil || !ok {
		return Entry{}, false, err
	}
	e, err := decodeEntry(val)
	if err != nil {
		return Entry{}, false, corrupt(key, err)
	}
	return e, true, nil
}

// ScanAddressState calls fn with every state entry of instance a, in state
// name order.
func (db *DB) ScanAddressState(a address.Address, fn func(state string, e Entry) error) error {
	prefix := stateAddressPrefix(nil, a)
	it, err := db.newIter(prefix, prefixSuccessor(prefix))
	if err != nil {
		return err
	}
	for valid := it.First(); valid; valid = it.Next() {
		key := it.Key()
		state, rest, err := decodeString(key[len(prefix):])
		if err == nil && len(rest) != 0 {
			err = errBadKey
		}
		if err != nil {
			return finish(it, corrupt(key, err))
		}
		val, err := it.ValueAndErr()
		if err != nil {
			return finish(it, fmt.Errorf("store: read %s: %w", formatKey(key), err))
		}
		e, err := decodeEntry(val)
		if err != nil {
			return finish(it, corrupt(key, err))
		}
		if err := fn(state, e); err != nil {
			return finish(it, err)
		}
	}
	return finish(it, nil)
}

// ScanIDs calls fn with the ids of function type t that hold state, in key
// order (which is string order), until fn returns false. It lists only ids
// that start with prefix (all ids if prefix is empty) and that are strictly
// greater than after, so the last id of one page is the cursor of the next.
// (The empty id is the smallest string, so it is never listed; StateFun ids
// are not empty.) Values are not read.
func (db *DB) ScanIDs(t address.TypeName, prefix, after string, fn func(id string) bool) error {
	tp := stateTypePrefix(nil, t)
	lower := appendEscaped(bytes.Clone(tp), prefix)
	upper := prefixSuccessor(lower)
	// Every key of id `after` starts with tp+str(after); the successor of
	// that prefix is the first key of a greater id.
	if s := prefixSuccessor(appendString(bytes.Clone(tp), after)); bytes.Compare(s, lower) > 0 {
		lower = s
	}
	if upper != nil && bytes.Compare(lower, upper) >= 0 {
		return nil
	}
	it, err := db.newIter(lower, upper)
	if err != nil {
		return err
	}
	var idPrefix []byte
	for valid := it.First(); valid; {
		key := it.Key()
		id, rest, err := decodeString(key[len(tp):])
		if err != nil {
			return finish(it, corrupt(key, err))
		}
		if !fn(id) {
			break
		}
		idPrefix = append(idPrefix[:0], key[:len(key)-len(rest)]...)
		valid = skipPast(it, idPrefix)
	}
	return finish(it, nil)
}

// ScanTypes calls fn with every function type that holds state, in key
// order, until fn returns false. It seeks past each type's keys rather than
// reading them, and reads no values.
func (db *DB) ScanTypes(fn func(t address.TypeName) bool) error {
	it, err := db.newIter([]byte{spaceState}, []byte{spaceState + 1})
	if err != nil {
		return err
	}
	var typePrefix []byte
	for valid := it.First(); valid; {
		key := it.Key()
		var t address.TypeName
		ns, rest, err := decodeString(key[1:])
		if err == nil {
			t.Namespace = ns
			t.Name, rest, err = decodeString(rest)
		}
		if err != nil {
			return finish(it, corrupt(key, err))
		}
		if !fn(t) {
			break
		}
		typePrefix = append(typePrefix[:0], key[:len(key)-len(rest)]...)
		valid = skipPast(it, typePrefix)
	}
	return finish(it, nil)
}

// skipPast moves it to the first key that does not start with prefix, which
// is where it stands. It steps a few times first (cheap when the prefix holds
// only a few keys, the usual case for one id), then seeks. It reports
// whether the iterator is still valid.
func skipPast(it *pebble.Iterator, prefix []byte) bool {
	const steps = 3
	for range steps {
		if !it.Next() {
			return false
		}
		if !bytes.HasPrefix(it.Key(), prefix) {
			return true
		}
	}
	next := prefixSuccessor(prefix)
	if next == nil {
		return false
	}
	return it.SeekGE(next)
}

// Specs returns the registered state specs of function type t, in
// registration order, or nil if none are registered.
func (db *DB) Specs(t address.TypeName) ([]*protocol.FromFunction_PersistedValueSpec, error) {
	key := specsKey(nil, t)
	val, ok, err := db.get(key)
	if err != nil || !ok {
		return nil, err
	}
	var s protocol.Specs
	if err := unmarshalValue(key, val, &s); err != nil {
		return nil, err
	}
	return s.Specs, nil
}

// AllSpecs calls fn with the registered specs of every function type, in
// key order.
func (db *DB) AllSpecs(fn func(t address.TypeName, specs []*protocol.FromFunction_PersistedValueSpec) error) error {
	it, err := db.newIter([]byte{spaceSpecs}, []byte{spaceSpecs + 1})
	if err != nil {
		return err
	}
	for valid := it.First(); valid; valid = it.Next() {
		key := it.Key()
		t, err := decodeSpecsKey(key)
		if err != nil {
			return finish(it, corrupt(key, err))
		}
		var s protocol.Specs
		if err := iterValue(it, &s); err != nil {
			return finish(it, err)
		}
		if err := fn(t, s.Specs); err != nil {
			return finish(it, err)
		}
	}
	return finish(it, nil)
}

// iterValue decodes the protobuf value at the iterator's position into m.
func iterValue(it *pebble.Iterator, m proto.Message) error {
	val, err := it.ValueAndErr()
	if err != nil {
		return fmt.Errorf("store: read %s: %w", formatKey(it.Key()), err)
	}
	return unmarshalValue(it.Key(), val, m)
}

// Meta returns the meta record of partition p; the zero PartitionMeta if the
// partition has never committed.
func (db *DB) Meta(p int) (PartitionMeta, error) {
	if err := db.checkPartition(p); err != nil {
		return PartitionMeta{}, err
	}
	key := partitionKey(nil, p)
	val, ok, err := db.get(key)
	if err != nil || !ok {
		return PartitionMeta{}, err
	}
	var m protocol.PartitionMeta
	if err := unmarshalValue(key, val, &m); err != nil {
		return PartitionMeta{}, err
	}
	return PartitionMeta{CommitID: m.CommitId, VersionSeq: m.VersionSeq}, nil
}

// ScanInbox calls fn with every message in the inbox of partition p, in key
// order: the order the messages arrived (InboxKey.Arrival).
func (db *DB) ScanInbox(p int, fn func(k InboxKey, env *protocol.Envelope) error) error {
	return db.scanInbox(p, true, fn)
}

// ScanInboxFrom calls fn with the messages in the inbox of partition p
// whose arrival number is from or above, in key order, until fn returns an
// error (returned as it is): how a partition pages in the messages it left
// in the store while its backlog was full.
func (db *DB) ScanInboxFrom(p int, from uint64, fn func(k InboxKey, env *protocol.Envelope) error) error {
	return db.scanInboxFrom(p, from, true, fn)
}

// ScanInboxKeys calls fn with the key of every message in the inbox of
// partition p, in key order, without reading or decoding the messages: a
// restart's first pass, which needs only the sequence numbers.
func (db *DB) ScanInboxKeys(p int, fn func(k InboxKey) error) error {
	return db.scanInbox(p, false, func(k InboxKey, _ *protocol.Envelope) error { return fn(k) })
}

// scanInbox is ScanInbox, decoding the messages only when values is set
// (fn gets nil otherwise).
func (db *DB) scanInbox(p int, values bool, fn func(k InboxKey, env *protocol.Envelope) error) error {
	return db.scanInboxFrom(p, 0, values, fn)
}

// scanInboxFrom is scanInbox from the arrival number from on.
func (db *DB) scanInboxFrom(p int, from uint64, values bool, fn func(k InboxKey, env *protocol.Envelope) error) error {
	if err := db.checkPartition(p); err != nil {
		return err
	}
	prefix := inboxPrefix(nil, p)
	lower := binary.BigEndian.AppendUint64(inboxPrefix(nil, p), from)
	it, err := db.newIter(lower, prefixSuccessor(prefix))
	if err != nil {
		return err
	}
	for valid := it.First(); valid; valid = it.Next() {
		k, err := decodeInboxKey(it.Key())
		if err != nil {
			return finish(it, corrupt(it.Key(), err))
		}
		var env *protocol.Envelope
		if values {
			env = new(protocol.Envelope)
			if err := iterValue(it, env); err != nil {
				return finish(it, err)
			}
		}
		if err := fn(k, env); err != nil {
			return finish(it, err)
		}
	}
	return finish(it, nil)
}

// ScanTimers calls fn with every delayed message of partition p, in the
// order they fall due (by due time, then timer id).
func (db *DB) ScanTimers(p int, fn func(k TimerKey, env *protocol.Envelope) error) error {
	var fnErr error
	err := db.ScanTimersAfter(p, nil, func(k TimerKey, env *protocol.Envelope) bool {
		fnErr = fn(k, env)
		return fnErr == nil
	})
	if err != nil {
		return err
	}
	return fnErr
}

// ScanTimersAfter calls fn with the delayed messages of partition p whose
// key comes after after (every one when after is nil), in the order they
// fall due, until fn returns false.
func (db *DB) ScanTimersAfter(p int, after *TimerKey, fn func(k TimerKey, env *protocol.Envelope) bool) error {
	if err := db.checkPartition(p); err != nil {
		return err
	}
	prefix := timerPrefix(nil, p)
	lower := prefix
	if after != nil {
		// The smallest key above after's: after's key with a zero byte
		// appended.
		lower = append(timerKey(nil, TimerKey{Partition: p, Due: after.Due, ID: after.ID}), 0)
	}
	it, err := db.newIter(lower, prefixSuccessor(prefix))
	if err != nil {
		return err
	}
	for valid := it.First(); valid; valid = it.Next() {
		k, err := decodeTimerKey(it.Key())
		if err != nil {
			return finish(it, corrupt(it.Key(), err))
		}
		env := new(protocol.Envelope)
		if err := iterValue(it, env); err != nil {
			return finish(it, err)
		}
		if !fn(k, env) {
			break
		}
	}
	return finish(it, nil)
}

// TimerStats returns how many delayed messages partition p holds and the
// highest timer id among them, reading keys only.
func (db *DB) TimerStats(p int) (n int, maxID uint64, err error) {
	if err := db.checkPartition(p); err != nil {
		return 0, 0, err
	}
	prefix := timerPrefix(nil, p)
	it, err := db.newIter(prefix, prefixSuccessor(prefix))
	if err != nil {
		return 0, 0, err
	}
	for valid := it.First(); valid; valid = it.Next() {
		k, err := decodeTimerKey(it.Key())
		if err != nil {
			return 0, 0, finish(it, corrupt(it.Key(), err))
		}
		n++
		maxID = max(maxID, k.ID)
	}
	return n, maxID, finish(it, nil)
}

// TimerByToken returns the key of the delayed message that sender (a
// function's id) scheduled in partition p with cancellation token token,
// and false if none is pending.
func (db *DB) TimerByToken(p int, sender, token string) (TimerKey, bool, error) {
	if err := db.checkPartition(p); err != nil {
		return TimerKey{}, false, err
	}
	key := tokenKey(nil, p, sender, token)
	val, ok, err := db.get(key)
	if err != nil || !ok {
		return TimerKey{}, false, err
	}
	if len(val) != tokenValueLen {
		return TimerKey{}, false, corrupt(key, fmt.Errorf("token index value of %d bytes, want %d", len(val), tokenValueLen))
	}
	return TimerKey{Partition: p, Due: unflipSign(binary.BigEndian.Uint64(val)), ID: binary.BigEndian.Uint64(val[8:])}, true, nil
}

// NextEgress returns the first record of the outbox (egress, route) whose
// sequence number is greater than afterSeq, and ok false if there is none.
func (db *DB) NextEgress(egress, route string, afterSeq uint64) (seq uint64, rec *protocol.EgressRecord, ok bool, err error) {
	if afterSeq == math.MaxUint64 {
		return 0, nil, false, nil
	}
	prefix := egressPrefix(nil, egress, route)
	it, err := db.newIter(egressKey(nil, egress, route, afterSeq+1), prefixSuccessor(prefix))
	if err != nil {
		return 0, nil, false, err
	}
	if !it.First() {
		return 0, nil, false, finish(it, nil)
	}
	key := it.Key()
	if len(key) != len(prefix)+8 {
		return 0, nil, false, finish(it, corrupt(key, errBadKey))
	}
	seq = binary.BigEndian.Uint64(key[len(prefix):])
	rec = new(protocol.EgressRecord)
	if err := iterValue(it, rec); err != nil {
		return 0, nil, false, finish(it, err)
	}
	return seq, rec, true, finish(it, nil)
}

// ScanEgress calls fn with the records of one outbox whose sequence number
// is greater than afterSeq, in order, up to limit of them (limit <= 0: no
// limit) or until fn returns false. One iterator serves the whole scan: a
// relay reading a batch of a thousand records pays for one seek, not a
// thousand.
func (db *DB) ScanEgress(egress, route string, afterSeq uint64, limit int, fn func(seq uint64, rec *protocol.EgressRecord) bool) error {
	if afterSeq == math.MaxUint64 {
		return nil
	}
	prefix := egressPrefix(nil, egress, route)
	it, err := db.newIter(egressKey(nil, egress, route, afterSeq+1), prefixSuccessor(prefix))
	if err != nil {
		return err
	}
	n := 0
	for valid := it.First(); valid && (limit <= 0 || n < limit); valid = it.Next() {
		key := it.Key()
		if len(key) != len(prefix)+8 {
			return finish(it, corrupt(key, errBadKey))
		}
		rec := new(protocol.EgressRecord)
		if err := iterValue(it, rec); err != nil {
			return finish(it, err)
		}
		n++
		if !fn(binary.BigEndian.Uint64(key[len(prefix):]), rec) {
			break
		}
	}
	return finish(it, nil)
}

// MaxEgressSeq returns the highest egress sequence number written: the
// greater of the highest in any outbox and the one PutEgressSeq recorded
// (0 for a store that never had a record). It visits the last key of each
// outbox only, walking backwards.
func (db *DB) MaxEgressSeq() (uint64, error) {
	var maxSeq uint64
	mk := metaKey(nil, metaEgressSeq)
	val, ok, err := db.get(mk)
	if err != nil {
		return 0, err
	}
	if ok {
		if len(val) != 8 {
			return 0, corrupt(mk, errors.New("egress sequence is not a u64"))
		}
		maxSeq = binary.BigEndian.Uint64(val)
	}
	it, err := db.newIter([]byte{spaceEgress}, []byte{spaceEgress + 1})
	if err != nil {
		return 0, err
	}
	var outbox []byte
	for valid := it.Last(); valid; valid = it.SeekLT(outbox) {
		key := it.Key()
		_, _, seq, err := decodeEgressKey(key)
		if err != nil {
			return 0, finish(it, corrupt(key, err))
		}
		maxSeq = max(maxSeq, seq)
		// Every key of this outbox starts with key minus its seq; the
		// previous outbox's last key is the greatest key below that.
		outbox = append(outbox[:0], key[:len(key)-8]...)
	}
	return maxSeq, finish(it, nil)
}

// Receipt returns the receipt of a mutation.
func (db *DB) Receipt(id string) (*protocol.Receipt, bool, error) {
	key := receiptKey(nil, id)
	val, ok, err := db.get(key)
	if err != nil || !ok {
		return nil, false, err
	}
	r := new(protocol.Receipt)
	if err := unmarshalValue(key, val, r); err != nil {
		return nil, false, err
	}
	return r, true, nil
}

// ScanAudit calls fn with the audit records from time from (inclusive) to
// to (exclusive), oldest first, until fn returns false.
func (db *DB) ScanAudit(from, to int64, fn func(r *protocol.AuditRecord) bool) error {
	return db.scanAudit(from, to, false, fn)
}

// scanAudit is ScanAudit, newest first when newest is set.
func (db *DB) scanAudit(from, to int64, newest bool, fn func(r *protocol.AuditRecord) bool) error {
	it, err := db.newIter(auditTimeKey(from), auditTimeKey(to))
	if err != nil {
		return err
	}
	first, next := iterOrder(it, newest)
	for valid := first(); valid; valid = next() {
		r := new(protocol.AuditRecord)
		if err := iterValue(it, r); err != nil {
			return finish(it, err)
		}
		if !fn(r) {
			break
		}
	}
	return closeIter(it)
}

// AuditOf returns the audit records of one mutation (one per entry it
// changed), found from its receipt's time.
func (db *DB) AuditOf(id string, at int64) ([]*protocol.AuditRecord, error) {
	prefix := appendString(binary.BigEndian.AppendUint64([]byte{spaceAudit}, flipSign(at)), id)
	it, err := db.newIter(prefix, prefixSuccessor(prefix))
	if err != nil {
		return nil, err
	}
	var out []*protocol.AuditRecord
	for valid := it.First(); valid; valid = it.Next() {
		r := new(protocol.AuditRecord)
		if err := iterValue(it, r); err != nil {
			return nil, finish(it, err)
		}
		out = append(out, r)
	}
	return out, closeIter(it)
}

// AuditFilter selects audit records for ScanAuditFiltered. Empty strings
// match anything. Every filter must be served by an index (Check): a
// filter the log would have to be read through to answer is refused.
type AuditFilter struct {
	// From (inclusive) and To (exclusive) bound the records' times, in Unix
	// milliseconds. Use math.MinInt64 and math.MaxInt64 for no bound.
	From, To int64
	// Namespace, Type and ID select the target address: all three (the
	// index by address), Namespace and Type (the index by type), ID, with
	// or without Namespace (the index by address, once per function type),
	// or Namespace (the index by type, once per type of the namespace).
	Namespace, Type, ID string
	// State selects the state name, among the records another field
	// selects.
	State string
	// Principal selects who made the mutation (the index by principal).
	Principal string
	// Mutation selects one mutation id (the index by mutation).
	Mutation string
	// Newest scans newest first: the log's order reversed (time, then
	// mutation id, then state, each descending). An operator during an
	// incident reads the latest changes first, without paging through the
	// whole log to reach them.
	Newest bool
}

// ErrAuditFilterUnindexed is wrapped by the error of AuditFilter.Check (and
// ScanAuditFiltered) for a filter no index of the audit log serves.
var ErrAuditFilterUnindexed = errors.New("store: no index of the audit log serves this filter")

// Check reports whether an index serves f: it names a mutation, a
// principal, an id, a namespace (with or without a type), or no field
// beyond the time window. A state name, or a type without its namespace,
// narrow what one of those selects, and are refused on their own:
// answering them would read the whole log.
func (f AuditFilter) Check() error {
	switch {
	case f.Mutation != "", f.Principal != "", f.ID != "", f.Namespace != "":
		return nil
	case f.State == "" && f.Type == "":
		return nil
	}
	var named []string
	for _, c := range [...]struct{ name, v string }{{"type", f.Type}, {"state", f.State}} {
		if c.v != "" {
			named = append(named, c.name)
		}
	}
	return fmt.Errorf("%w: %s alone; add a mutation, a principal, an id or a namespace: the log is indexed by those, by address and type, and by time",
		ErrAuditFilterUnindexed, strings.Join(named, " and "))
}

// iterOrder returns the positioning and stepping functions of it for a
// scan oldest first (First, Next) or newest first (Last, Prev).
func iterOrder(it *pebble.Iterator, newest bool) (first, next func() bool) {
	if newest {
		return it.Last, it.Prev
	}
	return it.First, it.Next
}

// match reports whether r passes every field of f.
func (f *AuditFilter) match(r *protocol.AuditRecord) bool {
	t := r.GetTarget()
	for _, c := range [...]struct{ want, got string }{
		{f.Namespace, t.GetNamespace()}, {f.Type, t.GetType()}, {f.ID, t.GetId()},
		{f.State, r.GetState()}, {f.Principal, r.GetPrincipal()}, {f.Mutation, r.GetMutation()},
	} {
		if c.want != "" && c.want != c.got {
			return false
		}
	}
	return r.GetAt() >= f.From && r.GetAt() < f.To
}

// StateStats are the figures of one function type's durable state that
// StateStats counted.
type StateStats struct {
	// IDs and Entries count the ids holding state and their entries, and
	// Bytes the keys and values read, among the first keys scanned.
	IDs, Entries int
	Bytes        int64
	// Complete is false when the scan stopped at its cap: the counts are
	// then lower bounds, and EstimatedBytes is the store's estimate of the
	// whole type's state on disk (it counts flushed data only).
	Complete       bool
	EstimatedBytes uint64
}

// StateStats counts the ids, entries and bytes of function type t's
// durable state, reading at most maxKeys entries: an overview must answer
// quickly however many addresses a type has, so past the cap it reports
// lower bounds and Pebble's estimate of the type's bytes rather than
// scanning every key.
func (db *DB) StateStats(t address.TypeName, maxKeys int) (StateStats, error) {
	return db.StateStatsOf(t, maxKeys, nil)
}

// StateStatsOf is StateStats counting only the ids keep accepts (nil:
// all): in cluster mode, those of the partitions a node owns, whose store
// may also hold stale copies of partitions it owned before. Skipped
// entries count against maxKeys too, so the scan stays bounded.
func (db *DB) StateStatsOf(t address.TypeName, maxKeys int, keep func(id string) bool) (StateStats, error) {
	lower := stateTypePrefix(nil, t)
	upper := prefixSuccessor(lower)
	it, err := db.newIter(lower, upper)
	if err != nil {
		return StateStats{}, err
	}
	var st StateStats
	var idPrefix []byte
	kept, scanned := true, 0
	valid := it.First()
	for ; valid && scanned < maxKeys; valid = it.Next() {
		scanned++
		key := it.Key()
		if idPrefix == nil || !bytes.HasPrefix(key, idPrefix) {
			id, rest, err := decodeString(key[len(lower):])
			if err != nil {
				return st, finish(it, corrupt(key, err))
			}
			idPrefix = append(idPrefix[:0], key[:len(key)-len(rest)]...)
			kept = keep == nil || keep(id)
			if kept {
				st.IDs++
			}
		}
		if !kept {
			continue
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return st, finish(it, fmt.Errorf("store: read %s: %w", formatKey(key), err))
		}
		st.Entries++
		st.Bytes += int64(len(key) + len(v))
	}
	st.Complete = !valid
	if err := finish(it, nil); err != nil {
		return st, err
	}
	if !st.Complete {
		n, err := db.pdb.EstimateDiskUsage(lower, upper)
		if err != nil {
			return st, fmt.Errorf("store: estimate the state of %s: %w", t, err)
		}
		st.EstimatedBytes = n
	}
	return st, nil
}
