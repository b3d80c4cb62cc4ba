package forward

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A state change goes to the owner with its body; the owner's answer comes
// back. A 503 (the owner refused it) and an owner that cannot be reached
// are tried again, since the change certainly was not applied; without a
// mutation id, an answer lost after the change was sent is not: a 502
// saying it may have been applied, the owner having seen it once.
func TestForwardOnce(t *testing.T) {
	var calls atomic.Int32
	var body string
	owner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		body = string(b)
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable) // restoring
			return
		}
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, `{"status":"committed"}`)
	}))
	defer owner.Close()
	f := newForwarder(t, Config{Assignment: fixed(map[int]string{1: "node-b"}, map[string]string{"node-b": owner.URL})})
	req := httptest.NewRequest(http.MethodPost, "/pause/kc/counter/a", strings.NewReader(`{"reason":"repair"}`))
	rec := httptest.NewRecorder()
	if ok, err := f.ForwardOnce(rec, req, 1); !ok || err != nil {
		t.Fatalf("ForwardOnce = %v, %v", ok, err)
	}
	if rec.Code != 200 || calls.Load() != 2 || body != `{"reason":"repair"}` {
		t.Fatalf("answer %d after %d calls, body seen %q; want 200 after the 503 and a retry, with the body", rec.Code, calls.Load(), body)
	}

	// Nothing listens at the owner's address: retried within the budget,
	// then no answer (the caller's 503).
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := "http://" + l.Addr().String()
	l.Close()
	f = newForwarder(t, Config{Budget: 300 * time.Millisecond, Assignment: fixed(map[int]string{1: "node-b"}, map[string]string{"node-b": gone})})
	rec = httptest.NewRecorder()
	if ok, err := f.ForwardOnce(rec, httptest.NewRequest(http.MethodPost, "/pause/kc/counter/a", nil), 1); ok || err != nil {
		t.Fatalf("ForwardOnce to an owner that cannot be reached = %v, %v; want no answer", ok, err)
	}

	// The owner takes the request and the connection breaks before the
	// answer: sent once, answered 502.
	var hung atomic.Int32
	breaker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hung.Add(1)
		io.ReadAll(r.Body)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	defer breaker.Close()
	f = newForwarder(t, Config{Assignment: fixed(map[int]string{1: "node-b"}, map[string]string{"node-b": breaker.URL})})
	rec = httptest.NewRecorder()
	if ok, err := f.ForwardOnce(rec, httptest.NewRequest(http.MethodPost, "/inbox/kc/counter/a/skip", strings.NewReader("{}")), 1); !ok || err != nil {
		t.Fatalf("ForwardOnce = %v, %v", ok, err)
	}
	if rec.Code != http.StatusBadGateway || hung.Load() != 1 || !strings.Contains(rec.Body.String(), "may have been applied") {
		t.Fatalf("a lost answer: %d %q after %d sends; want 502 saying it may have been applied, after one send", rec.Code, rec.Body, hung.Load())
	}
}

// A change that carries its mutation id, which the owner applies once, is
// sent again after a lost answer: the owner gets the same id each time,
// and the caller the answer that came through. An answer lost until the
// budget ends is a 502 naming the id and its receipt.
func TestForwardOnceWithAnIDSendsAgain(t *testing.T) {
	var (
		calls atomic.Int32
		ids   = make(chan string, 10)
	)
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ids <- r.Header.Get(MutationID)
		if calls.Add(1) == 1 {
			io.ReadAll(r.Body)
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				conn.Close() // the answer is lost
			}
			return
		}
		io.WriteString(w, `{"status":"committed"}`)
	}))
	defer flaky.Close()
	f := newForwarder(t, Config{Assignment: fixed(map[int]string{1: "node-b"}, map[string]string{"node-b": flaky.URL})})
	req := httptest.NewRequest(http.MethodPost, "/inbox/kc/counter/a/skip", strings.NewReader("{}"))
	req.Header.Set(MutationID, "m-1")
	rec := httptest.NewRecorder()
	if ok, err := f.ForwardOnce(rec, req, 1); !ok || err != nil {
		t.Fatalf("ForwardOnce = %v, %v", ok, err)
	}
	if rec.Code != 200 || calls.Load() != 2 || <-ids != "m-1" || <-ids != "m-1" {
		t.Fatalf("%d after %d sends; want 200 after the lost answer and one more send, each with the id", rec.Code, calls.Load())
	}

	breaker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			conn.Close()
		}
	}))
	defer breaker.Close()
	f = newForwarder(t, Config{Budget: 300 * time.Millisecond, Assignment: fixed(map[int]string{1: "node-b"}, map[string]string{"node-b": breaker.URL})})
	req = httptest.NewRequest(http.MethodPost, "/inbox/kc/counter/a/skip", strings.NewReader("{}"))
	req.Header.Set(MutationID, "m-2")
	rec = httptest.NewRecorder()
	if ok, err := f.ForwardOnce(rec, req, 1); !ok || err != nil {
		t.Fatalf("ForwardOnce = %v, %v", ok, err)
	}
	if rec.Code != http.StatusBadGateway || rec.Header().Get("Location") != "/mutations/m-2" || !strings.Contains(rec.Body.String(), "read its receipt at /mutations/m-2") {
		t.Fatalf("lost until the end: %d %v %s", rec.Code, rec.Header(), rec.Body)
	}
}
