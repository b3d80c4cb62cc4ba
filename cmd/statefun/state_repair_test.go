package main

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/statefun-go/statefun/pkg/stateclient"
)

// TestStatePauseResume drives the repair commands against `statefun
// run`'s app: pause an address and a type, a message waits in the inbox,
// the pauses are listed, resume releases it; usage errors exit 2.
func TestStatePauseResume(t *testing.T) {
	rt := startRuntime(t)
	r := rt.ok(t, "", "pause", "-o", "json", "--reason", "look", "--for", "1h", "example/person", "bob/x")
	var rc stateclient.Receipt
	if err := json.Unmarshal([]byte(r.stdout), &rc); err != nil || rc.Status != "committed" {
		t.Fatalf("pause receipt: %v %s", err, r.stdout)
	}
	rt.Send(t, "bob/x")
	r = rt.ok(t, "", "inbox", "-o", "json", "example/person", "bob/x")
	var in stateclient.Inbox
	if err := json.Unmarshal([]byte(r.stdout), &in); err != nil {
		t.Fatal(err)
	}
	if in.Paused == nil || in.Paused.Reason != "look" || in.Paused.ExpiresAt == nil || in.Queued.Count != 1 || in.Inflight != nil {
		t.Fatalf("inbox: %s", r.stdout)
	}
	rt.ok(t, "", "pause", "--reason", "deploy", "example/person")
	r = rt.ok(t, "", "pauses")
	if !regexpLine(r.stdout, `^example/person \(every address\)\s.*\sanonymous\s.*\sdeploy$`) ||
		!regexpLine(r.stdout, `^example/person bob/x\s.*\sanonymous\s.*\slook$`) {
		t.Fatalf("pauses:\n%s", r.stdout)
	}
	r = rt.ok(t, "", "failing")
	if strings.TrimSpace(r.stdout) != "ADDRESS  SINCE  ATTEMPTS  NEXT  QUEUED  LAST ERROR" {
		t.Fatalf("failing:\n%s", r.stdout)
	}
	rt.ok(t, "", "resume", "-q", "example/person")
	rt.ok(t, "", "resume", "--reason", "done", "example/person", "bob/x")
	if r := rt.cli(t, "", "resume", "example/person", "bob/x"); r.code != 1 || !strings.Contains(r.stderr, "not paused") {
		t.Fatalf("a second resume: %s", r)
	}
	for _, args := range [][]string{
		{"inbox", "example/person"}, {"pause", "person"}, {"pause", "--for", "1h", "--until", "2099-01-01T00:00:00Z", "a/b"},
		{"failing", "-o", "yaml"}, {"pauses", "a"},
	} {
		if r := rt.cli(t, "", args...); r.code != 2 {
			t.Errorf("%q: %s, want exit 2", args, r)
		}
	}
}

// The error of a type-level pause answered partial (cluster mode) says how
// to complete it; any other error is passed on as it is.
func TestPartialHint(t *testing.T) {
	partial := &stateclient.ProblemError{Status: 503, Detail: "partitions 1, 2 do not have the pause yet", Mutation: "m-1", MissingPartitions: []int{1, 2}}
	err := partialHint(partial, "pause")
	if !errors.Is(err, partial) || !strings.Contains(err.Error(), "run the same command again with --mutation-id m-1") || !strings.Contains(err.Error(), "[1 2]") {
		t.Errorf("partialHint: %v", err)
	}
	// What the operator reads is describe's wording of it.
	if got := describe(err); !strings.Contains(got, "run the same command again with --mutation-id m-1") {
		t.Errorf("the CLI's message of a partial pause: %q; want the command that completes it", got)
	}
	busy := &stateclient.ProblemError{Status: 503, Detail: "the partition's queue is full"}
	if err := partialHint(busy, "pause"); err != busy {
		t.Errorf("partialHint of a 503 without a mutation: %v", err)
	}
}
