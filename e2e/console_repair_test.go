package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The console's repairs of inboxes, of whole addresses and of the past,
// and the Kafka ingresses' dead letters, each done in the page as an
// operator would and checked as they would check it: the receipt on the
// page, then the state, the inbox or the function through the API.
// Subtests of TestConsole (console_test.go), each on ids of its own.

// cnInbox is what GET /inbox says of an address, as far as these tests
// look.
type cnInbox struct {
	Paused   *struct{ Principal string } `json:"paused"`
	Inflight *struct {
		Attempt  int `json:"attempt"`
		Messages []struct {
			Key string `json:"key"`
		} `json:"messages"`
	} `json:"inflight"`
	Queued struct {
		Count int `json:"count"`
	} `json:"queued"`
	Delayed []struct {
		Timer string `json:"timer"`
		Token string `json:"token"`
	} `json:"delayed"`
}

// inbox reads console/counter/<id>'s inbox through the API.
func (e *cnEnv) inbox(t *testing.T, id string) cnInbox {
	t.Helper()
	return saDecode[cnInbox](t, e.api.withT(t).expect(http.StatusOK, http.MethodGet, "/inbox/console/counter/"+id, ""))
}

// awaitPoisonPause waits until the poison policy has paused id with its
// failed batch at the head.
func (e *cnEnv) awaitPoisonPause(t *testing.T, id string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		in := e.inbox(t, id)
		if in.Paused != nil && in.Inflight != nil && len(in.Inflight.Messages) > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s was never paused by the poison policy: %+v", id, in)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// awaitLabel waits until console/counter/<id>'s label, read through the
// API, is want: the function's answer is applied after it has handled the
// message (awaitSeen).
func (e *cnEnv) awaitLabel(t *testing.T, id, want string) {
	t.Helper()
	var got string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		r := e.api.withT(t).do(http.MethodGet, "/state/console/counter/"+id+"/label", "", "Accept", "text/plain")
		if got = r.String(); r.status == http.StatusOK && string(r.body) == want {
			return
		}
	}
	t.Fatalf("console/counter/%s's label reads %s, want %q", id, got, want)
}

// inflightButton is the XPath of a button of the failed batch's message.
func inflightButton(label string) string {
	return fmt.Sprintf(`//table[@aria-label="Messages of the batch in flight"]//button[normalize-space()=%q]`, label)
}

// testSkipResend: a message the function cannot handle fails its batch
// and the poison policy pauses the address; the operator skips it out of
// the failed batch, resumes (the messages behind it run), and once the
// function is fixed re-sends the dead letter from the dead-letters page.
func (e *cnEnv) testSkipResend(t *testing.T) {
	const id = "henry"
	e.send(t, id, "a")
	e.awaitSeen(t, id, 1)
	e.send(t, id, "poison")
	e.awaitPoisonPause(t, id)
	e.send(t, id, "b")
	e.send(t, id, "c")

	ctx := e.tab(t)
	e.signIn(t, ctx, cnOperatorToken, "operator")
	e.goTo(t, ctx, "#/browse/console/counter/"+id, `[data-status="paused"]`)
	waitText(t, ctx, "pre.lasterror", `cannot digest the message`)
	waitText(t, ctx, `dd[data-queued]`, "2")
	click(t, ctx, inflightButton("Skip"))
	confirm(t, ctx, "e2e: take the poison out of the way")
	// The receipt names the dead letter.
	waitText(t, ctx, "#notices", "Dead letter")
	deadLetter := textOf(t, ctx, `#notices a[href="#/dead-letters"] code`)
	if in := e.inbox(t, id); (in.Inflight != nil && len(in.Inflight.Messages) > 0) || in.Queued.Count != 2 {
		t.Fatalf("after the skip the inbox is %+v", in)
	}
	click(t, ctx, button("Resume"))
	confirm(t, ctx, "e2e: the rest may run")
	// The messages behind it run, once each; the poison did not.
	if seen := e.awaitSeen(t, id, 3); fmt.Sprint(seen) != "[0 1 2]" {
		t.Fatalf("the function read %v, want [0 1 2]", seen)
	}
	e.awaitLabel(t, id, "last message: c")

	// The fix is deployed: re-send the dead letter.
	e.fn.cured.Store(true)
	e.goTo(t, ctx, "#/dead-letters", fmt.Sprintf(`tr[data-dead-letter=%q]`, deadLetter))
	row := fmt.Sprintf(`tr[data-dead-letter=%q]`, deadLetter)
	waitText(t, ctx, row, "poison")
	waitText(t, ctx, row, "console/counter/henry")
	click(t, ctx, fmt.Sprintf(`//tr[@data-dead-letter=%q]//summary`, deadLetter))
	waitText(t, ctx, row+" .lasterror", `cannot digest`)
	e.shoot(t, ctx, "dead-letters")
	e.checkA11y(t, ctx, "dead letters")
	click(t, ctx, fmt.Sprintf(`//tr[@data-dead-letter=%q]//button[normalize-space()="Re-send"]`, deadLetter))
	confirm(t, ctx, "e2e: fixed in the new release")
	waitText(t, ctx, "#notices", "Re-sent")
	waitText(t, ctx, "#notices", "New message")
	e.awaitSeen(t, id, 4)
	e.awaitLabel(t, id, "last message: poison")
	// It left the dead letters; the page says so after its reload.
	waitText(t, ctx, "main", "No message dead letter.")
	list := e.api.withT(t).expect(http.StatusOK, http.MethodGet, "/dead-letters/messages", "")
	if strings.Contains(string(list.body), deadLetter) {
		t.Fatalf("the re-sent dead letter is still listed: %s", list.body)
	}
	// The audit log of the address, newest first.
	e.goTo(t, ctx, "#/audit?namespace=console&type=counter&id="+id, `tr[data-op="resend"]`)
	e.awaitAuditOps(t, ctx, "resend,resume,skip,pause")
}

