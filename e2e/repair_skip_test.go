package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/statefun-go/statefun/internal/sdktest"
)

// saPolicyRuntime starts a FeatureServer and a runtime with the poison
// policy: an address of sdktest/* pauses after 2 failed attempts.
func saPolicyRuntime(t *testing.T, e engine) (*runtime, *saAPI) {
	t.Helper()
	fs := sdktest.StartFeatureServer(t)
	rt := newRuntimeOn(t, e, saModule(saEndpoint{"sdktest/*", fs.URL}))
	rt.routeEgress(fs)
	saStart(rt, "http", saClient, "--pause-after", "sdktest/*=2")
	return rt, saAPIOf(t, "http://"+rt.admin, saClient)
}

// saInbox reads the inbox of sdktest/features/<id>.
type saInboxJSON struct {
	Paused   *struct{ Principal string } `json:"paused"`
	Inflight *struct {
		Waiting  bool `json:"waiting"`
		Messages []struct {
			Key string `json:"key"`
		} `json:"messages"`
	} `json:"inflight"`
	Queued struct {
		Count    int `json:"count"`
		Messages []struct {
			Key string `json:"key"`
		} `json:"messages"`
	} `json:"queued"`
}

func saInboxOf(t *testing.T, api *saAPI, id string) saInboxJSON {
	t.Helper()
	var in saInboxJSON
	if err := json.Unmarshal(api.expect(http.StatusOK, http.MethodGet, "/inbox/sdktest/features/"+id, "").body, &in); err != nil {
		t.Fatal(err)
	}
	return in
}

