package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"maps"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
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

// These tests drive the state access API (docs/reference/state-api.md) of the real
// binary over real HTTP, next to sdktest/features (official Go SDK) running
// behind sdktest's observing FeatureServer. They check what an operator
// relies on: the ordering promise against an invocation in flight, each ack
// mode's guarantee across SIGKILL, conditional writes under contention,
// revert and audit, tokens and TLS, listings, and repair of an address that
// is stuck in retries.
//
// Every helper here is prefixed "sa" so it cannot collide with the helpers
// of the other e2e files.

// saTopic is the egress topic the feature function reports to.
const saTopic = sdktest.DefaultTopic

// saLong and saString are the typenames of the states the tests write.
const (
	saLong   = "io.statefun.types/long"
	saString = "io.statefun.types/string"
)

// saEndpoint binds a function pattern ("ns/*" or "ns/name") to a URL.
type saEndpoint struct{ functions, url string }

// saModule returns a module.yaml writer for newRuntimeWith: one http
// endpoint per saEndpoint, the playground ingress, and the playground
// egress with the topics of sdktest/features and sdktest/counter.
func saModule(eps ...saEndpoint) func(ingressPort, egressPort int) string {
	return func(ingressPort, egressPort int) string {
		var b strings.Builder
		for _, ep := range eps {
			fmt.Fprintf(&b, "kind: io.statefun.endpoints.v2/http\nspec:\n  functions: %s\n  urlPathTemplate: %s\n  transport:\n    type: io.statefun.transports.v1/async\n    call: 5s\n---\n", ep.functions, ep.url)
		}
		fmt.Fprintf(&b, "kind: io.statefun.playground.v1/ingress\nspec:\n  port: %d\n---\n", ingressPort)
		fmt.Fprintf(&b, "kind: io.statefun.playground.v1/egress\nspec:\n  port: %d\n  topics: [%s, %s]\n", egressPort, saTopic, sdktest.CounterTopic)
		return b.String()
	}
}

// saFeatures starts a FeatureServer and a runtime serving sdktest/* from it
// with the fixed flags of runtime.start, and returns the API client.
func saFeatures(t *testing.T, e engine) (*sdktest.FeatureServer, *runtime, *saAPI) {
	t.Helper()
	fs := sdktest.StartFeatureServer(t)
	rt := newRuntimeOn(t, e, saModule(saEndpoint{"sdktest/*", fs.URL}))
	rt.routeEgress(fs)
	rt.start()
	return fs, rt, saAPIOf(t, "http://"+rt.admin, saClient)
}

// saClient calls the admin listener hard (concurrent writers), so it keeps
// many idle connections to that one host.
var saClient = &http.Client{
	Timeout:   30 * time.Second,
	Transport: &http.Transport{MaxIdleConnsPerHost: 64},
}

// saStart starts r's process with extra flags appended (a repeated flag
// overrides the fixed one, e.g. --admin-addr), probing readiness with
// client at scheme://r.admin. The process is stopped by the runtime's own
// cleanup (kill).
func saStart(r *runtime, scheme string, client *http.Client, extra ...string) {
	r.t.Helper()
	argv := append(slices.Clone(r.wrap), binary)
	argv = append(argv, r.runArgs(extra...)...)
	r.cmd = exec.Command(argv[0], argv[1:]...)
	r.cmd.Env = append(os.Environ(), "STATEFUN_LISTEN_HOST=127.0.0.1")
	r.cmd.Stdout, r.cmd.Stderr = r, r
	if err := r.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.exited = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { c.Wait(); close(done) }(r.cmd, r.exited)
	deadline := time.Now().Add(r.readyWithin())
	for time.Now().Before(deadline) {
		resp, err := client.Get(scheme + "://" + r.admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-r.exited:
			r.t.Fatalf("statefun exited during start:\n%s", r.logs())
		case <-time.After(20 * time.Millisecond):
		}
	}
	r.t.Fatalf("statefun not ready at %s://%s after %v:\n%s", scheme, r.admin, r.readyWithin(), r.logs())
}

// saRefused runs `statefun run args...`, which must exit with a failure
// within 20 s, and returns what it printed.
func saRefused(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, append([]string{"run"}, args...)...)
	cmd.Env = append(os.Environ(), "STATEFUN_LISTEN_HOST=127.0.0.1")
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("statefun run %q did not exit within 20s; output:\n%s", args, out)
	}
	if err == nil {
		t.Fatalf("statefun run %q exited 0, want a refusal; output:\n%s", args, out)
	}
	return string(out)
}

// saCommand sends c to sdktest/features/<id> through the ingress, which
// must acknowledge it (200: durable).
func saCommand(t testing.TB, rt *runtime, id string, c sdktest.Command) {
	t.Helper()
	body, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	status, err := rt.send("/"+sdktest.FeaturesFn+"/"+id, sdktest.CommandType, string(body))
	if err != nil || status != http.StatusOK {
		t.Fatalf("ingress PUT /%s/%s %s: status %d, %v", sdktest.FeaturesFn, id, body, status, err)
	}
}

func saReport(tag string) sdktest.Command { return sdktest.Command{Op: sdktest.OpReport, Tag: tag} }

func saIncr() sdktest.Command { return sdktest.Command{Op: sdktest.OpIncr} }

func saSeq(cs ...sdktest.Command) sdktest.Command {
	return sdktest.Command{Op: sdktest.OpSeq, Commands: cs}
}

// saAwaitReport pops the report topic until a report tagged tag arrives
// and returns it; reports with other tags are dropped. It fails t after
// timeout.
func saAwaitReport(t testing.TB, rt *runtime, tag string, timeout time.Duration) sdktest.Report {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var other []string
	for time.Now().Before(deadline) {
		p, ok, err := rt.pop(saTopic)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		var rep sdktest.Report
		if err := json.Unmarshal([]byte(p), &rep); err != nil {
			t.Fatalf("egress %s: record %q is not a report: %v", saTopic, p, err)
		}
		if rep.Tag == tag {
			return rep
		}
		other = append(other, p)
	}
	t.Fatalf("no report tagged %q within %v; other records: %q", tag, timeout, other)
	return sdktest.Report{}
}

// saWarm makes sdktest/features register its states (the first contact is
// an IncompleteInvocationContext round trip), so that later requests are
// the invocations themselves and PUTs find the registered typenames.
//
// On a cluster node a report is visible in Kafka when its transaction
// commits, a moment before the node applied the commit and published the
// states it learned; the report of a message sent after the first was
// seen (to another address, so that id's invocations stay one) comes from
// a later transaction, which the node begins only after that.
func saWarm(t testing.TB, rt *runtime, id string) {
	t.Helper()
	saCommand(t, rt, id, saReport("warm-"+id))
	saAwaitReport(t, rt, "warm-"+id, 20*time.Second)
	if rt.cluster != nil {
		saCommand(t, rt, "warm-applied-"+id, saReport("warm-applied-"+id))
		saAwaitReport(t, rt, "warm-applied-"+id, 20*time.Second)
	}
}

// saEntry is the API path of one state of sdktest/features/<id>.
func saEntry(id, state string) string {
	return "/state/sdktest/features/" + url.PathEscape(id) + "/" + url.PathEscape(state)
}

