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
	"strings"
	"unicode/utf8"

	"github.com/statefun-go/statefun/internal/protocol"
)

// Sink makes a message durable and delivers it (engine.Engine.Ingest).
type Sink interface {
	Ingest(ctx context.Context, env *protocol.Envelope) error
}

// DefaultTypename is the typename of a playground message whose
// Content-Type does not name one, as in StateFun's playground.
const DefaultTypename = "io.statefun.types/string"

// MaxBodyBytes caps one message's body.
const MaxBodyBytes = 32 << 20

// Playground serves io.statefun.playground.v1/ingress: any method on
// /<namespace>/<function-name>/<id>, the typename taken from a Content-Type
// of application/vnd.<typename>, the raw body as the value. It answers 200
// only once the message is durable.
type Playground struct {
	Sink Sink
	// Busy tells whether an error means "full, retry later" (503).
	Busy func(error) bool
	// MaxBody returns the largest body a message to a function type may
	// have: one the endpoint's payload_max_bytes can carry. Nil means
	// MaxBodyBytes. A larger message is refused here with 413 rather than
	// accepted and then never deliverable.
	MaxBody func(namespace, name string) int64
	Logger  *slog.Logger
}

func (p *Playground) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	env, status, err := p.parse(r)
	if err != nil {
		http.Error(w, err.Error(), status)
		return
	}
	if err := p.Sink.Ingest(r.Context(), env); err != nil {
		if p.Busy != nil && p.Busy(err) {
			w.Header().Set("Retry-After", "1")
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
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

func (p *Playground) parse(r *http.Request) (*protocol.Envelope, int, error) {
	segs, err := splitPath(r.URL.EscapedPath())
	if err != nil {
		return nil, http.StatusBadRequest, err
	}
	typename := DefaultTypename
	if ct := r.Header.Get("Content-Type"); strings.HasPrefix(ct, "application/vnd.") {
		typename = strings.TrimPrefix(ct, "application/vnd.")
		if i := strings.IndexByte(typename, ';'); i >= 0 {
			typename = strings.TrimSpace(typename[:i])
		}
		if i := strings.LastIndexByte(typename, '/'); i <= 0 || i == len(typename)-1 {
			return nil, http.StatusBadRequest, fmt.Errorf("ingress: Content-Type %q does not name a typename <namespace>/<name>", ct)
		}
	}
	limit := int64(MaxBodyBytes)
	if p.MaxBody != nil {
		limit = min(limit, p.MaxBody(segs[0], segs[1]))
	}
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, limit))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("ingress: body over %d bytes (what the function's endpoint can carry)", limit)
		}
		return nil, http.StatusBadRequest, fmt.Errorf("ingress: reading body: %v", err)
	}
	return &protocol.Envelope{
		Target:   &protocol.Address{Namespace: segs[0], Type: segs[1], Id: segs[2]},
		Argument: &protocol.TypedValue{Typename: typename, HasValue: true, Value: body},
	}, 0, nil
}

// splitPath splits /<namespace>/<name>/<id> on '/' before unescaping, so an
// id may carry an encoded '/'.
func splitPath(escaped string) ([3]string, error) {
	var out [3]string
	parts := strings.Split(strings.TrimPrefix(escaped, "/"), "/")
	if len(parts) != 3 {
		return out, fmt.Errorf("ingress: the path must be /<namespace>/<function-name>/<id>, got %q", escaped)
	}
	names := [3]string{"namespace", "function name", "id"}
	for i, p := range parts {
		s, err := url.PathUnescape(p)
		if err != nil {
			return out, fmt.Errorf("ingress: %s: %v", names[i], err)
		}
		if s == "" {
			return out, fmt.Errorf("ingress: the path must be /<namespace>/<function-name>/<id>: empty %s", names[i])
		}
		if !utf8.ValidString(s) {
			return out, fmt.Errorf("ingress: %s is not valid UTF-8", names[i])
		}
		out[i] = s
	}
	return out, nil
}
