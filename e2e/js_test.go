package e2e

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/sdktest"
)

// jsRequest is one request the runtime sent to the JS function server.
type jsRequest struct {
	target     string
	state      map[string]*protocol.TypedValue // attached entries; nil value: no value
	callers    []string
	args       []*protocol.TypedValue
	incomplete bool // answered with IncompleteInvocationContext
}

// wireLog is an HTTP proxy in front of a function server that decodes and
// keeps every request and whether it was answered with an
// IncompleteInvocationContext. It lets the test see what the runtime puts
// on the wire: the state attached to each request.
type wireLog struct {
	URL string

	upstream string
	mu       sync.Mutex
	reqs     []jsRequest
	holds    map[string]*wireHold
}

// wireHold keeps the next request for one address from the function until
// released.
type wireHold struct {
	arrived, release chan struct{}
	once             sync.Once
}

func (h *wireHold) Release() { h.once.Do(func() { close(h.release) }) }

// hold makes the next request for target wait for Release.
func (w *wireLog) hold(t testing.TB, target string) *wireHold {
	h := &wireHold{arrived: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(h.Release)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.holds[target] = h
	return h
}

func newWireLog(t testing.TB, upstream string) *wireLog {
	w := &wireLog{upstream: upstream, holds: map[string]*wireHold{}}
	client := &http.Client{Timeout: 10 * time.Second}
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		var to protocol.ToFunction
		if err := proto.Unmarshal(body, &to); err != nil {
			t.Errorf("wire log: request is not a ToFunction: %v", err)
		}
		batch := to.GetInvocation()
		rec := jsRequest{target: sdktest.AddressKey(batch.GetTarget()), state: map[string]*protocol.TypedValue{}}
		for _, st := range batch.GetState() {
			rec.state[st.GetStateName()] = st.GetStateValue()
		}
		for _, inv := range batch.GetInvocations() {
			c := ""
			if inv.GetCaller() != nil {
				c = sdktest.AddressKey(inv.GetCaller())
			}
			rec.callers = append(rec.callers, c)
			rec.args = append(rec.args, inv.GetArgument())
		}
		w.mu.Lock()
		h := w.holds[rec.target]
		delete(w.holds, rec.target)
		w.mu.Unlock()
		if h != nil {
			close(h.arrived)
			select {
			case <-h.release:
			case <-r.Context().Done():
			}
		}
		req, _ := http.NewRequestWithContext(r.Context(), r.Method, w.upstream, bytes.NewReader(body))
		req.Header.Set("Content-Type", r.Header.Get("Content-Type"))
		resp, err := client.Do(req)
		if err != nil {
			http.Error(rw, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		reply, _ := io.ReadAll(resp.Body)
		var from protocol.FromFunction
		if resp.StatusCode == http.StatusOK && proto.Unmarshal(reply, &from) == nil {
			rec.incomplete = from.GetIncompleteInvocationContext() != nil
		}
		w.mu.Lock()
		w.reqs = append(w.reqs, rec)
		w.mu.Unlock()
		rw.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
		rw.WriteHeader(resp.StatusCode)
		rw.Write(reply)
	}))
	t.Cleanup(srv.Close)
	w.URL = srv.URL + "/statefun"
	return w
}

func (w *wireLog) requests() []jsRequest {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.reqs)
}

// jsSend puts a jsfn/Name message (the raw body is the name; the counter
// reads non-string messages as UTF-8) through the ingress.
func jsSend(t testing.TB, rt *runtime, fn, id, name string) {
	t.Helper()
	status, err := rt.send("/"+fn+"/"+id, "jsfn/Name", name)
	if err != nil || status != http.StatusOK {
		t.Fatalf("ingress PUT /%s/%s: status %d, %v", fn, id, status, err)
	}
}

// jsRecords pops want records from topic js and checks them against want
// as a multiset, and that each address's records come in order; then it
// checks nothing more arrives for a while.
func jsRecords(t testing.TB, rt *runtime, want []string) {
	t.Helper()
	got := rt.collect(sdktest.JSTopic, len(want), 20*time.Second)
	time.Sleep(300 * time.Millisecond)
	got = append(got, rt.collect(sdktest.JSTopic, 1, 300*time.Millisecond)...)
	if !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))) {
		t.Fatalf("egress js: %q, want (in any order) %q", got, want)
	}
	// Records of one address leave in the order they were produced.
	seq := func(rs []string, prefix string) []string {
		var out []string
		for _, r := range rs {
			if strings.HasPrefix(r, prefix) {
				out = append(out, r)
			}
		}
		return out
	}
	for _, prefix := range []string{"alice:", "bob:"} {
		if g, w := seq(got, prefix), seq(want, prefix); !slices.Equal(g, w) {
			t.Errorf("egress js: records %s* in order %q, want %q", prefix, g, w)
		}
	}
}