// saAPI calls the state API of one runtime.
type saAPI struct {
	t      testing.TB
	base   string // scheme://host:port
	client *http.Client
	token  string // bearer token, "" for none
}

func saAPIOf(t testing.TB, base string, client *http.Client) *saAPI {
	return &saAPI{t: t, base: base, client: client}
}

// as returns a client of the same API that sends token.
func (a *saAPI) as(token string) *saAPI {
	b := *a
	b.token = token
	return &b
}

// withT returns the same API client reporting to t (for subtests).
func (a *saAPI) withT(t testing.TB) *saAPI {
	b := *a
	b.t = t
	return &b
}

// saResp is one answer of the API.
type saResp struct {
	status int
	header http.Header
	body   []byte
	tls    bool
}

func (r saResp) String() string {
	return fmt.Sprintf("%d %s", r.status, strings.TrimSpace(string(r.body)))
}

// etag is the version in the ETag header, "" when there is none.
func (r saResp) etag() string { return strings.Trim(r.header.Get("ETag"), `"`) }

// try sends a request; hdr holds header name, value pairs. It is safe to
// call from any goroutine.
func (a *saAPI) try(method, path, body string, hdr ...string) (saResp, error) {
	var rd io.Reader
	if body != "" || method == http.MethodPut {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, a.base+path, rd)
	if err != nil {
		return saResp{}, err
	}
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return saResp{}, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return saResp{}, fmt.Errorf("%s %s: reading the body: %w", method, path, err)
	}
	return saResp{status: resp.StatusCode, header: resp.Header, body: b, tls: resp.TLS != nil}, nil
}

// do is try that fails t on a transport error.
func (a *saAPI) do(method, path, body string, hdr ...string) saResp {
	a.t.Helper()
	r, err := a.try(method, path, body, hdr...)
	if err != nil {
		a.t.Fatal(err)
	}
	return r
}

// expect is do that fails t unless the status is want.
func (a *saAPI) expect(want int, method, path, body string, hdr ...string) saResp {
	a.t.Helper()
	r := a.do(method, path, body, hdr...)
	if r.status != want {
		a.t.Fatalf("%s %s: %s, want status %d", method, path, r, want)
	}
	return r
}

// putText PUTs a text/plain value (parsed into the registered type).
func (a *saAPI) putText(path, text string, hdr ...string) saResp {
	a.t.Helper()
	return a.do(http.MethodPut, path, text, append([]string{"Content-Type", "text/plain; charset=utf-8"}, hdr...)...)
}

// getText reads an entry as text and fails t unless it has a value.
func (a *saAPI) getText(path string) (string, string) {
	a.t.Helper()
	r := a.expect(http.StatusOK, http.MethodGet, path, "", "Accept", "text/plain")
	return string(r.body), r.etag()
}

// getBytes reads an entry's exact stored bytes.
func (a *saAPI) getBytes(path string) []byte {
	a.t.Helper()
	return a.expect(http.StatusOK, http.MethodGet, path, "", "Accept", "application/octet-stream").body
}

// saReceipt is the receipt of docs/reference/state-api.md ("Failure guarantees").
type saReceipt struct {
	Mutation        string  `json:"mutation"`
	Status          string  `json:"status"`
	Checkpoint      *uint64 `json:"checkpoint"`
	Version         *string `json:"version"`
	PreviousVersion *string `json:"previousVersion"`
	Reason          string  `json:"reason"`
}

// saProblem is an RFC 9457 problem with the API's extensions.
type saProblem struct {
	Status         int        `json:"status"`
	Detail         string     `json:"detail"`
	CurrentVersion *string    `json:"currentVersion"`
	Receipt        *saReceipt `json:"receipt"`
}

func saDecode[T any](t testing.TB, r saResp) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("decoding %T from %s: %v", v, r, err)
	}
	return v
}

func saStr(p *string) string {
	if p == nil {
		return "<null>"
	}
	return *p
}

// saReceiptOf decodes a 200 mutation answer and checks that its status is want.
func saReceiptOf(t testing.TB, r saResp, want string) saReceipt {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("mutation answered %s, want 200", r)
	}
	rc := saDecode[saReceipt](t, r)
	if rc.Status != want || rc.Mutation == "" {
		t.Fatalf("receipt %s: status %q, want %q with a mutation id", r.body, rc.Status, want)
	}
	return rc
}

// TestStateAPIOrdering checks the central promise (docs/reference/state-api.md, "Ordering") with
// ack=applied and ack=committed: while an invocation of an address is held
// in flight, a read answers at once with the last applied value (not the
// flight's half), a PUT waits until the flight's result is applied, and a
// message sent after the PUT is applied after it and sees its value.
//
// The flight adds 1 to i64 (no value → 1), the PUT sets 100, the later
// message adds 1 and reports: 101 proves the order. A PUT applied before
// the flight's result would be lost (2); one applied after the later
// message would lose that message's write (100, with a report of 2).
func TestStateAPIOrdering(t *testing.T) {
	t.Parallel()
	onEngines(t, func(t *testing.T, e engine) {
		fs, rt, api := saFeatures(t, e)
		for _, ack := range []string{"applied", "committed"} {
			t.Run(ack, func(t *testing.T) {
				id := "order-" + ack
				api := api.withT(t)
				saWarm(t, rt, id)
				path := saEntry(id, sdktest.StateInt64)

				hold := fs.Hold(sdktest.FeaturesFn, id)
				defer hold.Release()
				saCommand(t, rt, id, saIncr())
				select {
				case <-hold.Arrived():
				case <-time.After(20 * time.Second):
					t.Fatal("the invocation never reached the function")
				}

				// A read does not wait behind the flight, and does not see it.
				start := time.Now()
				if r := api.do(http.MethodGet, path, "", "Accept", "text/plain"); r.status != http.StatusNotFound {
					t.Errorf("GET during the flight: %s, want 404 (the flight's write is not applied yet)", r)
				}
				if d := time.Since(start); d > 2*time.Second {
					t.Errorf("GET during the flight took %v: a read must not wait for a function", d)
				}

				type result struct {
					r   saResp
					err error
				}
				put := make(chan result, 1)
				go func() {
					r, err := api.try(http.MethodPut, path+"?ack="+ack, "100",
						"Content-Type", "text/plain", "Statefun-Reason", "ordering test")
					put <- result{r, err}
				}()
				// The PUT reaches the partition within milliseconds; give it
				// ample time, so that the next message certainly comes after it.
				select {
				case res := <-put:
					t.Fatalf("PUT ?ack=%s returned while the invocation was in flight: %v %v", ack, res.r, res.err)
				case <-time.After(300 * time.Millisecond):
				}
				saCommand(t, rt, id, saSeq(saIncr(), saReport("after-"+id)))
				select {
				case res := <-put:
					t.Fatalf("PUT ?ack=%s returned while the invocation was in flight: %v %v", ack, res.r, res.err)
				case <-time.After(200 * time.Millisecond):
				}

				hold.Release()
				var res result
				select {
				case res = <-put:
				case <-time.After(20 * time.Second):
					t.Fatalf("PUT ?ack=%s did not return within 20s of the flight's end", ack)
				}
				if res.err != nil {
					t.Fatal(res.err)
				}
				rc := saReceiptOf(t, res.r, ack)
				if rc.PreviousVersion == nil {
					t.Errorf("receipt %s: previousVersion null, want the version the flight wrote (its result must be applied first)", res.r.body)
				}
				if rc.Version == nil || res.r.etag() != *rc.Version {
					t.Errorf("receipt %s with ETag %q: want a version equal to the ETag", res.r.body, res.r.etag())
				}

				rep := saAwaitReport(t, rt, "after-"+id, 20*time.Second)
				if got := rep.States.Int64; got == nil || *got != 101 {
					t.Errorf("the message sent after the PUT read and incremented i64 to %v, want 101 (flight 1, PUT 100, +1)", saI64(got))
				}
				r := api.expect(http.StatusOK, http.MethodGet, path, "", "Accept", "text/plain")
				if string(r.body) != "101" || r.header.Get("Statefun-Type") != saLong {
					t.Errorf("GET i64 = %q (Statefun-Type %q), want 101 (%s)", r.body, r.header.Get("Statefun-Type"), saLong)
				}
				if n := fs.Invocations(sdktest.FeaturesFn, id); n != 3 {
					t.Errorf("the function ran %d invocations of %s, want 3 (warm, flight, later message)", n, id)
				}
			})
		}
	})
}

