// Package ingress holds the edges where messages enter the application.
// Playground is the HTTP ingress of the StateFun playground
// (io.statefun.playground.v1/ingress); Kafka comes with cluster mode.
package ingress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/idempotency"
	"github.com/statefun-go/statefun/internal/lane"
	"github.com/statefun-go/statefun/internal/protocol"
)

// Sink makes a message durable and delivers it: the embedded engine, or
// in cluster mode the node, which produces it to the messages topic.
// Errors the Playground's Busy accepts answer 503 with Retry-After.
type Sink interface {
	// Ingest makes one message durable and returns once it is: the
	// message is then delivered, after a restart at the latest. A caller
	// that stops waiting (ctx) does not take it back.
	Ingest(ctx context.Context, env *protocol.Envelope) error
	// IngestOnce makes one message durable unless a request with the same
	// idempotency key (in its scope) was accepted before: then it returns
	// replayed true and makes none. It returns idempotency.ErrMismatch for
	// a key used by a different request and idempotency.ErrInProgress
	// while the first request with the key is still being made durable.
	IngestOnce(ctx context.Context, env *protocol.Envelope, r idempotency.Request) (replayed bool, err error)
}

// ErrNotSupported is wrapped by a Sink's error for a request the runtime
// cannot serve in its mode (an Idempotency-Key in cluster mode); the
// ingress answers 501 with the error.
var ErrNotSupported = errors.New("ingress: not supported")

// ErrTooLarge is wrapped by a Sink's error for a message it can never make
// durable because of its size (in cluster mode, a record over what the
// node's Kafka producer takes); the ingress answers 413 with the error
// rather than 503, which would have the client retry forever.
var ErrTooLarge = errors.New("ingress: message too large")

// DefaultTypename is the typename of a playground message whose
// Content-Type does not name one, as in StateFun's playground.
const DefaultTypename = "io.statefun.types/string"

// MaxBodyBytes caps one message's body.
const MaxBodyBytes = 32 << 20

// Playground serves io.statefun.playground.v1/ingress: PUT or POST on
// /<namespace>/<function-name>/<id>, the typename taken from a Content-Type
// of application/vnd.<typename>, the raw body as the value. It answers 200
// only once the message is durable.
//
// Every field that will be stored is checked here, before anything is
// written, with a 4xx that names it: the method (405), the function type
// and id (400, the limits of internal/address, which the state API
// shares), a function type no endpoint serves (404), a Content-Type an
// HTML form sends (415: text/plain, application/x-www-form-urlencoded,
// multipart/form-data), the typename (400) and the body's size (413). A message that passes can be encoded, stored,
// delivered and reached through the state API.
//
// A request with an Idempotency-Key header is made durable at most once
// per key and function type: a repeat is answered 200 with
// Idempotent-Replayed: true and makes no message, a different request with
// the key 422, a repeat while the first is in progress 409 (see
// docs/reference/ingress.md).
type Playground struct {
	Sink Sink
	// Busy tells whether an error means "full, retry later" (503).
	Busy func(error) bool
	// MaxBody returns the largest body a message to a function type may
	// have: one the endpoint's payload_max_bytes can carry. Nil means
	// MaxBodyBytes. A larger message is refused here with 413 rather than
	// accepted and then never deliverable.
	MaxBody func(namespace, name string) int64
	// Admit says whether a message to a function type may be taken in.
	// Nil means every type is. A message to a type it refuses is refused
	// here rather than stored and retried forever: with 422 when the error
	// reports a bound reached (it has a method Limited() bool that returns
	// true: a wildcard endpoint serves as many types as it may), with 404
	// otherwise (no endpoint serves the type).
	Admit  func(t address.TypeName) error
	Logger *slog.Logger
	// Lane is the runtime's admin lane, poked by every request: a hot path
	// of the load (internal/lane). Nil: none.
	Lane *lane.Lane
}

// allowed is the Allow header of a 405: the methods that send a message.
const allowed = "POST, PUT"

