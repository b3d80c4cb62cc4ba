package stateapi

// Cluster mode: requests one node sends another on a caller's behalf
// (docs/explanation/cluster.md, "Trust between nodes"). The sending node checked the
// caller's token; it sends the request signed with the cluster secret,
// naming the caller and the token's scopes, never the token itself. This
// node checks the signature, then authorizes the request as the caller's,
// with the scopes the sender vouched for that this node's own token file
// also gives the caller's name.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"

	"github.com/statefun-go/statefun/internal/cluster/forward"
	"github.com/statefun-go/statefun/internal/cluster/trust"
)

// nodeCallerKey keys, in a request's context, the trust.Caller of a
// request another node signed.
type nodeCallerKey struct{}

// fromNode checks the signature of a request another node signed (the
// trust.Header) and returns r with its caller in the context and its body
// read, or writes 401 (413 for a body over the cap) and returns false. A
// request without the header is returned as it is. A node without a
// cluster secret ignores the header: without tokens every caller may do
// everything anyway, and a node with tokens has a secret (the app refuses
// one without).
func (s *Server) fromNode(w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
	if r.Header.Get(trust.Header) == "" {
		return r, true
	}
	if s.opts.Nodes == nil {
		r.Header.Del(trust.Header)
		return r, true
	}
	limit := max(s.opts.MaxBodyBytes, forward.MaxOnceBody)
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		fail(w, r, http.StatusBadRequest, "reading the request body: "+err.Error())
		return nil, false
	}
	if int64(len(body)) > limit {
		fail(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is over %d bytes", limit))
		return nil, false
	}
	from, c, err := s.opts.Nodes.Verify(r, body)
	if err == nil && r.Header.Get(forward.Header) != from {
		err = fmt.Errorf("a request signed by node %s names node %q in %s", from, r.Header.Get(forward.Header), forward.Header)
	}
	if err != nil {
		w.Header().Set("WWW-Authenticate", `Bearer realm="statefun", error="invalid_token"`)
		fail(w, r, http.StatusUnauthorized, "a request from another node of the application that this node does not accept: "+err.Error())
		return nil, false
	}
	r = r.WithContext(context.WithValue(r.Context(), nodeCallerKey{}, c))
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	return r, true
}

// nodeToken is the token a request another node signed for caller c is
// authorized with: c's principal, with the scopes c carries that a token
// of that name in this node's token file also has; or why none, when this
// node has no token of that name.
func (s *Server) nodeToken(c trust.Caller) (Token, string) {
	var own []string
	for _, t := range s.tokens {
		if t.Name == c.Principal {
			own = append(own, t.Scopes...)
		}
	}
	if own == nil {
		return Token{}, fmt.Sprintf("another node vouched for %q, which has no token in this node's token file: every node of the application must load the same --api-tokens", c.Principal)
	}
	t := Token{Name: c.Principal}
	for _, sc := range c.Scopes {
		if slices.Contains(own, sc) && !slices.Contains(t.Scopes, sc) {
			t.Scopes = append(t.Scopes, sc)
		}
	}
	return t, ""
}

// Caller is who sent r, as this node authenticated them, for a request it
// sends another node on r's behalf (Options.Cluster, Options.Commands):
// the name and scopes of the token in r's Authorization, or the caller
// another node vouched for; without tokens, "anonymous" with every scope.
// A request with no valid token is nobody (the zero Caller), which the
// other node refuses.
func (s *Server) Caller(r *http.Request) trust.Caller {
	if c, ok := r.Context().Value(nodeCallerKey{}).(trust.Caller); ok {
		return c
	}
	if len(s.tokens) == 0 {
		return trust.Caller{Principal: "anonymous", Scopes: []string{ScopeRead, ScopeWrite}}
	}
	t, _, ok := s.bearer(r)
	if !ok {
		return trust.Caller{}
	}
	return trust.Caller{Principal: t.Name, Scopes: slices.Clone(t.Scopes)}
}
