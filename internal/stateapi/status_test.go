package stateapi

import (
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/statefun-go/statefun/internal/types"
)

// statusCase is one request of the status table and what its answer must
// carry. Every answer is also checked against openapi.json (send).
type statusCase struct {
	name   string
	api    string // "" (no tokens), "tokens", "small" (64-byte bodies), "reason" (Statefun-Reason required)
	method string
	target string // escaped path and query
	body   string
	hdr    []string
	// pre runs first and may complete the request (a version, a mutation id).
	pre    func(t *testing.T, c *statusCase)
	status int
	// bare: the answer comes from Go's HTTP server, not the API.
	bare     bool
	has      []string          // headers that must be present
	lacks    []string          // headers that must be absent
	eq       map[string]string // headers with these exact values
	bodyIs   *string           // the exact body
	contains []string          // substrings of the body
	check    func(t *testing.T, r *response)
}

func str(s string) *string { return &s }

func TestStatusCodesAndHeaders(t *testing.T) {
	eng := startWithFunction(t, engineConfig{})
	apis := map[string]string{
		"":       serve(t, eng, Options{}),
		"tokens": serve(t, eng, Options{Tokens: []Token{tokenRead, tokenWrite, tokenBoth}, Jobs: newJobs(t, eng)}),
		"small":  serve(t, eng, Options{MaxBodyBytes: 64}),
		"reason": serve(t, eng, Options{RequireReason: true}),
	}
	api := apis[""]

	// Test data: one entry of every kind at test/fn/a, one held under a
	// state the function never registered.
	mustPut(t, api, "/state/test/fn/a/str", "text/plain", "hello")
	mustPut(t, api, "/state/test/fn/a/i32", "text/plain", "42")
	mustPut(t, api, "/state/test/fn/a/f64", "text/plain", "3.5")
	mustPut(t, api, "/state/test/fn/a/b", "text/plain", "true")
	mustPut(t, api, "/state/test/fn/a/doc", "text/plain", `{"k":[1,2]}`)
	mustPut(t, api, "/state/test/fn/a/bin", "application/octet-stream", "\x00\xff\x10")
	mustPut(t, api, "/state/test/fn/a/ttl", "text/plain", "soon")
	mustPut(t, api, "/state/test/fn/a/extra", "text/plain", `"x"`, "Statefun-Type", "test/Other")

	int42 := "\x0d\x2a\x00\x00\x00"
	hdrEtag := func(target string) string {
		t.Helper()
		r := send(t, api, "GET", target, nil)
		if r.StatusCode != 200 {
			t.Fatalf("GET %s: %s %s", target, r.Status, r.body)
		}
		return r.Header.Get("ETag")
	}
	receipt := func(t *testing.T, r *response) receiptJSON {
		t.Helper()
		var rc receiptJSON
		r.json(t, &rc)
		if rc.Mutation == "" {
			t.Errorf("the receipt has no mutation id: %s", r.body)
		}
		return rc
	}
	// committedReceipt checks a 200 receipt of ack=committed and its ETag.
	committedReceipt := func(t *testing.T, r *response) {
		rc := receipt(t, r)
		if rc.Status != "committed" || rc.Version == nil || rc.Checkpoint == nil {
			t.Errorf("receipt %s, want committed with a version and a checkpoint", r.body)
		} else if r.Header.Get("ETag") != etag(mustUint(t, *rc.Version)) {
			t.Errorf("ETag %s, receipt version %s", r.Header.Get("ETag"), *rc.Version)
		}
	}
	problemWith := func(check func(t *testing.T, p problem)) func(t *testing.T, r *response) {
		return func(t *testing.T, r *response) { check(t, r.problem(t)) }
	}
	textOf := func(target string) string {
		t.Helper()
		r := send(t, api, "GET", target, nil, "Accept", "text/plain")
		return string(r.body)
	}
	// accepted checks a 202: its Location serves the receipt, and the
	// mutation ends committed.
	accepted := func(t *testing.T, r *response) {
		rc := receipt(t, r)
		loc := r.Header.Get("Location")
		if rc.Status != "accepted" || loc != "/mutations/"+rc.Mutation {
			t.Fatalf("202 with receipt %s and Location %q", r.body, loc)
		}
		got := send(t, api, "GET", loc+"?wait=10s", nil)
		if got.StatusCode != 200 || !strings.Contains(string(got.body), `"status": "committed"`) {
			t.Errorf("GET %s?wait=10s: %s %s", loc, got.Status, got.body)
		}
	}
	var rejected string // a rejected mutation, for the revert of one

	cases := []statusCase{
		// Reads and content negotiation.
		{name: "GET string without Accept is text", method: "GET", target: "/state/test/fn/a/str", status: 200,
			eq:  map[string]string{"Content-Type": "text/plain; charset=utf-8", "Statefun-Type": types.String, "Content-Length": "5"},
			has: []string{"ETag"}, lacks: []string{"Statefun-Expires-At"}, bodyIs: str("hello")},
		{name: "GET string with Accept */* is text", method: "GET", target: "/state/test/fn/a/str", hdr: []string{"Accept", "*/*"}, status: 200,
			eq: map[string]string{"Content-Type": "text/plain; charset=utf-8"}, bodyIs: str("hello")},
		{name: "GET int without Accept is the stored bytes", method: "GET", target: "/state/test/fn/a/i32", status: 200,
			eq:  map[string]string{"Content-Type": "application/octet-stream", "Statefun-Type": types.Int, "Content-Length": "5"},
			has: []string{"ETag"}, bodyIs: str(int42)},
		{name: "GET int as octet-stream", method: "GET", target: "/state/test/fn/a/i32", hdr: []string{"Accept", "application/octet-stream"}, status: 200,
			eq: map[string]string{"Content-Type": "application/octet-stream"}, bodyIs: str(int42)},
		{name: "GET int as text", method: "GET", target: "/state/test/fn/a/i32", hdr: []string{"Accept", "text/plain"}, status: 200,
			eq: map[string]string{"Content-Type": "text/plain; charset=utf-8", "Content-Length": "2"}, bodyIs: str("42")},
		{name: "GET double as text", method: "GET", target: "/state/test/fn/a/f64", hdr: []string{"Accept", "text/plain"}, status: 200,
			eq: map[string]string{"Statefun-Type": types.Double}, bodyIs: str("3.5")},
		{name: "GET bool as text", method: "GET", target: "/state/test/fn/a/b", hdr: []string{"Accept", "text/*"}, status: 200, bodyIs: str("true")},
		{name: "GET JSON user type as text", method: "GET", target: "/state/test/fn/a/doc", hdr: []string{"Accept", "text/plain"}, status: 200,
			eq: map[string]string{"Statefun-Type": docType}, bodyIs: str(`{"k":[1,2]}`)},
		{name: "GET JSON user type without Accept is the stored bytes", method: "GET", target: "/state/test/fn/a/doc", status: 200,
			eq: map[string]string{"Content-Type": "application/octet-stream"}, bodyIs: str(`{"k":[1,2]}`)},
		{name: "GET int as the JSON envelope", method: "GET", target: "/state/test/fn/a/i32", hdr: []string{"Accept", "application/json"}, status: 200,
			eq: map[string]string{"Content-Type": "application/json"},
			check: func(t *testing.T, r *response) {
				var env types.Envelope
				r.json(t, &env)
				want := types.EnvelopeAddress{Namespace: "test", Type: "fn", ID: "a"}
				if env.Address != want || env.State != "i32" || env.Typename != types.Int || string(env.Value) != "42" ||
					env.ValueBase64 != "DSoAAAA=" || etag(mustUint(t, env.Version)) != r.Header.Get("ETag") || env.ExpiresAt != nil {
					t.Errorf("envelope %s (ETag %s)", r.body, r.Header.Get("ETag"))
				}
			}},
		{name: "GET binary user type as the JSON envelope has no value", method: "GET", target: "/state/test/fn/a/bin", hdr: []string{"Accept", "application/json"}, status: 200,
			contains: []string{`"valueBase64":"AP8Q"`}, check: func(t *testing.T, r *response) {
				if strings.Contains(string(r.body), `"value"`) {
					t.Errorf("a binary value has no JSON value: %s", r.body)
				}
			}},
		{name: "GET Accept by quality", method: "GET", target: "/state/test/fn/a/i32", hdr: []string{"Accept", "text/plain;q=0.5, application/json"}, status: 200,
			eq: map[string]string{"Content-Type": "application/json"}},
		{name: "GET with a TTL has Statefun-Expires-At", method: "GET", target: "/state/test/fn/a/ttl", status: 200,
			has: []string{"Statefun-Expires-At", "ETag"}, bodyIs: str("soon"),
			check: func(t *testing.T, r *response) {
				at, err := time.Parse(time.RFC3339, r.Header.Get("Statefun-Expires-At"))
				if err != nil || at.Before(time.Now()) || at.After(time.Now().Add(time.Hour+time.Minute)) {
					t.Errorf("Statefun-Expires-At %q (%v): want within the hour", r.Header.Get("Statefun-Expires-At"), err)
				}
				env := send(t, api, "GET", "/state/test/fn/a/ttl", nil, "Accept", "application/json")
				if !strings.Contains(string(env.body), `"expiresAt":"`) {
					t.Errorf("the envelope lacks expiresAt: %s", env.body)
				}
			}},
		{name: "HEAD has the headers of GET and no body", method: "HEAD", target: "/state/test/fn/a/i32", status: 200,
			eq:  map[string]string{"Content-Type": "application/octet-stream", "Statefun-Type": types.Int, "Content-Length": "5"},
			has: []string{"ETag"}, bodyIs: str("")},
		{name: "GET of a state held but not registered", method: "GET", target: "/state/test/fn/a/extra", status: 200,
			eq: map[string]string{"Statefun-Type": "test/Other"}, bodyIs: str(`"x"`)},
		{name: "406 text for a binary user type, with what is available", method: "GET", target: "/state/test/fn/a/bin", hdr: []string{"Accept", "text/plain"}, status: 406,
			check: problemWith(func(t *testing.T, p problem) {
				if !slices.Contains(p.Available, "application/octet-stream") || !slices.Contains(p.Available, "application/json") ||
					slices.ContainsFunc(p.Available, func(s string) bool { return strings.HasPrefix(s, "text/") }) {
					t.Errorf("available %v", p.Available)
				}
			})},
		{name: "HEAD 406", method: "HEAD", target: "/state/test/fn/a/bin", hdr: []string{"Accept", "text/plain"}, status: 406, bodyIs: str("")},
		{name: "406 for an Accept that matches nothing", method: "GET", target: "/state/test/fn/a/i32", hdr: []string{"Accept", "text/html, */*;q=0"}, status: 406,
			contains: []string{`"available"`}},
		{name: "404 unknown function type", method: "GET", target: "/state/nope/fn/a/i32", status: 404, contains: []string{"function type nope/fn is unknown"}},
		{name: "404 state not registered", method: "GET", target: "/state/test/fn/a/nope", status: 404, contains: []string{"is not registered by test/fn"}},
		{name: "404 empty entry", method: "GET", target: "/state/test/fn/empty/i32", status: 404, contains: []string{"test/fn/empty has no value for state"}},
		{name: "HEAD 404 has no body", method: "HEAD", target: "/state/test/fn/empty/i32", status: 404, bodyIs: str("")},
		{name: "ETag changes when the function writes", method: "GET", target: "/state/test/fn/a/i64", status: 200,
			pre: func(t *testing.T, c *statusCase) {
				ingest(t, eng, "a")
				waitFor(t, "the function's write", func() bool { return send(t, api, "GET", c.target, nil).StatusCode == 200 })
				before := hdrEtag(c.target)
				ingest(t, eng, "a")
				waitFor(t, "the function's second write", func() bool { return hdrEtag(c.target) != before })
			}},

		// Writes.
		{name: "PUT octet-stream", method: "PUT", target: "/state/test/fn/p/i32", body: "\x0d\x07\x00\x00\x00",
			hdr: []string{"Content-Type", "application/octet-stream"}, status: 200, has: []string{"ETag"},
			check: func(t *testing.T, r *response) {
				committedReceipt(t, r)
				if rc := receipt(t, r); rc.PreviousVersion != nil {
					t.Errorf("a first write has no previous version: %s", r.body)
				}
				if got := textOf("/state/test/fn/p/i32"); got != "7" {
					t.Errorf("stored %q", got)
				}
			}},
		{name: "PUT without Content-Type is octet-stream", method: "PUT", target: "/state/test/fn/p/i32", body: "\x0d\x08\x00\x00\x00", status: 200,
			check: func(t *testing.T, r *response) {
				committedReceipt(t, r)
				if rc := receipt(t, r); rc.PreviousVersion == nil {
					t.Errorf("an overwrite has a previous version: %s", r.body)
				}
				if got := textOf("/state/test/fn/p/i32"); got != "8" {
					t.Errorf("stored %q", got)
				}
			}},
		{name: "PUT text/plain", method: "PUT", target: "/state/test/fn/p/i32", body: "9\n", hdr: []string{"Content-Type", "text/plain; charset=utf-8"}, status: 200,
			check: func(t *testing.T, r *response) {
				committedReceipt(t, r)
				if got := textOf("/state/test/fn/p/i32"); got != "9" {
					t.Errorf("stored %q", got)
				}
			}},
		{name: "PUT JSON envelope value", method: "PUT", target: "/state/test/fn/p/i32", body: `{"value": 10}`, hdr: []string{"Content-Type", "application/json"}, status: 200,
			check: func(t *testing.T, r *response) {
				committedReceipt(t, r)
				if got := textOf("/state/test/fn/p/i32"); got != "10" {
					t.Errorf("stored %q", got)
				}
			}},
		{name: "PUT JSON envelope valueBase64", method: "PUT", target: "/state/test/fn/p/i32", body: `{"valueBase64": "DQsAAAA="}`, hdr: []string{"Content-Type", "application/json"}, status: 200,
			check: func(t *testing.T, r *response) {
				committedReceipt(t, r)
				if got := textOf("/state/test/fn/p/i32"); got != "11" {
					t.Errorf("stored %q", got)
				}
			}},
		{name: "PUT the envelope a GET returned", method: "PUT", target: "/state/test/fn/p/doc", hdr: []string{"Content-Type", "application/json"}, status: 200,
			pre: func(t *testing.T, c *statusCase) {
				c.body = string(send(t, api, "GET", "/state/test/fn/a/doc", nil, "Accept", "application/json").body)
			},
			check: func(t *testing.T, r *response) {
				if got := send(t, api, "GET", "/state/test/fn/p/doc", nil).body; string(got) != `{"k":[1,2]}` {
					t.Errorf("round trip stored %q", got)
				}
			}},
		{name: "PUT ack=applied", method: "PUT", target: "/state/test/fn/p/str?ack=applied", body: "x", hdr: []string{"Content-Type", "text/plain"}, status: 200,
			contains: []string{`"status": "applied"`}},
		{name: "PUT ack=committed", method: "PUT", target: "/state/test/fn/p/str?ack=committed", body: "y", hdr: []string{"Content-Type", "text/plain"}, status: 200,
			check: committedReceipt},
		{name: "PUT ack=accepted is 202 with Location", method: "PUT", target: "/state/test/fn/p/str?ack=accepted", body: "z", hdr: []string{"Content-Type", "text/plain"},
			status: 202, has: []string{"Location"}, check: accepted},
		{name: "PUT Prefer respond-async is 202 with Location", method: "PUT", target: "/state/test/fn/p/str", body: "w",
			hdr: []string{"Content-Type", "text/plain", "Prefer", "respond-async"}, status: 202, has: []string{"Location"}, check: accepted},
		{name: "PUT with a reason is audited", method: "PUT", target: "/state/test/fn/p/b", body: "false", hdr: []string{"Content-Type", "text/plain", "Statefun-Reason", "fix ticket 7"},
			status: 200, check: func(t *testing.T, r *response) {
				rc := receipt(t, r)
				a := send(t, api, "GET", "/audit?mutation="+rc.Mutation, nil)
				if !strings.Contains(string(a.body), `"reason": "fix ticket 7"`) || !strings.Contains(string(a.body), `"principal": "anonymous"`) {
					t.Errorf("audit %s", a.body)
				}
			}},
		{name: "PUT If-Match of the current version", method: "PUT", target: "/state/test/fn/p/i32", body: "12", hdr: []string{"Content-Type", "text/plain"}, status: 200,
			pre: func(t *testing.T, c *statusCase) { c.hdr = append(c.hdr, "If-Match", hdrEtag("/state/test/fn/p/i32")) },
			check: func(t *testing.T, r *response) {
				if rc := receipt(t, r); rc.PreviousVersion == nil || etag(mustUint(t, *rc.PreviousVersion)) != r.Request.Header.Get("If-Match") {
					t.Errorf("receipt %s after If-Match %s", r.body, r.Request.Header.Get("If-Match"))
				}
			}},
		{name: "PUT If-None-Match * of an empty entry", method: "PUT", target: "/state/test/fn/p2/i32", body: "1",
			hdr: []string{"Content-Type", "text/plain", "If-None-Match", "*"}, status: 200},
		{name: "PUT to an unregistered state with Statefun-Type", method: "PUT", target: "/state/test/fn/p/free", body: "\x01\x02",
			hdr: []string{"Statefun-Type", blobType}, status: 200},
		{name: "PUT to an unregistered state takes the existing typename", method: "PUT", target: "/state/test/fn/p/free", body: "\x03", status: 200,
			check: func(t *testing.T, r *response) {
				if got := send(t, api, "GET", "/state/test/fn/p/free", nil); got.Header.Get("Statefun-Type") != blobType {
					t.Errorf("Statefun-Type %s", got.Header.Get("Statefun-Type"))
				}
			}},

		// Each would read the whole audit log: no index serves it.
		{name: "400 the audit log by state alone", method: "GET", target: "/audit?state=i32", status: 400,
			contains: []string{"?state= alone would read the whole audit log", "?mutation=, ?principal=, ?id= or ?namespace="}},
		{name: "400 the audit log by type without namespace", method: "GET", target: "/audit?type=fn&state=i32", status: 400,
			contains: []string{"?type= with ?state= alone"}},
		{name: "400 no typename", method: "PUT", target: "/state/test/fn/p/unknown", body: "x", hdr: []string{"Content-Type", "text/plain"}, status: 400,
			contains: []string{"no typename"}},
		{name: "400 Statefun-Type that is not a typename", method: "PUT", target: "/state/test/fn/p/other", body: "x",
			hdr: []string{"Content-Type", "text/plain", "Statefun-Type", "nonsense"}, status: 400, contains: []string{"is not a typename"}},
		{name: "400 Statefun-Type that is not UTF-8", method: "PUT", target: "/state/test/fn/p/other", body: "x",
			hdr: []string{"Statefun-Type", "x/\xffT"}, status: 400, contains: []string{"UTF-8"}},
		{name: "400 Statefun-Type that is not UTF-8, accepted", method: "PUT", target: "/state/test/fn/p/other?ack=accepted", body: "x",
			hdr: []string{"Statefun-Type", "x/\xffT"}, status: 400},
		{name: "400 Statefun-Reason that is not UTF-8", method: "PUT", target: "/state/test/fn/p/i32", body: "1",
			hdr: []string{"Content-Type", "text/plain", "Statefun-Reason", "fix \xff"}, status: 400, contains: []string{"Statefun-Reason is not valid UTF-8"}},
		{name: "400 Statefun-Reason that is not UTF-8, accepted", method: "PUT", target: "/state/test/fn/p/i32", body: "1",
			hdr: []string{"Content-Type", "text/plain", "Statefun-Reason", "fix \xff", "Prefer", "respond-async"}, status: 400},
		{name: "400 Statefun-Reason that is not UTF-8 on DELETE", method: "DELETE", target: "/state/test/fn/a/i32",
			hdr: []string{"Statefun-Reason", "\xc3"}, status: 400},
		{name: "400 Statefun-Reason that is not UTF-8 on DELETE of an address", method: "DELETE", target: "/state/test/fn/a",
			hdr: []string{"Statefun-Reason", "\xc3"}, status: 400},
		{name: "400 bad ack", method: "PUT", target: "/state/test/fn/p/i32?ack=sometimes", body: "1", hdr: []string{"Content-Type", "text/plain"}, status: 400,
			contains: []string{"want committed, applied or accepted"}},
		{name: "400 If-Match that is not a version", method: "PUT", target: "/state/test/fn/p/i32", body: "1",
			hdr: []string{"Content-Type", "text/plain", "If-Match", "7"}, status: 400, contains: []string{"If-Match"}},
		{name: "400 If-None-Match that is not a list of entity tags", method: "PUT", target: "/state/test/fn/p/i32", body: "1",
			hdr: []string{"Content-Type", "text/plain", "If-None-Match", `"7", *`}, status: 400, contains: []string{"If-None-Match"}},
		{name: "400 envelope that is not JSON", method: "PUT", target: "/state/test/fn/p/i32", body: "{", hdr: []string{"Content-Type", "application/json"}, status: 400,
			contains: []string{"not the JSON envelope"}},
		{name: "400 envelope without a value", method: "PUT", target: "/state/test/fn/p/i32", body: `{"state": "i32"}`, hdr: []string{"Content-Type", "application/json"},
			status: 400, contains: []string{`neither \"value\" nor \"valueBase64\"`}},
		{name: "400 envelope whose value and valueBase64 disagree", method: "PUT", target: "/state/test/fn/p/i32", body: `{"value": 1, "valueBase64": "DSoAAAA="}`,
			hdr: []string{"Content-Type", "application/json"}, status: 400, contains: []string{"disagree"}},
		{name: "409 Statefun-Type other than the registered one", method: "PUT", target: "/state/test/fn/p/i32", body: "\x09\x01\x00\x00\x00\x00\x00\x00\x00",
			hdr: []string{"Statefun-Type", types.Long}, status: 409, contains: []string{"registered state", types.Int}},
		{name: "409 envelope typename other than the registered one", method: "PUT", target: "/state/test/fn/p/i32", body: `{"typename": "io.statefun.types/string", "value": "x"}`,
			hdr: []string{"Content-Type", "application/json"}, status: 409},
		{name: "412 If-Match of a stale version", method: "PUT", target: "/state/test/fn/p/i32", body: "1",
			hdr: []string{"Content-Type", "text/plain", "If-Match", `"1"`}, status: 412, has: []string{"ETag"},
			check: func(t *testing.T, r *response) {
				p := r.problem(t)
				if p.CurrentVersion == nil || etag(mustUint(t, *p.CurrentVersion)) != r.Header.Get("ETag") ||
					r.Header.Get("ETag") != hdrEtag("/state/test/fn/p/i32") || p.Receipt == nil || p.Receipt.Status != "rejected" {
					t.Errorf("412 %s with ETag %s", r.body, r.Header.Get("ETag"))
				}
			}},
		{name: "412 If-None-Match * of an entry with a value", method: "PUT", target: "/state/test/fn/p/i32", body: "1",
			hdr: []string{"Content-Type", "text/plain", "If-None-Match", "*"}, status: 412, has: []string{"ETag"}, contains: []string{`"currentVersion":"`}},
		{name: "412 If-Match of an empty entry has no current version", method: "PUT", target: "/state/test/fn/p3/i32", body: "1",
			hdr: []string{"Content-Type", "text/plain", "If-Match", `"5"`}, status: 412, lacks: []string{"ETag"},
			check: problemWith(func(t *testing.T, p problem) {
				if p.CurrentVersion != nil {
					t.Errorf("currentVersion %s", *p.CurrentVersion)
				}
			})},
		{name: "413 body over the limit", api: "small", method: "PUT", target: "/state/test/fn/p/str", body: strings.Repeat("x", 65),
			hdr: []string{"Content-Type", "text/plain"}, status: 413, contains: []string{"over the limit of 64 bytes"}},
		{name: "413 limit is inclusive", api: "small", method: "PUT", target: "/state/test/fn/p/str", body: strings.Repeat("x", 64),
			hdr: []string{"Content-Type", "text/plain"}, status: 200},
		{name: "415 text for a binary user type", method: "PUT", target: "/state/test/fn/p/bin", body: "hello", hdr: []string{"Content-Type", "text/plain"}, status: 415,
			contains: []string{"no text form"}},
		{name: "415 unknown Content-Type", method: "PUT", target: "/state/test/fn/p/str", body: "x", hdr: []string{"Content-Type", "image/png"}, status: 415},
		{name: "415 malformed Content-Type", method: "PUT", target: "/state/test/fn/p/str", body: "x", hdr: []string{"Content-Type", "text/"}, status: 415},
		{name: "422 text that is not an int", method: "PUT", target: "/state/test/fn/p/i32", body: "4x", hdr: []string{"Content-Type", "text/plain"}, status: 422,
			contains: []string{"4x"}},
		{name: "422 text out of range for an int", method: "PUT", target: "/state/test/fn/p/i32", body: "3000000000", hdr: []string{"Content-Type", "text/plain"}, status: 422},
		{name: "422 bytes that do not decode as the scalar", method: "PUT", target: "/state/test/fn/p/i32", body: "\x01\x02",
			hdr: []string{"Content-Type", "application/octet-stream"}, status: 422},
		{name: "422 envelope value of the wrong kind", method: "PUT", target: "/state/test/fn/p/i32", body: `{"value": "x"}`,
			hdr: []string{"Content-Type", "application/json"}, status: 422},
		{name: "422 text that is not UTF-8 for a string", method: "PUT", target: "/state/test/fn/p/str", body: "\xff", hdr: []string{"Content-Type", "text/plain"}, status: 422},
		{name: "400 reason required", api: "reason", method: "PUT", target: "/state/test/fn/p/str", body: "x", hdr: []string{"Content-Type", "text/plain"}, status: 400,
			contains: []string{"Statefun-Reason"}},
		{name: "reason given where required", api: "reason", method: "PUT", target: "/state/test/fn/p/str", body: "x",
			hdr: []string{"Content-Type", "text/plain", "Statefun-Reason", "because"}, status: 200},

		// Deletes.
		{name: "DELETE an entry", method: "DELETE", target: "/state/test/fn/d/str", status: 200,
			pre: func(t *testing.T, c *statusCase) { mustPut(t, api, "/state/test/fn/d/str", "text/plain", "x") },
			check: func(t *testing.T, r *response) {
				rc := receipt(t, r)
				if rc.Status != "committed" || rc.Version != nil || rc.PreviousVersion == nil {
					t.Errorf("receipt %s", r.body)
				}
				if got := send(t, api, "GET", "/state/test/fn/d/str", nil); got.StatusCode != 404 {
					t.Errorf("after DELETE: %s", got.Status)
				}
			}},
		{name: "DELETE of an empty entry is 404 with the receipt", method: "DELETE", target: "/state/test/fn/d/str", status: 404,
			check: func(t *testing.T, r *response) {
				p := r.problem(t)
				if p.Receipt == nil || p.Receipt.Status != "rejected" {
					t.Fatalf("404 %s", r.body)
				}
				rejected = p.Receipt.Mutation
			}},
		{name: "DELETE If-Match of a stale version", method: "DELETE", target: "/state/test/fn/a/i32", hdr: []string{"If-Match", `"1"`}, status: 412,
			has: []string{"ETag"}, contains: []string{`"currentVersion":"`}},
		{name: "DELETE ack=accepted", method: "DELETE", target: "/state/test/fn/d/i32?ack=accepted", status: 202, has: []string{"Location"},
			pre:   func(t *testing.T, c *statusCase) { mustPut(t, api, "/state/test/fn/d/i32", "text/plain", "1") },
			check: accepted},
		{name: "DELETE an address", method: "DELETE", target: "/state/test/fn/d2", status: 200,
			pre: func(t *testing.T, c *statusCase) {
				mustPut(t, api, "/state/test/fn/d2/str", "text/plain", "x")
				mustPut(t, api, "/state/test/fn/d2/i32", "text/plain", "1")
			},
			check: func(t *testing.T, r *response) {
				if rc := receipt(t, r); rc.Status != "committed" {
					t.Errorf("receipt %s", r.body)
				}
				if got := send(t, api, "GET", "/state/test/fn/d2", nil); !strings.Contains(string(got.body), `"entries": []`) {
					t.Errorf("after DELETE: %s", got.body)
				}
			}},
		{name: "DELETE an address with no state", method: "DELETE", target: "/state/test/fn/d2", status: 404, contains: []string{`"receipt"`}},
		{name: "DELETE an address with a condition", method: "DELETE", target: "/state/test/fn/d2", hdr: []string{"If-Match", `"1"`}, status: 400},
		{name: "DELETE an address ack=accepted", method: "DELETE", target: "/state/test/fn/d3?ack=accepted", status: 202, has: []string{"Location"},
			pre:   func(t *testing.T, c *statusCase) { mustPut(t, api, "/state/test/fn/d3/str", "text/plain", "x") },
			check: accepted},

		// Bad addresses.
		{name: "400 empty segment", method: "GET", target: "/state/test/fn//i32", status: 400, contains: []string{"segment 3 of the path is empty"}},
		{name: "400 empty segment on DELETE, not a redirect to another address", method: "DELETE", target: "/state/test/fn//i32", status: 400,
			check: func(t *testing.T, r *response) {
				if send(t, api, "GET", "/state/test/fn/a/i32", nil).StatusCode != 200 {
					t.Error("the entry is gone")
				}
			}},
		{name: "400 trailing slash", method: "GET", target: "/state/test/fn/", status: 400},
		{name: "400 too many segments", method: "GET", target: "/state/test/fn/a/str/x", status: 400, contains: []string{"5 segments", "%2F"}},
		{name: "400 bad percent-encoding (Go's server)", method: "GET", target: "/state/test/fn/%ZZ/str", status: 400, bare: true},
		{name: "400 segment over the size limit", method: "GET", target: "/state/test/fn/" + strings.Repeat("x", MaxSegmentBytes+1) + "/str", status: 400,
			contains: []string{"over the limit"}},
		{name: "400 invalid UTF-8", method: "GET", target: "/state/test/fn/%FF/str", status: 400, contains: []string{"UTF-8"}},
		{name: "400 dot segment", method: "GET", target: "/state/test/fn/./str", status: 400, contains: []string{"%2E"}},
		{name: "400 dot-dot segment", method: "PUT", target: "/state/test/fn/../str", body: "x", hdr: []string{"Content-Type", "text/plain"}, status: 400},

		// Authentication.
		{name: "401 no token", api: "tokens", method: "GET", target: "/state/test/fn/a/str", status: 401, eq: map[string]string{"WWW-Authenticate": `Bearer realm="statefun"`}},
		{name: "401 unknown token", api: "tokens", method: "GET", target: "/state/test/fn/a/str", hdr: []string{"Authorization", "Bearer not-a-token-of-ours"}, status: 401,
			eq: map[string]string{"WWW-Authenticate": `Bearer realm="statefun", error="invalid_token"`}},
		{name: "401 another scheme", api: "tokens", method: "GET", target: "/state/test/fn/a/str", hdr: []string{"Authorization", "Basic " + tokenBoth.Secret}, status: 401,
			has: []string{"WWW-Authenticate"}},
		{name: "read token reads", api: "tokens", method: "GET", target: "/state/test/fn/a/str", hdr: []string{"Authorization", "Bearer " + tokenRead.Secret}, status: 200},
		{name: "the scheme is case-insensitive", api: "tokens", method: "GET", target: "/state/test/fn/a/str", hdr: []string{"Authorization", "bearer " + tokenRead.Secret}, status: 200},
		{name: "403 write token asks for the endpoints", api: "tokens", method: "HEAD", target: "/endpoints", hdr: []string{"Authorization", "Bearer " + tokenWrite.Secret}, status: 403},
		{name: "403 write token lists the endpoints", api: "tokens", method: "GET", target: "/endpoints", hdr: []string{"Authorization", "Bearer " + tokenWrite.Secret}, status: 403},
		{name: "400 the endpoints with a parameter", method: "GET", target: "/endpoints?x=1", status: 400, contains: []string{"takes no parameters"}},
		{name: "400 the cluster with a parameter", method: "GET", target: "/cluster?x=1", status: 400, contains: []string{"takes no parameters"}},
		{name: "400 the cluster with a parameter, HEAD", method: "HEAD", target: "/cluster?x=1", status: 400},
		{name: "404 the cluster of an embedded runtime", method: "GET", target: "/cluster", status: 404, contains: []string{"runs embedded"}},
		{name: "404 the cluster of an embedded runtime, HEAD", method: "HEAD", target: "/cluster", status: 404},
		{name: "403 write token asks for the cluster", api: "tokens", method: "GET", target: "/cluster", hdr: []string{"Authorization", "Bearer " + tokenWrite.Secret}, status: 403},
		{name: "403 write token asks for the cluster, HEAD", api: "tokens", method: "HEAD", target: "/cluster", hdr: []string{"Authorization", "Bearer " + tokenWrite.Secret}, status: 403},
		{name: "400 the endpoints with a parameter, HEAD", method: "HEAD", target: "/endpoints?x=1", status: 400},
		{name: "403 write token reads", api: "tokens", method: "GET", target: "/state/test/fn/a/str", hdr: []string{"Authorization", "Bearer " + tokenWrite.Secret}, status: 403,
			contains: []string{"lacks the read scope"}},
		{name: "403 read token writes", api: "tokens", method: "PUT", target: "/state/test/fn/a/str", body: "x",
			hdr: []string{"Content-Type", "text/plain", "Authorization", "Bearer " + tokenRead.Secret}, status: 403, contains: []string{"lacks the write scope"}},
		{name: "write token writes, as its principal", api: "tokens", method: "PUT", target: "/state/test/fn/t/str", body: "x",
			hdr: []string{"Content-Type", "text/plain", "Authorization", "Bearer " + tokenWrite.Secret}, status: 200,
			check: func(t *testing.T, r *response) {
				a := send(t, api, "GET", "/audit?id=t", nil)
				if !strings.Contains(string(a.body), `"principal": "writer"`) {
					t.Errorf("audit %s", a.body)
				}
			}},
		{name: "401 audit without a token", api: "tokens", method: "GET", target: "/audit", status: 401},
		{name: "401 receipt without a token", api: "tokens", method: "GET", target: "/mutations/x", status: 401},
		{name: "403 revert with a read token", api: "tokens", method: "POST", target: "/mutations/x/revert", hdr: []string{"Authorization", "Bearer " + tokenRead.Secret}, status: 403},
		{name: "openapi.json needs no token", api: "tokens", method: "GET", target: "/openapi.json", status: 200},

		// Methods.
		{name: "405 PATCH an entry", method: "PATCH", target: "/state/test/fn/a/str", status: 405, eq: map[string]string{"Allow": "GET, HEAD, PUT, DELETE, POST"}},
		{name: "405 PUT an address", method: "PUT", target: "/state/test/fn/a", status: 405, eq: map[string]string{"Allow": "GET, HEAD, DELETE, POST"}},
		{name: "405 PUT a history", method: "PUT", target: "/state/test/fn/a/str/history", status: 405, eq: map[string]string{"Allow": "GET, HEAD"}},
		{name: "405 DELETE a namespace", method: "DELETE", target: "/state/test", status: 405, eq: map[string]string{"Allow": "GET, HEAD"}},
		{name: "405 DELETE all", method: "DELETE", target: "/state", status: 405, eq: map[string]string{"Allow": "GET, HEAD"}},
		{name: "405 POST the audit log", method: "POST", target: "/audit", status: 405, eq: map[string]string{"Allow": "GET, HEAD"}},
		{name: "405 DELETE openapi.json", method: "DELETE", target: "/openapi.json", status: 405, eq: map[string]string{"Allow": "GET, HEAD"}},
		{name: "405 GET a revert", method: "GET", target: "/mutations/x/revert", status: 405, eq: map[string]string{"Allow": "POST"}},
		{name: "405 PUT a receipt", method: "PUT", target: "/mutations/x", status: 405, eq: map[string]string{"Allow": "GET, HEAD"}},

		// Receipts and revert.
		{name: "404 unknown mutation, at once", method: "GET", target: "/mutations/nope", status: 404},
		{name: "404 unknown mutation after ?wait", method: "GET", target: "/mutations/nope?wait=50ms", status: 404},
		{name: "400 bad ?wait", method: "GET", target: "/mutations/nope?wait=soon", status: 400, contains: []string{"duration"}},
		{name: "HEAD 400 bad ?wait", method: "HEAD", target: "/mutations/nope?wait=-1s", status: 400},
		{name: "404 /mutations without an id", method: "GET", target: "/mutations", status: 404},
		{name: "404 /mutations/<id>/other", method: "GET", target: "/mutations/x/other", status: 404},
		{name: "GET a committed receipt", method: "GET", target: "/mutations/", status: 200,
			pre: func(t *testing.T, c *statusCase) {
				c.target += mustPut(t, api, "/state/test/fn/m/str", "text/plain", "x").Mutation
			},
			check: committedReceiptBody},
		{name: "HEAD a committed receipt", method: "HEAD", target: "/mutations/", status: 200, bodyIs: str(""),
			pre: func(t *testing.T, c *statusCase) {
				c.target += mustPut(t, api, "/state/test/fn/m/str", "text/plain", "y").Mutation
			}},
		{name: "revert a committed mutation", method: "POST", target: "/mutations/", status: 200, hdr: []string{"Statefun-Reason", "undo"},
			pre: func(t *testing.T, c *statusCase) {
				mustPut(t, api, "/state/test/fn/rv/i32", "text/plain", "1")
				c.target += mustPut(t, api, "/state/test/fn/rv/i32", "text/plain", "2").Mutation + "/revert"
			},
			check: func(t *testing.T, r *response) {
				committedReceiptBody(t, r)
				if got := textOf("/state/test/fn/rv/i32"); got != "1" {
					t.Errorf("after revert: %q", got)
				}
				id := strings.TrimSuffix(strings.TrimPrefix(r.Request.URL.Opaque, "/mutations/"), "/revert")
				a := send(t, api, "GET", "/audit?id=rv&state=i32", nil)
				if !strings.Contains(string(a.body), `"reverts": "`+id+`"`) || !strings.Contains(string(a.body), `"reason": "undo"`) {
					t.Errorf("audit %s", a.body)
				}
				// Again: the entry no longer holds what the mutation wrote.
				again := send(t, api, "POST", r.Request.URL.Opaque, nil)
				if again.StatusCode != 412 || !strings.Contains(string(again.body), `"currentVersion"`) {
					t.Errorf("second revert: %s %s", again.Status, again.body)
				}
			}},
		{name: "revert a delete of an address", method: "POST", target: "/mutations/", status: 200,
			pre: func(t *testing.T, c *statusCase) {
				mustPut(t, api, "/state/test/fn/rv2/str", "text/plain", "x")
				mustPut(t, api, "/state/test/fn/rv2/i32", "text/plain", "1")
				r := send(t, api, "DELETE", "/state/test/fn/rv2", nil)
				c.target += receipt(t, r).Mutation + "/revert"
			},
			check: func(t *testing.T, r *response) {
				var rcs []receiptJSON
				r.json(t, &rcs)
				if len(rcs) != 2 || textOf("/state/test/fn/rv2/str") != "x" || textOf("/state/test/fn/rv2/i32") != "1" {
					t.Errorf("revert %s", r.body)
				}
			}},
		{name: "400 revert with a reason that is not UTF-8", method: "POST", target: "/mutations/", hdr: []string{"Statefun-Reason", "\xfe"}, status: 400,
			pre: func(t *testing.T, c *statusCase) {
				c.target += mustPut(t, api, "/state/test/fn/rv4/str", "text/plain", "x").Mutation + "/revert"
			}},
		{name: "404 revert an unknown mutation", method: "POST", target: "/mutations/nope/revert", status: 404},
		{name: "409 revert a rejected mutation", method: "POST", target: "/mutations/", status: 409,
			pre: func(t *testing.T, c *statusCase) { c.target += rejected + "/revert" }, contains: []string{"rejected"}},
		{name: "400 revert without a required reason", api: "reason", method: "POST", target: "/mutations/", status: 400,
			pre: func(t *testing.T, c *statusCase) {
				c.target += mustPut(t, api, "/state/test/fn/rv3/str", "text/plain", "x").Mutation + "/revert"
			}},

		// Listings and the audit log.
		{name: "GET /state", method: "GET", target: "/state", status: 200, contains: []string{`"namespaces": [`, `"test"`}},
		{name: "GET /state/<namespace>", method: "GET", target: "/state/test", status: 200, check: func(t *testing.T, r *response) {
			var out struct{ Types []typeInfo }
			r.json(t, &out)
			if !slices.Contains(out.Types, typeInfo{Namespace: "test", Type: "fn", Registered: true, HoldsState: true, StatesCount: len(fnSpecs)}) {
				t.Errorf("types %s", r.body)
			}
		}},
		{name: "GET the ids of a type, paged", method: "GET", target: "/state/test/fn?prefix=p&limit=1", status: 200, check: func(t *testing.T, r *response) {
			var page struct {
				IDs  []string
				Next *string
			}
			r.json(t, &page)
			if !slices.Equal(page.IDs, []string{"p"}) || page.Next == nil || *page.Next != "p" {
				t.Fatalf("page %s", r.body)
			}
			r2 := send(t, api, "GET", "/state/test/fn?prefix=p&limit=1&after=p", nil)
			page.Next = nil
			r2.json(t, &page)
			if !slices.Equal(page.IDs, []string{"p2"}) || page.Next != nil { // p3 was never written (412)
				t.Errorf("next page %s", r2.body)
			}
		}},
		{name: "400 limit out of range", method: "GET", target: "/state/test/fn?limit=0", status: 400},
		{name: "GET the entries of an address", method: "GET", target: "/state/test/fn/a", status: 200, check: func(t *testing.T, r *response) {
			var out struct {
				Entries    []entryInfo
				Registered []specInfo
			}
			r.json(t, &out)
			names := map[string]entryInfo{}
			for _, e := range out.Entries {
				names[e.State] = e
			}
			if e := names["extra"]; e.Registered || e.Typename != "test/Other" || names["i32"].Size != 5 || !names["i32"].Registered || names["ttl"].ExpiresAt == nil {
				t.Errorf("entries %s", r.body)
			}
			if !slices.Contains(out.Registered, specInfo{State: "ttl", Typename: types.String, Expiration: "after-write", ExpireAfter: "1h0m0s"}) {
				t.Errorf("registered %s", r.body)
			}
		}},
		{name: "GET 304 If-None-Match of the current version", method: "GET", target: "/state/test/fn/a/str", status: 304, has: []string{"ETag", "Vary"}, bodyIs: str(""),
			pre: func(t *testing.T, c *statusCase) { c.hdr = []string{"If-None-Match", `"1", ` + hdrEtag(c.target)} }},
		{name: "HEAD 304 If-None-Match *", method: "HEAD", target: "/state/test/fn/a/str", hdr: []string{"If-None-Match", "*"}, status: 304, has: []string{"ETag"}},
		{name: "GET 412 If-Match of another version", method: "GET", target: "/state/test/fn/a/str", hdr: []string{"If-Match", `"1", W/"2"`}, status: 412,
			has: []string{"ETag"}, contains: []string{`"currentVersion":"`}},
		{name: "HEAD 412 If-Match of a weak tag", method: "HEAD", target: "/state/test/fn/a/str", status: 412, has: []string{"ETag"},
			pre: func(t *testing.T, c *statusCase) { c.hdr = []string{"If-Match", "W/" + hdrEtag(c.target)} }},
		{name: "HEAD the entries of an address", method: "HEAD", target: "/state/test/fn/a", status: 200, bodyIs: str("")},
		{name: "HEAD the ids of a type", method: "HEAD", target: "/state/test/fn", status: 200},
		{name: "HEAD /state/<namespace>", method: "HEAD", target: "/state/test", status: 200},
		{name: "HEAD /state", method: "HEAD", target: "/state", status: 200},
		{name: "HEAD the audit log", method: "HEAD", target: "/audit", status: 200},
		{name: "GET the audit log, filtered", method: "GET", target: "/audit?namespace=test&type=fn&id=a&state=str", status: 200, check: func(t *testing.T, r *response) {
			var out struct{ Records []auditJSON }
			r.json(t, &out)
			if len(out.Records) != 1 || out.Records[0].Op != "put" || out.Records[0].Before != nil {
				t.Errorf("records %s", r.body)
			}
		}},
		{name: "GET the audit log in a time range", method: "GET", target: "/audit?id=a&until=2000-01-01T00:00:00Z", status: 200, contains: []string{`"records": []`}},
		{name: "400 audit since that is not a time", method: "GET", target: "/audit?since=yesterday", status: 400},
		{name: "HEAD 400 audit until that is not a time", method: "HEAD", target: "/audit?until=2000-01-01", status: 400},
		{name: "400 audit limit out of range", method: "GET", target: "/audit?limit=0", status: 400},
		// Dead letters of the Kafka ingresses (deadletters_test.go has the rest).
		{name: "GET the dead-letter summary", method: "GET", target: "/ingresses", status: 200, contains: []string{`"ingresses": []`}},
		{name: "HEAD the dead-letter summary", method: "HEAD", target: "/ingresses", status: 200},
		{name: "400 dead-letter summary with a query", method: "GET", target: "/ingresses?x=1", status: 400, contains: []string{"?x="}},
		{name: "HEAD 400 dead-letter summary with a query", method: "HEAD", target: "/ingresses?x=1", status: 400},
		{name: "GET dead letters of an ingress without any", method: "GET", target: "/ingresses/test/in/dead-letters", status: 200,
			contains: []string{`"deadLetters": []`, `"next": null`}},
		{name: "HEAD dead letters", method: "HEAD", target: "/ingresses/test/in/dead-letters?limit=5", status: 200},
		{name: "400 dead letters with a bad partition", method: "GET", target: "/ingresses/test/in/dead-letters?partition=-1", status: 400, contains: []string{"?partition="}},
		{name: "HEAD 400 dead letters with a bad limit", method: "HEAD", target: "/ingresses/test/in/dead-letters?limit=0", status: 400},
		{name: "404 below an ingress", method: "GET", target: "/ingresses/test/in", status: 404},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.pre != nil {
				c.pre(t, &c)
			}
			base, ok := apis[c.api]
			if !ok {
				t.Fatalf("no API %q", c.api)
			}
			start := time.Now()
			r := send(t, base, c.method, c.target, []byte(c.body), c.hdr...)
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("the answer took %v", took)
			}
			checkAnswer(t, &c, r)
		})
	}

	if err := eng.Err(); err != nil {
		t.Fatalf("a request stopped the engine: %v", err)
	}
	t.Run("ids round-trip", func(t *testing.T) { testIDsRoundTrip(t, api) })
	t.Run("every operation: 401 and 403", func(t *testing.T) { testAuthEveryOperation(t, apis["tokens"]) })
	t.Run("every operation: bad address", func(t *testing.T) { testBadAddressEveryOperation(t, api) })
	t.Run("every operation: 421 forged Host", func(t *testing.T) { testForgedHostEveryOperation(t, api) })
	t.Run("503 partition queue full", testBusy)
	t.Run("503 runtime closed", testClosed)

	// That every status the document lists was produced by some test is
	// checked once the whole package ran (TestMain, checkStatusCoverage).
}

