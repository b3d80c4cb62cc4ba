package trust

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var secret = []byte("0123456789abcdef0123456789abcdef")

// received is what a real HTTP server saw of one request and what Verify
// said of it.
type received struct {
	from   string
	caller Caller
	err    error
	header http.Header
	body   string
}

// receiver is node-b's listener: it verifies every request it gets.
func receiver(t *testing.T, auth *NodeAuth) (string, func() received) {
	t.Helper()
	var (
		mu   sync.Mutex
		last received
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		from, c, err := auth.Verify(r, b)
		mu.Lock()
		last = received{from: from, caller: c, err: err, header: r.Header.Clone(), body: string(b)}
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() received {
		mu.Lock()
		defer mu.Unlock()
		return last
	}
}

func send(t *testing.T, req *http.Request) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

func signed(t *testing.T, a *NodeAuth, method, url, body string, edit func(*http.Request)) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Statefun-Forwarded", "node-a")
	a.Sign(req, "node-b", Caller{Principal: "ops", Scopes: []string{"read", "write"}}, []byte(body))
	if edit != nil {
		edit(req)
	}
	return req
}

// A request signed by node-a verifies on node-b over real HTTP: the
// sender and the caller come out; a header added after signing is
// dropped.
func TestSignedRequestVerifies(t *testing.T) {
	a, b := NewNodeAuth(secret, "shop", "node-a"), NewNodeAuth(secret, "shop", "node-b")
	url, last := receiver(t, b)
	send(t, signed(t, a, http.MethodPost, url+"/pause/kc/counter/a%2Fb?x=1", `{"reason":"r"}`, func(r *http.Request) {
		r.Header.Set("Statefun-Type", "added-on-the-way")
	}))
	got := last()
	if got.err != nil || got.from != "node-a" || got.caller.Principal != "ops" || strings.Join(got.caller.Scopes, ",") != "read,write" {
		t.Fatalf("verify: %+v", got)
	}
	if got.header.Get("Statefun-Type") != "" || got.header.Get(Header) != "" || got.header.Get("Content-Type") != "application/json" || got.header.Get("Statefun-Forwarded") != "node-a" {
		t.Errorf("headers after verify: %v", got.header)
	}
	if got.body != `{"reason":"r"}` {
		t.Errorf("body %q", got.body)
	}
}

// A header the client writes from the request's fields, not from its
// Header (a Content-Length copied from the request being forwarded, which
// had a body), is not signed: the request still verifies.
func TestTransportHeadersAreNotSigned(t *testing.T) {
	a, b := NewNodeAuth(secret, "shop", "node-a"), NewNodeAuth(secret, "shop", "node-b")
	url, last := receiver(t, b)
	req, _ := http.NewRequest(http.MethodGet, url+"/mutations/x", nil)
	req.Header.Set("Content-Length", "14")
	req.Header.Set("Transfer-Encoding", "chunked")
	a.Sign(req, "node-b", Caller{Principal: "ops"}, nil)
	send(t, req)
	if got := last(); got.err != nil {
		t.Errorf("verify: %v", got.err)
	}
}