func saI64(p *int64) string {
	if p == nil {
		return "<no value>"
	}
	return strconv.FormatInt(*p, 10)
}

// TestStateAPICommittedSurvivesKill checks ack=committed (the default):
// once the PUT answers 200 "committed", a SIGKILL right after it loses
// nothing. Each round writes two entries in different partitions, kills the
// runtime at once, restarts it and reads them back with the version the
// receipt gave, and the stored receipt.
func TestStateAPICommittedSurvivesKill(t *testing.T) {
	t.Parallel()
	onEngines(t, func(t *testing.T, e engine) {
		_, rt, api := saFeatures(t, e)
		saWarm(t, rt, "durable")
		type write struct {
			path, value string
			rc          saReceipt
		}
		for round := range 4 {
			writes := []write{
				{path: saEntry("durable-a", sdktest.StateString), value: fmt.Sprintf("round %d at %s ✓", round, time.Now().Format(time.RFC3339Nano))},
				{path: saEntry("durable-b", sdktest.StateInt64), value: strconv.Itoa(1000*round + 7)},
			}
			for i := range writes {
				w := &writes[i]
				w.rc = saReceiptOf(t, api.putText(w.path, w.value), "committed")
				if w.rc.Checkpoint == nil || w.rc.Version == nil {
					t.Fatalf("round %d: receipt %+v: want a checkpoint and a version", round, w.rc)
				}
			}
			rt.kill()
			rt.start()
			for _, w := range writes {
				v, etag := api.getText(w.path)
				if v != w.value {
					t.Errorf("round %d: after SIGKILL, GET %s = %q, want the committed %q", round, w.path, v, w.value)
				}
				if etag != *w.rc.Version {
					t.Errorf("round %d: after SIGKILL, %s has version %s, want the receipt's %s", round, w.path, etag, *w.rc.Version)
				}
				stored := saDecode[saReceipt](t, api.expect(http.StatusOK, http.MethodGet, "/mutations/"+w.rc.Mutation, ""))
				if stored.Status != "committed" || saStr(stored.Version) != *w.rc.Version {
					t.Errorf("round %d: stored receipt %+v, want committed with version %s", round, stored, *w.rc.Version)
				}
			}
		}
	})
}

// TestStateAPIAccepted checks ack=accepted: 202 with Location and an
// accepted receipt that moves to committed; a stale If-Match found at apply
// time ends "rejected" with the reason and the current version; and an
// accepted mutation queued behind an invocation in flight survives a
// SIGKILL right after the 202 and is applied, in order, after the restart.
func TestStateAPIAccepted(t *testing.T) {
	t.Parallel()
	onEngines(t, func(t *testing.T, e engine) {
		fs, rt, api := saFeatures(t, e)
		saWarm(t, rt, "accepted")
		path := saEntry("accepted", sdktest.StateString)

		accept := func(t *testing.T, r saResp) saReceipt {
			t.Helper()
			if r.status != http.StatusAccepted {
				t.Fatalf("PUT ?ack=accepted: %s, want 202", r)
			}
			rc := saDecode[saReceipt](t, r)
			if rc.Status != "accepted" || rc.Mutation == "" {
				t.Fatalf("202 receipt %s: want status accepted and a mutation id", r.body)
			}
			if loc := r.header.Get("Location"); loc != "/mutations/"+rc.Mutation {
				t.Fatalf("Location %q, want /mutations/%s", loc, rc.Mutation)
			}
			return rc
		}
		final := func(t *testing.T, api *saAPI, id string) saReceipt {
			t.Helper()
			return saDecode[saReceipt](t, api.expect(http.StatusOK, http.MethodGet, "/mutations/"+id+"?wait=5s", ""))
		}

		t.Run("committed", func(t *testing.T) {
			api := api.withT(t)
			rc := accept(t, api.putText(path+"?ack=accepted", "queued value"))
			got := final(t, api, rc.Mutation)
			if got.Status != "committed" || got.Version == nil || got.Checkpoint == nil {
				t.Fatalf("receipt after ?wait=5s: %+v, want committed with a version and a checkpoint", got)
			}
			if v, etag := api.getText(path); v != "queued value" || etag != *got.Version {
				t.Errorf("GET = %q version %s, want %q version %s", v, etag, "queued value", *got.Version)
			}
			// Prefer: respond-async is the same as ?ack=accepted.
			rc = accept(t, api.putText(path, "async value", "Prefer", "respond-async"))
			if got := final(t, api, rc.Mutation); got.Status != "committed" {
				t.Fatalf("Prefer: respond-async receipt %+v, want committed", got)
			}
			if v, _ := api.getText(path); v != "async value" {
				t.Errorf("GET = %q, want %q", v, "async value")
			}
		})

		t.Run("unknown", func(t *testing.T) {
			// Without ?wait= a receipt is read once: an unknown id is a 404 at
			// once, not a wait for it to appear.
			quick := saAPIOf(t, api.base, &http.Client{Timeout: 5 * time.Second})
			start := time.Now()
			if r, err := quick.try(http.MethodGet, "/mutations/no-such-mutation", ""); err != nil || r.status != http.StatusNotFound {
				t.Errorf("GET /mutations/no-such-mutation: %v %v, want 404 at once", r, err)
			}
			if r, err := quick.try(http.MethodGet, "/mutations/no-such-mutation?wait=200ms", ""); err != nil || r.status != http.StatusNotFound {
				t.Errorf("GET /mutations/no-such-mutation?wait=200ms: %v %v, want 404", r, err)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("two receipt reads of an unknown id took %v", d)
			}
		})

		t.Run("stale-if-match", func(t *testing.T) {
			api := api.withT(t)
			_, stale := api.getText(path)
			fresh := saReceiptOf(t, api.putText(path, "newer"), "committed")
			rc := accept(t, api.putText(path+"?ack=accepted", "from a stale read", "If-Match", `"`+stale+`"`))
			got := final(t, api, rc.Mutation)
			if got.Status != "rejected" {
				t.Fatalf("receipt %+v, want rejected: If-Match %s is stale", got, stale)
			}
			if !strings.Contains(got.Reason, "If-Match") {
				t.Errorf("rejected receipt reason %q, want one that names If-Match", got.Reason)
			}
			if saStr(got.Version) != *fresh.Version {
				t.Errorf("rejected receipt version %s, want the current version %s", saStr(got.Version), *fresh.Version)
			}
			if v, _ := api.getText(path); v != "newer" {
				t.Errorf("GET = %q after a rejected mutation, want %q", v, "newer")
			}
		})

		t.Run("survives-kill", func(t *testing.T) {
			api := api.withT(t)
			const id = "accepted-kill"
			saWarm(t, rt, id)
			p := saEntry(id, sdktest.StateString)
			// Keep an invocation in flight, so the accepted mutation certainly
			// sits in the inbox, unapplied, when the runtime dies.
			hold := fs.Hold(sdktest.FeaturesFn, id)
			defer hold.Release()
			fromFn := "from the function"
			saCommand(t, rt, id, sdktest.Command{Op: sdktest.OpSet, Values: &sdktest.States{String: &fromFn}})
			select {
			case <-hold.Arrived():
			case <-time.After(20 * time.Second):
				t.Fatal("the invocation never reached the function")
			}
			rc := accept(t, api.putText(p+"?ack=accepted", "from the operator", "Statefun-Reason", "durable in the inbox"))
			// Without ?wait= the receipt is answered at once, as it stands.
			quick := saAPIOf(t, api.base, &http.Client{Timeout: 3 * time.Second})
			if r, err := quick.try(http.MethodGet, "/mutations/"+rc.Mutation, ""); err != nil || r.status != http.StatusOK {
				t.Errorf("GET /mutations/%s while queued behind the flight: %v %v, want 200 at once", rc.Mutation, r, err)
			} else if got := saDecode[saReceipt](t, r); got.Status != "accepted" {
				t.Errorf("receipt while queued behind the flight: %+v, want accepted", got)
			}
			rt.kill()
			hold.Release()
			rt.start()
			got := saDecode[saReceipt](t, api.expect(http.StatusOK, http.MethodGet, "/mutations/"+rc.Mutation+"?wait=10s", ""))
			if got.Status != "committed" {
				t.Fatalf("after SIGKILL and restart, receipt %+v, want committed", got)
			}
			// The message came first in the mailbox, so its write is overwritten.
			if v, _ := api.getText(p); v != "from the operator" {
				t.Errorf("after restart GET = %q, want %q (the message, then the mutation)", v, "from the operator")
			}
			saCommand(t, rt, id, saReport("after-kill"))
			if rep := saAwaitReport(t, rt, "after-kill", 20*time.Second); rep.States.String == nil || *rep.States.String != "from the operator" {
				t.Errorf("the next invocation read str = %v, want %q", rep.States.String, "from the operator")
			}
		})
	})
}

