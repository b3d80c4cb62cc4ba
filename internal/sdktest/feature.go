package sdktest

import (
	"bytes"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/statefun-go/statefun/internal/protocol"
)

// maxBody caps the request bodies the FeatureServer reads (the runtime's
// default payload_max_bytes).
const maxBody = 32 << 20

// FeatureServer serves FeaturesFn and StatelessFn (FeatureHandler, the
// official Go SDK) on a loopback port for a test. It observes every request
// on its way to the SDK, so it can count invocations, hold a request in
// flight and inject failures.
type FeatureServer struct {
	// URL is the endpoint to configure for the function types, e.g. as the
	// urlPathTemplate of an io.statefun.endpoints.v2/http endpoint for
	// "sdktest/*". Every path reaches the same functions.
	URL string

	sdk     http.Handler
	out     *EgressSender
	srv     *httptest.Server
	closing chan struct{}
	once    sync.Once

	mu      sync.Mutex
	calls   map[string]int // address key -> invocations the SDK ran
	batches []Batch
	holds   map[string][]*Hold
	fails   map[string]int
	gates   []gate
}

// gate holds every request for the addresses whose key starts with prefix
// until open is closed.
type gate struct {
	prefix string
	open   chan struct{}
}

// Batch is one request the FeatureServer received, in arrival order.
type Batch struct {
	// Target is the batch's address key ("namespace/type/id").
	Target string
	// Callers holds each invocation's caller key, "" for no caller.
	Callers []string
	// Args holds each invocation's argument.
	Args []*protocol.TypedValue
	// States holds the names of the state entries attached to the batch.
	States []string
	// Status is the HTTP status answered; Incomplete reports whether the
	// answer was an IncompleteInvocationContext.
	Status     int
	Incomplete bool
}

// StartFeatureServer starts a FeatureServer that stops when t ends.
func StartFeatureServer(t testing.TB) *FeatureServer {
	t.Helper()
	out := &EgressSender{}
	s := &FeatureServer{
		sdk:     featureHandler(out),
		out:     out,
		closing: make(chan struct{}),
		calls:   map[string]int{},
		holds:   map[string][]*Hold{},
		fails:   map[string]int{},
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL + "/statefun"
	t.Cleanup(s.Close)
	return s
}

// SendEgressTo makes the functions send their records (reports and
// egress commands) by r from now on.
func (s *FeatureServer) SendEgressTo(r EgressRoute) { s.out.SendEgressTo(r) }

// Close releases every hold and stops the server; calls to URL fail from
// then on. It is idempotent; StartFeatureServer registers it as a cleanup.
func (s *FeatureServer) Close() {
	s.once.Do(func() {
		close(s.closing)
		s.srv.Close()
	})
}

// Invocations is how many invocations of the address the SDK has run: the
// invocations of every batch answered with an invocation result. Batches
// answered with IncompleteInvocationContext or an error do not count.
func (s *FeatureServer) Invocations(fnType, id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[AddressKey(Address(fnType, id))]
}

// InvocationCounts is a copy of every address's Invocations, keyed by
// "namespace/type/id".
func (s *FeatureServer) InvocationCounts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.calls)
}

// Batches is a copy of every request received so far.
func (s *FeatureServer) Batches() []Batch {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Batch(nil), s.batches...)
}

// Hold makes the next request for the address wait, before it reaches the
// SDK, until the returned Hold is released (or the server closes). Holds of
// one address apply to successive requests in the order they were made.
func (s *FeatureServer) Hold(fnType, id string) *Hold {
	h := &Hold{arrived: make(chan struct{}), release: make(chan struct{})}
	key := AddressKey(Address(fnType, id))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.holds[key] = append(s.holds[key], h)
	return h
}

// Gate makes every request for an address of fnType whose id starts with
// idPrefix wait, before it reaches the SDK, until the returned function is
// called (or the server closes): a function that is slow for as long as a
// test needs, across restarts of the runtime (a request whose runtime went
// away is answered to nobody).
func (s *FeatureServer) Gate(fnType, idPrefix string) (open func()) {
	g := gate{prefix: AddressKey(Address(fnType, idPrefix)), open: make(chan struct{})}
	s.mu.Lock()
	s.gates = append(s.gates, g)
	s.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(g.open) }) }
}

