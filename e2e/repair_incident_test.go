package e2e

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/statefun-go/statefun/internal/sdktest"
)

// The incident with a poisoned state value, end to end with the official Go
// SDK over real HTTP (internal/stateapi's TestRepairIncident drives the same
// story in process): an operator's bad import writes a document that is not
// JSON, so every invocation of the address fails in the SDK while messages
// keep arriving; the poison policy pauses the address; the operator finds
// it in /failing, reads the inbox, repairs the value with If-Match (a stale
// version is refused with 412 and changes nothing) and resumes; every queued
// message then runs exactly once, in arrival order, on the repaired value;
// the audit log tells the story.
func TestRepairPoisonedStateIncident(t *testing.T) {
	t.Parallel()
	onEngines(t, func(t *testing.T, e engine) {
		rt, api := saPolicyRuntime(t, e)
		const id = "poisoned-state"
		doc := saEntry(id, sdktest.StateDoc)
		saWarm(t, rt, id)
		saReceiptOf(t, api.do(http.MethodPut, doc, "{not json", "Content-Type", "application/octet-stream",
			"Statefun-Type", sdktest.DocType, "Statefun-Reason", "bad import"), "committed")
		msg := func(i int) sdktest.Command { return saSeq(saIncr(), saReport(fmt.Sprint("m-", i))) }
		for i := 1; i <= 5; i++ {
			saCommand(t, rt, id, msg(i))
		}
		in := saAwaitPaused(t, api, id)
		if in.Paused.Principal != "runtime" {
			t.Fatalf("paused by %q, want runtime", in.Paused.Principal)
		}
		if body := string(api.expect(http.StatusOK, http.MethodGet, "/failing?type=sdktest/features", "").body); !strings.Contains(body, `"id": "`+id+`"`) {
			t.Fatalf("/failing does not list %s: %s", id, body)
		}
		// Messages keep arriving while it is paused.
		saCommand(t, rt, id, msg(6))
		saCommand(t, rt, id, msg(7))
		saAwaitInbox(t, api, id, "the 7 messages, the failed batch in flight", func(in saInboxJSON) bool {
			return in.Paused != nil && in.Inflight != nil && in.Inflight.Waiting && in.inflightCount()+in.Queued.Count == 7
		})
		if p, ok, _ := rt.pop(saTopic); ok {
			t.Fatalf("the poisoned address reported %s: an invocation got through", p)
		}

		// The repair: read the value, write it back conditionally, resume.
		r := api.expect(http.StatusOK, http.MethodGet, doc, "", "Accept", "application/octet-stream")
		if string(r.body) != "{not json" || r.etag() == "" {
			t.Fatalf("GET of the poisoned value: %s (ETag %q)", r, r.etag())
		}
		fixed := `{"typename":"` + sdktest.DocType + `","value":{"name":"fixed","n":7}}`
		if stale := api.do(http.MethodPut, doc, fixed, "Content-Type", "application/json", "If-Match", `"0"`); stale.status != http.StatusPreconditionFailed {
			t.Fatalf("PUT with a stale If-Match: %s, want 412", stale)
		}
		saReceiptOf(t, api.do(http.MethodPut, doc, fixed, "Content-Type", "application/json",
			"If-Match", r.header.Get("ETag"), "Statefun-Reason", "repair"), "committed")
		api.expect(http.StatusOK, http.MethodPost, "/resume/sdktest/features/"+id, `{"reason":"repaired the import"}`)
		for i := 1; i <= 7; i++ {
			rep := saAwaitReport(t, rt, fmt.Sprint("m-", i), 20*time.Second)
			if rep.States.Int64 == nil || *rep.States.Int64 != int64(i) {
				t.Fatalf("m-%d saw the counter at %s, want %d: a message ran twice, out of order, or a failed attempt's write was kept", i, saI64(rep.States.Int64), i)
			}
			if rep.States.Doc == nil || rep.States.Doc.Name != "fixed" {
				t.Fatalf("m-%d read the document %+v, want the repaired one", i, rep.States.Doc)
			}
		}
		time.Sleep(300 * time.Millisecond)
		if p, ok, _ := rt.pop(saTopic); ok {
			t.Fatalf("an extra report: %s", p)
		}
		if body := string(api.expect(http.StatusOK, http.MethodGet, "/failing?type=sdktest/features", "").body); strings.Contains(body, id) {
			t.Fatalf("/failing still lists %s: %s", id, body)
		}
		var story []string
		for _, a := range api.audit("namespace=sdktest&type=features&id=" + id) {
			story = append(story, a.Op+" by "+a.Principal+": "+a.Reason)
		}
		want := []string{"put by anonymous: bad import", "pause by runtime", "put by anonymous: repair", "resume by anonymous: repaired the import"}
		if len(story) != len(want) || !slices.Equal(story[:1], want[:1]) || !strings.HasPrefix(story[1], want[1]) || !slices.Equal(story[2:], want[2:]) {
			t.Fatalf("the audit log tells\n%s\nwant\n%s", strings.Join(story, "\n"), strings.Join(want, "\n"))
		}
	})
}
