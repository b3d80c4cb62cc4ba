package ingress

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/idempotency"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// storeSink makes each message durable in a real store's inbox, the way the
// engine's committer does, so a message the store cannot hold fails here.
type storeSink struct {
	db  *store.DB
	mu  sync.Mutex
	seq uint64
}

func (s *storeSink) Ingest(_ context.Context, env *protocol.Envelope) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.put(env, nil)
}

func (s *storeSink) put(env *protocol.Envelope, once *idempotency.Request) error {
	s.seq++
	p := address.Partition(env.GetTarget().GetId(), s.db.Partitions())
	b := s.db.NewBatch()
	b.PutInbox(store.InboxKey{Partition: p, Source: ^uint32(0), Seq: s.seq}, env)
	if once != nil {
		b.PutIdempotency(once.Scope, once.Key, store.IdempotencyRecord{At: time.Now().UnixMilli(), Fingerprint: once.Fingerprint})
	}
	return b.Commit(true)
}

// IngestOnce stores the key with the message, as the engine does (one
// request at a time, so never in progress).
func (s *storeSink) IngestOnce(_ context.Context, env *protocol.Envelope, r idempotency.Request) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, found, err := s.db.Idempotency(r.Scope, r.Key)
	switch {
	case err != nil:
		return false, err
	case found && !bytes.Equal(rec.Fingerprint, r.Fingerprint):
		return false, idempotency.ErrMismatch
	case found:
		return true, nil
	}
	return false, s.put(env, &r)
}