// TestStateAPIConcurrentIfMatch runs 16 writers against one entry for
// several rounds: each reads the ETag, all PUT with If-Match of that one
// version at the same time (half with ack=applied, half committed).
// Exactly one wins per round; the others get 412 with the winner's version;
// the entry holds the winner's value.
func TestStateAPIConcurrentIfMatch(t *testing.T) {
	t.Parallel()
	onEngines(t, func(t *testing.T, e engine) {
		_, rt, api := saFeatures(t, e)
		saWarm(t, rt, "contended")
		path := saEntry("contended", sdktest.StateInt64)
		saReceiptOf(t, api.putText(path, "0", "If-None-Match", "*"), "committed")
		api.expect(http.StatusPreconditionFailed, http.MethodPut, path, "1", "Content-Type", "text/plain", "If-None-Match", "*")

		const writers, rounds = 16, 6
		for round := range rounds {
			type outcome struct {
				read string
				r    saResp
				err  error
			}
			var out [writers]outcome
			var reads, writes sync.WaitGroup
			go1 := make(chan struct{})
			for g := range writers {
				reads.Add(1)
				writes.Add(1)
				go func() {
					defer writes.Done()
					r, err := api.try(http.MethodGet, path, "", "Accept", "text/plain")
					out[g].read = r.etag()
					reads.Done()
					if err != nil || r.status != http.StatusOK {
						out[g].err = fmt.Errorf("GET: %v %v", r, err)
						return
					}
					<-go1
					ack := "committed"
					if g%2 == 1 {
						ack = "applied"
					}
					out[g].r, out[g].err = api.try(http.MethodPut, path+"?ack="+ack, strconv.Itoa(round*100+g),
						"Content-Type", "text/plain", "If-Match", `"`+out[g].read+`"`)
				}()
			}
			reads.Wait()
			close(go1)
			writes.Wait()

			winner, won, lost := -1, 0, 0
			var winVersion string
			for g, o := range out {
				if o.err != nil {
					t.Fatalf("round %d writer %d: %v", round, g, o.err)
				}
				if o.read != out[0].read {
					t.Fatalf("round %d: writers read versions %s and %s with no write in between", round, out[0].read, o.read)
				}
				switch o.r.status {
				case http.StatusOK:
					won++
					winner = g
					winVersion = o.r.etag()
					if rc := saDecode[saReceipt](t, o.r); saStr(rc.PreviousVersion) != o.read {
						t.Errorf("round %d: winner's receipt %s: previousVersion, want %s", round, o.r.body, o.read)
					}
				case http.StatusPreconditionFailed:
					lost++
				default:
					t.Errorf("round %d writer %d: %s, want 200 or 412", round, g, o.r)
				}
			}
			if won != 1 || lost != writers-1 {
				t.Fatalf("round %d: %d writers won and %d got 412, want exactly 1 and %d", round, won, lost, writers-1)
			}
			for g, o := range out {
				if o.r.status != http.StatusPreconditionFailed {
					continue
				}
				if p := saDecode[saProblem](t, o.r); saStr(p.CurrentVersion) != winVersion || o.r.etag() != winVersion {
					t.Errorf("round %d writer %d: 412 %s (ETag %q), want currentVersion %s", round, g, o.r.body, o.r.etag(), winVersion)
				}
			}
			if v, etag := api.getText(path); v != strconv.Itoa(round*100+winner) || etag != winVersion {
				t.Errorf("round %d: GET = %s version %s, want the winner's %d version %s", round, v, etag, round*100+winner, winVersion)
			}
		}
	})
}

// saAudit is one record of GET /audit.
type saAudit struct {
	Mutation  string    `json:"mutation"`
	At        time.Time `json:"at"`
	Principal string    `json:"principal"`
	Reason    string    `json:"reason"`
	Reverts   string    `json:"reverts"`
	Namespace string    `json:"namespace"`
	Type      string    `json:"type"`
	ID        string    `json:"id"`
	State     string    `json:"state"`
	Op        string    `json:"op"`
	Before    *struct {
		Typename    string `json:"typename"`
		Version     string `json:"version"`
		ValueBase64 string `json:"valueBase64"`
	} `json:"before"`
	Version  *string `json:"version"`
	Typename string  `json:"typename"`
}

