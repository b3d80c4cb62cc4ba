package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/statefun-go/statefun/pkg/stateclient"
)

// editor sets EDITOR to a shell script with body, run with the file to edit
// as $1, and TMPDIR to a directory of the test (edit's temporary files go
// there). It returns that directory.
func editor(t *testing.T, body string) string {
	dir := t.TempDir()
	script := filepath.Join(dir, "editor.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nset -e\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "tmp")
	os.Mkdir(tmp, 0o755)
	t.Setenv("EDITOR", "sh "+script)
	t.Setenv("TMPDIR", tmp)
	return tmp
}

func TestStateEdit(t *testing.T) {
	rt := startRuntime(t)
	rt.ok(t, "", "put", "-q", "example/person", "Bob/1", "visits", "41")
	rt.ok(t, "", "put", "-q", "example/person", "Bob/1", "profile", `{"city":"Zürich","age":7}`)

	// An int, edited by sed.
	tmp := editor(t, `sed -i 's/"value": 41/"value": 42/' "$1"`)
	r := rt.ok(t, "", "edit", "--yes", "-o", "json", "--reason", "fix count", "example/person", "Bob/1", "visits")
	rc := receiptOf(t, r)
	if rc.Status != "committed" {
		t.Fatalf("edit receipt %+v", rc)
	}
	if !strings.Contains(r.stderr, "-41\n+42\n") || !strings.Contains(r.stderr, "--- example/person Bob/1 visits (version ") ||
		!strings.Contains(r.stderr, "written: example/person Bob/1 visits version") {
		t.Fatalf("edit's diff and message: %s", r)
	}
	if r := rt.ok(t, "", "get", "example/person", "Bob/1", "visits"); r.stdout != "42" {
		t.Fatalf("after edit: %s", r)
	}
	recs, err := rt.Client(t).Audit(context.Background(), stateclient.AuditFilter{Mutation: rc.Mutation})
	if err != nil || len(recs) != 1 || recs[0].Reason != "fix count" {
		t.Fatalf("audit of the edit: %+v %v", recs, err)
	}
	if files, _ := os.ReadDir(tmp); len(files) != 0 {
		t.Fatalf("edit left %v behind", files)
	}

	// A JSON value, one field of it; the diff shows the field.
	editor(t, `sed -i 's/"city": "Zürich"/"city": "Bern"/' "$1"`)
	r = rt.ok(t, "", "edit", "-y", "-q", "example/person", "Bob/1", "profile")
	if r.stdout != "" || !strings.Contains(r.stderr, `-  "city": "Zürich"`) || !strings.Contains(r.stderr, `+  "city": "Bern"`) {
		t.Fatalf("edit JSON: %s", r)
	}
	if r := rt.ok(t, "", "get", "example/person", "Bob/1", "profile"); r.stdout != `{"city":"Bern","age":7}` {
		t.Fatalf("after edit JSON: %s", r)
	}

	// EDITOR with shell syntax runs through sh -c; VISUAL when EDITOR is
	// unset.
	t.Setenv("EDITOR", `sed -i 's/"value": 42/"value": 43/'`)
	rt.ok(t, "", "edit", "--yes", "example/person", "Bob/1", "visits")
	t.Setenv("EDITOR", "")
	t.Setenv("VISUAL", `sed -i -e s/43/44/`)
	rt.ok(t, "", "edit", "--yes", "example/person", "Bob/1", "visits")
	if r := rt.ok(t, "", "get", "example/person", "Bob/1", "visits"); r.stdout != "44" {
		t.Fatalf("after edits by EDITOR and VISUAL: %s", r)
	}

	// Editing valueBase64 instead writes the exact bytes (int 7 = 0D 07 00 00 00).
	editor(t, `sed -i 's/"valueBase64": "[^"]*"/"valueBase64": "DQcAAAA="/' "$1"`)
	rt.ok(t, "", "edit", "-y", "-q", "example/person", "Bob/1", "visits")
	if r := rt.ok(t, "", "get", "example/person", "Bob/1", "visits"); r.stdout != "7" {
		t.Fatalf("after edit of valueBase64: %s", r)
	}

	// No change: exit 0, nothing written.
	editor(t, `touch "$1"`)
	before := rt.ok(t, "", "get", "-o", "json", "example/person", "Bob/1", "visits").stdout
	r = rt.ok(t, "", "edit", "--yes", "example/person", "Bob/1", "visits")
	if r.stdout != "" || !strings.Contains(r.stderr, "no change") {
		t.Fatalf("edit without change: %s", r)
	}
	// Reformatting the JSON and dropping the comments is no change either.
	editor(t, `sed -i 's/"value": 7/"value":    7/; /^#/d' "$1"`)
	if r := rt.ok(t, "", "edit", "--yes", "example/person", "Bob/1", "visits"); !strings.Contains(r.stderr, "no change") {
		t.Fatalf("edit that reformats: %s", r)
	}
	editor(t, `: > "$1"`)
	if r := rt.ok(t, "", "edit", "--yes", "example/person", "Bob/1", "visits"); !strings.Contains(r.stderr, "no change") {
		t.Fatalf("edit to an empty file: %s", r)
	}
	after := rt.ok(t, "", "get", "-o", "json", "example/person", "Bob/1", "visits").stdout
	if !strings.Contains(before, `"value": 7`) || !strings.Contains(after, `"value": 7`) {
		t.Fatalf("value changed by a no-op edit: %s → %s", before, after)
	}

	// Without a terminal, --yes is required (before the editor runs).
	editor(t, `echo ran > "$1.ran"`)
	if r := rt.cli(t, "", "edit", "example/person", "Bob/1", "visits"); r.code != 2 || !strings.Contains(r.stderr, "--yes") {
		t.Fatalf("edit without --yes and without a terminal: %s", r)
	}
	// An entry that is not there.
	if r := rt.cli(t, "", "edit", "--yes", "example/person", "nobody", "visits"); r.code != 1 || !strings.Contains(r.stderr, "use put") {
		t.Fatalf("edit of nothing: %s", r)
	}

	// An edit that is not JSON: exit 1, the edit is kept.
	tmp = editor(t, `echo '{"value": ' >> "$1"`)
	r = rt.cli(t, "", "edit", "--yes", "example/person", "Bob/1", "visits")
	if r.code != 1 || !strings.Contains(r.stderr, "your edit is saved in "+tmp) {
		t.Fatalf("edit to bad JSON: %s", r)
	}
	// A changed address is refused.
	editor(t, `sed -i 's/"id": "Bob\/1"/"id": "Eve"/' "$1"`)
	if r := rt.cli(t, "", "edit", "--yes", "example/person", "Bob/1", "visits"); r.code != 1 || !strings.Contains(r.stderr, `"address" was changed`) {
		t.Fatalf("edit of the address: %s", r)
	}
	// A value the type refuses: the server's 422, exit 1.
	editor(t, `sed -i 's/"value": 7/"value": "seven"/' "$1"`)
	if r := rt.cli(t, "", "edit", "--yes", "example/person", "Bob/1", "visits"); r.code != 1 || !strings.Contains(r.stderr, "422") {
		t.Fatalf("edit to a bad value: %s", r)
	}
	// A failing editor writes nothing.
	editor(t, `sed -i 's/"value": 7/"value": 8/' "$1"; exit 3`)
	if r := rt.cli(t, "", "edit", "--yes", "example/person", "Bob/1", "visits"); r.code != 1 || !strings.Contains(r.stderr, "exit status 3") {
		t.Fatalf("failing editor: %s", r)
	}
	if r := rt.ok(t, "", "get", "example/person", "Bob/1", "visits"); r.stdout != "7" {
		t.Fatalf("after the failing editor: %s", r)
	}
}

// TestStateEditConfirm: on a terminal, edit asks before it writes.
func TestStateEditConfirm(t *testing.T) {
	rt := startRuntime(t)
	rt.ok(t, "", "put", "-q", "example/person", "c", "visits", "1")
	editor(t, `sed -i 's/"value": 1/"value": 2/' "$1"`)
	onTTY := func(c *stateCLI) { c.terminal = func(any) bool { return true } }
	r := rt.cliWith(t, onTTY, "n\n", "edit", "example/person", "c", "visits")
	if r.code != 1 || !strings.Contains(r.stderr, "Write this to example/person c visits? [y/N]") || !strings.Contains(r.stderr, "not written") {
		t.Fatalf("declined: %s", r)
	}
	if r := rt.ok(t, "", "get", "example/person", "c", "visits"); r.stdout != "1" {
		t.Fatalf("after declining: %s", r)
	}
	r = rt.cliWith(t, onTTY, "y\n", "edit", "-q", "example/person", "c", "visits")
	if r.code != 0 {
		t.Fatalf("confirmed: %s", r)
	}
	if r := rt.ok(t, "", "get", "example/person", "c", "visits"); r.stdout != "2" {
		t.Fatalf("after confirming: %s", r)
	}
}

// TestStateEditRace: a write while the editor is open makes the edit fail
// with exit 1 and write nothing (If-Match).
func TestStateEditRace(t *testing.T) {
	rt := startRuntime(t)
	rt.ok(t, "", "put", "-q", "example/person", "r", "visits", "5")
	sig := t.TempDir()
	t.Setenv("SIG", sig)
	editor(t, `touch "$SIG/started"
i=0
while [ ! -f "$SIG/go" ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done
sed -i 's/"value": 5/"value": 6/' "$1"`)
	done := make(chan result)
	go func() { done <- rt.cli(t, "", "edit", "--yes", "example/person", "r", "visits") }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(sig, "started")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the editor did not start")
		}
	}
	rc, err := rt.Client(t).Put(context.Background(), stateclient.Address{Namespace: "example", Type: "person", ID: "r"}, "visits",
		[]byte("100"), "text/plain", stateclient.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(sig, "go"), nil, 0o644)
	r := <-done
	if r.code != 1 || !strings.Contains(r.stderr, "changed while you edited it") || !strings.Contains(r.stderr, "version "+rc.Version) {
		t.Fatalf("racing edit: %s", r)
	}
	if r := rt.ok(t, "", "get", "example/person", "r", "visits"); r.stdout != "100" {
		t.Fatalf("the concurrent write was lost: %s", r)
	}
}
