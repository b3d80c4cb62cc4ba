package e2e

// The hostile-input and resource table: every defect of the hardening
// issue as one row, run against the real binary next to the official Go
// SDK's sdktest/features and sdktest/stateless (one FeatureServer behind a
// proxy that can make an address misbehave, bound as one namespace
// endpoint so the two types share its connection pool). After every row
// the test checks the three promises:
//
//	(a) the runtime still runs and is ready: the process is alive,
//	    /healthz and /readyz answer 200;
//	(b) nothing was written that should not be: the state listings, the
//	    sentinel entry's version, the function's observed invocations and
//	    the egress hold only what the row was allowed to change, and no
//	    message is left queued (statefun_queue_depth back to 0);
//	(c) the other function type is still served: a message to
//	    sdktest/stateless (and one to another sdktest/features address)
//	    is answered, observed by its egress record.
//
// Rows that must stop the process at start (module.yaml, token files, the
// data directory, the disk reserve) are in TestHostileStart; rows that need
// a runtime of their own (the disk below the reserve, trust_cacerts in
// file: form) in TestHostileOwnProcess. Helpers are prefixed "hostile" so
// they cannot collide with the other e2e files.
//
// Shown once to fail with their fix reverted: the flood row (without the
// batch byte cap the queued 4 MiB messages went out as one 64 MiB request,
// refused on every retry), the non-UTF-8 typename (without the ingress
// check the store's encoding refuses it: 500 instead of 400), the delays
// near MaxInt64 (without saturation they fired at once), the forged Host
// (200 instead of 421) and the hung calls (without the bulkhead the other
// type got no call within 20 s).

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/sdktest"
)

// hostileLeakTopic is an egress topic declared in module.yaml that only a
// refused response writes to: any record on it is a leak.
const hostileLeakTopic = "leak"

// hostileRogue is a response a rogue address answers with instead of the
// SDK, until it is fixed.
type hostileRogue struct {
	resp  []byte
	calls atomic.Int64
	fixed atomic.Bool
	// once makes the rogue fix itself after its first answer.
	once bool
	// gate, when set, holds the first call until it is closed; arrived is
	// closed when that call has come.
	gate, arrived chan struct{}
	// mu guards args: the first bytes of every invocation's argument, in
	// the order the calls carried them.
	mu   sync.Mutex
	args []string
}

// hostileFn is the function side: sdktest's FeatureServer (the official Go
// SDK) behind a proxy that lets a row make one address misbehave.
type hostileFn struct {
	fs     *sdktest.FeatureServer
	url    string
	mu     sync.Mutex
	rogues map[string]*hostileRogue // by target id
}

func startHostileFn(t *testing.T) *hostileFn {
	t.Helper()
	h := &hostileFn{fs: sdktest.StartFeatureServer(t), rogues: map[string]*hostileRogue{}}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var req protocol.ToFunction
		_ = proto.Unmarshal(body, &req)
		h.mu.Lock()
		rogue := h.rogues[req.GetInvocation().GetTarget().GetId()]
		h.mu.Unlock()
		if rogue != nil && !rogue.fixed.Load() {
			if rogue.calls.Add(1) == 1 && rogue.gate != nil {
				close(rogue.arrived)
				select {
				case <-rogue.gate:
				case <-r.Context().Done():
					return
				}
			}
			rogue.mu.Lock()
			for _, inv := range req.GetInvocation().GetInvocations() {
				v := inv.GetArgument().GetValue()
				rogue.args = append(rogue.args, string(v[:min(len(v), 8)]))
			}
			rogue.mu.Unlock()
			if rogue.once {
				rogue.fixed.Store(true)
			}
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Write(rogue.resp)
			return
		}
		out, err := http.NewRequestWithContext(r.Context(), r.Method, h.fs.URL, strings.NewReader(string(body)))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		out.Header = r.Header.Clone()
		resp, err := client.Do(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		maps.Copy(w.Header(), resp.Header)
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, resp.Body)
	}))
	t.Cleanup(srv.Close)
	h.url = srv.URL + "/statefun"
	return h
}

// rogue makes sdktest/features/<id> answer res (an invocation result)
// instead of running the SDK.
func (h *hostileFn) rogue(t testing.TB, id string, res *protocol.FromFunction_InvocationResponse, once bool) *hostileRogue {
	t.Helper()
	body, err := proto.Marshal(&protocol.FromFunction{Response: &protocol.FromFunction_InvocationResult{InvocationResult: res}})
	if err != nil {
		t.Fatal(err)
	}
	r := &hostileRogue{resp: body, once: once}
	h.mu.Lock()
	h.rogues[id] = r
	h.mu.Unlock()
	return r
}

// hostileEnv is the shared runtime of TestHostile and what the test has
// seen so far.
type hostileEnv struct {
	t   *testing.T
	fn  *hostileFn
	rt  *runtime
	api *saAPI

	// seen holds every egress record popped so far, by topic.
	seen  map[string][]string
	probe int
}

// hostileModule binds sdktest/* (sdktest/features and sdktest/stateless)
// to one endpoint, so that the two types share its connection pool, with
// the playground ingress and an egress with the report topic and the leak
// topic. The call timeout is long, so that a hung call stays hung for a
// row's length.
func hostileModule(fnURL string) func(in, out int) string {
	return func(in, out int) string {
		var b strings.Builder
		fmt.Fprintf(&b, "kind: io.statefun.endpoints.v2/http\nspec:\n  functions: sdktest/*\n  urlPathTemplate: %s\n  transport:\n    type: io.statefun.transports.v1/async\n    call: 2min\n---\n", fnURL)
		// narrow/fn is routable but carries small requests; no message ever
		// reaches it.
		fmt.Fprintf(&b, "kind: io.statefun.endpoints.v2/http\nspec:\n  functions: %s\n  urlPathTemplate: %s\n  transport:\n    type: io.statefun.transports.v1/async\n    payload_max_bytes: %d\n---\n", hostileNarrow, fnURL, hostileNarrowCap)
		fmt.Fprintf(&b, "kind: io.statefun.playground.v1/ingress\nspec:\n  port: %d\n---\n", in)
		fmt.Fprintf(&b, "kind: io.statefun.playground.v1/egress\nspec:\n  port: %d\n  topics: [%s, %s]\n", out, sdktest.DefaultTopic, hostileLeakTopic)
		return b.String()
	}
}

// hostileMaxConns is the connection cap of every listener of the shared
// runtime: low, so that a row can fill a listener with few connections.
const hostileMaxConns = 64

// hostileSnapshot is what promise (b) compares.
type hostileSnapshot struct {
	listing  map[string]string // API path -> body
	sentinel string            // ETag of the sentinel entry
	calls    map[string]int    // observed invocations per address key
	seen     map[string]int    // egress records seen per topic
}

// hostileAllowed is what a row may change.
type hostileAllowed struct {
	// addresses ("namespace/type/id") whose invocations may change.
	addrs []string
	// sentinel may get a new version.
	sentinel bool
	// reports (by tag, or by arg_text for a string message) that may show
	// up on the report topic.
	reports []string
}