func (a *saAPI) audit(query string) []saAudit {
	a.t.Helper()
	r := a.expect(http.StatusOK, http.MethodGet, "/audit?"+query, "")
	return saDecode[struct {
		Records []saAudit `json:"records"`
	}](a.t, r).Records
}

// TestStateAPIRevert checks undo and the audit log: a revert restores the
// before-image; a revert of an entry that changed since is 412 and changes
// nothing; the audit log holds every mutation with principal, reason,
// before-image (exact bytes and version) and, for a revert, the mutation it
// undid.
func TestStateAPIRevert(t *testing.T) {
	t.Parallel()
	onEngines(t, func(t *testing.T, e engine) {
		_, rt, api := saFeatures(t, e)
		const id = "revert"
		saWarm(t, rt, id)
		path := saEntry(id, sdktest.StateString)

		m0 := saReceiptOf(t, api.putText(path, "original", "Statefun-Reason", "seed"), "committed")
		original := api.getBytes(path)
		m1 := saReceiptOf(t, api.putText(path, "broken", "Statefun-Reason", "ticket-42: set the wrong value"), "committed")
		broken := api.getBytes(path)

		undo := saReceiptOf(t, api.do(http.MethodPost, "/mutations/"+m1.Mutation+"/revert", "", "Statefun-Reason", "undo ticket-42"), "committed")
		if v, _ := api.getText(path); v != "original" {
			t.Fatalf("after revert GET = %q, want %q", v, "original")
		}
		if saStr(undo.PreviousVersion) != *m1.Version {
			t.Errorf("revert receipt %+v: previousVersion, want %s (what m1 wrote)", undo, *m1.Version)
		}
		// The entry no longer holds m1's version: reverting m1 again is 412.
		if r := api.do(http.MethodPost, "/mutations/"+m1.Mutation+"/revert", ""); r.status != http.StatusPreconditionFailed {
			t.Errorf("second revert of %s: %s, want 412", m1.Mutation, r)
		}

		m2 := saReceiptOf(t, api.putText(path, "fixed", "Statefun-Reason", "ticket-43"), "committed")
		m3 := saReceiptOf(t, api.putText(path, "later", "Statefun-Reason", "ticket-44"), "committed")
		r := api.do(http.MethodPost, "/mutations/"+m2.Mutation+"/revert", "")
		if r.status != http.StatusPreconditionFailed {
			t.Errorf("revert of %s after another write: %s, want 412", m2.Mutation, r)
		} else if p := saDecode[saProblem](t, r); p.Receipt == nil || p.Receipt.Status != "rejected" {
			t.Errorf("412 of a revert: %s, want a rejected receipt", r.body)
		}
		if v, _ := api.getText(path); v != "later" {
			t.Errorf("after a refused revert GET = %q, want %q", v, "later")
		}
		api.expect(http.StatusNotFound, http.MethodPost, "/mutations/no-such-mutation/revert", "")

		recs := api.audit("namespace=sdktest&type=features&id=" + id + "&state=" + sdktest.StateString)
		byID := map[string]saAudit{}
		var order []string
		for _, a := range recs {
			byID[a.Mutation] = a
			order = append(order, a.Mutation)
		}
		if want := []string{m0.Mutation, m1.Mutation, undo.Mutation, m2.Mutation, m3.Mutation}; !slices.Equal(order, want) {
			t.Fatalf("audit of %s: mutations %q, want %q (oldest first, refused reverts change nothing)", path, order, want)
		}
		b64 := base64.StdEncoding.EncodeToString
		check := func(name string, a saAudit, reason string, before []byte, beforeVersion, version string) {
			t.Helper()
			if a.Principal != "anonymous" || a.Reason != reason || a.Op != "put" || a.State != sdktest.StateString ||
				a.Namespace != "sdktest" || a.Type != "features" || a.ID != id || a.Typename != saString {
				t.Errorf("audit of %s: %+v, want principal anonymous, reason %q, op put on %s/%s as %s", name, a, reason, id, sdktest.StateString, saString)
			}
			if saStr(a.Version) != version {
				t.Errorf("audit of %s: version %s, want %s", name, saStr(a.Version), version)
			}
			if time.Since(a.At) > time.Minute || time.Until(a.At) > time.Minute {
				t.Errorf("audit of %s: at %v, want about now", name, a.At)
			}
			switch {
			case before == nil && a.Before != nil:
				t.Errorf("audit of %s: before-image %+v, want none (the entry had no value)", name, a.Before)
			case before != nil && a.Before == nil:
				t.Errorf("audit of %s: no before-image", name)
			case before != nil && (a.Before.ValueBase64 != b64(before) || a.Before.Version != beforeVersion || a.Before.Typename != saString):
				t.Errorf("audit of %s: before-image %+v, want %s version %s", name, *a.Before, b64(before), beforeVersion)
			}
		}
		check("m0", byID[m0.Mutation], "seed", nil, "", *m0.Version)
		check("m1", byID[m1.Mutation], "ticket-42: set the wrong value", original, *m0.Version, *m1.Version)
		check("revert", byID[undo.Mutation], "undo ticket-42", broken, *m1.Version, *undo.Version)
		if got := byID[undo.Mutation].Reverts; got != m1.Mutation {
			t.Errorf("audit of the revert: reverts %q, want %q", got, m1.Mutation)
		}
		if got := api.audit("mutation=" + m1.Mutation); len(got) != 1 || got[0].Mutation != m1.Mutation {
			t.Errorf("GET /audit?mutation=%s: %+v, want its one record", m1.Mutation, got)
		}
	})
}

