package forward

import (
	"cmp"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/statefun-go/statefun/internal/cluster/trust"
)

// fixed is an assignment that does not change.
func fixed(owners map[int]string, urls map[string]string) func(context.Context) (map[int]string, map[string]string, error) {
	return func(context.Context) (map[int]string, map[string]string, error) { return owners, urls, nil }
}

func newForwarder(t *testing.T, cfg Config) *Forwarder {
	t.Helper()
	if cfg.Owned == nil {
		cfg.Owned = func() []int { return nil }
	}
	cfg.NodeID, cfg.Metrics = "node-a", prometheus.NewRegistry()
	if cfg.Partitions == 0 {
		cfg.Partitions = 4
	}
	f, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestForwardPassesTheOwnersAnswer: the owner gets the method, path,
// query, the caller's headers but its credentials, and the hop header;
// the caller gets the owner's status, headers and body unchanged.
func TestForwardPassesTheOwnersAnswer(t *testing.T) {
	var got *http.Request
	owner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Clone(context.Background())
		w.Header().Set("ETag", `"7"`)
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Statefun-Commit", "3:9")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "42")
	}))
	defer owner.Close()
	f := newForwarder(t, Config{Assignment: fixed(map[int]string{3: "node-b"}, map[string]string{"node-b": owner.URL})})
	req := httptest.NewRequest(http.MethodGet, "/state/kc/counter/a%2Fb/count?asOf=3:4", nil)
	req.Header.Set("Authorization", "Bearer secret")
	req.Header.Set("Cookie", "session=1")
	req.Header.Set(trust.Header, "a signature the caller made up")
	req.Header.Set("Accept", "text/plain")
	rec := httptest.NewRecorder()
	if !f.Forward(rec, req, 3) {
		t.Fatal("Forward reported no answer")
	}
	if got == nil {
		t.Fatal("the owner was not asked")
	}
	if got.URL.RequestURI() != "/state/kc/counter/a%2Fb/count?asOf=3:4" || got.Method != http.MethodGet {
		t.Errorf("the owner got %s %s", got.Method, got.URL.RequestURI())
	}
	if got.Header.Get("Authorization") != "" || got.Header.Get("Cookie") != "" || got.Header.Get(trust.Header) != "" ||
		got.Header.Get("Accept") != "text/plain" || got.Header.Get(Header) != "node-a" {
		t.Errorf("the owner got headers %v", got.Header)
	}
	if rec.Code != 200 || rec.Body.String() != "42" || rec.Header().Get("ETag") != `"7"` || rec.Header().Get("Statefun-Commit") != "3:9" || rec.Header().Get("Content-Type") != "text/plain" {
		t.Errorf("the caller got %d %v %q", rec.Code, rec.Header(), rec.Body.String())
	}
	if n := testutil.ToFloat64(f.counter.WithLabelValues("read", "answered")); n != 1 {
		t.Errorf("answered reads counted: %v, want 1", n)
	}
}

// TestForwardRetriesWhileTheOwnerRestores: an owner answering 503 is
// asked again until it answers.
func TestForwardRetriesWhileTheOwnerRestores(t *testing.T) {
	var asked atomic.Int32
	owner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if asked.Add(1) < 3 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok")
	}))
	defer owner.Close()
	f := newForwarder(t, Config{Assignment: fixed(map[int]string{0: "node-b"}, map[string]string{"node-b": owner.URL})})
	rec := httptest.NewRecorder()
	if !f.Forward(rec, httptest.NewRequest(http.MethodGet, "/state/kc/c/x", nil), 0) || rec.Code != 200 || rec.Body.String() != "ok" {
		t.Fatalf("Forward: %d %q", rec.Code, rec.Body.String())
	}
	if asked.Load() != 3 {
		t.Errorf("the owner was asked %d times, want 3", asked.Load())
	}
}

