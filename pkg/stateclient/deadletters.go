package stateclient

import (
	"context"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// DeadLetterFilter selects an ingress's dead letters; zero fields do not
// filter.
type DeadLetterFilter struct {
	// Topic keeps the records of one Kafka topic.
	Topic string
	// Partition, when not nil, keeps the records of one Kafka partition.
	Partition *int32
	// Reason keeps the records stored for one reason (null-key, empty-key,
	// invalid-utf8-key, key-too-long, value-too-large, no-route).
	Reason string
	// Since and Until bound the time the runtime stored the record
	// (inclusive, millisecond precision).
	Since, Until time.Time
}

// DeadLetter is one record a Kafka ingress consumed but could not deliver.
type DeadLetter struct {
	// Ingress is the ingress id, "namespace/name".
	Ingress   string `json:"ingress"`
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	// Reason says why it was not delivered.
	Reason string `json:"reason"`
	// Timestamp is the record's own timestamp.
	Timestamp time.Time `json:"timestamp"`
	// StoredAt is when the runtime stored it; retention counts from it.
	StoredAt time.Time `json:"storedAt"`
	// Key is nil when the record had no key.
	Key   *RecordBytes `json:"key"`
	Value RecordBytes  `json:"value"`
	// ValueOmitted is true when the value was not kept (Value is then
	// empty): in cluster mode, a value too large for a record of the
	// messages topic. The record stays in its topic at Offset.
	ValueOmitted bool `json:"valueOmitted,omitempty"`
}

// RecordBytes is a record's key or value.
type RecordBytes struct {
	Length int `json:"length"`
	// Bytes are the exact bytes (base64 on the wire).
	Bytes []byte `json:"base64"`
	// Text is the bytes as text; nil when they are not valid UTF-8.
	Text *string `json:"text,omitempty"`
}

// DeadLetterPage is one page of an ingress's dead letters.
type DeadLetterPage struct {
	DeadLetters []DeadLetter `json:"deadLetters"`
	// Next is the after of the following page; "" on the last page.
	Next string `json:"next,omitempty"`
}

// IngressDeadLetters is the summary of one ingress's stored dead letters.
type IngressDeadLetters struct {
	Ingress        string    `json:"ingress"`
	DeadLetters    int       `json:"deadLetters"`
	OldestStoredAt time.Time `json:"oldestStoredAt"`
	NewestStoredAt time.Time `json:"newestStoredAt"`
	// Counts are by topic, then reason.
	Counts []DeadLetterCount `json:"counts"`
}

// DeadLetterCount counts the dead letters of one topic and reason.
type DeadLetterCount struct {
	Topic          string    `json:"topic"`
	Reason         string    `json:"reason"`
	Count          int       `json:"count"`
	OldestStoredAt time.Time `json:"oldestStoredAt"`
	NewestStoredAt time.Time `json:"newestStoredAt"`
}

// ingressSegments returns the path of an ingress's dead letters.
func ingressSegments(ingress TypeName) ([]string, error) {
	if err := checkSegments([]string{"ingress namespace", "ingress name"}, []string{ingress.Namespace, ingress.Type}); err != nil {
		return nil, err
	}
	if strings.Contains(ingress.Namespace, "/") || strings.Contains(ingress.Type, "/") {
		return nil, fmt.Errorf("%w: the ingress id %s has more than one '/'", ErrInvalidAddress, ingress)
	}
	return []string{ingress.Namespace, ingress.Type, "dead-letters"}, nil
}

// DeadLetters returns one page of the dead letters of an ingress (its id,
// "namespace/name", as a TypeName), in the order they were stored: those
// f selects after the cursor after ("" to start at the oldest), at most
// limit of them (0 for the server's default of 100; the server allows up
// to 1000). Page.Next is the after of the following page, "" at the end.
// An ingress without dead letters, declared or not, is an empty page.
func (c *Client) DeadLetters(ctx context.Context, ingress TypeName, f DeadLetterFilter, after string, limit int) (*DeadLetterPage, error) {
	segs, err := ingressSegments(ingress)
	if err != nil {
		return nil, err
	}
	if limit < 0 {
		return nil, fmt.Errorf("stateclient: DeadLetters: negative limit %d", limit)
	}
	q := url.Values{}
	for k, v := range map[string]string{"topic": f.Topic, "reason": f.Reason, "after": after} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if f.Partition != nil {
		q.Set("partition", strconv.Itoa(int(*f.Partition)))
	}
	if !f.Since.IsZero() {
		q.Set("since", f.Since.UTC().Format(time.RFC3339Nano))
	}
	if !f.Until.IsZero() {
		q.Set("until", f.Until.UTC().Format(time.RFC3339Nano))
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	resp, err := c.do(ctx, request{method: http.MethodGet, url: c.endpoint("ingresses", segs, q)})
	if err != nil {
		return nil, err
	}
	var raw struct {
		DeadLetters []DeadLetter `json:"deadLetters"`
		Next        *string      `json:"next"`
	}
	if err := decodeJSON(resp, &raw); err != nil {
		return nil, err
	}
	p := &DeadLetterPage{DeadLetters: raw.DeadLetters}
	if p.DeadLetters == nil {
		p.DeadLetters = []DeadLetter{}
	}
	if raw.Next != nil {
		p.Next = *raw.Next
	}
	return p, nil
}

// AllDeadLetters returns the dead letters of an ingress that f selects,
// fetching pages of pageSize (0: 1000) as the loop goes. An error ends the
// sequence: it is yielded once with a zero DeadLetter.
func (c *Client) AllDeadLetters(ctx context.Context, ingress TypeName, f DeadLetterFilter, pageSize int) iter.Seq2[DeadLetter, error] {
	if pageSize <= 0 {
		pageSize = 1000
	}
	return func(yield func(DeadLetter, error) bool) {
		after := ""
		for {
			p, err := c.DeadLetters(ctx, ingress, f, after, pageSize)
			if err != nil {
				yield(DeadLetter{}, err)
				return
			}
			for _, d := range p.DeadLetters {
				if !yield(d, nil) {
					return
				}
			}
			if p.Next == "" {
				return
			}
			after = p.Next
		}
	}
}

// DeadLetterSummary returns every ingress that holds dead letters (also
// ingresses the module no longer declares), by id, with counts by topic
// and reason.
func (c *Client) DeadLetterSummary(ctx context.Context) ([]IngressDeadLetters, error) {
	resp, err := c.do(ctx, request{method: http.MethodGet, url: c.endpoint("ingresses", nil, nil)})
	if err != nil {
		return nil, err
	}
	var out struct {
		Ingresses []IngressDeadLetters `json:"ingresses"`
	}
	if err := decodeJSON(resp, &out); err != nil {
		return nil, err
	}
	if out.Ingresses == nil {
		out.Ingresses = []IngressDeadLetters{}
	}
	return out.Ingresses, nil
}
