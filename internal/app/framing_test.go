package app

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// pipeline writes raw HTTP/1.x requests on one new connection in a single
// write, as a proxy in front would forward them, and returns the status
// lines of the answers the server sent and whether it closed the
// connection after them (within a few seconds: a connection kept open
// waits for the idle timeout).
func pipeline(t *testing.T, addr string, requests ...string) (statuses []string, closed bool) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, strings.Join(requests, "")); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	br := bufio.NewReader(c)
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			var ne net.Error
			return statuses, !(errors.As(err, &ne) && ne.Timeout())
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		statuses = append(statuses, resp.Status)
	}
}

// smuggle is a request with both Content-Length and Transfer-Encoding: a
// proxy in front that goes by Content-Length would take the 5 bytes of
// the chunked body's start for the whole body and what follows for a
// request of its own, or the other way round.
func smuggle(method, target, host string) string {
	return fmt.Sprintf("%s %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/vnd.test/ping\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n", method, target, host)
}

// plain is an ordinary request without a body.
func plain(method, target, host string) string {
	return fmt.Sprintf("%s %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/vnd.test/ping\r\nContent-Length: 0\r\n\r\n", method, target, host)
}

// TestAmbiguousFramingClosesTheConnection: after a request with both
// Content-Length and Transfer-Encoding, or an HTTP/1.0 request with
// Transfer-Encoding, every listener (playground ingress and egress, admin
// with the state API) answers it and closes the connection: the request
// pipelined behind it (a message, an egress pop, a state DELETE) is
// never served. Ordinary pipelined requests are all answered.
func TestAmbiguousFramingClosesTheConnection(t *testing.T) {
	a, in, out := startApp(t, t.TempDir(), counterFunctions(t))
	t.Cleanup(func() { a.Close() })
	ingress, egress, admin := strings.TrimPrefix(in, "http://"), strings.TrimPrefix(out, "http://"), a.Addr("admin")
	send(t, in, "/test/counter/seed", "x")
	send(t, in, "/test/counter/seed", "x")
	readWhenThere(t, out, "0")
	if _, p := readWhenThere(t, out, "0"); p != "seed=1" {
		t.Fatalf("the oldest record is %q", p)
	}
	records := func() []string {
		var got []string
		for after := "0"; ; {
			status, pos, body := egressCall(t, http.MethodGet, out+"/out?after="+after)
			if status != http.StatusOK {
				return got
			}
			got, after = append(got, body), pos
		}
	}
	eventually(t, "both seed records", func() bool { return len(records()) == 2 })

	for _, c := range []struct {
		name, addr string
		first      string
	}{
		{"ingress", ingress, smuggle("PUT", "/test/counter/first", ingress)},
		{"ingress, HTTP/1.0", ingress, strings.Replace(smuggle("PUT", "/test/counter/first", ingress), "HTTP/1.1\r\n", "HTTP/1.0\r\nConnection: keep-alive\r\n", 1)},
		{"egress", egress, smuggle("GET", "/out?after=0", egress)},
		{"admin", admin, smuggle("GET", "/healthz", admin)},
	} {
		second := map[string]string{
			ingress: plain("PUT", "/test/counter/smuggled", ingress),
			egress:  plain("GET", "/out", egress),
			admin:   plain("DELETE", "/state/test/counter/seed", admin),
		}[c.addr]
		statuses, closed := pipeline(t, c.addr, c.first, second)
		if len(statuses) != 1 || !closed {
			t.Errorf("%s: answers %q, closed %v; want one answer, then the connection closed", c.name, statuses, closed)
		}
	}

	// Nothing the pipelined requests asked for happened: both records
	// are still there (no pop), the seed's state is there (no DELETE),
	// and the first message to "smuggled" is the one sent now.
	if r, body := call(t, http.MethodGet, "http://"+admin+"/state/test/counter/seed/count", "", ""); r.StatusCode != http.StatusOK {
		t.Errorf("the seed's state after the pipelined DELETE: %s %s", r.Status, body)
	}
	send(t, in, "/test/counter/smuggled", "x")
	eventually(t, "the message sent now", func() bool {
		for _, r := range records() {
			if strings.HasPrefix(r, "smuggled=") {
				return true
			}
		}
		return false
	})
	got := strings.Join(records(), " ")
	if !strings.HasPrefix(got, "seed=1 seed=2 ") || strings.Contains(got, "smuggled=2") {
		t.Errorf("the egress holds %q: a pipelined request ran", got)
	}

	// Pipelining as such still works: both answers, the connection open.
	statuses, closed := pipeline(t, admin, plain("GET", "/healthz", admin), plain("GET", "/healthz", admin))
	if len(statuses) != 2 || closed {
		t.Errorf("two ordinary pipelined requests: answers %q, closed %v; want two answers and the connection kept", statuses, closed)
	}
	// So does a chunked request, on a connection of its own.
	req, _ := http.NewRequest(http.MethodPut, in+"/test/counter/chunked", io.MultiReader(strings.NewReader("x")))
	req.Header.Set("Content-Type", "application/vnd.test/ping")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !resp.Close {
		t.Errorf("a chunked message: %s, Close %v; want 200 and Connection: close", resp.Status, resp.Close)
	}
}
