package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/statefun-go/statefun/pkg/stateclient"
)

// TestStateHistoryAndRestore: history lists an entry's changes with their
// causes; restore sets an instance back to a commit from it as one
// mutation, and revert undoes the restore.
func TestStateHistoryAndRestore(t *testing.T) {
	rt := startRuntime(t)
	first := receiptOf(t, rt.ok(t, "", "put", "-o", "json", "example/person", "cy", "visits", "10", "--reason", "first"))
	rt.ok(t, "", "put", "-q", "example/person", "cy", "visits", "20", "--reason", "second")
	rt.ok(t, "", "put", "-q", "--type", "io.statefun.types/string", "example/person", "cy", "note", "later")

	r := rt.ok(t, "", "history", "example/person", "cy", "visits", "-o", "json")
	var recs []stateclient.HistoryRecord
	if err := json.Unmarshal([]byte(r.stdout), &recs); err != nil || len(recs) != 2 {
		t.Fatalf("history -o json: %v %s", err, r)
	}
	if recs[1].Position != first.Commit || recs[1].Cause.Kind != "mutation" || recs[1].Cause.Reason != "first" || recs[0].Cause.Reason != "second" {
		t.Fatalf("history records %+v", recs)
	}
	r = rt.ok(t, "", "history", "--oldest", "--limit", "1", "example/person", "cy", "visits")
	if !regexpLine(r.stdout, `^COMMIT +AT +VERSION +VALUE +CAUSE$`) || !strings.Contains(r.stdout, "mutation "+first.Mutation+" by anonymous: first") ||
		strings.Contains(r.stdout, "second") {
		t.Fatalf("history table: %s", r)
	}

	rc := receiptOf(t, rt.ok(t, "", "restore", "--yes", "-o", "json", "--as-of", first.Commit, "--reason", "back", "example/person", "cy"))
	if rc.Status != "committed" {
		t.Fatalf("restore receipt %+v", rc)
	}
	if r := rt.ok(t, "", "get", "example/person", "cy", "visits"); r.stdout != "10" {
		t.Fatalf("visits after the restore: %s", r)
	}
	if r := rt.cli(t, "", "get", "example/person", "cy", "note"); r.code != 1 {
		t.Fatalf("note after the restore (created after the commit): %s", r)
	}
	rt.ok(t, "", "revert", "-q", rc.Mutation)
	if r := rt.ok(t, "", "get", "example/person", "cy", "note"); r.stdout != "later" {
		t.Fatalf("note after the revert: %s", r)
	}
	for _, bad := range [][]string{
		{"restore", "example/person", "cy"},
		{"restore", "--as-of", "1", "--as-of-time", "1h", "example/person", "cy"},
		{"restore", "--as-of", "1", "example/person"},
		{"history", "example/person", "cy"},
		{"history", "--limit", "0", "example/person", "cy", "visits"},
	} {
		if r := rt.cli(t, "", bad...); r.code != 2 {
			t.Errorf("%v: %s, want usage error", bad, r)
		}
	}
}
