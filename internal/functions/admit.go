package functions

import (
	"errors"
	"fmt"
	"sync"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/module"
)

// A namespace wildcard endpoint ("ns/*") serves any function type name in
// its namespace, so whoever may send a message — the playground ingress
// answers anyone who reaches it, a function may name any target — could
// otherwise make the runtime take in new types without end: every type
// gets its own bulkhead, metric series and retries, and its messages wait
// for a function that may never know it. So the types a wildcard serves
// are admitted as they first appear, up to a bound per wildcard
// (Options.MaxWildcardTypes), and a message to a type past the bound is
// refused where it enters (the ingress answers 422, a function's message
// to it is a protocol violation). Types that hold state or registered
// states when the runtime starts are admitted first (Admitted), whatever
// the bound, so that a restart never refuses a type that lives in the
// store.

// DefaultMaxWildcardTypes is the number of distinct function types one
// namespace wildcard endpoint serves unless Options.MaxWildcardTypes says
// otherwise.
const DefaultMaxWildcardTypes = 1000

// ErrTooManyTypes is wrapped by the error of Admit for a new function type
// under a wildcard endpoint that already serves as many types as it may.
var ErrTooManyTypes = errors.New("functions: the wildcard endpoint serves as many function types as it may")

// TooManyTypesError is the error of Admit for a type past a wildcard's
// bound. It wraps ErrTooManyTypes.
type TooManyTypesError struct {
	Type  address.TypeName
	Limit int
}

func (e *TooManyTypesError) Error() string {
	return fmt.Sprintf("functions: function type %s is refused: the endpoint for %s/* already serves %d function types, its limit (--max-wildcard-types); send to a type it serves, or raise the limit",
		e.Type, e.Type.Namespace, e.Limit)
}

// Limited reports true: the type is refused for a bound, not for a
// missing endpoint (the playground ingress answers 422 for it).
func (e *TooManyTypesError) Limited() bool { return true }

// Unwrap returns ErrTooManyTypes.
func (e *TooManyTypesError) Unwrap() error { return ErrTooManyTypes }

// admitted is the types each wildcard endpoint serves so far.
type admitted struct {
	limit int // < 0: no bound
	// mu is read-locked for the lookup every ingress message and every
	// message a function sends makes; written only when a type is new.
	mu    sync.RWMutex
	names map[*module.Endpoint]map[string]struct{}
}

// Admit reports whether a message to function type t may be taken in: an
// error wrapping ErrNoEndpoint when no endpoint serves t, one wrapping
// ErrTooManyTypes when t is new under a wildcard endpoint that serves as
// many types as it may. A type admitted once stays admitted.
func (r *Router) Admit(t address.TypeName) error {
	ep, ok := r.mod.EndpointFor(t)
	if !ok {
		return noEndpointError{t}
	}
	if !ep.Functions.Wildcard {
		return nil
	}
	return r.types.admit(ep, t, false)
}

// Admitted admits function type t, served by a wildcard endpoint, whatever
// the bound: a type that holds state or registered states in the store when
// the runtime starts.
func (r *Router) Admitted(t address.TypeName) {
	if ep, ok := r.mod.EndpointFor(t); ok && ep.Functions.Wildcard {
		_ = r.types.admit(ep, t, true)
	}
}

// Routable is Admit for the engine: whether a function's message to t, or
// an operator's re-send to it, may be taken in. Its errors read as the
// reason of a protocol violation ("target: <error>").
func (r *Router) Routable(t address.TypeName) error {
	err := r.Admit(t)
	if errors.Is(err, ErrNoEndpoint) {
		return fmt.Errorf("no endpoint serves function type %s", t)
	}
	return err
}

func (a *admitted) admit(ep *module.Endpoint, t address.TypeName, always bool) error {
	if a.limit < 0 && !always {
		return nil
	}
	a.mu.RLock()
	_, known := a.names[ep][t.Name]
	a.mu.RUnlock()
	if known {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	names := a.names[ep]
	if _, ok := names[t.Name]; ok {
		return nil
	}
	if !always && len(names) >= a.limit {
		return &TooManyTypesError{Type: t, Limit: a.limit}
	}
	if names == nil {
		names = map[string]struct{}{}
		a.names[ep] = names
	}
	names[t.Name] = struct{}{}
	return nil
}
