package stateclient

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// This file is the client of the bulk jobs and orphans
// (docs/how-to/bulk-jobs.md).

// JobSpec is what a job does: which entries, what each becomes, how fast.
type JobSpec struct {
	Select JobSelect `json:"select"`
	Action JobAction `json:"action"`
	// Rate caps the job's writes per second (0: no cap; the job's pace
	// adapts to the functions' load below it).
	Rate float64 `json:"rate,omitempty"`
	// Retries bounds how often an entry written by another writer between
	// the job's read and its write is read and evaluated again (0: the
	// server's default; -1: never).
	Retries int    `json:"retries,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// JobSelect chooses entries; every field set narrows.
type JobSelect struct {
	Type     string `json:"type,omitempty"`
	IDPrefix string `json:"idPrefix,omitempty"`
	IDFrom   string `json:"idFrom,omitempty"`
	IDTo     string `json:"idTo,omitempty"`
	State    string `json:"state,omitempty"`
	// Where is a CEL predicate over value, id, state, typename, version.
	Where string `json:"where,omitempty"`
	// Orphans keeps only the entries GET /orphans lists.
	Orphans bool `json:"orphans,omitempty"`
}

// JobAction is what becomes of a selected entry: Op "set" (the value of
// the CEL expression Expr, of type Typename or the entry's own) or
// "delete".
type JobAction struct {
	Op       string `json:"op"`
	Expr     string `json:"expr,omitempty"`
	Typename string `json:"typename,omitempty"`
}

// JobCounts are a job's or a preview's counters.
type JobCounts struct {
	Scanned   int64 `json:"scanned"`
	Matched   int64 `json:"matched"`
	Changed   int64 `json:"changed"`
	Unchanged int64 `json:"unchanged"`
	Skipped   int64 `json:"skipped"`
	Retried   int64 `json:"retried"`
	Conflicts int64 `json:"conflicts"`
	Failed    int64 `json:"failed"`
}

// JobProblem is an entry a job left alone, and why.
type JobProblem struct {
	Namespace string `json:"namespace"`
	Type      string `json:"type"`
	ID        string `json:"id"`
	State     string `json:"state"`
	Version   uint64 `json:"version,omitempty"`
	Detail    string `json:"detail"`
	Mutation  string `json:"mutation,omitempty"`
}

// Job is a job and its progress.
type Job struct {
	ID        string       `json:"id"`
	Kind      string       `json:"kind"`
	Spec      *JobSpec     `json:"spec,omitempty"`
	Reverts   string       `json:"reverts,omitempty"`
	Reason    string       `json:"reason,omitempty"`
	Rate      float64      `json:"rate,omitempty"`
	Principal string       `json:"principal"`
	Status    string       `json:"status"`
	Total     int64        `json:"total"`
	Counts    JobCounts    `json:"counts"`
	CreatedAt time.Time    `json:"createdAt"`
	UpdatedAt time.Time    `json:"updatedAt"`
	EndedAt   *time.Time   `json:"endedAt"`
	Conflicts []JobProblem `json:"conflicts"`
	Failures  []JobProblem `json:"failures"`
	Error     string       `json:"error,omitempty"`
	// Pace is a running job's pace (nil once it stops).
	Pace *JobPace `json:"pace,omitempty"`
}

// JobPace is how fast a running job writes: its adaptive pace.
type JobPace struct {
	// Rate is the writes per second the job allows itself now.
	Rate float64 `json:"rate"`
	// Limit is the job's rate, its cap (0: none).
	Limit float64 `json:"limit,omitempty"`
	// LatencyMs is the median latency of the job's writes (until their
	// commit is durable) in the last window judged; BaseMs the least seen
	// lately.
	LatencyMs float64 `json:"latencyMs"`
	BaseMs    float64 `json:"baseMs"`
	// FunctionsMs is the median round trip of the runtime's calls to
	// remote functions in the last window judged (0: too few calls);
	// FunctionsBaseMs the least seen lately, without the job (0: none).
	FunctionsMs     float64 `json:"functionsMs"`
	FunctionsBaseMs float64 `json:"functionsBaseMs"`
	// Backoffs counts the times the pace was cut.
	Backoffs int64 `json:"backoffs"`
}

// Ended reports whether the job will not run again.
func (j *Job) Ended() bool {
	return j.Status == "done" || j.Status == "cancelled" || j.Status == "failed"
}

// JobImage is a value in a preview's diff.
type JobImage struct {
	Typename    string          `json:"typename"`
	Value       json.RawMessage `json:"value,omitempty"`
	ValueBase64 string          `json:"valueBase64"`
}

// JobDiff is one entry before and after; After is nil for a deletion.
type JobDiff struct {
	Namespace string    `json:"namespace"`
	Type      string    `json:"type"`
	ID        string    `json:"id"`
	State     string    `json:"state"`
	Version   uint64    `json:"version"`
	Before    JobImage  `json:"before"`
	After     *JobImage `json:"after"`
}

// JobPreview is what a job would do.
type JobPreview struct {
	Counts    JobCounts    `json:"counts"`
	Sample    []JobDiff    `json:"sample"`
	Failures  []JobProblem `json:"failures"`
	Truncated bool         `json:"truncated"`
}

// Orphan is state nobody owns: of a type no longer deployed (State "")
// or a state name its function no longer registers.
type Orphan struct {
	Namespace string `json:"namespace"`
	Type      string `json:"type"`
	State     string `json:"state"`
	Reason    string `json:"reason"`
	IDs       int64  `json:"ids"`
	Entries   int64  `json:"entries"`
	Bytes     int64  `json:"bytes"`
}

// Orphans is the answer of GET /orphans.
type Orphans struct {
	Orphans  []Orphan `json:"orphans"`
	Complete bool     `json:"complete"`
}

// JobWritesPage is a page of a job's audit records; Next is "" at the end.
type JobWritesPage struct {
	Records []AuditRecord
	Next    string
}

func (c *Client) jobCall(ctx context.Context, method string, segs []string, q url.Values, body any, reason string, out any) error {
	r := request{method: method, url: c.endpoint("jobs", segs, q), header: http.Header{}}
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("stateclient: %w", err)
		}
		r.body = b
		r.header.Set("Content-Type", "application/json")
	}
	if reason != "" {
		r.header.Set("Statefun-Reason", reason)
	}
	resp, err := c.do(ctx, r)
	if err != nil || out == nil {
		return err
	}
	return decodeJSON(resp, out)
}

// Jobs lists every job kept, newest first.
func (c *Client) Jobs(ctx context.Context) ([]Job, error) {
	var out struct {
		Jobs []Job `json:"jobs"`
	}
	err := c.jobCall(ctx, http.MethodGet, nil, nil, nil, "", &out)
	return out.Jobs, err
}

// Job reads one job.
func (c *Client) Job(ctx context.Context, id string) (*Job, error) {
	var j Job
	if err := c.jobCall(ctx, http.MethodGet, []string{id}, nil, nil, "", &j); err != nil {
		return nil, err
	}
	return &j, nil
}

// CreateJob stores a job and starts it.
func (c *Client) CreateJob(ctx context.Context, spec JobSpec) (*Job, error) {
	var j Job
	if err := c.jobCall(ctx, http.MethodPost, nil, nil, spec, "", &j); err != nil {
		return nil, err
	}
	return &j, nil
}

// PreviewJob evaluates a job without writing; sample caps the diffs shown.
func (c *Client) PreviewJob(ctx context.Context, spec JobSpec, sample int) (*JobPreview, error) {
	var p JobPreview
	q := url.Values{"sample": {strconv.Itoa(sample)}}
	if err := c.jobCall(ctx, http.MethodPost, []string{"preview"}, q, spec, "", &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// PauseJob, ResumeJob and CancelJob change a job's status.
func (c *Client) PauseJob(ctx context.Context, id string) (*Job, error) {
	return c.jobAction(ctx, id, "pause")
}

// ResumeJob goes on with a paused job.
func (c *Client) ResumeJob(ctx context.Context, id string) (*Job, error) {
	return c.jobAction(ctx, id, "resume")
}

// CancelJob stops a job for good.
func (c *Client) CancelJob(ctx context.Context, id string) (*Job, error) {
	return c.jobAction(ctx, id, "cancel")
}

func (c *Client) jobAction(ctx context.Context, id, action string) (*Job, error) {
	var j Job
	if err := c.jobCall(ctx, http.MethodPost, []string{id, action}, nil, nil, "", &j); err != nil {
		return nil, err
	}
	return &j, nil
}

// RevertJob starts a job undoing every write of job id.
func (c *Client) RevertJob(ctx context.Context, id, reason string) (*Job, error) {
	var j Job
	if err := c.jobCall(ctx, http.MethodPost, []string{id, "revert"}, nil, nil, reason, &j); err != nil {
		return nil, err
	}
	return &j, nil
}

// DeleteJob forgets an ended job.
func (c *Client) DeleteJob(ctx context.Context, id string) error {
	return c.jobCall(ctx, http.MethodDelete, []string{id}, nil, nil, "", nil)
}

// JobWrites reads a page of a job's audit records (limit 0: the server's
// default).
func (c *Client) JobWrites(ctx context.Context, id, after string, limit int) (*JobWritesPage, error) {
	q := url.Values{}
	if after != "" {
		q.Set("after", after)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out struct {
		Records []AuditRecord `json:"records"`
		Next    *string       `json:"next"`
	}
	if err := c.jobCall(ctx, http.MethodGet, []string{id, "writes"}, q, nil, "", &out); err != nil {
		return nil, err
	}
	p := &JobWritesPage{Records: out.Records}
	if out.Next != nil {
		p.Next = *out.Next
	}
	return p, nil
}

// Orphans lists the state nobody owns, with sizes.
func (c *Client) Orphans(ctx context.Context) (*Orphans, error) {
	resp, err := c.do(ctx, request{method: http.MethodGet, url: c.endpoint("orphans", nil, nil)})
	if err != nil {
		return nil, err
	}
	var o Orphans
	return &o, decodeJSON(resp, &o)
}