const (
	// hostileNarrow's endpoint carries requests of hostileNarrowCap bytes:
	// 4 KiB of a message.
	hostileNarrow    = "narrow/fn"
	hostileNarrowCap = 8192

	hostileSentinel = "sentinel"
	hostileStateful = sdktest.FeaturesFn
	hostileOther    = sdktest.StatelessFn
)

// hostileListings are the listings promise (b) compares.
var hostileListings = []string{"/state", "/state/sdktest", "/state/sdktest/features?limit=1000", "/state/sdktest/stateless?limit=1000", "/state/nowhere"}

func (e *hostileEnv) snapshot(t *testing.T) hostileSnapshot {
	t.Helper()
	s := hostileSnapshot{listing: map[string]string{}, calls: e.fn.fs.InvocationCounts(), seen: map[string]int{}}
	api := e.api.withT(t)
	for _, p := range hostileListings {
		s.listing[p] = string(api.do(http.MethodGet, p, "").body)
	}
	s.sentinel = api.expect(http.StatusOK, http.MethodGet, saEntry(hostileSentinel, sdktest.StateInt64), "").header.Get("ETag")
	for topic, recs := range e.seen {
		s.seen[topic] = len(recs)
	}
	return s
}

// pollEgress pops every topic until it is empty.
func (e *hostileEnv) pollEgress(t testing.TB) {
	t.Helper()
	for _, topic := range []string{sdktest.DefaultTopic, hostileLeakTopic} {
		for {
			p, ok, err := e.rt.pop(topic)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			e.seen[topic] = append(e.seen[topic], p)
		}
	}
}

// reportKey is what identifies a report: its tag, or its text argument.
func hostileReportKey(payload string) string {
	var rep sdktest.Report
	if err := json.Unmarshal([]byte(payload), &rep); err != nil {
		return "not a report: " + payload
	}
	if rep.Tag != "" {
		return rep.Tag
	}
	return "text:" + rep.ArgText
}

// awaitReport pops until a report with key shows up.
func (e *hostileEnv) awaitReport(t testing.TB, key string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		for _, p := range e.seen[sdktest.DefaultTopic] {
			if hostileReportKey(p) == key {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no report %q within %v; seen %q", key, timeout, e.seen[sdktest.DefaultTopic])
		}
		e.pollEgress(t)
		time.Sleep(5 * time.Millisecond)
	}
}

// command sends c to fnType/id through the ingress; it must be acknowledged.
func (e *hostileEnv) command(t testing.TB, fnType, id string, c sdktest.Command) {
	t.Helper()
	command(t, e.rt, fnType, id, c)
}

// alive is promise (a).
func (e *hostileEnv) alive(t testing.TB, readyz int) {
	t.Helper()
	select {
	case <-e.rt.exited:
		t.Fatalf("statefun exited:\n%s", e.rt.logs())
	default:
	}
	for path, want := range map[string]int{"/healthz": 200, "/readyz": readyz} {
		resp, err := http.Get("http://" + e.rt.admin + path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s: %s %s; want %d", path, resp.Status, b, want)
		}
	}
}

// served is promise (c): the other function type, and another address of
// the stateful one, still answer a message.
func (e *hostileEnv) served(t testing.TB) {
	t.Helper()
	e.probe++
	tag := fmt.Sprintf("probe-%d", e.probe)
	e.command(t, hostileOther, "probe", report(tag+"-other"))
	e.command(t, hostileStateful, "probe", report(tag+"-stateful"))
	e.awaitReport(t, tag+"-other", 20*time.Second)
	e.awaitReport(t, tag+"-stateful", 20*time.Second)
}

// promises checks (a), (c) and then (b) against before.
func (e *hostileEnv) promises(t *testing.T, before hostileSnapshot, allowed hostileAllowed) {
	t.Helper()
	e.alive(t, 200)
	e.served(t)
	eventually(t, 20*time.Second, "statefun_queue_depth back to 0", func() bool {
		return metric(t, e.rt, "statefun_queue_depth") == 0
	})
	after := e.snapshot(t)
	for p, b := range before.listing {
		if after.listing[p] != b {
			t.Errorf("(b) GET %s changed:\nbefore %s\nafter  %s", p, b, after.listing[p])
		}
	}
	if !allowed.sentinel && after.sentinel != before.sentinel {
		t.Errorf("(b) the sentinel's version changed from %s to %s", before.sentinel, after.sentinel)
	}
	skip := map[string]bool{
		hostileOther + "/probe":    true,
		hostileStateful + "/probe": true,
	}
	for _, a := range allowed.addrs {
		skip[a] = true
	}
	for k := range after.calls {
		if !skip[k] && after.calls[k] != before.calls[k] {
			t.Errorf("(b) %s was invoked %d times during the row, want 0", k, after.calls[k]-before.calls[k])
		}
	}
	if n := len(e.seen[hostileLeakTopic]); n > before.seen[hostileLeakTopic] {
		t.Errorf("(b) records on the leak topic: %q", e.seen[hostileLeakTopic][before.seen[hostileLeakTopic]:])
	}
	ok := map[string]bool{}
	for _, k := range allowed.reports {
		ok[k] = true
	}
	for _, p := range e.seen[sdktest.DefaultTopic][before.seen[sdktest.DefaultTopic]:] {
		if k := hostileReportKey(p); !ok[k] && !strings.HasPrefix(k, "probe-") {
			t.Errorf("(b) unexpected egress record %s", p)
		}
	}
}

// hostileRaw sends one HTTP/1.1 request exactly as given (net/http's
// client would refuse or re-encode some of these) and returns the status,
// headers and body.
func hostileRaw(t testing.TB, base, method, target string, hdr map[string]string, body string) (int, http.Header, string) {
	t.Helper()
	host := strings.TrimPrefix(base, "http://")
	conn, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\nConnection: close\r\n", method, target, host, len(body))
	for k, v := range hdr {
		fmt.Fprintf(&b, "%s: %s\r\n", k, v)
	}
	b.WriteString("\r\n")
	b.WriteString(body)
	go io.WriteString(conn, b.String())
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%s %.80s: %v", method, target, err)
	}
	rb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header, string(rb)
}

// hostileRow is one hostile action against the shared runtime. run does it,
// checks the edge's answer, and returns what it was allowed to change.
type hostileRow struct {
	name string
	run  func(t *testing.T, e *hostileEnv) hostileAllowed
}

// hostileRefused returns a row that sends one raw ingress request and
// expects it refused with status and every fragment in the body.
func hostileRefused(name, method, target, contentType string, status int, frags ...string) hostileRow {
	return hostileRefusedAny(name, method, target, contentType, []int{status}, frags...)
}

// hostileRefusedAny is hostileRefused with a choice of statuses.
func hostileRefusedAny(name, method, target, contentType string, statuses []int, frags ...string) hostileRow {
	return hostileRow{name: name, run: func(t *testing.T, e *hostileEnv) hostileAllowed {
		hdr := map[string]string{}
		if contentType != "" {
			hdr["Content-Type"] = contentType
		}
		got, h, body := hostileRaw(t, e.rt.ingress, method, target, hdr, `{"op":"report","tag":"leaked"}`)
		if !slices.Contains(statuses, got) {
			t.Errorf("%s %.100s: status %d %q; want one of %d", method, target, got, body, statuses)
		}
		if got == http.StatusMethodNotAllowed && h.Get("Allow") != "POST, PUT" {
			t.Errorf("%s: Allow %q; want \"POST, PUT\"", method, h.Get("Allow"))
		}
		for _, f := range frags {
			if !strings.Contains(body, f) {
				t.Errorf("%s %.100s: body %q lacks %q", method, target, body, f)
			}
		}
		return hostileAllowed{}
	}}
}

