package stateclient

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// HistoryRecord is one committed change of an entry: the entry after it
// (or its deletion), when, and what caused it.
type HistoryRecord struct {
	// Commit is the partition's commit id that made the change; Position
	// is it with the partition, "<partition>.<commit id>".
	Commit   uint64    `json:"commit"`
	Position string    `json:"position"`
	At       time.Time `json:"at"`
	Deleted  bool      `json:"deleted"`
	// Version is the entry's version after the change (its ETag); "" for a
	// deletion.
	Version  string          `json:"version,omitempty"`
	Typename string          `json:"typename,omitempty"`
	Value    json.RawMessage `json:"value,omitempty"`
	// ValueBase64 is the exact bytes, "" for a deletion.
	ValueBase64 string     `json:"valueBase64,omitempty"`
	ExpiresAt   *time.Time `json:"expiresAt,omitempty"`
	// Truncated says retention removed older changes: what the entry held
	// before this one is not known.
	Truncated bool  `json:"truncated"`
	Cause     Cause `json:"cause"`
}

// Cause is what made a change.
type Cause struct {
	// Kind is invocation, mutation, expiry or before-history.
	Kind string `json:"kind"`
	// Messages are the first messages of the invoked batch (a function
	// answers a batch with one set of changes); MessageCount counts them
	// all.
	Messages     []CauseMessage `json:"messages,omitempty"`
	MessageCount int            `json:"messageCount,omitempty"`
	// Mutation, Principal, Reason and Reverts name an operator mutation.
	Mutation  string `json:"mutation,omitempty"`
	Principal string `json:"principal,omitempty"`
	Reason    string `json:"reason,omitempty"`
	Reverts   string `json:"reverts,omitempty"`
}

// CauseMessage is one message of a batch; Caller is nil for an ingress
// message.
type CauseMessage struct {
	Typename string           `json:"typename"`
	Caller   *EnvelopeAddress `json:"caller"`
}

// HistoryPage is one page of an entry's history; Next is the cursor of the
// next page ("" on the last).
type HistoryPage struct {
	Records []HistoryRecord `json:"records"`
	Next    string          `json:"-"`
}

// HistoryOptions select a page of history. OldestFirst reverses the
// default order (newest first); After is the previous page's Next; Limit
// is 1 to 1000 (0: the server's 100).
type HistoryOptions struct {
	OldestFirst bool
	After       string
	Limit       int
}

// History returns one page of the committed changes of an entry.
func (c *Client) History(ctx context.Context, a Address, state string, o HistoryOptions) (*HistoryPage, error) {
	if err := a.check(state); err != nil {
		return nil, err
	}
	q := url.Values{}
	if o.OldestFirst {
		q.Set("order", "oldest")
	}
	if o.After != "" {
		q.Set("after", o.After)
	}
	if o.Limit != 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	resp, err := c.do(ctx, request{method: http.MethodGet, url: c.endpoint("state", append(a.segments(state), "history"), q)})
	if err != nil {
		return nil, err
	}
	var raw struct {
		Records []HistoryRecord `json:"records"`
		Next    *string         `json:"next"`
	}
	if err := decodeJSON(resp, &raw); err != nil {
		return nil, err
	}
	p := &HistoryPage{Records: raw.Records}
	if raw.Next != nil {
		p.Next = *raw.Next
	}
	return p, nil
}

// Point is a point of an address's past: a commit of its partition (a
// commit id, or a receipt's Commit), or else a time.
type Point struct {
	Commit string
	Time   time.Time
}

func (p Point) query(q url.Values) error {
	switch {
	case p.Commit != "" && !p.Time.IsZero():
		return errors.New("stateclient: a Point is a commit or a time, not both")
	case p.Commit != "":
		q.Set("asOf", p.Commit)
	case !p.Time.IsZero():
		q.Set("asOfTime", p.Time.UTC().Format(time.RFC3339Nano))
	default:
		return errors.New("stateclient: an empty Point: give a commit or a time")
	}
	return nil
}

// GetAsOf reads an entry as it was at a point, as the JSON envelope. An
// entry without a value then is a 404 (IsNotFound); a point older than the
// entry's kept history is a 410 (IsGone).
func (c *Client) GetAsOf(ctx context.Context, a Address, state string, p Point) (*Envelope, error) {
	if err := a.check(state); err != nil {
		return nil, err
	}
	q := url.Values{}
	if err := p.query(q); err != nil {
		return nil, err
	}
	resp, err := c.do(ctx, request{method: http.MethodGet, url: c.endpoint("state", a.segments(state), q),
		header: http.Header{"Accept": {"application/json"}}})
	if err != nil {
		return nil, err
	}
	env := new(Envelope)
	if err := decodeJSON(resp, env); err != nil {
		return nil, err
	}
	return env, nil
}

// RestoreOptions are the options of Restore: Ack (committed by default;
// accepted is refused) and Reason for the audit log.
type RestoreOptions struct {
	Ack    Ack
	Reason string
}

// Restore sets an address (state "") or one entry back to what it held at
// a point, as one mutation with one receipt (Revert undoes it). A point
// older than the kept history is a 410 (IsGone); a value of another type
// than the function registers now, a 409.
func (c *Client) Restore(ctx context.Context, a Address, state string, p Point, o RestoreOptions) (*Receipt, error) {
	segs := a.segments()
	var err error
	if state != "" {
		segs, err = a.segments(state), a.check(state)
	} else {
		err = a.check()
	}
	if err != nil {
		return nil, err
	}
	h, q, err := mutationHeaders("", false, o.Ack, o.Reason)
	if err != nil {
		return nil, err
	}
	if err := p.query(q); err != nil {
		return nil, err
	}
	resp, err := c.do(ctx, request{method: http.MethodPost, url: c.endpoint("state", segs, q), header: h})
	if err != nil {
		return nil, err
	}
	return decodeReceipt(resp)
}

// IsGone reports whether err is a 410: the history does not reach back to
// the point asked for.
func IsGone(err error) bool { return StatusOf(err) == http.StatusGone }
