package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/statefun-go/statefun/internal/sdktest"
)

// These tests drive the bulk jobs (docs/how-to/bulk-jobs.md) of the real
// binary, next to the official Go SDK's counter function (sdktest/counter:
// every message adds 1 to its long state "count"). Helpers are prefixed
// "jb".

// jbJob is the part of a job's record the tests read.
type jbJob struct {
	ID     string `json:"id"`
	Kind   string `json:"kind"`
	Status string `json:"status"`
	Total  int64  `json:"total"`
	Error  string `json:"error"`
	Counts struct {
		Scanned, Matched, Changed, Unchanged, Skipped, Retried, Conflicts, Failed int64
	} `json:"counts"`
	Conflicts []struct {
		ID, State, Detail string
	} `json:"conflicts"`
	Pace *struct {
		Rate, Limit, LatencyMs, BaseMs float64
		FunctionsMs, FunctionsBaseMs   float64
		Backoffs                       int64
	} `json:"pace"`
}

// jbEnv is a runtime serving sdktest/counter, and its API.
type jbEnv struct {
	t   testing.TB
	rt  *runtime
	api *saAPI
}

// jbStart starts the counter function and a runtime (embedded engine)
// whose module binds sdktest/* to it, and warms the counter so that it
// has registered its state.
func jbStart(t testing.TB) *jbEnv {
	t.Helper()
	cs := sdktest.StartCounterServer(t)
	rt := newRuntimeWith(t, saModule(saEndpoint{"sdktest/*", cs.URL}))
	rt.start()
	e := &jbEnv{t: t, rt: rt, api: saAPIOf(t, "http://"+rt.admin, saClient)}
	e.tick("warm")
	deadline := time.Now().Add(20 * time.Second)
	for e.api.do(http.MethodGet, e.path("warm"), "").status != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatalf("the counter never counted the warm-up message:\n%s", rt.logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return e
}

func (e *jbEnv) path(id string) string {
	return "/state/" + sdktest.CounterFn + "/" + id + "/" + sdktest.CounterState
}

// tick sends one message to the counter id: +1, once durable.
func (e *jbEnv) tick(id string) {
	e.t.Helper()
	status, err := e.rt.send("/"+sdktest.CounterFn+"/"+id, saString, "tick")
	if err != nil || status != http.StatusOK {
		e.t.Fatalf("ingress to %s: %d %v", id, status, err)
	}
}

// seed writes n counters id(i) = i through the API, 16 at a time.
func (e *jbEnv) seed(n int, id func(int) string) {
	e.t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	work := make(chan int)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				r, err := e.api.try(http.MethodPut, e.path(id(i)), strconv.Itoa(i), "Content-Type", "text/plain", "Statefun-Type", saLong)
				if err == nil && r.status != http.StatusOK {
					err = fmt.Errorf("PUT %s: %s", id(i), r)
				}
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		e.t.Fatal(err)
	}
}

// get reads a counter; ok is false when it has no value.
func (e *jbEnv) get(id string) (int64, bool) {
	e.t.Helper()
	r := e.api.do(http.MethodGet, e.path(id), "", "Accept", "text/plain")
	if r.status == http.StatusNotFound {
		return 0, false
	}
	if r.status != http.StatusOK {
		e.t.Fatalf("GET %s: %s", id, r)
	}
	v, err := strconv.ParseInt(string(r.body), 10, 64)
	if err != nil {
		e.t.Fatalf("GET %s: %q", id, r.body)
	}
	return v, true
}

func (e *jbEnv) job(id string) jbJob {
	e.t.Helper()
	var j jbJob
	if err := json.Unmarshal(e.api.expect(http.StatusOK, http.MethodGet, "/jobs/"+id, "").body, &j); err != nil {
		e.t.Fatal(err)
	}
	return j
}

func (e *jbEnv) create(spec string) jbJob {
	e.t.Helper()
	r := e.api.expect(http.StatusCreated, http.MethodPost, "/jobs", spec, "Content-Type", "application/json")
	var j jbJob
	if err := json.Unmarshal(r.body, &j); err != nil {
		e.t.Fatal(err)
	}
	if r.header.Get("Location") != "/jobs/"+j.ID {
		e.t.Fatalf("Location %q, want /jobs/%s", r.header.Get("Location"), j.ID)
	}
	return j
}

