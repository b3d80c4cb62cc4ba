package store

import (
	"bytes"
	"container/heap"
	"encoding/binary"

	"github.com/cockroachdb/pebble/v2"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/protocol"
)

// The filtered reads of the audit log. Every index entry ends with the
// suffix of the audit key it stands for (auditSuffix), so a filter is
// served by one or more index ranges whose entries, merged by that suffix,
// are the selected records in the log's order; each is then one point read
// of the log.
//
// An id alone and a namespace alone have no index of their own: an index
// entry is written by every mutation, and two more per change cost more
// than these rarer queries save. They are served by the indexes by address
// and by type, one range per function type the type index knows, found by
// skipping from type to type: a few seeks per type, then only the records
// selected.

// ScanAuditFiltered calls fn with the audit records that pass f, oldest
// first (newest first with f.Newest), until fn returns false — what
// ScanAudit and a filter would give, reading only the records an index
// selects: by mutation, by whole address, by principal, by function type,
// by id (the address index, per type) or by namespace (the type index,
// per type), in that order of preference, or, with no field beyond the
// time window, the window itself. A filter no index serves is refused with
// an error wrapping ErrAuditFilterUnindexed (AuditFilter.Check).
func (db *DB) ScanAuditFiltered(f AuditFilter, fn func(r *protocol.AuditRecord) bool) error {
	_, err := db.scanAuditFiltered(f, fn)
	return err
}

// scanAuditFiltered is ScanAuditFiltered, returning how many records it
// read (its tests check that an index was used).
func (db *DB) scanAuditFiltered(f AuditFilter, fn func(r *protocol.AuditRecord) bool) (read int, err error) {
	if err := f.Check(); err != nil {
		return 0, err
	}
	prefixes, err := db.auditRanges(f)
	if err != nil {
		return 0, err
	}
	if prefixes == nil {
		err := db.scanAudit(f.From, f.To, f.Newest, func(r *protocol.AuditRecord) bool {
			read++
			return !f.match(r) || fn(r)
		})
		return read, err
	}
	m, err := db.newSuffixMerge(prefixes, f.From, f.To, f.Newest)
	if err != nil {
		return 0, err
	}
	key := []byte{spaceAudit}
	var last []byte
	for suffix := m.first(); suffix != nil; suffix = m.next() {
		if last != nil && bytes.Equal(suffix, last) {
			continue // one record in two ranges: read it once
		}
		last = append(last[:0], suffix...)
		key = append(key[:1], suffix...)
		val, ok, err := db.get(key)
		if err != nil {
			return read, m.close(err)
		}
		if !ok {
			continue // removed by retention since the iterators opened
		}
		read++
		r := new(protocol.AuditRecord)
		if err := unmarshalValue(key, val, r); err != nil {
			return read, m.close(err)
		}
		if f.match(r) && !fn(r) {
			break
		}
	}
	return read, m.close(nil)
}

// auditRanges returns the index prefixes whose entries select the records
// of f, or nil when f names no field beyond the time window.
func (db *DB) auditRanges(f AuditFilter) ([][]byte, error) {
	switch {
	case f.Mutation != "":
		return [][]byte{auditMutationPrefix(nil, f.Mutation)}, nil
	case f.Namespace != "" && f.Type != "" && f.ID != "":
		return [][]byte{auditAddrPrefix(nil, address.Address{Type: address.TypeName{Namespace: f.Namespace, Name: f.Type}, ID: f.ID})}, nil
	case f.Principal != "":
		return [][]byte{auditWhoPrefix(nil, f.Principal)}, nil
	case f.Namespace != "" && f.Type != "":
		return [][]byte{auditTypePrefix(nil, address.TypeName{Namespace: f.Namespace, Name: f.Type})}, nil
	case f.ID != "", f.Namespace != "":
		types, err := db.auditTypes(f.Namespace)
		if err != nil {
			return nil, err
		}
		out := make([][]byte, 0, len(types))
		for _, t := range types {
			if f.ID != "" {
				out = append(out, auditAddrPrefix(nil, address.Address{Type: t, ID: f.ID}))
			} else {
				out = append(out, auditTypePrefix(nil, t))
			}
		}
		return out, nil
	}
	return nil, nil
}