// TestStateAPISecurity checks bearer tokens and scopes, the refusal to
// serve an unauthenticated API beyond loopback, and https.
func TestStateAPISecurity(t *testing.T) {
	t.Parallel()
	onEngines(t, func(t *testing.T, e engine) {

		t.Run("tokens", func(t *testing.T) {
			t.Parallel()
			fs := sdktest.StartFeatureServer(t)
			rt := newRuntimeOn(t, e, saModule(saEndpoint{"sdktest/*", fs.URL}))
			rt.routeEgress(fs)
			tokens := filepath.Join(rt.dir, "tokens")
			const (
				reader = "reader-secret-0123456789"
				writer = "writer-secret-0123456789"
				oncall = "oncall-secret-0123456789"
			)
			file := "# state API tokens\n\nreader " + reader + " read\nwriter " + writer + " write\noncall " + oncall + " read,write\n"
			if err := os.WriteFile(tokens, []byte(file), 0o600); err != nil {
				t.Fatal(err)
			}
			// With tokens, a non-loopback admin address is allowed.
			_, port, _ := net.SplitHostPort(rt.admin)
			saStart(rt, "http", saClient, "--api-tokens", tokens, "--admin-addr", "0.0.0.0:"+port)
			saWarm(t, rt, "secure")
			anon := saAPIOf(t, "http://"+rt.admin, saClient)
			bogus, rd, wr, oc := anon.as("not-a-token-of-this-runtime"), anon.as(reader), anon.as(writer), anon.as(oncall)
			path := saEntry("secure", sdktest.StateString)
			text := []string{"Content-Type", "text/plain"}

			for _, c := range []struct {
				name   string
				api    *saAPI
				method string
				path   string
				want   int
			}{
				{"read without a token", anon, http.MethodGet, path, http.StatusUnauthorized},
				{"read with an unknown token", bogus, http.MethodGet, path, http.StatusUnauthorized},
				{"write without a token", anon, http.MethodPut, path, http.StatusUnauthorized},
				{"write with an unknown token", bogus, http.MethodPut, path, http.StatusUnauthorized},
				{"write with a read token", rd, http.MethodPut, path, http.StatusForbidden},
				{"delete with a read token", rd, http.MethodDelete, path, http.StatusForbidden},
				{"list types without a token", anon, http.MethodGet, "/state", http.StatusUnauthorized},
				{"list ids without a token", anon, http.MethodGet, "/state/sdktest/features", http.StatusUnauthorized},
				{"audit without a token", anon, http.MethodGet, "/audit", http.StatusUnauthorized},
				{"audit with a write token", wr, http.MethodGet, "/audit", http.StatusForbidden},
				{"read with a write token", wr, http.MethodGet, path, http.StatusForbidden},
			} {
				r := c.api.do(c.method, c.path, "value", text...)
				if r.status != c.want {
					t.Errorf("%s: %s %s: %s, want %d", c.name, c.method, c.path, r, c.want)
					continue
				}
				if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
					t.Errorf("%s: Content-Type %q, want application/problem+json", c.name, ct)
				}
				if c.want == http.StatusUnauthorized && !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("%s: WWW-Authenticate %q, want a Bearer challenge", c.name, r.header.Get("WWW-Authenticate"))
				}
			}
			// Basic credentials are not a bearer token.
			if r := anon.do(http.MethodGet, path, "", "Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("reader:"+reader))); r.status != http.StatusUnauthorized {
				t.Errorf("read with Basic credentials: %s, want 401", r)
			}
			// Nothing refused was applied.
			rd.expect(http.StatusNotFound, http.MethodGet, path, "")

			w := saReceiptOf(t, wr.putText(path, "written by writer", "Statefun-Reason", "scoped write"), "committed")
			if v, _ := rd.getText(path); v != "written by writer" {
				t.Errorf("read token GET = %q, want %q", v, "written by writer")
			}
			if v, _ := oc.getText(path); v != "written by writer" {
				t.Errorf("read,write token GET = %q, want %q", v, "written by writer")
			}
			anon.expect(http.StatusUnauthorized, http.MethodGet, "/mutations/"+w.Mutation, "")
			rd.expect(http.StatusOK, http.MethodGet, "/mutations/"+w.Mutation, "")
			rd.expect(http.StatusForbidden, http.MethodPost, "/mutations/"+w.Mutation+"/revert", "")
			rd.expect(http.StatusOK, http.MethodGet, "/state", "")
			rd.expect(http.StatusOK, http.MethodGet, "/state/sdktest/features", "")
			o := saReceiptOf(t, oc.putText(path, "written by oncall"), "committed")
			for _, open := range []string{"/readyz", "/healthz", "/metrics", "/openapi.json"} {
				anon.expect(http.StatusOK, http.MethodGet, open, "")
			}

			recs := rd.audit("id=secure")
			principals := map[string]string{}
			for _, a := range recs {
				principals[a.Mutation] = a.Principal
			}
			if principals[w.Mutation] != "writer" || principals[o.Mutation] != "oncall" || len(recs) != 2 {
				t.Errorf("audit principals %v, want %s → writer and %s → oncall only", principals, w.Mutation, o.Mutation)
			}
			if got := rd.audit("principal=writer"); len(got) != 1 || got[0].Mutation != w.Mutation {
				t.Errorf("GET /audit?principal=writer: %+v, want the one write of writer", got)
			}
		})

		t.Run("refusals", func(t *testing.T) {
			t.Parallel()
			e.skipCluster(t, "the admin listener's refusals come before the engine is chosen; engine=embedded checks them")
			dir := t.TempDir()
			module := filepath.Join(dir, "module.yaml")
			mod := saModule(saEndpoint{"sdktest/*", "http://127.0.0.1:1/statefun"})(freePort(t), freePort(t))
			if err := os.WriteFile(module, []byte(mod), 0o644); err != nil {
				t.Fatal(err)
			}
			port := strconv.Itoa(freePort(t))
			out := saRefused(t, "--module", module, "--data-dir", filepath.Join(dir, "data1"), "--admin-addr", "0.0.0.0:"+port)
			for _, want := range []string{"loopback", "0.0.0.0:" + port, "--api-tokens"} {
				if !strings.Contains(out, want) {
					t.Errorf("refusal to serve an open API on 0.0.0.0 does not say %q:\n%s", want, out)
				}
			}
			short := filepath.Join(dir, "short-tokens")
			if err := os.WriteFile(short, []byte("ops too-short read,write\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			out = saRefused(t, "--module", module, "--data-dir", filepath.Join(dir, "data2"), "--admin-addr", "127.0.0.1:"+port, "--api-tokens", short)
			if !strings.Contains(out, "16") || !strings.Contains(out, "ops") {
				t.Errorf("refusal of a short secret does not name the token and the 16-character minimum:\n%s", out)
			}
		})

		t.Run("tls", func(t *testing.T) {
			t.Parallel()
			fs := sdktest.StartFeatureServer(t)
			rt := newRuntimeOn(t, e, saModule(saEndpoint{"sdktest/*", fs.URL}))
			rt.routeEgress(fs)
			cert, key, pool := saSelfSigned(t, rt.dir)
			client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
				TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
			saStart(rt, "https", client, "--tls-cert", cert, "--tls-key", key)
			saWarm(t, rt, "tls")
			api := saAPIOf(t, "https://"+rt.admin, client)
			path := saEntry("tls", sdktest.StateString)
			r := api.putText(path, "over https")
			saReceiptOf(t, r, "committed")
			if !r.tls {
				t.Error("the PUT was not answered over TLS")
			}
			if v, _ := api.getText(path); v != "over https" {
				t.Errorf("GET over https = %q, want %q", v, "over https")
			}
			// Plain http is not served, and the certificate is the one given.
			if r, err := saAPIOf(t, "http://"+rt.admin, saClient).try(http.MethodGet, path, ""); err == nil && r.status < 400 {
				t.Errorf("plain http GET %s: %s, want it refused", path, r)
			}
			untrusting := &http.Client{Timeout: 10 * time.Second}
			if _, err := saAPIOf(t, "https://"+rt.admin, untrusting).try(http.MethodGet, path, ""); err == nil {
				t.Error("a client that does not trust the test certificate connected: the listener is not using --tls-cert")
			}
		})
	})
}

// saSelfSigned writes a self-signed certificate for 127.0.0.1 and its key
// into dir, and returns their paths and a pool that trusts it.
func saSelfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "statefun e2e"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// saIDs is a page of GET /state/<ns>/<type>.
type saIDs struct {
	IDs  []string `json:"ids"`
	Next *string  `json:"next"`
}

// saType is one type of GET /state.
type saType struct {
	Namespace  string `json:"namespace"`
	Type       string `json:"type"`
	Registered bool   `json:"registered"`
	HoldsState bool   `json:"holdsState"`
}

