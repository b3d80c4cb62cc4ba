package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/statefun-go/statefun/internal/sdktest"
)

// A function server that goes away shows once, as its endpoint's state:
// the real binary, the official Go SDK's counter on a port the test stops
// and starts. With the server gone and messages for ten addresses
// retried, GET /endpoints says the endpoint is down, /readyz stays 200
// with a warning line naming it, the log says it once at WARN and the
// addresses' retries are not logged at WARN or ERROR each; with the server
// back, every message is counted and the endpoint is up again.
func TestEndpointDownShowsOnce(t *testing.T) {
	port := freePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	serveFn := func() *http.Server {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: sdktest.CounterHandler()}
		go srv.Serve(ln)
		return srv
	}
	fn := serveFn()
	rt := newRuntime(t, "http://"+addr, []string{"sdktest"}, []string{sdktest.CounterTopic})
	rt.start()
	if st, err := rt.send("/"+sdktest.CounterFn+"/warm", "", "x"); err != nil || st != 200 {
		t.Fatalf("warm-up: %d %v", st, err)
	}
	rt.collect(sdktest.CounterTopic, 1, 20*time.Second)
	fn.Close()

	for i := range 10 {
		if st, err := rt.send(fmt.Sprintf("/%s/id%d", sdktest.CounterFn, i), "", "x"); err != nil || st != 200 {
			t.Fatalf("message %d: %d %v", i, st, err)
		}
	}
	type endpoint struct {
		Functions, URL, LastError string
		Up                        bool
		FailuresInARow            int
	}
	endpoints := func() []endpoint {
		resp, err := http.Get("http://" + rt.admin + "/endpoints")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct{ Endpoints []endpoint }
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		return out.Endpoints
	}
	eventually(t, 30*time.Second, "the endpoint down", func() bool {
		e := endpoints()
		return len(e) == 1 && !e[0].Up
	})
	// Retries go on meanwhile: a few more rounds of every address.
	eventually(t, 30*time.Second, "twenty-five failed calls", func() bool {
		return metric(t, rt, `statefun_invocations_total{function="sdktest/counter",outcome="error"}`) >= 25
	})
	if e := endpoints()[0]; e.Functions != "sdktest/*" || !strings.Contains(e.LastError, "connect") || e.FailuresInARow < 3 {
		t.Errorf("the endpoint: %+v", e)
	}
	resp, err := http.Get("http://" + rt.admin + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "warning: function endpoint for sdktest/* ("+"http://"+addr) {
		t.Errorf("/readyz: %s %q; want 200 with a warning naming the endpoint", resp.Status, body)
	}
	logs := rt.logs()
	if n := strings.Count(logs, "function endpoint down"); n != 1 {
		t.Errorf("%d log lines saying the endpoint is down, want 1", n)
	}
	_, after, _ := strings.Cut(logs, "function endpoint down")
	for _, line := range strings.Split(after, "\n") {
		if strings.Contains(line, "invocation failed") && (strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR")) {
			t.Errorf("an address's retry logged above DEBUG while the endpoint is down: %s", line)
			break
		}
	}

	fn = serveFn()
	t.Cleanup(func() { fn.Close() })
	if got := rt.collect(sdktest.CounterTopic, 10, 60*time.Second); len(got) != 10 {
		t.Fatalf("%d of the 10 messages counted once the server was back", len(got))
	}
	eventually(t, 10*time.Second, "the endpoint up again", func() bool { return endpoints()[0].Up })
	if !strings.Contains(rt.logs(), "function endpoint reachable again") {
		t.Error("no log line saying the endpoint is reachable again")
	}
}
