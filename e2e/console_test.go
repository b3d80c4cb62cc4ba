package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/flink-statefun/statefun-sdk-go/v3/pkg/statefun"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/twmb/franz-go/pkg/kfake"
)

// These tests drive the operator's console (docs/how-to/console.md) in a real
// headless Chromium against the real binary and an official-Go-SDK
// function, as an operator would: sign in with a token, browse to an
// address, edit a value through the diff, meet a conflicting write,
// revert from the audit log, pause and resume while messages queue, and
// repair the incident of a poisoned state value entirely in the page. A
// read-only token sees no write control and the server refuses a forced
// write. axe-core checks every page for serious or critical
// accessibility violations; screenshots of the main views are saved.
//
// Chromium is Debian's chromium package (.ci/run installs it); without it
// the test fails, unless STATEFUN_SKIP_BROWSER=1 says to skip.

// Tokens of the console's runtime.
const (
	cnOperatorToken = "operator-secret-console-0123456789"
	cnViewerToken   = "viewer-secret-console-0123456789"
)

// cnType is the console's test function.
const cnType = "console/counter"

// Its states.
var (
	cnCount   = statefun.ValueSpec{Name: "count", ValueType: statefun.Int64Type}
	cnLabel   = statefun.ValueSpec{Name: "label", ValueType: statefun.StringType}
	cnEnabled = statefun.ValueSpec{Name: "enabled", ValueType: statefun.BoolType}
	cnProfile = statefun.ValueSpec{Name: "profile", ValueType: statefun.MakeJsonType(statefun.TypeNameFrom("console/Profile"))}
	cnBlob    = statefun.ValueSpec{Name: "blob", ValueType: rawType{statefun.TypeNameFrom("console/Blob")}}
	cnSession = statefun.ValueSpec{Name: "session", ValueType: statefun.StringType, Expiration: statefun.ExpireAfterWrite(time.Hour)}
	cnNote    = statefun.ValueSpec{Name: "note", ValueType: statefun.StringType}
)

// rawType is a user type whose value is raw bytes (no text form).
type rawType struct{ name statefun.TypeName }

func (r rawType) GetTypeName() statefun.TypeName { return r.name }
func (r rawType) Deserialize(rd io.Reader, receiver interface{}) error {
	b, err := io.ReadAll(rd)
	*(receiver.(*[]byte)) = b
	return err
}
func (r rawType) Serialize(w io.Writer, data interface{}) error {
	_, err := w.Write(data.([]byte))
	return err
}

// cnFunction serves console/counter: every message adds 1 to count and
// refreshes the other states — unless count is negative, a poisoned value
// it refuses to run on, or the message is "poison" and the function has
// not been fixed for it yet (cured). It records the count it read per id.
type cnFunction struct {
	mu   sync.Mutex
	seen map[string][]int64
	// cured says the function has been fixed to handle "poison".
	cured atomic.Bool
}

