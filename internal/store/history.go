package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/protocol"
)

// The history of state entries (docs/reference/storage.md, 0x10 to 0x12): one record
// per committed change of an entry, written by the commit that makes the
// change, so after a crash an entry and its latest history record are there
// together or not at all.

// Key spaces of the history. Part of the file format.
const (
	// spaceHistory holds the records: entry, then commit id.
	spaceHistory byte = 0x10
	// spaceHistoryAge indexes them by time, for retention by age.
	spaceHistoryAge byte = 0x11
	// spaceHistoryHorizon holds, per partition, the newest change whose
	// records retention deleted as a whole (an entry whose last change was
	// a deletion): how far back "no record" means "no value".
	spaceHistoryHorizon byte = 0x12
)

// metaHistory marks a store whose live entries all have a history record;
// Open writes one (marked truncated) for each entry of an older store.
const metaHistory = "history" // value: 1, u32 BE

// Retention defaults of the history: per entry, the newest 100 changes, and
// changes of the last 7 days (the newest change of an entry that has a
// value is kept whatever its age: it is where the value came from).
const (
	DefaultHistoryAge   = 7 * 24 * time.Hour
	DefaultHistoryCount = 100
)

// historyEntryPrefix appends 0x10 | str(ns) | str(type) | str(id) | str(state).
func historyEntryPrefix(dst []byte, a address.Address, state string) []byte {
	dst = historyAddressPrefix(dst, a)
	return appendString(dst, state)
}

// historyAddressPrefix appends 0x10 | str(ns) | str(type) | str(id).
func historyAddressPrefix(dst []byte, a address.Address) []byte {
	dst = append(dst, spaceHistory)
	dst = appendString(dst, a.Type.Namespace)
	dst = appendString(dst, a.Type.Name)
	return appendString(dst, a.ID)
}

// historyKey appends the key of one record.
//
//	+------+----------------+-----------+---------+----------------+---------------+
//	| 0x10 | str(namespace) | str(type) | str(id) | str(statename) | commit u64 BE |
//	+------+----------------+-----------+---------+----------------+---------------+
func historyKey(dst []byte, a address.Address, state string, commit uint64) []byte {
	dst = historyEntryPrefix(dst, a, state)
	return binary.BigEndian.AppendUint64(dst, commit)
}

// historyAgeKey appends 0x11 | at (sign flipped) | the history key after its
// space byte.
func historyAgeKey(dst []byte, at int64, hkey []byte) []byte {
	dst = append(dst, spaceHistoryAge)
	dst = binary.BigEndian.AppendUint64(dst, flipSign(at))
	return append(dst, hkey[1:]...)
}

// decodeHistoryKey is the inverse of historyKey.
func decodeHistoryKey(key []byte) (a address.Address, state string, commit uint64, err error) {
	if len(key) < 9 || key[0] != spaceHistory {
		return a, "", 0, errBadKey
	}
	b := key[1 : len(key)-8]
	for _, p := range []*string{&a.Type.Namespace, &a.Type.Name, &a.ID, &state} {
		if *p, b, err = decodeString(b); err != nil {
			return address.Address{}, "", 0, err
		}
	}
	if len(b) != 0 {
		return address.Address{}, "", 0, errBadKey
	}
	return a, state, binary.BigEndian.Uint64(key[len(key)-8:]), nil
}

func historyHorizonKey(dst []byte, p int) []byte {
	dst = append(dst, spaceHistoryHorizon)
	return binary.BigEndian.AppendUint16(dst, partitionU16(p))
}

// PutHistory writes the record of one change of state of a, made by commit
// of a's partition, and its age index entry.
func (b *Batch) PutHistory(a address.Address, state string, commit uint64, r *protocol.HistoryRecord) {
	b.added[retainedHistory]++
	b.key = historyKey(b.key[:0], a, state, commit)
	b.setProto(b.key, r)
	n := len(b.key)
	b.key = historyAgeKey(b.key, r.GetAt(), b.key[:n])
	b.set(b.key[n:], nil)
	b.touched = append(b.touched, string(b.key[n+9:len(b.key)-8]))
}

// HistoryRecord is one stored change of one entry.
type HistoryRecord struct {
	Addr   address.Address
	State  string
	Commit uint64
	*protocol.HistoryRecord
}