// checkAnswer checks an answer against its case.
func checkAnswer(t *testing.T, c *statusCase, r *response) {
	t.Helper()
	if r.StatusCode != c.status {
		t.Fatalf("%s %s: %s, want %d\n%s", c.method, c.target, r.Status, c.status, r.body)
	}
	if r.StatusCode >= 400 && !c.bare {
		if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("Content-Type %q", ct)
		}
		if c.method != "HEAD" {
			if p := r.problem(t); p.Status != r.StatusCode || p.Detail == "" || p.Title == "" || p.Type != "about:blank" {
				t.Errorf("problem %s", r.body)
			}
		}
	}
	for _, h := range c.has {
		if r.Header.Get(h) == "" {
			t.Errorf("no %s header", h)
		}
	}
	for _, h := range c.lacks {
		if v := r.Header.Get(h); v != "" {
			t.Errorf("%s: %s, want none", h, v)
		}
	}
	for h, want := range c.eq {
		if got := r.Header.Get(h); got != want {
			t.Errorf("%s: %q, want %q", h, got, want)
		}
	}
	if c.bodyIs != nil && string(r.body) != *c.bodyIs {
		t.Errorf("body %q, want %q", r.body, *c.bodyIs)
	}
	for _, s := range c.contains {
		if !strings.Contains(string(r.body), s) {
			t.Errorf("body lacks %q:\n%s", s, r.body)
		}
	}
	if c.check != nil {
		c.check(t, r)
	}
}