// testEditMessage: instead of skipping a poisoned message, the operator
// edits it where it waits in the failed batch, then resumes: the function
// gets the edited message, and the audit record keeps the one it replaced.
func (e *cnEnv) testEditMessage(t *testing.T) {
	const id = "iris"
	e.fn.cured.Store(false) // the previous subtest deployed the fix
	t.Cleanup(func() { e.fn.cured.Store(true) })
	e.send(t, id, "poison")
	e.awaitPoisonPause(t, id)

	ctx := e.tab(t)
	e.signIn(t, ctx, cnOperatorToken, "operator")
	e.goTo(t, ctx, "#/browse/console/counter/"+id, `[data-status="paused"]`)
	// The message that poisons the address shows its value where it waits.
	waitText(t, ctx, ".msg-value", "poison")
	click(t, ctx, inflightButton("Edit"))
	run(t, ctx, "the message editor", chromedp.WaitVisible(chromedp.CSS("dialog[open] #msg-value")))
	if tn := get(t, ctx, "the typename", chromedp.Value(chromedp.CSS("#msg-typename"))); tn != "console/Ping" {
		t.Fatalf("the editor starts from typename %q", tn)
	}
	if v := get(t, ctx, "the value", chromedp.Value(chromedp.CSS("#msg-value"))); v != "poison" {
		t.Fatalf("the editor starts from the value %q, want the message's", v)
	}
	// Typing shows the change as a diff, as an entry's edit does.
	run(t, ctx, "a change", chromedp.SendKeys(chromedp.CSS("#msg-value"), " no more"))
	waitText(t, ctx, "#msg-diff", "poison no more")
	e.checkA11y(t, ctx, "message editor")
	// A value that is not base64 is refused in the dialog.
	run(t, ctx, "a bad base64 value",
		chromedp.SetValue(chromedp.CSS("#msg-format"), "base64"),
		chromedp.SendKeys(chromedp.CSS("#msg-value"), "not base64!"),
		chromedp.Click(chromedp.CSS("dialog[open] button[data-confirm]")))
	waitText(t, ctx, "dialog[open] .error-text", "not base64")
	run(t, ctx, "the edited value",
		chromedp.SetValue(chromedp.CSS("#msg-format"), "text"),
		chromedp.SetValue(chromedp.CSS("#msg-value"), "antidote"))
	confirm(t, ctx, "e2e: replace the poison")
	waitText(t, ctx, "#notices", "Edited")
	waitText(t, ctx, "#notices", "committed")
	if seen := e.fn.saw(id); len(seen) != 0 {
		t.Fatalf("the function ran %v while %s was paused", seen, id)
	}
	click(t, ctx, button("Resume"))
	confirm(t, ctx, "e2e: retry with the edited message")
	e.awaitSeen(t, id, 1)
	e.awaitLabel(t, id, "last message: antidote")
	// The audit record of the edit keeps the message it replaced.
	e.goTo(t, ctx, "#/audit?namespace=console&type=counter&id="+id, `tr[data-op="edit-message"]`)
	click(t, ctx, `//tr[@data-op="edit-message"]//summary`)
	waitText(t, ctx, `tr[data-op="edit-message"] .audit-detail`, "The message before the edit")
	waitText(t, ctx, `tr[data-op="edit-message"] .audit-detail`, "poison")
	e.checkA11y(t, ctx, "audit of a message edit")
}