// await polls job id until cond holds.
func (e *jbEnv) await(id, what string, timeout time.Duration, cond func(jbJob) bool) jbJob {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		j := e.job(id)
		if cond(j) {
			return j
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("job %s: %s not within %v; it is %+v", id, what, timeout, j)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *jbEnv) done(id string, timeout time.Duration) jbJob {
	e.t.Helper()
	j := e.await(id, "done", timeout, func(j jbJob) bool { return j.Status != "running" })
	if j.Status != "done" {
		e.t.Fatalf("job %s ended %s: %+v", id, j.Status, j)
	}
	return j
}

// writes reads every audit record of job id and counts them by entry.
func (e *jbEnv) writes(id string) map[string]int {
	e.t.Helper()
	by := map[string]int{}
	after := ""
	for {
		path := "/jobs/" + id + "/writes?limit=1000"
		if after != "" {
			path += "&after=" + after
		}
		var page struct {
			Records []struct{ Mutation, Reason, ID, State string } `json:"records"`
			Next    *string                                        `json:"next"`
		}
		if err := json.Unmarshal(e.api.expect(http.StatusOK, http.MethodGet, path, "").body, &page); err != nil {
			e.t.Fatal(err)
		}
		for _, r := range page.Records {
			if !strings.Contains(r.Mutation, "-job-"+id+"-") || !strings.HasPrefix(r.Reason, "job "+id) {
				e.t.Fatalf("a write of job %s has mutation %q, reason %q: the job's id is not in the audit log", id, r.Mutation, r.Reason)
			}
			by[r.ID+"/"+r.State]++
		}
		if page.Next == nil {
			return by
		}
		after = *page.Next
	}
}

func jbID(i int) string { return fmt.Sprintf("c-%05d", i) }

// tickHot ticks the hot counters jbID(h*stride), h < hot, each from its
// own goroutine every period, each tick answered (durable) before the
// next, until stop is closed; sent[h] counts hot counter h's ticks. Wait
// on the result before reading sent.
func (e *jbEnv) tickHot(stop <-chan struct{}, hot, stride int, period time.Duration, sent []int) *sync.WaitGroup {
	var wg sync.WaitGroup
	for h := range hot {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				e.tick(jbID(h * stride))
				sent[h]++
				time.Sleep(period)
			}
		}()
	}
	return &wg
}

