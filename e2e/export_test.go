package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// These tests run `statefun state export` and `statefun state import`
// (the real binary, as an operator does) against runtimes serving the
// greeter of examples/greeter, built with the official Go SDK: example/person
// keeps the int state "visits". Helpers are prefixed "ex".

var (
	exGreeterOnce sync.Once
	exGreeterBin  string
	exGreeterErr  error
)

// exGreeter builds the greeter once and starts it on a free port; it
// returns the URL of its functions.
func exGreeter(t *testing.T) string {
	t.Helper()
	exGreeterOnce.Do(func() {
		exGreeterBin = filepath.Join(filepath.Dir(binary), "greeter")
		out, err := exec.Command("go", "build", "-o", exGreeterBin, "github.com/statefun-go/statefun/examples/greeter").CombinedOutput()
		if err != nil {
			exGreeterErr = fmt.Errorf("building the greeter: %v\n%s", err, out)
		}
	})
	if exGreeterErr != nil {
		t.Fatal(exGreeterErr)
	}
	port := freePort(t)
	cmd := exec.Command(exGreeterBin, "-addr", fmt.Sprintf("127.0.0.1:%d", port))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for deadline := time.Now().Add(20 * time.Second); ; {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the greeter does not listen: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Sprintf("http://127.0.0.1:%d/statefun", port)
}

// exRuntime starts a runtime serving example/* from the greeter at fnURL.
func exRuntime(t *testing.T, fnURL string) *runtime {
	t.Helper()
	r := newRuntime(t, fnURL, []string{"example"}, []string{"greetings"})
	r.start()
	return r
}

// exCLI is one run of `statefun state <args>` against r.
type exCLI struct {
	code           int
	stdout, stderr string
}

func exState(t testing.TB, r *runtime, stdin io.Reader, args ...string) exCLI {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"state", "--server", "http://" + r.admin}, args...)...)
	cmd.Stdin = stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	res := exCLI{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		res.code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return res
}

// exGreet sends n greet requests to example/person/<id>.
func exGreet(t *testing.T, r *runtime, id string, n int) {
	t.Helper()
	for range n {
		code, err := r.send("/example/person/"+url.PathEscape(id), "example/GreetRequest", `{"name":"`+id+`"}`)
		if err != nil || code/100 != 2 {
			t.Fatalf("greet %s: %d %v", id, code, err)
		}
	}
}

// exGet returns an entry's value as text ("" with no value).
func exGet(t *testing.T, r *runtime, id string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+r.admin+"/state/example/person/"+url.PathEscape(id)+"/visits", nil)
	req.Header.Set("Accept", "text/plain")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == 404 {
		return ""
	}
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s %s", id, resp.Status, b)
	}
	return string(b)
}

// exAwait waits until id's visits reads want.
func exAwait(t *testing.T, r *runtime, id, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for exGet(t, r, id) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: visits %q, want %q", id, exGet(t, r, id), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// exLine is an exported line as the tests read it.
type exLine struct {
	Address                  struct{ Namespace, Type, ID string }
	State, Typename, Version string
	Value                    json.RawMessage
	ValueBase64              *string
}

// exLines parses an export; every line must be one JSON object.
func exLines(t *testing.T, out string) []exLine {
	t.Helper()
	var ls []exLine
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 16<<20)
	for n := 1; sc.Scan(); n++ {
		var l exLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("export line %d is not JSON: %v\n%s", n, err, sc.Text())
		}
		ls = append(ls, l)
	}
	return ls
}

// exContent is what an export holds, without versions: one string per
// entry, sorted.
func exContent(ls []exLine) []string {
	var out []string
	for _, l := range ls {
		b64 := "-"
		if l.ValueBase64 != nil {
			b64 = *l.ValueBase64
		}
		out = append(out, fmt.Sprintf("%s/%s/%s %s %s %s %s", l.Address.Namespace, l.Address.Type, l.Address.ID, l.State, l.Typename, l.Value, b64))
	}
	sort.Strings(out)
	return out
}

// exAudit returns every audit record of example/person, following the
// pages.
func exAudit(t *testing.T, r *runtime) []saAuditImport {
	t.Helper()
	var all []saAuditImport
	after := ""
	for {
		u := "http://" + r.admin + "/audit?namespace=example&type=person&limit=10000"
		if after != "" {
			u += "&after=" + url.QueryEscape(after)
		}
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		var page struct {
			Records []saAuditImport
			Next    *string
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET /audit: %s %v", resp.Status, err)
		}
		all = append(all, page.Records...)
		if page.Next == nil {
			return all
		}
		after = *page.Next
	}
}