// testCancelDelayed: the function sends itself a delayed reminder; the
// operator cancels it from the address's page.
func (e *cnEnv) testCancelDelayed(t *testing.T) {
	const id = "gina"
	e.send(t, id, "later")
	// The reminder is pending once the function's answer is applied.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		in := e.inbox(t, id)
		if len(in.Delayed) == 1 && in.Delayed[0].Token == "reminder-"+id {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the delayed reminder is not pending: %+v", in.Delayed)
		}
	}
	ctx := e.tab(t)
	e.signIn(t, ctx, cnOperatorToken, "operator")
	e.goTo(t, ctx, "#/browse/console/counter/"+id, `tr[data-timer]`)
	waitText(t, ctx, `tr[data-timer]`, "reminder-"+id)
	click(t, ctx, `//tr[@data-timer]//button[normalize-space()="Cancel"]`)
	confirm(t, ctx, "e2e: no reminder after all")
	waitText(t, ctx, "#notices", "Delayed message cancelled")
	waitText(t, ctx, "#notices", "committed")
	waitText(t, ctx, `section[aria-labelledby="inbox-h"]`, "No delayed message is pending for this address.")
	if in := e.inbox(t, id); len(in.Delayed) != 0 {
		t.Fatalf("after the cancel the inbox still has %+v", in.Delayed)
	}
}

// testDeleteAddress: an address is deleted whole only once paused; the
// page offers the delete then, and afterwards the address holds nothing
// and stays paused.
func (e *cnEnv) testDeleteAddress(t *testing.T) {
	const id = "jack"
	e.send(t, id, "later") // state, and a delayed message it sent
	e.awaitSeen(t, id, 1)
	ctx := e.tab(t)
	e.signIn(t, ctx, cnOperatorToken, "operator")
	e.goTo(t, ctx, "#/browse/console/counter/"+id, `[data-status="running"]`)
	waitText(t, ctx, `tr[data-state="count"]`, "1")
	if disabled := evaluate[bool](t, ctx, "the delete button", `Array.from(document.querySelectorAll('main button')).find(b => b.textContent.trim() === 'Delete address').disabled`); !disabled {
		t.Fatal("Delete address is offered for a running address")
	}
	click(t, ctx, button("Pause"))
	confirm(t, ctx, "e2e: hold jack")
	run(t, ctx, "paused", chromedp.WaitVisible(chromedp.CSS(`[data-status="paused"]`)))
	click(t, ctx, button("Delete address"))
	confirm(t, ctx, "e2e: jack is gone")
	waitText(t, ctx, "#notices", "Address deleted")
	waitText(t, ctx, "#notices", "committed")
	// The page shows the registered states without values, nothing waits.
	waitText(t, ctx, `tr[data-state="count"]`, "no value")
	waitText(t, ctx, `section[aria-labelledby="inbox-h"]`, "No delayed message is pending for this address.")
	run(t, ctx, "still paused", chromedp.WaitVisible(chromedp.CSS(`[data-status="paused"]`)))
	e.api.withT(t).expect(http.StatusNotFound, http.MethodGet, "/state/console/counter/"+id+"/count", "")
	if in := e.inbox(t, id); in.Paused == nil || len(in.Delayed) != 0 || in.Queued.Count != 0 {
		t.Fatalf("after the delete the inbox is %+v", in)
	}
}

