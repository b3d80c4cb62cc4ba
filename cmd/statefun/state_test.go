package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/statefun-go/statefun/internal/apptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/statefun-go/statefun/internal/app"
	"github.com/statefun-go/statefun/pkg/stateclient"
)

// regexpLine reports whether some line of text matches re.
func regexpLine(text, re string) bool { return regexp.MustCompile("(?m)" + re).MatchString(text) }

// result is what one run of the CLI did.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout: %q\nstderr: %q", r.code, r.stdout, r.stderr)
}

// cli runs `statefun state --server <rt> args...` in-process with stdin.
func (rt *runtime) cli(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	return rt.cliWith(t, nil, stdin, args...)
}

// cliWith is cli with a hook to adjust the CLI before it runs.
func (rt *runtime) cliWith(t *testing.T, hook func(*stateCLI), stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	c := newStateCLI(strings.NewReader(stdin), &out, &errb)
	if hook != nil {
		hook(c)
	}
	code := c.run(append([]string{"--server", rt.API}, args...))
	return result{code, out.String(), errb.String()}
}

// ok runs the CLI and fails the test unless it exits 0.
func (rt *runtime) ok(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	r := rt.cli(t, stdin, args...)
	if r.code != 0 {
		t.Fatalf("statefun state %q: %s", args, r)
	}
	return r
}

func receiptOf(t *testing.T, r result) stateclient.Receipt {
	t.Helper()
	var rc stateclient.Receipt
	if err := json.Unmarshal([]byte(r.stdout), &rc); err != nil || rc.Mutation == "" {
		t.Fatalf("not a receipt: %v\n%s", err, r)
	}
	return rc
}

