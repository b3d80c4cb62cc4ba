package stateclient

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// This file is the client of the repair routes: failing addresses, an
// address's inbox, pauses (docs/how-to/repair.md).

// JSONAddress is an address as the repair routes write it.
type JSONAddress struct {
	Namespace string `json:"namespace"`
	Type      string `json:"type"`
	ID        string `json:"id"`
}

// Failing is an address whose batch failed and has not succeeded yet.
type Failing struct {
	Namespace string    `json:"namespace"`
	Type      string    `json:"type"`
	ID        string    `json:"id"`
	Since     time.Time `json:"since"`
	Attempts  int       `json:"attempts"`
	// NextAttempt is nil while an attempt is in flight or it is paused.
	NextAttempt *time.Time `json:"nextAttempt"`
	LastError   string     `json:"lastError"`
	Violation   bool       `json:"violation"`
	Messages    int        `json:"messages"`
	Queued      int        `json:"queued"`
	Paused      bool       `json:"paused"`
}

// FailingPage is one page of GET /failing; Next is the after of the
// following page, "" at the end.
type FailingPage struct {
	Failing []Failing
	Next    string
}

// Pause is a pause in force. ID is nil for a pause of a whole type.
type Pause struct {
	Namespace string     `json:"namespace"`
	Type      string     `json:"type"`
	ID        *string    `json:"id"`
	Mutation  string     `json:"mutation"`
	Principal string     `json:"principal"`
	Reason    string     `json:"reason"`
	Since     time.Time  `json:"since"`
	ExpiresAt *time.Time `json:"expiresAt"`
	Auto      bool       `json:"auto"`
}

// InboxMessage is one message of an inbox.
type InboxMessage struct {
	Key       string       `json:"key"`
	Mutation  string       `json:"mutation,omitempty"`
	Typename  string       `json:"typename"`
	Caller    *JSONAddress `json:"caller"`
	Size      int          `json:"size"`
	ArrivedAt time.Time    `json:"arrivedAt"`
	// Value is the message's argument (nil for an operator mutation):
	// at most its first 4 KiB.
	Value *MessageValue `json:"value,omitempty"`
}

// MessageValue is a waiting message's argument as GET /inbox shows it:
// JSON when the typename is a built-in scalar or the bytes are JSON, the
// bytes in base64, both of at most the first 4 KiB (Truncated: the value
// is longer).
type MessageValue struct {
	JSON      json.RawMessage `json:"json,omitempty"`
	Base64    string          `json:"base64"`
	Truncated bool            `json:"truncated"`
}

// Inbox is what the runtime holds for one address.
type Inbox struct {
	Address    JSONAddress `json:"address"`
	Paused     *Pause      `json:"paused"`
	TypePaused *Pause      `json:"typePaused"`
	Inflight   *struct {
		Attempt     int            `json:"attempt"`
		Waiting     bool           `json:"waiting"`
		Since       *time.Time     `json:"since"`
		NextAttempt *time.Time     `json:"nextAttempt"`
		LastError   string         `json:"lastError"`
		Violation   bool           `json:"violation"`
		Messages    []InboxMessage `json:"messages"`
	} `json:"inflight"`
	Queued struct {
		Count     int            `json:"count"`
		OldestAt  *time.Time     `json:"oldestAt"`
		Messages  []InboxMessage `json:"messages"`
		Truncated bool           `json:"truncated"`
		// PagedInPartition is the messages of the address's partition
		// that wait in the store, past its bound in memory: not listed
		// until the partition has room for them.
		PagedInPartition int `json:"pagedInPartition"`
	} `json:"queued"`
	Delayed []struct {
		Timer    string       `json:"timer"`
		DueAt    time.Time    `json:"dueAt"`
		Token    string       `json:"token"`
		Sender   *JSONAddress `json:"sender"`
		Typename string       `json:"typename"`
		Size     int          `json:"size"`
	} `json:"delayed"`
}