// TestStateAPIListing checks the listings: the ids of a type paged by a
// cursor that stays stable while ids are added and entries rewritten (every
// id present throughout is listed exactly once, in order), the prefix
// filter, ids that need percent-encoding; and a type that holds state but
// is no longer in module.yaml is still listed after a restart, with its
// ids and values readable.
func TestStateAPIListing(t *testing.T) {
	t.Parallel()
	onEngines(t, func(t *testing.T, e engine) {
		fs := sdktest.StartFeatureServer(t)
		cs := sdktest.StartCounterServer(t)
		rt := newRuntimeOn(t, e, saModule(saEndpoint{sdktest.FeaturesFn, fs.URL}, saEndpoint{sdktest.CounterFn, cs.URL}))
		rt.routeEgress(fs)
		rt.routeEgress(cs)
		rt.start()
		client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
		api := saAPIOf(t, "http://"+rt.admin, client)
		saWarm(t, rt, "warm")

		var ids []string
		for i := range 30 {
			ids = append(ids, fmt.Sprintf("user-%02d", i))
		}
		ids = append(ids, "a/b", "emoji 🙂", "100%", "warm")
		var wg sync.WaitGroup
		errs := make(chan error, len(ids))
		for _, id := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if r, err := api.try(http.MethodPut, saEntry(id, sdktest.StateString), "v0", "Content-Type", "text/plain"); err != nil || r.status != http.StatusOK {
					errs <- fmt.Errorf("PUT %q: %v %v", id, r, err)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}

		list := func(query string) saIDs {
			t.Helper()
			return saDecode[saIDs](t, api.expect(http.StatusOK, http.MethodGet, "/state/sdktest/features?"+query, ""))
		}
		var seen []string
		after := ""
		for page := 0; ; page++ {
			if page > 20 {
				t.Fatalf("paging did not end after 20 pages; seen %q", seen)
			}
			q := url.Values{"limit": {"7"}}
			if after != "" {
				q.Set("after", after)
			}
			p := list(q.Encode())
			if len(p.IDs) > 7 {
				t.Fatalf("page %d has %d ids, over the limit of 7", page, len(p.IDs))
			}
			seen = append(seen, p.IDs...)
			if p.Next == nil {
				break
			}
			if len(p.IDs) == 0 || *p.Next != p.IDs[len(p.IDs)-1] {
				t.Fatalf("page %d: next %q, want the page's last id (ids %q)", page, *p.Next, p.IDs)
			}
			after = *p.Next
			// Writes between pages: new ids on both sides of the cursor and
			// rewrites of listed and unlisted ids.
			for _, w := range []string{fmt.Sprintf("user-%02d-new", page*3), "aa-" + strconv.Itoa(page), ids[(page*5)%len(ids)], ids[len(ids)-1-page]} {
				saReceiptOf(t, api.putText(saEntry(w, sdktest.StateString), fmt.Sprint("page ", page)), "committed")
			}
		}
		if !slices.IsSorted(seen) || len(slices.Compact(slices.Clone(seen))) != len(seen) {
			t.Errorf("paged ids are not strictly increasing: %q", seen)
		}
		for _, id := range ids {
			if n := saCount(seen, id); n != 1 {
				t.Errorf("id %q listed %d times across the pages, want once (ids: %q)", id, n, seen)
			}
		}

		p := list("prefix=user-1")
		for i := 10; i < 20; i++ {
			if !slices.Contains(p.IDs, fmt.Sprintf("user-%d", i)) {
				t.Errorf("?prefix=user-1 misses user-%d: %q", i, p.IDs)
			}
		}
		for _, id := range p.IDs {
			if !strings.HasPrefix(id, "user-1") {
				t.Errorf("?prefix=user-1 lists %q", id)
			}
		}
		if p := list("prefix=a%2F"); !slices.Equal(p.IDs, []string{"a/b"}) {
			t.Errorf("?prefix=a/ lists %q, want [a/b]", p.IDs)
		}
		if v, _ := api.getText(saEntry("emoji 🙂", sdktest.StateString)); v != "v0" && !strings.HasPrefix(v, "page ") {
			t.Errorf("GET of the emoji id = %q", v)
		}

		// A type that holds state and then leaves module.yaml stays listed.
		if status, err := rt.send("/"+sdktest.CounterFn+"/c1", saString, "tick"); err != nil || status != http.StatusOK {
			t.Fatalf("ingress to %s/c1: %d %v", sdktest.CounterFn, status, err)
		}
		if got := rt.collect(sdktest.CounterTopic, 1, 20*time.Second); !slices.Equal(got, []string{"c1:1"}) {
			t.Fatalf("counter records %q, want [c1:1]", got)
		}
		// An unused keep-alive connection (the 34 concurrent PUTs dial more
		// than they end up using) holds up the admin listener's graceful
		// shutdown for its 5s timeout: net/http counts a connection that never
		// sent a request as active for its first 5 seconds.
		client.CloseIdleConnections()
		if err := rt.stop(); err != nil {
			t.Fatal(err)
		}
		rt.writeModule(saModule(saEndpoint{sdktest.FeaturesFn, fs.URL})(saPort(t, rt.ingress), saPort(t, rt.egress)))
		rt.start()
		types := saDecode[struct {
			Namespaces []string `json:"namespaces"`
			Types      []saType `json:"types"`
		}](t, api.expect(http.StatusOK, http.MethodGet, "/state", ""))
		if !slices.Contains(types.Namespaces, "sdktest") {
			t.Errorf("GET /state namespaces %q, want sdktest", types.Namespaces)
		}
		var counter, features *saType
		for i, ty := range types.Types {
			switch ty.Namespace + "/" + ty.Type {
			case sdktest.CounterFn:
				counter = &types.Types[i]
			case sdktest.FeaturesFn:
				features = &types.Types[i]
			}
		}
		if counter == nil || !counter.HoldsState {
			t.Errorf("GET /state after %s left module.yaml: %+v, want it listed as holding state", sdktest.CounterFn, types.Types)
		}
		if features == nil || !features.HoldsState || !features.Registered {
			t.Errorf("GET /state: %s is %+v, want registered and holding state", sdktest.FeaturesFn, features)
		}
		ns := saDecode[struct {
			Types []saType `json:"types"`
		}](t, api.expect(http.StatusOK, http.MethodGet, "/state/sdktest", ""))
		if !slices.ContainsFunc(ns.Types, func(ty saType) bool { return ty.Type == "counter" && ty.HoldsState }) {
			t.Errorf("GET /state/sdktest: %+v, want counter holding state", ns.Types)
		}
		if p := saDecode[saIDs](t, api.expect(http.StatusOK, http.MethodGet, "/state/sdktest/counter", "")); !slices.Equal(p.IDs, []string{"c1"}) {
			t.Errorf("ids of the undeployed %s: %q, want [c1]", sdktest.CounterFn, p.IDs)
		}
		if v := string(api.expect(http.StatusOK, http.MethodGet, "/state/sdktest/counter/c1/"+sdktest.CounterState, "", "Accept", "text/plain").body); v != "1" {
			t.Errorf("GET %s/c1/%s = %q, want 1", sdktest.CounterFn, sdktest.CounterState, v)
		}
	})
}

