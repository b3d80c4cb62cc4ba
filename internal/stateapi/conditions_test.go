package stateapi

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/flink-statefun/statefun-sdk-go/v3/pkg/statefun"

	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/types"
)

// sendLines is send with header lines added, not set: a name given twice
// is sent as two field lines.
func sendLines(t testing.TB, base, method, target string, body []byte, hdr ...string) *response {
	t.Helper()
	req, err := http.NewRequest(method, base+target, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := &response{Response: resp, body: b}
	observe(t, method, target, r)
	return r
}

// TestConditionalHeaders sends If-Match and If-None-Match in every form RFC
// 9110 §13 allows (and some it does not) to every operation on an entry
// and checks the status, and that a refused mutation changed nothing. {v}
// in a header stands for the entry's current version.
func TestConditionalHeaders(t *testing.T) {
	eng := startWithFunction(t, engineConfig{})
	api := serve(t, eng, Options{})
	cases := []struct {
		name   string
		method string
		empty  bool // the entry has no value
		hdr    []string
		status int
	}{
		// If-Match: strong comparison.
		{"If-Match the version", "PUT", false, []string{"If-Match", `"{v}"`}, 200},
		{"If-Match a list holding the version", "PUT", false, []string{"If-Match", `"1", "{v}"`}, 200},
		{"If-Match a list with a foreign tag", "PUT", false, []string{"If-Match", `"{v}" , "xyzzy"`}, 200},
		{"If-Match over two field lines", "PUT", false, []string{"If-Match", `"1"`, "If-Match", `"{v}"`}, 200},
		{"If-Match a list with empty elements", "PUT", false, []string{"If-Match", `, "{v}",,`}, 200},
		{"If-Match *", "PUT", false, []string{"If-Match", "*"}, 200},
		{"If-Match a weak tag never matches", "PUT", false, []string{"If-Match", `W/"{v}"`}, 412},
		{"If-Match a foreign tag", "PUT", false, []string{"If-Match", `"xyzzy"`}, 412},
		{"If-Match a non-canonical version", "PUT", false, []string{"If-Match", `"0{v}"`}, 412},
		{"If-Match version 0", "PUT", false, []string{"If-Match", `"0"`}, 412},
		{"If-Match an empty tag", "PUT", false, []string{"If-Match", `""`}, 412},
		{"If-Match an empty list", "PUT", false, []string{"If-Match", ""}, 412},
		{"If-Match * of an empty entry", "PUT", true, []string{"If-Match", "*"}, 412},
		{"If-Match a tag of an empty entry", "PUT", true, []string{"If-Match", `"1"`}, 412},
		// If-None-Match: weak comparison.
		{"If-None-Match *", "PUT", false, []string{"If-None-Match", "*"}, 412},
		{"If-None-Match * of an empty entry", "PUT", true, []string{"If-None-Match", "*"}, 200},
		{"If-None-Match the version", "PUT", false, []string{"If-None-Match", `"{v}"`}, 412},
		{"If-None-Match the weak version", "PUT", false, []string{"If-None-Match", `W/"{v}"`}, 412},
		{"If-None-Match a list holding the version", "PUT", false, []string{"If-None-Match", `"xyzzy", W/"{v}"`}, 412},
		{"If-None-Match other tags", "PUT", false, []string{"If-None-Match", `"1", "xyzzy"`}, 200},
		{"If-None-Match a tag of an empty entry", "PUT", true, []string{"If-None-Match", `"1"`}, 200},
		{"If-None-Match an empty list", "PUT", false, []string{"If-None-Match", ""}, 200},
		{"both, If-Match holds, If-None-Match fails", "PUT", false, []string{"If-Match", `"{v}"`, "If-None-Match", `"{v}"`}, 412},
		// Malformed: 400.
		{"If-Match unquoted", "PUT", false, []string{"If-Match", "{v}"}, 400},
		{"If-Match unclosed", "PUT", false, []string{"If-Match", `"{v}`}, 400},
		{"If-Match * in a list", "PUT", false, []string{"If-Match", `*, "{v}"`}, 400},
		{"If-Match * twice", "PUT", false, []string{"If-Match", "*", "If-Match", "*"}, 400},
		{"If-Match without a comma", "PUT", false, []string{"If-Match", `"1" "{v}"`}, 400},
		{"If-Match lower-case weak", "PUT", false, []string{"If-Match", `w/"{v}"`}, 400},
		{"If-None-Match a space in a tag", "PUT", false, []string{"If-None-Match", `"a b"`}, 400},
		{"If-None-Match a quote in a tag", "PUT", false, []string{"If-None-Match", `"a"b"`}, 400},
		// GET and HEAD: If-None-Match matching is 304.
		{"GET If-None-Match the version", "GET", false, []string{"If-None-Match", `"{v}"`}, 304},
		{"GET If-None-Match the weak version", "GET", false, []string{"If-None-Match", `W/"{v}"`}, 304},
		{"GET If-None-Match *", "GET", false, []string{"If-None-Match", "*"}, 304},
		{"HEAD If-None-Match in a list", "HEAD", false, []string{"If-None-Match", `"1", "{v}"`}, 304},
		{"GET If-None-Match another version", "GET", false, []string{"If-None-Match", `"1"`}, 200},
		{"GET If-Match the version", "GET", false, []string{"If-Match", `"{v}"`}, 200},
		{"GET If-Match another version", "GET", false, []string{"If-Match", `"1"`}, 412},
		{"GET If-Match a weak tag", "GET", false, []string{"If-Match", `W/"{v}"`}, 412},
		{"GET If-Match fails before If-None-Match", "GET", false, []string{"If-Match", `"1"`, "If-None-Match", `"{v}"`}, 412},
		{"GET conditions of an empty entry are ignored", "GET", true, []string{"If-Match", `"1"`}, 404},
		{"GET malformed If-None-Match", "GET", false, []string{"If-None-Match", "abc"}, 400},
		{"HEAD malformed If-Match", "HEAD", false, []string{"If-Match", `"1`}, 400},
		// DELETE.
		{"DELETE If-Match in a list", "DELETE", false, []string{"If-Match", `"xyzzy", "{v}"`}, 200},
		{"DELETE If-Match a weak tag", "DELETE", false, []string{"If-Match", `W/"{v}"`}, 412},
		{"DELETE If-None-Match *", "DELETE", false, []string{"If-None-Match", "*"}, 412},
		{"DELETE conditions of an empty entry are ignored", "DELETE", true, []string{"If-Match", `"1"`}, 404},
		{"DELETE malformed If-Match", "DELETE", false, []string{"If-Match", "*,*"}, 400},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			target := "/state/test/fn/cond" + strconv.Itoa(i) + "/str"
			v := ""
			if !c.empty {
				rc := mustPut(t, api, target, "text/plain", "before")
				v = *rc.Version
			}
			hdr := make([]string, len(c.hdr))
			for j, h := range c.hdr {
				hdr[j] = strings.ReplaceAll(h, "{v}", v)
			}
			var body []byte
			if c.method == "PUT" {
				body, hdr = []byte("after"), append(hdr, "Content-Type", "text/plain")
			}
			r := sendLines(t, api, c.method, target, body, hdr...)
			if r.StatusCode != c.status {
				t.Fatalf("%s %q: %s, want %d\n%s", c.method, hdr, r.Status, c.status, r.body)
			}
			switch r.StatusCode {
			case 400:
				if c.method != "HEAD" && !strings.Contains(r.problem(t).Detail, "If-") {
					t.Errorf("the 400 does not name the header: %s", r.body)
				}
			case 304:
				if len(r.body) != 0 || r.Header.Get("ETag") != `"`+v+`"` {
					t.Errorf("304 with ETag %q and body %q", r.Header.Get("ETag"), r.body)
				}
			case 412:
				if !c.empty && (r.Header.Get("ETag") != `"`+v+`"` || (c.method != "HEAD" && *r.problem(t).CurrentVersion != v)) {
					t.Errorf("412 with ETag %q: %s", r.Header.Get("ETag"), r.body)
				}
			}
			after := send(t, api, "GET", target, nil)
			changed := after.StatusCode != 200 || string(after.body) != "before"
			if c.empty {
				changed = after.StatusCode != 404
			}
			if wantChange := c.status == 200 && c.method != "GET"; changed != wantChange {
				t.Errorf("after %s: the entry is %s %q (changed %v, want %v)", r.Status, after.Status, after.body, changed, wantChange)
			}
		})
	}
	t.Run("DELETE an address with an empty If-None-Match", func(t *testing.T) {
		mustPut(t, api, "/state/test/fn/condall/str", "text/plain", "x")
		r := sendLines(t, api, "DELETE", "/state/test/fn/condall", nil, "If-None-Match", "")
		if r.StatusCode != 400 || !strings.Contains(r.problem(t).Detail, "If-None-Match") {
			t.Errorf("%s %s", r.Status, r.body)
		}
	})
}