// Failing returns one page of the failing addresses, of type t (every
// type when t is zero), after the cursor after, at most limit (0: the
// server's default of 100, at most 1000).
func (c *Client) Failing(ctx context.Context, t TypeName, after string, limit int) (*FailingPage, error) {
	q := url.Values{}
	if t != (TypeName{}) {
		q.Set("type", t.Namespace+"/"+t.Type)
	}
	if after != "" {
		q.Set("after", after)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	resp, err := c.do(ctx, request{method: http.MethodGet, url: c.endpoint("failing", nil, q)})
	if err != nil {
		return nil, err
	}
	var out struct {
		Failing []Failing `json:"failing"`
		Next    *string   `json:"next"`
	}
	if err := decodeJSON(resp, &out); err != nil {
		return nil, err
	}
	p := &FailingPage{Failing: out.Failing}
	if out.Next != nil {
		p.Next = *out.Next
	}
	return p, nil
}

// Inbox returns what the runtime holds for address a, listing at most
// limit queued messages (0: the server's default of 100).
func (c *Client) Inbox(ctx context.Context, a Address, limit int) (*Inbox, error) {
	segs := []string{a.Namespace, a.Type, a.ID}
	if err := checkSegments([]string{"namespace", "type", "id"}, segs); err != nil {
		return nil, err
	}
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	resp, err := c.do(ctx, request{method: http.MethodGet, url: c.endpoint("inbox", segs, q)})
	if err != nil {
		return nil, err
	}
	var out Inbox
	return &out, decodeJSON(resp, &out)
}

// Pauses returns the pauses in force, of type t (every type when zero).
func (c *Client) Pauses(ctx context.Context, t TypeName) ([]Pause, error) {
	q := url.Values{}
	if t != (TypeName{}) {
		q.Set("type", t.Namespace+"/"+t.Type)
	}
	resp, err := c.do(ctx, request{method: http.MethodGet, url: c.endpoint("pauses", nil, q)})
	if err != nil {
		return nil, err
	}
	var out struct {
		Pauses []Pause `json:"pauses"`
	}
	return out.Pauses, decodeJSON(resp, &out)
}

// PauseOptions say why a pause is set and when it lifts by itself: at
// ExpiresAt, or ExpiresIn from now (at most one of them).
type PauseOptions struct {
	Reason    string
	ExpiresAt time.Time
	ExpiresIn time.Duration
	// MutationID, for a type-level pause in cluster mode, sends the pause
	// again under the id of an earlier attempt that was answered 503 with
	// that id (ProblemError.Mutation): the server completes that change
	// instead of starting another, and answers its receipt.
	MutationID string
}

// ResumeOptions say why a pause is lifted; MutationID is as in
// PauseOptions.
type ResumeOptions struct {
	Reason     string
	MutationID string
}

// Pause pauses address a, or every address of its type when a.ID is "",
// and returns the receipt once the pause is durable.
func (c *Client) Pause(ctx context.Context, a Address, o PauseOptions) (*Receipt, error) {
	body := map[string]string{}
	if o.Reason != "" {
		body["reason"] = o.Reason
	}
	if !o.ExpiresAt.IsZero() {
		body["expiresAt"] = o.ExpiresAt.Format(time.RFC3339Nano)
	}
	if o.ExpiresIn != 0 {
		body["expiresIn"] = o.ExpiresIn.String()
	}
	return c.pauseOrResume(ctx, "pause", a, body, o.MutationID)
}

// Resume lifts the pause of address a, or of its whole type when a.ID is
// "". A resume of what is not paused is a *ProblemError for which
// IsNotFound is true.
func (c *Client) Resume(ctx context.Context, a Address, reason string) (*Receipt, error) {
	return c.ResumeWith(ctx, a, ResumeOptions{Reason: reason})
}

// ResumeWith is Resume with options.
func (c *Client) ResumeWith(ctx context.Context, a Address, o ResumeOptions) (*Receipt, error) {
	body := map[string]string{}
	if o.Reason != "" {
		body["reason"] = o.Reason
	}
	return c.pauseOrResume(ctx, "resume", a, body, o.MutationID)
}

func (c *Client) pauseOrResume(ctx context.Context, route string, a Address, body map[string]string, mutationID string) (*Receipt, error) {
	segs := []string{a.Namespace, a.Type}
	names := []string{"namespace", "type"}
	if a.ID != "" {
		segs, names = append(segs, a.ID), append(names, "id")
	}
	if err := checkSegments(names, segs); err != nil {
		return nil, err
	}
	b, _ := json.Marshal(body)
	h := http.Header{"Content-Type": {"application/json"}}
	if mutationID != "" {
		h.Set("Statefun-Mutation-Id", mutationID)
	}
	resp, err := c.do(ctx, request{method: http.MethodPost, url: c.endpoint(route, segs, nil), header: h, body: b})
	if err != nil {
		return nil, err
	}
	return decodeReceipt(resp)
}