type saAuditImport struct {
	Mutation, ID, State, Op, Import, Reason string
	Line                                    int64
}

var exImportID = regexp.MustCompile(`import (import-[0-9a-z]+)`)

// An export taken while the greeter runs holds every person that had
// visits throughout exactly once, with the visits of the ones the load
// did not touch; imported into a fresh runtime it exports the same, and
// the greeter goes on counting from the imported visits.
func TestExportUnderLoadImportIntoFreshRuntime(t *testing.T) {
	fn := exGreeter(t)
	a := exRuntime(t, fn)
	const stable = 150
	for i := range stable {
		exGreet(t, a, fmt.Sprintf("stable-%03d", i), 1+i%3)
	}
	for i := range stable {
		exAwait(t, a, fmt.Sprintf("stable-%03d", i), fmt.Sprint(1+i%3))
	}
	// The load: new persons and more visits of hot ones, while the export
	// runs.
	stop := make(chan struct{})
	var sent atomic.Int64
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("load-%d-%d", w, n)
				if n%2 == 1 {
					id = fmt.Sprintf("hot-%d", n%5)
				}
				if code, err := a.send("/example/person/"+id, "example/GreetRequest", `{"name":"`+id+`"}`); err == nil && code/100 == 2 {
					sent.Add(1)
				}
			}
		}()
	}
	for sent.Load() < 50 {
		time.Sleep(10 * time.Millisecond)
	}
	exp := exState(t, a, nil, "export", "--page-size", "7")
	close(stop)
	wg.Wait()
	if exp.code != 0 {
		t.Fatalf("export: exit %d\n%s", exp.code, exp.stderr)
	}
	lines := exLines(t, exp.stdout)
	seen := map[string]int{}
	for _, l := range lines {
		seen[l.Address.ID]++
		if l.Address.Type != "person" || l.State != "visits" || l.Typename != "io.statefun.types/int" || l.Version == "" || l.Value == nil {
			t.Errorf("line %+v", l)
		}
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("%s exported %d times", id, n)
		}
	}
	for _, l := range lines {
		if strings.HasPrefix(l.Address.ID, "stable-") {
			var i int
			fmt.Sscanf(l.Address.ID, "stable-%d", &i)
			if string(l.Value) != fmt.Sprint(1+i%3) {
				t.Errorf("%s exported %s, want %d", l.Address.ID, l.Value, 1+i%3)
			}
		}
	}
	for i := range stable {
		if id := fmt.Sprintf("stable-%03d", i); seen[id] != 1 {
			t.Errorf("%s is not in the export", id)
		}
	}
	if !strings.Contains(exp.stderr, fmt.Sprintf("exported %d entries", len(lines))) {
		t.Errorf("export's stderr: %s", exp.stderr)
	}
	t.Logf("exported %d entries while %d greet requests were sent", len(lines), sent.Load())

	b := exRuntime(t, fn)
	imp := exState(t, b, strings.NewReader(exp.stdout), "import", "--batch", "64")
	if imp.code != 0 || !strings.Contains(imp.stderr, fmt.Sprintf("%d lines done (%d written", len(lines), len(lines))) {
		t.Fatalf("import: exit %d\n%s", imp.code, imp.stderr)
	}
	back := exState(t, b, nil, "export")
	if got, want := exContent(exLines(t, back.stdout)), exContent(lines); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("the fresh runtime exports other entries than it imported:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The function reads what was imported: stable-001 had 2 visits.
	exGreet(t, b, "stable-001", 1)
	exAwait(t, b, "stable-001", "3")
}

