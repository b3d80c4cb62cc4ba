package bench

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	neturl "net/url"
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/statefun-go/statefun/internal/sdktest"
)

var (
	flagConsoleAddrs = flag.Int("console.addresses", envInt("STATEFUN_BENCH_CONSOLE_ADDRESSES", 100_000), "addresses holding state before the console's first views are measured")
	flagConsoleLoads = flag.Int("console.loads", envInt("STATEFUN_BENCH_CONSOLE_LOADS", 20), "page loads measured per view")
)

// consoleViews are the first views measured: the overview, a type's ids
// and an address, each opened as an operator opens a link or reloads.
var consoleViews = []struct{ name, route string }{
	{"overview", "#/"},
	{"ids", "#/browse/sdktest/counter"},
	{"address", "#/browse/sdktest/counter/user-050000"},
}

// BenchmarkConsoleFirstView measures how long the operator's console
// (docs/how-to/console.md) takes to show its first view against a runtime whose
// store holds -console.addresses addresses of sdktest/counter (100,000):
// the runtime (a child process, as shipped, -load.runtime), the official-SDK
// counter, and headless Chromium (Debian's chromium) driven with chromedp,
// all on this machine.
//
// The fill is its own sub-benchmark: one PUT of the count of each address
// through the state API (ack=applied) from 16 clients. Then, for each view,
// -console.loads loads of the page in one tab that holds the token (as a
// reload or an opened link): from about:blank to the view's URL, and
// rendered-ms is the page's own Performance API mark statefun:rendered —
// set once the first data view is in the document — read through chromedp;
// its startTime counts from the navigation's start, so it includes the
// HTML, the stylesheet and modules (revalidated: the console serves them
// with no-cache and an ETag), GET /whoami and the view's API reads.
// painted-ms is statefun:painted, the first task after the next animation
// frame. api-ms is the slowest API request of the load (Resource Timing),
// the server's share. first-ms is the view's first load, cold-ms the very
// first load of the browser (nothing cached).
//
// Without Chromium on PATH it is skipped.
func BenchmarkConsoleFirstView(b *testing.B) {
	chromium := ""
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			chromium = p
			break
		}
	}
	if chromium == "" {
		b.Skip("bench: the console benchmark needs a headless Chromium on PATH (Debian's chromium package)")
	}
	fn := startCounter(b)
	rt := startRuntime(b, counterModule(b, fn))
	ctx := b.Context()
	mc := &http.Client{Timeout: 10 * time.Second}
	// One message registers the counter's state, so that the fill's
	// text/plain values are typed by it (and the overview has traffic).
	if st, err := roundTrip(mc, mustRequest(ctx, "http://"+rt.ingress+"/"+sdktest.CounterFn+"/user-000000")); err != nil || st != http.StatusOK {
		b.Fatalf("bench: warm-up message: status %d, %v", st, err)
	}
	// Its state appears once the function has answered: the state is then
	// registered.
	entry := "http://" + rt.admin + "/state/" + sdktest.CounterFn + "/user-000000/" + sdktest.CounterState
	for deadline := time.Now().Add(30 * time.Second); ; {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, entry, nil)
		if err != nil {
			b.Fatal(err)
		}
		if st, _ := roundTrip(mc, req); st == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("bench: the counter's state never appeared")
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.Run(fmt.Sprintf("fill/addresses=%d", *flagConsoleAddrs), func(b *testing.B) {
		for range b.N {
			fillAddresses(b, ctx, rt.admin, *flagConsoleAddrs)
		}
	})

	alloc, cancel := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(chromium),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(b.TempDir()),
		chromedp.WindowSize(1366, 900),
	)
	defer cancel()
	tab, cancelTab := chromedp.NewContext(alloc)
	defer cancelTab()
	// Start the browser on tab itself: a browser started by a first action
	// on a context with a deadline would end with that context.
	if err := chromedp.Do(tab); err != nil {
		b.Fatalf("bench: start %s: %v", chromium, err)
	}
	base := "http://" + rt.admin + "/ui/"
	// The runtime has no tokens: the console signs in as anonymous at
	// once. The very first load is the cold one.
	cold := loadView(b, tab, base+"#/")
	b.Logf("bench: the browser's first load of the console (nothing cached): rendered %.0f ms", cold.Rendered)
	for _, v := range consoleViews {
		b.Run("view="+v.name, func(b *testing.B) {
			var loads []viewTiming
			for range b.N {
				loads = loads[:0]
				for range *flagConsoleLoads {
					loads = append(loads, loadView(b, tab, base+v.route))
				}
			}
			q := func(f func(viewTiming) float64, p float64) float64 {
				xs := make([]float64, len(loads))
				for i, l := range loads {
					xs[i] = f(l)
				}
				slices.Sort(xs)
				return xs[min(len(xs)-1, int(p*float64(len(xs))))]
			}
			rendered := func(l viewTiming) float64 { return l.Rendered }
			b.ReportMetric(q(rendered, 0.5), "rendered-p50-ms")
			b.ReportMetric(q(rendered, 0.9), "rendered-p90-ms")
			b.ReportMetric(q(rendered, 1), "rendered-max-ms")
			b.ReportMetric(q(func(l viewTiming) float64 { return l.Painted }, 0.5), "painted-p50-ms")
			b.ReportMetric(q(func(l viewTiming) float64 { return l.API }, 0.5), "api-p50-ms")
			b.ReportMetric(loads[0].Rendered, "first-ms")
			b.ReportMetric(cold.Rendered, "cold-ms")
			slowest := slices.MaxFunc(loads, func(a, b viewTiming) int { return int(a.Rendered - b.Rendered) })
			b.Logf("bench: %s: slowest load %.0f ms: %s", v.name, slowest.Rendered, slowest.Requests)
		})
	}
}