func committedReceiptBody(t *testing.T, r *response) {
	t.Helper()
	var rc receiptJSON
	r.json(t, &rc)
	if rc.Status != "committed" || rc.Version == nil || rc.Checkpoint == nil {
		t.Errorf("receipt %s", r.body)
	}
}

func mustUint(t testing.TB, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("version %q: %v", s, err)
	}
	return v
}

// testIDsRoundTrip writes, reads and lists ids that need escaping.
func testIDsRoundTrip(t *testing.T, api string) {
	ids := []string{"a/b", "/lead", "trail/", "nul\x00", "\x00\x01\x00", "100%", "%2F", "with space", "😀", "ü/é?#&=+;,", ".", "..", "a/../b", strings.Repeat("€", MaxSegmentBytes/3)}
	for _, id := range ids {
		target := "/state/test/fn/" + escapeSegment(id) + "/str"
		rc := mustPut(t, api, target, "text/plain", id)
		r := send(t, api, "GET", target, nil)
		if r.StatusCode != 200 || string(r.body) != id {
			t.Errorf("GET %s: %s %q", target, r.Status, r.body)
		}
		var list struct{ ID string }
		send(t, api, "GET", "/state/test/fn/"+escapeSegment(id), nil).json(t, &list)
		if list.ID != id {
			t.Errorf("the entries of %q name the id %q", id, list.ID)
		}
		var page struct{ IDs []string }
		send(t, api, "GET", "/state/test/fn?limit=1&prefix="+url.QueryEscape(id), nil).json(t, &page)
		if len(page.IDs) != 1 || page.IDs[0] != id {
			t.Errorf("the ids with prefix %q: %q", id, page.IDs)
		}
		var audit struct{ Records []auditJSON }
		send(t, api, "GET", "/audit?mutation="+url.QueryEscape(rc.Mutation), nil).json(t, &audit)
		if len(audit.Records) != 1 || audit.Records[0].ID != id {
			t.Errorf("audit of %q: %+v", id, audit.Records)
		}
	}
}