// stored returns every message in the store's inboxes.
func (s *storeSink) stored(t *testing.T) []*protocol.Envelope {
	t.Helper()
	var out []*protocol.Envelope
	for p := 0; p < s.db.Partitions(); p++ {
		if err := s.db.ScanInbox(p, func(_ store.InboxKey, env *protocol.Envelope) error {
			out = append(out, env)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// quietLogger drops Pebble's log lines.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)         {}
func (quietLogger) Errorf(string, ...any)        {}
func (quietLogger) Fatalf(f string, args ...any) { panic("pebble fatal: " + f) }

func newServer(t *testing.T, p *Playground) (*httptest.Server, *storeSink) {
	t.Helper()
	db, err := store.Open("", store.Options{FS: vfs.NewMem(), Partitions: 4, Logger: quietLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	sink := &storeSink{db: db}
	p.Sink = sink
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return srv, sink
}

// send sends one raw request and returns the status, the Allow header and
// the body of the answer.
func send(t *testing.T, srv *httptest.Server, method, path, contentType string, body []byte) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.URL.Opaque = path // sent as written, no cleaning or re-escaping
	if contentType != "" {
		req.Header["Content-Type"] = []string{contentType}
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func TestPlaygroundAcceptsAMessageAndStoresIt(t *testing.T) {
	srv, sink := newServer(t, &Playground{})
	for _, method := range []string{"PUT", "POST"} {
		status, _, body := send(t, srv, method, "/example/greeter/a%2Fb", "application/vnd.example/Greet; charset=utf-8", []byte("hi"))
		if status != http.StatusOK {
			t.Fatalf("%s: status %d: %s", method, status, body)
		}
	}
	got := sink.stored(t)
	if len(got) != 2 {
		t.Fatalf("stored %d messages, want 2", len(got))
	}
	env := got[0]
	if a := env.GetTarget(); a.GetNamespace() != "example" || a.GetType() != "greeter" || a.GetId() != "a/b" {
		t.Fatalf("target %v", a)
	}
	if v := env.GetArgument(); v.GetTypename() != "example/Greet" || string(v.GetValue()) != "hi" {
		t.Fatalf("argument %v", v)
	}
}

// Every field that will be stored is checked at the edge with a 4xx naming
// it, and nothing is written.
func TestPlaygroundRefusesWhatCannotBeStoredOrReached(t *testing.T) {
	admit := func(t address.TypeName) error {
		switch {
		case t.Namespace != "example":
			return errors.New("no endpoint serves it")
		case t.Name == "type-1001":
			return limitedErr{}
		}
		return nil
	}
	srv, sink := newServer(t, &Playground{Admit: admit})
	long := strings.Repeat("x", address.MaxSegmentBytes+1)
	for _, tc := range []struct {
		name, method, path, ct string
		status                 int
		want                   string
	}{
		// One request with such a typename used to stop the whole runtime:
		// the commit holding it failed to encode.
		{"typename not UTF-8", "PUT", "/example/greeter/a", "application/vnd.example/\xff\xfe", 400, "Content-Type"},
		{"typename without a name", "PUT", "/example/greeter/a", "application/vnd.example/", 400, "Content-Type"},
		{"typename without a slash", "PUT", "/example/greeter/a", "application/vnd.string", 400, "Content-Type"},
		{"typename with a control char", "PUT", "/example/greeter/a", "application/vnd.example/a\tb", 400, "Content-Type"},
		{"typename too long", "PUT", "/example/greeter/a", "application/vnd.example/" + long, 400, "typename is 4105 bytes"},
		// An id the state API could never read, repair or delete.
		{"id over the shared limit", "PUT", "/example/greeter/" + long, "", 400, "id is 4097 bytes, over the limit of 4096"},
		{"id not UTF-8", "PUT", "/example/greeter/%FF", "", 400, "ingress: id is not valid UTF-8"},
		{"empty id", "PUT", "/example/greeter/", "", 400, "empty id"},
		{"namespace over the limit", "PUT", "/" + long + "/greeter/a", "", 400, "namespace is 4097 bytes"},
		{"function name with a slash", "PUT", "/example/a%2Fb/a", "", 400, "function name \"a/b\" contains '/'"},
		{"function name with a control char", "PUT", "/example/a%0Ab/a", "", 400, "function name contains the control character"},
		{"too few segments", "PUT", "/example/greeter", "", 400, "/<namespace>/<function-name>/<id>"},
		// Only PUT and POST send; GET and OPTIONS used to become messages.
		{"GET", "GET", "/example/greeter/a", "", 405, "only POST and PUT"},
		{"OPTIONS", "OPTIONS", "/example/greeter/a", "", 405, "only POST and PUT"},
		{"DELETE", "DELETE", "/example/greeter/a", "", 405, "only POST and PUT"},
		// A type no endpoint serves used to be stored and retried forever.
		{"type no endpoint serves", "PUT", "/other/greeter/a", "", 404, "serves function type other/greeter"},
		{"a new type past a wildcard's bound", "PUT", "/example/type-1001/a", "", 422, "its limit"},
		// What a form on another site sends, from a browser that sends
		// no Origin or Sec-Fetch-Site for the listener's guard to see.
		{"text/plain", "POST", "/example/greeter/a", "text/plain", 415, "Content-Type \"text/plain\" is refused"},
		{"text/plain with a charset", "POST", "/example/greeter/a", "Text/Plain ;charset=UTF-8", 415, "application/vnd.<namespace>/<name>"},
		{"form", "POST", "/example/greeter/a", "application/x-www-form-urlencoded", 415, "Content-Type"},
		{"multipart form", "POST", "/example/greeter/a", "multipart/form-data; boundary=x", 415, "Content-Type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, hdr, body := send(t, srv, tc.method, tc.path, tc.ct, []byte("x"))
			if status != tc.status || !strings.Contains(body, tc.want) {
				t.Fatalf("status %d %q, want %d naming %q", status, body, tc.status, tc.want)
			}
			if status == 405 && hdr.Get("Allow") != "POST, PUT" {
				t.Fatalf("Allow %q", hdr.Get("Allow"))
			}
		})
	}
	if got := sink.stored(t); len(got) != 0 {
		t.Fatalf("refused requests stored %d messages: %v", len(got), got)
	}
	// The edge still works after all that, for every Content-Type a
	// playground client sends.
	for _, ct := range []string{"", "application/octet-stream", "application/json", "application/vnd.example/Greet"} {
		if status, _, body := send(t, srv, "POST", "/example/greeter/a", ct, []byte("x")); status != 200 {
			t.Fatalf("Content-Type %q: status %d: %s", ct, status, body)
		}
	}
}

// An id at the shared limit is accepted, and it is the limit the state API
// applies to its path segments.
func TestPlaygroundIDLimitIsTheSharedOne(t *testing.T) {
	srv, sink := newServer(t, &Playground{})
	id := strings.Repeat("é", address.MaxSegmentBytes/2)
	if status, _, body := send(t, srv, "PUT", "/example/greeter/"+id, "", nil); status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	if got := sink.stored(t); len(got) != 1 || got[0].GetTarget().GetId() != id {
		t.Fatalf("stored %v", got)
	}
}

// sendKeyed sends a PUT with an Idempotency-Key header line per key.
func sendKeyed(t *testing.T, srv *httptest.Server, path, body string, keys ...string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/vnd.example/Greet")
	req.Header["Idempotency-Key"] = keys
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// A key is stored with its message: a repeat is answered like the first and
// stores nothing; the key used for another request is refused with 422; a
// key that is not one is refused with 400 naming the header, before
// anything is written.
func TestPlaygroundIdempotencyKey(t *testing.T) {
	srv, sink := newServer(t, &Playground{})
	for i := range 2 {
		status, h, body := sendKeyed(t, srv, "/example/greeter/ada", "hi", `"k-1"`)
		if status != 200 || (h.Get("Idempotent-Replayed") == "true") != (i == 1) {
			t.Fatalf("send %d: %d %q replayed=%q", i, status, body, h.Get("Idempotent-Replayed"))
		}
	}
	// The bare form of the same key is the same key.
	if status, h, _ := sendKeyed(t, srv, "/example/greeter/ada", "hi", `k-1`); status != 200 || h.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("bare key: %d replayed=%q", status, h.Get("Idempotent-Replayed"))
	}
	if n := len(sink.stored(t)); n != 1 {
		t.Fatalf("stored %d messages, want 1", n)
	}
	for _, tc := range []struct{ path, body string }{
		{"/example/greeter/ada", "other body"},
		{"/example/greeter/bob", "hi"},
	} {
		status, _, body := sendKeyed(t, srv, tc.path, tc.body, "k-1")
		if status != http.StatusUnprocessableEntity || !strings.Contains(body, "Idempotency-Key") {
			t.Fatalf("%s %q with a used key: %d %q, want 422 naming Idempotency-Key", tc.path, tc.body, status, body)
		}
	}
	// Another function type is another scope: the key is new there.
	if status, h, _ := sendKeyed(t, srv, "/example/other/ada", "hi", "k-1"); status != 200 || h.Get("Idempotent-Replayed") != "" {
		t.Fatalf("same key, other function type: %d replayed=%q", status, h.Get("Idempotent-Replayed"))
	}
	for _, keys := range [][]string{{`"unterminated`}, {""}, {strings.Repeat("k", 256)}, {"a", "b"}, {"a b"}, {"\"a\tb\""}} {
		status, _, body := sendKeyed(t, srv, "/example/greeter/ada", "hi", keys...)
		if status != http.StatusBadRequest || !strings.Contains(body, "Idempotency-Key") {
			t.Fatalf("key %q: %d %q, want 400 naming Idempotency-Key", keys, status, body)
		}
	}
	if n := len(sink.stored(t)); n != 2 {
		t.Fatalf("stored %d messages, want 2", n)
	}
}

// tooLargeSink refuses every message as too large, as a cluster node does
// one whose record its Kafka producer would refuse.
type tooLargeSink struct{ storeSink }

func (*tooLargeSink) Ingest(context.Context, *protocol.Envelope) error {
	return fmt.Errorf("%w: over the 1000 bytes Kafka takes", ErrTooLarge)
}

// A message the sink can never make durable for its size is a 413 naming
// why, not the 503 of "retry later", which a client would retry forever;
// a sink that is only busy still gets a 503.
func TestPlaygroundTooLargeForTheSink(t *testing.T) {
	busy := func(err error) bool { return true }
	srv := httptest.NewServer(&Playground{Sink: &tooLargeSink{}, Busy: busy})
	t.Cleanup(srv.Close)
	status, hdr, body := send(t, srv, "PUT", "/example/greeter/a", "", []byte("x"))
	if status != http.StatusRequestEntityTooLarge || !strings.Contains(body, "over the 1000 bytes Kafka takes") || hdr.Get("Retry-After") != "" {
		t.Fatalf("status %d, Retry-After %q, body %q; want 413 naming the limit, no Retry-After", status, hdr.Get("Retry-After"), body)
	}
}

// waitingSink holds every message until the request's context ends, as
// the engine does while a message waits for its group commit.
type waitingSink struct {
	storeSink
	entered chan struct{}
}

func (s *waitingSink) Ingest(ctx context.Context, _ *protocol.Envelope) error {
	close(s.entered)
	<-ctx.Done()
	return ctx.Err()
}

// A client that goes away while its message waits for durability is not
// a fault of the runtime: no ERROR line, and the answer (which nobody
// reads) says the outcome is unknown rather than "not accepted".
func TestPlaygroundClientGoneIsNoError(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(b []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(b)
	}), &slog.HandlerOptions{Level: slog.LevelDebug}))
	sink := &waitingSink{entered: make(chan struct{})}
	rec := httptest.NewRecorder()
	ctx, cancel := context.WithCancel(context.Background())
	req := httptest.NewRequestWithContext(ctx, "PUT", "/example/greeter/a", strings.NewReader("x"))
	req.Header.Set("Content-Type", "application/vnd.example/text")
	done := make(chan struct{})
	go func() {
		(&Playground{Sink: sink, Logger: log}).ServeHTTP(rec, req)
		close(done)
	}()
	<-sink.entered
	cancel() // the client hangs up
	<-done
	mu.Lock()
	defer mu.Unlock()
	if strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("a client that went away was logged at ERROR:\n%s", logs.String())
	}
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "outcome is unknown") {
		t.Errorf("answer %d %q; want 503 saying the outcome is unknown", rec.Code, rec.Body.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// limitedErr is the refusal of a type past a wildcard endpoint's bound, as
// functions.TooManyTypesError reports it.
type limitedErr struct{}

func (limitedErr) Error() string {
	return "the endpoint for example/* already serves 1000 function types, its limit"
}
func (limitedErr) Limited() bool { return true }