func saCount(s []string, v string) int {
	n := 0
	for _, x := range s {
		if x == v {
			n++
		}
	}
	return n
}

// saPort is the port of a base URL such as http://127.0.0.1:1234.
func saPort(t testing.TB, base string) int {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestStateAPIRepairDuringRetries checks the documented decision that a
// batch sitting out a retry backoff does not hold mutations back, and that
// the retry carries the repaired state.
//
// "stuck": the function answers 500 to every request for an address
// (FailNext with a large n). A PUT to that address is applied and committed
// at once, although the batch never succeeds, and the next attempt of the
// batch is sent with the PUT's value (seen on the wire).
//
// "poisoned": the operator's own bad write (a sdktest/Doc that is not JSON)
// makes every invocation of the address fail in the SDK; a PUT of a valid
// document repairs it, and the retried invocation runs on the repaired
// state: it reads the new document and the i64 the PUT set, increments it,
// and nothing of the failed attempts was applied.
func TestStateAPIRepairDuringRetries(t *testing.T) {
	t.Parallel()
	onEngines(t, func(t *testing.T, e engine) {
		fs := sdktest.StartFeatureServer(t)
		wire := saWireTo(t, fs.URL)
		rt := newRuntimeOn(t, e, saModule(saEndpoint{"sdktest/*", wire.URL}))
		rt.routeEgress(fs)
		rt.start()
		api := saAPIOf(t, "http://"+rt.admin, saClient)

		t.Run("stuck", func(t *testing.T) {
			api := api.withT(t)
			const id = "stuck"
			saWarm(t, rt, id)
			fs.FailNext(sdktest.FeaturesFn, id, 1<<20)
			saCommand(t, rt, id, saSeq(saIncr(), saReport("stuck")))
			key := sdktest.FeaturesFn + "/" + id
			failures := func() int {
				n := 0
				for _, b := range fs.Batches() {
					if b.Target == key && b.Status == http.StatusInternalServerError {
						n++
					}
				}
				return n
			}
			saEventually(t, 20*time.Second, "three failed attempts", func() bool { return failures() >= 3 })
			if got := wire.i64s(key); slices.ContainsFunc(got, func(v string) bool { return v != "none" }) {
				t.Fatalf("requests for %s before the PUT carried i64 %q, want none", key, got)
			}
			start := time.Now()
			rc := saReceiptOf(t, api.putText(saEntry(id, sdktest.StateInt64), "41", "Statefun-Reason", "repair while failing"), "committed")
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("the PUT took %v behind a failing batch", d)
			}
			if v, etag := api.getText(saEntry(id, sdktest.StateInt64)); v != "41" || etag != *rc.Version {
				t.Errorf("GET = %s version %s, want 41 version %s", v, etag, *rc.Version)
			}
			saEventually(t, 20*time.Second, "a retry of the failing batch carrying i64 = 41", func() bool {
				return slices.Contains(wire.i64s(key), "41")
			})
			if n := fs.Invocations(sdktest.FeaturesFn, id); n != 1 {
				t.Errorf("the function ran %d invocations of %s, want 1 (the warm-up; the failing batch never ran)", n, id)
			}
		})

		t.Run("poisoned", func(t *testing.T) {
			api := api.withT(t)
			const id = "poisoned"
			saWarm(t, rt, id)
			key := sdktest.FeaturesFn + "/" + id
			doc := saEntry(id, sdktest.StateDoc)
			saReceiptOf(t, api.do(http.MethodPut, doc, "{not json", "Content-Type", "application/octet-stream", "Statefun-Reason", "a bad manual edit"), "committed")
			saCommand(t, rt, id, saSeq(saIncr(), saReport("repaired")))
			failures := func() int {
				n := 0
				for _, b := range fs.Batches() {
					if b.Target == key && b.Status != http.StatusOK {
						n++
					}
				}
				return n
			}
			saEventually(t, 20*time.Second, "the SDK failing on the bad document", func() bool { return failures() >= 3 })
			if n := fs.Invocations(sdktest.FeaturesFn, id); n != 1 {
				t.Fatalf("the function completed %d invocations of %s, want 1 (the warm-up)", n, id)
			}
			start := time.Now()
			saReceiptOf(t, api.do(http.MethodPut, doc, `{"typename":"`+sdktest.DocType+`","value":{"name":"fixed","n":7}}`,
				"Content-Type", "application/json", "Statefun-Reason", "repair"), "committed")
			saReceiptOf(t, api.putText(saEntry(id, sdktest.StateInt64), "41"), "committed")
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("the repair took %v behind a failing batch", d)
			}
			rep := saAwaitReport(t, rt, "repaired", 20*time.Second)
			if rep.States.Doc == nil || rep.States.Doc.Name != "fixed" || rep.States.Doc.N != 7 {
				t.Errorf("the retried invocation read doc %+v, want the repaired {fixed 7}", rep.States.Doc)
			}
			if got := rep.States.Int64; got == nil || *got != 42 {
				t.Errorf("the retried invocation incremented i64 to %s, want 42 (41 from the repair, +1 once)", saI64(got))
			}
			if v, _ := api.getText(saEntry(id, sdktest.StateInt64)); v != "42" {
				t.Errorf("GET i64 = %q, want 42", v)
			}
		})
	})
}

// saWire sits between the runtime and a FeatureServer and records the i64
// state carried by every request, per target ("namespace/type/id").
type saWire struct {
	URL string

	mu   sync.Mutex
	seen map[string][]string // target -> i64 of each request, "none" without a value
}

// saWireTo starts a saWire forwarding to upstream; it stops when t ends.
func saWireTo(t testing.TB, upstream string) *saWire {
	w := &saWire{seen: map[string][]string{}}
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		var req protocol.ToFunction
		if proto.Unmarshal(body, &req) == nil && req.GetInvocation() != nil {
			batch := req.GetInvocation()
			i64 := "none"
			for _, st := range batch.GetState() {
				if st.GetStateName() == sdktest.StateInt64 && st.GetStateValue().GetHasValue() {
					v, err := sdktest.DecodeInt64(st.GetStateValue())
					i64 = strconv.FormatInt(v, 10)
					if err != nil {
						i64 = "undecodable: " + err.Error()
					}
				}
			}
			w.mu.Lock()
			key := sdktest.AddressKey(batch.GetTarget())
			w.seen[key] = append(w.seen[key], i64)
			w.mu.Unlock()
		}
		fwd, err := http.NewRequestWithContext(r.Context(), http.MethodPost, upstream, bytes.NewReader(body))
		if err != nil {
			http.Error(rw, err.Error(), http.StatusInternalServerError)
			return
		}
		fwd.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(fwd)
		if err != nil {
			http.Error(rw, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		maps.Copy(rw.Header(), resp.Header)
		rw.WriteHeader(resp.StatusCode)
		io.Copy(rw, resp.Body)
	}))
	t.Cleanup(srv.Close)
	w.URL = srv.URL + "/statefun"
	return w
}

// i64s is the i64 carried by each request for target so far.
func (w *saWire) i64s(target string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.seen[target])
}

// saEventually polls cond every 10 ms until it holds or timeout passes.
func saEventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
