package stateapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/engine"
	"github.com/statefun-go/statefun/internal/jobs"
	"github.com/statefun-go/statefun/internal/store"
)

// engineDBs maps each engine startEngine made to its store.
var engineDBs sync.Map

// newJobs returns a job manager over eng and its store, closed when t
// ends; every type but test/gone is deployed.
func newJobs(t testing.TB, eng *engine.Engine) *jobs.Manager {
	t.Helper()
	db, ok := engineDBs.Load(eng)
	if !ok {
		t.Fatal("no store for this engine: start it with startEngine")
	}
	m, err := jobs.New(jobs.Config{Engine: eng, Store: db.(*store.DB), MaxRunning: 16,
		Deployed: func(t address.TypeName) bool { return t != address.TypeName{Namespace: "test", Name: "gone"} }})
	if err != nil {
		t.Fatal(err)
	}
	m.Start()
	t.Cleanup(m.Close)
	return m
}

// startJob creates a job over api and returns its id.
func startJob(t testing.TB, api, spec string) string {
	t.Helper()
	r := send(t, api, "POST", "/jobs", []byte(spec), "Content-Type", "application/json")
	var j jobs.Record
	r.json(t, &j)
	if r.StatusCode != 201 || j.ID == "" {
		t.Fatalf("POST /jobs %s: %s %s", spec, r.Status, r.body)
	}
	return j.ID
}

