package invoker

import (
	"errors"
	"strings"
)

// Kind classifies why one attempt to call a remote function failed.
//
// StateFun's async transport retries every kind, and so does our caller, so
// Kind exists for logs, metrics and tests, not to decide whether to retry.
// The one exception worth knowing: KindRequest means the call can never
// succeed as configured, so retrying only burns the call budget.
type Kind int

// The kinds, in the order an attempt can fail.
const (
	// KindUnknown is what KindOf returns for an error that is not an *Error.
	// Invoke never returns it.
	KindUnknown Kind = iota

	// KindRequest is returned when the request cannot be sent at all: the URL
	// does not parse, has an unsupported scheme, or names no UNIX socket; or
	// the ToFunction is nil or fails to marshal. Retrying does not help.
	KindRequest

	// KindConnect is returned when no connection could be established: the
	// dial was refused or timed out (Options.ConnectTimeout), the name did not
	// resolve, or the TLS handshake failed. Nothing was sent.
	KindConnect

	// KindTransport is returned when an established connection failed before
	// a complete response arrived: a reset, an EOF where a response was due, or
	// a malformed HTTP response. The function may have run.
	KindTransport

	// KindTimeout is returned when the attempt ran longer than
	// Options.CallTimeout. The function may have run. The *Error unwraps to
	// context.DeadlineExceeded.
	KindTimeout

	// KindCanceled is returned when the caller's context was canceled or hit
	// its own deadline before the attempt finished. The *Error unwraps to the
	// context's error.
	KindCanceled

	// KindStatus is returned when the function answered a status outside 2xx.
	// Redirects are not followed, as in StateFun, so 3xx lands here too.
	KindStatus

	// KindContentType is returned when a 2xx response carries a Content-Type
	// that does not name application/octet-stream.
	KindContentType

	// KindEmptyBody is returned when a 2xx response has no body.
	KindEmptyBody

	// KindDecode is returned when a 2xx body is not a serialized FromFunction,
	// or arrives in a Content-Encoding other than the gzip Go negotiates.
	KindDecode

	// KindTooLarge is returned when the serialized request, or the
	// (decompressed) response body, exceeds Options.PayloadMaxBytes. A request
	// over the cap is never sent.
	KindTooLarge
)

var kindNames = [...]string{
	KindUnknown:     "unknown",
	KindRequest:     "request",
	KindConnect:     "connect",
	KindTransport:   "transport",
	KindTimeout:     "timeout",
	KindCanceled:    "canceled",
	KindStatus:      "status",
	KindContentType: "content-type",
	KindEmptyBody:   "empty-body",
	KindDecode:      "decode",
	KindTooLarge:    "too-large",
}

// String returns a short lower-case name such as "connect" or "content-type",
// stable enough to use as a metric label.
func (k Kind) String() string {
	if k >= 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown"
}

// Error is the error Invoke returns for every failed attempt.
//
// Its message is meant for one log line:
//
//	invoker: POST http://localhost:8000/statefun: function answered 500 Internal Server Error: "failed to invoke example/greeter: boom"
type Error struct {
	// URL is the endpoint as passed to Invoke, with any password redacted.
	URL string
	// Kind says which step of the attempt failed.
	Kind Kind
	// StatusCode is the HTTP status of the response, or 0 when no response
	// arrived. It is set for every kind that got as far as a response, not
	// only KindStatus.
	StatusCode int
	// Detail is the human-readable description of the failure. For
	// KindStatus it quotes up to the first 200 bytes of the response body,
	// which is where the Go SDK puts the function's error text.
	Detail string
	// Err is the underlying error, or nil when the failure is a property of
	// the response (a status code, a header) rather than of an operation.
	Err error
}

// Error returns "invoker: POST <url>: <detail>[: <underlying error>]".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("invoker: POST ")
	b.WriteString(e.URL)
	b.WriteString(": ")
	b.WriteString(e.Detail)
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the underlying error, so errors.Is(err,
// context.DeadlineExceeded) and errors.As(err, *net.OpError) work.
func (e *Error) Unwrap() error { return e.Err }

// KindOf returns the Kind of the first *Error in err's chain, or KindUnknown
// when there is none.
func KindOf(err error) Kind {
	if err == nil {
		return KindUnknown // no error: not even the variable below on the heap
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return KindUnknown
}

// IsUnknownFunctionType reports whether err is a function server's answer
// that it does not know the function type it was called for: the official
// SDKs (Go and JavaScript) answer such a call with status 500 and a body
// that starts "unknown function type". Retrying helps only once a function
// of that type is deployed there.
func IsUnknownFunctionType(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Kind == KindStatus && e.StatusCode == 500 &&
		strings.Contains(e.Detail, "unknown function type")
}