// Whatever is changed after signing fails: the path, the query, the
// method, the body, a signed header, the secret, the target node; a
// request sent twice is refused the second time; a signature from too
// long ago is refused.
func TestSignedRequestRefusals(t *testing.T) {
	a, b := NewNodeAuth(secret, "shop", "node-a"), NewNodeAuth(secret, "shop", "node-b")
	url, last := receiver(t, b)
	for _, c := range []struct {
		name string
		req  *http.Request
		want string
	}{
		{"path", signed(t, a, http.MethodGet, url+"/state/kc/c/a/count", "", func(r *http.Request) { r.URL.Path = "/state/kc/c/b/count" }), "does not verify"},
		{"query", signed(t, a, http.MethodGet, url+"/state/kc/c/a/count?wait=1s", "", func(r *http.Request) { r.URL.RawQuery = "wait=9s" }), "does not verify"},
		{"method", signed(t, a, http.MethodGet, url+"/state/kc/c/a/count", "", func(r *http.Request) { r.Method = http.MethodDelete }), "does not verify"},
		{"body", signed(t, a, http.MethodPost, url+"/pause/kc/c/a", `{"reason":"a"}`, func(r *http.Request) {
			r.Body, r.ContentLength = io.NopCloser(strings.NewReader(`{"reason":"b"}`)), 14
		}), "does not verify"},
		{"header", signed(t, a, http.MethodPost, url+"/pause/kc/c/a", "", func(r *http.Request) { r.Header.Set("Content-Type", "text/plain") }), "does not verify"},
		{"secret", signed(t, NewNodeAuth([]byte("another-secret-another-secret-!!"), "shop", "node-a"), http.MethodGet, url+"/state", "", nil), "does not verify with this node's cluster secret"},
		{"application", signed(t, NewNodeAuth(secret, "other-app", "node-a"), http.MethodGet, url+"/state", "", nil), "does not verify"},
		{"unsigned", func() *http.Request {
			r, _ := http.NewRequest(http.MethodGet, url+"/state", nil)
			r.Header.Set(Header, "bearer-ish")
			return r
		}(), "not a node signature"},
	} {
		send(t, c.req)
		if got := last(); got.err == nil || !strings.Contains(got.err.Error(), c.want) || !strings.HasPrefix(got.err.Error(), "trust: ") {
			t.Errorf("%s: %v, want an error saying %q", c.name, got.err, c.want)
		}
	}

	// Signed for node-c, sent to node-b.
	req, _ := http.NewRequest(http.MethodGet, url+"/state", nil)
	a.Sign(req, "node-c", Caller{Principal: "ops"}, nil)
	send(t, req)
	if got := last(); got.err == nil || !strings.Contains(got.err.Error(), "for node node-c, not for this node (node-b)") {
		t.Errorf("another target: %v", got.err)
	}

	// The same signed request twice: the first is taken, the second is a
	// replay.
	req = signed(t, a, http.MethodGet, url+"/state", "", nil)
	replay := req.Clone(req.Context())
	send(t, req)
	if got := last(); got.err != nil {
		t.Fatalf("first send: %v", got.err)
	}
	send(t, replay)
	if got := last(); got.err == nil || !strings.Contains(got.err.Error(), "replay") {
		t.Errorf("replay: %v", got.err)
	}

	// Signed by a clock a minute behind.
	late := NewNodeAuth(secret, "shop", "node-a")
	late.now = func() time.Time { return time.Now().Add(-time.Minute) }
	send(t, signed(t, late, http.MethodGet, url+"/state", "", nil))
	if got := last(); got.err == nil || !strings.Contains(got.err.Error(), "synchronize the nodes' clocks") {
		t.Errorf("a minute late: %v", got.err)
	}
}

// Nonces are forgotten once their requests are too old to be taken.
func TestNoncesAreForgotten(t *testing.T) {
	b := NewNodeAuth(secret, "shop", "node-b")
	now := time.Now()
	for i := range 100 {
		if !b.firstUse(string(rune('a'+i%26))+strings.Repeat("x", i), now.Add(MaxSkew), now) {
			t.Fatal("a new nonce was taken for a replay")
		}
	}
	later := now.Add(3 * MaxSkew)
	b.firstUse("late", later.Add(MaxSkew), later)
	if len(b.seen) != 1 {
		t.Errorf("%d nonces kept, want only the one still in its time", len(b.seen))
	}
}

// A MAC depends on every field and on where one ends.
func TestMACFields(t *testing.T) {
	if bytes.Equal(MAC(secret, "d", "ab", "c"), MAC(secret, "d", "a", "bc")) {
		t.Error("fields ab|c and a|bc share a MAC")
	}
	if bytes.Equal(MAC(secret, "d1", "x"), MAC(secret, "d2", "x")) {
		t.Error("two domains share a MAC")
	}
}

// LoadSecret takes a file of the secret (a trailing newline is not part
// of it) and refuses one others may write, or a short secret.
func TestLoadSecret(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "secret")
	if err := os.WriteFile(path, append(slices.Clone(secret), '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := LoadSecret(path)
	if err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("LoadSecret = %q, %v", got, err)
	}
	if runtime.GOOS != "windows" {
		os.Chmod(path, 0o622)
		if _, err := LoadSecret(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
			t.Errorf("a file others may write: %v", err)
		}
	}
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte("tiny\n"), 0o600)
	if _, err := LoadSecret(short); err == nil || !strings.Contains(err.Error(), "at least 32") || !strings.Contains(err.Error(), short) {
		t.Errorf("a short secret: %v", err)
	}
	if _, err := LoadSecret(filepath.Join(dir, "none")); err == nil || !strings.HasPrefix(err.Error(), "trust: ") {
		t.Errorf("no file: %v", err)
	}
}