// testRestore: an entry restored to its value at an earlier commit from
// its history, then the whole address restored to an earlier point.
func (e *cnEnv) testRestore(t *testing.T) {
	const id = "kate"
	e.send(t, id, "first")
	e.awaitSeen(t, id, 1)
	e.send(t, id, "second")
	e.awaitSeen(t, id, 2)
	e.api.withT(t).expect(http.StatusOK, http.MethodPut, "/state/console/counter/"+id+"/label", "bad import",
		"Content-Type", "text/plain", "Statefun-Reason", "import")
	ctx := e.tab(t)
	e.signIn(t, ctx, cnOperatorToken, "operator")

	// The count as of its first change: 1. Restore it.
	e.goTo(t, ctx, "#/browse/console/counter/"+id+"/count", `tr[data-commit]`)
	click(t, ctx, `(//tr[@data-commit])[last()]//a[normalize-space()="View"]`)
	waitText(t, ctx, "#asof-value", "1")
	click(t, ctx, button("Restore this value"))
	waitText(t, ctx, "dialog[open] .diff .del", "2")
	waitText(t, ctx, "dialog[open] .diff .ins", "1")
	confirm(t, ctx, "e2e: back to one")
	waitText(t, ctx, "#notices", "Restored count")
	waitText(t, ctx, "#notices", "committed")
	if c := e.count(t, id); c != "1" {
		t.Fatalf("count %s after the restore, want 1", c)
	}
	waitText(t, ctx, "#current-value", "1")

	// The whole address as of the first message's commit: the label the
	// function wrote then comes back over the bad import.
	e.goTo(t, ctx, "#/browse/console/counter/"+id+"/label", `tr[data-commit]`)
	click(t, ctx, `(//tr[@data-commit])[last()]//a[normalize-space()="Address then"]`)
	run(t, ctx, "the address then", chromedp.WaitVisible(chromedp.CSS(`table[aria-label^="Entries as of commit"]`)))
	waitText(t, ctx, `table[aria-label^="Entries as of commit"]`, "last message: first")
	e.checkA11y(t, ctx, "address as of a commit")
	click(t, ctx, button("Restore address to this point"))
	confirm(t, ctx, "e2e: undo everything since the first message")
	waitText(t, ctx, "#notices", "Address restored")
	waitText(t, ctx, "#notices", "committed")
	run(t, ctx, "back at the address", chromedp.WaitVisible(chromedp.CSS(`tr[data-state="label"]`)))
	waitText(t, ctx, `tr[data-state="label"]`, "last message: first")
	e.awaitLabel(t, id, "last message: first")
	if c := e.count(t, id); c != "1" {
		t.Fatalf("count %s after the address restore, want 1", c)
	}
}

// testKafkaDeadLetters: records the Kafka ingress console/in cannot turn
// into messages (no key, an empty key) are its dead letters; the page
// counts them by topic and reason and lists each record with its key and
// value, while a good record reaches the function.
func (e *cnEnv) testKafkaDeadLetters(t *testing.T) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.kafka), kgo.DefaultProduceTopic("in"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cl.ProduceSync(c,
		&kgo.Record{Value: []byte("a record without a key")},
		&kgo.Record{Key: []byte{}, Value: []byte("a record with an empty key")},
		&kgo.Record{Key: []byte("kafka-ok"), Value: []byte("from kafka")},
	).FirstErr(); err != nil {
		t.Fatal(err)
	}
	e.awaitSeen(t, "kafka-ok", 1)
	type summary struct {
		Ingresses []struct {
			Ingress     string `json:"ingress"`
			DeadLetters int    `json:"deadLetters"`
		} `json:"ingresses"`
	}
	for deadline := time.Now().Add(20 * time.Second); ; {
		r := e.api.withT(t).expect(http.StatusOK, http.MethodGet, "/ingresses", "")
		if s := saDecode[summary](t, r); len(s.Ingresses) == 1 && s.Ingresses[0].Ingress == "console/in" && s.Ingresses[0].DeadLetters == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the ingress's dead letters: %s", r.body)
		}
		time.Sleep(50 * time.Millisecond)
	}

	ctx := e.tab(t)
	e.signIn(t, ctx, cnOperatorToken, "operator")
	e.goTo(t, ctx, "#/dead-letters", `tr[data-ingress="console/in"]`)
	nullKey := `tr[data-ingress="console/in"][data-reason="null-key"]`
	waitText(t, ctx, nullKey, "1")
	waitText(t, ctx, `tr[data-ingress="console/in"][data-reason="empty-key"]`, "1")
	// The count leads to the records of that topic and reason.
	click(t, ctx, `//tr[@data-ingress="console/in" and @data-reason="null-key"]//td[contains(@class,"num")]/a`)
	run(t, ctx, "the records", chromedp.WaitVisible(chromedp.CSS(`tr[data-offset]`)))
	if v := get(t, ctx, "the reason filter", chromedp.Value(chromedp.CSS("#dl-reason"))); v != "null-key" {
		t.Fatalf("the records page is filtered by %q", v)
	}
	rows := evaluate[[]string](t, ctx, "the records", `Array.from(document.querySelectorAll('tr[data-offset]')).map(r => r.innerText)`)
	if len(rows) != 1 || !strings.Contains(rows[0], "a record without a key") || !strings.Contains(rows[0], "null") || !strings.Contains(rows[0], "partition 0, offset 0") {
		t.Fatalf("the null-key records read %q", rows)
	}
	e.shoot(t, ctx, "kafka-dead-letters")
	e.checkA11y(t, ctx, "kafka dead letters")
	// Without a filter both are listed, in the order they were stored.
	click(t, ctx, `//a[normalize-space()="Clear"]`)
	waitText(t, ctx, "main", "a record with an empty key")
	if n := evaluate[int](t, ctx, "count the records", `document.querySelectorAll('tr[data-offset]').length`); n != 2 {
		t.Fatalf("%d records listed, want 2", n)
	}
}