// ServeHTTP validates one request, makes its message durable and answers.
func (p *Playground) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	env, status, err := p.parse(r)
	if err != nil {
		if status == http.StatusMethodNotAllowed {
			w.Header().Set("Allow", allowed)
		}
		http.Error(w, err.Error(), status)
		return
	}
	key, once, err := idempotency.Parse(r.Header.Values(idempotency.Header))
	if err != nil {
		http.Error(w, "ingress: "+err.Error(), http.StatusBadRequest)
		return
	}
	// A hot path of the load: let a waiting operator request go first
	// (internal/lane).
	p.Lane.Poke()
	if !once {
		err = p.Sink.Ingest(r.Context(), env)
	} else {
		var replayed bool
		replayed, err = p.Sink.IngestOnce(r.Context(), env, idempotency.Request{
			// Keys are unique per function type: the ingress target.
			Scope:       env.GetTarget().GetNamespace() + "/" + env.GetTarget().GetType(),
			Key:         key,
			Fingerprint: idempotency.Fingerprint(r.Method, r.URL.EscapedPath(), r.Header.Get("Content-Type"), env.GetArgument().GetValue()),
		})
		switch {
		case errors.Is(err, idempotency.ErrMismatch):
			http.Error(w, fmt.Sprintf("ingress: %s %s was already used for a different request to %s/%s (another method, path, Content-Type or body); use a new key",
				idempotency.Header, quote(key), env.GetTarget().GetNamespace(), env.GetTarget().GetType()), http.StatusUnprocessableEntity)
			return
		case errors.Is(err, idempotency.ErrInProgress):
			w.Header().Set("Retry-After", "1")
			http.Error(w, fmt.Sprintf("ingress: a request with %s %s is still in progress; retry later", idempotency.Header, quote(key)), http.StatusConflict)
			return
		case err == nil && replayed:
			w.Header().Set(idempotency.ReplayedHeader, "true")
		}
	}
	if err != nil {
		if errors.Is(err, ErrNotSupported) {
			http.Error(w, err.Error(), http.StatusNotImplemented)
			return
		}
		if errors.Is(err, ErrTooLarge) {
			http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
			return
		}
		if p.Busy != nil && p.Busy(err) {
			w.Header().Set("Retry-After", "1")
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		if r.Context().Err() != nil {
			// The client went away (or its deadline passed) before the
			// message was durable: not a fault of the runtime, and the
			// outcome is unknown (the message may still become durable;
			// a retry with an Idempotency-Key is safe).
			if p.Logger != nil {
				p.Logger.Debug("ingress: the request ended before the message was durable", "path", r.URL.Path, "error", err)
			}
			w.Header().Set("Retry-After", "1")
			http.Error(w, "ingress: the request ended before the message was durable; its outcome is unknown (retry it with an Idempotency-Key)", http.StatusServiceUnavailable)
			return
		}
		if p.Logger != nil {
			p.Logger.Error("ingress: message not accepted", "path", r.URL.Path, "error", err)
		}
		http.Error(w, "ingress: message not accepted: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// parse turns a request into the envelope to store, or says which field is
// wrong with the status to answer.
func (p *Playground) parse(r *http.Request) (*protocol.Envelope, int, error) {
	if r.Method != http.MethodPut && r.Method != http.MethodPost {
		return nil, http.StatusMethodNotAllowed, fmt.Errorf("ingress: method %s: only POST and PUT send a message", r.Method)
	}
	segs, err := splitPath(r.URL.EscapedPath())
	if err != nil {
		return nil, http.StatusBadRequest, err
	}
	fn := address.TypeName{Namespace: segs[0], Name: segs[1]}
	if err := address.CheckAddress(address.Address{Type: fn, ID: segs[2]}); err != nil {
		return nil, http.StatusBadRequest, edgeErr(err)
	}
	if p.Admit != nil {
		if err := p.Admit(fn); err != nil {
			var limited interface{ Limited() bool }
			if errors.As(err, &limited) && limited.Limited() {
				return nil, http.StatusUnprocessableEntity, fmt.Errorf("ingress: %w", err)
			}
			return nil, http.StatusNotFound, fmt.Errorf("ingress: no endpoint in module.yaml serves function type %s", fn)
		}
	}
	if err := formContentType(r.Header.Get("Content-Type")); err != nil {
		return nil, http.StatusUnsupportedMediaType, err
	}
	typename, err := typenameOf(r.Header.Get("Content-Type"))
	if err != nil {
		return nil, http.StatusBadRequest, err
	}
	limit := int64(MaxBodyBytes)
	if p.MaxBody != nil {
		limit = min(limit, p.MaxBody(fn.Namespace, fn.Name))
	}
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, limit))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("ingress: body over %d bytes (what the function's endpoint can carry)", limit)
		}
		return nil, http.StatusBadRequest, fmt.Errorf("ingress: reading body: %v", err)
	}
	// The envelope and its two messages in one allocation: this runs for
	// every message.
	m := &envelopeAlloc{}
	m.target.Namespace, m.target.Type, m.target.Id = fn.Namespace, fn.Name, segs[2]
	m.arg.Typename, m.arg.HasValue, m.arg.Value = typename, true, body
	m.env.Target, m.env.Argument = &m.target, &m.arg
	return &m.env, 0, nil
}

