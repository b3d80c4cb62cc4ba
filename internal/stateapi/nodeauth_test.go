package stateapi

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/statefun-go/statefun/internal/cluster/forward"
	"github.com/statefun-go/statefun/internal/cluster/trust"
)

var clusterSecret = []byte("0123456789abcdef0123456789abcdef")

// fromNodeA sends a request as node-a does to node-b at base: signed with
// auth for node-b, vouching for c, with the hop header and without any
// Authorization.
func fromNodeA(t *testing.T, auth *trust.NodeAuth, base, method, path, body string, c trust.Caller, hdr ...string) *response {
	t.Helper()
	req, err := http.NewRequest(method, base+path, bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	if req.Header.Get(forward.Header) == "" {
		req.Header.Set(forward.Header, "node-a")
	}
	auth.Sign(req, "node-b", c, []byte(body))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return &response{Response: resp, body: b.Bytes()}
}

// A request another node signed is the caller's it vouches for: read and
// written with the scopes that both the signature and this node's token
// file give the caller's name, recorded in the audit log under that name.
// A name this node has no token for, a signature that does not verify, and
// a hop header that is not the signer are refused with 401.
func TestRequestsFromNodes(t *testing.T) {
	eng := startEngine(t, engineConfig{})
	base := serve(t, eng, Options{Tokens: []Token{tokenRead, tokenWrite, tokenBoth}, Nodes: trust.NewNodeAuth(clusterSecret, "shop", "node-b")})
	a := trust.NewNodeAuth(clusterSecret, "shop", "node-a")
	entry := "/state/test/fn/x/str"
	text := []string{"Content-Type", "text/plain", "Statefun-Type", "io.statefun.types/string"}

	w := fromNodeA(t, a, base, "PUT", entry, "hello", trust.Caller{Principal: "writer", Scopes: []string{ScopeWrite}}, text...)
	if w.StatusCode != 200 {
		t.Fatalf("a PUT vouched for writer: %s %s", w.Status, w.body)
	}
	r := fromNodeA(t, a, base, "GET", entry, "", trust.Caller{Principal: "reader", Scopes: []string{ScopeRead}}, "Accept", "text/plain")
	if r.StatusCode != 200 || string(r.body) != "hello" {
		t.Fatalf("a GET vouched for reader: %s %s", r.Status, r.body)
	}
	audit := send(t, base, "GET", "/audit?namespace=test&type=fn&id=x", nil, "Authorization", "Bearer "+tokenBoth.Secret)
	if audit.StatusCode != 200 || !strings.Contains(string(audit.body), `"principal": "writer"`) {
		t.Errorf("the audit log after a PUT vouched for writer: %s %s", audit.Status, audit.body)
	}

	// The sending node claims more scopes than this node's token file
	// gives reader: only read is granted.
	if r := fromNodeA(t, a, base, "PUT", entry, "x", trust.Caller{Principal: "reader", Scopes: []string{ScopeRead, ScopeWrite}}, text...); r.StatusCode != 403 {
		t.Errorf("a PUT vouched for reader with the write scope: %s %s", r.Status, r.body)
	}
	// Nobody of that name here.
	if r := fromNodeA(t, a, base, "GET", entry, "", trust.Caller{Principal: "mallory", Scopes: []string{ScopeRead}}); r.StatusCode != 401 ||
		!strings.Contains(r.problem(t).Detail, `"mallory", which has no token in this node's token file`) {
		t.Errorf("a GET vouched for an unknown name: %s %s", r.Status, r.body)
	}
	// Another secret.
	other := trust.NewNodeAuth([]byte("another-secret-another-secret-!!"), "shop", "node-a")
	if r := fromNodeA(t, other, base, "GET", entry, "", trust.Caller{Principal: "reader", Scopes: []string{ScopeRead}}); r.StatusCode != 401 ||
		!strings.Contains(r.problem(t).Detail, "does not verify with this node's cluster secret") {
		t.Errorf("another secret: %s %s", r.Status, r.body)
	}
	// Signed by node-a, the hop header naming node-c.
	if r := fromNodeA(t, a, base, "GET", entry, "", trust.Caller{Principal: "reader", Scopes: []string{ScopeRead}}, forward.Header, "node-c"); r.StatusCode != 401 ||
		!strings.Contains(r.problem(t).Detail, `names node "node-c"`) {
		t.Errorf("a hop header that is not the signer: %s %s", r.Status, r.body)
	}
	// A caller's own bearer token still works, as ever.
	if r := send(t, base, "GET", entry, nil, "Authorization", "Bearer "+tokenRead.Secret); r.StatusCode != 200 {
		t.Errorf("a bearer token: %s %s", r.Status, r.body)
	}
}

// Caller is the token's name and scopes of a request's bearer token,
// another node's caller on a request it signed, anonymous without tokens
// and nobody for an unknown token.
func TestCaller(t *testing.T) {
	eng := startEngine(t, engineConfig{})
	s := New(eng, eng.Reads(), Options{Tokens: []Token{tokenRead}})
	req, _ := http.NewRequest("GET", "/state", nil)
	req.Header.Set("Authorization", "Bearer "+tokenRead.Secret)
	if c := s.Caller(req); c.Principal != "reader" || strings.Join(c.Scopes, ",") != "read" {
		t.Errorf("bearer: %+v", c)
	}
	req.Header.Set("Authorization", "Bearer nope-nope-nope-nope")
	if c := s.Caller(req); c.Principal != "" || c.Scopes != nil {
		t.Errorf("unknown token: %+v", c)
	}
	if c := New(eng, eng.Reads(), Options{}).Caller(req); c.Principal != "anonymous" || len(c.Scopes) != 2 {
		t.Errorf("no tokens: %+v", c)
	}
}