// fillTemplate makes a path of a documented template.
func fillTemplate(tmpl string, vals map[string]string) string {
	return regexp.MustCompile(`\{[a-z]+\}`).ReplaceAllStringFunc(tmpl, func(v string) string {
		return vals[strings.Trim(v, "{}")]
	})
}

var exampleVals = map[string]string{"namespace": "test", "type": "fn", "id": "a", "state": "str", "mutation": "nope", "name": "in", "import": "import-x", "job": "0a"}

// testAuthEveryOperation: every operation that needs a token answers 401
// without one and 403 with a token that lacks its scope.
func testAuthEveryOperation(t *testing.T, api string) {
	for _, op := range theSpec(t).ops {
		sec := asAnyList(op.node["security"])
		if len(sec) == 0 {
			continue
		}
		scopes := asList(mapOf(sec[0])["bearerAuth"])
		target := fillTemplate(op.template, exampleVals)
		r := send(t, api, op.method, target, nil)
		if r.StatusCode != 401 {
			t.Errorf("%s without a token: %s", op.key, r.Status)
		}
		if len(scopes) == 0 {
			continue // any valid token may call it (GET /whoami)
		}
		other := tokenWrite
		if slices.Contains(scopes, ScopeWrite) {
			other = tokenRead
		}
		r = send(t, api, op.method, target, nil, "Authorization", "Bearer "+other.Secret)
		if r.StatusCode != 403 {
			t.Errorf("%s with a %v token: %s", op.key, other.Scopes, r.Status)
		}
	}
}