// TestJSCounter runs jsfn/counter and jsfn/echo (official JavaScript SDK
// 3.3.0) on the runtime: the counter's int and string states count
// correctly over several messages, over a batch of four handled in one
// request, and across restarts (SIGTERM and SIGKILL, with no registration
// round trip after them); its messages to jsfn/echo carry it as the caller,
// an ingress message to echo has none, and every egress record arrives
// exactly once.
func TestJSCounter(t *testing.T) {
	t.Parallel()
	js := sdktest.StartJSServer(t)
	wire := newWireLog(t, js)
	rt := newRuntimeWith(t, moduleFor([]endpoint{{functions: "jsfn/*", url: wire.URL}}, []string{sdktest.JSTopic}))
	rt.start()

	const caller = "jsfn/counter/alice"
	for _, name := range []string{"Alice", "Bob", "Carol"} {
		jsSend(t, rt, sdktest.JSCounterFn, "alice", name)
	}
	jsSend(t, rt, sdktest.JSCounterFn, "bob", "Dave")
	jsSend(t, rt, sdktest.JSEchoFn, "solo", "direct")
	jsRecords(t, rt, []string{
		"alice:1", "alice:2", "alice:3", "bob:1",
		"echo:alice:" + caller, "echo:alice:" + caller, "echo:alice:" + caller,
		"echo:bob:jsfn/counter/bob", "echo:solo:none",
	})

	// What the echo function received: the counter's seen value as a
	// StateFun string, with the counter as caller.
	var echoed []string
	for _, r := range wire.requests() {
		if r.target != "jsfn/echo/alice" || r.incomplete {
			continue
		}
		for i, arg := range r.args {
			s, err := sdktest.DecodeString(arg)
			if err != nil {
				t.Errorf("message to jsfn/echo/alice: %v", err)
			}
			echoed = append(echoed, s)
			if r.callers[i] != caller {
				t.Errorf("message to jsfn/echo/alice: caller %q, want %q", r.callers[i], caller)
			}
		}
	}
	if want := []string{"1", "2", "3"}; !slices.Equal(echoed, want) {
		t.Errorf("jsfn/echo/alice received %q, want %q", echoed, want)
	}

	// A batch: while bob's request is held, four more messages queue; the
	// JS SDK then handles them in one request, in order.
	h := wire.hold(t, "jsfn/counter/bob")
	jsSend(t, rt, sdktest.JSCounterFn, "bob", "b2")
	select {
	case <-h.arrived:
	case <-time.After(20 * time.Second):
		t.Fatal("the request for jsfn/counter/bob never arrived")
	}
	for _, name := range []string{"b3", "b4", "b5", "b6"} {
		jsSend(t, rt, sdktest.JSCounterFn, "bob", name)
	}
	eventually(t, 10*time.Second, "messages queued behind the held request", func() bool {
		return metric(t, rt, "statefun_queue_depth") >= 4
	})
	h.Release()
	var want []string
	for i := 2; i <= 6; i++ {
		want = append(want, "bob:"+strconv.Itoa(i), "echo:bob:jsfn/counter/bob")
	}
	jsRecords(t, rt, want)
	var sizes []int
	for _, r := range wire.requests() {
		if r.target == "jsfn/counter/bob" && !r.incomplete {
			sizes = append(sizes, len(r.args))
		}
	}
	if !slices.Equal(sizes, []int{1, 1, 4}) {
		t.Errorf("requests to jsfn/counter/bob carried %v invocations, want [1 1 4]", sizes)
	}

	// Restart with SIGTERM: the state is where it was and is attached to
	// the first request, with no registration round trip.
	if err := rt.stop(); err != nil {
		t.Fatal(err)
	}
	before := len(wire.requests())
	rt.start()
	jsSend(t, rt, sdktest.JSCounterFn, "alice", "Eve")
	jsRecords(t, rt, []string{"alice:4", "echo:alice:" + caller})
	after := wire.requests()[before:]
	checkJSState(t, after, 3, "Carol")
	for _, r := range after {
		if r.incomplete {
			t.Errorf("after restart, the request for %s was answered with IncompleteInvocationContext", r.target)
		}
	}

	// Restart with SIGKILL right after an acknowledged message: it counts
	// once.
	jsSend(t, rt, sdktest.JSCounterFn, "alice", "Frank")
	rt.kill()
	before = len(wire.requests())
	rt.start()
	jsRecords(t, rt, []string{"alice:5", "echo:alice:" + caller})
	jsSend(t, rt, sdktest.JSCounterFn, "alice", "Grace")
	jsRecords(t, rt, []string{"alice:6", "echo:alice:" + caller})
	var last *jsRequest
	for _, r := range wire.requests()[before:] {
		if r.target == caller && !r.incomplete {
			last = &r
		}
	}
	if last == nil {
		t.Fatal("no request for jsfn/counter/alice after the SIGKILL restart")
	}
	checkJSState(t, []jsRequest{*last}, 5, "Frank")
}

// checkJSState checks the state attached to the first jsfn/counter/alice
// request in reqs: seen (int) and last_name (string).
func checkJSState(t testing.TB, reqs []jsRequest, seen int32, lastName string) {
	t.Helper()
	for _, r := range reqs {
		if r.target != "jsfn/counter/alice" {
			continue
		}
		if n, err := sdktest.DecodeInt32(r.state["seen"]); err != nil || n != seen {
			t.Errorf("state seen attached to jsfn/counter/alice: %d, %v; want %d", n, err, seen)
		}
		if s, err := sdktest.DecodeString(r.state["last_name"]); err != nil || s != lastName {
			t.Errorf("state last_name attached to jsfn/counter/alice: %q, %v; want %q", s, err, lastName)
		}
		return
	}
	t.Errorf("no request for jsfn/counter/alice")
}
