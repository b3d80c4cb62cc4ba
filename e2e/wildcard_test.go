package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/statefun-go/statefun/internal/sdktest"
)

// A namespace wildcard endpoint serves any type name, so the ingress could
// be made to take in new function types without end: each with its own
// metric series, bulkhead and retries. The real binary, the official Go
// SDK's counter behind "sdktest/*", --max-wildcard-types 5: the counter
// and four new types are taken in, the sixth type onwards is refused with
// 422 naming the limit; the function series stay within the five types;
// each new type the SDK answers "unknown function type" for is reported
// once at WARN while its messages are retried, not at ERROR per address
// and attempt. After a restart with a bound of 1, the counter, which holds
// state, is still served, and a new type is refused.
func TestWildcardTypesAreBounded(t *testing.T) {
	fn := httptest.NewServer(sdktest.CounterHandler())
	t.Cleanup(fn.Close)
	rt := newRuntime(t, fn.URL, []string{"sdktest"}, []string{sdktest.DefaultTopic})
	saStart(rt, "http", http.DefaultClient, "--max-wildcard-types", "5")

	send := func(path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPut, rt.ingress+"/"+path, strings.NewReader("x"))
		req.Header.Set("Content-Type", "application/octet-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if st, body := send(sdktest.CounterFn + "/a"); st != http.StatusOK {
		t.Fatalf("the counter: %d %s", st, body)
	}
	for i := 1; i <= 10; i++ {
		for _, id := range []string{"x", "y"} {
			st, body := send(fmt.Sprintf("sdktest/t%d/%s", i, id))
			switch {
			case i <= 4 && st != http.StatusOK:
				t.Fatalf("new type %d of 4 the bound leaves: %d %s", i, st, body)
			case i > 4 && (st != http.StatusUnprocessableEntity || !strings.Contains(body, "--max-wildcard-types") || !strings.Contains(body, fmt.Sprintf("sdktest/t%d", i))):
				t.Fatalf("type %d, past the bound: %d %s; want 422 naming the type and the flag", i, st, body)
			}
		}
	}
	if st, body := send(sdktest.CounterFn + "/b"); st != http.StatusOK {
		t.Fatalf("the counter after the bound was reached: %d %s", st, body)
	}

	// The SDK does not know t1..t4: their messages fail and are retried.
	// Five attempts of each of its two addresses: past the third, a
	// failing address is reported at ERROR.
	eventually(t, 30*time.Second, "five failed attempts of each address of the unknown types", func() bool {
		for i := 1; i <= 4; i++ {
			if metric(t, rt, fmt.Sprintf(`statefun_invocations_total{function="sdktest/t%d",outcome="error"}`, i)) < 10 {
				return false
			}
		}
		return true
	})
	if got := functionLabels(t, rt); len(got) > 5 {
		t.Errorf("metric series for %d function types, want at most 5: %v", len(got), got)
	}
	logs := rt.logs()
	for i := 1; i <= 4; i++ {
		typ := fmt.Sprintf("sdktest/t%d", i)
		var warned, errors int
		for _, line := range strings.Split(logs, "\n") {
			if !strings.Contains(line, "function="+typ+" ") {
				continue
			}
			if strings.Contains(line, "does not know this function type") && strings.Contains(line, "level=WARN") {
				warned++
			}
			if strings.Contains(line, "level=ERROR") {
				errors++
			}
		}
		if warned != 1 || errors != 0 {
			t.Errorf("%s: %d WARN lines saying the function does not know it, %d ERROR lines; want one WARN and no ERROR", typ, warned, errors)
		}
	}

	if err := rt.stop(); err != nil {
		t.Fatal(err)
	}
	saStart(rt, "http", http.DefaultClient, "--max-wildcard-types", "1")
	if st, body := send(sdktest.CounterFn + "/c"); st != http.StatusOK {
		t.Fatalf("after a restart with a bound of 1, the counter (it holds state): %d %s", st, body)
	}
	if st, body := send("sdktest/fresh/x"); st != http.StatusUnprocessableEntity {
		t.Fatalf("after a restart with a bound of 1, a new type: %d %s; want 422", st, body)
	}
}

// functionLabels returns the distinct function label values of the
// runtime's metrics.
func functionLabels(t *testing.T, rt *runtime) map[string]bool {
	t.Helper()
	resp, err := http.Get("http://" + rt.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		_, rest, ok := strings.Cut(sc.Text(), `function="`)
		if !ok {
			continue
		}
		if v, _, ok := strings.Cut(rest, `"`); ok {
			out[v] = true
		}
	}
	return out
}