// The modes, on the command line: absent leaves entries that have a value;
// overwrite writes every line; if-match writes where the entry still holds
// the exported version and reports every other line, by number.
func TestImportModesOnTheCommandLine(t *testing.T) {
	r := exRuntime(t, exGreeter(t))
	for _, id := range []string{"ann", "bob", "cid"} {
		exGreet(t, r, id, 1)
		exAwait(t, r, id, "1")
	}
	exp := exState(t, r, nil, "export", "--type", "example/person")
	if exp.code != 0 || len(exLines(t, exp.stdout)) != 3 {
		t.Fatalf("export: exit %d\n%s%s", exp.code, exp.stdout, exp.stderr)
	}
	// bob and cid move on after the export; dan appears.
	exGreet(t, r, "bob", 1)
	exGreet(t, r, "cid", 2)
	exGreet(t, r, "dan", 1)
	exAwait(t, r, "bob", "2")
	exAwait(t, r, "cid", "3")
	exAwait(t, r, "dan", "1")

	// if-match: ann unchanged since the export is written (to the same
	// value); bob and cid changed: lines 2 and 3 are conflicts.
	res := exState(t, r, strings.NewReader(exp.stdout), "import", "--mode", "if-match")
	if res.code != 1 || !regexp.MustCompile(`line 2: example/person bob visits: conflict: the entry changed since the export \(it holds version [0-9]+\)`).MatchString(res.stderr) ||
		!strings.Contains(res.stderr, "line 3: example/person cid visits: conflict") || strings.Contains(res.stderr, "line 1:") ||
		!strings.Contains(res.stderr, "3 lines done (1 written, 0 applied before, 0 skipped: had a value, 2 refused)") {
		t.Errorf("if-match: exit %d\n%s", res.code, res.stderr)
	}
	if exGet(t, r, "bob") != "2" || exGet(t, r, "cid") != "3" {
		t.Errorf("if-match overwrote a changed entry: bob %s, cid %s", exGet(t, r, "bob"), exGet(t, r, "cid"))
	}
	// absent: every entry has a value; nothing is written.
	res = exState(t, r, strings.NewReader(exp.stdout), "import", "--mode", "absent")
	if res.code != 0 || !strings.Contains(res.stderr, "3 lines done (0 written, 0 applied before, 3 skipped: had a value, 0 refused)") {
		t.Errorf("absent: exit %d\n%s", res.code, res.stderr)
	}
	if exGet(t, r, "bob") != "2" {
		t.Errorf("absent overwrote bob: %s", exGet(t, r, "bob"))
	}
	// overwrite: back to the export.
	res = exState(t, r, strings.NewReader(exp.stdout), "import", "--mode", "overwrite", "--reason", "roll back")
	if res.code != 0 || !strings.Contains(res.stderr, "3 lines done (3 written") {
		t.Errorf("overwrite: exit %d\n%s", res.code, res.stderr)
	}
	if exGet(t, r, "bob") != "1" || exGet(t, r, "cid") != "1" || exGet(t, r, "dan") != "1" {
		t.Errorf("after overwrite: bob %s, cid %s, dan %s", exGet(t, r, "bob"), exGet(t, r, "cid"), exGet(t, r, "dan"))
	}
	id := exImportID.FindStringSubmatch(res.stderr)
	if id == nil {
		t.Fatalf("no import id in %s", res.stderr)
	}
	n := 0
	for _, a := range exAudit(t, r) {
		if a.Import == id[1] {
			n++
			if a.Reason != "roll back" || a.Mutation != fmt.Sprintf("%s.%d", id[1], a.Line) {
				t.Errorf("audit record %+v", a)
			}
		}
	}
	if n != 3 {
		t.Errorf("%d audit records of import %s, want 3", n, id[1])
	}
}

// A line that is not an exported entry stops the import there: the lines
// before it are written, none after, and the error names it.
func TestImportMalformedLine(t *testing.T) {
	r := exRuntime(t, exGreeter(t))
	in := exPersonLines(1, 2) + "{\"address\": oops\n" + exPersonLines(4, 5)
	res := exState(t, r, strings.NewReader(in), "import", "--mode", "overwrite")
	if res.code != 1 || !strings.Contains(res.stderr, "line 3: not an exported entry") || !strings.Contains(res.stderr, "every line before it is imported, none after") {
		t.Errorf("exit %d\n%s", res.code, res.stderr)
	}
	if exGet(t, r, "p1") != "1" || exGet(t, r, "p2") != "2" || exGet(t, r, "p4") != "" {
		t.Errorf("p1 %q p2 %q p4 %q", exGet(t, r, "p1"), exGet(t, r, "p2"), exGet(t, r, "p4"))
	}
	// A line the server refuses (a value that is not an int) stops it the
	// same way, even inside a batch.
	in = exPersonLines(1, 2) + `{"address":{"namespace":"example","type":"person","id":"p3"},"state":"visits","typename":"io.statefun.types/int","value":"many"}` + "\n" + exPersonLines(4, 5)
	res = exState(t, r, strings.NewReader(in), "import", "--mode", "overwrite")
	if res.code != 1 || !regexp.MustCompile(`line 3: .*int`).MatchString(res.stderr) || exGet(t, r, "p3") != "" || exGet(t, r, "p4") != "" {
		t.Errorf("exit %d, p3 %q, p4 %q\n%s", res.code, exGet(t, r, "p3"), exGet(t, r, "p4"), res.stderr)
	}
}

