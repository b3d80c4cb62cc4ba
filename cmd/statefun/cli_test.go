package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/statefun-go/statefun/pkg/stateclient"
)

// TestReferenceIsGenerated fails when docs/reference/cli.md is not what
// the commands generate: a flag, default, environment variable or command
// changed without the reference.
func TestReferenceIsGenerated(t *testing.T) {
	var want bytes.Buffer
	if err := writeReference(&want); err != nil {
		t.Fatal(err)
	}
	checkGenerated(t, referencePath, want.Bytes())
}

// TestMetricsReferenceIsGenerated fails when docs/reference/metrics.md is
// not what the metric definitions in internal/ generate: a metric added,
// renamed, relabelled or re-explained without the reference.
func TestMetricsReferenceIsGenerated(t *testing.T) {
	var want bytes.Buffer
	if err := writeMetricsReference(&want, "../.."); err != nil {
		t.Fatal(err)
	}
	checkGenerated(t, metricsPath, want.Bytes())
}

// checkGenerated fails t when the committed page at path (from the
// repository's root) differs from want, naming the first differing line.
func checkGenerated(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile("../../" + path)
	if err != nil {
		t.Fatalf("%v: generate it with %q from the repository's root", err, regenerateCommand)
	}
	if bytes.Equal(got, want) {
		return
	}
	gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	i := 0
	for i < len(gl) && i < len(wl) && gl[i] == wl[i] {
		i++
	}
	line := func(ls []string) string {
		if i < len(ls) {
			return ls[i]
		}
		return "(end of file)"
	}
	t.Fatalf("%s is stale: regenerate it with %q from the repository's root (or go generate ./cmd/statefun).\nFirst difference, line %d:\ncommitted: %s\ngenerated: %s",
		path, regenerateCommand, i+1, line(gl), line(wl))
}

// Every flag of run has an environment variable (but --cluster-property,
// repeatable, which STATEFUN_CLUSTER_PROPERTIES's file stands for), and
// the reference lists each flag with it.
func TestRunFlagsHaveEnv(t *testing.T) {
	var ref bytes.Buffer
	if err := writeReference(&ref); err != nil {
		t.Fatal(err)
	}
	n := 0
	newRunCmd(newCLI(strings.NewReader(""), nil, nil)).Flags().VisitAll(func(f *pflag.Flag) {
		n++
		env := flagEnv(f)
		if env == "" && f.Name != "cluster-property" {
			t.Errorf("--%s has no environment variable", f.Name)
		}
		if !strings.Contains(ref.String(), "| `--"+f.Name) || env != "" && !strings.Contains(ref.String(), "`"+env+"`") {
			t.Errorf("the reference lacks --%s or %s", f.Name, env)
		}
	})
	if n < 50 {
		t.Errorf("run has %d flags; want the 50 and more it had", n)
	}
}

// A flag beats its environment variable, which beats the default: each
// run below is refused at a check after the one the precedence decides.
func TestRunEnvPrecedence(t *testing.T) {
	args := func(more ...string) []string {
		return append([]string{"--module", "does-not-exist.yaml", "--data-dir", t.TempDir(), "--log-level", "loud"}, more...)
	}
	t.Setenv("STATEFUN_PARTITIONS", "-3")
	var stderr bytes.Buffer
	if code := run(args(), &stderr); code != 2 || !strings.Contains(stderr.String(), "--partitions -3") {
		t.Errorf("the environment's partitions: exit %d, %s", code, stderr.String())
	}
	for _, flag := range []string{"4", "0"} {
		stderr.Reset()
		if code := run(args("--partitions", flag), &stderr); code != 2 || strings.Contains(stderr.String(), "partitions") ||
			!strings.Contains(stderr.String(), `--log-level "loud"`) {
			t.Errorf("--partitions %s over STATEFUN_PARTITIONS=-3: exit %d, %s", flag, code, stderr.String())
		}
	}
	t.Setenv("STATEFUN_LOG_LEVEL", "debug")
	stderr.Reset()
	if code := run(args("--partitions", "4"), &stderr); code != 2 || !strings.Contains(stderr.String(), `--log-level "loud"`) {
		t.Errorf("--log-level over STATEFUN_LOG_LEVEL: exit %d, %s", code, stderr.String())
	}
	t.Setenv("STATEFUN_API_REQUIRE_REASON", "yes please")
	stderr.Reset()
	if code := run(args("--partitions", "4"), &stderr); code != 2 || !strings.Contains(stderr.String(), `STATEFUN_API_REQUIRE_REASON="yes please" is not true or false`) {
		t.Errorf("a variable that does not parse: exit %d, %s", code, stderr.String())
	}
}