// hostileViolation returns a row where sdktest/features/<id> answers res, a
// response the runtime must refuse as a whole: the address retries, the
// others keep going, nothing of res is applied; once the function is fixed
// the message is delivered, once.
func hostileViolation(name string, res *protocol.FromFunction_InvocationResponse, why string) hostileRow {
	id := "rogue-" + strings.ReplaceAll(name, " ", "-")
	return hostileRow{name: name, run: func(t *testing.T, e *hostileEnv) hostileAllowed {
		rogue := e.fn.rogue(t, id, res, false)
		e.command(t, hostileStateful, id, report(id))
		eventually(t, 20*time.Second, "the rogue address retried", func() bool { return rogue.calls.Load() >= 2 })
		line, ok := badLogLine(badFullLog(e.rt), []string{"function=" + hostileStateful + " ", "id=" + id + " ", "protocol_violation=true", why})
		if !ok {
			t.Errorf("no log line for %s/%s with protocol_violation=true and %q", hostileStateful, id, why)
		} else {
			t.Logf("logged: %s", line)
		}
		// The others keep going while the address retries.
		e.alive(t, 200)
		e.served(t)
		rogue.fixed.Store(true)
		e.awaitReport(t, id, 30*time.Second)
		if n := e.fn.fs.Invocations(hostileStateful, id); n != 1 {
			t.Errorf("after the fix, %s/%s ran %d times; want 1", hostileStateful, id, n)
		}
		return hostileAllowed{addrs: []string{hostileStateful + "/" + id}, reports: []string{id}}
	}}
}

// hostileLeakEgress is a valid egress record that a refused response
// carries next to its bad part: it must never appear.
func hostileLeakEgress() *protocol.FromFunction_EgressMessage {
	return badPlaygroundRecord(hostileLeakTopic, "leaked")
}

func hostileString(s string) *protocol.TypedValue {
	return sdktest.StringValue(s)
}

// hostileIDOn returns an id of prefix on partition p (of 8), or, when p
// is -1, one on a partition other than avoid's.
func hostileIDOn(prefix string, p int, avoid ...string) string {
	for i := 0; ; i++ {
		id := prefix + strconv.Itoa(i)
		q := address.Partition(id, partitions)
		if p >= 0 {
			if q == p {
				return id
			}
			continue
		}
		if !slices.ContainsFunc(avoid, func(a string) bool { return address.Partition(a, partitions) == q }) {
			return id
		}
	}
}