// ScanHistory calls fn with the records of one entry, newest first (or
// oldest first), starting after the commit after (0: from the start), until
// fn returns false.
func (db *DB) ScanHistory(a address.Address, state string, oldestFirst bool, after uint64, fn func(HistoryRecord) bool) error {
	prefix := historyEntryPrefix(nil, a, state)
	lower, upper := prefix, prefixSuccessor(prefix)
	if after != 0 {
		if oldestFirst {
			lower = binary.BigEndian.AppendUint64(append([]byte(nil), prefix...), after+1)
		} else {
			upper = binary.BigEndian.AppendUint64(append([]byte(nil), prefix...), after)
		}
	}
	it, err := db.newIter(lower, upper)
	if err != nil {
		return err
	}
	valid := it.Last()
	if oldestFirst {
		valid = it.First()
	}
	for ; valid; valid = step(it, oldestFirst) {
		rec, err := historyAt(it.Key(), it)
		if err != nil {
			return finish(it, err)
		}
		if !fn(rec) {
			break
		}
	}
	return closeIter(it)
}

// historyAt decodes the record at the iterator's position.
func historyAt(key []byte, it *pebble.Iterator) (HistoryRecord, error) {
	a, state, commit, err := decodeHistoryKey(key)
	if err != nil {
		return HistoryRecord{}, corrupt(key, err)
	}
	r := new(protocol.HistoryRecord)
	if err := iterValue(it, r); err != nil {
		return HistoryRecord{}, err
	}
	return HistoryRecord{Addr: a, State: state, Commit: commit, HistoryRecord: r}, nil
}

func step(it *pebble.Iterator, forward bool) bool {
	if forward {
		return it.Next()
	}
	return it.Prev()
}

// Point names a point in an address's past: a commit id of its partition
// (Commit), or else a time (Time, unix ms). A change belongs to the point
// when its commit is at most Commit, or its time at most Time.
type Point struct {
	Commit uint64
	Time   int64
	ByTime bool
}

func (p Point) covers(r HistoryRecord) bool {
	if p.ByTime {
		return r.GetAt() <= p.Time
	}
	return r.Commit <= p.Commit
}

func (p Point) after(h horizon) bool {
	if p.ByTime {
		return p.Time >= h.at
	}
	return p.Commit >= h.commit
}

// PastEntry is what one entry held at a point: Record is the change that
// set it (nil and Known: it had no value; Known false: the history does
// not reach back that far, so it is not known).
type PastEntry struct {
	State  string
	Known  bool
	Record *HistoryRecord
}

// HasValue reports whether the entry is known to have held a value.
func (e PastEntry) HasValue() bool { return e.Known && e.Record != nil && !e.Record.GetDeleted() }

// horizon is the newest change whose records retention deleted as a whole
// in a partition: before it, an entry without records may have had a value.
type horizon struct {
	commit uint64
	at     int64
}

func (db *DB) horizon(p int) (horizon, error) {
	v, ok, err := db.get(historyHorizonKey(nil, p))
	if err != nil || !ok {
		return horizon{}, err
	}
	if len(v) < 16 {
		return horizon{}, corrupt(historyHorizonKey(nil, p), errors.New("history horizon too short"))
	}
	return horizon{commit: binary.BigEndian.Uint64(v), at: unflipSign(binary.BigEndian.Uint64(v[8:]))}, nil
}

// HistoryAt returns what the entries of a held at point p: one entry (state
// set), or every entry with history (state empty), in state-name order.
// complete is false when an entry the address may have held then can no
// longer be known (retention deleted the whole history of an entry at or
// after p): a restore of the whole address must not be built from it.
func (db *DB) HistoryAt(a address.Address, state string, p Point) (entries []PastEntry, complete bool, err error) {
	h, err := db.horizon(address.Partition(a.ID, db.partitions))
	if err != nil {
		return nil, false, err
	}
	var prefix []byte
	if state != "" {
		prefix = historyEntryPrefix(nil, a, state)
	} else {
		prefix = historyAddressPrefix(nil, a)
	}
	it, err := db.newIter(prefix, prefixSuccessor(prefix))
	if err != nil {
		return nil, false, err
	}
	// Oldest first per entry: the last record covered by p is the answer.
	var cur *PastEntry
	var oldest HistoryRecord
	flush := func() {
		if cur == nil {
			return
		}
		if cur.Record == nil {
			cur.Known = !oldest.GetTruncated() && p.after(h)
		}
		entries = append(entries, *cur)
		cur = nil
	}
	for valid := it.First(); valid; valid = it.Next() {
		rec, err := historyAt(it.Key(), it)
		if err != nil {
			return nil, false, finish(it, err)
		}
		if cur == nil || cur.State != rec.State {
			flush()
			cur, oldest = &PastEntry{State: rec.State}, rec
		}
		if p.covers(rec) {
			r := rec
			cur.Record, cur.Known = &r, true
		}
	}
	flush()
	if err := closeIter(it); err != nil {
		return nil, false, err
	}
	if state != "" && len(entries) == 0 {
		entries = []PastEntry{{State: state, Known: p.after(h)}}
	}
	complete = p.after(h)
	for _, e := range entries {
		complete = complete && e.Known
	}
	return entries, complete, nil
}