// saAwaitInbox waits until id's inbox is as ok says and returns it; it
// fails t after 20 s with what it last read. An acknowledged message is in
// the inbox at once in embedded mode; on a cluster node the playground
// ingress acknowledges it once Kafka has it, and the owner takes it into
// the inbox when it polls it a moment later.
func saAwaitInbox(t *testing.T, api *saAPI, id, what string, ok func(saInboxJSON) bool) saInboxJSON {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		in := saInboxOf(t, api, id)
		if ok(in) {
			return in
		}
		if time.Now().After(deadline) {
			t.Fatalf("the inbox of %s after 20s: %+v; want %s", id, in, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// inflightCount is the number of messages of the inbox's batch in flight.
func (in saInboxJSON) inflightCount() int {
	if in.Inflight == nil {
		return 0
	}
	return len(in.Inflight.Messages)
}

// saAwaitPaused waits until the poison policy paused id with its failed
// batch at the head of the inbox.
func saAwaitPaused(t *testing.T, api *saAPI, id string) saInboxJSON {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		in := saInboxOf(t, api, id)
		if in.Paused != nil && in.Inflight != nil && in.Inflight.Waiting {
			return in
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s was not paused by the poison policy", id)
	return saInboxJSON{}
}

// saPoison is a message the function fails on until sdktest.Fix(tag).
func saPoison(tag string) sdktest.Command {
	return saSeq(sdktest.Command{Op: sdktest.OpFailUnlessFixed, Tag: tag}, saIncr(), saReport(tag))
}

// The incident with a poisoned message, end to end with the official Go
// SDK over real HTTP: the function fails on it, the poison policy pauses
// the address while later messages keep arriving; the operator finds it
// in /failing, skips the head of the inbox, resumes; every later message
// runs once, in order; after the function is fixed the skipped message is
// re-sent and runs once; the audit log tells the story.
func TestSkipPoisonedMessageThenResend(t *testing.T) {
	t.Parallel()
	onEngines(t, func(t *testing.T, e engine) {
		rt, api := saPolicyRuntime(t, e)
		const id = "poisoned"
		tag := "poison-" + fmt.Sprint(time.Now().UnixNano())
		saWarm(t, rt, id)
		saCommand(t, rt, id, saPoison(tag))
		const n = 4
		for i := 1; i <= n; i++ {
			saCommand(t, rt, id, saSeq(saIncr(), saReport(fmt.Sprint("m-", i))))
		}
		in := saAwaitPaused(t, api, id)
		if in.Paused.Principal != "runtime" {
			t.Fatalf("paused by %q, want runtime", in.Paused.Principal)
		}
		if body := string(api.expect(http.StatusOK, http.MethodGet, "/failing?type=sdktest/features", "").body); !strings.Contains(body, `"id": "`+id+`"`) {
			t.Fatalf("/failing does not list %s: %s", id, body)
		}

		var skip struct {
			Status     string `json:"status"`
			DeadLetter string `json:"deadLetter"`
		}
		if err := json.Unmarshal(api.expect(http.StatusOK, http.MethodPost, "/inbox/sdktest/features/"+id+"/skip", `{"reason":"e2e: poisoned message"}`).body, &skip); err != nil {
			t.Fatal(err)
		}
		if skip.Status != "committed" || skip.DeadLetter == "" {
			t.Fatalf("skip receipt: %+v", skip)
		}
		api.expect(http.StatusOK, http.MethodPost, "/resume/sdktest/features/"+id, `{"reason":"e2e: skipped"}`)
		for i := 1; i <= n; i++ {
			rep := saAwaitReport(t, rt, fmt.Sprint("m-", i), 20*time.Second)
			if rep.States.Int64 == nil || *rep.States.Int64 != int64(i) {
				t.Fatalf("m-%d saw the counter at %v, want %d: a message ran twice or out of order", i, rep.States.Int64, i)
			}
		}

		// The dead letter is there until it is re-sent, after the fix.
		var dl struct {
			Typename  string `json:"typename"`
			Attempts  int    `json:"attempts"`
			LastError string `json:"lastError"`
		}
		if err := json.Unmarshal(api.expect(http.StatusOK, http.MethodGet, "/dead-letters/messages/"+skip.DeadLetter, "").body, &dl); err != nil {
			t.Fatal(err)
		}
		if dl.Typename != sdktest.CommandType || dl.Attempts != 2 || !strings.Contains(dl.LastError, "500") && !strings.Contains(dl.LastError, "poison") {
			t.Fatalf("dead letter: %+v", dl)
		}
		sdktest.Fix(tag)
		api.expect(http.StatusOK, http.MethodPost, "/dead-letters/messages/"+skip.DeadLetter+"/resend", `{"reason":"e2e: fixed"}`)
		rep := saAwaitReport(t, rt, tag, 20*time.Second)
		if rep.States.Int64 == nil || *rep.States.Int64 != n+1 {
			t.Fatalf("the re-sent message saw the counter at %v, want %d", rep.States.Int64, n+1)
		}
		api.expect(http.StatusNotFound, http.MethodPost, "/dead-letters/messages/"+skip.DeadLetter+"/resend", "")
		time.Sleep(300 * time.Millisecond)
		if p, ok, _ := rt.pop(saTopic); ok {
			t.Fatalf("an extra report: %s", p)
		}

		var audit struct {
			Records []struct {
				Op, Principal, Reason string
			} `json:"records"`
		}
		if err := json.Unmarshal(api.expect(http.StatusOK, http.MethodGet, "/audit?namespace=sdktest&type=features&id="+id, "").body, &audit); err != nil {
			t.Fatal(err)
		}
		var story []string
		for _, a := range audit.Records {
			story = append(story, a.Op+" by "+a.Principal)
		}
		if strings.Join(story, ", ") != "pause by runtime, skip by anonymous, resume by anonymous, resend by anonymous" {
			t.Fatalf("the audit log tells %q", story)
		}
	})
}

// TestSkipAndDeleteAddressSurviveSIGKILL SIGKILLs the runtime while a
// skip and a delete of an address are in flight. After the restart each
// happened entirely or not at all: the skipped message is a dead letter or
// still at the head of the inbox, never both or neither; the deleted
// address has its state and messages or none. The pauses hold; after the
// resume every message left runs once, in order.
func TestSkipAndDeleteAddressSurviveSIGKILL(t *testing.T) {
	t.Parallel()
	onEngines(t, func(t *testing.T, e engine) {
		rt, api := saPolicyRuntime(t, e)
		const a, b = "skip-crash", "delete-crash"
		tag := "crash-poison-" + fmt.Sprint(time.Now().UnixNano())
		saWarm(t, rt, a)
		saCommand(t, rt, a, saPoison(tag))
		const n = 3
		for i := 1; i <= n; i++ {
			saCommand(t, rt, a, saSeq(saIncr(), saReport(fmt.Sprint("a-", i))))
		}
		saAwaitPaused(t, api, a)
		saAwaitInbox(t, api, a, fmt.Sprint(n+1, " messages"), func(in saInboxJSON) bool { return in.inflightCount()+in.Queued.Count == n+1 })
		saWarm(t, rt, b)
		saCommand(t, rt, b, saSeq(saIncr(), saReport("b-0")))
		saAwaitReport(t, rt, "b-0", 20*time.Second)
		api.expect(http.StatusOK, http.MethodPost, "/pause/sdktest/features/"+b, "")
		saCommand(t, rt, b, saSeq(saIncr(), saReport("b-1")))
		saAwaitInbox(t, api, b, "b-1 queued", func(in saInboxJSON) bool { return in.Queued.Count == 1 })

		done := make(chan struct{}, 2)
		go func() {
			api.try(http.MethodPost, "/inbox/sdktest/features/"+a+"/skip", `{"reason":"e2e"}`)
			done <- struct{}{}
		}()
		go func() {
			api.try(http.MethodDelete, "/addresses/sdktest/features/"+b, `{"reason":"e2e"}`)
			done <- struct{}{}
		}()
		// Jitter, not a wait: the kill lands before, between or after the
		// two commits from one run to the next.
		time.Sleep(time.Duration(time.Now().UnixNano()%5) * time.Millisecond)
		rt.kill()
		<-done
		<-done
		saStart(rt, "http", saClient, "--pause-after", "sdktest/*=2")

		var dls struct {
			DeadLetters []struct {
				Address struct{ ID string } `json:"address"`
			} `json:"deadLetters"`
		}
		if err := json.Unmarshal(api.expect(http.StatusOK, http.MethodGet, "/dead-letters/messages?type=sdktest/features", "").body, &dls); err != nil {
			t.Fatal(err)
		}
		skipped := len(dls.DeadLetters) == 1 && dls.DeadLetters[0].Address.ID == a
		in := saInboxOf(t, api, a)
		// After a restart a failed batch is queued messages again.
		if want := n + 1; skipped {
			want = n
			if in.Queued.Count != want {
				t.Fatalf("skipped, but %s's inbox holds %d messages, want %d", a, in.Queued.Count, want)
			}
		} else if in.Queued.Count != want {
			t.Fatalf("not skipped, and %s's inbox holds %d messages, want %d", a, in.Queued.Count, want)
		}
		if in.Paused == nil {
			t.Fatalf("%s is no longer paused", a)
		}
		inB := saInboxOf(t, api, b)
		state := api.do(http.MethodGet, saEntry(b, sdktest.StateInt64), "")
		deleted := inB.Queued.Count == 0
		if deleted != (state.status == http.StatusNotFound) || (!deleted && inB.Queued.Count != 1) {
			t.Fatalf("the delete of %s is half done: %d queued, state %d", b, inB.Queued.Count, state.status)
		}
		t.Logf("after SIGKILL: skip applied %t, delete applied %t", skipped, deleted)

		if !skipped {
			api.expect(http.StatusOK, http.MethodPost, "/inbox/sdktest/features/"+a+"/skip", "")
		}
		api.expect(http.StatusOK, http.MethodPost, "/resume/sdktest/features/"+a, "")
		for i := 1; i <= n; i++ {
			rep := saAwaitReport(t, rt, fmt.Sprint("a-", i), 20*time.Second)
			if rep.States.Int64 == nil || *rep.States.Int64 != int64(i) {
				t.Fatalf("a-%d saw the counter at %v, want %d", i, rep.States.Int64, i)
			}
		}
		api.expect(http.StatusOK, http.MethodPost, "/resume/sdktest/features/"+b, "")
		if !deleted {
			rep := saAwaitReport(t, rt, "b-1", 20*time.Second)
			if rep.States.Int64 == nil || *rep.States.Int64 != 2 {
				t.Fatalf("b-1 saw the counter at %v, want 2", rep.States.Int64)
			}
		}
		time.Sleep(300 * time.Millisecond)
		if p, ok, _ := rt.pop(saTopic); ok {
			t.Fatalf("an extra report: %s", p)
		}
	})
}