// TestHostile runs the table against one runtime.
func TestHostile(t *testing.T) {
	fn := startHostileFn(t)
	rt := newRuntimeWith(t, hostileModule(fn.url))
	saStart(rt, "http", http.DefaultClient, hostileArgs...)
	e := &hostileEnv{t: t, fn: fn, rt: rt, api: saAPIOf(t, "http://"+rt.admin, saClient), seen: map[string][]string{}}

	// The sentinel: an entry whose version must not move, and the first
	// contact of both types.
	e.command(t, hostileStateful, hostileSentinel, seq(sdktest.Command{Op: sdktest.OpIncr}, report("warm-stateful")))
	e.command(t, hostileOther, "warm", report("warm-other"))
	e.awaitReport(t, "warm-stateful", 30*time.Second)
	e.awaitReport(t, "warm-other", 30*time.Second)

	const typeShape = "does not name a typename"
	long := strings.Repeat("a", address.MaxSegmentBytes)
	rows := []hostileRow{
		// Ingress: every field that will be stored is checked at the edge.
		hostileRefused("ingress typename not UTF-8", "PUT", "/sdktest/features/x", "application/vnd.sdktest/\xff\xfe", 400, "Content-Type", "UTF-8"),
		// Go's HTTP server refuses a header value with a control character
		// other than tab before any handler sees it.
		hostileRefused("ingress typename with a control character", "PUT", "/sdktest/features/x", "application/vnd.sdktest/a\x7fb", 400, "Bad Request"),
		hostileRefused("ingress typename with a tab", "PUT", "/sdktest/features/x", "application/vnd.sdktest/a\tb", 400, "Content-Type"),
		hostileRefused("ingress typename too long", "PUT", "/sdktest/features/x", "application/vnd.sdktest/"+long, 400, "Content-Type", "4096"),
		// 400 from the ingress, or 431 from the HTTP server when the request
		// line is over the listener's MaxHeaderBytes.
		hostileRefusedAny("ingress id of 1 MB", "PUT", "/sdktest/features/"+strings.Repeat("i", 1<<20), "application/vnd.sdktest/Command", []int{400, 431}),
		hostileRefused("ingress function name with a control character", "PUT", "/sdktest/fea%01tures/x", "application/vnd.sdktest/Command", 400, "function name", "control character"),
		hostileRefused("ingress id over the limit", "PUT", "/sdktest/features/"+long+"i", "application/vnd.sdktest/Command", 400, "id", "4096"),
		hostileRefused("ingress function name over the limit", "PUT", "/sdktest/"+long+"f/x", "application/vnd.sdktest/Command", 400, "4096"),
		hostileRefused("ingress GET", "GET", "/sdktest/features/x", "application/vnd.sdktest/Command", 405),
		hostileRefused("ingress OPTIONS", "OPTIONS", "/sdktest/features/x", "application/vnd.sdktest/Command", 405),
		hostileRefused("ingress DELETE", "DELETE", "/sdktest/features/x", "application/vnd.sdktest/Command", 405),
		hostileRefused("ingress HEAD", "HEAD", "/sdktest/features/x", "application/vnd.sdktest/Command", 405),
		hostileRefused("ingress to an unserved function type", "PUT", "/nowhere/fn/x", "application/vnd.sdktest/Command", 404, "nowhere/fn"),
		// What an HTML form on another site sends, from a browser that
		// sends no Origin or Sec-Fetch-Site.
		hostileRefused("ingress text/plain (a form)", "POST", "/sdktest/features/x", "text/plain;charset=UTF-8", 415, "Content-Type", "application/vnd.<namespace>/<name>"),
		hostileRefused("ingress urlencoded form", "POST", "/sdktest/features/x", "application/x-www-form-urlencoded", 415, "Content-Type"),
		hostileRefused("ingress multipart form", "POST", "/sdktest/features/x", "multipart/form-data; boundary=b", 415, "Content-Type"),
		hostileRefused("ingress typename without a namespace", "PUT", "/sdktest/features/x", "application/vnd./Command", 400, typeShape),
		{name: "ingress id exactly at the limit", run: func(t *testing.T, e *hostileEnv) hostileAllowed {
			// Accepted, delivered, and then readable and deletable through
			// the state API: the two edges share one limit.
			e.command(t, hostileStateful, long, seq(sdktest.Command{Op: sdktest.OpIncr}, report("at-limit")))
			e.awaitReport(t, "at-limit", 20*time.Second)
			api := e.api.withT(t)
			if v, _ := api.getText(saEntry(long, sdktest.StateInt64)); v != "1" {
				t.Errorf("GET of the 4096-byte id: %q; want 1", v)
			}
			api.expect(http.StatusOK, http.MethodDelete, "/state/sdktest/features/"+long, "")
			api.expect(http.StatusNotFound, http.MethodGet, saEntry(long, sdktest.StateInt64), "")
			return hostileAllowed{addrs: []string{hostileStateful + "/" + long}, reports: []string{"at-limit"}}
		}},

		// A function whose response breaks the rules: refused as a whole,
		// its address retries, the rest keeps going.
		hostileViolation("response sends to an unserved type", &protocol.FromFunction_InvocationResponse{
			OutgoingEgresses: []*protocol.FromFunction_EgressMessage{hostileLeakEgress()},
			OutgoingMessages: []*protocol.FromFunction_Invocation{
				{Target: sdktest.Address(hostileOther, "leak"), Argument: hostileString("leaked")},
				{Target: sdktest.Address("nowhere/fn", "x"), Argument: hostileString("leaked")},
			},
		}, "no endpoint serves function type nowhere/fn"),
		hostileViolation("response sends with an empty typename", &protocol.FromFunction_InvocationResponse{
			OutgoingEgresses: []*protocol.FromFunction_EgressMessage{hostileLeakEgress()},
			OutgoingMessages: []*protocol.FromFunction_Invocation{
				{Target: &protocol.Address{Id: "x"}, Argument: hostileString("leaked")},
			},
		}, "outgoing message 0"),
		hostileViolation("response sends an argument without a typename", &protocol.FromFunction_InvocationResponse{
			OutgoingEgresses: []*protocol.FromFunction_EgressMessage{hostileLeakEgress()},
			OutgoingMessages: []*protocol.FromFunction_Invocation{
				{Target: sdktest.Address(hostileOther, "leak"), Argument: &protocol.TypedValue{HasValue: true, Value: []byte("x")}},
			},
		}, "outgoing message 0"),
		hostileViolation("response sends more than the target's endpoint carries", &protocol.FromFunction_InvocationResponse{
			OutgoingEgresses: []*protocol.FromFunction_EgressMessage{hostileLeakEgress()},
			OutgoingMessages: []*protocol.FromFunction_Invocation{
				{Target: sdktest.Address(hostileOther, "leak"), Argument: hostileString("leaked")},
				{Target: sdktest.Address(hostileNarrow, "x"), Argument: hostileString(strings.Repeat("w", hostileNarrowCap/2))},
			},
		}, "it could never be delivered"),
		hostileViolation("response delays to an unserved type", &protocol.FromFunction_InvocationResponse{
			OutgoingEgresses: []*protocol.FromFunction_EgressMessage{hostileLeakEgress()},
			DelayedInvocations: []*protocol.FromFunction_DelayedInvocation{
				{DelayInMs: 1, Target: sdktest.Address("nowhere/fn", "x"), Argument: hostileString("leaked")},
			},
		}, "no endpoint serves function type nowhere/fn"),
		{name: "response delays near MaxInt64", run: func(t *testing.T, e *hostileEnv) hostileAllowed {
			// Valid, so applied: the huge delays lie forever in the future.
			// Were now+delay to wrap around, they would be due before the
			// short one, and to the same address, so they would be
			// delivered first.
			const id = "rogue-delay"
			target := sdktest.Address(hostileOther, "late")
			rogue := e.fn.rogue(t, id, &protocol.FromFunction_InvocationResponse{
				DelayedInvocations: []*protocol.FromFunction_DelayedInvocation{
					{DelayInMs: math.MaxInt64, Target: target, Argument: hostileString("huge")},
					{DelayInMs: math.MaxInt64 - 1, Target: target, Argument: hostileString("huge")},
					{DelayInMs: math.MaxInt64 / 2, Target: target, Argument: hostileString("huge")},
					{DelayInMs: 50, Target: target, Argument: hostileString("short")},
				},
			}, true)
			e.command(t, hostileStateful, id, report(id))
			e.awaitReport(t, "text:short", 20*time.Second)
			if n := rogue.calls.Load(); n != 1 {
				t.Errorf("the rogue answered %d times; want 1 (a valid response is not retried)", n)
			}
			return hostileAllowed{addrs: []string{hostileStateful + "/" + id, hostileOther + "/late"}, reports: []string{"text:short"}}
		}},

		// The state API on the tokenless loopback listener.
		{name: "state API forged Host (DNS rebinding)", run: func(t *testing.T, e *hostileEnv) hostileAllowed {
			for _, method := range []string{"GET", "PUT", "DELETE"} {
				body := ""
				if method == "PUT" {
					body = "99"
				}
				status, _, resp := hostileRawHost(t, e.rt.admin, "evil.example:"+strconv.Itoa(saPort(t, "http://"+e.rt.admin)), method, saEntry(hostileSentinel, sdktest.StateInt64), body)
				if status != http.StatusMisdirectedRequest || !strings.Contains(resp, "Host") {
					t.Errorf("%s with a rebound Host: %d %s; want 421 naming Host", method, status, resp)
				}
			}
			return hostileAllowed{}
		}},
		{name: "state API cross-origin writes", run: func(t *testing.T, e *hostileEnv) hostileAllowed {
			api := e.api.withT(t)
			path := saEntry(hostileSentinel, sdktest.StateInt64)
			for _, hdr := range [][]string{
				{"Origin", "http://evil.example"},
				{"Origin", "null"},
				{"Sec-Fetch-Site", "cross-site"},
				{"Sec-Fetch-Site", "same-site"},
			} {
				for _, method := range []string{"PUT", "DELETE"} {
					r := api.do(method, path, "99", append([]string{"Content-Type", "text/plain"}, hdr...)...)
					if r.status != http.StatusForbidden || !strings.Contains(string(r.body), hdr[0]) {
						t.Errorf("%s with %s: %s; want 403 naming %s", method, hdr, r, hdr[0])
					}
				}
				r := api.do(http.MethodPost, "/mutations/none/revert", "", hdr...)
				if r.status != http.StatusForbidden {
					t.Errorf("POST revert with %s: %s; want 403", hdr, r)
				}
			}
			// A read from another origin is not a change: allowed.
			api.expect(http.StatusOK, http.MethodGet, path, "", "Origin", "http://evil.example")
			return hostileAllowed{}
		}},
		{name: "state API If-Match lists, weak and opaque tags", run: func(t *testing.T, e *hostileEnv) hostileAllowed {
			api := e.api.withT(t)
			path := saEntry(hostileSentinel, sdktest.StateInt64)
			_, v := api.getText(path)
			for _, c := range []struct {
				ifMatch string
				want    int
			}{
				{`W/"` + v + `"`, 412},
				{`"abc"`, 412},
				{`"0` + v + `"`, 412},
				{`"1", "2"`, 412},
				{`W/"` + v + `", "abc"`, 412},
				{``, 412},
				{v, 400},
				{`"` + v, 400},
				{`"1" "2"`, 400},
				{`*, "1"`, 400},
			} {
				r := api.putText(path, "77", "If-Match", c.ifMatch)
				if r.status != c.want {
					t.Errorf("If-Match %q: %s; want %d", c.ifMatch, r, c.want)
				}
			}
			if got, v2 := api.getText(path); got != "1" || v2 != v {
				t.Fatalf("after refused conditions the sentinel is %s (version %s); want 1 (version %s)", got, v2, v)
			}
			// A list that holds the current version matches; set it back.
			saReceiptOf(t, api.putText(path, "1", "If-Match", `"abc", W/"1", "`+v+`"`), "committed")
			return hostileAllowed{sentinel: true}
		}},
		{name: "state API audit limit over the cap, and big pages streamed", run: func(t *testing.T, e *hostileEnv) hostileAllowed {
			api := e.api.withT(t)
			for _, q := range []string{"limit=100000", "limit=10001", "limit=-1", "limit=x"} {
				if r := api.do(http.MethodGet, "/audit?"+q, ""); r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "limit") {
					t.Errorf("/audit?%s: %s; want 400 naming limit", q, r)
				}
			}
			// Ten of the largest pages at once, each streamed (no
			// Content-Length: the page is written as it is scanned) and
			// complete.
			var wg sync.WaitGroup
			errs := make(chan error, 10)
			for range 10 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					resp, err := http.Get("http://" + e.rt.admin + "/audit?limit=10000")
					if err != nil {
						errs <- err
						return
					}
					defer resp.Body.Close()
					var page struct {
						Records []saAudit `json:"records"`
						Next    *string   `json:"next"`
					}
					if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
						errs <- fmt.Errorf("/audit?limit=10000: %s: %v", resp.Status, err)
						return
					}
					if resp.StatusCode != 200 || resp.ContentLength != -1 || len(page.Records) == 0 || page.Next != nil {
						errs <- fmt.Errorf("/audit?limit=10000: %s, Content-Length %d, %d records, next %v; want a streamed 200 with every record", resp.Status, resp.ContentLength, len(page.Records), page.Next)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			return hostileAllowed{}
		}},
		{name: "flood beyond a partition's queue limit", run: hostileFlood},
		{name: "1,100 hung calls of one type", run: hostileHung},
		{name: "idle keep-alive connections over the cap", run: hostileIdleKeepAlive},
		{name: "connections that send nothing fill the ingress", run: hostileSilentConns},
	}
	for _, row := range rows {
		if !t.Run(row.name, func(t *testing.T) {
			before := e.snapshot(t)
			allowed := row.run(t, e)
			e.promises(t, before, allowed)
		}) {
			select {
			case <-rt.exited:
				t.Fatalf("statefun exited after %q", row.name)
			default:
			}
		}
	}

	t.Run("idle SIGTERM, then a start without replay", func(t *testing.T) {
		before := e.snapshot(t)
		if err := rt.stop(); err != nil {
			t.Fatalf("idle SIGTERM: %v\n%s", err, rt.logs())
		}
		mark := len(badFullLog(rt))
		saStart(rt, "http", http.DefaultClient, hostileArgs...)
		if log := badFullLog(rt)[mark:]; strings.Contains(log, "replayed its write-ahead log") {
			t.Errorf("the start after a clean stop replayed the write-ahead log:\n%s", log)
		}
		e.promises(t, before, hostileAllowed{})

		// The check can fail: after SIGKILL the next start replays.
		rt.kill()
		mark = len(badFullLog(rt))
		saStart(rt, "http", http.DefaultClient, hostileArgs...)
		if log := badFullLog(rt)[mark:]; !strings.Contains(log, "replayed its write-ahead log") {
			t.Errorf("the start after SIGKILL did not log its replay; the check above proves nothing:\n%s", log)
		}
		e.alive(t, 200)
	})

	// Nothing fired early during the whole test: the huge delays are still
	// in the future.
	e.pollEgress(t)
	for _, p := range e.seen[sdktest.DefaultTopic] {
		if hostileReportKey(p) == "text:huge" {
			t.Errorf("a delay near MaxInt64 fired: %s", p)
		}
	}
}

