package stateclient

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// This file is the client of the inbox repair routes: skip, edit and
// cancel a message, cancel a delayed message, delete an address, and the
// message dead letters a skip leaves (docs/how-to/repair.md,
// "Repair").

// RepairReceipt is the receipt of a repair; DeadLetter names the dead
// letter a skip made.
type RepairReceipt struct {
	Receipt
	DeadLetter string `json:"deadLetter,omitempty"`
}

// MessageDeadLetter is a message an operator skipped.
type MessageDeadLetter struct {
	// ID is the skip's mutation id.
	ID        string       `json:"id"`
	SkippedAt time.Time    `json:"skippedAt"`
	Address   JSONAddress  `json:"address"`
	InboxKey  string       `json:"inboxKey"`
	Caller    *JSONAddress `json:"caller"`
	Typename  string       `json:"typename"`
	Value     struct {
		Length int     `json:"length"`
		Base64 string  `json:"base64"`
		Text   *string `json:"text,omitempty"`
	} `json:"value"`
	Principal string `json:"principal"`
	Reason    string `json:"reason"`
	Attempts  int    `json:"attempts"`
	LastError string `json:"lastError"`
}

// MessageDeadLetterPage is one page of skipped messages; Next is the after
// of the following page, "" at the end.
type MessageDeadLetterPage struct {
	DeadLetters []MessageDeadLetter
	Next        string
}

// Resent is the answer of a re-send: the new message's address and inbox
// key. In cluster mode, a re-send to an address of another partition than
// the dead letter's is applied by that partition's owner: InboxKey is then
// empty, and Status is "accepted" when the owner's receipt was not final
// within the server's wait (the re-send applies all the same; read the
// receipt of Mutation).
type Resent struct {
	Mutation string      `json:"mutation"`
	Status   string      `json:"status"`
	Address  JSONAddress `json:"address"`
	InboxKey string      `json:"inboxKey,omitempty"`
}

// DelayedRef names a pending delayed message: by Timer ("<partition>/<id>"
// as Inbox lists it), or by Sender and Token.
type DelayedRef struct {
	Timer  string
	Sender *Address
	Token  string
}

func (c *Client) repair(ctx context.Context, method, route string, a Address, body map[string]any) (*RepairReceipt, error) {
	segs := []string{a.Namespace, a.Type, a.ID}
	if err := checkSegments([]string{"namespace", "type", "id"}, segs); err != nil {
		return nil, err
	}
	u := c.endpoint("inbox", segs, nil) + "/" + route
	if route == "" {
		u = c.endpoint("addresses", segs, nil)
	}
	b, _ := json.Marshal(body)
	resp, err := c.do(ctx, request{method: method, url: u, header: http.Header{"Content-Type": {"application/json"}}, body: b})
	if err != nil {
		return nil, err
	}
	out := new(RepairReceipt)
	return out, decodeJSON(resp, out)
}

func withReason(reason string) map[string]any {
	m := map[string]any{}
	if reason != "" {
		m["reason"] = reason
	}
	return m
}

// Skip moves a message of a's inbox to the message dead letters: the one
// with inbox key key, or the head of the inbox when key is "". A message
// that is not there is a *ProblemError for which IsNotFound is true.
func (c *Client) Skip(ctx context.Context, a Address, key, reason string) (*RepairReceipt, error) {
	body := withReason(reason)
	if key != "" {
		body["key"] = key
	}
	return c.repair(ctx, http.MethodPost, "skip", a, body)
}

// EditMessage replaces the typename and value of a message of a's inbox
// (key "" for the head); it keeps its place.
func (c *Client) EditMessage(ctx context.Context, a Address, key, typename string, value []byte, reason string) (*RepairReceipt, error) {
	body := withReason(reason)
	if key != "" {
		body["key"] = key
	}
	body["typename"] = typename
	body["value"] = base64.StdEncoding.EncodeToString(value)
	return c.repair(ctx, http.MethodPost, "edit", a, body)
}

// CancelMessage drops the queued message with inbox key key from a's inbox.
func (c *Client) CancelMessage(ctx context.Context, a Address, key, reason string) (*RepairReceipt, error) {
	body := withReason(reason)
	body["key"] = key
	return c.repair(ctx, http.MethodPost, "cancel", a, body)
}

// CancelDelayed drops a pending delayed message for a.
func (c *Client) CancelDelayed(ctx context.Context, a Address, d DelayedRef, reason string) (*RepairReceipt, error) {
	body := withReason(reason)
	if d.Timer != "" {
		body["timer"] = d.Timer
	}
	if d.Sender != nil {
		body["sender"] = JSONAddress{Namespace: d.Sender.Namespace, Type: d.Sender.Type, ID: d.Sender.ID}
	}
	if d.Token != "" {
		body["token"] = d.Token
	}
	return c.repair(ctx, http.MethodPost, "cancel", a, body)
}

// DeleteWholeAddress deletes a paused address entirely: its entries, its
// inbox and the delayed messages its partition holds for it or that it
// sent. An address that is not paused is a *ProblemError with status 409.
func (c *Client) DeleteWholeAddress(ctx context.Context, a Address, reason string) (*RepairReceipt, error) {
	return c.repair(ctx, http.MethodDelete, "", a, withReason(reason))
}

// MessageDeadLetters returns one page of skipped messages, of type t
// (every type when zero), after the cursor after, at most limit (0: the
// server's default of 100).
func (c *Client) MessageDeadLetters(ctx context.Context, t TypeName, after string, limit int) (*MessageDeadLetterPage, error) {
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
	resp, err := c.do(ctx, request{method: http.MethodGet, url: c.endpoint("dead-letters", []string{"messages"}, q)})
	if err != nil {
		return nil, err
	}
	var out struct {
		DeadLetters []MessageDeadLetter `json:"deadLetters"`
		Next        *string             `json:"next"`
	}
	if err := decodeJSON(resp, &out); err != nil {
		return nil, err
	}
	p := &MessageDeadLetterPage{DeadLetters: out.DeadLetters}
	if out.Next != nil {
		p.Next = *out.Next
	}
	return p, nil
}

// MessageDeadLetter returns one skipped message by its id.
func (c *Client) MessageDeadLetter(ctx context.Context, id string) (*MessageDeadLetter, error) {
	if err := checkSegments([]string{"dead letter id"}, []string{id}); err != nil {
		return nil, err
	}
	resp, err := c.do(ctx, request{method: http.MethodGet, url: c.endpoint("dead-letters", []string{"messages", id}, nil)})
	if err != nil {
		return nil, err
	}
	out := new(MessageDeadLetter)
	return out, decodeJSON(resp, out)
}

// Resend sends a skipped message again, as a new message at the end of
// the inbox of its address or of target (when not nil).
func (c *Client) Resend(ctx context.Context, id string, target *Address, reason string) (*Resent, error) {
	if err := checkSegments([]string{"dead letter id"}, []string{id}); err != nil {
		return nil, err
	}
	body := withReason(reason)
	if target != nil {
		body["target"] = JSONAddress{Namespace: target.Namespace, Type: target.Type, ID: target.ID}
	}
	b, _ := json.Marshal(body)
	resp, err := c.do(ctx, request{method: http.MethodPost, url: c.endpoint("dead-letters", []string{"messages", id}, nil) + "/resend",
		header: http.Header{"Content-Type": {"application/json"}}, body: b})
	if err != nil {
		return nil, err
	}
	out := new(Resent)
	return out, decodeJSON(resp, out)
}