// exPersonLines are import lines for p<from>..p<to>, p<n> with n visits.
func exPersonLines(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		fmt.Fprintf(&b, `{"address":{"namespace":"example","type":"person","id":"p%d"},"state":"visits","typename":"io.statefun.types/int","value":%d}`+"\n", i, i)
	}
	return b.String()
}

// An import survives a SIGKILL of the command and a SIGKILL of the runtime:
// each time it is run again with --resume, and in the end every line is
// written, and applied exactly once (one audit record per line).
func TestImportResumeAfterSIGKILL(t *testing.T) {
	r := exRuntime(t, exGreeter(t))
	const lines = 6000
	file := filepath.Join(t.TempDir(), "state.jsonl")
	if err := os.WriteFile(file, []byte(exPersonLines(1, lines)), 0o644); err != nil {
		t.Fatal(err)
	}
	// start runs the import in the background.
	start := func(extra ...string) (*exec.Cmd, *bytes.Buffer, chan error) {
		f, err := os.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		cmd := exec.Command(binary, append([]string{"state", "--server", "http://" + r.admin, "import", "--mode", "overwrite", "--batch", "50", "--retry-for", "2s"}, extra...)...)
		var errb bytes.Buffer
		cmd.Stdin, cmd.Stderr = f, &exSyncWriter{w: &errb}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		t.Cleanup(func() { cmd.Process.Kill() })
		return cmd, &errb, done
	}
	written := func() int {
		n := 0
		resp, err := http.Get("http://" + r.admin + "/state/example/person?limit=10000")
		if err != nil {
			return 0
		}
		var p struct{ IDs []string }
		json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		n = len(p.IDs)
		return n
	}
	awaitWritten := func(atLeast int) {
		deadline := time.Now().Add(60 * time.Second)
		for written() < atLeast {
			if time.Now().After(deadline) {
				t.Fatalf("the import did not reach %d lines", atLeast)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	// 1. SIGKILL the command.
	cmd, errb, done := start()
	awaitWritten(lines / 5)
	cmd.Process.Signal(syscall.SIGKILL)
	<-done
	m := exImportID.FindStringSubmatch(errb.String())
	if m == nil {
		t.Fatalf("no import id:\n%s", errb.String())
	}
	id := m[1]
	if n := written(); n >= lines {
		t.Fatalf("the import ended before it was killed (%d lines)", n)
	}

	// 2. Resume; SIGKILL the runtime.
	_, errb, done = start("--resume", id)
	awaitWritten(lines / 2)
	r.kill()
	if err := <-done; err == nil || !strings.Contains(errb.String(), "--resume "+id) {
		t.Fatalf("the import did not fail with the runtime gone: %v\n%s", err, errb.String())
	}
	if n := written(); n >= lines {
		t.Logf("all lines written before the runtime was killed")
	}

	// 3. Restart the runtime; resume to the end.
	r.start()
	_, errb, done = start("--resume", id)
	if err := <-done; err != nil {
		t.Fatalf("the last resume: %v\n%s", err, errb.String())
	}
	if !regexp.MustCompile(`6000 lines done \([0-9]+ written, [1-9][0-9]* applied before`).MatchString(errb.String()) {
		t.Errorf("the last resume's summary:\n%s", errb.String())
	}
	t.Logf("last resume: %s", strings.TrimSpace(errb.String()))

	if n := written(); n != lines {
		t.Errorf("%d persons hold visits, want %d", n, lines)
	}
	for _, i := range []int{1, 1234, lines / 2, lines} {
		if got := exGet(t, r, fmt.Sprintf("p%d", i)); got != fmt.Sprint(i) {
			t.Errorf("p%d holds %q", i, got)
		}
	}
	perLine := map[int64]int{}
	for _, a := range exAudit(t, r) {
		if a.Import != id {
			t.Errorf("an audit record of another change: %+v", a)
			continue
		}
		perLine[a.Line]++
		if a.ID != fmt.Sprintf("p%d", a.Line) {
			t.Errorf("line %d changed %s", a.Line, a.ID)
		}
	}
	for i := int64(1); i <= lines; i++ {
		if perLine[i] != 1 {
			t.Errorf("line %d applied %d times", i, perLine[i])
		}
	}
}

// exSyncWriter lets a test read what a process writes while it runs.
type exSyncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *exSyncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