// hostileRawHost sends a request to the admin listener at addr with the
// given Host header (a forged one, as a DNS-rebinding page sends).
func hostileRawHost(t testing.TB, addr, host, method, path, body string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	req.Header.Set("Content-Type", "text/plain")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// hostileArgs are the flags the hostile runtime runs with: the connection
// cap the tests fill, and a partition's bytes in memory at 64 MiB, so that
// the flood below queues more than one 32 MiB request's worth of 4 MiB
// messages (the default is 16 MiB).
var hostileArgs = []string{"--max-conns", strconv.Itoa(hostileMaxConns), "--max-backlog-bytes", strconv.Itoa(64 << 20)}

// hostileFlood fills one partition past its queue limit in bytes (64 MiB
// here) while a call of one of its addresses is held: further messages,
// mutations and reads on that partition are refused with 503 and
// Retry-After, the other partitions keep going, and once the call returns
// everything accepted is delivered once, in batches the endpoint can
// carry. The flooded address is a rogue that answers an empty result at
// once, so the test spends no time decoding megabytes in the SDK.
func hostileFlood(t *testing.T, e *hostileEnv) hostileAllowed {
	id := hostileIDOn("flood-", -1, "probe", hostileSentinel)
	neighbour := hostileIDOn("flood-neighbour-", address.Partition(id, partitions))
	rogue := e.fn.rogue(t, id, &protocol.FromFunction_InvocationResponse{}, false)
	rogue.gate, rogue.arrived = make(chan struct{}), make(chan struct{})
	release := sync.OnceFunc(func() { close(rogue.gate) })
	defer release()
	send := func(n int, size int) *http.Response {
		body := fmt.Sprintf("%08d", n) + strings.Repeat("x", size)
		req, _ := http.NewRequest(http.MethodPut, e.rt.ingress+"/"+hostileStateful+"/"+id, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/vnd.sdktest/Blob")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	if resp := send(0, 0); resp.StatusCode != http.StatusOK {
		t.Fatalf("first message: %s", resp.Status)
	}
	select {
	case <-rogue.arrived:
	case <-time.After(20 * time.Second):
		t.Fatal("the first message of the flooded address was not called")
	}
	// Messages of 4 MiB each, until the partition is full.
	accepted := 0
	var refused *http.Response
	for n := 1; n <= 40; n++ {
		resp := send(n, 4<<20)
		if resp.StatusCode == http.StatusOK {
			accepted++
			continue
		}
		refused = resp
		break
	}
	if refused == nil || refused.StatusCode != http.StatusServiceUnavailable || refused.Header.Get("Retry-After") == "" {
		t.Fatalf("after %d accepted 4 MiB messages the ingress answered %v; want 503 with Retry-After", accepted, refused)
	}
	t.Logf("%d messages of 4 MiB accepted, then 503", accepted)

	// A flood of reads and writes of that partition: the writes refused,
	// not queued; the reads (of addresses with nothing waiting to be
	// durable) answered from the store, without a place in the queue.
	var wg sync.WaitGroup
	var bad atomic.Int64
	var sample atomic.Value
	sem := make(chan struct{}, hostileMaxConns/4) // within the admin listener's cap
	for i := range 200 {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			method, path, body := http.MethodGet, saEntry(id, sdktest.StateInt64), ""
			switch i % 4 {
			case 1:
				path = saEntry(neighbour, sdktest.StateInt64)
			case 2:
				method, path, body = http.MethodPut, saEntry(neighbour, sdktest.StateString), "x"
			}
			r, err := e.api.try(method, path, body, "Content-Type", "text/plain")
			refused := err == nil && r.status == http.StatusServiceUnavailable && r.header.Get("Retry-After") != ""
			answered := err == nil && (r.status == http.StatusOK || r.status == http.StatusNotFound)
			if (method == http.MethodPut && !refused) || (method == http.MethodGet && !answered) {
				bad.Add(1)
				sample.Store(fmt.Sprintf("%s %s: %v %v", method, path, r, err))
			}
		}()
	}
	wg.Wait()
	if n := bad.Load(); n > 0 {
		t.Errorf("%d of 200 requests to the full partition were not answered as they should (writes: 503 with Retry-After; reads: from the store), e.g. %v", n, sample.Load())
	}
	if d := metric(t, e.rt, "statefun_queue_depth"); d > float64(accepted+1) {
		t.Errorf("statefun_queue_depth %v with %d messages accepted; the refused requests must not queue", d, accepted+1)
	}
	// The other partitions keep going meanwhile.
	e.alive(t, 200)
	e.served(t)

	release()
	want := make([]string, accepted+1)
	for n := range want {
		want[n] = fmt.Sprintf("%08d", n)
	}
	eventually(t, 60*time.Second, fmt.Sprintf("all %d accepted messages delivered", len(want)), func() bool {
		rogue.mu.Lock()
		defer rogue.mu.Unlock()
		return len(rogue.args) >= len(want)
	})
	if n := rogue.calls.Load(); n < 3 {
		t.Errorf("%d messages of 4 MiB went out in %d requests; want batches under the 32 MiB payload cap", accepted, n)
	}
	// Once each, in order: the next probe is the barrier for duplicates.
	e.served(t)
	rogue.mu.Lock()
	defer rogue.mu.Unlock()
	if !slices.Equal(rogue.args, want) {
		t.Errorf("delivered %q; want %q", rogue.args, want)
	}
	return hostileAllowed{addrs: []string{hostileStateful + "/" + id}}
}

// hostileHung holds 1,100 calls of sdktest/features in flight (1,100
// addresses, each answered only at the end of the row) on the endpoint
// that also serves sdktest/stateless: more than its pool of 1,024
// connections. The per-type bulkhead keeps part of the pool for the other
// type, which must still be invoked while they hang.
func hostileHung(t *testing.T, e *hostileEnv) hostileAllowed {
	const n = 1100
	gate := make(chan struct{})
	release := sync.OnceFunc(func() { close(gate) })
	defer release()
	var rogues []*hostileRogue
	var addrs []string
	ids := make(chan string, n)
	for i := range n {
		id := fmt.Sprintf("hung-%04d", i)
		r := e.fn.rogue(t, id, &protocol.FromFunction_InvocationResponse{}, false)
		r.gate, r.arrived = gate, make(chan struct{})
		rogues = append(rogues, r)
		addrs = append(addrs, hostileStateful+"/"+id)
		ids <- id
	}
	close(ids)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range ids {
				e.command(t, hostileStateful, id, sdktest.Command{Op: sdktest.OpIncr})
			}
		}()
	}
	wg.Wait()
	arrived := func() int {
		k := 0
		for _, r := range rogues {
			select {
			case <-r.arrived:
				k++
			default:
			}
		}
		return k
	}
	// Every call is either hanging at the function or waiting for its
	// type's limit: the adaptive one (docs/reference/limits.md), which hung calls
	// that never answer keep where it was, at most the type's share of the
	// pool. (Were there no bulkhead, the calls would hold the whole pool of
	// 1,024 connections.)
	eventually(t, 60*time.Second, "1,100 calls hanging or waiting", func() bool {
		k := arrived()
		lim := metric(t, e.rt, `statefun_function_calls_limit{function="sdktest/features"}`)
		return k >= 1024 || lim >= 4 && lim <= 512 && float64(k) >= lim && float64(k)+metric(t, e.rt, `statefun_function_calls_waiting{function="sdktest/features"}`) >= n
	})
	t.Logf("%d calls hang at the function, %v wait for the bulkhead", arrived(), metric(t, e.rt, `statefun_function_calls_waiting{function="sdktest/features"}`))
	// (c) while they hang: the other type is invoked, and the probe of
	// promises (c) runs while they still hang too.
	e.command(t, hostileOther, "while-hung", report("while-hung"))
	e.awaitReport(t, "while-hung", 20*time.Second)
	e.alive(t, 200)
	release()
	eventually(t, 60*time.Second, "every hung call answered", func() bool {
		return metric(t, e.rt, `statefun_function_calls_in_flight{function="sdktest/features"}`) == 0 && metric(t, e.rt, "statefun_queue_depth") == 0
	})
	return hostileAllowed{addrs: append(addrs, hostileOther+"/while-hung"), reports: []string{"while-hung"}}
}