func TestStateGetPutDelete(t *testing.T) {
	rt := startRuntime(t)

	// int: text in and out, raw bytes, the envelope.
	rc := receiptOf(t, rt.ok(t, "", "put", "-o", "json", "example/person", "Bob", "visits", "41", "--reason", "test"))
	if rc.Status != "committed" || rc.Version == "" {
		t.Fatalf("receipt %+v", rc)
	}
	if r := rt.ok(t, "", "get", "example/person", "Bob", "visits"); r.stdout != "41" {
		t.Fatalf("get: %s", r)
	}
	if r := rt.ok(t, "", "get", "-o", "raw", "example/person", "Bob", "visits"); r.stdout != "\x0d\x29\x00\x00\x00" {
		t.Fatalf("get -o raw: %s", r)
	}
	r := rt.ok(t, "", "get", "example/person", "Bob", "visits", "-o", "json") // a flag after the arguments
	var env stateclient.Envelope
	if err := json.Unmarshal([]byte(r.stdout), &env); err != nil || string(env.Value) != "41" || env.Version != rc.Version || env.Typename != "io.statefun.types/int" {
		t.Fatalf("get -o json: %v %s", err, r)
	}
	// A negative number is a value, not a flag; --if-match with the version.
	rt.ok(t, "", "put", "example/person", "Bob", "visits", "-5", "--if-match", rc.Version, "-q")
	if r := rt.ok(t, "", "get", "-o", "text", "example/person", "Bob", "visits"); r.stdout != "-5" {
		t.Fatalf("after put -5: %s", r)
	}
	// A stale --if-match: exit 1 and the current version.
	if r := rt.cli(t, "", "put", "--if-match", rc.Version, "example/person", "Bob", "visits", "1"); r.code != 1 ||
		!strings.Contains(r.stderr, "condition failed") || !strings.Contains(r.stderr, "current version") {
		t.Fatalf("stale --if-match: %s", r)
	}

	// string from stdin, taken as is.
	rt.ok(t, "Bob Smith\n", "put", "example/person", "Bob", "name", "-", "-q")
	if r := rt.ok(t, "", "get", "example/person", "Bob", "name"); r.stdout != "Bob Smith\n" {
		t.Fatalf("get string: %s", r)
	}
	rt.ok(t, "", "put", "example/person", "Bob", "name", "Bob", "-q")
	if r := rt.ok(t, "", "get", "example/person", "Bob", "name"); r.stdout != "Bob" {
		t.Fatalf("get string: %s", r)
	}

	// A JSON type: text is JSON; the envelope format too.
	rt.ok(t, "", "put", "example/person", "Bob", "profile", `{"city":"Zürich","tags":["<a>"]}`, "-q")
	if r := rt.ok(t, "", "get", "example/person", "Bob", "profile"); r.stdout != `{"city":"Zürich","tags":["<a>"]}` {
		t.Fatalf("get JSON: %s", r)
	}
	rt.ok(t, `{"value":{"city":"Bern"}}`, "put", "--format", "json", "example/person", "Bob", "profile", "-", "-q")
	if r := rt.ok(t, "", "get", "example/person", "Bob", "profile"); r.stdout != `{"city":"Bern"}` {
		t.Fatalf("get JSON after envelope put: %s", r)
	}
	if r := rt.cli(t, "", "put", "example/person", "Bob", "profile", "not json"); r.code != 1 || !strings.Contains(r.stderr, "415") {
		t.Fatalf("put of text that is not JSON: %s", r)
	}

	// An unregistered state needs --type; raw bytes of a binary type.
	if r := rt.cli(t, "", "put", "example/person", "Bob", "extra", "1"); r.code != 1 || !strings.Contains(r.stderr, "Statefun-Type") {
		t.Fatalf("put without a type: %s", r)
	}
	rt.ok(t, "\x00\xffbin", "put", "--type", "example/Blob", "--format", "raw", "example/person", "Bob", "blob", "-", "-q")
	if r := rt.ok(t, "", "get", "example/person", "Bob", "blob"); r.stdout != "\x00\xffbin" {
		t.Fatalf("get binary: %s", r)
	}
	if r := rt.cli(t, "", "get", "-o", "text", "example/person", "Bob", "blob"); r.code != 1 || !strings.Contains(r.stderr, "406") {
		t.Fatalf("get -o text of a binary value: %s", r)
	}
	if r := rt.cliWith(t, func(c *stateCLI) { c.terminal = func(any) bool { return true } }, "", "get", "example/person", "Bob", "blob"); r.code != 1 ||
		r.stdout != "" || !strings.Contains(r.stderr, "-o raw") {
		t.Fatalf("binary to a terminal: %s", r)
	}
	if r := rt.cliWith(t, func(c *stateCLI) { c.terminal = func(any) bool { return true } }, "", "get", "example/person", "Bob", "visits"); r.stdout != "-5\n" {
		t.Fatalf("text to a terminal ends with a newline: %s", r)
	}

	// delete one entry, then it is not found (exit 1).
	rc = receiptOf(t, rt.ok(t, "", "delete", "-o", "json", "example/person", "Bob", "name", "--reason", "gone"))
	if rc.Status != "committed" || rc.Version != "" {
		t.Fatalf("delete receipt %+v", rc)
	}
	if r := rt.cli(t, "", "get", "example/person", "Bob", "name"); r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, "not found") {
		t.Fatalf("get after delete: %s", r)
	}
	if r := rt.cli(t, "", "delete", "example/person", "Bob", "name"); r.code != 1 || !strings.Contains(r.stderr, "not found") {
		t.Fatalf("delete of nothing: %s", r)
	}
	// delete without --all needs a state; with --all, no state.
	if r := rt.cli(t, "", "delete", "example/person", "Bob"); r.code != 2 || !strings.Contains(r.stderr, "--all") {
		t.Fatalf("delete without a state: %s", r)
	}
	if r := rt.cli(t, "", "delete", "--all", "example/person", "Bob", "visits"); r.code != 2 {
		t.Fatalf("delete --all with a state: %s", r)
	}
	rt.ok(t, "", "delete", "--all", "--yes", "example/person", "Bob", "-q")
	if r := rt.ok(t, "", "ls", "-o", "name", "example/person", "Bob"); r.stdout != "" {
		t.Fatalf("entries after delete --all: %s", r)
	}
}