// testForgedHostEveryOperation: every operation answers a Host that is
// not a loopback name with a 421 (the API has no tokens), before it reads
// or changes anything.
func testForgedHostEveryOperation(t *testing.T, api string) {
	for _, op := range theSpec(t).ops {
		r := sendAs(t, api, "rebound.example:8070", op.method, fillTemplate(op.template, exampleVals), []byte("x"), "Statefun-Type", "x/T")
		if r.StatusCode != 421 {
			t.Errorf("%s with a forged Host: %s, want 421", op.key, r.Status)
		}
	}
}

// testBadAddressEveryOperation: every operation with an address refuses
// a segment over the size limit with a 400 (a mutation id with a 404).
func testBadAddressEveryOperation(t *testing.T, api string) {
	for _, op := range theSpec(t).ops {
		if !strings.Contains(op.template, "{") {
			continue
		}
		vals := map[string]string{}
		for k, v := range exampleVals {
			vals[k] = v
		}
		long := strings.Repeat("x", MaxSegmentBytes+1)
		for _, k := range []string{"namespace", "type", "id", "state", "mutation", "name", "job"} {
			if strings.Contains(op.template, "{"+k+"}") {
				vals[k] = long
			}
		}
		r := send(t, api, op.method, fillTemplate(op.template, vals), nil)
		want := 400
		// A dead letter's id is a mutation id: unknown, not malformed.
		// A job's id too.
		if strings.HasPrefix(op.template, "/mutations/") || strings.HasPrefix(op.template, "/dead-letters/messages/") || strings.HasPrefix(op.template, "/jobs/") {
			want = 404
		}
		if r.StatusCode != want {
			t.Errorf("%s with over-long segments: %s, want %d", op.key, r.Status, want)
		}
	}
}

