package stateapi

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/flink-statefun/statefun-sdk-go/v3/pkg/statefun"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/engine"
	"github.com/statefun-go/statefun/internal/invoker"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
	"github.com/statefun-go/statefun/internal/types"
)

// The tests of this package run the real runtime in process: the embedded
// store on an in-memory filesystem, the engine, the invoker calling an
// official Go SDK function on httptest, and the API's Handler on httptest.

func TestMain(m *testing.M) {
	log.SetOutput(io.Discard) // the SDK logs every registration
	code := m.Run()
	if code == 0 {
		code = checkStatusCoverage()
	}
	os.Exit(code)
}

// checkStatusCoverage fails a run of the whole package when a status
// openapi.json lists for an operation was produced by no test (but 500, a
// failing store). It runs after every test, so that it does not depend on
// the order the tests run in; a run of some tests only (-run, -skip) skips
// it.
func checkStatusCoverage() int {
	for _, name := range []string{"test.run", "test.skip"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != "" {
			return 0
		}
	}
	spec, err := parseSpec(openapiJSON)
	if err != nil {
		fmt.Fprintf(os.Stderr, "openapi.json: %v\n", err)
		return 1
	}
	observed.Lock()
	defer observed.Unlock()
	code := 0
	for _, op := range spec.ops {
		for c := range mapOf(op.node["responses"]) {
			n, _ := strconv.Atoi(c)
			if n != 500 && !observed.m[op.key][n] {
				fmt.Fprintf(os.Stderr, "--- FAIL: status coverage: %s documents %d, which no test produced\n", op.key, n)
				code = 1
			}
		}
	}
	return code
}

// fnType is the official-SDK function of these tests. It registers states
// of the built-in types, a JSON type, a binary (protobuf) type and a string
// with a one-hour TTL, and counts its messages in i64.
var fnType = address.TypeName{Namespace: "test", Name: "fn"}

const (
	blobType = "test/Blob" // a binary (protobuf) user type: no text form
	docType  = "test/Doc"  // a JSON user type
)

var fnSpecs = []statefun.ValueSpec{
	{Name: "b", ValueType: statefun.BoolType},
	{Name: "i32", ValueType: statefun.Int32Type},
	{Name: "i64", ValueType: statefun.Int64Type},
	{Name: "f64", ValueType: statefun.Float64Type},
	{Name: "str", ValueType: statefun.StringType},
	{Name: "doc", ValueType: statefun.MakeJsonType(statefun.TypeNameFrom(docType))},
	{Name: "bin", ValueType: statefun.MakeProtobufTypeWithTypeName(statefun.TypeNameFrom(blobType))},
	{Name: "ttl", ValueType: statefun.StringType, Expiration: statefun.ExpireAfterWrite(time.Hour)},
}