func (f *cnFunction) start(t *testing.T) string {
	f.seen = map[string][]int64{}
	b := statefun.StatefulFunctionsBuilder()
	err := b.WithSpec(statefun.StatefulFunctionSpec{
		FunctionType: statefun.TypeNameFrom(cnType),
		States:       []statefun.ValueSpec{cnCount, cnLabel, cnEnabled, cnProfile, cnBlob, cnSession, cnNote},
		Function: statefun.StatefulFunctionPointer(func(ctx statefun.Context, msg statefun.Message) error {
			var n int64
			ctx.Storage().Get(cnCount, &n)
			if n < 0 {
				return fmt.Errorf("count is %d: a negative count is corrupt, refusing to go on", n)
			}
			text := string(msg.RawValue()) // a console/Ping from the ingress
			if msg.IsString() {
				text = msg.AsString() // the reminder it sends itself
			}
			if text == "poison" && !f.cured.Load() {
				return errors.New("cannot digest the message \"poison\" (a bug, fixed in the next release)")
			}
			id := ctx.Self().Id
			f.mu.Lock()
			f.seen[id] = append(f.seen[id], n)
			f.mu.Unlock()
			n++
			ctx.Storage().Set(cnCount, n)
			ctx.Storage().Set(cnLabel, "last message: "+text)
			ctx.Storage().Set(cnEnabled, true)
			ctx.Storage().Set(cnProfile, map[string]any{"name": id, "visits": n, "tags": []string{"console", "e2e"}})
			ctx.Storage().Set(cnBlob, []byte{0xde, 0xad, 0xbe, 0xef, byte(n)})
			ctx.Storage().Set(cnSession, "session-"+text)
			if text == "later" {
				tok, _ := statefun.NewCancellationToken("reminder-" + id)
				ctx.SendAfterWithCancellationToken(time.Hour, tok, statefun.MessageBuilder{Target: ctx.Self(), Value: "reminder"})
			}
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

// saw returns the counts the function read for id.
func (f *cnFunction) saw(id string) []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int64(nil), f.seen[id]...)
}

// cnEnv is the runtime, its API and the browser shared by the subtests.
type cnEnv struct {
	rt      *runtime
	fn      *cnFunction
	api     *saAPI // with the operator token
	base    string // http://admin/ui/
	browser context.Context
	shots   string
	axe     string
	kafka   string // the brokers of the Kafka ingress console/in
}

func TestConsole(t *testing.T) {
	chromium := cnChromium(t)
	axe := cnAxe(t)
	shots := os.Getenv("STATEFUN_CONSOLE_SCREENSHOTS")
	if shots == "" {
		shots = filepath.Join(os.TempDir(), "statefun-console-screenshots")
	}
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("console screenshots in %s", shots)

	fn := &cnFunction{}
	url := fn.start(t)
	// A Kafka ingress console/in (topic "in" → console/counter) on an
	// in-process Kafka, for the ingress dead letters.
	kafka, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "in"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kafka.Close)
	// gone/* is served by nobody: a function endpoint that is down.
	module := saModule(saEndpoint{"console/*", url}, saEndpoint{"gone/*", fmt.Sprintf("http://127.0.0.1:%d/", freePort(t))})
	rt := newRuntimeWith(t, func(in, out int) string {
		return module(in, out) + fmt.Sprintf(`---
kind: io.statefun.kafka.v1/ingress
spec:
  id: console/in
  address: %s
  consumerGroupId: console
  startupPosition:
    type: earliest
  topics:
    - topic: in
      valueType: console/Ping
      targets: [console/counter]
`, brokersOf(kafka))
	})
	tokens := filepath.Join(rt.dir, "tokens")
	if err := os.WriteFile(tokens, []byte("operator "+cnOperatorToken+" read,write\nviewer "+cnViewerToken+" read\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	saStart(rt, "http", saClient, "--api-tokens", tokens, "--pause-after", "console/*=2")
	env := &cnEnv{rt: rt, fn: fn, api: saAPIOf(t, "http://"+rt.admin, saClient).as(cnOperatorToken),
		base: "http://" + rt.admin + "/ui/", shots: shots, axe: axe, kafka: brokersOf(kafka)}

	env.browser = cnBrowser(t, chromium)

	// The subtests run in order on one runtime and one browser (each in a
	// tab of its own, signed in afresh). Each works on ids of its own,
	// except: read-only and phone width look at alice, whom "browse to an
	// address" creates (and read-only expects her count untouched since);
	// read-only also opens frank's audit records, which "revert from the
	// audit log" writes. The poison policy (--pause-after console/*=2)
	// pauses every address whose batch fails twice.
	t.Run("sign in and overview", env.testSignIn)
	t.Run("browse to an address", env.testBrowse)
	t.Run("typing while a page loads keeps the focus", env.testFocusKept)
	t.Run("edit a value through the diff", env.testEdit)
	t.Run("conflicting write", env.testConflict)
	t.Run("revert from the audit log", env.testRevert)
	t.Run("pause, watch messages queue, resume", env.testPause)
	t.Run("repair-loop incident", env.testIncident)
	t.Run("skip a poisoned message, re-send it after the fix", env.testSkipResend)
	t.Run("edit a poisoned message where it waits", env.testEditMessage)
	t.Run("cancel a delayed message", env.testCancelDelayed)
	t.Run("delete a paused address", env.testDeleteAddress)
	t.Run("restore an entry and an address to a point in time", env.testRestore)
	t.Run("kafka ingress dead letters", env.testKafkaDeadLetters)
	t.Run("read-only token", env.testReadOnly)
	t.Run("phone width", env.testPhone)
	t.Run("a function endpoint that is down", env.testEndpointDown)
}

// testEndpointDown: a message for gone/*, whose server nobody runs, makes
// its endpoint down; every page then shows one banner naming it, read
// from GET /endpoints.
func (e *cnEnv) testEndpointDown(t *testing.T) {
	if status, err := e.rt.send("/gone/fn/x", "console/Ping", "hello"); err != nil || status != 200 {
		t.Fatalf("message to gone/fn: %d %v", status, err)
	}
	api := e.api.withT(t)
	eventually(t, 30*time.Second, "gone/* down", func() bool {
		var out struct {
			Endpoints []struct {
				Functions string
				Up        bool
			}
		}
		if err := json.Unmarshal(api.do(http.MethodGet, "/endpoints", "").body, &out); err != nil {
			t.Fatal(err)
		}
		for _, ep := range out.Endpoints {
			if ep.Functions == "gone/*" && !ep.Up {
				return true
			}
		}
		return false
	})
	ctx := e.tab(t)
	e.signIn(t, ctx, cnOperatorToken, "operator")
	e.goTo(t, ctx, "#/", `[data-endpoint="gone/*"]`)
	text := evaluate[string](t, ctx, "the banner", `document.querySelector('[data-endpoint="gone/*"]').innerText`)
	if !strings.Contains(text, "Function endpoint gone/* is down") || !strings.Contains(text, "could not connect") {
		t.Errorf("the banner: %q", text)
	}
	if n := evaluate[int](t, ctx, "banners", `document.querySelectorAll('#banners .notice').length`); n != 1 {
		t.Errorf("%d banners, want the one endpoint that is down", n)
	}
	e.shoot(t, ctx, "endpoint-down")
	e.checkA11y(t, ctx, "endpoint-down")
}

// cnChromium finds the browser, or fails (skips only when asked to).
func cnChromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("STATEFUN_SKIP_BROWSER") == "1" {
		t.Skip("no chromium on PATH, and STATEFUN_SKIP_BROWSER=1")
	}
	t.Fatal("the console tests need a headless Chromium: install Debian's chromium package (apt-get install chromium; .ci/run does), or set STATEFUN_SKIP_BROWSER=1 to skip them")
	return ""
}

// cnAxe reads axe-core, installed by make deps.
func cnAxe(t *testing.T) string {
	b, err := os.ReadFile(filepath.Join("testdata", "axe", "node_modules", "axe-core", "axe.min.js"))
	if err != nil {
		t.Fatalf("axe-core is not installed (%v): run make deps (cd e2e/testdata/axe && npm ci --no-audit --no-fund)", err)
	}
	return string(b)
}

// tab opens a new browser tab (its own sessionStorage) for one subtest.
func (e *cnEnv) tab(t *testing.T) context.Context {
	ctx, cancel := chromedp.NewContext(e.browser)
	t.Cleanup(cancel)
	// Collect what the page logs as errors: a console error fails the test.
	var mu sync.Mutex
	var errs []string
	if err := chromedp.Listen(ctx, func(ev any) {
		if ev, ok := ev.(*cdpruntime.EventExceptionThrown); ok {
			mu.Lock()
			d := ev.ExceptionDetails
			desc := d.Text
			if d.Exception != nil {
				desc += " " + d.Exception.Description
			}
			errs = append(errs, fmt.Sprintf("%s (%s:%d)", desc, d.URL, d.LineNumber+1))
			mu.Unlock()
		}
	}); err != nil {
		t.Fatalf("open a tab: %v", err)
	}
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range errs {
			t.Errorf("the page threw: %s", e)
		}
	})
	return ctx
}

// run runs browser actions with a deadline, failing t with what was being
// done.
func run(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(c, actions...); err != nil {
		t.Fatalf("%s: %v\nthe page reads:\n%s", what, err, pageText(ctx))
	}
}

// get runs one browser action that returns a value.
func get[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(c, a)
	if err != nil {
		t.Fatalf("%s: %v\nthe page reads:\n%s", what, err, pageText(ctx))
	}
	return v
}

// pageText is what the page's main region reads, for a failure message.
func pageText(ctx context.Context) string {
	c, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s, _ := chromedp.Run(c, chromedp.Evaluate[string](`document.body.innerText`))
	return s
}

// evaluate runs JavaScript in the page (awaiting a promise) and returns
// its value.
func evaluate[T any](t *testing.T, ctx context.Context, what, expr string) T {
	t.Helper()
	return get(t, ctx, what, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
}

// signIn opens the console in ctx and enters token.
func (e *cnEnv) signIn(t *testing.T, ctx context.Context, token, principal string) {
	t.Helper()
	run(t, ctx, "open the console", chromedp.Navigate(e.base), chromedp.WaitVisible(chromedp.CSS("#token")))
	run(t, ctx, "sign in",
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS(`form:has(#token) button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS("#principal")))
	if who := textOf(t, ctx, "#principal"); who != principal {
		t.Fatalf("signed in as %q, want %q", who, principal)
	}
}

// goTo navigates to a console route and waits for sel.
func (e *cnEnv) goTo(t *testing.T, ctx context.Context, route, sel string) {
	t.Helper()
	run(t, ctx, "go to "+route, chromedp.Navigate(e.base+route), chromedp.WaitVisible(chromedp.CSS(sel)))
}

// click clicks the first visible element matching an XPath.
func click(t *testing.T, ctx context.Context, xpath string) {
	t.Helper()
	run(t, ctx, "click "+xpath, chromedp.WaitVisible(chromedp.Search(xpath)), chromedp.Click(chromedp.Search(xpath)))
}

// button is the XPath of a visible button (or button-styled link) by its
// text, optionally inside a scope.
func button(text string) string {
	return fmt.Sprintf(`//*[(self::button or self::a) and normalize-space()=%q]`, text)
}

// confirm fills the reason of the open dialog and confirms it.
func confirm(t *testing.T, ctx context.Context, reason string) {
	t.Helper()
	run(t, ctx, "confirm the dialog",
		chromedp.WaitVisible(chromedp.CSS("dialog[open] #dialog-reason")),
		chromedp.SendKeys(chromedp.CSS("dialog[open] #dialog-reason"), reason),
		chromedp.Click(chromedp.CSS("dialog[open] button[data-confirm]")),
		chromedp.WaitNotPresent(chromedp.CSS("dialog[open]")))
}

// textOf returns the text of the first element matching a CSS selector.
func textOf(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	run(t, ctx, "find "+sel, chromedp.WaitVisible(chromedp.CSS(sel)))
	return get(t, ctx, "read "+sel, chromedp.Text(chromedp.CSS(sel)))
}

// waitText waits until the element matching sel contains want.
func waitText(t *testing.T, ctx context.Context, sel, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var got string
	for time.Now().Before(deadline) {
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		s, err := chromedp.Run(c, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%q) || {}).innerText || ''`, sel)))
		cancel()
		if err == nil {
			got = s
		}
		if err == nil && strings.Contains(got, want) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s never read %q; it reads %q", sel, want, got)
}

// shoot saves a full-page screenshot of the current view.
func (e *cnEnv) shoot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png := get(t, ctx, "screenshot "+name, chromedp.FullScreenshot(100))
	path := filepath.Join(e.shots, "console-"+name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// axeViolation is one violation axe-core reports.
type axeViolation struct {
	ID     string   `json:"id"`
	Impact string   `json:"impact"`
	Help   string   `json:"help"`
	Nodes  []string `json:"nodes"`
}

// checkA11y runs axe-core on the page and fails t on a serious or
// critical violation.
func (e *cnEnv) checkA11y(t *testing.T, ctx context.Context, page string) {
	t.Helper()
	get(t, ctx, "inject axe-core", chromedp.Evaluate[bool](e.axe+";true"))
	out := evaluate[string](t, ctx, "run axe-core on "+page, `axe.run(document, {resultTypes: ['violations']}).then(r => JSON.stringify(r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 5).map(n => n.target.join(' '))}))))`)
	var vs []axeViolation
	if err := json.Unmarshal([]byte(out), &vs); err != nil {
		t.Fatalf("axe-core's answer %q: %v", out, err)
	}
	for _, v := range vs {
		if v.Impact == "serious" || v.Impact == "critical" {
			t.Errorf("accessibility (%s) on %s: %s (%s) at %v", v.Impact, page, v.Help, v.ID, v.Nodes)
		} else {
			t.Logf("accessibility (%s) on %s: %s (%s) at %v", v.Impact, page, v.Help, v.ID, v.Nodes)
		}
	}
}

// send puts one console/Ping message (raw text) to console/counter/<id>.
func (e *cnEnv) send(t *testing.T, id, text string) {
	t.Helper()
	status, err := e.rt.send("/"+cnType+"/"+id, "console/Ping", text)
	if err != nil || status != http.StatusOK {
		t.Fatalf("ingress %s/%s: %d %v", cnType, id, status, err)
	}
}

// awaitSeen waits until the function has handled n messages of id.
func (e *cnEnv) awaitSeen(t *testing.T, id string, n int) []int64 {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if s := e.fn.saw(id); len(s) >= n {
			return s
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s: the function handled %v, want %d messages", id, e.fn.saw(id), n)
	return nil
}

// count reads console/counter/<id>'s count through the API.
func (e *cnEnv) count(t *testing.T, id string) string {
	t.Helper()
	r := e.api.withT(t).expect(http.StatusOK, http.MethodGet, "/state/console/counter/"+id+"/count", "", "Accept", "text/plain")
	return string(r.body)
}

func (e *cnEnv) testSignIn(t *testing.T) {
	// The console is served with its policy, every asset from the binary.
	resp, err := http.Get(e.base)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || strings.Contains(csp, "unsafe-inline") {
		t.Fatalf("/ui/ Content-Security-Policy %q", csp)
	}
	e.send(t, "warmup", "hello")
	e.awaitSeen(t, "warmup", 1)

	ctx := e.tab(t)
	run(t, ctx, "open the console", chromedp.Navigate(strings.TrimSuffix(e.base, "/")), chromedp.WaitVisible(chromedp.CSS("#token")))
	e.checkA11y(t, ctx, "sign-in")
	// A wrong token is refused with the API's reason, and asked again.
	run(t, ctx, "sign in with a wrong token",
		chromedp.SendKeys(chromedp.CSS("#token"), "not-the-token-0123456789"),
		chromedp.Click(chromedp.CSS(`form:has(#token) button[type=submit]`)))
	waitText(t, ctx, "main", "unknown bearer token")
	run(t, ctx, "sign in",
		chromedp.SetValue(chromedp.CSS("#token"), cnOperatorToken),
		chromedp.Click(chromedp.CSS(`form:has(#token) button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-type="console/counter"]`)))
	if who := textOf(t, ctx, "#principal"); who != "operator" {
		t.Fatalf("principal %q", who)
	}
	// The token is in this tab's sessionStorage, in no cookie, no URL.
	cookie := evaluate[string](t, ctx, "cookies", `document.cookie`)
	href := get(t, ctx, "location", chromedp.Location())
	stored := evaluate[string](t, ctx, "session storage", `sessionStorage.getItem('statefun.token')`)
	if strings.Contains(cookie, cnOperatorToken) || strings.Contains(href, cnOperatorToken) || stored != cnOperatorToken {
		t.Fatalf("cookie %q, location %q, sessionStorage %q", cookie, href, stored)
	}
	row := textOf(t, ctx, `tr[data-type="console/counter"]`)
	if !strings.Contains(row, "console/counter") {
		t.Fatalf("overview row: %q", row)
	}
	e.checkA11y(t, ctx, "overview")
}

func (e *cnEnv) testBrowse(t *testing.T) {
	for _, m := range []string{"one", "two", "later"} {
		e.send(t, "alice", m)
	}
	e.awaitSeen(t, "alice", 3)
	ctx := e.tab(t)
	e.signIn(t, ctx, cnOperatorToken, "operator")
	click(t, ctx, `//nav//a[normalize-space()="Browse"]`)
	run(t, ctx, "the types", chromedp.WaitVisible(chromedp.Search(`//a[normalize-space()="counter"]`)))
	e.checkA11y(t, ctx, "browse")
	click(t, ctx, `//a[normalize-space()="counter"]`)
	run(t, ctx, "the ids", chromedp.WaitVisible(chromedp.CSS("#prefix")))
	run(t, ctx, "search a prefix", chromedp.SendKeys(chromedp.CSS("#prefix"), "ali"), chromedp.Click(chromedp.CSS(`form:has(#prefix) button[type=submit]`)))
	waitText(t, ctx, "main", "Ids starting with “ali”")
	e.checkA11y(t, ctx, "ids")
	click(t, ctx, `//table//a[normalize-space()="alice"]`)
	run(t, ctx, "the address", chromedp.WaitVisible(chromedp.CSS(`tr[data-state="count"]`)))
	for state, want := range map[string]string{
		"count":   "3",
		"label":   "last message: later",
		"enabled": "true",
		"profile": `"visits":3`,
		"blob":    "de ad be ef 03",
		"session": "session-later",
		"note":    "no value",
	} {
		waitText(t, ctx, fmt.Sprintf(`tr[data-state=%q]`, state), want)
	}
	// A TTL shows when it expires; the delayed message is listed.
	if row := textOf(t, ctx, `tr[data-state="session"]`); !strings.Contains(row, "in ") {
		t.Errorf("the session row shows no expiry: %q", row)
	}
	waitText(t, ctx, `section[aria-labelledby="inbox-h"]`, "reminder-alice")
	e.shoot(t, ctx, "address")
	e.checkA11y(t, ctx, "address")

	// The entry: typed value, history with causes, a point-in-time view.
	click(t, ctx, `//tr[@data-state="profile"]//a[normalize-space()="Open"]`)
	run(t, ctx, "the entry", chromedp.WaitVisible(chromedp.CSS(`tr[data-commit]`)))
	waitText(t, ctx, "#current-value", `"visits": 3`)
	waitText(t, ctx, `section[aria-labelledby=history-h]`, "the function, handling 1 message(s)")
	click(t, ctx, `(//tr[@data-commit])[last()]//a[normalize-space()="View"]`)
	waitText(t, ctx, "#asof-value", `"visits": 1`)
	e.checkA11y(t, ctx, "entry")
}

// testFocusKept: a page moves the focus to its heading once it has loaded
// (screen readers announce the new page) — but not when the operator has
// already put it in a field of the page while its data was on the way:
// their typing must not be cut off. The ids request is held in the
// browser (the DevTools Fetch domain) while the prefix is typed.
func (e *cnEnv) testFocusKept(t *testing.T) {
	ctx := e.tab(t)
	e.signIn(t, ctx, cnOperatorToken, "operator")
	paused := make(chan fetch.RequestID, 1)
	if err := chromedp.Listen(ctx, func(ev any) {
		if ev, ok := ev.(*fetch.EventRequestPaused); ok {
			paused <- ev.RequestID
		}
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: "*/state/console/counter?*"}}}); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, "open the ids", chromedp.Navigate(e.base+"#/browse/console/counter"), chromedp.WaitVisible(chromedp.CSS("#prefix")))
	var held fetch.RequestID
	select {
	case held = <-paused:
	case <-time.After(20 * time.Second):
		t.Fatal("the ids request never went out")
	}
	run(t, ctx, "type while the ids load", chromedp.SendKeys(chromedp.CSS("#prefix"), "ali"))
	if _, err := chromedp.Call(ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: held}); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, "the ids", chromedp.WaitVisible(chromedp.CSS(`table[aria-label="Ids"]`)))
	// The page has settled (its mark is set after the focus decision).
	evaluate[bool](t, ctx, "the page's mark", `new Promise((resolve) => { const f = () => performance.getEntriesByName('statefun:painted').some((m) => m.detail.route === location.hash) ? resolve(true) : setTimeout(f, 20); f(); })`)
	if got := evaluate[string](t, ctx, "the focus", `document.activeElement.id + '=' + (document.activeElement.value ?? '')`); got != "prefix=ali" {
		t.Fatalf("after the ids loaded the focus is on %q, want the prefix field with what was typed", got)
	}
	if _, err := chromedp.Call(ctx, fetch.Disable, cdp.Empty{}); err != nil {
		t.Fatal(err)
	}
}

func (e *cnEnv) testEdit(t *testing.T) {
	e.send(t, "erin", "a")
	e.send(t, "erin", "b")
	e.awaitSeen(t, "erin", 2)
	ctx := e.tab(t)
	e.signIn(t, ctx, cnOperatorToken, "operator")
	e.goTo(t, ctx, "#/browse/console/counter/erin/count", "#edit-button")
	waitText(t, ctx, "#current-value", "2")
	click(t, ctx, `//button[@id="edit-button"]`)
	run(t, ctx, "type the new value",
		chromedp.WaitVisible(chromedp.CSS("#edit-value")),
		chromedp.SetValue(chromedp.CSS("#edit-value"), "100"))
	click(t, ctx, `//button[@id="review-button"]`)
	// The diff: the old value out, the new one in, before anything is written.
	waitText(t, ctx, "dialog[open] .diff .del", "2")
	waitText(t, ctx, "dialog[open] .diff .ins", "100")
	if c := e.count(t, "erin"); c != "2" {
		t.Fatalf("count is %s before the confirm, want 2", c)
	}
	e.shoot(t, ctx, "diff")
	e.checkA11y(t, ctx, "edit diff")
	confirm(t, ctx, "e2e: set the counter to 100")
	waitText(t, ctx, "#notices", "committed")
	if c := e.count(t, "erin"); c != "100" {
		t.Fatalf("count is %s after the write, want 100", c)
	}
	// The page reloaded after the write, before the next message: once
	// the function has counted it the value is 101, and a reload that
	// came late would read that.
	waitText(t, ctx, "#current-value", "100")
	// The function sees the new value: the counter continues from it.
	e.send(t, "erin", "c")
	if seen := e.awaitSeen(t, "erin", 3); seen[2] != 100 {
		t.Fatalf("the function read %v, want 100 last", seen)
	}
}

func (e *cnEnv) testConflict(t *testing.T) {
	e.send(t, "bob", "a")
	e.awaitSeen(t, "bob", 1)
	ctx := e.tab(t)
	e.signIn(t, ctx, cnOperatorToken, "operator")
	e.goTo(t, ctx, "#/browse/console/counter/bob/label", "#edit-button")
	click(t, ctx, `//button[@id="edit-button"]`)
	run(t, ctx, "type the new value", chromedp.WaitVisible(chromedp.CSS("#edit-value")),
		chromedp.SetValue(chromedp.CSS("#edit-value"), "written in the console"))
	// Someone else writes between opening and saving.
	e.api.expect(http.StatusOK, http.MethodPut, "/state/console/counter/bob/label", "written by someone else",
		"Content-Type", "text/plain", "Statefun-Reason", "concurrent fix")
	click(t, ctx, `//button[@id="review-button"]`)
	confirm(t, ctx, "e2e: my edit")
	run(t, ctx, "the conflict", chromedp.WaitVisible(chromedp.CSS(`[data-conflict]`)))
	waitText(t, ctx, "#conflict-by", "operator operator (“concurrent fix”)")
	waitText(t, ctx, "#conflict-value", "written by someone else")
	r := e.api.expect(http.StatusOK, http.MethodGet, "/state/console/counter/bob/label", "", "Accept", "text/plain")
	if string(r.body) != "written by someone else" {
		t.Fatalf("the conflicting write was overwritten: %q", r.body)
	}
	e.shoot(t, ctx, "conflict")
	e.checkA11y(t, ctx, "conflict")
}

func (e *cnEnv) testRevert(t *testing.T) {
	// bob's label was overwritten by the concurrent fix of the previous
	// subtest; revert that from the audit log.
	e.send(t, "frank", "x")
	e.awaitSeen(t, "frank", 1)
	bad := e.api.expect(http.StatusOK, http.MethodPut, "/state/console/counter/frank/label", "bad import",
		"Content-Type", "text/plain", "Statefun-Reason", "import")
	badMutation := saDecode[saReceipt](t, bad).Mutation
	ctx := e.tab(t)
	e.signIn(t, ctx, cnOperatorToken, "operator")
	e.goTo(t, ctx, "#/audit", "#f-namespace")
	run(t, ctx, "filter the audit log",
		chromedp.SendKeys(chromedp.CSS("#f-namespace"), "console"),
		chromedp.SendKeys(chromedp.CSS("#f-type"), "counter"),
		chromedp.SendKeys(chromedp.CSS("#f-id"), "frank"),
		chromedp.SendKeys(chromedp.CSS("#f-state"), "label"),
		chromedp.Click(chromedp.CSS(`form:has(#f-namespace) button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-op="put"]`)))
	click(t, ctx, `//tr[@data-op="put"]//summary`)
	waitText(t, ctx, `tr[data-op="put"] .audit-detail`, "bad import")
	waitText(t, ctx, `tr[data-op="put"] .audit-detail`, "last message: x")
	e.shoot(t, ctx, "audit")
	e.checkA11y(t, ctx, "audit")
	click(t, ctx, `//tr[@data-op="put"]//button[normalize-space()="Revert"]`)
	confirm(t, ctx, "e2e: undo the bad import")
	waitText(t, ctx, "#notices", "committed")
	r := e.api.expect(http.StatusOK, http.MethodGet, "/state/console/counter/frank/label", "", "Accept", "text/plain")
	if string(r.body) != "last message: x" {
		t.Fatalf("after the revert the label is %q", r.body)
	}
	// A second revert of the same mutation finds the entry changed: the
	// page says so and changes nothing.
	e.goTo(t, ctx, "#/audit?namespace=console&type=counter&id=frank&state=label", `tr[data-op="put"]`)
	click(t, ctx, fmt.Sprintf(`//tr[@data-mutation=%q]//button[normalize-space()="Revert"]`, badMutation))
	confirm(t, ctx, "e2e: again")
	waitText(t, ctx, "#notices", "Not reverted")
}

func (e *cnEnv) testPause(t *testing.T) {
	e.send(t, "carol", "a")
	e.awaitSeen(t, "carol", 1)
	ctx := e.tab(t)
	e.signIn(t, ctx, cnOperatorToken, "operator")
	e.goTo(t, ctx, "#/browse/console/counter/carol", `[data-status="running"]`)
	click(t, ctx, button("Pause"))
	confirm(t, ctx, "e2e: hold carol")
	run(t, ctx, "paused", chromedp.WaitVisible(chromedp.CSS(`[data-status="paused"]`)))
	for i := range 3 {
		e.send(t, "carol", fmt.Sprint("q", i))
	}
	// The page refreshes by itself: the messages queue.
	waitText(t, ctx, `dd[data-queued]`, "3")
	if s := e.fn.saw("carol"); len(s) != 1 {
		t.Fatalf("the function ran %v while carol was paused", s)
	}
	e.shoot(t, ctx, "paused")
	e.checkA11y(t, ctx, "paused address")
	click(t, ctx, button("Resume"))
	confirm(t, ctx, "e2e: release carol")
	e.awaitSeen(t, "carol", 4)
	waitText(t, ctx, `dd[data-queued]`, "0")
	waitText(t, ctx, `tr[data-state="count"]`, "4")
}

func (e *cnEnv) testIncident(t *testing.T) {
	const id = "dave"
	e.send(t, id, "a")
	e.awaitSeen(t, id, 1)
	// A bad import poisons the value; the function fails on it, and the
	// poison policy pauses the address after two attempts while messages
	// keep arriving.
	e.api.expect(http.StatusOK, http.MethodPut, "/state/console/counter/"+id+"/count", "-5",
		"Content-Type", "text/plain", "Statefun-Reason", "bad import")
	for i := range 3 {
		e.send(t, id, fmt.Sprint("m", i))
	}
	ctx := e.tab(t)
	e.signIn(t, ctx, cnOperatorToken, "operator")
	// The operator finds it in the failing list, its last error one click away.
	run(t, ctx, "the failing address", chromedp.WaitVisible(chromedp.CSS(`tr[data-failing="console/counter/dave"]`)))
	waitText(t, ctx, `tr[data-failing="console/counter/dave"]`, "paused")
	click(t, ctx, `//tr[@data-failing="console/counter/dave"]//summary`)
	waitText(t, ctx, `tr[data-failing="console/counter/dave"] .lasterror`, "negative count is corrupt")
	e.shoot(t, ctx, "overview")
	e.checkA11y(t, ctx, "overview with a failing address")
	click(t, ctx, `//tr[@data-failing="console/counter/dave"]//a`)
	run(t, ctx, "the failing address's page", chromedp.WaitVisible(chromedp.CSS(`[data-status="failing"]`)))
	waitText(t, ctx, "pre.lasterror", "negative count is corrupt")
	e.shoot(t, ctx, "incident")
	e.checkA11y(t, ctx, "failing address")
	// Repair the value: the diff, the write with If-Match, the receipt.
	click(t, ctx, `//tr[@data-state="count"]//a[normalize-space()="Open"]`)
	click(t, ctx, `//button[@id="edit-button"]`)
	run(t, ctx, "type the repaired value", chromedp.WaitVisible(chromedp.CSS("#edit-value")),
		chromedp.SetValue(chromedp.CSS("#edit-value"), "1"))
	click(t, ctx, `//button[@id="review-button"]`)
	waitText(t, ctx, "dialog[open] .diff .del", "-5")
	confirm(t, ctx, "e2e: repair the import")
	waitText(t, ctx, "#notices", "committed")
	// Resume from the address's page: the queued messages run on the repaired value.
	click(t, ctx, `//nav[@aria-label="Breadcrumb"]//a[normalize-space()="dave"]`)
	run(t, ctx, "the address", chromedp.WaitVisible(chromedp.CSS(`[data-status="paused"]`)))
	click(t, ctx, button("Resume"))
	confirm(t, ctx, "e2e: repaired")
	seen := e.awaitSeen(t, id, 4)
	if fmt.Sprint(seen) != "[0 1 2 3]" {
		t.Fatalf("the function read %v, want [0 1 2 3]: each queued message once, on the repaired value", seen)
	}
	waitText(t, ctx, `tr[data-state="count"]`, "4")
	waitText(t, ctx, `[data-status="running"]`, "running")
	// The audit log tells the story, newest first by default (an operator
	// in an incident wants what changed last), oldest first when asked.
	e.goTo(t, ctx, "#/audit?namespace=console&type=counter&id=dave", `tr[data-op="resume"]`)
	e.awaitAuditOps(t, ctx, "resume,put,pause,put")
	run(t, ctx, "ask for oldest first",
		chromedp.SetValue(chromedp.CSS("#f-order"), "oldest"),
		chromedp.Click(chromedp.CSS(`form:has(#f-namespace) button[type=submit]`)))
	waitText(t, ctx, "main .page-head", "oldest first")
	e.awaitAuditOps(t, ctx, "put,pause,put,resume")
}

// awaitAuditOps waits until the audit records the page shows have these
// operations, in this order (comma-separated).
func (e *cnEnv) awaitAuditOps(t *testing.T, ctx context.Context, want string) {
	t.Helper()
	var got string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		ops := evaluate[[]string](t, ctx, "the audit records", `Array.from(document.querySelectorAll('tr[data-op]')).map(r => r.dataset.op)`)
		if got = strings.Join(ops, ","); got == want {
			return
		}
	}
	t.Fatalf("the audit records read %q, want %q", got, want)
}

func (e *cnEnv) testReadOnly(t *testing.T) {
	ctx := e.tab(t)
	e.signIn(t, ctx, cnViewerToken, "viewer")
	run(t, ctx, "the read-only badge", chromedp.WaitVisible(chromedp.CSS("#read-only")))
	e.goTo(t, ctx, "#/browse/console/counter/alice", `tr[data-state="count"]`)
	e.goTo(t, ctx, "#/browse/console/counter/alice/count", `tr[data-commit]`)
	var writeControls []string
	for _, route := range []string{"#/browse/console/counter/alice", "#/browse/console/counter/alice/count", "#/audit?namespace=console&type=counter&id=frank", "#/browse/console/counter", "#/dead-letters"} {
		e.goTo(t, ctx, route, "main h1")
		time.Sleep(300 * time.Millisecond) // the page's reads settle
		labels := evaluate[[]string](t, ctx, "list the buttons", `Array.from(document.querySelectorAll('main button')).map(b => b.textContent.trim())`)
		for _, l := range labels {
			switch l {
			case "Edit", "Set value", "Delete", "Pause", "Resume", "Delete all entries", "Delete address", "Skip", "Cancel", "Revert", "Re-send", "Pause type", "Resume type", "Restore this value", "Restore address to this point":
				writeControls = append(writeControls, route+": "+l)
			}
		}
	}
	if len(writeControls) > 0 {
		t.Fatalf("a read-only token is shown write controls: %v", writeControls)
	}
	e.checkA11y(t, ctx, "read-only")
	// A write forced from the page (same origin, the viewer's token) is
	// refused by the server.
	status := evaluate[int](t, ctx, "force a write", `fetch('/state/console/counter/alice/count', {method: 'PUT', headers: {'Authorization': 'Bearer ' + sessionStorage.getItem('statefun.token'), 'Content-Type': 'text/plain'}, body: '0'}).then(r => r.status)`)
	if status != http.StatusForbidden {
		t.Fatalf("a forced write with the read-only token: %d, want 403", status)
	}
	if c := e.count(t, "alice"); c != "3" {
		t.Fatalf("alice's count is %s after the refused write", c)
	}
}

// testPhone: the overview and an address read on a phone-sized screen
// without horizontal scrolling of the page itself.
func (e *cnEnv) testPhone(t *testing.T) {
	ctx := e.tab(t)
	run(t, ctx, "phone size", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2)))
	e.signIn(t, ctx, cnOperatorToken, "operator")
	e.goTo(t, ctx, "#/browse/console/counter/alice", `tr[data-state="count"]`)
	overflow := evaluate[bool](t, ctx, "measure", `document.documentElement.scrollWidth > window.innerWidth + 1`)
	if overflow {
		wide := evaluate[[]string](t, ctx, "what is wide", `Array.from(document.querySelectorAll('body *')).filter(e => e.getBoundingClientRect().right > window.innerWidth + 1).slice(0, 8).map(e => e.tagName + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right))`)
		t.Errorf("the address page scrolls sideways at 390px: %v", wide)
	}
	e.shoot(t, ctx, "phone")
	e.checkA11y(t, ctx, "phone")
}

// cnBrowser starts the headless Chromium the console tests drive, at the
// console's window size, closed when the test ends.
func cnBrowser(t *testing.T, chromium string) context.Context {
	return startChromium(t, chromium, chromedp.WindowSize(1366, 900))
}