func TestStateUsage(t *testing.T) {
	rt := startRuntime(t)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "Usage: statefun state"},
		{[]string{"frobnicate"}, 2, "unknown command"},
		{[]string{"get"}, 2, "want <namespace>/<type> <id> <state>"},
		{[]string{"get", "example/person/Bob", "visits"}, 2, "give the id as its own argument, e.g. example/person Bob"},
		{[]string{"get", "person", "Bob", "visits"}, 2, "not a function type"},
		{[]string{"get", "example/person", "", "visits"}, 2, "the id is empty"},
		{[]string{"get", "-o", "yaml", "example/person", "Bob", "visits"}, 2, "want auto, text, raw, json or table"},
		{[]string{"get", "--nope", "example/person", "Bob", "visits"}, 2, "unknown flag: --nope"},
		{[]string{"put", "example/person", "Bob", "visits"}, 2, `"-" reads the value from stdin`},
		{[]string{"put", "--ack", "never", "example/person", "Bob", "visits", "1"}, 2, "--ack"},
		{[]string{"ls", "--limit", "5"}, 2, "apply to a listing of ids"},
		{[]string{"audit", "x"}, 2, "filters are flags"},
		{[]string{"audit", "--since", "yesterday"}, 2, "RFC 3339"},
		{[]string{"revert"}, 2, "mutation-id"},
		{[]string{"get", "-h"}, 0, "statefun state get [-o auto|text|raw|json|table]"},
		{[]string{"-h"}, 0, "Commands:"},
	} {
		r := rt.cli(t, "", tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("statefun state %q: want exit %d and %q in stderr\n%s", tc.args, tc.code, tc.want, r)
		}
	}
	// No server: exit 1, and the message names the problem.
	var out, errb bytes.Buffer
	code := stateMain([]string{"--server", "http://127.0.0.1:1", "get", "example/person", "Bob", "visits"}, strings.NewReader(""), &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "connection refused") {
		t.Errorf("no server: exit %d, %q", code, errb.String())
	}
	// mainErr dispatches to state.
	out.Reset()
	errb.Reset()
	if code := mainErr([]string{"state", "--server", rt.API, "ls"}, &out, &errb); code != 0 || out.String() != "example/person\n" {
		t.Errorf("mainErr state ls: exit %d, %q %q", code, out.String(), errb.String())
	}
}

// TestStateOddIDs: an id is its own argument, whatever it holds.
func TestStateOddIDs(t *testing.T) {
	rt := startRuntime(t)
	ids := []string{"a/b", "Bob/Smith/Jr", "with space", "😀 emoji", "100%", "%2F", ".", "..", "trail/", "?q=1#f"}
	for i, id := range ids {
		rt.ok(t, "", "put", "-q", "example/person", id, "visits", fmt.Sprint(i))
	}
	// An id that starts with '-' goes after "--".
	rt.ok(t, "", "put", "-q", "--", "example/person", "-dash", "visits", "99")
	if r := rt.ok(t, "", "get", "--", "example/person", "-dash", "visits"); r.stdout != "99" {
		t.Fatalf("get -dash: %s", r)
	}
	for i, id := range ids {
		if r := rt.ok(t, "", "get", "example/person", id, "visits"); r.stdout != fmt.Sprint(i) {
			t.Errorf("get %q: %s", id, r)
		}
	}
	r := rt.ok(t, "", "ls", "example/person")
	got := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	want := append(slices.Clone(ids), "-dash", "seed")
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("ls ids = %q\nwant %q", got, want)
	}
	// -o json and -0 are exact for any id.
	r = rt.ok(t, "", "ls", "-0", "example/person")
	if got := strings.Split(strings.TrimSuffix(r.stdout, "\x00"), "\x00"); !slices.Equal(got, want) {
		t.Fatalf("ls -0 = %q", got)
	}
	r = rt.ok(t, "", "ls", "-o", "json", "example/person", "😀 emoji")
	var es stateclient.Entries
	if err := json.Unmarshal([]byte(r.stdout), &es); err != nil || es.ID != "😀 emoji" || len(es.Entries) != 1 {
		t.Fatalf("ls entries json: %v %s", err, r)
	}
	rt.ok(t, "", "delete", "-q", "example/person", "a/b", "visits")
	if r := rt.cli(t, "", "get", "example/person", "a/b", "visits"); r.code != 1 {
		t.Fatalf("get after delete: %s", r)
	}
	if r := rt.ok(t, "", "get", "example/person", "Bob/Smith/Jr", "visits"); r.stdout != "1" {
		t.Fatalf("a neighbour of a/b: %s", r)
	}
}