// auditTypes returns the function types the type index holds records of,
// in namespace ns (any namespace when ns is empty), seeking from one type
// to the next rather than reading their records.
func (db *DB) auditTypes(ns string) ([]address.TypeName, error) {
	lower := []byte{spaceAuditType}
	if ns != "" {
		lower = appendString(lower, ns)
	}
	it, err := db.newIter(lower, prefixSuccessor(lower))
	if err != nil {
		return nil, err
	}
	var out []address.TypeName
	for valid := it.First(); valid; {
		var t address.TypeName
		rest, err := decodeTypePrefix(it.Key()[1:], &t)
		if err != nil {
			return nil, finish(it, corrupt(it.Key(), err))
		}
		out = append(out, t)
		valid = it.SeekGE(prefixSuccessor(it.Key()[:len(it.Key())-len(rest)]))
	}
	return out, closeIter(it)
}

// decodeTypePrefix decodes str(namespace) str(type) from the front of b
// into t and returns the bytes after them.
func decodeTypePrefix(b []byte, t *address.TypeName) (rest []byte, err error) {
	if t.Namespace, b, err = decodeString(b); err != nil {
		return nil, err
	}
	if t.Name, b, err = decodeString(b); err != nil {
		return nil, err
	}
	return b, nil
}

// suffixMerge walks several index ranges at once, yielding the audit key
// suffixes of their entries in the log's order (or reversed): a k-way
// merge by suffix.
type suffixMerge struct {
	newest bool
	srcs   []*mergeSource
	h      mergeHeap
}

// mergeSource is one index range of a suffixMerge.
type mergeSource struct {
	it     *pebble.Iterator
	prefix int    // length of the range's prefix
	suffix []byte // the current entry's suffix (a copy)
	next   func() bool
}

// newSuffixMerge opens one iterator per prefix, bounded to the times
// [from, to).
func (db *DB) newSuffixMerge(prefixes [][]byte, from, to int64, newest bool) (*suffixMerge, error) {
	m := &suffixMerge{newest: newest, h: mergeHeap{newest: newest}}
	for _, p := range prefixes {
		lower := binary.BigEndian.AppendUint64(bytes.Clone(p), flipSign(from))
		upper := binary.BigEndian.AppendUint64(bytes.Clone(p), flipSign(to))
		it, err := db.newIter(lower, upper)
		if err != nil {
			return nil, m.close(err)
		}
		m.srcs = append(m.srcs, &mergeSource{it: it, prefix: len(p)})
	}
	return m, nil
}

// first positions every range at its first entry and returns the first
// suffix, or nil when the ranges are empty.
func (m *suffixMerge) first() []byte {
	m.h.s = m.h.s[:0]
	for _, s := range m.srcs {
		var first func() bool
		first, s.next = iterOrder(s.it, m.newest)
		if s.load(first()) {
			m.h.s = append(m.h.s, s)
		}
	}
	heap.Init(&m.h)
	return m.top()
}

// next steps past the suffix last returned and returns the next one, or
// nil at the end.
func (m *suffixMerge) next() []byte {
	if len(m.h.s) == 0 {
		return nil
	}
	if s := m.h.s[0]; s.load(s.next()) {
		heap.Fix(&m.h, 0)
	} else {
		heap.Pop(&m.h)
	}
	return m.top()
}

func (m *suffixMerge) top() []byte {
	if len(m.h.s) == 0 {
		return nil
	}
	return m.h.s[0].suffix
}

// close closes every iterator and returns err, or else the first error an
// iterator met.
func (m *suffixMerge) close(err error) error {
	for _, s := range m.srcs {
		err = finish(s.it, err)
	}
	return err
}

// load copies the current entry's suffix, if valid.
func (s *mergeSource) load(valid bool) bool {
	if valid {
		s.suffix = append(s.suffix[:0], s.it.Key()[s.prefix:]...)
	}
	return valid
}

// mergeHeap orders sources by their current suffix: smallest first, or
// largest first when newest.
type mergeHeap struct {
	newest bool
	s      []*mergeSource
}

func (h *mergeHeap) Len() int { return len(h.s) }
func (h *mergeHeap) Less(i, j int) bool {
	c := bytes.Compare(h.s[i].suffix, h.s[j].suffix)
	if h.newest {
		return c > 0
	}
	return c < 0
}
func (h *mergeHeap) Swap(i, j int) { h.s[i], h.s[j] = h.s[j], h.s[i] }
func (h *mergeHeap) Push(x any)    { h.s = append(h.s, x.(*mergeSource)) }
func (h *mergeHeap) Pop() any {
	x := h.s[len(h.s)-1]
	h.s = h.s[:len(h.s)-1]
	return x
}