// envelopeAlloc is an ingress message's envelope with its target and
// argument, allocated together.
type envelopeAlloc struct {
	env    protocol.Envelope
	target protocol.Address
	arg    protocol.TypedValue
}

// formContentType refuses the Content-Types a web page on another site
// can have a browser send without asking the listener first (an HTML form,
// or fetch in no-cors mode: the CORS-safelisted request Content-Types).
// The listener's browser guard (package browserguard) refuses such
// requests by their Origin and Sec-Fetch-Site headers; this refuses them
// also from a browser that sends neither. StateFun's playground clients
// name a typename (application/vnd.<typename>) or send raw bytes
// (application/octet-stream, or no Content-Type).
func formContentType(ct string) error {
	essence, _, _ := strings.Cut(ct, ";")
	essence = strings.ToLower(strings.TrimSpace(essence))
	switch essence {
	case "text/plain", "application/x-www-form-urlencoded", "multipart/form-data":
		return fmt.Errorf("ingress: Content-Type %s is refused: web pages on other sites can send it from a form; "+
			"name the message's typename with application/vnd.<namespace>/<name>, or send application/octet-stream for %s", quote(ct), DefaultTypename)
	}
	return nil
}

// typenameOf returns the typename a Content-Type names
// (application/vnd.<typename>, parameters ignored), DefaultTypename for any
// other Content-Type, and an error naming the header when the typename is
// not one that can be stored.
func typenameOf(ct string) (string, error) {
	rest, ok := strings.CutPrefix(ct, "application/vnd.")
	if !ok {
		return DefaultTypename, nil
	}
	if i := strings.IndexByte(rest, ';'); i >= 0 {
		rest = rest[:i]
	}
	typename := strings.TrimSpace(rest)
	if err := address.CheckTypename(typename); err != nil {
		var fe *address.FieldError
		errors.As(err, &fe)
		return "", fmt.Errorf("ingress: Content-Type %s does not name a typename <namespace>/<name>: %s %s", quote(ct), fe.Field, fe.Problem)
	}
	return typename, nil
}

// edgeErr words a validator's error as this edge's: "ingress: id is empty".
func edgeErr(err error) error {
	var fe *address.FieldError
	if errors.As(err, &fe) {
		return fmt.Errorf("ingress: %s %s", fe.Field, fe.Problem)
	}
	return fmt.Errorf("ingress: %v", err)
}

// quote quotes s for an error message, cut short: the answer to a request
// need not echo a header of a megabyte.
func quote(s string) string {
	const max = 200
	if len(s) > max {
		return strconv.Quote(s[:max]) + "..."
	}
	return strconv.Quote(s)
}

// splitPath splits /<namespace>/<name>/<id> on '/' before unescaping, so an
// id may carry an encoded '/'. The parts are checked by the caller.
func splitPath(escaped string) ([3]string, error) {
	var out [3]string
	parts := strings.Split(strings.TrimPrefix(escaped, "/"), "/")
	if len(parts) != 3 {
		return out, fmt.Errorf("ingress: the path must be /<namespace>/<function-name>/<id>, got %s", quote(escaped))
	}
	names := [3]string{"namespace", "function name", "id"}
	for i, p := range parts {
		s, err := url.PathUnescape(p)
		if err != nil {
			return out, fmt.Errorf("ingress: %s: invalid percent-encoding", names[i])
		}
		if s == "" {
			return out, fmt.Errorf("ingress: the path must be /<namespace>/<function-name>/<id>: empty %s", names[i])
		}
		out[i] = s
	}
	return out, nil
}