// backfillHistory writes a history record for every entry of a store
// written before history existed (at the partition's last commit, marked
// truncated: what came before is unknown), in batches, then marks the
// store. A new store is marked at once.
func (db *DB) backfillHistory() error {
	if _, ok, err := db.metaU32(metaHistory); err != nil || ok {
		return err
	}
	commits := make([]uint64, db.partitions)
	for p := range commits {
		m, err := db.Meta(p)
		if err != nil {
			return err
		}
		commits[p] = m.CommitID
	}
	it, err := db.newIter([]byte{spaceState}, []byte{spaceState + 1})
	if err != nil {
		return err
	}
	now := db.opts.Now().UnixMilli()
	b := db.NewBatch()
	defer func() { b.Close() }()
	for valid := it.First(); valid; valid = it.Next() {
		a, state, err := decodeStateKey(it.Key())
		if err != nil {
			return finish(it, corrupt(it.Key(), err))
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return finish(it, err)
		}
		e, err := decodeEntry(v)
		if err != nil {
			return finish(it, corrupt(it.Key(), err))
		}
		b.PutHistory(a, state, commits[address.Partition(a.ID, db.partitions)], &protocol.HistoryRecord{
			At: now, Version: e.Version, Typename: e.Typename, Value: e.Value, ExpiresAt: e.ExpiresAt, Truncated: true,
		})
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
	b.set(metaKey(nil, metaHistory), appendU32(nil, 1))
	if err := b.Commit(true); err != nil {
		return fmt.Errorf("store: start the history: %w", err)
	}
	return nil
}

// historyTouched is the set of entries (history key prefixes, without the
// space byte) that got a record since the last sweep: the count limit is
// applied to them, not to every entry of the store.
type historyTouched struct {
	mu  sync.Mutex
	m   map[string]struct{}
	all bool // the first sweep after Open looks at every entry
}

func (t *historyTouched) add(prefixes []string) {
	t.mu.Lock()
	if t.m == nil {
		t.m = map[string]struct{}{}
	}
	for _, p := range prefixes {
		t.m[p] = struct{}{}
	}
	t.mu.Unlock()
}

func (t *historyTouched) take() (map[string]struct{}, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m, all := t.m, !t.all
	t.m, t.all = nil, true
	return m, all
}

// sweepHistory applies the history's retention: per entry, at most limit
// records and none older than cutoff, oldest first — but the newest record
// of an entry that has a value is kept. An entry that keeps some records
// but lost older ones has its oldest kept record marked truncated; an entry
// whose newest change (a deletion) is past the age loses all of them, and
// its partition's horizon moves up to that change.
func (db *DB) sweepHistory(cutoff int64, limit int) (deleted int, err error) {
	touched, all := db.histTouched.take()
	done := map[string]bool{}
	d := &deleter{db: db}
	// One iterator over the history for every entry trimmed, its bounds
	// moved from entry to entry: making an iterator per entry cost more
	// than reading the entry.
	hist, err := db.newIter([]byte{spaceHistory}, []byte{spaceHistory + 1})
	if err != nil {
		return 0, err
	}
	defer hist.Close()
	visit := func(entry []byte) error {
		if done[string(entry)] {
			return nil
		}
		done[string(entry)] = true
		return db.trimEntry(d, hist, entry, cutoff, limit)
	}
	if all {
		it, err := db.newIter([]byte{spaceHistory}, []byte{spaceHistory + 1})
		if err != nil {
			return 0, err
		}
		for valid := it.First(); valid; {
			key := it.Key()
			if len(key) < 9 {
				return 0, finish(it, corrupt(key, errBadKey))
			}
			entry := append([]byte(nil), key[:len(key)-8]...)
			if err := visit(entry); err != nil {
				return 0, finish(it, err)
			}
			valid = it.SeekGE(prefixSuccessor(entry))
		}
		if err := closeIter(it); err != nil {
			return 0, err
		}
	}
	for p := range touched {
		if err := visit(append([]byte{spaceHistory}, p...)); err != nil {
			return 0, err
		}
	}
	// Entries whose records passed the age: through the age index, oldest
	// first, up to the cutoff.
	it, err := db.newIter([]byte{spaceHistoryAge}, append([]byte{spaceHistoryAge}, binary.BigEndian.AppendUint64(nil, flipSign(cutoff))...))
	if err != nil {
		return 0, err
	}
	for valid := it.First(); valid; valid = it.Next() {
		key := it.Key()
		if len(key) < 1+8+9 {
			return 0, finish(it, corrupt(key, errBadKey))
		}
		entry := append([]byte{spaceHistory}, key[9:len(key)-8]...)
		if err := visit(entry); err != nil {
			return 0, finish(it, err)
		}
	}
	if err := finish(it, d.flush()); err != nil {
		return 0, err
	}
	return d.n, nil
}

// trimEntry applies the retention to one entry (its history key prefix).
//
// Every entry a commit touched is trimmed at the next sweep, so this runs
// about once per changed entry: it reads each record's time and flags off
// its encoding (historyMetaOf) instead of decoding records it does not
// rewrite, and stops reading at the first record to delete. Only when
// something is deleted does a second pass make the changes.
func (db *DB) trimEntry(d *deleter, it *pebble.Iterator, entry []byte, cutoff int64, limit int) error {
	it.SetBounds(entry, prefixSuccessor(entry))
	// Newest first. Keep the newest unless it is a deletion past the age;
	// then the next ones while within count and age.
	var newest historyMeta
	var newestKey []byte
	n, keep := 0, 0
	for valid := it.Last(); valid && n == keep; valid = it.Prev() {
		if len(it.Key()) != len(entry)+8 {
			continue // a longer state name sharing the prefix: not this entry
		}
		m, err := iterHistoryMeta(it)
		if err != nil {
			return err
		}
		switch {
		case n == 0:
			newest, newestKey = m, append([]byte(nil), it.Key()...)
			if !(m.deleted && m.at < cutoff) {
				keep = 1
			}
		case (limit < 0 || keep < limit) && m.at >= cutoff:
			keep++
		}
		n++
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("store: iterate: %w", err)
	}
	if n == 0 {
		return nil
	}
	if keep > 0 && newest.at < cutoff {
		// The newest of an entry with a value stays; its age index entry
		// goes, so later sweeps do not walk it again (the entry's next
		// change makes it trimmable through the count and the touched set).
		b := d.batch()
		b.key = historyAgeKey(b.key[:0], newest.at, newestKey)
		b.delete(b.key)
	}
	if n == keep {
		return nil // nothing beyond the kept records
	}
	if keep == 0 {
		a, _, commit, err := decodeHistoryKey(newestKey)
		if err != nil {
			return corrupt(newestKey, err)
		}
		p := address.Partition(a.ID, db.partitions)
		h, err := db.horizon(p)
		if err != nil {
			return err
		}
		if commit > h.commit {
			v := binary.BigEndian.AppendUint64(nil, commit)
			v = binary.BigEndian.AppendUint64(v, flipSign(max(newest.at, h.at)))
			d.batch().set(historyHorizonKey(nil, p), v)
		}
	}
	// The oldest kept record is marked truncated; every older one goes,
	// with its age index entry.
	i := 0
	for valid := it.Last(); valid; valid = it.Prev() {
		key := it.Key()
		if len(key) != len(entry)+8 {
			continue
		}
		switch {
		case i == keep-1:
			m, err := iterHistoryMeta(it)
			if err != nil {
				return err
			}
			if !m.truncated {
				rec, err := historyAt(key, it)
				if err != nil {
					return err
				}
				rec.Truncated = true
				d.batch().setProto(key, rec.HistoryRecord)
			}
		case i >= keep:
			m, err := iterHistoryMeta(it)
			if err != nil {
				return err
			}
			b := d.batch()
			b.delete(key)
			b.key = historyAgeKey(b.key[:0], m.at, key)
			b.delete(b.key)
			if err := d.done(); err != nil {
				return err
			}
		}
		i++
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("store: iterate: %w", err)
	}
	return nil
}

// historyMeta is what the retention needs of a history record.
type historyMeta struct {
	at                 int64
	deleted, truncated bool
}

// iterHistoryMeta reads the historyMeta of the iterator's record.
func iterHistoryMeta(it *pebble.Iterator) (historyMeta, error) {
	val, err := it.ValueAndErr()
	if err != nil {
		return historyMeta{}, fmt.Errorf("store: read %s: %w", formatKey(it.Key()), err)
	}
	return historyMetaOf(it.Key(), val)
}

// historyMetaOf reads a protocol.HistoryRecord's at, deleted and truncated
// fields off its encoding, skipping the others (the value, the cause)
// without decoding or copying them. As with proto.Unmarshal, the last
// occurrence of a field wins.
func historyMetaOf(key, val []byte) (historyMeta, error) {
	var m historyMeta
	for len(val) > 0 {
		num, typ, n := protowire.ConsumeTag(val)
		if n < 0 {
			return m, corrupt(key, protowire.ParseError(n))
		}
		val = val[n:]
		if typ == protowire.VarintType && (num == 1 || num == 2 || num == 8) {
			v, n := protowire.ConsumeVarint(val)
			if n < 0 {
				return m, corrupt(key, protowire.ParseError(n))
			}
			val = val[n:]
			switch num {
			case 1:
				m.at = int64(v)
			case 2:
				m.deleted = v != 0
			case 8:
				m.truncated = v != 0
			}
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, val)
		if n < 0 {
			return m, corrupt(key, protowire.ParseError(n))
		}
		val = val[n:]
	}
	return m, nil
}
