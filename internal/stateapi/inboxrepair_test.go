package stateapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/apache/flink-statefun/statefun-sdk-go/v3/pkg/statefun"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/engine"
)

// messagePoison serves test/fn with the official Go SDK: it fails on a
// message whose text is "poison" until it is fixed, else it logs each
// message's text per id and counts it in i64.
type messagePoison struct {
	fixed atomic.Bool
	mu    sync.Mutex
	log   map[string][]string
}

func (f *messagePoison) start(t *testing.T) string {
	f.log = map[string][]string{}
	b := statefun.StatefulFunctionsBuilder()
	err := b.WithSpec(statefun.StatefulFunctionSpec{
		FunctionType: statefun.TypeNameFrom(fnType.String()),
		States:       fnSpecs,
		Function: statefun.StatefulFunctionPointer(func(ctx statefun.Context, msg statefun.Message) error {
			if msg.AsString() == "poison" && !f.fixed.Load() {
				return errors.New("cannot handle a poisoned message")
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

func (f *messagePoison) seen(id string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.log[id]...)
}

// The repair loop of a poisoned message over the API: the poison policy
// pauses the address; the operator skips the head message (a dead letter
// now), resumes, and the later messages run once each, in order; after
// the function is fixed the dead letter is re-sent and runs once; a second
// re-send finds nothing. The audit log tells it: pause, skip, resume,
// resend.
func TestSkipResumeResend(t *testing.T) {
	fn := &messagePoison{}
	eng := startPolicyEngine(t, fn.start(t), 2, nil)
	api := serve(t, eng, Options{})
	ingestText(t, eng, "x", "poison")
	ingestText(t, eng, "x", "m1")
	ingestText(t, eng, "x", "m2")
	var in inboxJSON
	waitFor(t, "x paused by the policy", func() bool {
		in = inboxJSON{}
		send(t, api, "GET", "/inbox/test/fn/x", nil).json(t, &in)
		return in.Paused != nil && in.Inflight != nil && in.Inflight.Waiting
	})
	head := in.Inflight.Messages[0].Key

	// A key that is not in the inbox: 404, nothing skipped.
	r := send(t, api, "POST", "/inbox/test/fn/x/skip", []byte(`{"key":"0/ingress/999999"}`))
	if r.StatusCode != 404 || r.problem(t).Receipt == nil {
		t.Fatalf("skip of an unknown key: %s %s", r.Status, r.body)
	}
	r = send(t, api, "POST", "/inbox/test/fn/x/skip", []byte(`{"reason":"poisoned message"}`))
	var rc repairReceiptJSON
	r.json(t, &rc)
	if r.StatusCode != 200 || rc.Status != "committed" || rc.DeadLetter != rc.Mutation {
		t.Fatalf("skip: %s %s", r.Status, r.body)
	}
	// The receipt names its commit, and a read can ask for it.
	if rc.Commit == "" {
		t.Fatalf("the skip's receipt has no commit: %s", r.body)
	}
	if r := send(t, api, "GET", "/state/test/fn/x?minCommit="+url.QueryEscape(rc.Commit)+"&wait=1s", nil); r.StatusCode != 200 && r.StatusCode != 404 {
		t.Fatalf("a read at least as new as the skip: %s %s", r.Status, r.body)
	}
	var dl messageDeadLetterJSON
	send(t, api, "GET", "/dead-letters/messages/"+rc.DeadLetter, nil).json(t, &dl)
	if dl.InboxKey != head || dl.Value.Text == nil || !strings.HasSuffix(*dl.Value.Text, "poison") || dl.Attempts != 2 ||
		!strings.Contains(dl.LastError, "poisoned") || dl.Reason != "poisoned message" || dl.Address.ID != "x" {
		t.Fatalf("dead letter: %+v", dl)
	}
	if r := send(t, api, "POST", "/resume/test/fn/x", nil); r.StatusCode != 200 {
		t.Fatalf("resume: %s %s", r.Status, r.body)
	}
	waitFor(t, "m1 and m2", func() bool { return len(fn.seen("x")) == 2 })
	if got := fn.seen("x"); !slices.Equal(got, []string{"m1", "m2"}) {
		t.Fatalf("after the skip and resume the function saw %v", got)
	}

	fn.fixed.Store(true)
	r = send(t, api, "POST", "/dead-letters/messages/"+rc.DeadLetter+"/resend", []byte(`{"reason":"fixed in v2"}`))
	if r.StatusCode != 200 {
		t.Fatalf("resend: %s %s", r.Status, r.body)
	}
	waitFor(t, "the re-sent message", func() bool { return len(fn.seen("x")) == 3 })
	if r := send(t, api, "POST", "/dead-letters/messages/"+rc.DeadLetter+"/resend", nil); r.StatusCode != 404 {
		t.Fatalf("second resend: %s %s", r.Status, r.body)
	}
	if got := fn.seen("x"); !slices.Equal(got, []string{"m1", "m2", "poison"}) {
		t.Fatalf("the function saw %v", got)
	}
	var audit struct{ Records []auditJSON }
	send(t, api, "GET", "/audit?namespace=test&type=fn&id=x", nil).json(t, &audit)
	var ops []string
	for _, a := range audit.Records {
		ops = append(ops, a.Op+":"+a.Principal+":"+a.Reason)
	}
	if len(ops) != 4 || !strings.HasPrefix(ops[0], "pause:runtime:paused after 2 failed attempts") ||
		ops[1] != "skip:anonymous:poisoned message" || ops[2] != "resume:anonymous:" || ops[3] != "resend:anonymous:fixed in v2" {
		t.Fatalf("the audit log of x: %q", ops)
	}
	if m := audit.Records[1].Messages; len(m) != 1 || m[0].Value.Text == nil || !strings.HasSuffix(*m[0].Value.Text, "poison") {
		t.Fatalf("the skip's audit record: %+v", audit.Records[1])
	}
}

// An edit or a re-send that would make a message larger than a request to
// its target's endpoint carries is refused with 413, and changes nothing:
// stored, the message could never be delivered and would block its
// address.
func TestRepairRefusesUndeliverableMessages(t *testing.T) {
	fn := &messagePoison{}
	small := address.TypeName{Namespace: "test", Name: "small"}
	eng := startPolicyEngine(t, fn.start(t), 2, nil, func(o *engine.Options) {
		o.MaxBatchBytes = func(t address.TypeName) int {
			if t == small {
				return 20
			}
			return 1000
		}
	})
	api := serve(t, eng, Options{})
	ingestText(t, eng, "x", "poison")
	waitFor(t, "x paused by the policy", func() bool {
		var in inboxJSON
		send(t, api, "GET", "/inbox/test/fn/x", nil).json(t, &in)
		return in.Paused != nil && in.Inflight != nil && in.Inflight.Waiting
	})

	big, _ := json.Marshal(map[string]string{"typename": "io.statefun.types/string", "text": strings.Repeat("x", 2000)})
	r := send(t, api, "POST", "/inbox/test/fn/x/edit", big)
	if r.StatusCode != 413 || !strings.Contains(r.problem(t).Detail, "could never be delivered") {
		t.Fatalf("an edit over the endpoint's cap: %s %s", r.Status, r.body)
	}
	var in inboxJSON
	send(t, api, "GET", "/inbox/test/fn/x", nil).json(t, &in)
	if m := in.Inflight.Messages; len(m) != 1 || m[0].Size > 100 {
		t.Fatalf("after the refused edit the head message is %+v", in.Inflight)
	}

	var rc repairReceiptJSON
	if r := send(t, api, "POST", "/inbox/test/fn/x/skip", nil); r.StatusCode != 200 {
		t.Fatalf("skip: %s %s", r.Status, r.body)
	} else {
		r.json(t, &rc)
	}
	r = send(t, api, "POST", "/dead-letters/messages/"+rc.DeadLetter+"/resend", []byte(`{"target":{"namespace":"test","type":"small","id":"z"}}`))
	if r.StatusCode != 413 || !strings.Contains(r.problem(t).Detail, "to test/small is") {
		t.Fatalf("a re-send to an endpoint that cannot carry it: %s %s", r.Status, r.body)
	}
	// Still stored, and a re-send to its own address goes.
	if r := send(t, api, "GET", "/dead-letters/messages/"+rc.DeadLetter, nil); r.StatusCode != 200 {
		t.Fatalf("the dead letter after the refused re-send: %s %s", r.Status, r.body)
	}
	if r := send(t, api, "POST", "/dead-letters/messages/"+rc.DeadLetter+"/resend", nil); r.StatusCode != 200 {
		t.Fatalf("re-send to its own address: %s %s", r.Status, r.body)
	}
}

// Cancel of a queued and of a delayed message, delete of an address, the
// reverts, and the answers every route documents.
func TestInboxRepairAnswers(t *testing.T) {
	eng := startWithFunction(t, engineConfig{})
	api := serve(t, eng, Options{})
	big := bytes.Repeat([]byte("x"), maxRepairBody+1)
	for _, target := range []string{"/inbox/test/fn/c/skip", "/inbox/test/fn/c/edit", "/inbox/test/fn/c/cancel", "/addresses/test/fn/c", "/dead-letters/messages/nope/resend"} {
		method := "POST"
		if strings.HasPrefix(target, "/addresses/") {
			method = "DELETE"
		}
		if r := send(t, api, method, target, big); r.StatusCode != 413 {
			t.Errorf("%s %s with a big body: %s", method, target, r.Status)
		}
		if r := send(t, api, method, target, []byte(`{"nope":1}`)); r.StatusCode != 400 || !strings.Contains(string(r.body), "nope") {
			t.Errorf("%s %s with an unknown field: %s %s", method, target, r.Status, r.body)
		}
	}
	for _, c := range []struct{ target, body, want string }{
		{"/inbox/test/fn/c/cancel", `{}`, "key"},
		{"/inbox/test/fn/c/cancel", `{"key":"1/2"}`, "key"},
		{"/inbox/test/fn/c/cancel", `{"timer":"x"}`, "timer"},
		{"/inbox/test/fn/c/cancel", `{"token":"t"}`, "sender"},
		{"/inbox/test/fn/c/edit", `{"text":"v"}`, "typename"},
		{"/inbox/test/fn/c/edit", `{"typename":"bad"}`, "typename"},
		{"/inbox/test/fn/c/edit", `{"typename":"a/b","value":"%%"}`, "base64"},
		{"/inbox/test/fn/c/skip", `{"typename":"a/b"}`, "edit"},
		{"/dead-letters/messages/x/resend", `{"target":{"namespace":"a","type":"","id":"x"}}`, "target"},
	} {
		if r := send(t, api, "POST", c.target, []byte(c.body)); r.StatusCode != 400 || !strings.Contains(string(r.body), c.want) {
			t.Errorf("POST %s %s: %s %s, want 400 naming %s", c.target, c.body, r.Status, r.body, c.want)
		}
	}
	for _, target := range []string{"/dead-letters/messages?limit=0", "/dead-letters/messages?x=1", "/dead-letters/messages?type=nope"} {
		for _, m := range []string{"GET", "HEAD"} {
			if r := send(t, api, m, target, nil); r.StatusCode != 400 {
				t.Errorf("%s %s: %s", m, target, r.Status)
			}
		}
	}
	for _, m := range []string{"GET", "HEAD"} {
		if r := send(t, api, m, "/dead-letters/messages/nope", nil); r.StatusCode != 404 {
			t.Errorf("%s an unknown dead letter: %s", m, r.Status)
		}
		if r := send(t, api, m, "/dead-letters/messages/"+strings.Repeat("x", MaxSegmentBytes+1), nil); r.StatusCode != 400 {
			t.Errorf("%s an over-long dead letter id: %s", m, r.Status)
		}
	}
	if r := send(t, api, "GET", "/dead-letters/other", nil); r.StatusCode != 404 || !strings.Contains(string(r.body), "/ingresses/") {
		t.Errorf("GET /dead-letters/other: %s %s", r.Status, r.body)
	}

	// Nothing to act on: 404 with a rejected receipt.
	for _, c := range []struct{ method, target, body string }{
		{"POST", "/inbox/test/fn/c/skip", ""},
		{"POST", "/inbox/test/fn/c/edit", `{"typename":"a/b","text":"v"}`},
		{"POST", "/inbox/test/fn/c/cancel", `{"key":"0/ingress/1"}`},
		{"POST", "/inbox/test/fn/c/cancel", `{"timer":"0/7"}`},
	} {
		if r := send(t, api, c.method, c.target, []byte(c.body)); r.StatusCode != 404 {
			t.Errorf("%s %s %s: %s %s", c.method, c.target, c.body, r.Status, r.body)
		}
	}

	// Delete of an address: 409 unless paused, then everything in one
	// commit; 404 when nothing is left; the revert puts it back.
	mustPut(t, api, "/state/test/fn/d/str", "text/plain", "kept")
	if r := send(t, api, "DELETE", "/addresses/test/fn/d", nil); r.StatusCode != 409 || !strings.Contains(string(r.body), "not paused") {
		t.Fatalf("delete of an address not paused: %s %s", r.Status, r.body)
	}
	send(t, api, "POST", "/pause/test/fn/d", nil)
	ingest(t, eng, "d")
	ingest(t, eng, "d")
	r := send(t, api, "DELETE", "/addresses/test/fn/d", nil, "Statefun-Reason", "customer left")
	var del repairReceiptJSON
	r.json(t, &del)
	if r.StatusCode != 200 {
		t.Fatalf("delete: %s %s", r.Status, r.body)
	}
	var in inboxJSON
	send(t, api, "GET", "/inbox/test/fn/d", nil).json(t, &in)
	if in.Queued.Count != 0 || in.Inflight != nil {
		t.Fatalf("inbox after the delete: %+v", in)
	}
	if r := send(t, api, "GET", "/state/test/fn/d/str", nil); r.StatusCode != 404 {
		t.Fatalf("state after the delete: %s", r.Status)
	}
	if r := send(t, api, "DELETE", "/addresses/test/fn/d", nil); r.StatusCode != 404 {
		t.Fatalf("a second delete: %s %s", r.Status, r.body)
	}
	mustPut(t, api, "/state/test/fn/d/str", "text/plain", "new")
	if r := send(t, api, "POST", "/mutations/"+del.Mutation+"/revert", nil); r.StatusCode != 412 {
		t.Fatalf("revert over a new value: %s %s", r.Status, r.body)
	}
	send(t, api, "DELETE", "/state/test/fn/d/str", nil)
	if r := send(t, api, "POST", "/mutations/"+del.Mutation+"/revert", nil); r.StatusCode != 200 {
		t.Fatalf("revert: %s %s", r.Status, r.body)
	}
	in = inboxJSON{}
	send(t, api, "GET", "/inbox/test/fn/d", nil).json(t, &in)
	if in.Queued.Count != 2 {
		t.Fatalf("inbox after the revert: %+v", in)
	}
	if r := send(t, api, "GET", "/state/test/fn/d/str", nil); r.StatusCode != 200 || !strings.Contains(string(r.body), "kept") {
		t.Fatalf("state after the revert: %s %s", r.Status, r.body)
	}

	// Cancel a queued message and revert it: it comes back at the end.
	key := in.Queued.Messages[0].Key
	r = send(t, api, "POST", "/inbox/test/fn/d/cancel", []byte(`{"key":"`+key+`","reason":"dup"}`))
	var cancel repairReceiptJSON
	r.json(t, &cancel)
	if r.StatusCode != 200 {
		t.Fatalf("cancel: %s %s", r.Status, r.body)
	}
	if r := send(t, api, "POST", "/mutations/"+cancel.Mutation+"/revert", nil); r.StatusCode != 200 {
		t.Fatalf("revert of the cancel: %s %s", r.Status, r.body)
	}
	in = inboxJSON{}
	send(t, api, "GET", "/inbox/test/fn/d", nil).json(t, &in)
	if in.Queued.Count != 2 || in.Queued.Messages[0].Key == key || in.Queued.Messages[1].Key == key {
		t.Fatalf("inbox after the revert of the cancel: %+v", in)
	}
	var audit struct{ Records []auditJSON }
	send(t, api, "GET", "/audit?namespace=test&type=fn&id=d", nil).json(t, &audit)
	var ops []string
	for _, a := range audit.Records {
		ops = append(ops, a.Op)
	}
	// The delete and its revert write a record per entry and one for the
	// messages.
	want := []string{"put", "pause", "delete-address", "delete-address", "put", "delete", "reinstate", "reinstate", "cancel", "reinstate"}
	if !slices.Equal(ops, want) {
		t.Fatalf("audit ops of d: %v", ops)
	}

	// After Close, every route that needs the engine answers 503.
	eng.Close()
	for _, c := range []struct{ method, target, body string }{
		{"POST", "/inbox/test/fn/d/skip", ""},
		{"POST", "/inbox/test/fn/d/edit", `{"typename":"a/b","text":"v"}`},
		{"POST", "/inbox/test/fn/d/cancel", `{"key":"0/ingress/1"}`},
		{"DELETE", "/addresses/test/fn/d", ""},
		{"GET", "/dead-letters/messages", ""},
		{"HEAD", "/dead-letters/messages", ""},
		{"GET", "/dead-letters/messages/x", ""},
		{"HEAD", "/dead-letters/messages/x", ""},
		{"POST", "/dead-letters/messages/x/resend", ""},
	} {
		if r := send(t, api, c.method, c.target, []byte(c.body)); r.StatusCode != 503 {
			t.Errorf("%s %s after Close: %s", c.method, c.target, r.Status)
		}
	}
}