// TestJobMigrationUnderLoad previews and runs a CEL migration over 1,000
// counters while the counter function keeps incrementing 8 of them:
// each counter ends at seed + increments + 1,000,000 — the job applied
// once to each, and no function write was lost (a conflict is read and
// evaluated again).
func TestJobMigrationUnderLoad(t *testing.T) {
	t.Parallel()
	e := jbStart(t)
	const n = 1000
	e.seed(n, jbID)

	// Preview: counts and a sample, nothing written.
	var pv struct {
		Counts struct{ Scanned, Matched, Changed, Unchanged, Failed int64 }
		Sample []struct {
			ID     string
			Before struct{ Value json.RawMessage }
			After  *struct{ Value json.RawMessage }
		}
	}
	body := e.api.expect(http.StatusOK, http.MethodPost, "/jobs/preview?sample=5",
		`{"select":{"type":"sdktest/counter","idPrefix":"c-","state":"count","where":"value % 2 == 0"},"action":{"op":"set","expr":"value % 4 == 0 ? value : value + 1000000"}}`).body
	if err := json.Unmarshal(body, &pv); err != nil {
		t.Fatal(err)
	}
	if pv.Counts.Scanned != n || pv.Counts.Matched != n/2 || pv.Counts.Changed != n/4 || pv.Counts.Unchanged != n/4 || pv.Counts.Failed != 0 {
		t.Fatalf("preview counts %+v, want scanned %d, matched %d, changed %d, unchanged %d", pv.Counts, n, n/2, n/4, n/4)
	}
	if len(pv.Sample) != 5 || pv.Sample[0].ID != jbID(2) || string(pv.Sample[0].Before.Value) != "2" || pv.Sample[0].After == nil || string(pv.Sample[0].After.Value) != "1000002" {
		t.Fatalf("preview sample %s", body)
	}
	if v, _ := e.get(jbID(2)); v != 2 {
		t.Fatalf("a preview wrote: %s = %d", jbID(2), v)
	}

	// The migration, while the counter function keeps writing hot
	// counters: ticks go on from before the job starts until it is done,
	// each hot counter's 20 ms apart. The job yields to this load (down to
	// 20 writes a second on a busy machine): that bounds the test's time.
	const hot = 8
	stride := n / hot
	stop := make(chan struct{})
	sent := make([]int, hot)
	load := e.tickHot(stop, hot, stride, 20*time.Millisecond, sent)
	time.Sleep(200 * time.Millisecond)
	j := e.create(`{"select":{"type":"sdktest/counter","idPrefix":"c-","state":"count"},"action":{"op":"set","expr":"value + 1000000"},"rate":1000,"retries":50,"reason":"e2e migration"}`)
	j = e.done(j.ID, 120*time.Second)
	close(stop)
	load.Wait()
	if j.Counts.Scanned != n || j.Counts.Changed != n || j.Counts.Conflicts != 0 || j.Counts.Failed != 0 {
		t.Fatalf("job counts %+v, want %d scanned and changed", j.Counts, n)
	}
	if j.Counts.Retried == 0 {
		t.Fatalf("job counts %+v: no write met a function's write, the test proves nothing", j.Counts)
	}
	t.Logf("job %s: %+v; ticks %v", j.ID, j.Counts, sent)

	want := func(i int) int64 {
		v := int64(i) + 1_000_000
		if i%stride == 0 {
			v += int64(sent[i/stride])
		}
		return v
	}
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; i < n; i++ {
		for {
			got, _ := e.get(jbID(i))
			if got == want(i) {
				break
			}
			if time.Now().After(deadline) || got > want(i) {
				t.Fatalf("%s = %d, want %d (seed %d + %d increments + 1000000): a write was lost or applied twice", jbID(i), got, want(i), i, want(i)-int64(i)-1_000_000)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	w := e.writes(j.ID)
	if len(w) != n {
		t.Fatalf("the audit log holds writes of job %s to %d entries, want %d", j.ID, len(w), n)
	}
	for k, c := range w {
		if c != 1 {
			t.Fatalf("the audit log holds %d writes of job %s to %s, want 1", c, j.ID, k)
		}
	}
}

// TestJobSurvivesSIGKILL SIGKILLs the runtime in the middle of a job and
// starts it again: the job goes on from its cursor by itself, and every
// entry is migrated exactly once (the audit log holds one write of the
// job per entry, and every value has the migration once).
func TestJobSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	e := jbStart(t)
	const n = 3000
	e.seed(n, jbID)
	// Pages are 100 ids; at 500 writes a second one takes 200 ms, and the
	// kill lands in the middle of the eleventh.
	j := e.create(`{"select":{"type":"sdktest/counter","idPrefix":"c-"},"action":{"op":"set","expr":"value * 2 + 1"},"rate":500}`)
	e.await(j.ID, "a third done", 60*time.Second, func(j jbJob) bool { return j.Counts.Scanned >= 1030 })
	e.rt.kill()
	e.rt.start()
	// Between the cursor and the crash, the job wrote entries the record
	// does not count yet: those are the ones a replay must not write again.
	stored := e.job(j.ID)
	if w := len(e.writes(j.ID)); stored.Status == "running" && int64(w) <= stored.Counts.Changed {
		t.Fatalf("the crash fell between two pages (%d writes, %d counted): it tests nothing", w, stored.Counts.Changed)
	}
	if stored.Status != "running" && stored.Status != "done" {
		t.Fatalf("after SIGKILL and a restart the job is %s, want it running on", stored.Status)
	}
	// The pace may yield to a busy machine down to its floor (20 writes a
	// second): the rest of the job then takes up to 100 s.
	j = e.done(j.ID, 150*time.Second)
	if j.Counts.Changed != n || j.Counts.Scanned != n {
		t.Fatalf("job counts after the crash %+v, want %d scanned and changed", j.Counts, n)
	}
	for i := 0; i < n; i++ {
		if got, _ := e.get(jbID(i)); got != int64(2*i+1) {
			t.Fatalf("%s = %d, want %d: the migration applied %s", jbID(i), got, 2*i+1, map[bool]string{true: "twice", false: "not at all"}[got > int64(2*i+1)])
		}
	}
	w := e.writes(j.ID)
	if len(w) != n {
		t.Fatalf("the audit log holds writes to %d entries, want %d", len(w), n)
	}
	for k, c := range w {
		if c != 1 {
			t.Fatalf("the audit log holds %d writes of the job to %s, want exactly 1", c, k)
		}
	}
}

// TestJobPauseResumeCancelRevert pauses a job (nothing is written while it
// is paused), resumes it to its end, reverts it (an entry changed since is
// listed and left alone), and cancels another.
func TestJobPauseResumeCancelRevert(t *testing.T) {
	t.Parallel()
	e := jbStart(t)
	const n = 600
	e.seed(n, jbID)
	j := e.create(`{"select":{"type":"sdktest/counter","idPrefix":"c-"},"action":{"op":"set","expr":"value - 7"},"rate":400}`)
	e.await(j.ID, "some progress", 30*time.Second, func(j jbJob) bool { return j.Counts.Changed >= 50 })
	var paused jbJob
	if err := json.Unmarshal(e.api.expect(http.StatusOK, http.MethodPost, "/jobs/"+j.ID+"/pause", "").body, &paused); err != nil {
		t.Fatal(err)
	}
	if paused.Status != "paused" {
		t.Fatalf("after pause: %+v", paused)
	}
	before := len(e.writes(j.ID))
	time.Sleep(500 * time.Millisecond)
	if after := len(e.writes(j.ID)); after != before {
		t.Fatalf("a paused job wrote: %d writes, then %d", before, after)
	}
	e.api.expect(http.StatusConflict, http.MethodPost, "/jobs/"+j.ID+"/pause", "")
	e.api.expect(http.StatusConflict, http.MethodPost, "/jobs/"+j.ID+"/revert", "")
	e.api.expect(http.StatusOK, http.MethodPost, "/jobs/"+j.ID+"/resume", "")
	j = e.done(j.ID, 30*time.Second)
	if j.Counts.Changed != n {
		t.Fatalf("after resume: %+v, want %d changed", j.Counts, n)
	}
	for i := range n {
		if got, _ := e.get(jbID(i)); got != int64(i-7) {
			t.Fatalf("%s = %d, want %d", jbID(i), got, i-7)
		}
	}

	// Someone changes one entry after the job: the revert leaves it.
	e.api.expect(http.StatusOK, http.MethodPut, e.path(jbID(10)), "12345", "Content-Type", "text/plain")
	r := e.api.expect(http.StatusCreated, http.MethodPost, "/jobs/"+j.ID+"/revert", "", "Statefun-Reason", "e2e: undo")
	var rv jbJob
	if err := json.Unmarshal(r.body, &rv); err != nil {
		t.Fatal(err)
	}
	rv = e.done(rv.ID, 30*time.Second)
	if rv.Kind != "revert" || rv.Counts.Changed != n-1 || rv.Counts.Conflicts != 1 || len(rv.Conflicts) != 1 || rv.Conflicts[0].ID != jbID(10) {
		t.Fatalf("revert: %+v, want %d changed and %s listed as a conflict", rv, n-1, jbID(10))
	}
	for i := range n {
		want := int64(i)
		if i == 10 {
			want = 12345
		}
		if got, _ := e.get(jbID(i)); got != want {
			t.Fatalf("after the revert %s = %d, want %d", jbID(i), got, want)
		}
	}

	// Cancel: the job stops for good, what it wrote stays.
	c := e.create(`{"select":{"type":"sdktest/counter","idPrefix":"c-"},"action":{"op":"delete"},"rate":100}`)
	e.await(c.ID, "some progress", 30*time.Second, func(j jbJob) bool { return j.Counts.Changed >= 5 })
	e.api.expect(http.StatusOK, http.MethodPost, "/jobs/"+c.ID+"/cancel", "")
	c = e.job(c.ID)
	deleted := len(e.writes(c.ID))
	if c.Status != "cancelled" || c.Counts.Changed >= n || deleted >= n {
		t.Fatalf("cancelled job %+v wrote %d", c, deleted)
	}
	time.Sleep(300 * time.Millisecond)
	if again := len(e.writes(c.ID)); again != deleted {
		t.Fatalf("a cancelled job wrote on: %d writes, then %d", deleted, again)
	}
	e.api.expect(http.StatusConflict, http.MethodPost, "/jobs/"+c.ID+"/resume", "")
}

// TestOrphans lists the state nobody owns — a type no longer deployed and
// a state name the counter does not register — with sizes, purges it as a
// job (previewed first), and reverts the purge.
func TestOrphans(t *testing.T) {
	t.Parallel()
	e := jbStart(t)
	e.seed(3, jbID)
	for i := range 5 {
		e.api.expect(http.StatusOK, http.MethodPut, fmt.Sprintf("/state/retired/thing/t-%d/v", i), "old", "Content-Type", "text/plain", "Statefun-Type", saString)
	}
	e.api.expect(http.StatusOK, http.MethodPut, "/state/"+sdktest.CounterFn+"/"+jbID(1)+"/legacy", "x", "Content-Type", "text/plain", "Statefun-Type", saString)

	type orphan struct {
		Namespace, Type, State, Reason string
		IDs, Entries, Bytes            int64
	}
	list := func() []orphan {
		var o struct{ Orphans []orphan }
		if err := json.Unmarshal(e.api.expect(http.StatusOK, http.MethodGet, "/orphans", "").body, &o); err != nil {
			t.Fatal(err)
		}
		return o.Orphans
	}
	got := list()
	if len(got) != 2 || got[0].Namespace != "retired" || got[0].Reason != "type-not-deployed" || got[0].Entries != 5 || got[0].IDs != 5 || got[0].Bytes == 0 ||
		got[1].Type != "counter" || got[1].State != "legacy" || got[1].Reason != "state-not-registered" || got[1].Entries != 1 {
		t.Fatalf("orphans %+v", got)
	}
	const purge = `{"select":{"orphans":true},"action":{"op":"delete"},"reason":"e2e purge"}`
	var pv struct {
		Counts struct{ Scanned, Matched, Changed int64 }
	}
	if err := json.Unmarshal(e.api.expect(http.StatusOK, http.MethodPost, "/jobs/preview", purge).body, &pv); err != nil {
		t.Fatal(err)
	}
	if pv.Counts.Matched != 6 || pv.Counts.Changed != 6 {
		t.Fatalf("purge preview %+v, want 6 orphans", pv.Counts)
	}
	j := e.create(purge)
	j = e.done(j.ID, 30*time.Second)
	if j.Counts.Changed != 6 {
		t.Fatalf("purge %+v", j.Counts)
	}
	if got := list(); len(got) != 0 {
		t.Fatalf("orphans after the purge: %+v", got)
	}
	e.api.expect(http.StatusNotFound, http.MethodGet, "/state/retired/thing/t-0/v", "")
	if v, ok := e.get(jbID(1)); !ok || v != 1 {
		t.Fatalf("the purge touched an owned entry: %d %v", v, ok)
	}
	r := e.api.expect(http.StatusCreated, http.MethodPost, "/jobs/"+j.ID+"/revert", "")
	var rv jbJob
	json.Unmarshal(r.body, &rv)
	e.done(rv.ID, 30*time.Second)
	if got := list(); len(got) != 2 {
		t.Fatalf("orphans after reverting the purge: %+v", got)
	}
}

// cli runs `statefun jobs args...` against e's runtime and returns what it
// printed; it must exit 0.
func (e *jbEnv) cli(args ...string) string {
	e.t.Helper()
	cmd := exec.Command(binary, append(append([]string{"jobs"}, args...), "--server", "http://"+e.rt.admin)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		e.t.Fatalf("statefun jobs %q: %v\n%s", args, err, out)
	}
	return string(out)
}

// TestJobsCLI drives a migration with `statefun jobs`: preview, start
// --watch (to its end), list, status, writes, orphans.
func TestJobsCLI(t *testing.T) {
	t.Parallel()
	e := jbStart(t)
	e.seed(50, jbID)
	out := e.cli("preview", sdktest.CounterFn, "--id-prefix", "c-", "--where", "value % 10 == 0", "--set", "value * 100", "--sample", "2")
	if !strings.Contains(out, "scanned 50, matched 5, would change 4, unchanged 1, failed 0") || !strings.Contains(out, "c-00010") {
		t.Fatalf("preview:\n%s", out)
	}
	out = e.cli("start", sdktest.CounterFn, "--id-prefix", "c-", "--where", "value % 10 == 0", "--set", "value * 100", "--reason", "cli", "--watch")
	if !strings.Contains(out, "status") || !strings.Contains(out, "done") || !strings.Contains(out, "changed 4") {
		t.Fatalf("start --watch:\n%s", out)
	}
	if v, _ := e.get(jbID(30)); v != 3000 {
		t.Fatalf("%s = %d, want 3000", jbID(30), v)
	}
	var list []struct{ ID, Status string }
	if err := json.Unmarshal([]byte(e.cli("list", "-o", "json")), &list); err != nil || len(list) != 1 || list[0].Status != "done" {
		t.Fatalf("list: %v %+v", err, list)
	}
	if out := e.cli("writes", list[0].ID); strings.Count(out, "-job-"+list[0].ID+"-") != 4 {
		t.Fatalf("writes:\n%s", out)
	}
	if out := e.cli("status", list[0].ID); !strings.Contains(out, "[##############################] 100%") {
		t.Fatalf("status:\n%s", out)
	}
	if out := e.cli("orphans"); !strings.Contains(out, "TYPE") {
		t.Fatalf("orphans:\n%s", out)
	}
}

// TestJobsConsole opens the console's jobs page in headless Chromium: a
// job is listed with its status and its progress, and the navigation
// shows the page (a runtime in cluster mode hides it: /jobs is a 501).
func TestJobsConsole(t *testing.T) {
	chromium := cnChromium(t)
	e := jbStart(t)
	e.seed(20, jbID)
	j := e.create(`{"select":{"type":"sdktest/counter","idPrefix":"c-"},"action":{"op":"set","expr":"value + 1"}}`)
	e.done(j.ID, 30*time.Second)
	env := &cnEnv{rt: e.rt, base: "http://" + e.rt.admin + "/ui/", browser: cnBrowser(t, chromium)}
	ctx := env.tab(t)
	env.goTo(t, ctx, "#/jobs", fmt.Sprintf(`[data-job="%s"]`, j.ID))
	row := evaluate[string](t, ctx, "the job's row", fmt.Sprintf(`document.querySelector('[data-job="%s"]').innerText`, j.ID))
	if !strings.Contains(row, "done") || !strings.Contains(row, "100% · 20/20") || !strings.Contains(row, "set value + 1") {
		t.Errorf("the job's row reads %q", row)
	}
	if hidden := evaluate[bool](t, ctx, "the nav link", `document.getElementById('nav-jobs').hidden`); hidden {
		t.Error("the Jobs link is hidden in embedded mode")
	}
}

// TestJobsOnClusterNode: a one-node cluster serves the jobs routes, and
// the CLI lists and previews through them.
func TestJobsOnClusterNode(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("cluster: skipped in -short mode")
	}
	cs := sdktest.StartCounterServer(t)
	rt := newRuntimeOn(t, clustered, saModule(saEndpoint{"sdktest/*", cs.URL}))
	rt.start()
	e := &jbEnv{t: t, rt: rt, api: saAPIOf(t, "http://"+rt.admin, saClient)}
	e.seed(20, jbID)
	e.cli("list") // exits 0
	j := e.create(`{"select":{"type":"sdktest/counter","idPrefix":"c-"},"action":{"op":"set","expr":"value + 1"}}`)
	j = e.done(j.ID, 60*time.Second)
	if j.Counts.Changed != 20 {
		t.Fatalf("job on a cluster node: %+v", j)
	}
	if v, _ := e.get(jbID(7)); v != 8 {
		t.Fatalf("%s = %d, want 8", jbID(7), v)
	}
	if out := e.cli("list"); !strings.Contains(out, j.ID) {
		t.Fatalf("statefun jobs list on a cluster node does not list %s:\n%s", j.ID, out)
	}
}