// statefun --version and statefun version print the same line; help is
// exit status 0, a bare statefun exit status 2 with the usage.
func TestVersionAndHelp(t *testing.T) {
	var out1, out2, errb bytes.Buffer
	if code := mainErr([]string{"--version"}, &out1, &errb); code != 0 || !strings.HasPrefix(out1.String(), "statefun ") {
		t.Errorf("--version: exit %d, %q %q", code, out1.String(), errb.String())
	}
	if code := mainErr([]string{"version"}, &out2, &errb); code != 0 || out2.String() != out1.String() {
		t.Errorf("version: exit %d, %q; --version printed %q", code, out2.String(), out1.String())
	}
	for _, args := range [][]string{{"--help"}, {"run", "--help"}, {"state", "ls", "-h"}, {"help", "state"}} {
		errb.Reset()
		if code := mainErr(args, &out1, &errb); code != 0 || !strings.Contains(errb.String(), "Usage:") {
			t.Errorf("%q: exit %d, %q", args, code, errb.String())
		}
	}
	errb.Reset()
	if code := mainErr(nil, &out1, &errb); code != 2 || !strings.Contains(errb.String(), "statefun run --module FILE") {
		t.Errorf("no command: exit %d, %q", code, errb.String())
	}
	errb.Reset()
	if code := mainErr([]string{"completion", "bash"}, &out1, &errb); code != 0 || !strings.Contains(out1.String(), "statefun") {
		t.Errorf("completion bash: exit %d, %q", code, errb.String())
	}
	out1.Reset()
	if code := mainErr([]string{"__complete", "state", "get", "-o", ""}, &out1, &errb); code != 0 || !strings.Contains(out1.String(), "table\n") {
		t.Errorf("completion of -o: exit %d, %q", code, out1.String())
	}
	out1.Reset()
	if code := mainErr([]string{"__complete", "state", "res"}, &out1, &errb); code != 0 || !strings.Contains(out1.String(), "restore") || !strings.Contains(out1.String(), "resume") {
		t.Errorf("completion of a command: exit %d, %q", code, out1.String())
	}
}

// Bad usage is exit status 2 with a message naming the flag or argument,
// then the command's usage line.
func TestStateBadUsageNamesFlag(t *testing.T) {
	rt := startRuntime(t)
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"get", "--nope", "example/person", "Bob", "visits"}, []string{"statefun state get: unknown flag: --nope", "Usage: statefun state get "}},
		{[]string{"get", "example/person", "Bob"}, []string{"statefun state get: want <namespace>/<type> <id> <state>, got 2", "Usage: statefun state get "}},
		{[]string{"history", "--limit", "x", "example/person", "Bob", "visits"}, []string{`invalid value "x" for --limit: want a whole number`, "Usage: statefun state history "}},
		{[]string{"receipt", "--wait", "soon", "m"}, []string{`invalid value "soon" for --wait: want a duration`}},
		{[]string{"audit", "-o", "yaml"}, []string{`invalid value "yaml" for -o, --output: want table or json`, "Usage: statefun state audit "}},
		{[]string{"put", "--reason"}, []string{"flag needs an argument: --reason"}},
		{[]string{"frobnicate"}, []string{`statefun state: unknown command "frobnicate"`}},
	} {
		r := rt.cli(t, "", tc.args...)
		if r.code != 2 {
			t.Errorf("%q: %s; want exit 2", tc.args, r)
		}
		for _, w := range tc.want {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("%q: stderr lacks %q\n%s", tc.args, w, r)
			}
		}
	}
}

