package module

import (
	"errors"
	"fmt"
	"strings"
)

// ErrNotSupported is wrapped by the *Error returned for a kind that StateFun
// supports but this runtime does not yet: the Kinesis ingress and egress
// (and, until the runtime runs them, the Kafka ones that the app refuses).
// Test for it with errors.Is.
var ErrNotSupported = errors.New("module: not supported yet")

// Error is one problem in a module file. Its text starts with the file
// position, the way compiler errors do, instead of a "module: " prefix:
//
//	module.yaml:14:5: document 2 (io.statefun.endpoints.v2/http): spec.urlPathTemplate: required
//
// Fields that are unknown are zero and left out of the text.
type Error struct {
	File     string
	Document int    // 1-based; 0 when the problem is not in one document
	Line     int    // 1-based; 0 when unknown
	Column   int    // 1-based; 0 when unknown
	Kind     string // the document's kind, when it was readable
	Field    string // path of the offending field, e.g. "spec.transport.call"; empty for the whole document
	Msg      string
	// Err is the underlying cause, if any (ErrNotSupported, or an error
	// from ParseDuration); Unwrap returns it.
	Err error
}

// Error formats e as "file:line:col: document N (kind): field: msg".
func (e *Error) Error() string {
	var b strings.Builder
	if e.File == "" {
		b.WriteString("module")
	} else {
		b.WriteString(e.File)
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
		if e.Column > 0 {
			fmt.Fprintf(&b, ":%d", e.Column)
		}
	}
	b.WriteString(": ")
	if e.Document > 0 {
		fmt.Fprintf(&b, "document %d", e.Document)
		if e.Kind != "" {
			fmt.Fprintf(&b, " (%s)", e.Kind)
		}
		b.WriteString(": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns the underlying cause, or nil.
func (e *Error) Unwrap() error { return e.Err }

// Errors is every problem found in one module file, in file order. Parse and
// Load return it when the file is invalid; it is never empty.
// errors.As(err, &target) with a target of type *Error finds the first one.
type Errors []*Error

// Error returns the problems one per line.
func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the problems, for errors.Is and errors.As.
func (es Errors) Unwrap() []error {
	errs := make([]error, len(es))
	for i, e := range es {
		errs[i] = e
	}
	return errs
}