// testBusy fills a partition's queue: the engine's only partition is held
// in its clock, between taking a read from its queue and stepping it, so
// the queue holds one event, the limit.
func testBusy(t *testing.T) {
	var stall atomic.Bool
	stalled, release := make(chan struct{}, 1), make(chan struct{})
	now := func() time.Time {
		if stall.Load() {
			select {
			case stalled <- struct{}{}:
			default:
			}
			<-release
		}
		return time.Now()
	}
	eng := startEngine(t, engineConfig{partitions: 1, maxBacklog: 1, now: now})
	api := serve(t, eng, Options{})
	mustPut(t, api, "/state/x/y/z/s", "application/octet-stream", "v", "Statefun-Type", "x/T")
	time.Sleep(20 * time.Millisecond) // the partition goes idle

	stall.Store(true)
	// A write fills the queue (a read of an address with nothing waiting
	// is answered from the store, without a turn in the queue).
	held := make(chan *response, 1)
	go func() {
		held <- send(t, api, "PUT", "/state/x/y/held/s?ack=applied", []byte("h"), "Content-Type", "application/octet-stream", "Statefun-Type", "x/T")
	}()
	select {
	case <-stalled:
	case <-time.After(10 * time.Second):
		t.Fatal("the partition never took the held write")
	}
	time.Sleep(20 * time.Millisecond) // the write is queued (it is what woke the partition)
	for _, c := range []statusCase{
		{method: "PUT", target: "/state/x/y/z/s", body: "w", hdr: []string{"Statefun-Type", "x/T"}, status: 503,
			eq: map[string]string{"Retry-After": "1"}, contains: []string{"queue is full"}},
		{method: "DELETE", target: "/state/x/y/z/s", status: 503, eq: map[string]string{"Retry-After": "1"}},
		{method: "DELETE", target: "/state/x/y/z", status: 503, eq: map[string]string{"Retry-After": "1"}},
		{method: "PUT", target: "/state/x/y/z/s?ack=accepted", body: "w", hdr: []string{"Statefun-Type", "x/T"}, status: 503,
			eq: map[string]string{"Retry-After": "1"}},
	} {
		checkAnswer(t, &c, send(t, api, c.method, c.target, []byte(c.body), c.hdr...))
	}
	stall.Store(false)
	close(release)
	if r := <-held; r.StatusCode != 200 {
		t.Errorf("the held write: %s %s", r.Status, r.body)
	}
	// Nothing refused was applied. The held write answered once applied
	// (ack=applied); its audit record is written with its commit, a moment
	// later.
	var audit struct{ Records []auditJSON }
	waitFor(t, "the held write's audit record", func() bool {
		send(t, api, "GET", "/audit", nil).json(t, &audit)
		return len(audit.Records) >= 2
	})
	time.Sleep(20 * time.Millisecond) // a refused write, were it applied, would commit by now
	send(t, api, "GET", "/audit", nil).json(t, &audit)
	if len(audit.Records) != 2 {
		t.Errorf("%d audit records, want the first PUT's and the held one's only", len(audit.Records))
	}
	if r := send(t, api, "GET", "/state/x/y/z/s", nil); r.StatusCode != 200 || string(r.body) != "v" {
		t.Errorf("after the refused writes: %s %q", r.Status, r.body)
	}
}

