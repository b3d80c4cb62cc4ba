package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/statefun-go/statefun/pkg/stateclient"
)

// TestStateSkipResendDeleteAddress drives the inbox repair commands
// against `statefun run`'s app: a paused address's message is edited,
// then skipped (a dead letter, listed and shown), another cancelled and
// the cancel reverted; the dead letter is re-sent elsewhere; the address
// is deleted and the delete reverted; usage errors exit 2.
func TestStateSkipResendDeleteAddress(t *testing.T) {
	rt := startRuntime(t)
	rt.ok(t, "", "pause", "--reason", "look", "example/person", "ann")
	rt.Send(t, "ann")
	rt.Send(t, "ann")
	var in stateclient.Inbox
	if err := json.Unmarshal([]byte(rt.ok(t, "", "inbox", "-o", "json", "example/person", "ann").stdout), &in); err != nil || in.Queued.Count != 2 {
		t.Fatalf("inbox: %v %+v", err, in)
	}
	second := in.Queued.Messages[1].Key
	rt.ok(t, "", "edit-message", "--typename", "example/Edited", "--text", "hi", "example/person", "ann")
	r := rt.ok(t, "", "skip", "-o", "json", "--reason", "bad", "example/person", "ann")
	var rc stateclient.RepairReceipt
	if err := json.Unmarshal([]byte(r.stdout), &rc); err != nil || rc.Status != "committed" || rc.DeadLetter == "" {
		t.Fatalf("skip: %v %s", err, r.stdout)
	}
	r = rt.ok(t, "", "skipped")
	if !regexpLine(r.stdout, `^`+rc.DeadLetter+`\s.*\sexample/person ann\s+example/Edited\s+2\s+anonymous\s+bad$`) {
		t.Fatalf("skipped:\n%s", r.stdout)
	}
	var dl stateclient.MessageDeadLetter
	if err := json.Unmarshal([]byte(rt.ok(t, "", "skipped", "-o", "json", rc.DeadLetter).stdout), &dl); err != nil || dl.Value.Text == nil || *dl.Value.Text != "hi" {
		t.Fatalf("skipped %s: %v %+v", rc.DeadLetter, err, dl)
	}
	r = rt.ok(t, "", "cancel", "-o", "json", "--key", second, "--reason", "dup", "example/person", "ann")
	var cancel stateclient.RepairReceipt
	if err := json.Unmarshal([]byte(r.stdout), &cancel); err != nil {
		t.Fatal(err)
	}
	rt.ok(t, "", "revert", cancel.Mutation)
	r = rt.ok(t, "", "resend", "-o", "json", "--to", "example/person/bo/b", rc.DeadLetter)
	if !strings.Contains(r.stdout, `"id": "bo/b"`) {
		t.Fatalf("resend: %s", r.stdout)
	}
	if r := rt.cli(t, "", "resend", rc.DeadLetter); r.code != 1 {
		t.Fatalf("a second resend: %s", r)
	}
	if r := rt.cli(t, "", "delete-address", "--yes", "example/person", "bob"); r.code != 1 || !strings.Contains(r.stderr, "not paused") {
		t.Fatalf("delete-address of an address not paused: %s", r)
	}
	r = rt.ok(t, "", "delete-address", "--yes", "-o", "json", "--reason", "gone", "example/person", "ann")
	var del stateclient.RepairReceipt
	if err := json.Unmarshal([]byte(r.stdout), &del); err != nil {
		t.Fatal(err)
	}
	in = stateclient.Inbox{}
	json.Unmarshal([]byte(rt.ok(t, "", "inbox", "-o", "json", "example/person", "ann").stdout), &in)
	if in.Queued.Count != 0 {
		t.Fatalf("inbox after delete-address: %+v", in)
	}
	rt.ok(t, "", "revert", del.Mutation)
	json.Unmarshal([]byte(rt.ok(t, "", "inbox", "-o", "json", "example/person", "ann").stdout), &in)
	if in.Queued.Count != 1 {
		t.Fatalf("inbox after the revert: %+v", in)
	}
	for _, args := range [][]string{
		{"skip", "example/person"}, {"edit-message", "example/person", "ann"}, {"cancel", "example/person", "ann"},
		{"cancel", "--key", "k", "--timer", "t", "example/person", "ann"}, {"cancel", "--sender", "x", "--cancellation-token", "t", "example/person", "ann"},
		{"delete-address", "a/b"}, {"skipped", "-o", "yaml"}, {"skipped", "a", "b"}, {"resend"}, {"resend", "--to", "a/b", "x"},
	} {
		if r := rt.cli(t, "", args...); r.code != 2 {
			t.Errorf("%q: %s, want exit 2", args, r)
		}
	}
}
