package jobs

import (
	"time"
)

// Record is a job as it is stored (store key space 0x20, as JSON) and as
// the API shows it: definition, status, counters and cursor. The runner
// writes it, synced, each time its cursor moves: counters and cursor
// always describe the same pages.
type Record struct {
	ID string `json:"id"`
	// Kind is KindUpdate (a Spec) or KindRevert (the writes of the job
	// Reverts, undone).
	Kind    string `json:"kind"`
	Spec    *Spec  `json:"spec,omitempty"`
	Reverts string `json:"reverts,omitempty"`
	// Reason and Rate are a revert's (an update has them in Spec).
	Reason string  `json:"reason,omitempty"`
	Rate   float64 `json:"rate,omitempty"`
	// RevertsPrincipal and RevertsCreatedAt, in a revert, are the
	// reverted job's principal and creation time: where its writes are
	// in the audit log.
	RevertsPrincipal string     `json:"revertsPrincipal,omitempty"`
	RevertsCreatedAt *time.Time `json:"revertsCreatedAt,omitempty"`
	Principal        string     `json:"principal"`
	// Node, in cluster mode, is the node that keeps and runs the job: the
	// owner of its home partition (Home).
	Node   string `json:"node,omitempty"`
	Status string `json:"status"`
	// Total is how many entries the job looks at, counted when it
	// started (a revert: the writes it undoes); Counts.Scanned against it
	// is its progress.
	Total     int64      `json:"total"`
	Counts    Counts     `json:"counts"`
	CreatedAt time.Time  `json:"createdAt"`
	UpdatedAt time.Time  `json:"updatedAt"`
	EndedAt   *time.Time `json:"endedAt"`
	// Conflicts are the entries a function kept writing between the
	// job's read and its write (after the retries), or, in a revert, the
	// entries changed since the job wrote them: left as they are. The
	// first MaxListed; Counts.Conflicts counts them all.
	Conflicts []Problem `json:"conflicts"`
	// Failures are entries the job could not compute or write (an
	// expression error, a value of another type than the registered
	// one): the first MaxListed; Counts.Failed counts them all.
	Failures []Problem `json:"failures"`
	// Error says why a failed job stopped.
	Error string `json:"error,omitempty"`
	// Cursor is where the job goes on: every entry before it is done.
	Cursor Cursor `json:"cursor"`
	// PageAt is when the runner last moved the cursor (unix ms): writes
	// after it may be of the page in progress when the runner stopped,
	// and are looked for in the audit log when it goes on (run.go).
	PageAt int64 `json:"pageAt"`
	// Pace is a running job's pace (pace.go): shown, never stored.
	Pace *Pace `json:"pace,omitempty"`
}

// Kinds of job.
const (
	KindUpdate = "update"
	KindRevert = "revert"
)

// Statuses of a job.
const (
	StatusRunning   = "running"
	StatusPaused    = "paused"
	StatusCancelled = "cancelled"
	StatusDone      = "done"
	StatusFailed    = "failed"
)

// ended reports whether a job with status s will not run again.
func ended(s string) bool { return s == StatusCancelled || s == StatusDone || s == StatusFailed }

// Counts are a job's (or a preview's) counters.
type Counts struct {
	// Scanned counts the entries looked at (of the selected type and ids).
	Scanned int64 `json:"scanned"`
	// Matched counts those the selection kept (state name, orphans, where).
	Matched int64 `json:"matched"`
	// Changed counts the entries written (a preview: that would be).
	Changed int64 `json:"changed"`
	// Unchanged counts matched entries the expression gave the value they
	// had: not written.
	Unchanged int64 `json:"unchanged"`
	// Skipped counts entries that, read again after a conflict, were gone
	// or no longer selected.
	Skipped int64 `json:"skipped"`
	// Retried counts conflicts read and evaluated again.
	Retried int64 `json:"retried"`
	// Conflicts and Failed count what Record lists.
	Conflicts int64 `json:"conflicts"`
	Failed    int64 `json:"failed"`
}

func (c *Counts) add(o Counts) {
	c.Scanned += o.Scanned
	c.Matched += o.Matched
	c.Changed += o.Changed
	c.Unchanged += o.Unchanged
	c.Skipped += o.Skipped
	c.Retried += o.Retried
	c.Conflicts += o.Conflicts
	c.Failed += o.Failed
}

// Cursor is where a job goes on. An update job: the type, id and state
// name of the last entry of the last page done (entries in (id, state)
// order, types in key order; a cursor without a state, of an earlier
// build, is past every entry of its id). A revert: the audit-log position
// of the last write undone.
type Cursor struct {
	Namespace string `json:"namespace,omitempty"`
	Type      string `json:"type,omitempty"`
	ID        string `json:"id,omitempty"`
	At        int64  `json:"at,omitempty"`
	Mutation  string `json:"mutation,omitempty"`
	State     string `json:"state,omitempty"`
}

// Problem is one entry a job left alone, and why.
type Problem struct {
	Namespace string `json:"namespace"`
	Type      string `json:"type"`
	ID        string `json:"id"`
	State     string `json:"state"`
	// Version is the entry's version when the job gave up (0: no value).
	Version uint64 `json:"version,omitempty"`
	Detail  string `json:"detail"`
	// Mutation is the rejected mutation, when one was sent.
	Mutation string `json:"mutation,omitempty"`
}

// MaxListed caps Record.Conflicts and Record.Failures.
const MaxListed = 100
