package stateapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	statefun "github.com/apache/flink-statefun/statefun-sdk-go/v3/pkg/statefun"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/engine"
	"github.com/statefun-go/statefun/internal/invoker"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
	"github.com/statefun-go/statefun/internal/types"
)

// relayType is an official-SDK function that forwards every message to
// test/fn of the same id: the change it causes there has relay as caller.
var relayType = address.TypeName{Namespace: "test", Name: "relay"}

// startFunctions serves test/fn and test/relay with the official Go SDK.
func startFunctions(t testing.TB) string {
	b := statefun.StatefulFunctionsBuilder()
	err := b.WithSpec(statefun.StatefulFunctionSpec{
		FunctionType: statefun.TypeNameFrom(fnType.String()),
		States:       fnSpecs,
		Function: statefun.StatefulFunctionPointer(func(ctx statefun.Context, _ statefun.Message) error {
			var n int64
			ctx.Storage().Get(fnSpecs[2], &n)
			ctx.Storage().Set(fnSpecs[2], n+1)
			return nil
		}),
	})
	if err == nil {
		err = b.WithSpec(statefun.StatefulFunctionSpec{
			FunctionType: statefun.TypeNameFrom(relayType.String()),
			Function: statefun.StatefulFunctionPointer(func(ctx statefun.Context, _ statefun.Message) error {
				ctx.Send(statefun.MessageBuilder{Target: statefun.Address{
					FunctionType: statefun.TypeNameFrom(fnType.String()), Id: ctx.Self().Id}, Value: "relayed"})
				return nil
			}),
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(b.AsHandler())
	t.Cleanup(srv.Close)
	return srv.URL + "/statefun"
}

// restartable is an engine over a store on an in-memory filesystem that
// outlives it, so a test can stop the runtime and start it again.
type restartable struct {
	t     *testing.T
	fs    vfs.FS
	fnURL string
	ret   store.Retention
	eng   *engine.Engine
	db    *store.DB
	stop  func()
	api   string
	// waiting counts the API's calls of WaitDurable in progress.
	waiting atomic.Int64
}

// waitCounter is the engine, counting the calls of WaitDurable in
// progress: a test knows a read waits for a commit.
type waitCounter struct {
	*engine.Engine
	n *atomic.Int64
}

func (w waitCounter) WaitDurable(ctx context.Context, p int, min uint64) (uint64, bool, error) {
	w.n.Add(1)
	defer w.n.Add(-1)
	return w.Engine.WaitDurable(ctx, p, min)
}

func (r *restartable) start() {
	t := r.t
	db, err := store.Open("data", store.Options{Partitions: 4, FS: r.fs, Logger: quietPebble{}, SweepInterval: -1, Retention: r.ret})
	if err != nil {
		t.Fatal(err)
	}
	inv, err := invoker.New(invoker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(engine.Options{Store: db, Functions: fnClient{inv, r.fnURL},
		RetryBase: 10 * time.Millisecond, RetryMax: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	eng.Start()
	srv := httptest.NewServer(New(waitCounter{eng, &r.waiting}, eng.Reads(), Options{}).Handler(http.NotFoundHandler()))
	r.eng, r.db, r.api = eng, db, srv.URL
	r.stop = func() {
		srv.Close()
		eng.Close()
		inv.Close()
		_ = db.Close()
	}
}

func (r *restartable) restart() {
	r.stop()
	r.start()
}

// newRestartable starts one, and waits until test/fn registered its states.
func newRestartable(t *testing.T, ret store.Retention) *restartable {
	r := coldRestartable(t, ret)
	ingestTo(t, r.eng, fnType, "warmup")
	waitFor(t, "test/fn to register its states", func() bool { return len(r.eng.SpecsOf(fnType)) == len(fnSpecs) })
	return r
}

// coldRestartable starts one before test/fn registered any state.
func coldRestartable(t *testing.T, ret store.Retention) *restartable {
	r := &restartable{t: t, fs: vfs.NewMem(), fnURL: startFunctions(t), ret: ret}
	r.start()
	t.Cleanup(func() { r.stop() })
	return r
}

type historyPage struct {
	Records []historyRecordJSON `json:"records"`
	Next    *string             `json:"next"`
}

func getHistoryPage(t *testing.T, api, target string) historyPage {
	t.Helper()
	r := send(t, api, "GET", target, nil)
	if r.StatusCode != 200 {
		t.Fatalf("GET %s: %s %s", target, r.Status, r.body)
	}
	var p historyPage
	r.json(t, &p)
	return p
}

func envelopeTo(typ address.TypeName, id string) *protocol.Envelope {
	return &protocol.Envelope{
		Target:   &protocol.Address{Namespace: typ.Namespace, Type: typ.Name, Id: id},
		Argument: &protocol.TypedValue{Typename: types.String, HasValue: true, Value: []byte("\n\x04ping")},
	}
}

func ingestTo(t *testing.T, eng *engine.Engine, typ address.TypeName, id string) {
	t.Helper()
	if err := eng.Ingest(t.Context(), envelopeTo(typ, id)); err != nil {
		t.Fatal(err)
	}
}

// TestHistoryOfInvocationsAndMutations: the history of an entry lists each
// committed change — by the SDK function after an ingress message, after a
// message from another function (its caller), and by an operator — newest
// first, each with its commit, version and cause, paged.
func TestHistoryOfInvocationsAndMutations(t *testing.T) {
	rs := newRestartable(t, store.Retention{})
	api := rs.api
	ingestTo(t, rs.eng, fnType, "h") // i64 = 1, from the ingress
	waitFor(t, "the first invocation", func() bool { return send(t, api, "GET", "/state/test/fn/h/i64", nil).StatusCode == 200 })
	ingestTo(t, rs.eng, relayType, "h") // relay → fn/h: i64 = 2, caller test/relay/h
	waitFor(t, "the relayed invocation", func() bool {
		return string(send(t, api, "GET", "/state/test/fn/h/i64", nil, "Accept", "text/plain").body) == "2"
	})
	rc := mustPut(t, api, "/state/test/fn/h/i64", "text/plain", "40", "Statefun-Reason", "repair")

	// The history is read from the durable store: the receipt's commit is
	// durable (ack=committed), so it is there at once.
	p := getHistoryPage(t, api, "/state/test/fn/h/i64/history?minCommit="+rc.Commit)
	if len(p.Records) != 3 || p.Next != nil {
		t.Fatalf("history: %d records, next %v: %+v", len(p.Records), p.Next, p)
	}
	m, relayed, first := p.Records[0], p.Records[1], p.Records[2]
	if m.Cause.Kind != "mutation" || m.Cause.Mutation != rc.Mutation || m.Cause.Principal != "anonymous" || m.Cause.Reason != "repair" ||
		*m.Version != *rc.Version || m.Position != rc.Commit || string(m.Value) != "40" {
		t.Errorf("the mutation's record: %+v (receipt %+v)", m, rc)
	}
	if relayed.Cause.Kind != "invocation" || relayed.Cause.MessageCount != 1 || len(relayed.Cause.Messages) != 1 ||
		relayed.Cause.Messages[0].Caller == nil || *relayed.Cause.Messages[0].Caller != (types.EnvelopeAddress{Namespace: "test", Type: "relay", ID: "h"}) ||
		relayed.Cause.Messages[0].Typename != "io.statefun.types/string" || string(relayed.Value) != "2" {
		t.Errorf("the relayed invocation's record: %+v", relayed)
	}
	if first.Cause.Kind != "invocation" || first.Cause.Messages[0].Caller != nil || string(first.Value) != "1" {
		t.Errorf("the first invocation's record: %+v", first)
	}
	if !(first.Commit < relayed.Commit && relayed.Commit < m.Commit) {
		t.Errorf("commits out of order: %d %d %d", first.Commit, relayed.Commit, m.Commit)
	}
	// A deletion is a change too; pages walk the history both ways.
	if r := send(t, api, "DELETE", "/state/test/fn/h/i64", nil); r.StatusCode != 200 {
		t.Fatalf("DELETE: %s %s", r.Status, r.body)
	}
	p = getHistoryPage(t, api, "/state/test/fn/h/i64/history?limit=1")
	if len(p.Records) != 1 || !p.Records[0].Deleted || p.Records[0].Version != nil || p.Next == nil {
		t.Fatalf("newest page: %+v", p)
	}
	var commits []uint64
	for after := ""; ; {
		p := getHistoryPage(t, api, "/state/test/fn/h/i64/history?order=oldest&limit=3"+after)
		for _, r := range p.Records {
			commits = append(commits, r.Commit)
		}
		if p.Next == nil {
			break
		}
		after = "&after=" + *p.Next
	}
	if len(commits) != 4 || commits[0] != first.Commit || commits[3] <= m.Commit {
		t.Errorf("oldest first, paged: %v", commits)
	}
	for _, bad := range []string{"?order=up", "?limit=0", "?limit=1001", "?after=x", "?lmit=3", "?minCommit=x"} {
		if r := send(t, api, "GET", "/state/test/fn/h/i64/history"+bad, nil); r.StatusCode != 400 || !strings.Contains(r.problem(t).Detail, "?") {
			t.Errorf("history%s: %s %s, want a 400 naming the parameter", bad, r.Status, r.body)
		}
	}
}

// TestAsOfAcrossRestartThenRestoreAndRevert: reads as of a commit and a
// time, across a restart of the runtime; a restore of the whole address to
// a commit is one mutation (one receipt, audited) that sets changed
// entries back and deletes those created since; its revert undoes it.
func TestAsOfAcrossRestartThenRestoreAndRevert(t *testing.T) {
	rs := newRestartable(t, store.Retention{})
	api := rs.api
	r1 := mustPut(t, api, "/state/test/fn/r/str", "text/plain", "before")
	// The clock of times in records is in ms: make the next change later.
	at := time.Now().UTC()
	waitFor(t, "a new millisecond", func() bool { return time.Since(at) > 2*time.Millisecond })
	mustPut(t, api, "/state/test/fn/r/str", "text/plain", "after")
	mustPut(t, api, "/state/test/fn/r/i32", "text/plain", "7")

	rs.restart()
	api = rs.api

	get := func(target string, hdr ...string) *response { return send(t, api, "GET", target, nil, hdr...) }
	if r := get("/state/test/fn/r/str?asOf="+r1.Commit, "Accept", "text/plain"); r.StatusCode != 200 || string(r.body) != "before" ||
		r.Header.Get("Statefun-Commit") != r1.Commit || r.Header.Get("ETag") != etag(mustUint(t, *r1.Version)) {
		t.Fatalf("str as of %s: %s %q %v", r1.Commit, r.Status, r.body, r.Header)
	}
	if r := get("/state/test/fn/r/str?asOfTime="+at.Format(time.RFC3339Nano), "Accept", "text/plain"); r.StatusCode != 200 || string(r.body) != "before" {
		t.Fatalf("str as of %s: %s %q", at, r.Status, r.body)
	}
	if r := get("/state/test/fn/r/i32?asOf=" + r1.Commit); r.StatusCode != 404 {
		t.Fatalf("i32 as of %s: %s %s, want 404 (no value then)", r1.Commit, r.Status, r.body)
	}
	if r := get("/state/test/fn/r/str?asOfTime=2000-01-01T00:00:00Z"); r.StatusCode != 404 {
		t.Fatalf("str in 2000: %s %s, want 404", r.Status, r.body)
	}
	var past struct {
		Complete bool `json:"complete"`
		Entries  []struct {
			State string           `json:"state"`
			Known bool             `json:"known"`
			Value *json.RawMessage `json:"value"`
		} `json:"entries"`
	}
	r := get("/state/test/fn/r?asOf=" + r1.Commit)
	r.json(t, &past)
	if r.StatusCode != 200 || !past.Complete || len(past.Entries) != 2 || past.Entries[0].State != "i32" || past.Entries[0].Value != nil ||
		past.Entries[1].State != "str" || past.Entries[1].Value == nil {
		t.Fatalf("address as of %s: %s %s", r1.Commit, r.Status, r.body)
	}
	for _, bad := range []string{"?asOf=x", "?asOf=1&asOfTime=2024-01-01T00:00:00Z", "?asOfTime=yesterday", "?asOf=" + otherPartition(rs.eng, "r") + ".5"} {
		if r := get("/state/test/fn/r/str" + bad); r.StatusCode != 400 {
			t.Errorf("GET str%s: %s %s, want 400", bad, r.Status, r.body)
		}
	}

	// Restore the address to r1: str back to "before", i32 deleted.
	rr := send(t, api, "POST", "/state/test/fn/r?asOf="+r1.Commit, nil, "Statefun-Reason", "undo the bad deploy")
	if rr.StatusCode != 200 {
		t.Fatalf("restore: %s %s", rr.Status, rr.body)
	}
	var rrc receiptJSON
	rr.json(t, &rrc)
	if r := get("/state/test/fn/r/str", "Accept", "text/plain"); string(r.body) != "before" {
		t.Fatalf("after the restore str = %s %q", r.Status, r.body)
	}
	if r := get("/state/test/fn/r/i32"); r.StatusCode != 404 {
		t.Fatalf("after the restore i32: %s %s", r.Status, r.body)
	}
	var audit struct {
		Records []struct {
			Mutation, State, Principal, Reason string
		} `json:"records"`
	}
	get("/audit?mutation="+rrc.Mutation).json(t, &audit)
	if len(audit.Records) != 2 || audit.Records[0].Reason != "undo the bad deploy" {
		t.Fatalf("the restore's audit records: %+v", audit)
	}
	h := getHistoryPage(t, api, "/state/test/fn/r/str/history?limit=1")
	if h.Records[0].Cause.Mutation != rrc.Mutation || string(h.Records[0].Value) != `"before"` {
		t.Fatalf("str's newest change: %+v", h.Records[0])
	}
	// Revert the restore: both entries as they were before it.
	if r := send(t, api, "POST", "/mutations/"+rrc.Mutation+"/revert", nil); r.StatusCode != 200 {
		t.Fatalf("revert: %s %s", r.Status, r.body)
	}
	if r := get("/state/test/fn/r/str", "Accept", "text/plain"); string(r.body) != "after" {
		t.Fatalf("after the revert str = %q", r.body)
	}
	if r := get("/state/test/fn/r/i32", "Accept", "text/plain"); string(r.body) != "7" {
		t.Fatalf("after the revert i32 = %s %q", r.Status, r.body)
	}
	// One entry: only str goes back.
	if r := send(t, api, "POST", "/state/test/fn/r/str?asOf="+r1.Commit, nil); r.StatusCode != 200 {
		t.Fatalf("restore of str: %s %s", r.Status, r.body)
	}
	if r := get("/state/test/fn/r/i32", "Accept", "text/plain"); string(r.body) != "7" {
		t.Fatalf("restore of str touched i32: %s %q", r.Status, r.body)
	}
	// Accepted: durable at once, applied at its turn, the image stored with
	// it (it survives a restart while it waits).
	mustPut(t, api, "/state/test/fn/r/str", "text/plain", "later")
	ra := send(t, api, "POST", "/state/test/fn/r/str?ack=accepted&asOf="+r1.Commit, nil)
	if ra.StatusCode != 202 || ra.Header.Get("Location") == "" {
		t.Fatalf("restore with ack=accepted: %s %s %v", ra.Status, ra.body, ra.Header)
	}
	var rcpt receiptJSON
	get(ra.Header.Get("Location")+"?wait=10s").json(t, &rcpt)
	if rcpt.Status != "committed" {
		t.Fatalf("the accepted restore's receipt: %+v", rcpt)
	}
	if r := get("/state/test/fn/r/str", "Accept", "text/plain"); string(r.body) != "before" {
		t.Fatalf("after the accepted restore str = %s %q", r.Status, r.body)
	}
	if r := send(t, api, "POST", "/state/test/fn/r?ack=accepted&asOf="+r1.Commit, nil); r.StatusCode != 202 {
		t.Fatalf("address restore with ack=accepted: %s %s", r.Status, r.body)
	} else if r := get(r.Header.Get("Location") + "?wait=10s"); !strings.Contains(string(r.body), `"committed"`) {
		t.Fatalf("the accepted address restore's receipt: %s", r.body)
	}
	if r := get("/state/test/fn/r/i32"); r.StatusCode != 404 {
		t.Fatalf("after the accepted address restore i32: %s %s, want 404", r.Status, r.body)
	}
	for _, bad := range []string{""} {
		if r := send(t, api, "POST", "/state/test/fn/r"+bad, nil); r.StatusCode != 400 {
			t.Errorf("POST address%s: %s %s, want 400", bad, r.Status, r.body)
		}
	}
	if r := send(t, api, "POST", "/state/test/fn/r/str?asOf=1", nil, "If-Match", `"1"`); r.StatusCode != 400 {
		t.Errorf("restore with If-Match: %s, want 400", r.Status)
	}
}

// TestRestoreRefusesWhatHistoryNoLongerKnows: after retention removed the
// older changes of an entry, a read or a restore to a point before them is
// a 410, and nothing is changed.
func TestRestoreRefusesWhatHistoryNoLongerKnows(t *testing.T) {
	rs := newRestartable(t, store.Retention{HistoryCount: 1})
	r1 := mustPut(t, rs.api, "/state/test/fn/g/str", "text/plain", "one")
	mustPut(t, rs.api, "/state/test/fn/g/str", "text/plain", "two")
	if _, err := rs.db.Sweep(); err != nil {
		t.Fatal(err)
	}
	if r := send(t, rs.api, "GET", "/state/test/fn/g/str?asOf="+r1.Commit, nil); r.StatusCode != http.StatusGone {
		t.Fatalf("as of a trimmed change: %s %s, want 410", r.Status, r.body)
	}
	for _, target := range []string{"/state/test/fn/g?asOf=", "/state/test/fn/g/str?asOf="} {
		if r := send(t, rs.api, "POST", target+r1.Commit, nil); r.StatusCode != http.StatusGone {
			t.Fatalf("POST %s: %s %s, want 410", target, r.Status, r.body)
		}
	}
	if r := send(t, rs.api, "GET", "/state/test/fn/g/str", nil, "Accept", "text/plain"); string(r.body) != "two" {
		t.Fatalf("str = %q after a refused restore", r.body)
	}
}

// TestMinCommit: a read with ?minCommit= answers once that commit of the
// address's partition is durable — at once for a committed receipt, after
// waiting for a commit still to come — and a 412 with the partition's
// position when it does not come in time.
func TestMinCommit(t *testing.T) {
	rs := newRestartable(t, store.Retention{})
	api := rs.api
	rc := mustPut(t, api, "/state/test/fn/m/str", "text/plain", "v1")
	if r := send(t, api, "GET", "/state/test/fn/m/str?minCommit="+rc.Commit, nil, "Accept", "text/plain"); r.StatusCode != 200 || string(r.body) != "v1" {
		t.Fatalf("GET ?minCommit=%s: %s %q", rc.Commit, r.Status, r.body)
	}
	part, commit, _ := strings.Cut(rc.Commit, ".")
	n := mustUint(t, commit)
	next := fmt.Sprintf("%s.%d", part, n+1)
	// A read waiting for the next commit of the partition answers once the
	// next write is durable, with that write.
	got := make(chan *response, 1)
	go func() {
		got <- send(t, api, "GET", "/state/test/fn/m/str?wait=20s&minCommit="+next, nil, "Accept", "text/plain")
	}()
	waitFor(t, "the read to wait", func() bool { return rs.waiting.Load() > 0 })
	mustPut(t, api, "/state/test/fn/m/str", "text/plain", "v2")
	if r := <-got; r.StatusCode != 200 || string(r.body) != "v2" {
		t.Fatalf("GET ?minCommit=%s: %s %q, want v2", next, r.Status, r.body)
	}
	// A commit that does not come: 412 with the position.
	far := fmt.Sprintf("%s.%d", part, n+1000)
	r := send(t, api, "GET", "/state/test/fn/m?wait=30ms&minCommit="+far, nil)
	if p := r.problem(t); r.StatusCode != http.StatusPreconditionFailed || p.Position == nil || *p.Position != next {
		t.Fatalf("GET ?minCommit=%s: %s %s, want 412 at %s", far, r.Status, r.body, next)
	}
	if r := send(t, api, "GET", "/state/test/fn/m/str?minCommit="+otherPartition(rs.eng, "m")+".1", nil); r.StatusCode != 400 {
		t.Fatalf("a commit of another partition: %s %s, want 400", r.Status, r.body)
	}
	// The receipt read later names the same commit.
	var stored receiptJSON
	send(t, api, "GET", "/mutations/"+rc.Mutation, nil).json(t, &stored)
	if stored.Commit != rc.Commit {
		t.Fatalf("stored receipt's commit %q, the answer's %q", stored.Commit, rc.Commit)
	}
}

// otherPartition names a partition that does not own test/fn/<id>.
func otherPartition(eng *engine.Engine, id string) string {
	return strconv.Itoa((partitionOf(eng, address.Address{Type: fnType, ID: id}) + 1) % 4)
}

// TestRestoreEdges: a restore whose value has another type than the one
// the function registered since is a 409 and changes nothing; reads that
// wait for a commit and restores answer 503 once the runtime is closed;
// HEAD answers as GET.
func TestRestoreEdges(t *testing.T) {
	rs := coldRestartable(t, store.Retention{HistoryCount: 1})
	api := rs.api
	// Before test/fn registers str (as a string), an operator stores
	// another type there.
	r1 := mustPut(t, api, "/state/test/fn/e/str", "application/octet-stream", "x", "Statefun-Type", "test/Other")
	ingestTo(t, rs.eng, fnType, "warmup")
	waitFor(t, "test/fn to register its states", func() bool { return len(rs.eng.SpecsOf(fnType)) == len(fnSpecs) })
	mustPut(t, api, "/state/test/fn/e/str", "text/plain", "now a string")
	for _, target := range []string{"/state/test/fn/e/str?asOf=" + r1.Commit, "/state/test/fn/e?asOf=" + r1.Commit} {
		r := send(t, api, "POST", target, nil)
		if r.StatusCode != http.StatusConflict || r.problem(t).Receipt == nil || r.problem(t).Receipt.Status != "rejected" {
			t.Fatalf("POST %s: %s %s, want 409 with the rejected receipt", target, r.Status, r.body)
		}
	}
	if r := send(t, api, "GET", "/state/test/fn/e/str", nil, "Accept", "text/plain"); string(r.body) != "now a string" {
		t.Fatalf("str = %q after a refused restore", r.body)
	}
	// HEAD: 410 before the kept history, 412 for a commit not reached.
	if _, err := rs.db.Sweep(); err != nil {
		t.Fatal(err)
	}
	if r := send(t, api, "HEAD", "/state/test/fn/e/str?asOf="+r1.Commit, nil); r.StatusCode != http.StatusGone {
		t.Errorf("HEAD as of a trimmed change: %s", r.Status)
	}
	far := fmt.Sprint(partitionOf(rs.eng, address.Address{Type: fnType, ID: "e"}), ".1000000")
	for _, target := range []string{"/state/test/fn/e?wait=1ms&minCommit=" + far, "/state/test/fn/e/str/history?wait=1ms&minCommit=" + far} {
		for _, m := range []string{"GET", "HEAD"} {
			if r := send(t, api, m, target, nil); r.StatusCode != http.StatusPreconditionFailed {
				t.Errorf("%s %s: %s, want 412", m, target, r.Status)
			}
		}
	}
	if r := send(t, api, "HEAD", "/state/test/fn/e/str/history", nil); r.StatusCode != 200 || len(r.body) != 0 {
		t.Errorf("HEAD history: %s %q", r.Status, r.body)
	}
	// Closed: a read waiting for a commit, and a restore, are 503s.
	rs.eng.Close()
	for _, c := range []struct{ method, target string }{
		{"GET", "/state/test/fn/e/str/history?minCommit=" + far},
		{"HEAD", "/state/test/fn/e/str/history?minCommit=" + far},
		{"POST", "/state/test/fn/e/str?asOf=" + far},
		{"POST", "/state/test/fn/e?asOf=" + far},
	} {
		if r := send(t, api, c.method, c.target, nil); r.StatusCode != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" {
			t.Errorf("%s %s after Close: %s %s, want 503", c.method, c.target, r.Status, r.body)
		}
	}
}
