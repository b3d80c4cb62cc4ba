package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/chromedp"

	"github.com/statefun-go/statefun/internal/sdktest"
)

// TestPlaygroundFromBrowser drives a real headless Chromium at the
// playground ingress and egress (docs/reference/ingress.md, docs/reference/egress.md,
// "Browsers"), as a malicious web page would while its visitor runs the
// runtime on the same machine:
//
//   - a page on another site (http://127.0.0.2:…) and a page on the same
//     site but another origin (http://127.0.0.1:<other port>) try to pop
//     egress records with <img src>, <iframe src> and a no-cors fetch, to
//     acknowledge them with a no-cors POST, and to inject messages with a
//     text/plain form POST and no-cors fetches;
//   - a DNS-rebinding page: a name of the attacker's (rebind.test) that
//     resolves to the runtime's listeners, so that the page's requests
//     are same-origin and could read what they get; only their Host
//     header gives them away.
//
// None of it pops, acknowledges, reads or injects anything; the documented
// curl commands, a Go client and the browser's own address bar work.
func TestPlaygroundFromBrowser(t *testing.T) {
	chromium := cnChromium(t)
	cs := sdktest.StartCounterServer(t)
	rt := newRuntime(t, cs.URL, []string{"sdktest"}, []string{sdktest.CounterTopic})
	rt.start()
	ingressPort, egressPort := portOf(t, rt.ingress), portOf(t, rt.egress)
	topic := "/" + sdktest.CounterTopic
	counter := "/" + sdktest.CounterFn

	// Three records wait in the egress: seed:1, seed:2, seed:3, sent as a
	// Go client sends (no Origin, no Sec-Fetch-*).
	for range 3 {
		if status, err := rt.send(counter+"/seed", "sdktest/Tick", "x"); err != nil || status != http.StatusOK {
			t.Fatalf("seed message: %d %v", status, err)
		}
	}
	waitRecords(t, rt, 3)

	// The attacker's pages. Each reports to its server (GET /done) once
	// every request it made has been answered (or refused by the
	// browser).
	attack := func(ingress, egress string) string {
		return fmt.Sprintf(`<!doctype html><title>cute cats</title>
<iframe name="sink" id="sink"></iframe>
<form id="f" method="POST" enctype="text/plain" target="sink" action="%[1]s/sdktest/counter/victim"><input name='{"name":"' value='"}'></form>
<form id="g" method="POST" target="sink" action="%[1]s/sdktest/counter/victim"><input name="a" value="b"></form>
<script>
const pending = [];
window.log = [];
const settle = (p) => { const i = pending.length; window.log[i] = 'pending'; pending.push(p.then(() => { window.log[i] = 'ok'; }, (e) => { window.log[i] = 'error ' + e; })); };
for (let i = 0; i < 3; i++) settle(new Promise((resolve) => { const img = new Image(); img.onload = img.onerror = resolve; img.src = '%[2]s%[3]s'; }));
settle(new Promise((resolve) => { const f = document.createElement('iframe'); f.onload = resolve; f.src = '%[2]s%[3]s'; document.body.appendChild(f); }));
settle(fetch('%[2]s%[3]s', {mode: 'no-cors', cache: 'no-store'}));
settle(fetch('%[2]s%[3]s?ack=3', {method: 'POST', mode: 'no-cors'}));
settle(fetch('%[1]s/sdktest/counter/victim', {method: 'POST', mode: 'no-cors', body: 'text'}));
settle(fetch('%[1]s/sdktest/counter/victim', {method: 'POST', mode: 'no-cors', body: new Blob(['blob'])}));
settle(fetch('%[1]s/sdktest/counter/victim', {method: 'POST', mode: 'no-cors', body: new Blob(['typed'], {type: 'application/vnd.sdktest/Tick'})}));
settle(fetch('%[1]s/sdktest/counter/victim', {method: 'POST', mode: 'no-cors', body: new URLSearchParams('a=b')}));
settle(new Promise((resolve) => { const s = document.getElementById('sink'); s.onload = resolve; document.getElementById('f').submit(); }));
Promise.all(pending).then(() => new Promise((resolve) => {
  const s = document.getElementById('sink'); s.onload = resolve; document.getElementById('g').submit();
})).finally(() => { new Image().src = '/done?log=' + encodeURIComponent(JSON.stringify(window.log)); });
</script>`, ingress, egress, topic)
	}
	ingress, egress := "http://127.0.0.1:"+ingressPort, "http://127.0.0.1:"+egressPort
	otherSite := serveAttack(t, "127.0.0.2:0", attack(ingress, egress))
	sameSite := serveAttack(t, "127.0.0.1:0", attack(ingress, egress))

	// rebind.test resolves to 127.0.0.1. Chromium's Local Network Access
	// checks would stop the rebinding page (not a loopback page) before
	// its requests reach the listener; they are off, as in browsers that
	// have no such checks, so that the listener's own guard is tested.
	browser := startChromium(t, chromium, chromedp.Flag("host-resolver-rules", "MAP rebind.test 127.0.0.1"),
		chromedp.Flag("disable-features", "LocalNetworkAccessChecks,BlockInsecurePrivateNetworkRequests,PrivateNetworkAccessRespectPreflightResults"))
	for _, page := range []*attackPage{otherSite, sameSite} {
		ctx := tabOf(t, browser)
		run(t, ctx, "the attacker's page "+page.url, chromedp.Navigate(page.url))
		select {
		case log := <-page.done:
			t.Logf("the attacker's page %s: %s", page.url, log)
		case <-time.After(30 * time.Second):
			t.Fatalf("the attacker's page %s did not settle", page.url)
		}
	}

	// DNS rebinding: the attacker's page at http://rebind.test:<port>/
	// (served by the attacker, here through the DevTools Fetch domain);
	// rebind.test then resolves to 127.0.0.1, and the page's same-origin
	// requests reach the listener on that port with Host rebind.test.
	rebind := func(port, script string) string {
		ctx := tabOf(t, browser)
		page := "http://rebind.test:" + port + "/cats.html"
		if err := chromedp.Listen(ctx, func(ev any) {
			if ev, ok := ev.(*fetch.EventRequestPaused); ok {
				go chromedp.Call(ctx, fetch.FulfillRequest, fetch.FulfillRequestParams{RequestID: ev.RequestID, ResponseCode: 200,
					ResponseHeaders: []*fetch.HeaderEntry{{Name: "Content-Type", Value: "text/html"}},
					Body:            []byte("<!doctype html><title>cute cats</title>")})
			}
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := chromedp.Call(ctx, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: page}}}); err != nil {
			t.Fatal(err)
		}
		run(t, ctx, "the rebinding page", chromedp.Navigate(page))
		if _, err := chromedp.Call(ctx, fetch.Disable, cdp.Empty{}); err != nil {
			t.Fatal(err)
		}
		return evaluate[string](t, ctx, "the rebinding page's request", script)
	}
	read := `fetch('%s', %s).then(async (r) => r.status + ' ' + await r.text(), (e) => 'error ' + e)`
	if got := rebind(egressPort, fmt.Sprintf(read, topic, `{cache: 'no-store'}`)); !strings.HasPrefix(got, "421 ") || strings.Contains(got, "seed:") {
		t.Errorf("a DNS-rebinding page popping %s got %q; want a 421 naming the Host", topic, got)
	}
	if got := rebind(egressPort, fmt.Sprintf(read, topic+"?after=0", `{cache: 'no-store'}`)); !strings.HasPrefix(got, "421 ") || strings.Contains(got, "seed:") {
		t.Errorf("a DNS-rebinding page reading %s got %q; want a 421 naming the Host", topic, got)
	}
	if got := rebind(ingressPort, fmt.Sprintf(read, counter+"/victim", `{method: 'PUT', headers: {'Content-Type': 'application/vnd.sdktest/Tick'}, body: 'x'}`)); !strings.HasPrefix(got, "421 ") {
		t.Errorf("a DNS-rebinding page sending to the ingress got %q; want a 421 naming the Host", got)
	}

	// Nothing was popped or acknowledged: the three records are still
	// there, in order. Nothing was injected: the victim's first message
	// is the one sent now, so its count is 1.
	if status, err := rt.send(counter+"/victim", "sdktest/Tick", "x"); err != nil || status != http.StatusOK {
		t.Fatalf("a Go client's message: %d %v", status, err)
	}
	if got, want := waitRecords(t, rt, 4), []string{"seed:1", "seed:2", "seed:3", "victim:1"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("after the attacks the egress holds %q, want %q: a page popped, acknowledged or injected", got, want)
	}

	// The documented curl commands work (docs/reference/ingress.md, README.md).
	curl := func(args ...string) string {
		out, err := exec.Command("curl", append([]string{"-sS", "-w", " %{http_code}"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("curl %q: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if got := curl("-X", "PUT", "-H", "Content-Type: application/vnd.sdktest/Tick", "-d", `{"name": "Bob"}`, "localhost:"+ingressPort+counter+"/victim"); got != " 200" {
		t.Errorf("curl -X PUT to the ingress: %q", got)
	}
	if got := curl("-X", "GET", "localhost:"+egressPort+topic); got != "seed:1 200" {
		t.Errorf("curl -X GET on the egress: %q, want seed:1 200", got)
	}
	// So does a person typing the egress's URL into the address bar.
	ctx := tabOf(t, browser)
	run(t, ctx, "open the egress", chromedp.Navigate(egress+topic))
	if got := evaluate[string](t, ctx, "the popped record", `document.body.innerText`); got != "seed:2" {
		t.Errorf("the address bar popped %q, want seed:2", got)
	}
	if got := waitRecords(t, rt, 3); strings.Join(got, " ") != "seed:3 victim:1 victim:2" {
		t.Errorf("after curl and the address bar the egress holds %q, want seed:3 victim:1 victim:2", got)
	}
}

// waitRecords reads the records of the counter topic without removing
// them until there are want, and returns their payloads.
func waitRecords(t *testing.T, rt *runtime, want int) []string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var got []string
		for after := "0"; ; {
			status, pos, body := rt.egressDo(http.MethodGet, "/"+sdktest.CounterTopic+"?after="+after)
			if status == http.StatusNotFound {
				break
			}
			if status != http.StatusOK {
				t.Fatalf("read the egress after %s: %d %s", after, status, body)
			}
			got, after = append(got, body), pos
		}
		if len(got) >= want || time.Now().After(deadline) {
			return got
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// portOf is the port of a URL.
func portOf(t *testing.T, raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Port()
}

// attackPage is an attacker's web page: its URL, and what it reports
// (GET /done?log=...) once every request it made has settled.
type attackPage struct {
	url  string
	done chan string
}

// serveAttack serves page at / on addr.
func serveAttack(t *testing.T, addr, page string) *attackPage {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the attacker's listener on %s: %v", addr, err)
	}
	p := &attackPage{url: "http://" + ln.Addr().String() + "/", done: make(chan string, 1)}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/done" {
			select {
			case p.done <- r.URL.Query().Get("log"):
			default:
			}
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, page)
	}), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return p
}

// startChromium starts a headless Chromium for the test, with extra
// command-line flags.
func startChromium(t *testing.T, chromium string, extra ...chromedp.ExecAllocatorOption) context.Context {
	opts := append([]chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
	}, extra...)
	alloc, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	browser, cancelBrowser := chromedp.NewContext(alloc)
	t.Cleanup(cancelBrowser)
	if err := chromedp.Do(browser); err != nil {
		t.Fatalf("starting %s: %v", chromium, err)
	}
	return browser
}

// tabOf opens a tab of browser that closes when t ends.
func tabOf(t *testing.T, browser context.Context) context.Context {
	ctx, cancel := chromedp.NewContext(browser)
	t.Cleanup(cancel)
	// Listening first opens the tab; a tab that a Navigate opens leaves
	// chromedp waiting for an execution context that never comes.
	if err := chromedp.Listen(ctx, func(any) {}); err != nil {
		t.Fatalf("open a tab: %v", err)
	}
	return ctx
}
