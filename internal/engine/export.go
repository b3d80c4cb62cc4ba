package engine

import (
	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/store"
)

// ScanState calls fn with the durable state entries of function type t,
// values included, in key order after the cursor after
// (store.DB.ScanState); ErrClosed once the engine is closed. The state
// API's export pages through it.
func (r Reads) ScanState(t address.TypeName, prefix string, after *store.StateCursor, fn func(id, state string, e store.Entry) bool) error {
	if r.e.closed.Load() {
		return ErrClosed
	}
	return r.e.db.ScanState(t, prefix, after, fn)
}
