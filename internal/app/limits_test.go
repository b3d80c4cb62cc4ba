package app

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/statefun-go/statefun/internal/connlimit"
	"github.com/statefun-go/statefun/internal/sdktest"
	"github.com/statefun-go/statefun/internal/stateapi"
)

func TestMain(m *testing.M) {
	log.SetOutput(io.Discard) // the official SDK logs every registration
	os.Exit(m.Run())
}

// startLimited runs the sdktest functions (official Go SDK, real HTTP)
// behind a runtime with the given listener limits. It returns the app and
// the function server.
func startLimited(t *testing.T, lim ListenerLimits, api stateapi.Options) (*App, *sdktest.FeatureServer) {
	t.Helper()
	srv := sdktest.StartFeatureServer(t)
	dir := t.TempDir()
	in, out := freePort(t), freePort(t)
	mod := fmt.Sprintf(`kind: io.statefun.endpoints.v2/http
spec:
  functions: sdktest/*
  urlPathTemplate: %s
---
kind: io.statefun.playground.v1/ingress
spec:
  port: %d
---
kind: io.statefun.playground.v1/egress
spec:
  port: %d
  topics: [sdktest]
`, srv.URL, in, out)
	path := filepath.Join(dir, "module.yaml")
	if err := os.WriteFile(path, []byte(mod), 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := Start(Config{ModulePath: path, DataDir: filepath.Join(dir, "data"), AdminAddr: "127.0.0.1:0",
		ListenHost: "127.0.0.1", Partitions: 2, Listeners: lim, API: api,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a, srv
}

// dial opens a raw connection that sends nothing.
func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedByServer reports whether the server closed c (a read ends with EOF
// or a reset) before the failsafe deadline; it consumes what c sends.
func closedByServer(t *testing.T, c net.Conn) bool {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	return true
}

// eventually polls cond, which reads state that gives no signal (accepting
// is asynchronous; /metrics is what an operator sees), and fails the test
// if it never holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
	}
}

// metric returns the value of one series on /metrics ("" when absent).
func metric(t *testing.T, a *App, series string) string {
	t.Helper()
	_, body := call(t, "GET", "http://"+a.Addr("admin")+"/metrics", "", "")
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}

// ingressPut sends one command to sdktest/features/<id> through the
// ingress.
func ingressPut(addr, id string) (*http.Response, error) {
	req, _ := http.NewRequest(http.MethodPut, "http://"+addr+"/sdktest/features/"+id,
		strings.NewReader(`{"op":"incr"}`))
	req.Header.Set("Content-Type", "application/vnd."+sdktest.CommandType)
	return http.DefaultClient.Do(req)
}

// The defect: no listener had a connection cap, so idle connections used
// up the file descriptors and then every listener and every function call
// failed. Now a listener full of idle connections answers further
// connections 503 with Retry-After, closes the ones beyond its overflow
// room, and the other listeners and the calls to functions go on.
func TestConnectionCapKeepsOtherListenersAndFunctionsWorking(t *testing.T) {
	const maxConns = 4
	a, srv := startLimited(t, ListenerLimits{MaxConns: maxConns}, stateapi.Options{})
	egress := a.Addr("egress0")

	// Fill the egress listener with connections that never send a request.
	for range maxConns {
		dial(t, egress)
	}
	served := `statefun_listener_connections_total{listener="egress0",outcome="served"}`
	eventually(t, "the idle connections are served", func() bool { return metric(t, a, served) == fmt.Sprint(maxConns) })

	// The next client is told to come back later.
	resp, err := http.Get("http://" + egress + "/sdktest")
	if err != nil {
		t.Fatalf("a client over the cap got no answer: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" ||
		!strings.Contains(string(body), "too many connections") {
		t.Fatalf("over the cap: %s Retry-After %q %q, want 503 with Retry-After 1", resp.Status, resp.Header.Get("Retry-After"), body)
	}

	// Far more connections than the cap and its overflow room: those beyond
	// the room are closed at once.
	extra := make([]net.Conn, 10*maxConns)
	for i := range extra {
		extra[i] = dial(t, egress)
	}
	// Each was either given the overflow room (and will be answered 503)
	// or closed at once; the operator sees both on /metrics.
	room := connlimit.DefaultOverflow(maxConns)
	count := func(outcome string) int {
		var n int
		fmt.Sscan(metric(t, a, `statefun_listener_connections_total{listener="egress0",outcome="`+outcome+`"}`), &n)
		return n
	}
	eventually(t, "every connection over the cap is accounted for", func() bool {
		return count("answered_503")+count("closed") >= 1+len(extra)
	})
	if closed := count("closed"); closed < len(extra)-room {
		t.Errorf("%d of %d connections beyond the cap were closed at once, want at least %d", closed, len(extra), len(extra)-room)
	}
	if n := count("served"); n != maxConns {
		t.Errorf("%d connections served, want the cap %d", n, maxConns)
	}
	for _, c := range extra {
		if !closedByServer(t, c) {
			t.Error("a connection beyond the cap was left open")
		}
	}

	// Another listener still serves, and a function is still invoked.
	if resp, body := call(t, "GET", "http://"+a.Addr("admin")+"/healthz", "", ""); resp.StatusCode != 200 {
		t.Fatalf("admin /healthz while egress is full: %s %s", resp.Status, body)
	}
	h := srv.Hold(sdktest.FeaturesFn, "during")
	resp, err = ingressPut(a.Addr("ingress0"), "during")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("ingress while egress is full: %v %v", resp, err)
	}
	resp.Body.Close()
	<-h.Arrived() // the function was called
	h.Release()
}

// At the cap, the connection idle longest between two requests is closed
// to make room for a new client, which is served.
func TestConnectionCapClosesIdleKeepAliveFirst(t *testing.T) {
	a, _ := startLimited(t, ListenerLimits{MaxConns: 2}, stateapi.Options{})
	admin := a.Addr("admin")
	var idle []net.Conn
	for range 2 {
		c := dial(t, admin)
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("keep-alive request: %v %v", resp, err)
		}
		resp.Body.Close()
		idle = append(idle, c)
	}
	// Both connections are served and idle now (the server marks them idle
	// right after answering, before this client can act; the request below
	// waits for that through its own retries if need be).
	resp, err := http.Get("http://" + admin + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("a new client at the cap: %v %v, want 200 after closing an idle connection", resp, err)
	}
	resp.Body.Close()
	closed := 0
	for _, c := range idle {
		c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); err == io.EOF {
			closed++
		}
	}
	if closed != 1 {
		t.Errorf("%d idle connections were closed to make room, want 1", closed)
	}
}

// The defect: no listener had an idle timeout, so keep-alive connections
// stayed open forever. Slowloris (a request head never finished) is cut by
// ReadHeaderTimeout, on every listener.
func TestIdleAndSlowConnectionsAreClosed(t *testing.T) {
	a, _ := startLimited(t, ListenerLimits{IdleTimeout: 100 * time.Millisecond, ReadHeaderTimeout: 100 * time.Millisecond}, stateapi.Options{})
	for _, name := range []string{"admin", "ingress0", "egress0"} {
		t.Run(name, func(t *testing.T) {
			c := dial(t, a.Addr(name))
			fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if !closedByServer(t, c) {
				t.Error("an idle keep-alive connection was not closed after IdleTimeout")
			}

			slow := dial(t, a.Addr(name))
			fmt.Fprintf(slow, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ") // never finished
			if !closedByServer(t, slow) {
				t.Error("a request head never finished was not cut by ReadHeaderTimeout")
			}
		})
	}
}

// A state API long-poll outlasts the write timeout of the other listeners:
// the admin listener's write timeout is raised to the longest ?wait=.
func TestWriteTimeoutDoesNotCutLongPoll(t *testing.T) {
	a, _ := startLimited(t, ListenerLimits{WriteTimeout: 50 * time.Millisecond},
		stateapi.Options{MaxWait: 500 * time.Millisecond})
	start := time.Now()
	resp, err := http.Get("http://" + a.Addr("admin") + "/mutations/m-unknown?wait=500ms")
	if err != nil {
		t.Fatalf("long-poll cut: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || time.Since(start) < 500*time.Millisecond {
		t.Fatalf("long-poll answered %s after %v, want 404 after the whole wait", resp.Status, time.Since(start))
	}
}

// Headers beyond MaxHeaderBytes are refused with 431.
func TestHeaderCap(t *testing.T) {
	a, _ := startLimited(t, ListenerLimits{MaxHeaderBytes: 1 << 10}, stateapi.Options{})
	req, _ := http.NewRequest("GET", "http://"+a.Addr("ingress0")+"/x", nil)
	req.Header.Set("X-Big", strings.Repeat("a", 8<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("8 KiB header: %s, want 431", resp.Status)
	}
}