// fillAddresses writes the count of n addresses user-000000… of
// sdktest/counter through the state API, from 16 clients, and reports how
// fast.
func fillAddresses(b *testing.B, ctx context.Context, admin string, n int) {
	api := newLoadClient(16)
	r, err := drive(ctx, n, 16, 10*time.Minute, func(ctx context.Context, i int) (bool, error) {
		u := fmt.Sprintf("http://%s/state/%s/user-%06d/%s?ack=applied", admin, sdktest.CounterFn, i, sdktest.CounterState)
		return putText(ctx, api, u, []byte(strconv.Itoa(i)))
	})
	if err != nil {
		b.Fatal(err)
	}
	if r.ok != n {
		b.Fatalf("bench: the fill wrote %d of %d addresses", r.ok, n)
	}
	b.ReportMetric(r.elapsed.Seconds(), "fill-s")
	b.ReportMetric(r.summary().rate(), "puts/s")
}

// viewTiming is one load of a console view, in milliseconds from the
// navigation's start.
type viewTiming struct {
	Rendered, Painted float64
	// API is the longest API request of the load (fetches outside /ui/).
	API float64
	// Requests lists every request of the load with its start and duration.
	Requests string
}

// loadView opens url in tab as a new document — from the console's
// favicon, a page of the same origin, as a reload or a link followed from
// another page of the runtime would (not a route change inside the page,
// and not a new tab, whose renderer process the browser starts first) —
// and waits for the console's marks.
func loadView(b *testing.B, tab context.Context, url string) viewTiming {
	b.Helper()
	c, cancel := context.WithTimeout(tab, 30*time.Second)
	defer cancel()
	u, err := neturl.Parse(url)
	if err != nil {
		b.Fatal(err)
	}
	blank := u.Scheme + "://" + u.Host + "/ui/favicon.svg"
	if err := chromedp.Do(c, chromedp.Navigate(blank), chromedp.Navigate(url)); err != nil {
		b.Fatalf("bench: open %s: %v", url, err)
	}
	out, err := chromedp.Run(c, chromedp.Evaluate[string](`new Promise((resolve) => {
  const done = () => {
    const r = performance.getEntriesByName('statefun:rendered')[0];
    const p = performance.getEntriesByName('statefun:painted')[0];
    if (!r || !p) return false;
    const res = performance.getEntriesByType('resource');
    const api = res.filter((e) => !new URL(e.name).pathname.startsWith('/ui/'));
    const nav = performance.getEntriesByType('navigation')[0];
    resolve(JSON.stringify({
      html: nav ? nav.responseEnd : 0, dcl: nav ? nav.domContentLoadedEventEnd : 0,
      rendered: r.startTime, painted: p.startTime,
      api: api.reduce((m, e) => Math.max(m, e.duration), 0),
      requests: res.map((e) => new URL(e.name).pathname + new URL(e.name).search + ' @' + e.startTime.toFixed(0) + '+' + e.duration.toFixed(0)).join(', '),
      page: r.detail.page,
    }));
    return true;
  };
  if (!done()) new PerformanceObserver((_, obs) => { if (done()) obs.disconnect(); }).observe({type: 'mark', buffered: true});
})`, chromedp.EvalAwaitPromise))
	if err != nil {
		b.Fatalf("bench: the console's marks on %s: %v", url, err)
	}
	var v struct {
		Rendered, Painted, API, HTML, DCL float64
		Requests, Page                    string
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		b.Fatalf("bench: %s: %v", out, err)
	}
	return viewTiming{Rendered: v.Rendered, Painted: v.Painted, API: v.API,
		Requests: fmt.Sprintf("document @0+%.0f, modules run at %.0f; %s", v.HTML, v.DCL, v.Requests)}
}
