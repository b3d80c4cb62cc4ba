package stateapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/flink-statefun/statefun-sdk-go/v3/pkg/statefun"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/engine"
	"github.com/statefun-go/statefun/internal/invoker"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
	"github.com/statefun-go/statefun/internal/types"
)

// poisonFunction serves test/fn with the official Go SDK: it fails while
// its state "str" holds "poison", else it appends each message's text to
// its log and counts it in i64.
type poisonFunction struct {
	mu  sync.Mutex
	log map[string][]string
}

func (f *poisonFunction) start(t *testing.T) string {
	f.log = map[string][]string{}
	b := statefun.StatefulFunctionsBuilder()
	err := b.WithSpec(statefun.StatefulFunctionSpec{
		FunctionType: statefun.TypeNameFrom(fnType.String()),
		States:       fnSpecs,
		Function: statefun.StatefulFunctionPointer(func(ctx statefun.Context, msg statefun.Message) error {
			var s string
			ctx.Storage().Get(fnSpecs[4], &s)
			if s == "poison" {
				return errors.New("cannot handle a poisoned value")
			}
			var n int64
			ctx.Storage().Get(fnSpecs[2], &n)
			ctx.Storage().Set(fnSpecs[2], n+1)
			f.mu.Lock()
			f.log[ctx.Self().Id] = append(f.log[ctx.Self().Id], msg.AsString())
			f.mu.Unlock()
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

func (f *poisonFunction) seen(id string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.log[id]...)
}

// startPolicyEngine runs an engine with the poison policy: test/fn pauses
// after pauseAfter failed attempts.
func startPolicyEngine(t *testing.T, fnURL string, pauseAfter int, reg prometheus.Registerer, tweak ...func(*engine.Options)) *engine.Engine {
	t.Helper()
	db, err := store.Open("data", store.Options{Partitions: 4, FS: vfs.NewMem(), Logger: quietPebble{}})
	if err != nil {
		t.Fatal(err)
	}
	inv, err := invoker.New(invoker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	opts := engine.Options{
		Store: db, Functions: fnClient{inv, fnURL}, Metrics: engine.NewMetrics(reg),
		RetryBase: 5 * time.Millisecond, RetryMax: 20 * time.Millisecond,
		PauseAfter: func(t address.TypeName) int {
			if t == fnType {
				return pauseAfter
			}
			return 0
		},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	for _, f := range tweak {
		f(&opts)
	}
	eng, err := engine.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	eng.Start()
	t.Cleanup(func() {
		eng.Close()
		inv.Close()
		db.Close()
	})
	return eng
}

func ingestText(t *testing.T, eng *engine.Engine, id, text string) {
	t.Helper()
	v, err := types.ParseText(types.String, text)
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

// gauge reads one sample of a gauge vector by its function label.
func gauge(t *testing.T, reg *prometheus.Registry, name, function string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "function" && l.GetValue() == function {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return 0
}

// The incident, end to end with the official Go SDK through the HTTP API:
// a function fails on a poisoned state value while messages keep
// arriving; the poison policy pauses the address; the operator lists the
// failing addresses, reads the inbox, repairs the value with If-Match and
// resumes; every queued message is then processed exactly once, in
// arrival order, and the audit log tells the story.
func TestRepairIncident(t *testing.T) {
	fn := &poisonFunction{}
	reg := prometheus.NewRegistry()
	eng := startPolicyEngine(t, fn.start(t), 3, reg)
	api := serve(t, eng, Options{})
	ingestText(t, eng, "warmup", "w")
	waitFor(t, "test/fn to register its states", func() bool { return len(eng.SpecsOf(fnType)) == len(fnSpecs) })

	mustPut(t, api, "/state/test/fn/x/str", "text/plain", "poison", "Statefun-Reason", "bad import")
	for i := 1; i <= 5; i++ {
		ingestText(t, eng, "x", fmt.Sprintf("m%d", i))
	}
	var page struct {
		Failing []failingJSON `json:"failing"`
		Next    *string       `json:"next"`
	}
	waitFor(t, "the poison policy to pause x", func() bool {
		send(t, api, "GET", "/failing?type=test/fn", nil).json(t, &page)
		return len(page.Failing) == 1 && page.Failing[0].Paused
	})
	// Messages keep arriving while it is paused.
	ingestText(t, eng, "x", "m6")
	ingestText(t, eng, "x", "m7")

	f := page.Failing[0]
	if f.ID != "x" || f.Attempts != 3 || f.NextAttempt != nil || !strings.Contains(f.LastError, "500") || page.Next != nil {
		t.Fatalf("failing: %+v", page)
	}
	if g := gauge(t, reg, "statefun_paused_addresses", "test/fn"); g != 1 {
		t.Errorf("statefun_paused_addresses = %v, want 1", g)
	}
	if g := gauge(t, reg, "statefun_failing_addresses", "test/fn"); g != 1 {
		t.Errorf("statefun_failing_addresses = %v, want 1", g)
	}
	var in inboxJSON
	r := send(t, api, "GET", "/inbox/test/fn/x", nil)
	r.json(t, &in)
	if in.Paused == nil || in.Paused.Principal != "runtime" || !in.Paused.Auto || !strings.Contains(in.Paused.Reason, "after 3 failed attempts") {
		t.Fatalf("inbox pause: %s", r.body)
	}
	var texts []string
	if in.Inflight == nil || in.Inflight.Attempt != 3 || !in.Inflight.Waiting {
		t.Fatalf("inbox in flight: %s", r.body)
	}
	for _, m := range append(append([]messageJSON(nil), in.Inflight.Messages...), in.Queued.Messages...) {
		if m.Typename != types.String || m.Caller != nil || m.Size == 0 {
			t.Errorf("message %+v", m)
		}
		texts = append(texts, m.Key)
	}
	if len(texts) != 7 || in.Queued.Count != 7-len(in.Inflight.Messages) || in.Queued.OldestAt == nil {
		t.Fatalf("inbox holds %d messages (%d queued), want 7: %s", len(texts), in.Queued.Count, r.body)
	}
	if got := fn.seen("x"); len(got) != 0 {
		t.Fatalf("the function processed %v while x was poisoned", got)
	}

	// The repair: read the value, write it back conditionally, resume.
	r = send(t, api, "GET", "/state/test/fn/x/str", nil)
	mustPut(t, api, "/state/test/fn/x/str", "text/plain", "fixed", "If-Match", r.Header.Get("ETag"), "Statefun-Reason", "repair")
	r = send(t, api, "POST", "/resume/test/fn/x", []byte(`{"reason":"repaired the import"}`))
	if r.StatusCode != 200 {
		t.Fatalf("resume: %s %s", r.Status, r.body)
	}
	waitFor(t, "x's messages", func() bool { return len(fn.seen("x")) >= 7 })
	if got, want := fn.seen("x"), []string{"m1", "m2", "m3", "m4", "m5", "m6", "m7"}; !slices.Equal(got, want) {
		t.Fatalf("the function processed %v, want %v exactly once", got, want)
	}
	// The function has answered; the engine applies its results in the
	// address's next turn, which a read may come before.
	waitFor(t, "x's i64 to read 7", func() bool {
		return string(send(t, api, "GET", "/state/test/fn/x/i64", nil, "Accept", "text/plain").body) == "7"
	})
	send(t, api, "GET", "/failing", nil).json(t, &page)
	if len(page.Failing) != 0 {
		t.Fatalf("still failing: %+v", page.Failing)
	}
	if g := gauge(t, reg, "statefun_paused_addresses", "test/fn"); g != 0 {
		t.Errorf("statefun_paused_addresses = %v after the resume, want 0", g)
	}
	if g := gauge(t, reg, "statefun_failing_addresses", "test/fn"); g != 0 {
		t.Errorf("statefun_failing_addresses = %v after the resume, want 0", g)
	}
	var audit struct {
		Records []auditJSON `json:"records"`
	}
	send(t, api, "GET", "/audit?namespace=test&type=fn&id=x", nil).json(t, &audit)
	var story []string
	for _, a := range audit.Records {
		story = append(story, a.Op+" by "+a.Principal+": "+a.Reason)
	}
	want := []string{"put by anonymous: bad import", "pause by runtime: " + in.Paused.Reason, "put by anonymous: repair", "resume by anonymous: repaired the import"}
	if !slices.Equal(story, want) {
		t.Fatalf("the audit log tells\n%s\nwant\n%s", strings.Join(story, "\n"), strings.Join(want, "\n"))
	}
}

// Pause and resume by hand, of an address and of a type, with expiry,
// and the answers to bad requests.
func TestPauseRoutes(t *testing.T) {
	eng := startWithFunction(t, engineConfig{})
	api := serve(t, eng, Options{})
	reasoned := serve(t, eng, Options{RequireReason: true})

	r := send(t, api, "POST", "/pause/test/fn/p", []byte(`{"reason":"look","expiresIn":"1h"}`))
	if r.StatusCode != 200 {
		t.Fatalf("pause: %s %s", r.Status, r.body)
	}
	var rc receiptJSON
	r.json(t, &rc)
	if rc.Status != "committed" || rc.Checkpoint == nil {
		t.Fatalf("pause receipt: %s", r.body)
	}
	// The pause receipt is stored like a mutation's; it cannot be reverted.
	if r := send(t, api, "GET", "/mutations/"+rc.Mutation, nil); r.StatusCode != 200 {
		t.Fatalf("GET the pause's receipt: %s %s", r.Status, r.body)
	}
	if r := send(t, api, "POST", "/mutations/"+rc.Mutation+"/revert", nil); r.StatusCode != 409 {
		t.Fatalf("revert of a pause: %s %s", r.Status, r.body)
	}
	// A message for the paused address waits; a read and a write apply.
	ingest(t, eng, "p")
	mustPut(t, api, "/state/test/fn/p/str", "text/plain", "while paused")
	var in inboxJSON
	send(t, api, "GET", "/inbox/test/fn/p", nil).json(t, &in)
	if in.Paused == nil || in.Paused.ExpiresAt == nil || in.Inflight != nil || in.Queued.Count != 1 {
		t.Fatalf("inbox: %+v", in)
	}
	var pauses struct {
		Pauses []pauseJSON `json:"pauses"`
	}
	send(t, api, "POST", "/pause/test/fn", []byte(`{"reason":"deploy"}`))
	send(t, api, "GET", "/pauses?type=test/fn", nil).json(t, &pauses)
	if len(pauses.Pauses) != 2 || pauses.Pauses[0].ID != nil || *pauses.Pauses[1].ID != "p" {
		t.Fatalf("pauses: %+v", pauses)
	}
	// A new address of the paused type is held too.
	ingest(t, eng, "fresh")
	send(t, api, "GET", "/inbox/test/fn/fresh", nil).json(t, &in)
	if in.TypePaused == nil || in.Paused != nil || in.Queued.Count != 1 {
		t.Fatalf("inbox of a new address under a type pause: %+v", in)
	}
	for _, target := range []string{"/resume/test/fn", "/resume/test/fn/p"} {
		if r := send(t, api, "POST", target, nil); r.StatusCode != 200 {
			t.Fatalf("POST %s: %s %s", target, r.Status, r.body)
		}
	}
	waitFor(t, "the held messages", func() bool {
		r := send(t, api, "GET", "/state/test/fn/fresh/i64", nil, "Accept", "text/plain")
		return string(r.body) == "1"
	})

	// Expiry: the pause lifts by itself, audited as the runtime's.
	send(t, api, "POST", "/pause/test/fn/e", []byte(`{"expiresIn":"20ms"}`))
	waitFor(t, "the pause to expire", func() bool {
		send(t, api, "GET", "/pauses", nil).json(t, &pauses)
		return len(pauses.Pauses) == 0
	})
	var audit struct {
		Records []auditJSON `json:"records"`
	}
	// The audit is read from the store: the expiry's record becomes
	// readable once its commit is durable, a moment after /pauses shows it.
	waitFor(t, "the expiry's audit record", func() bool {
		send(t, api, "GET", "/audit?id=e", nil).json(t, &audit)
		return len(audit.Records) >= 2
	})
	if n := len(audit.Records); n != 2 || audit.Records[1].Op != "resume" || audit.Records[1].Principal != "runtime" {
		t.Fatalf("audit of an expired pause: %+v", audit.Records)
	}

	for _, c := range []struct {
		api, method, target, body string
		status                    int
		detail                    string
	}{
		{api, "POST", "/resume/test/fn/p", "", 404, "not paused"},
		{api, "POST", "/resume/test/other", "", 404, "not paused"},
		{api, "POST", "/pause/test/fn/p", "{", 400, "JSON object"},
		{api, "POST", "/pause/test/fn/p", `{"why":"x"}`, 400, "unknown field"},
		{api, "POST", "/pause/test/fn/p", `{"expiresIn":"1h","expiresAt":"2099-01-01T00:00:00Z"}`, 400, "not both"},
		{api, "POST", "/pause/test/fn/p", `{"expiresAt":"2000-01-01T00:00:00Z"}`, 400, "not in the future"},
		{api, "POST", "/pause/test/fn/p", `{"expiresIn":"-1s"}`, 400, "positive duration"},
		{api, "POST", "/resume/test/fn/p", `{"expiresIn":"1s"}`, 400, "takes no"},
		{api, "POST", "/pause/test/fn/p", `{"reason":"` + strings.Repeat("x", 70<<10) + `"}`, 413, "65536"},
		{api, "POST", "/pause/test/fn", `"` + strings.Repeat("x", 70<<10) + `"`, 413, "65536"},
		{api, "POST", "/resume/test/fn", `"` + strings.Repeat("x", 70<<10) + `"`, 413, "65536"},
		{api, "POST", "/resume/test/fn/p", `"` + strings.Repeat("x", 70<<10) + `"`, 413, "65536"},
		{api, "POST", "/pause/test", "", 404, "want /pause"},
		{reasoned, "POST", "/pause/test/fn/p", "", 400, "requires a reason"},
		{api, "GET", "/failing?type=fn", "", 400, "?type="},
		{api, "GET", "/failing?limit=0", "", 400, "?limit="},
		{api, "GET", "/failing?after=zz", "", 400, "cursor"},
		{api, "GET", "/failing?typ=test/fn", "", 400, "unknown query parameter"},
		{api, "HEAD", "/failing?type=fn", "", 400, ""},
		{api, "GET", "/pauses?type=a/b/c", "", 400, "?type="},
		{api, "HEAD", "/pauses?type=x", "", 400, ""},
		{api, "GET", "/inbox/test/fn/p?limit=5000", "", 400, "?limit="},
		{api, "HEAD", "/inbox/test/fn/p?limit=x", "", 400, ""},
		{api, "GET", "/inbox/test/fn", "", 404, "want /inbox"},
	} {
		r := send(t, c.api, c.method, c.target, []byte(c.body))
		if r.StatusCode != c.status {
			t.Errorf("%s %s: %s, want %d\n%s", c.method, c.target, r.Status, c.status, r.body)
			continue
		}
		if c.detail != "" && !strings.Contains(r.problem(t).Detail, c.detail) {
			t.Errorf("%s %s: detail %q lacks %q", c.method, c.target, r.problem(t).Detail, c.detail)
		}
	}
}

// After Close every repair route answers 503.
func TestRepairRoutesClosed(t *testing.T) {
	eng := startEngine(t, engineConfig{})
	api := serve(t, eng, Options{})
	eng.Close()
	for _, c := range [][2]string{{"GET", "/failing"}, {"HEAD", "/failing"}, {"GET", "/pauses"}, {"HEAD", "/pauses"},
		{"GET", "/inbox/x/y/z"}, {"HEAD", "/inbox/x/y/z"}, {"POST", "/pause/x/y/z"}, {"POST", "/pause/x/y"},
		{"POST", "/resume/x/y/z"}, {"POST", "/resume/x/y"}} {
		if r := send(t, api, c[0], c[1], nil); r.StatusCode != 503 {
			t.Errorf("%s %s after Close: %s", c[0], c[1], r.Status)
		}
	}
}

// GET /failing?group=error: four addresses failing on the same bad value
// are one group of four, with its sample of ids and the oldest failure;
// the grouping takes the id and numbers out of the error.
func TestFailingGroupedByError(t *testing.T) {
	fn := &poisonFunction{}
	eng := startPolicyEngine(t, fn.start(t), 3, prometheus.NewRegistry())
	api := serve(t, eng, Options{})
	ingestText(t, eng, "warmup", "w")
	waitFor(t, "test/fn to register its states", func() bool { return len(eng.SpecsOf(fnType)) == len(fnSpecs) })
	ids := []string{"g1", "g2", "g3", "g4"}
	for _, id := range ids {
		mustPut(t, api, "/state/test/fn/"+id+"/str", "text/plain", "poison", "Statefun-Reason", "bad import")
		ingestText(t, eng, id, "m")
	}
	var page struct {
		Groups []failingGroupJSON `json:"groups"`
		Next   *string            `json:"next"`
	}
	waitFor(t, "four addresses failing", func() bool {
		send(t, api, "GET", "/failing?group=error&type=test/fn", nil).json(t, &page)
		return len(page.Groups) == 1 && page.Groups[0].Addresses == 4
	})
	g := page.Groups[0]
	if g.Namespace != "test" || g.Type != "fn" || !slices.Equal(g.Sample, ids) || g.Since.IsZero() || g.Example == "" || page.Next != nil {
		t.Errorf("the group: %+v", page)
	}
	for _, c := range []struct{ target, want string }{
		{"/failing?group=error&limit=5", "takes no ?after= or ?limit="},
		{"/failing?group=type", "?group= takes error"},
	} {
		if r := send(t, api, "GET", c.target, nil); r.StatusCode != 400 || !strings.Contains(string(r.body), c.want) {
			t.Errorf("GET %s: %s %s", c.target, r.Status, r.body)
		}
	}
}

func TestErrorClass(t *testing.T) {
	for _, c := range []struct{ err, id, want string }{
		{`invoker: POST http://f:8000/statefun: function answered 500: "count is -5 for order-17"`, "order-17", `invoker: POST http://f:N/statefun: function answered N: "count is -N for <id>"`},
		{"cannot connect: dial tcp 127.0.0.1:9: connection refused", "a", "cannot connect: dial tcp N.N.N.N:N: connection refused"},
	} {
		if got := errorClass(c.err, c.id); got != c.want {
			t.Errorf("errorClass(%q, %q) = %q; want %q", c.err, c.id, got, c.want)
		}
	}
}