// awaitJob polls a job until cond holds.
func awaitJob(t testing.TB, api, id string, cond func(jobs.Record) bool) jobs.Record {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var j jobs.Record
		send(t, api, "GET", "/jobs/"+id, nil).json(t, &j)
		if cond(j) {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s: %+v", id, j)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestJobOverAPI runs a CEL job against the real engine: preview, run,
// the job's id in each write's audit record, and a revert that leaves an
// entry changed since alone.
func TestJobOverAPI(t *testing.T) {
	eng := startWithFunction(t, engineConfig{})
	api := serve(t, eng, Options{Jobs: newJobs(t, eng)})
	for i := range 30 {
		mustPut(t, api, fmt.Sprintf("/state/test/fn/j-%02d/i32", i), "text/plain", fmt.Sprint(i))
	}
	mustPut(t, api, "/state/test/fn/j-00/str", "text/plain", "left alone")
	spec := `{"select":{"type":"test/fn","idPrefix":"j-","state":"i32","where":"value >= 10"},"action":{"op":"set","expr":"value * 3"},"reason":"triple"}`

	var pv jobs.Preview
	r := send(t, api, "POST", "/jobs/preview?sample=2", []byte(spec))
	r.json(t, &pv)
	if r.StatusCode != 200 || pv.Counts.Scanned != 31 || pv.Counts.Matched != 20 || pv.Counts.Changed != 20 || len(pv.Sample) != 2 ||
		pv.Sample[0].ID != "j-10" || string(pv.Sample[0].Before.Value) != "10" || string(pv.Sample[0].After.Value) != "30" {
		t.Fatalf("preview: %s %s", r.Status, r.body)
	}

	id := startJob(t, api, spec)
	j := awaitJob(t, api, id, func(j jobs.Record) bool { return j.Status != jobs.StatusRunning })
	if j.Status != jobs.StatusDone || j.Counts.Changed != 20 || j.Counts.Matched != 20 || j.Counts.Scanned != 31 {
		t.Fatalf("job: %+v", j)
	}
	if got := getText(t, api, "/state/test/fn/j-12/i32"); got != "36" {
		t.Fatalf("j-12 = %s, want 36", got)
	}
	var writes struct {
		Records []auditJSON `json:"records"`
	}
	send(t, api, "GET", "/jobs/"+id+"/writes", nil).json(t, &writes)
	if len(writes.Records) != 20 {
		t.Fatalf("%d writes in the audit log, want 20", len(writes.Records))
	}
	for _, a := range writes.Records {
		if !strings.Contains(a.Mutation, jobs.Marker(id)) || a.Reason != "job "+id+": triple" || a.Principal != "anonymous" {
			t.Fatalf("audit record %+v does not carry the job", a)
		}
	}

	// Revert: j-15 changed since is listed and left alone.
	mustPut(t, api, "/state/test/fn/j-15/i32", "text/plain", "-1")
	r = send(t, api, "POST", "/jobs/"+id+"/revert", nil)
	var rv jobs.Record
	r.json(t, &rv)
	if r.StatusCode != 201 {
		t.Fatalf("revert: %s %s", r.Status, r.body)
	}
	rv = awaitJob(t, api, rv.ID, func(j jobs.Record) bool { return j.Status != jobs.StatusRunning })
	if rv.Status != jobs.StatusDone || rv.Counts.Changed != 19 || rv.Counts.Conflicts != 1 || len(rv.Conflicts) != 1 || rv.Conflicts[0].ID != "j-15" {
		t.Fatalf("revert: %+v", rv)
	}
	if got := getText(t, api, "/state/test/fn/j-12/i32"); got != "12" {
		t.Fatalf("j-12 after the revert = %s, want 12", got)
	}
	if got := getText(t, api, "/state/test/fn/j-15/i32"); got != "-1" {
		t.Fatalf("j-15 after the revert = %s, want -1 (changed since the job)", got)
	}
}

// TestJobFailures: an expression that fails on some entries lists them and
// goes on; a value of another type than the registered one is refused
// by the core and listed.
func TestJobFailures(t *testing.T) {
	eng := startWithFunction(t, engineConfig{})
	api := serve(t, eng, Options{Jobs: newJobs(t, eng)})
	for i := range 5 {
		mustPut(t, api, fmt.Sprintf("/state/test/fn/f-%d/i32", i), "text/plain", fmt.Sprint(i))
	}
	id := startJob(t, api, `{"select":{"type":"test/fn","idPrefix":"f-","state":"i32"},"action":{"op":"set","expr":"100 / value"}}`)
	j := awaitJob(t, api, id, func(j jobs.Record) bool { return j.Status != jobs.StatusRunning })
	if j.Counts.Changed != 4 || j.Counts.Failed != 1 || len(j.Failures) != 1 || j.Failures[0].ID != "f-0" || !strings.Contains(j.Failures[0].Detail, "division by zero") {
		t.Fatalf("job: %+v", j)
	}
	id = startJob(t, api, `{"select":{"type":"test/fn","idPrefix":"f-","state":"i32"},"action":{"op":"set","expr":"string(value)","typename":"io.statefun.types/string"}}`)
	j = awaitJob(t, api, id, func(j jobs.Record) bool { return j.Status != jobs.StatusRunning })
	if j.Counts.Failed != 5 || !strings.Contains(j.Failures[0].Detail, "registers another type") {
		t.Fatalf("job: %+v", j)
	}
}

// TestJobSpecErrors: what a client sends wrong is a 400 naming the field.
func TestJobSpecErrors(t *testing.T) {
	eng := startEngine(t, engineConfig{})
	api := serve(t, eng, Options{Jobs: newJobs(t, eng)})
	for _, c := range []struct{ body, want string }{
		{`{"select":{},"action":{"op":"delete"}}`, "select.type is required"},
		{`{"select":{"type":"nons"},"action":{"op":"delete"}}`, "select.type"},
		{`{"select":{"type":"a/b","were":"x"},"action":{"op":"delete"}}`, `unknown field \"were\"`},
		{`{"select":{"type":"a/b","where":"value +"},"action":{"op":"delete"}}`, "select.where"},
		{`{"select":{"type":"a/b","where":"value + 1"},"action":{"op":"delete"}}`, "want a bool"},
		{`{"select":{"type":"a/b"},"action":{"op":"set"}}`, "action.expr is required"},
		{`{"select":{"type":"a/b"},"action":{"op":"upsert"}}`, "action.op"},
		{`{"select":{"type":"a/b","idFrom":"z","idTo":"a"},"action":{"op":"delete"}}`, "idFrom"},
		{`{"select":{"type":"a/b"},"action":{"op":"delete"},"rate":-1}`, "rate"},
		{`{"select":{"type":"a/b"},"action":{"op":"delete"}} {}`, "more than one JSON value"},
	} {
		for _, path := range []string{"/jobs", "/jobs/preview"} {
			r := send(t, api, "POST", path, []byte(c.body))
			if r.StatusCode != 400 || !strings.Contains(string(r.body), c.want) {
				t.Errorf("POST %s %s: %s %s, want 400 naming %q", path, c.body, r.Status, r.body, c.want)
			}
		}
	}
	var list struct{ Jobs []json.RawMessage }
	send(t, api, "GET", "/jobs", nil).json(t, &list)
	if len(list.Jobs) != 0 {
		t.Fatalf("a refused job was stored: %s", list.Jobs)
	}
}

// getText reads an entry as text.
func getText(t testing.TB, api, target string) string {
	t.Helper()
	r := send(t, api, "GET", target, nil, "Accept", "text/plain")
	if r.StatusCode != 200 {
		t.Fatalf("GET %s: %s %s", target, r.Status, r.body)
	}
	return string(r.body)
}

// TestJobStatusCodes is the status table of the jobs routes (status_test.go
// has the others; every answer is checked against openapi.json).
func TestJobStatusCodes(t *testing.T) {
	eng := startWithFunction(t, engineConfig{})
	one, err := jobs.New(jobs.Config{Engine: eng, Store: mustDB(t, eng), MaxRunning: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(one.Close)
	apis := map[string]string{
		"":       serve(t, eng, Options{Jobs: newJobs(t, eng)}),
		"none":   serve(t, eng, Options{}), // cluster mode
		"one":    serve(t, eng, Options{Jobs: one}),
		"reason": serve(t, eng, Options{Jobs: newJobs(t, eng), RequireReason: true}),
	}
	api := apis[""]
	mustPut(t, api, "/state/test/fn/s-1/i32", "text/plain", "1")
	mustPut(t, api, "/state/test/fn/s-2/i32", "text/plain", "2")
	const spec = `{"select":{"type":"test/fn","idPrefix":"s-","state":"i32"},"action":{"op":"set","expr":"value + 1"}}`
	const slow = `{"select":{"type":"test/fn","idPrefix":"s-","state":"i32"},"action":{"op":"set","expr":"value + 1"},"rate":0.01}`
	done := startJob(t, api, spec)
	awaitJob(t, api, done, func(j jobs.Record) bool { return j.Status == jobs.StatusDone })
	running := startJob(t, apis["one"], slow)
	t.Cleanup(func() { send(t, apis["one"], "POST", "/jobs/"+running+"/cancel", nil) })
	jobJSON := func(status string) func(t *testing.T, r *response) {
		return func(t *testing.T, r *response) {
			var j jobs.Record
			r.json(t, &j)
			if j.Status != status {
				t.Errorf("status %q, want %q: %s", j.Status, status, r.body)
			}
		}
	}
	big := `{"select":{"type":"test/fn","where":"` + strings.Repeat(" ", 70<<10) + `true"},"action":{"op":"delete"}}`

	for _, c := range []statusCase{
		{name: "201 a job", method: "POST", target: "/jobs", body: spec, status: 201, has: []string{"Location"}, check: jobJSON(jobs.StatusRunning)},
		{name: "200 the jobs", method: "GET", target: "/jobs", status: 200, contains: []string{done}},
		{name: "200 a preview", method: "POST", target: "/jobs/preview?sample=0", body: spec, status: 200, contains: []string{`"changed": 2`}},
		{name: "200 a job", method: "GET", target: "/jobs/" + done, status: 200, check: jobJSON(jobs.StatusDone)},
		{name: "200 its writes", method: "GET", target: "/jobs/" + done + "/writes", status: 200, contains: []string{jobs.Marker(done)}},
		{name: "200 the orphans", method: "GET", target: "/orphans", status: 200, contains: []string{`"complete": true`}},
		{name: "400 a bad job", method: "POST", target: "/jobs", body: `{"select":{"type":"test/fn"},"action":{"op":"nope"}}`, status: 400, contains: []string{"action.op"}},
		{name: "400 a bad preview", method: "POST", target: "/jobs/preview", body: `{}`, status: 400, contains: []string{"select.type"}},
		{name: "400 a bad sample", method: "POST", target: "/jobs/preview?sample=1000", body: spec, status: 400, contains: []string{"?sample="}},
		{name: "400 a bad writes cursor", method: "GET", target: "/jobs/" + done + "/writes?after=x", status: 400},
		{name: "400 a bad writes limit, HEAD", method: "HEAD", target: "/jobs/" + done + "/writes?limit=0", status: 400},
		{name: "400 orphans take no parameters", method: "GET", target: "/orphans?type=x", status: 400},
		{name: "400 orphans take no parameters, HEAD", method: "HEAD", target: "/orphans?type=x", status: 400},
		{name: "400 a revert's reason too long", method: "POST", target: "/jobs/" + done + "/revert", hdr: []string{"Statefun-Reason", strings.Repeat("r", 2000)}, status: 400},
		{name: "400 a reason required", api: "reason", method: "POST", target: "/jobs", body: spec, status: 400, contains: []string{"Statefun-Reason"}},
		{name: "201 a reason in the job", api: "reason", method: "POST", target: "/jobs", body: `{"select":{"type":"test/fn","idPrefix":"none-"},"action":{"op":"delete"},"reason":"cleanup"}`, status: 201},
		{name: "404 no such job", method: "GET", target: "/jobs/0a", status: 404},
		{name: "404 no such job, HEAD", method: "HEAD", target: "/jobs/0a", status: 404},
		{name: "404 no such job to pause", method: "POST", target: "/jobs/0a/pause", status: 404},
		{name: "404 no such job to resume", method: "POST", target: "/jobs/0a/resume", status: 404},
		{name: "404 no such job to cancel", method: "POST", target: "/jobs/0a/cancel", status: 404},
		{name: "404 no such job to revert", method: "POST", target: "/jobs/0a/revert", status: 404},
		{name: "404 no such job to forget", method: "DELETE", target: "/jobs/0a", status: 404},
		{name: "404 no such job's writes", method: "GET", target: "/jobs/0a/writes", status: 404},
		{name: "404 no such job's writes, HEAD", method: "HEAD", target: "/jobs/0a/writes", status: 404},
		{name: "404 no such action", method: "POST", target: "/jobs/" + done + "/frob", status: 404, contains: []string{"want pause"}},
		{name: "404 too deep", method: "GET", target: "/jobs/a/b/c", status: 404},
		{name: "405 PUT /jobs", method: "PUT", target: "/jobs", status: 405, eq: map[string]string{"Allow": "GET, HEAD, POST"}},
		{name: "405 PUT a preview", method: "PUT", target: "/jobs/preview", status: 405, eq: map[string]string{"Allow": "POST"}},
		{name: "405 GET a pause", method: "GET", target: "/jobs/" + done + "/pause", status: 405, eq: map[string]string{"Allow": "POST"}},
		{name: "409 pause an ended job", method: "POST", target: "/jobs/" + done + "/pause", status: 409, contains: []string{"is done"}},
		{name: "409 resume an ended job", method: "POST", target: "/jobs/" + done + "/resume", status: 409},
		{name: "409 cancel an ended job", method: "POST", target: "/jobs/" + done + "/cancel", status: 409},
		{name: "409 revert a running job", api: "one", method: "POST", target: "/jobs/" + running + "/revert", status: 409, contains: []string{"cancel it"}},
		{name: "409 forget a running job", api: "one", method: "DELETE", target: "/jobs/" + running, status: 409},
		{name: "409 too many running", api: "one", method: "POST", target: "/jobs", body: spec, status: 409, contains: []string{"at most 1"}},
		{name: "413 a definition too large", method: "POST", target: "/jobs", body: big, status: 413},
		{name: "413 a preview too large", method: "POST", target: "/jobs/preview", body: big, status: 413},
		{name: "415 a job as text", method: "POST", target: "/jobs", body: spec, hdr: []string{"Content-Type", "text/plain"}, status: 415},
		{name: "415 a preview as text", method: "POST", target: "/jobs/preview", body: spec, hdr: []string{"Content-Type", "text/plain"}, status: 415},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := send(t, apis[c.api], c.method, c.target, []byte(c.body), c.hdr...)
			checkAnswer(t, &c, r)
		})
	}

	// The resume of a paused job, and the forgetting of an ended one.
	paused := startJob(t, api, slow)
	// Its first write is made at once, the second due in 100 s: pause it
	// between them.
	awaitJob(t, api, paused, func(j jobs.Record) bool { return j.Counts.Changed == 1 })
	if r := send(t, api, "POST", "/jobs/"+paused+"/pause", nil); r.StatusCode != 200 {
		t.Fatalf("pause: %s %s", r.Status, r.body)
	}
	if r := send(t, api, "POST", "/jobs/"+paused+"/resume", nil); r.StatusCode != 200 {
		t.Fatalf("resume: %s %s", r.Status, r.body)
	}
	// Resumed, it replays its page: s-1, written before the pause, is not
	// written again, and s-2 is the one write left.
	if j := awaitJob(t, api, paused, func(j jobs.Record) bool { return j.Status != jobs.StatusRunning }); j.Counts.Changed != 2 || len(j.Failures) != 0 {
		t.Fatalf("after pause and resume: %+v", j)
	}
	var writes struct{ Records []auditJSON }
	send(t, api, "GET", "/jobs/"+paused+"/writes", nil).json(t, &writes)
	if len(writes.Records) != 2 || writes.Records[0].ID == writes.Records[1].ID {
		t.Fatalf("the paused and resumed job wrote %+v, want s-1 and s-2 once each", writes.Records)
	}
	if r := send(t, api, "DELETE", "/jobs/"+paused, nil); r.StatusCode != 204 {
		t.Fatalf("delete: %s %s", r.Status, r.body)
	}
	send(t, api, "GET", "/jobs/"+paused, nil)

	// An API without a jobs manager answers every jobs route 501.
	for _, op := range theSpec(t).ops {
		if !strings.HasPrefix(op.template, "/jobs") && op.template != "/orphans" {
			continue
		}
		r := send(t, apis["none"], op.method, fillTemplate(op.template, exampleVals), []byte(spec))
		if r.StatusCode != 501 || (op.method != "HEAD" && !strings.Contains(string(r.body), "not served by this runtime")) {
			t.Errorf("%s without jobs: %s %s, want 501", op.key, r.Status, r.body)
		}
	}
}

// mustDB is the store startEngine opened for eng.
func mustDB(t testing.TB, eng *engine.Engine) *store.DB {
	t.Helper()
	db, ok := engineDBs.Load(eng)
	if !ok {
		t.Fatal("no store for this engine: start it with startEngine")
	}
	return db.(*store.DB)
}

// TestJobsClusterUnavailable: in cluster mode a node that owns no
// partition and reaches no other node answers every jobs route with a 503
// and Retry-After (the job's home partition, or the partitions a preview
// or a new job reads, have no owner that answers), but HEAD /jobs and
// HEAD /orphans, which a node answers alone.
func TestJobsClusterUnavailable(t *testing.T) {
	eng := startWithFunction(t, engineConfig{})
	db := mustDB(t, eng)
	s := New(eng, eng.Reads(), Options{Cluster: &fakeCluster{}})
	cj := NewClusterJobs(s, db, nil)
	cj.missingWait = 20 * time.Millisecond
	t.Cleanup(cj.Close)
	m, err := jobs.New(jobs.Config{Engine: cj.Engine(), Store: cj.Store(), StoreAs: cj.StoreAs, Local: db,
		Owned: func() []int { return nil }, IdempotentWrites: true})
	if err != nil {
		t.Fatal(err)
	}
	m.Start()
	t.Cleanup(m.Close)
	s.UseJobs(m, cj)
	srv := httptest.NewServer(s.Handler(http.NotFoundHandler()))
	t.Cleanup(srv.Close)
	spec := []byte(`{"select":{"type":"test/fn"},"action":{"op":"delete"}}`)
	for _, op := range theSpec(t).ops {
		if !strings.HasPrefix(op.template, "/jobs") && op.template != "/orphans" {
			continue
		}
		r := send(t, srv.URL, op.method, fillTemplate(op.template, exampleVals), spec, "Content-Type", "application/json")
		if op.method == "HEAD" && (op.template == "/jobs" || op.template == "/orphans") {
			if r.StatusCode != 200 {
				t.Errorf("%s: %s, want 200 (answered by the node alone)", op.key, r.Status)
			}
			continue
		}
		if r.StatusCode != 503 || r.Header.Get("Retry-After") == "" {
			t.Errorf("%s on a node that reaches no partition: %s %s, want 503 with Retry-After", op.key, r.Status, r.body)
		}
	}
}