// hostileConn opens a TCP connection to base's host that the test closes.
func hostileConn(t *testing.T, base string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// hostileIdleKeepAlive leaves more keep-alive connections idle on the
// ingress than its cap: a new client is still served (the longest-idle
// connection is closed to make room).
func hostileIdleKeepAlive(t *testing.T, e *hostileEnv) hostileAllowed {
	before := metric(t, e.rt, `statefun_listener_connections_total{outcome="served_after_closing_idle"}`)
	for i := range hostileMaxConns + 16 {
		c := hostileConn(t, e.rt.ingress)
		fmt.Fprintf(c, "GET /sdktest/features/idle-%d HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", i)
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("idle connection %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Fatalf("idle connection %d: %s; want 405", i, resp.Status)
		}
	}
	// (c) below sends through the ingress on new connections.
	e.served(t)
	if after := metric(t, e.rt, `statefun_listener_connections_total{outcome="served_after_closing_idle"}`); after <= before {
		t.Errorf("no connection was served by closing an idle one (%v before, %v after)", before, after)
	}
	return hostileAllowed{}
}

// hostileSilentConns fills the ingress with connections that never send a
// request: beyond its cap (and the overflow room) new connections are
// refused, but the admin listener, the egress and the calls to functions
// (other connections, other file descriptors) keep working; once the
// connections go, the ingress serves again.
func hostileSilentConns(t *testing.T, e *hostileEnv) hostileAllowed {
	// A call held at the function: released while the ingress is full, its
	// answer sends a message to the other type, which reports.
	hold := e.fn.fs.Hold(hostileStateful, "silent")
	defer hold.Release()
	e.command(t, hostileStateful, "silent", sdktest.Command{Op: sdktest.OpSend, To: &sdktest.Target{Fn: hostileOther, ID: "silent"}, Command: &sdktest.Command{Op: sdktest.OpReport, Tag: "silent"}})
	<-hold.Arrived()

	var conns []net.Conn
	for range hostileMaxConns + hostileMaxConns/16 + 8 {
		conns = append(conns, hostileConn(t, e.rt.ingress))
	}
	// The ingress takes no new request: 503 from its overflow room, or
	// the connection closed.
	eventually(t, 20*time.Second, "the ingress refuses a new connection", func() bool {
		c, err := net.Dial("tcp", strings.TrimPrefix(e.rt.ingress, "http://"))
		if err != nil {
			return true
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "PUT /sdktest/features/silent-extra HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/vnd.sdktest/Command\r\nContent-Length: 2\r\n\r\n{}")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return true
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "" {
			return true
		}
		t.Fatalf("a PUT on a full ingress: %s; want 503 with Retry-After or a closed connection", resp.Status)
		return false
	})
	// Everything else goes on: ready, the state API, the function call.
	e.alive(t, 200)
	e.api.withT(t).expect(http.StatusOK, http.MethodGet, saEntry(hostileSentinel, sdktest.StateInt64), "")
	hold.Release()
	e.awaitReport(t, "silent", 20*time.Second)
	for _, c := range conns {
		c.Close()
	}
	return hostileAllowed{addrs: []string{hostileStateful + "/silent", hostileOther + "/silent"}, reports: []string{"silent"}}
}

// hostileExec runs the statefun binary with args in dir (at most 15 s),
// as uid/gid when uid > 0; the binary is copied where that user can run it.
func hostileExec(t *testing.T, dir string, uid int, args ...string) badExit {
	t.Helper()
	bin := binary
	if uid > 0 {
		bin = filepath.Join(dir, "statefun")
		b, err := os.ReadFile(binary)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "STATEFUN_LISTEN_HOST=127.0.0.1")
	if uid > 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	ex := badExit{stderr: out.String(), elapsed: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		ex.code = -1
	case err == nil:
	case errors.As(err, &ee):
		ex.code = ee.ExitCode()
	default:
		t.Fatalf("running statefun: %v", err)
	}
	return ex
}

// hostileTree lists every file under dir with its size and a hash of its
// contents, to show that a refused start wrote nothing.
func hostileTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	tree := map[string]string{}
	err := filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if info.IsDir() {
			tree[path] = "dir"
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		tree[path] = fmt.Sprintf("%x", sha256.Sum256(b))
		return nil
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return tree
}

// hostileFreeBytes is the free space of the filesystem holding dir.
func hostileFreeBytes(t *testing.T, dir string) uint64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return st.Bavail * uint64(st.Bsize)
}