// startFunction serves test/fn with the official Go SDK and returns its URL.
func startFunction(t testing.TB) string {
	b := statefun.StatefulFunctionsBuilder()
	err := b.WithSpec(statefun.StatefulFunctionSpec{
		FunctionType: statefun.TypeNameFrom(fnType.String()),
		States:       fnSpecs,
		Function: statefun.StatefulFunctionPointer(func(ctx statefun.Context, _ statefun.Message) error {
			var n int64
			ctx.Storage().Get(fnSpecs[2], &n)
			ctx.Storage().Set(fnSpecs[2], n+1)
			return nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(b.AsHandler())
	t.Cleanup(srv.Close)
	return srv.URL + "/statefun"
}

// fnClient calls every function type at one URL.
type fnClient struct {
	c   *invoker.Client
	url string
}

func (f fnClient) Call(ctx context.Context, _ address.TypeName, req *protocol.ToFunction) (*protocol.FromFunction, error) {
	return f.c.Invoke(ctx, f.url, req)
}

type quietPebble struct{}

func (quietPebble) Infof(string, ...any)         {}
func (quietPebble) Errorf(string, ...any)        {}
func (quietPebble) Fatalf(f string, args ...any) { panic("pebble fatal: " + f) }

type engineConfig struct {
	partitions int
	maxBacklog int
	now        func() time.Time
	fnURL      string // empty: every call fails
}

// startEngine runs an engine on an in-memory store until t ends.
func startEngine(t testing.TB, cfg engineConfig) *engine.Engine {
	t.Helper()
	if cfg.partitions == 0 {
		cfg.partitions = 4
	}
	if cfg.fnURL == "" {
		cfg.fnURL = "http://127.0.0.1:1/none"
	}
	// One clock for the engine and the store's retention, as in the
	// runtime: with the engine's clock held in the past and the store's on
	// the wall clock, a sweep would find everything just written expired.
	db, err := store.Open("data", store.Options{Partitions: cfg.partitions, FS: vfs.NewMem(), Logger: quietPebble{}, Now: cfg.now})
	if err != nil {
		t.Fatal(err)
	}
	inv, err := invoker.New(invoker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(engine.Options{
		Store: db, Functions: fnClient{inv, cfg.fnURL}, MaxBacklog: cfg.maxBacklog, Now: cfg.now,
		RetryBase: 10 * time.Millisecond, RetryMax: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	eng.Start()
	engineDBs.Store(eng, db) // for the jobs of jobs_test.go
	t.Cleanup(func() {
		eng.Close()
		inv.Close()
		db.Close()
	})
	return eng
}

// serve serves an API over eng on httptest and returns its base URL.
func serve(t testing.TB, eng *engine.Engine, opts Options) string {
	srv := httptest.NewServer(New(eng, eng.Reads(), opts).Handler(http.NotFoundHandler()))
	t.Cleanup(srv.Close)
	return srv.URL
}

// ingest sends one message to test/fn/<id> through the engine's ingress path.
func ingest(t testing.TB, eng *engine.Engine, id string) {
	t.Helper()
	v, err := types.ParseText(types.String, "ping")
	if err != nil {
		t.Fatal(err)
	}
	err = eng.Ingest(context.Background(), &protocol.Envelope{
		Target:   &protocol.Address{Namespace: fnType.Namespace, Type: fnType.Name, Id: id},
		Argument: &protocol.TypedValue{Typename: types.String, HasValue: true, Value: v},
	})
	if err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond for up to 10 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// startWithFunction starts an engine with test/fn, and waits until the
// function registered its states (its first invocation, of id "warmup").
func startWithFunction(t testing.TB, cfg engineConfig) *engine.Engine {
	t.Helper()
	cfg.fnURL = startFunction(t)
	eng := startEngine(t, cfg)
	ingest(t, eng, "warmup")
	waitFor(t, "test/fn to register its states", func() bool { return len(eng.SpecsOf(fnType)) == len(fnSpecs) })
	return eng
}

// Tokens of the API configurations that need them.
var (
	tokenRead  = Token{Name: "reader", Secret: "reader-secret-0123456789", Scopes: []string{ScopeRead}}
	tokenWrite = Token{Name: "writer", Secret: "writer-secret-0123456789", Scopes: []string{ScopeWrite}}
	tokenBoth  = Token{Name: "operator", Secret: "operator-secret-0123456789", Scopes: []string{ScopeRead, ScopeWrite}}
)

// client follows no redirect: a redirect is an answer to check.
var client = &http.Client{
	Timeout:       30 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// response is an answer with its body read.
type response struct {
	*http.Response
	body []byte
}

// problem decodes a problem+json body.
func (r *response) problem(t testing.TB) problem {
	t.Helper()
	var p problem
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("%s: the body is not a problem: %v\n%s", r.Status, err, r.body)
	}
	return p
}

func (r *response) json(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("%s: the body is not JSON: %v\n%s", r.Status, err, r.body)
	}
}

// send makes a request. target is the escaped path and query, sent exactly
// as given (so malformed escapes reach the server); hdr are name, value
// pairs.
func send(t testing.TB, base, method, target string, body []byte, hdr ...string) *response {
	t.Helper()
	req, err := http.NewRequest(method, base, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	path, query, _ := strings.Cut(target, "?")
	req.URL.Opaque, req.URL.RawQuery = path, query
	if body == nil {
		req.Body, req.ContentLength = http.NoBody, 0
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, target, err)
	}
	r := &response{Response: resp, body: b}
	observe(t, method, target, r)
	return r
}

// mustPut writes an entry and returns the receipt.
func mustPut(t testing.TB, base, target, contentType, body string, hdr ...string) receiptJSON {
	t.Helper()
	r := send(t, base, "PUT", target, []byte(body), append([]string{"Content-Type", contentType}, hdr...)...)
	if r.StatusCode != 200 {
		t.Fatalf("PUT %s: %s %s", target, r.Status, r.body)
	}
	var rc receiptJSON
	r.json(t, &rc)
	return rc
}

// isBare400 reports whether an answer is Go's HTTP server refusing a
// request line it cannot parse (invalid percent-encoding), before any
// handler runs.
func isBare400(r *response) bool {
	return r.StatusCode == 400 && r.Header.Get("Content-Type") == "text/plain; charset=utf-8" && string(r.body) == "400 Bad Request"
}

// observed records, per documented operation, the statuses the tests saw,
// for the coverage check of TestStatusCodesAndHeaders.
var observed = struct {
	sync.Mutex
	m map[string]map[int]bool
}{m: map[string]map[int]bool{}}

// observe checks an answer against openapi.json and records its status.
func observe(t testing.TB, method, target string, r *response) {
	t.Helper()
	path, _, _ := strings.Cut(target, "?")
	op, ok := theSpec(t).find(method, path)
	if !ok || isBare400(r) {
		return
	}
	theSpec(t).conform(t, op, method+" "+target, r)
	observed.Lock()
	defer observed.Unlock()
	if observed.m[op.key] == nil {
		observed.m[op.key] = map[int]bool{}
	}
	observed.m[op.key][r.StatusCode] = true
}

// partitionOf returns the partition of eng that owns a, as the API
// reckons it.
func partitionOf(eng Engine, a address.Address) int { return (&Server{eng: eng}).partitionOf(a) }

// The engine serves the API's partition work, and its Reads, like the
// store itself, the API's reads of durable records.
var (
	_ Engine = (*engine.Engine)(nil)
	_ Store  = engine.Reads{}
	_ Store  = (*store.DB)(nil)
)