// slowType is a function that, on each message, waits for the test to
// release it and then counts the message in the state n.
var slowType = statefun.TypeNameFrom("test/slow")

var slowN = statefun.ValueSpec{Name: "n", ValueType: statefun.Int64Type}

// startSlowFunction serves test/slow; each invocation sends its id on
// entered and waits for a value on release.
func startSlowFunction(t testing.TB, entered chan<- string, release <-chan struct{}) string {
	b := statefun.StatefulFunctionsBuilder()
	err := b.WithSpec(statefun.StatefulFunctionSpec{
		FunctionType: slowType,
		States:       []statefun.ValueSpec{slowN},
		Function: statefun.StatefulFunctionPointer(func(ctx statefun.Context, _ statefun.Message) error {
			entered <- ctx.Self().Id
			<-release
			var n int64
			ctx.Storage().Get(slowN, &n)
			ctx.Storage().Set(slowN, n+1)
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

// TestConditionsEvaluatedAtApplyTime: a conditional mutation that arrives
// while an invocation of its address is in flight waits in the address's
// mailbox, and its If-Match / If-None-Match lists are evaluated against
// the entry the invocation left, not the one the request saw. The
// mutations are durable (ack=accepted: 202 once in the inbox), so the
// conditions also survive the stored form.
func TestConditionsEvaluatedAtApplyTime(t *testing.T) {
	entered, release := make(chan string), make(chan struct{})
	eng := startEngine(t, engineConfig{fnURL: startSlowFunction(t, entered, release)})
	t.Cleanup(func() { close(release) })
	api := serve(t, eng, Options{})
	msg := func() {
		v, err := types.ParseText(types.String, "ping")
		if err != nil {
			t.Fatal(err)
		}
		if err := eng.Ingest(context.Background(), &protocol.Envelope{
			Target:   &protocol.Address{Namespace: "test", Type: "slow", Id: "x"},
			Argument: &protocol.TypedValue{Typename: types.String, HasValue: true, Value: v},
		}); err != nil {
			t.Fatal(err)
		}
	}
	const target = "/state/test/slow/x/n"
	// The first invocation registers n and sets it to 1: version v1.
	msg()
	<-entered
	release <- struct{}{}
	var v1 string
	waitFor(t, "n = 1", func() bool {
		r := send(t, api, "GET", target, nil, "Accept", "text/plain")
		v1 = strings.Trim(r.Header.Get("ETag"), `"`)
		return r.StatusCode == 200 && string(r.body) == "1"
	})

	// The second invocation is in flight; n is still at v1.
	msg()
	<-entered
	if r := send(t, api, "GET", target, nil); r.Header.Get("ETag") != `"`+v1+`"` {
		t.Fatalf("while the invocation runs: %s ETag %s", r.body, r.Header.Get("ETag"))
	}
	put := func(hdr ...string) string {
		r := sendLines(t, api, "PUT", target+"?ack=accepted", []byte("100"), append(hdr, "Content-Type", "text/plain")...)
		if r.StatusCode != 202 {
			t.Fatalf("PUT %q: %s %s", hdr, r.Status, r.body)
		}
		return r.Header.Get("Location")
	}
	// Against v1 both would flip: the first would apply, the second not.
	ifMatch := put("If-Match", `"xyzzy", "`+v1+`"`)
	ifNoneMatch := put("If-None-Match", `W/"`+v1+`", "xyzzy"`)
	release <- struct{}{}

	receipt := func(loc string) receiptJSON {
		var rc receiptJSON
		send(t, api, "GET", loc+"?wait=10s", nil).json(t, &rc)
		return rc
	}
	if rc := receipt(ifMatch); rc.Status != "rejected" || !strings.Contains(rc.Reason, "If-Match") {
		t.Errorf("If-Match of the version before the invocation: %+v, want rejected", rc)
	}
	if rc := receipt(ifNoneMatch); rc.Status != "committed" {
		t.Errorf("If-None-Match of the version before the invocation: %+v, want committed", rc)
	}
	if r := send(t, api, "GET", target, nil, "Accept", "text/plain"); string(r.body) != "100" {
		t.Errorf("n = %s, want 100 (the invocation's 2, then the If-None-Match write)", r.body)
	}
}
