package e2e

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/statefun-go/statefun/internal/sdktest"
)

// TestRealFileLimit runs the runtime under a real, low RLIMIT_NOFILE
// (prlimit) and fills every listener beyond its cap with connections that
// never send a request. The default caps are derived from that limit
// (internal/connlimit), so the runtime never runs out of descriptors: it
// refuses the connections over the caps, a function call held across the
// flood still completes (an outbound connection, a descriptor), nothing
// logs "too many open files", and once the flood ends every message sent
// is processed once.
func TestRealFileLimit(t *testing.T) {
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Fatalf("prlimit (util-linux) is needed: %v", err)
	}
	const nofile = 2048
	fs := sdktest.StartFeatureServer(t)
	rt := newRuntimeWith(t, func(in, out int) string {
		var b strings.Builder
		fmt.Fprintf(&b, "kind: io.statefun.endpoints.v2/http\nspec:\n  functions: sdktest/*\n  urlPathTemplate: %s\n  transport:\n    type: io.statefun.transports.v1/async\n    pool_size: 64\n---\n", fs.URL)
		fmt.Fprintf(&b, "kind: io.statefun.playground.v1/ingress\nspec:\n  port: %d\n---\n", in)
		fmt.Fprintf(&b, "kind: io.statefun.playground.v1/egress\nspec:\n  port: %d\n  topics: [%s]\n", out, strings.Join(featureTopics, ", "))
		return b.String()
	})
	rt.wrap = []string{prlimit, fmt.Sprintf("--nofile=%d:%d", nofile, nofile)}
	rt.start()
	reports := &reportReader{rt: rt, topic: sdktest.DefaultTopic}
	command(t, rt, sdktest.FeaturesFn, "warm", report("warm"))
	reports.wait(t, "warm", 1, 20*time.Second)

	// A call held at the function across the flood; its answer sends a
	// message that reports.
	hold := fs.Hold(sdktest.FeaturesFn, "held")
	defer hold.Release()
	command(t, rt, sdktest.FeaturesFn, "held", sdktest.Command{Op: sdktest.OpSend,
		To: &sdktest.Target{Fn: sdktest.StatelessFn, ID: "held"}, Command: &sdktest.Command{Op: sdktest.OpReport, Tag: "held"}})
	<-hold.Arrived()

	// 2048 descriptors less the reserve and the pool leave each of the
	// three listeners about 230 connections and its overflow room; open
	// more than that on every one, and more than the limit in all.
	const perListener = 800
	var flood []net.Conn
	defer func() {
		for _, c := range flood {
			c.Close()
		}
	}()
	refused := 0
	for _, addr := range []string{rt.ingress, rt.egress, "http://" + rt.admin} {
		for range perListener {
			c, err := net.DialTimeout("tcp", strings.TrimPrefix(addr, "http://"), 5*time.Second)
			if err != nil {
				refused++
				continue
			}
			flood = append(flood, c)
		}
	}
	// Connections over a cap are closed by the runtime: count those that
	// were, on each listener, after a moment.
	time.Sleep(500 * time.Millisecond)
	closed := 0
	for _, c := range flood {
		c.SetReadDeadline(time.Now().Add(time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			closed++
		}
	}
	if refused+closed == 0 {
		t.Errorf("%d connections to three listeners under RLIMIT_NOFILE %d: none refused or closed", len(flood), nofile)
	}
	hold.Release()
	select {
	case <-rt.exited:
		t.Fatalf("the runtime exited during the flood:\n%s", rt.logs())
	case <-time.After(time.Second):
	}
	held := len(flood)
	for _, c := range flood {
		c.Close()
	}
	flood = nil

	eventually(t, 20*time.Second, "the admin listener answers again", func() bool {
		resp, err := http.Get("http://" + rt.admin + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	reports.wait(t, "held", 1, 20*time.Second)
	const after = 50
	for i := range after {
		command(t, rt, sdktest.FeaturesFn, fmt.Sprintf("after-%d", i), report("after"))
	}
	reports.wait(t, "after", after, 30*time.Second)
	reports.settle(t, 300*time.Millisecond)
	if n := len(reports.tagged("after")); n != after {
		t.Errorf("%d reports after the flood; want %d", n, after)
	}
	if n := len(reports.tagged("held")); n != 1 {
		t.Errorf("the held call reported %d times; want 1", n)
	}
	if strings.Contains(strings.ToLower(rt.logs()), "too many open files") {
		t.Errorf("the runtime ran out of file descriptors:\n%s", rt.logs())
	}
	t.Logf("%d connections opened, %d refused at connect, %d of them closed by the runtime", held, refused, closed)
}