// TestForwardGivesUpWithinItsBudget: with no owner, Forward reports false
// once the budget is spent (the caller answers its 503); with an owner
// that keeps answering 503, that answer is passed back.
func TestForwardGivesUpWithinItsBudget(t *testing.T) {
	f := newForwarder(t, Config{Budget: 300 * time.Millisecond, Assignment: fixed(map[int]string{}, nil)})
	rec := httptest.NewRecorder()
	if f.Forward(rec, httptest.NewRequest(http.MethodGet, "/state/kc/c/x", nil), 0) {
		t.Fatalf("Forward answered %d without an owner", rec.Code)
	}
	if n := testutil.ToFloat64(f.counter.WithLabelValues("read", "no_owner")); n != 1 {
		t.Errorf("no_owner counted %v, want 1", n)
	}

	owner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "1")
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"detail":"being restored"}`)
	}))
	defer owner.Close()
	f = newForwarder(t, Config{Budget: 300 * time.Millisecond, Assignment: fixed(map[int]string{0: "node-b"}, map[string]string{"node-b": owner.URL})})
	rec = httptest.NewRecorder()
	if !f.Forward(rec, httptest.NewRequest(http.MethodGet, "/state/kc/c/x", nil), 0) {
		t.Fatal("Forward did not pass the owner's 503 back")
	}
	if rec.Code != 503 || rec.Header().Get("Retry-After") != "1" || rec.Body.String() != `{"detail":"being restored"}` {
		t.Errorf("the caller got %d %v %q", rec.Code, rec.Header(), rec.Body.String())
	}
}

// TestGatherNamesThePartitionsNoNodeAnswered: a node that is gone leaves
// its partitions missing; a node answering 5xx covers none.
func TestGatherNamesThePartitionsNoNodeAnswered(t *testing.T) {
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(Header) != "node-a" {
			t.Errorf("a gathered request without the hop header: %v", r.Header)
		}
		w.Header().Set(Partitions, "0,1")
		io.WriteString(w, `{"ids":[]}`)
	}))
	defer b.Close()
	c := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(Partitions, "2")
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer c.Close()
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	f := newForwarder(t, Config{Budget: 300 * time.Millisecond, Assignment: fixed(
		map[int]string{0: "b", 1: "b", 2: "c", 3: "d"}, map[string]string{"b": b.URL, "c": c.URL, "d": gone.URL})})
	answers, missing := f.Gather(httptest.NewRequest(http.MethodGet, "/state/kc/c", nil), 0, nil)
	if !slices.Equal(missing, []int{2, 3}) {
		t.Errorf("missing %v, want [2 3]", missing)
	}
	if len(answers) == 0 {
		t.Error("no answers")
	}
	if n := testutil.ToFloat64(f.counter.WithLabelValues("gather", "partial")); n != 1 {
		t.Errorf("partial gathers counted %v, want 1", n)
	}
}

// TestOwnedIsTheEnginesAndTheGroups: a partition the engine still runs
// but the group assigned to another node is not owned (its copy here may
// be stale); without the assignment, the engine's partitions are.
func TestOwnedIsTheEnginesAndTheGroups(t *testing.T) {
	f := newForwarder(t, Config{Owned: func() []int { return []int{0, 1, 3} },
		Assignment: fixed(map[int]string{0: "node-a", 1: "node-b", 2: "node-a"}, nil)})
	if got := f.Owned(); !slices.Equal(got, []int{0}) {
		t.Errorf("Owned() = %v, want [0]", got)
	}
	f = newForwarder(t, Config{Owned: func() []int { return []int{0, 1, 3} },
		Assignment: func(context.Context) (map[int]string, map[string]string, error) {
			return nil, nil, context.DeadlineExceeded
		}})
	if got := f.Owned(); !slices.Equal(got, []int{0, 1, 3}) {
		t.Errorf("Owned() without the assignment = %v, want [0 1 3]", got)
	}
}

// TestSpreadSendsEachOwnerItsShare: each owner gets the body and its
// partitions in the Partitions header; a partition whose owner answered
// 503 is sent again when the assignment moves it, and one nobody applies
// within the budget is reported missing.
func TestSpreadSendsEachOwnerItsShare(t *testing.T) {
	type got struct{ parts, body string }
	var mu = make(chan struct{}, 1)
	seen := map[string][]got{}
	node := func(name string, answer func(parts string) (int, string)) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			parts := r.Header.Get(Partitions)
			mu <- struct{}{}
			seen[name] = append(seen[name], got{parts, string(b)})
			<-mu
			status, applied := answer(parts)
			w.Header().Set(Partitions, applied)
			w.WriteHeader(status)
		}))
	}
	a := node("a", func(parts string) (int, string) { return 200, parts })
	defer a.Close()
	b := node("b", func(string) (int, string) { return 503, "" }) // restoring, then gone
	defer b.Close()
	var moved atomic.Bool
	assign := func(context.Context) (map[int]string, map[string]string, error) {
		owners := map[int]string{0: "a", 1: "a", 2: "b", 3: "b"}
		if moved.Load() {
			owners[2] = "a" // 2 moved to a; 3 stays with b, which never applies it
		}
		return owners, map[string]string{"a": a.URL, "b": b.URL}, nil
	}
	f := newForwarder(t, Config{Assignment: assign, Budget: 700 * time.Millisecond})
	req := httptest.NewRequest(http.MethodPost, "/pause/kc/counter", nil)
	go func() {
		time.Sleep(100 * time.Millisecond)
		moved.Store(true)
	}()
	answers, refusal, missing := f.Spread(req, []byte(`{"reason":"r"}`), []int{0, 1, 2, 3}, 0)
	if refusal != nil || !slices.Equal(missing, []int{3}) {
		t.Fatalf("Spread: refusal %v, missing %v; want none, [3]", refusal, missing)
	}
	var applied []int
	for _, an := range answers {
		applied = append(applied, an.Partitions...)
	}
	slices.Sort(applied)
	if !slices.Equal(applied, []int{0, 1, 2}) {
		t.Errorf("applied %v; want 0,1,2", applied)
	}
	if first := seen["a"][0]; first.parts != "0,1" || first.body != `{"reason":"r"}` {
		t.Errorf("a's first share: %+v", first)
	}
	if last := seen["a"][len(seen["a"])-1]; last.parts != "2" {
		t.Errorf("a's last share: %+v; want partition 2 after it moved", last)
	}
	if first := seen["b"][0]; first.parts != "2,3" {
		t.Errorf("b's first share: %+v", first)
	}

	// A refusal (4xx) is the answer.
	c := node("c", func(string) (int, string) { return 401, "" })
	defer c.Close()
	f = newForwarder(t, Config{Assignment: fixed(map[int]string{0: "c"}, map[string]string{"c": c.URL})})
	if _, refusal, _ := f.Spread(req, nil, []int{0}, 0); refusal == nil || refusal.Status != 401 {
		t.Errorf("a 401 share: %v", refusal)
	}

	// An owner that answers once its share is committed, after the
	// budget: with wait it is waited for, without it its share is missing.
	slow := node("slow", func(parts string) (int, string) {
		time.Sleep(400 * time.Millisecond)
		return 200, parts
	})
	defer slow.Close()
	f = newForwarder(t, Config{Assignment: fixed(map[int]string{0: "slow"}, map[string]string{"slow": slow.URL}), Budget: 200 * time.Millisecond})
	if answers, _, missing := f.Spread(req, nil, []int{0}, time.Second); len(answers) != 1 || len(missing) != 0 {
		t.Errorf("a share answered after the budget, within the wait: %d answers, missing %v", len(answers), missing)
	}
	if answers, _, missing := f.Spread(req, nil, []int{0}, 0); len(answers) != 0 || !slices.Equal(missing, []int{0}) {
		t.Errorf("a share answered after the budget, no wait: %d answers, missing %v; want none, [0]", len(answers), missing)
	}
}

// TestForwardSigns: with a cluster secret, every request to another node
// (a read, a change sent once, a gathered listing, a spread share) is
// signed for that node, vouching for the caller, and verifies there; the
// caller's token is not in it. An admin URL that is not http or https is
// never sent to.
func TestForwardSigns(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	b := trust.NewNodeAuth(secret, "shop", "node-b")
	var (
		mu     sync.Mutex
		seen   []trust.Caller
		failed []error
	)
	owner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		_, c, err := b.Verify(r, body)
		mu.Lock()
		defer mu.Unlock()
		if err == nil && r.Header.Get("Authorization") != "" {
			err = errors.New("the caller's Authorization reached the owner")
		}
		if err != nil {
			failed = append(failed, err)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		seen = append(seen, c)
		// A share names its partitions; a gathered request covers both.
		w.Header().Set(Partitions, cmp.Or(r.Header.Get(Partitions), "0,1"))
		io.WriteString(w, "{}")
	}))
	defer owner.Close()
	caller := trust.Caller{Principal: "ops", Scopes: []string{"read"}}
	f := newForwarder(t, Config{Partitions: 2, Assignment: fixed(map[int]string{0: "node-b", 1: "node-b"}, map[string]string{"node-b": owner.URL}),
		Auth: trust.NewNodeAuth(secret, "shop", "node-a"), Caller: func(*http.Request) trust.Caller { return caller }})
	req := func(method, body string) *http.Request {
		r := httptest.NewRequest(method, "/state/kc/c/x", strings.NewReader(body))
		r.Header.Set("Authorization", "Bearer the-callers-token")
		return r
	}
	if !f.Forward(httptest.NewRecorder(), req(http.MethodGet, ""), 0) {
		t.Fatal("Forward: no answer")
	}
	if ok, err := f.ForwardOnce(httptest.NewRecorder(), req(http.MethodPost, `{"reason":"r"}`), 1); !ok || err != nil {
		t.Fatalf("ForwardOnce: %v %v", ok, err)
	}
	if answers, missing := f.Gather(req(http.MethodGet, ""), 0, nil); len(answers) != 1 || len(missing) != 0 {
		t.Fatalf("Gather: %v, missing %v", answers, missing)
	}
	if answers, refusal, missing := f.Spread(req(http.MethodPost, ""), []byte(`{"pause":true}`), []int{0, 1}, 0); len(answers) != 1 || refusal != nil || len(missing) != 0 {
		t.Fatalf("Spread: %v %v %v", answers, refusal, missing)
	}
	mu.Lock()
	if len(failed) != 0 || len(seen) != 4 {
		t.Errorf("the owner verified %d requests, refused %v; want 4 verified", len(seen), failed)
	}
	for _, c := range seen {
		if c.Principal != "ops" || strings.Join(c.Scopes, ",") != "read" {
			t.Errorf("the owner saw the caller %+v", c)
		}
	}
	mu.Unlock()

	// A member whose URL is not http(s) is asked nothing: no owner.
	f = newForwarder(t, Config{Budget: 200 * time.Millisecond, Assignment: fixed(map[int]string{0: "node-b"}, map[string]string{"node-b": "file:///etc/passwd"})})
	if f.Forward(httptest.NewRecorder(), req(http.MethodGet, ""), 0) {
		t.Error("Forward answered through a file: URL")
	}
}