// The state client's flags work in any position, before the state command
// included, and beat their environment variables.
func TestStateGlobalFlagsAnyPosition(t *testing.T) {
	rt := startRuntime(t)
	t.Setenv("STATEFUN_SERVER", "http://127.0.0.1:1") // nothing listens: the flag must win
	var out, errb bytes.Buffer
	if code := mainErr([]string{"--server", rt.API, "-o", "json", "state", "put", "example/person", "g", "visits", "-5"}, &out, &errb); code != 0 {
		t.Fatalf("flags before state: exit %d, %s", code, errb.String())
	}
	var rc stateclient.Receipt
	if err := json.Unmarshal(out.Bytes(), &rc); err != nil || rc.Status != "committed" {
		t.Fatalf("-o json before state: %v %q", err, out.String())
	}
	for _, args := range [][]string{
		{"state", "--server", rt.API, "get", "example/person", "g", "visits"},
		{"state", "get", "example/person", "g", "visits", "--server", rt.API, "--timeout", "5s"},
		{"state", "get", "--server=" + rt.API, "example/person", "g", "visits"},
		{"state", "get", "-server", rt.API, "example/person", "g", "visits"},
	} {
		out.Reset()
		errb.Reset()
		if code := mainErr(args, &out, &errb); code != 0 || out.String() != "-5" {
			t.Errorf("%q: exit %d, %q %q", args, code, out.String(), errb.String())
		}
	}
	if code := mainErr([]string{"state", "get", "example/person", "g", "visits"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "connection refused") {
		t.Errorf("STATEFUN_SERVER without the flag: exit %d, %q", code, errb.String())
	}
	if r := rt.cli(t, "", "--token", "a", "--token-file", "b", "ls"); r.code != 2 || !strings.Contains(r.stderr, "--token or --token-file") {
		t.Errorf("--token and --token-file: %s", r)
	}
}

// Receipts print as a table by default, JSON with -o json; the times of
// every table are RFC 3339 in UTC.
func TestStateHumanOutput(t *testing.T) {
	rt := startRuntime(t)
	r := rt.ok(t, "", "put", "--reason", "first", "example/person", "h", "visits", "1")
	if !regexpLine(r.stdout, `^MUTATION\s+STATUS\s+VERSION\s+CHECKPOINT\s+COMMIT\s+REASON$`) ||
		!regexpLine(r.stdout, `^\S+\s+committed\s+\d+\s+\d+\s+\d+\.\d+\s+-$`) {
		t.Fatalf("put's receipt: %s", r)
	}
	rc := receiptOf(t, rt.ok(t, "", "put", "-o", "json", "example/person", "h", "visits", "2"))
	r = rt.ok(t, "", "receipt", rc.Mutation)
	if !regexpLine(r.stdout, `^`+rc.Mutation+`\s+committed\s+\d+→`+rc.Version+`\s+\d+\s+`+rc.Commit+`\s+-$`) {
		t.Fatalf("receipt: %s", r)
	}
	rfc3339 := `\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z`
	for _, tc := range []struct {
		args []string
		re   string
	}{
		{[]string{"audit", "--id", "h"}, `^` + rfc3339 + `\s+anonymous\s+put\s`},
		{[]string{"history", "example/person", "h", "visits"}, `^\d+\.\d+\s+` + rfc3339 + `\s`},
	} {
		if r := rt.ok(t, "", tc.args...); !regexpLine(r.stdout, tc.re) {
			t.Errorf("%q: no line matches %s:\n%s", tc.args, tc.re, r.stdout)
		}
	}
	rt.ok(t, "", "pause", "-q", "--for", "1h", "example/person", "h")
	if r := rt.ok(t, "", "pauses"); !regexpLine(r.stdout, `^example/person h\s+`+rfc3339+`\s+`+rfc3339+`\s+anonymous\s`) {
		t.Errorf("pauses:\n%s", r.stdout)
	}
	rt.Send(t, "h")
	r = rt.ok(t, "", "inbox", "example/person", "h")
	if !regexpLine(r.stdout, `^PAUSED\s+since `+rfc3339+` by anonymous; lifts at `+rfc3339+`$`) ||
		!regexpLine(r.stdout, `^QUEUED\s+1, oldest arrived `+rfc3339+`$`) ||
		!regexpLine(r.stdout, `^queued\s+\S+\s+\S+\s+ingress\s+\d+\s+hi\s+`+rfc3339+`$`) {
		t.Errorf("inbox:\n%s", r.stdout)
	}
	r = rt.ok(t, "", "skip", "--reason", "look", "example/person", "h")
	if !regexpLine(r.stdout, `^MUTATION\s+STATUS\s+VERSION\s+CHECKPOINT\s+COMMIT\s+REASON\s+DEAD LETTER$`) || !regexpLine(r.stdout, `\scommitted\s.*\s\S+$`) {
		t.Errorf("skip:\n%s", r.stdout)
	}
	list := rt.ok(t, "", "skipped", "-o", "json").stdout
	var dls []stateclient.MessageDeadLetter
	if err := json.Unmarshal([]byte(list), &dls); err != nil || len(dls) != 1 {
		t.Fatalf("skipped -o json: %v %s", err, list)
	}
	if r := rt.ok(t, "", "skipped", dls[0].ID); !regexpLine(r.stdout, `^SKIPPED\s+`+rfc3339+`$`) || !regexpLine(r.stdout, `^REASON\s+look$`) {
		t.Errorf("skipped <id>:\n%s", r.stdout)
	}
	rt.ok(t, "", "put", "-q", "example/person", "with space", "visits", "1")
	if r := rt.ok(t, "", "ls", "-o", "table", "example/person"); r.stdout != "ID\nh\nseed\n'with space'\n" {
		t.Errorf("ls -o table of ids: %q", r.stdout)
	}
	if r := rt.ok(t, "", "get", "-o", "table", "example/person", "h", "visits"); !regexpLine(r.stdout, `^visits\s+io.statefun.types/int\s+\d+\s+-\s+2$`) {
		t.Errorf("get -o table:\n%s", r.stdout)
	}
}

// delete --all, restore and delete-address ask on a terminal, and refuse
// without --yes when stdin is not one; declining changes nothing.
func TestStateDestructiveConfirm(t *testing.T) {
	rt := startRuntime(t)
	first := receiptOf(t, rt.ok(t, "", "put", "-o", "json", "example/person", "d", "visits", "1"))
	rt.ok(t, "", "put", "-q", "example/person", "d", "visits", "2")
	rt.ok(t, "", "pause", "-q", "example/person", "d")
	onTTY := func(c *stateCLI) { c.terminal = func(any) bool { return true } }
	for _, args := range [][]string{
		{"delete", "--all", "example/person", "d"},
		{"restore", "--as-of", first.Commit, "example/person", "d"},
		{"delete-address", "example/person", "d"},
	} {
		if r := rt.cli(t, "", args...); r.code != 2 || !strings.Contains(r.stderr, "pass --yes") {
			t.Errorf("%q without a terminal: %s; want exit 2 naming --yes", args, r)
		}
		r := rt.cliWith(t, onTTY, "n\n", args...)
		if r.code != 1 || !strings.Contains(r.stderr, "[y/N]") || !strings.Contains(r.stderr, "nothing was changed") {
			t.Errorf("%q declined: %s", args, r)
		}
		if r := rt.ok(t, "", "get", "example/person", "d", "visits"); r.stdout != "2" {
			t.Fatalf("after %q was declined: %s", args, r)
		}
	}
	r := rt.cliWith(t, onTTY, "y\n", "restore", "-q", "--as-of", first.Commit, "example/person", "d")
	if r.code != 0 || !strings.Contains(r.stderr, "Set every entry of example/person d back to what it held at commit "+first.Commit+"?") {
		t.Fatalf("restore confirmed: %s", r)
	}
	if r := rt.ok(t, "", "get", "example/person", "d", "visits"); r.stdout != "1" {
		t.Fatalf("after the restore: %s", r)
	}
	rt.ok(t, "", "delete-address", "--yes", "-q", "example/person", "d")
	if r := rt.cli(t, "", "get", "example/person", "d", "visits"); r.code != 1 {
		t.Fatalf("after delete-address --yes: %s", r)
	}
}

// A waiting message's value in the inbox table: JSON compacted, text
// when its bytes are UTF-8, the length otherwise, cut at 40 characters
// with a mark (also when the API showed only the first 4 KiB).
func TestMessageValueColumn(t *testing.T) {
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	long := strings.Repeat("x", 50)
	for _, c := range []struct {
		v    *stateclient.MessageValue
		want string
	}{
		{nil, "-"},
		{&stateclient.MessageValue{JSON: json.RawMessage(`{ "a": 1 }`), Base64: b64(`{ "a": 1 }`)}, `{"a":1}`},
		{&stateclient.MessageValue{Base64: b64("not json")}, "not json"},
		{&stateclient.MessageValue{Base64: base64.StdEncoding.EncodeToString([]byte{0xff, 0x00})}, "<2 bytes>"},
		{&stateclient.MessageValue{Base64: b64(long)}, strings.Repeat("x", 40) + "…"},
		{&stateclient.MessageValue{Base64: b64("head"), Truncated: true}, "head…"},
		{&stateclient.MessageValue{Base64: b64("a\nb")}, `a\nb`},
	} {
		if got := messageValue(c.v); got != c.want {
			t.Errorf("messageValue(%+v) = %q; want %q", c.v, got, c.want)
		}
	}
}