// testClosed: a runtime that is shutting down answers 503 with Retry-After
// wherever the answer needs the engine.
func testClosed(t *testing.T) {
	eng := startEngine(t, engineConfig{})
	api := serve(t, eng, Options{Jobs: newJobs(t, eng)})
	rc := mustPut(t, api, "/state/x/y/z/s", "application/octet-stream", "v", "Statefun-Type", "x/T")
	eng.Close()
	vals := map[string]string{"namespace": "x", "type": "y", "id": "z", "state": "s", "mutation": rc.Mutation, "name": "n", "job": "0a"}
	for _, op := range theSpec(t).ops {
		target := fillTemplate(op.template, vals)
		if op.template == "/mutations/{mutation}" {
			target = "/mutations/unknown?wait=1s" // waits on the engine
		}
		r := send(t, api, op.method, target, []byte("w"), "Statefun-Type", "x/T")
		// send checked the answer against the document; say what it was.
		t.Logf("%s after Close: %s", op.key, r.Status)
		if r.StatusCode == 503 && r.Header.Get("Retry-After") != "5" {
			t.Errorf("%s: 503 with Retry-After %q, want 5", op.key, r.Header.Get("Retry-After"))
		}
		if r.StatusCode >= 500 && r.StatusCode != 503 {
			t.Errorf("%s: %s, want 503", op.key, r.Status)
		}
	}
	for _, target := range []string{"/state/x/y/z/s", "/state/x/y/z"} {
		if r := send(t, api, "GET", target, nil); r.StatusCode != 503 {
			t.Errorf("GET %s after Close: %s", target, r.Status)
		}
	}
}
