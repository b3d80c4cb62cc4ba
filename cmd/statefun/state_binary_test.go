package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestStateBinary builds the statefun binary and runs `statefun state` as a
// separate process: real argv, environment, stdin, stdout and exit codes.
func TestStateBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build the binary with")
	}
	bin := filepath.Join(t.TempDir(), "statefun")
	build := exec.Command(gobin, "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	rt := startRuntime(t)
	tmp := editor(t, `sed -i 's/"value": "Ada"/"value": "Ada Lovelace"/' "$1"`)

	run := func(stdin string, args ...string) result {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"state"}, args...)...)
		cmd.Env = append(os.Environ(), "STATEFUN_SERVER="+rt.API, "TMPDIR="+tmp)
		if stdin != "" {
			cmd.Stdin = strings.NewReader(stdin)
		}
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return result{code, out.String(), errb.String()}
	}
	check := func(r result, code int, stdout, inStderr string) {
		t.Helper()
		if r.code != code || stdout != "*" && r.stdout != stdout || !strings.Contains(r.stderr, inStderr) {
			t.Errorf("want exit %d, stdout %q, %q in stderr; got %s", code, stdout, inStderr, r)
		}
	}

	r := run("", "put", "example/person", "ada 😀/x", "visits", "7", "--reason", "from the binary")
	check(r, 0, "*", "")
	if !regexpLine(r.stdout, `^MUTATION\s+STATUS\s+VERSION\s+CHECKPOINT\s+COMMIT\s+REASON$`) || !regexpLine(r.stdout, `^\S+\s+committed\s+\S+\s+\d+\s+\d+\.\d+\s+-$`) {
		t.Errorf("put prints the receipt as a table: %s", r)
	}
	check(run("Ada", "put", "-q", "example/person", "ada 😀/x", "name", "-"), 0, "", "")
	check(run("", "get", "example/person", "ada 😀/x", "visits"), 0, "7", "")
	check(run("", "get", "example/person", "ada 😀/x", "name"), 0, "Ada", "")
	check(run("", "get", "example/person", "nobody", "visits"), 1, "", "not found")
	check(run("", "get", "example/person"), 2, "", "want <namespace>/<type> <id> <state>")
	check(run("", "ls", "example/person"), 0, "ada 😀/x\nseed\n", "")
	check(run("", "ls", "-o", "name", "example/person", "ada 😀/x"), 0, "name\nvisits\n", "")

	// edit: stdin is not a terminal, so --yes is required.
	check(run("", "edit", "example/person", "ada 😀/x", "name"), 2, "", "--yes")
	check(run("", "edit", "--yes", "-q", "example/person", "ada 😀/x", "name"), 0, "", `+"Ada Lovelace"`)
	check(run("", "get", "example/person", "ada 😀/x", "name"), 0, "Ada Lovelace", "")

	check(run("", "--server", "http://127.0.0.1:1", "ls"), 1, "", "connection refused")
	check(run(""), 2, "", "Usage: statefun state")
}