func TestStateLs(t *testing.T) {
	rt := startRuntime(t)
	c := rt.Client(t)
	for i := range 12 {
		rt.ok(t, "", "put", "-q", "example/person", fmt.Sprintf("p%02d", i), "visits", "1")
	}
	if _, err := c.Put(context.Background(), stateclient.Address{Namespace: "other", Type: "thing", ID: "x"}, "s", []byte("1"), "text/plain",
		stateclient.PutOptions{Typename: "io.statefun.types/int"}); err != nil {
		t.Fatal(err)
	}
	// Types.
	if r := rt.ok(t, "", "ls"); r.stdout != "example/person\nother/thing\n" {
		t.Fatalf("ls: %s", r)
	}
	if r := rt.ok(t, "", "ls", "other"); r.stdout != "other/thing\n" {
		t.Fatalf("ls other: %s", r)
	}
	r := rt.ok(t, "", "ls", "-o", "table")
	if !strings.Contains(r.stdout, "TYPE") || !regexpLine(r.stdout, `example/person\s+yes\s+3\s+yes`) || !regexpLine(r.stdout, `other/thing\s+no\s+0\s+yes`) {
		t.Fatalf("ls -o table: %s", r)
	}
	// Ids, paged.
	r = rt.ok(t, "", "ls", "--prefix", "p", "--limit", "5", "example/person")
	if r.stdout != "p00\np01\np02\np03\np04\n" || !strings.Contains(r.stderr, "--after p04") {
		t.Fatalf("ls --limit 5: %s", r)
	}
	r = rt.ok(t, "", "ls", "example/person", "--prefix", "p", "--limit", "5", "--after", "p09")
	if r.stdout != "p10\np11\n" || r.stderr != "" {
		t.Fatalf("ls --after p09: %s", r)
	}
	r = rt.ok(t, "", "ls", "example/person", "--after", "p10")
	if r.stdout != "p11\nseed\n" {
		t.Fatalf("ls --after p10: %s", r)
	}
	r = rt.ok(t, "", "ls", "-o", "json", "--limit", "2", "example/person")
	var page stateclient.IDPage
	if err := json.Unmarshal([]byte(r.stdout), &page); err != nil || !slices.Equal(page.IDs, []string{"p00", "p01"}) || page.Next != "p01" {
		t.Fatalf("ls -o json --limit 2: %v %s", err, r)
	}
	if r := rt.ok(t, "", "ls", "example/nobody"); r.stdout != "" {
		t.Fatalf("ls of a type without state: %s", r)
	}
	// Entries: a table with the registered states that hold no value.
	rt.ok(t, "", "put", "-q", "example/person", "p00", "name", "Pat")
	r = rt.ok(t, "", "ls", "example/person", "p00")
	if !regexpLine(r.stdout, `^STATE\s+TYPE\s+SIZE\s+VERSION\s+EXPIRES\s+REGISTERED$`) ||
		!regexpLine(r.stdout, `^visits\s+io.statefun.types/int\s+5\s+\d+\s+-\s+yes$`) ||
		!regexpLine(r.stdout, `^name\s+io.statefun.types/string\s+5\s+\d+\s+-\s+yes$`) ||
		!regexpLine(r.stdout, `^profile\s+example/Profile\s+-\s+-\s+-\s+yes \(no value\)$`) {
		t.Fatalf("ls entries: %s", r)
	}
	if r := rt.ok(t, "", "ls", "-o", "name", "example/person", "p00"); r.stdout != "name\nvisits\n" {
		t.Fatalf("ls -o name entries: %s", r)
	}
}

