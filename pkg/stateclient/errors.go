package stateclient

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// ErrInvalidAddress is returned, wrapped, before any request is sent when a
// namespace, type, id, state name or mutation id is empty or not valid
// UTF-8, and by ParseTypeName.
var ErrInvalidAddress = errors.New("stateclient: invalid address")

// ProblemError is the error of every answer with a status of 300 or more: the
// API's application/problem+json body (RFC 9457), or, when the body is
// something else (a proxy's page), the status with the body's first line as
// Detail.
type ProblemError struct {
	// Method and URL are the request's.
	Method string
	URL    string
	// Status is the HTTP status code, e.g. 404.
	Status int
	// Type, Title, Detail and Instance are the problem's fields. Detail is
	// the sentence for an operator.
	Type     string
	Title    string
	Detail   string
	Instance string
	// CurrentVersion is the entry's version now, on a 412 (a failed
	// If-Match or If-None-Match); "" when it has no value.
	CurrentVersion string
	// Available lists the representations the entry has, on a 406.
	Available []string
	// Receipt is the rejected mutation's receipt, when the server sent it.
	Receipt *Receipt
	// RetryAfter is the Retry-After of a 503 (a full queue, a shutdown);
	// zero without one.
	RetryAfter time.Duration
	// Mutation and MissingPartitions come with the 503 of a type-level
	// pause or resume in cluster mode that some partitions could not be
	// given in time: the change may be partially applied, and sending it
	// again with PauseOptions.MutationID (ResumeOptions.MutationID) set to
	// Mutation completes it.
	Mutation          string
	MissingPartitions []int
	// Line is the bad line of an import batch that was refused (Import):
	// nothing of the batch was applied. 0 otherwise.
	Line int64
}

// Error returns "stateclient: <status> <title>: <detail>".
func (e *ProblemError) Error() string {
	title := e.Title
	if title == "" {
		title = http.StatusText(e.Status)
	}
	msg := fmt.Sprintf("stateclient: %d %s", e.Status, title)
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

func problemOf(method string, u *url.URL, resp *http.Response, body []byte) *ProblemError {
	e := &ProblemError{Method: method, URL: u.String(), Status: resp.StatusCode}
	if ra := resp.Header.Get("Retry-After"); ra != "" {
		if n, err := strconv.Atoi(ra); err == nil && n >= 0 {
			e.RetryAfter = time.Duration(n) * time.Second
		}
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt == "application/problem+json" || mt == "application/json" {
		var p struct {
			Type           string   `json:"type"`
			Title          string   `json:"title"`
			Detail         string   `json:"detail"`
			Instance       string   `json:"instance"`
			CurrentVersion *string  `json:"currentVersion"`
			Available      []string `json:"available"`
			Receipt        *Receipt `json:"receipt"`
			Mutation       string   `json:"mutation"`
			Missing        []int    `json:"missingPartitions"`
			Line           int64    `json:"line"`
		}
		if json.Unmarshal(body, &p) == nil {
			e.Type, e.Title, e.Detail, e.Instance = p.Type, p.Title, p.Detail, p.Instance
			if p.CurrentVersion != nil {
				e.CurrentVersion = *p.CurrentVersion
			}
			e.Available, e.Receipt = p.Available, p.Receipt
			e.Mutation, e.MissingPartitions, e.Line = p.Mutation, p.Missing, p.Line
			return e
		}
	}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		e.Detail = "unexpected redirect to " + resp.Header.Get("Location") + " (the state API never redirects; is the server URL right?)"
		return e
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
	if len(line) > 200 {
		line = line[:200] + "…"
	}
	e.Detail = line
	return e
}

// StatusOf returns the HTTP status of a *ProblemError in err's chain, or 0.
func StatusOf(err error) int {
	var p *ProblemError
	if errors.As(err, &p) {
		return p.Status
	}
	return 0
}

// IsNotFound reports whether err is a 404: an entry without a value (Get,
// Delete), an unknown mutation id (Receipt, Revert).
func IsNotFound(err error) bool { return StatusOf(err) == http.StatusNotFound }

// IsPreconditionFailed reports whether err is a 412: an If-Match or
// If-None-Match that failed, or a Revert of an entry that changed since.
// The *ProblemError's CurrentVersion is the entry's version now.
func IsPreconditionFailed(err error) bool { return StatusOf(err) == http.StatusPreconditionFailed }

// IsConflict reports whether err is a 409: a typename that differs from the
// one the function registered, or a Revert of a mutation not committed.
func IsConflict(err error) bool { return StatusOf(err) == http.StatusConflict }

// IsBadRequest reports whether err is a 400: a bad address, header or body.
func IsBadRequest(err error) bool { return StatusOf(err) == http.StatusBadRequest }

// IsUnauthorized reports whether err is a 401: no token, or an unknown one.
func IsUnauthorized(err error) bool { return StatusOf(err) == http.StatusUnauthorized }

// IsForbidden reports whether err is a 403: the token lacks the scope.
func IsForbidden(err error) bool { return StatusOf(err) == http.StatusForbidden }

// IsNotAcceptable reports whether err is a 406: the value has no
// representation matching the Accept of Get (e.g. no text form).
func IsNotAcceptable(err error) bool { return StatusOf(err) == http.StatusNotAcceptable }

// IsInvalidValue reports whether err is a 415 or 422: a body that is not a
// value of the target type, or text for a type that has no text form.
func IsInvalidValue(err error) bool {
	s := StatusOf(err)
	return s == http.StatusUnsupportedMediaType || s == http.StatusUnprocessableEntity
}

// IsRetryable reports whether err is a 503 (a partition's queue is full, the
// runtime shuts down, a rebalance): the same request may succeed later, after
// the *ProblemError's RetryAfter.
func IsRetryable(err error) bool { return StatusOf(err) == http.StatusServiceUnavailable }
