package store

import (
	"bytes"
	"fmt"

	"github.com/statefun-go/statefun/internal/address"
)

// StateCursor is where a scan of a type's state entries stopped: the id
// and state name of the last entry it returned. The next scan starts at
// the first entry after it in key order (id, then state name, each in
// string order).
type StateCursor struct {
	ID, State string
}

// ScanState calls fn with the state entries of function type t, in key
// order (id, then state name), until fn returns false: those whose id
// starts with prefix (every id when it is empty) and that come strictly
// after the cursor after (nil: from the first). It reads keys and values
// on one Pebble iterator, so it sees one consistent view of the store and
// no part of a commit; the caller bounds how long it runs (a long scan
// pins the files the iterator reads, which compactions cannot drop).
// Expired entries are included: the caller filters by its own clock.
func (db *DB) ScanState(t address.TypeName, prefix string, after *StateCursor, fn func(id, state string, e Entry) bool) error {
	tp := stateTypePrefix(nil, t)
	lower := appendEscaped(bytes.Clone(tp), prefix)
	upper := prefixSuccessor(lower)
	if after != nil {
		// Keys are self-delimiting: the smallest key greater than the
		// cursor's own is that key followed by 0x00.
		k := append(stateKey(nil, address.Address{Type: t, ID: after.ID}, after.State), 0)
		if bytes.Compare(k, lower) > 0 {
			lower = k
		}
	}
	if upper != nil && bytes.Compare(lower, upper) >= 0 {
		return nil
	}
	it, err := db.newIter(lower, upper)
	if err != nil {
		return err
	}
	for valid := it.First(); valid; valid = it.Next() {
		key := it.Key()
		a, state, err := decodeStateKey(key)
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
		if !fn(a.ID, state, e) {
			break
		}
	}
	return finish(it, nil)
}