func TestStateRevertAndAudit(t *testing.T) {
	rt := startRuntime(t)
	first := receiptOf(t, rt.ok(t, "", "put", "-o", "json", "example/person", "ann", "visits", "10", "--reason", "first"))
	second := receiptOf(t, rt.ok(t, "", "put", "-o", "json", "example/person", "ann", "visits", "20", "--reason", "second fix"))
	rt.ok(t, "", "put", "-q", "example/person", "ben", "visits", "1")

	r := rt.ok(t, "", "revert", "-o", "json", second.Mutation, "--reason", "undo")
	rc := receiptOf(t, r)
	if rc.Status != "committed" {
		t.Fatalf("revert receipt %+v", rc)
	}
	if r := rt.ok(t, "", "get", "example/person", "ann", "visits"); r.stdout != "10" {
		t.Fatalf("after revert: %s", r)
	}
	// The first write can no longer be reverted: the entry changed since.
	if r := rt.cli(t, "", "revert", first.Mutation); r.code != 1 || !strings.Contains(r.stderr, "412") {
		t.Fatalf("stale revert: %s", r)
	}
	if r := rt.cli(t, "", "revert", "no-such-mutation"); r.code != 1 || !strings.Contains(r.stderr, "not found") {
		t.Fatalf("revert of nothing: %s", r)
	}

	// Audit: filters, json and table.
	r = rt.ok(t, "", "audit", "--id", "ann", "-o", "json")
	var recs []stateclient.AuditRecord
	if err := json.Unmarshal([]byte(r.stdout), &recs); err != nil || len(recs) != 3 {
		t.Fatalf("audit --id ann: %v %s", err, r)
	}
	if recs[2].Reverts != second.Mutation || recs[2].Reason != "undo" || recs[0].Reason != "first" {
		t.Fatalf("audit records %+v", recs)
	}
	r = rt.ok(t, "", "audit", "--type", "example/person", "--state", "visits", "--principal", "anonymous", "-o", "json")
	if err := json.Unmarshal([]byte(r.stdout), &recs); err != nil || len(recs) != 4 {
		t.Fatalf("audit --type ns/type: %v %s", err, r)
	}
	r = rt.ok(t, "", "audit", "--mutation", first.Mutation, "-o", "json")
	if err := json.Unmarshal([]byte(r.stdout), &recs); err != nil || len(recs) != 1 || recs[0].Mutation != first.Mutation {
		t.Fatalf("audit --mutation: %v %s", err, r)
	}
	if r := rt.ok(t, "", "audit", "--principal", "someone-else", "-o", "json"); strings.TrimSpace(r.stdout) != "[]" {
		t.Fatalf("audit --principal someone-else: %s", r)
	}
	if r := rt.ok(t, "", "audit", "--since", time.Now().Add(time.Hour).Format(time.RFC3339), "-o", "json"); strings.TrimSpace(r.stdout) != "[]" {
		t.Fatalf("audit --since in the future: %s", r)
	}
	if r := rt.ok(t, "", "audit", "--since", "1h", "--limit", "2", "-o", "json"); json.Unmarshal([]byte(r.stdout), &recs) != nil || len(recs) != 2 {
		t.Fatalf("audit --since 1h --limit 2: %s", r)
	}
	r = rt.ok(t, "", "audit", "--id", "ann")
	// The BEFORE column shows the value the entry held, typed (visits is
	// an int: 10 before the second fix, 20 before its undo).
	if !regexpLine(r.stdout, `^AT\s+PRINCIPAL\s+OP\s+INSTANCE\s+STATE\s+VERSION\s+BEFORE\s+MUTATION\s+REASON$`) ||
		!regexpLine(r.stdout, `anonymous\s+put\s+example/person ann\s+visits\s+-→\d+\s+-\s+\S+\s+first$`) ||
		!regexpLine(r.stdout, `anonymous\s+put\s+example/person ann\s+visits\s+\d+→\d+\s+10\s+\S+\s+second fix$`) ||
		!regexpLine(r.stdout, `anonymous\s+put\s+example/person ann\s+visits\s+\d+→\d+\s+20\s+\S+\s+undo \(reverts `+second.Mutation+`\)$`) {
		t.Fatalf("audit table: %s", r)
	}

	// receipt, and receipt --wait of an accepted mutation.
	acc := receiptOf(t, rt.ok(t, "", "put", "-o", "json", "--ack", "accepted", "example/person", "ann", "visits", "30"))
	if acc.Status != "accepted" {
		t.Fatalf("ack accepted: %+v", acc)
	}
	if rc := receiptOf(t, rt.ok(t, "", "receipt", "-o", "json", "--wait", "5s", acc.Mutation)); rc.Status != "committed" {
		t.Fatalf("receipt --wait: %+v", rc)
	}
}

// TestStateTokensAndTLS: --token-file, STATEFUN_TOKEN and --cacert.
func TestStateTokensAndTLS(t *testing.T) {
	tlsOpt := apptest.WithTLS(t)
	var certFile string
	rt := startRuntime(t, apptest.WithTokens, tlsOpt, func(c *app.Config) { certFile = c.TLSCert })
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	os.WriteFile(tokenFile, []byte(rt.Token+"\n"), 0o600)

	if r := rt.cli(t, "", "ls"); r.code != 1 || !strings.Contains(r.stderr, "certificate") {
		t.Fatalf("https without --cacert: %s", r)
	}
	if r := rt.cli(t, "", "--cacert", certFile, "ls"); r.code != 1 || !strings.Contains(r.stderr, "401") || !strings.Contains(r.stderr, "--token") {
		t.Fatalf("no token: %s", r)
	}
	rt.ok(t, "", "--cacert", certFile, "--token-file", tokenFile, "put", "-q", "example/person", "t", "visits", "3")
	t.Setenv("STATEFUN_TOKEN", "viewer-secret-0123456789")
	t.Setenv("STATEFUN_CACERT", certFile)
	if r := rt.ok(t, "", "get", "example/person", "t", "visits"); r.stdout != "3" {
		t.Fatalf("get with the viewer token: %s", r)
	}
	if r := rt.cli(t, "", "put", "example/person", "t", "visits", "4"); r.code != 1 || !strings.Contains(r.stderr, "403") {
		t.Fatalf("put with the viewer token: %s", r)
	}
}
