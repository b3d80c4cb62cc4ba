// Package jobs runs bulk repair and migration jobs over state entries:
// a job selects entries (a function type, ids by prefix or range, a state
// name, a CEL predicate over the decoded value), computes what each
// becomes (a CEL expression over the old value, or a deletion) and writes
// it through the address's mailbox with If-Match on the version it read,
// rate-limited, durable across crashes, audited under the job's id and
// revertible as a whole. docs/how-to/bulk-jobs.md is the user's manual;
// the HTTP routes are internal/stateapi/jobs.go.
package jobs

import (
	"errors"
	"fmt"
	"strings"

	"cel.dev/cel-go/cel"

	"github.com/statefun-go/statefun/internal/address"
)

// Spec is what a job does: which entries, what becomes of each, how fast.
type Spec struct {
	Select Select `json:"select"`
	Action Action `json:"action"`
	// Rate caps the job's writes per second (0: no cap). Below it the
	// job's pace adapts to the functions' load (pace.go), so that the
	// load keeps its latency.
	Rate float64 `json:"rate,omitempty"`
	// Retries bounds how often an entry a function wrote between the
	// job's read and its write is read and evaluated again
	// (DefaultRetries when 0; -1: never, a conflict is listed at once).
	Retries int `json:"retries,omitempty"`
	// Reason is recorded in the audit log with every write.
	Reason string `json:"reason,omitempty"`
}

// Select chooses entries. Every field narrows: an entry is selected when
// it passes all that are set.
type Select struct {
	// Type is the function type, namespace/name. Required, except with
	// Orphans (then empty: every type holding state).
	Type string `json:"type,omitempty"`
	// IDPrefix keeps the ids that start with it.
	IDPrefix string `json:"idPrefix,omitempty"`
	// IDFrom and IDTo keep the ids in [IDFrom, IDTo) (string order); either
	// may be empty (unbounded).
	IDFrom string `json:"idFrom,omitempty"`
	IDTo   string `json:"idTo,omitempty"`
	// State keeps the entries of that name (empty: every entry).
	State string `json:"state,omitempty"`
	// Where is a CEL predicate over the entry (expr.go); empty: true.
	Where string `json:"where,omitempty"`
	// Orphans keeps only entries nobody owns: of a type module.yaml no
	// longer deploys, or of a state name its function no longer
	// registers (orphans.go).
	Orphans bool `json:"orphans,omitempty"`
}

// Action is what becomes of a selected entry.
type Action struct {
	// Op is "set" (the value Expr gives) or "delete".
	Op string `json:"op"`
	// Expr is a CEL expression over the entry giving its new value (set).
	Expr string `json:"expr,omitempty"`
	// Typename, for set, is the type of the new value (empty: the entry's
	// own): a migration to a new type the function now registers.
	Typename string `json:"typename,omitempty"`
}

// Defaults and bounds of a Spec.
const (
	MaxRate        = 100_000
	DefaultRetries = 3
	MaxRetries     = 100
	maxReasonBytes = 1024
)

// Op names.
const (
	OpSet    = "set"
	OpDelete = "delete"
)

// compiled is a Spec ready to run.
type compiled struct {
	spec  Spec
	typ   *address.TypeName // nil: every type (orphans)
	where *program          // nil: every entry
	expr  *program          // nil: delete
}

// errSpec marks an error in what the client sent.
var errSpec = errors.New("jobs: bad job")

// specError is a client's mistake, worded for it.
func specError(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errSpec, fmt.Sprintf(format, args...))
}

// IsBadSpec reports whether err is about what the client sent (a 400).
func IsBadSpec(err error) bool { return errors.Is(err, errSpec) }

// compile checks a spec and compiles its expressions. Its errors name the
// field and say what to send instead.
func compileSpec(env *cel.Env, s Spec) (*compiled, error) {
	c := &compiled{spec: s}
	if s.Select.Type != "" {
		t, err := address.ParseTypeName(s.Select.Type)
		if err != nil {
			return nil, specError("select.type %q: %v; want namespace/name", s.Select.Type, err)
		}
		c.typ = &t
	} else if !s.Select.Orphans {
		return nil, specError("select.type is required (namespace/name), except with select.orphans")
	}
	if s.Select.IDFrom != "" && s.Select.IDTo != "" && s.Select.IDFrom >= s.Select.IDTo {
		return nil, specError("select.idFrom %q must be less than select.idTo %q", s.Select.IDFrom, s.Select.IDTo)
	}
	for name, v := range map[string]string{"select.idPrefix": s.Select.IDPrefix, "select.idFrom": s.Select.IDFrom,
		"select.idTo": s.Select.IDTo, "select.state": s.Select.State} {
		if len(v) > address.MaxSegmentBytes {
			return nil, specError("%s: %d bytes, at most %d", name, len(v), address.MaxSegmentBytes)
		}
	}
	if s.Rate < 0 || s.Rate > MaxRate {
		return nil, specError("rate %v: want a cap of writes per second from 0 (the default: none, the adaptive pace alone) to %d", s.Rate, MaxRate)
	}
	if s.Retries < -1 || s.Retries > MaxRetries {
		return nil, specError("retries %d: want -1 (none) to %d (0: the default, %d)", s.Retries, MaxRetries, DefaultRetries)
	}
	if len(s.Reason) > maxReasonBytes {
		return nil, specError("reason: %d bytes, at most %d", len(s.Reason), maxReasonBytes)
	}
	var err error
	if s.Select.Where != "" {
		if c.where, err = compile(env, "select.where", s.Select.Where, true); err != nil {
			return nil, specError("%v", err)
		}
	}
	switch s.Action.Op {
	case OpSet:
		if strings.TrimSpace(s.Action.Expr) == "" {
			return nil, specError("action.expr is required with op set: a CEL expression giving the new value, e.g. value + 1")
		}
		if c.expr, err = compile(env, "action.expr", s.Action.Expr, false); err != nil {
			return nil, specError("%v", err)
		}
	case OpDelete:
		if s.Action.Expr != "" || s.Action.Typename != "" {
			return nil, specError("action.expr and action.typename go with op set, not delete")
		}
	default:
		return nil, specError("action.op %q: want set or delete", s.Action.Op)
	}
	return c, nil
}

// retries is how often a conflict is evaluated again.
func (s Spec) retries() int {
	switch {
	case s.Retries == 0:
		return DefaultRetries
	case s.Retries < 0:
		return 0
	}
	return s.Retries
}

// keepID reports whether the selection keeps id.
func (s Select) keepID(id string) bool {
	return strings.HasPrefix(id, s.IDPrefix) && (s.IDFrom == "" || id >= s.IDFrom) && (s.IDTo == "" || id < s.IDTo)
}

// pastEnd reports whether id and every id after it are beyond the
// selection (ids are listed in string order).
func (s Select) pastEnd(id string) bool {
	return (s.IDTo != "" && id >= s.IDTo) || (s.IDPrefix != "" && id > s.IDPrefix && !strings.HasPrefix(id, s.IDPrefix))
}

// scanAfter is where a scan of ids starts when nothing was done yet: just
// before IDFrom (ScanIDs lists ids strictly after it; the few ids between
// it and IDFrom are skipped by keepID).
func (s Select) scanAfter() string {
	if s.IDFrom == "" {
		return ""
	}
	return s.IDFrom[:len(s.IDFrom)-1]
}