// TestHostileStart: what an operator can get wrong before the runtime
// starts. Each row must stop `statefun run` at once, with a non-zero exit,
// the cause (and the file:line for module.yaml), no Go panic, and nothing
// written to the data directory.
func TestHostileStart(t *testing.T) {
	const ingress = "kind: io.statefun.playground.v1/ingress\nspec:\n  port: %d\n---\n"
	endpoint := func(url, transport string) string {
		return "kind: io.statefun.endpoints.v2/http\nspec:\n  functions: sdktest/*\n  urlPathTemplate: " + url + "\n" + transport
	}
	rows := []struct {
		name string
		// setup writes what the row needs into dir and returns the flags
		// besides --module module.yaml --data-dir data.
		setup func(t *testing.T, dir string) []string
		// module is module.yaml, a format with the ingress port.
		module string
		uid    int // run as this user (root only)
		want   []string
	}{
		{
			name:   "module.yaml http+unix URL with a host",
			module: ingress + endpoint("http+unix://run/functions.sock/statefun", ""),
			want:   []string{"module.yaml:8:20:", "spec.urlPathTemplate", "write three slashes, such as http+unix:///run/functions.sock/statefun"},
		},
		{
			name:   "module.yaml misspelled key",
			module: ingress + "kind: io.statefun.endpoints.v2/http\nspec:\n  functions: sdktest/*\n  urlPathTemplate: http://localhost/statefun\n  transport:\n    tpye: io.statefun.transports.v1/async\n",
			want:   []string{"module.yaml:10:5:", `unknown field "tpye"; did you mean "type"?`},
		},
		{
			name:   "module.yaml empty",
			module: "# nothing here\n---\n~\n",
			want:   []string{"module.yaml: the module is empty"},
		},
		{
			name:   "module.yaml trust_cacerts names a missing file",
			module: ingress + endpoint("https://localhost/statefun", "  transport:\n    trust_cacerts: file:/nonexistent/ca.pem\n"),
			want:   []string{"module.yaml:10:20:", "spec.transport.trust_cacerts", "file:/nonexistent/ca.pem", "no such file or directory"},
		},
		{
			name:   "token file writable by its group",
			module: ingress,
			setup: func(t *testing.T, dir string) []string {
				hostileWrite(t, filepath.Join(dir, "tokens"), "ops 0123456789abcdefXYZ read,write\n", 0o664)
				return []string{"--api-tokens", "tokens"}
			},
			want: []string{"token file tokens is writable by its group or by others (mode 0664)", "chmod 600 tokens"},
		},
		{
			name:   "token file with a duplicate secret",
			module: ingress,
			setup: func(t *testing.T, dir string) []string {
				hostileWrite(t, filepath.Join(dir, "tokens"), "ops 0123456789abcdefXYZ read,write\n# reader\nreader 0123456789abcdefXYZ read\n", 0o600)
				return []string{"--api-tokens", "tokens"}
			},
			want: []string{"tokens:3: token reader has the same secret as the token on line 1"},
		},
		{
			name:   "data dir below a regular file",
			module: ingress,
			setup: func(t *testing.T, dir string) []string {
				hostileWrite(t, filepath.Join(dir, "afile"), "not a directory", 0o644)
				return []string{"--data-dir", "afile/data"}
			},
			want: []string{"store: data directory afile/data", "not a directory"},
		},
		{
			name:   "data dir not writable",
			module: ingress,
			uid:    65534,
			setup: func(t *testing.T, dir string) []string {
				if os.Getuid() != 0 {
					t.Skip("needs root to run statefun as another user")
				}
				// A store made by root, run as nobody: every parent of
				// dir must let nobody in.
				for p := dir; p != "/"; p = filepath.Dir(p) {
					if strings.HasPrefix(p, os.TempDir()+"/") {
						if err := os.Chmod(p, 0o755); err != nil {
							t.Fatal(err)
						}
					}
				}
				hostileExecStore(t, dir)
				return nil
			},
			want: []string{"store: data directory data is not writable", "permission denied"},
		},
		{
			name:   "disk reserve over twice the free space",
			module: ingress,
			setup: func(t *testing.T, dir string) []string {
				free := hostileFreeBytes(t, dir)
				return []string{"--disk-reserve", strconv.FormatUint(free*4, 10)}
			},
			want: []string{"diskguard: free disk space is low", "free some space or lower the reserve"},
		},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			if row.module != "" {
				mod := row.module
				if strings.Contains(mod, "%d") {
					mod = fmt.Sprintf(mod, freePort(t))
				}
				hostileWrite(t, filepath.Join(dir, "module.yaml"), mod, 0o644)
			}
			args := []string{"run", "--module", "module.yaml", "--data-dir", "data", "--admin-addr", "127.0.0.1:0"}
			if row.setup != nil {
				args = append(args, row.setup(t, dir)...)
			}
			before := hostileTree(t, filepath.Join(dir, "data"))
			ex := hostileExec(t, dir, row.uid, args...)
			checkBadExit(t, ex, 1, row.want...)
			if after := hostileTree(t, filepath.Join(dir, "data")); !maps.Equal(before, after) {
				t.Errorf("the refused start changed the data directory:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
}

// hostileWrite writes a file with a mode (chmod, whatever the umask).
func hostileWrite(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// hostileExecStore makes a store in dir/data with one run of the binary
// (module.yaml must be there), stopped cleanly; the store is owned by the
// test's user.
func hostileExecStore(t *testing.T, dir string) {
	t.Helper()
	r := &runtime{t: t, dir: dir, module: filepath.Join(dir, "module.yaml"), admin: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	r.cmd = exec.Command(binary, "run", "--module", r.module, "--data-dir", filepath.Join(dir, "data"), "--admin-addr", r.admin)
	r.cmd.Env = append(os.Environ(), "STATEFUN_LISTEN_HOST=127.0.0.1")
	r.cmd.Stdout, r.cmd.Stderr = r, r
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.exited = make(chan struct{})
	go func() { r.cmd.Wait(); close(r.exited) }()
	eventually(t, 30*time.Second, "the store's first run is ready", func() bool {
		resp, err := http.Get("http://" + r.admin + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	if err := r.stop(); err != nil {
		t.Fatalf("first run: %v\n%s", err, r.logs())
	}
}

// hostileLaunch starts r with extra flags and waits until it logs that it
// runs and /healthz answers (not for /readyz: a row may be about
// readiness).
func hostileLaunch(r *runtime, extra ...string) {
	r.t.Helper()
	args := append([]string{"run", "--module", r.module, "--data-dir", filepath.Join(r.dir, "data"),
		"--admin-addr", r.admin, "--partitions", strconv.Itoa(partitions)}, extra...)
	r.cmd = exec.Command(binary, args...)
	r.cmd.Env = append(os.Environ(), "STATEFUN_LISTEN_HOST=127.0.0.1")
	r.cmd.Stdout, r.cmd.Stderr = r, r
	if err := r.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.exited = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { c.Wait(); close(done) }(r.cmd, r.exited)
	eventually(r.t, 30*time.Second, "statefun running", func() bool {
		select {
		case <-r.exited:
			r.t.Fatalf("statefun exited during start:\n%s", r.logs())
		default:
		}
		if !strings.Contains(badFullLog(r), `msg="statefun running"`) {
			return false
		}
		resp, err := http.Get("http://" + r.admin + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// TestHostileOwnProcess: rows that need a runtime of their own.
func TestHostileOwnProcess(t *testing.T) {
	t.Run("trust_cacerts in file: form", func(t *testing.T) {
		t.Parallel()
		// An https function whose certificate only the file's CA vouches
		// for: it is called, so the file was read and used.
		srv := httptest.NewTLSServer(sdktest.FeatureHandler())
		t.Cleanup(srv.Close)
		dir := t.TempDir()
		ca := filepath.Join(dir, "ca.pem")
		hostileWrite(t, ca, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})), 0o644)
		rt := newRuntimeWith(t, func(in, out int) string {
			return fmt.Sprintf("kind: io.statefun.endpoints.v2/http\nspec:\n  functions: sdktest/*\n  urlPathTemplate: %s/statefun\n  transport:\n    trust_cacerts: file:%s\n---\n", srv.URL, ca) +
				fmt.Sprintf("kind: io.statefun.playground.v1/ingress\nspec:\n  port: %d\n---\n", in) +
				fmt.Sprintf("kind: io.statefun.playground.v1/egress\nspec:\n  port: %d\n  topics: [%s, %s]\n", out, sdktest.DefaultTopic, hostileLeakTopic)
		})
		rt.start()
		e := &hostileEnv{t: t, rt: rt, seen: map[string][]string{}}
		e.command(t, hostileOther, "tls", report("over-tls"))
		e.awaitReport(t, "over-tls", 20*time.Second)
		e.alive(t, 200)
	})

	t.Run("disk below the reserve", func(t *testing.T) {
		t.Parallel()
		fn := sdktest.StartFeatureServer(t)
		rt := newRuntimeWith(t, hostileModule(fn.URL))
		// Between half the reserve and the whole of it: the runtime
		// starts, but takes no new work. The margins (a quarter of the
		// free space each way) absorb other writers on the machine.
		free := hostileFreeBytes(t, rt.dir)
		hostileLaunch(rt, "--disk-reserve", strconv.FormatUint(free/2*3, 10))
		e := &hostileEnv{t: t, rt: rt, api: saAPIOf(t, "http://"+rt.admin, saClient), seen: map[string][]string{}}
		// (a) alive, and not ready, saying why.
		e.alive(t, http.StatusServiceUnavailable)
		resp, err := http.Get("http://" + rt.admin + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), "free") {
			t.Errorf("/readyz: %s; want the free space named", body)
		}
		// New work is refused with 503 and Retry-After at every edge.
		req, _ := http.NewRequest(http.MethodPut, rt.ingress+"/"+hostileOther+"/x", strings.NewReader(`{"op":"report","tag":"leaked"}`))
		req.Header.Set("Content-Type", "application/vnd."+sdktest.CommandType)
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "free") {
			t.Errorf("ingress: %s Retry-After %q %s; want 503 with Retry-After naming the free space", resp.Status, resp.Header.Get("Retry-After"), body)
		}
		for _, ack := range []string{"accepted", "applied", "committed"} {
			r := e.api.do(http.MethodPut, saEntry("x", sdktest.StateInt64)+"?ack="+ack, "7", "Content-Type", "text/plain", "Statefun-Type", saLong)
			if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
				t.Errorf("state API PUT ack=%s: %s; want 503 with Retry-After", ack, r)
			}
		}
		// (c) what needs no disk goes on: reads and listings.
		e.api.expect(http.StatusNotFound, http.MethodGet, saEntry("x", sdktest.StateInt64), "")
		e.api.expect(http.StatusOK, http.MethodGet, "/state", "")
		if _, ok, err := rt.pop(sdktest.DefaultTopic); err != nil || ok {
			t.Errorf("egress pop: %v %v; want an empty topic", ok, err)
		}
		// (b) nothing was written: with the reserve off, nothing arrives.
		if err := rt.stop(); err != nil {
			t.Fatalf("SIGTERM: %v\n%s", err, rt.logs())
		}
		hostileLaunch(rt, "--disk-reserve", "off")
		e.alive(t, 200)
		e.command(t, hostileOther, "after", report("after"))
		e.awaitReport(t, "after", 20*time.Second)
		e.pollEgress(t)
		if got := e.seen[sdktest.DefaultTopic]; len(got) != 1 {
			t.Errorf("after the restart the egress holds %q; want only the report sent after it", got)
		}
		if n := len(fn.InvocationCounts()); n != 1 {
			t.Errorf("invocations %v; want only the one sent after the restart", fn.InvocationCounts())
		}
		e.api.expect(http.StatusNotFound, http.MethodGet, saEntry("x", sdktest.StateInt64), "")
	})
}