// FailNext makes the next n requests for the address fail with HTTP 500
// without reaching the SDK, as a crashed or overloaded function would.
func (s *FeatureServer) FailNext(fnType, id string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fails[AddressKey(Address(fnType, id))] += n
}

// Hold is a request kept in flight by FeatureServer.Hold.
type Hold struct {
	arrived     chan struct{}
	release     chan struct{}
	releaseOnce sync.Once
}

// Arrived is closed once the held request has arrived and is waiting.
func (h *Hold) Arrived() <-chan struct{} { return h.arrived }

// Release lets the held request (or, if it has not arrived yet, the next
// one) through. It is idempotent.
func (h *Hold) Release() { h.releaseOnce.Do(func() { close(h.release) }) }

func (s *FeatureServer) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		http.Error(w, "sdktest: reading request: "+err.Error(), http.StatusBadRequest)
		return
	}
	b := batchOf(body)

	for _, g := range s.gatesFor(b.Target) {
		select {
		case <-g.open:
		case <-s.closing:
		case <-r.Context().Done():
			http.Error(w, "sdktest: the caller went away while the request was gated", http.StatusServiceUnavailable)
			return
		}
	}
	hold, fail := s.take(b.Target)
	if hold != nil {
		close(hold.arrived)
		select {
		case <-hold.release:
		case <-s.closing:
		case <-r.Context().Done():
		}
	}
	if fail {
		b.Status = http.StatusInternalServerError
		s.record(b, 0)
		http.Error(w, "sdktest: injected failure", http.StatusInternalServerError)
		return
	}

	// The SDK sees the request as it was sent, so its own checks (method,
	// Content-Type, empty body) still apply. Its answer is recorded before
	// it is passed on, so a caller that has its reply sees it counted.
	r = r.Clone(r.Context())
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	rec := httptest.NewRecorder()
	s.sdk.ServeHTTP(rec, r)
	b.Status = rec.Code
	ran := 0
	if rec.Code == http.StatusOK {
		var from protocol.FromFunction
		if proto.Unmarshal(rec.Body.Bytes(), &from) == nil {
			if from.GetIncompleteInvocationContext() != nil {
				b.Incomplete = true
			} else {
				ran = len(b.Callers)
			}
		}
	}
	s.record(b, ran)
	maps.Copy(w.Header(), rec.Header())
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

// batchOf is what a request says about the batch it carries. A body that
// does not decode gives an empty Batch; it still goes to the SDK, which
// rejects it.
func batchOf(body []byte) Batch {
	var req protocol.ToFunction
	_ = proto.Unmarshal(body, &req)
	batch := req.GetInvocation()
	b := Batch{Target: AddressKey(batch.GetTarget())}
	for _, inv := range batch.GetInvocations() {
		caller := ""
		if inv.GetCaller() != nil {
			caller = AddressKey(inv.GetCaller())
		}
		b.Callers = append(b.Callers, caller)
		b.Args = append(b.Args, inv.GetArgument())
	}
	for _, st := range batch.GetState() {
		b.States = append(b.States, st.GetStateName())
	}
	return b
}

// gatesFor returns the gates a request for key waits at.
func (s *FeatureServer) gatesFor(key string) []gate {
	s.mu.Lock()
	defer s.mu.Unlock()
	var gs []gate
	for _, g := range s.gates {
		if strings.HasPrefix(key, g.prefix) {
			gs = append(gs, g)
		}
	}
	return gs
}

// take pops the next hold and failure for an address.
func (s *FeatureServer) take(key string) (*Hold, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var h *Hold
	if hs := s.holds[key]; len(hs) > 0 {
		h = hs[0]
		s.holds[key] = hs[1:]
	}
	fail := s.fails[key] > 0
	if fail {
		s.fails[key]--
	}
	return h, fail
}

func (s *FeatureServer) record(b Batch, ran int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.batches = append(s.batches, b)
	if ran > 0 {
		s.calls[b.Target] += ran
	}
}
