package app

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// playgroundCall sends one request to a playground listener with the Host
// header host ("" keeps the URL's) and the header pairs hdr.
func playgroundCall(t *testing.T, method, url, host string, hdr ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader("x"))
	if host != "" {
		req.Host = host
	}
	req.Header.Set("Content-Type", "application/vnd.test/ping")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestPlaygroundListenersRefuseBrowsers: by default the playground ingress
// and egress bind to the loopback interface and answer loopback Host names
// and the configured ones only (421 otherwise, naming the flag); a request
// from another origin is a 403 whatever its method; neither reaches the
// ingress or pops the egress. A client that is no browser gets through.
func TestPlaygroundListenersRefuseBrowsers(t *testing.T) {
	a, in, out := startAppWith(t, t.TempDir(), counterFunctions(t), func(c *Config) {
		c.ListenHost = ""
		c.PlaygroundAllowedHosts = []string{"statefun.internal"}
	})
	t.Cleanup(func() { a.Close() })
	for _, l := range []string{"ingress0", "egress0"} {
		if addr := a.Addr(l); !strings.HasPrefix(addr, "127.0.0.1:") {
			t.Errorf("%s is bound to %s by default, want the loopback interface", l, addr)
		}
	}
	send(t, in, "/test/counter/seed", "x")
	readWhenThere(t, out, "0")
	for _, c := range []struct {
		method, url, host string
		hdr               []string
		want              int
		names             string
	}{
		{"PUT", in + "/test/counter/victim", "evil.example:8090", nil, 421, "--playground-allowed-hosts"},
		{"GET", out + "/out", "evil.example", nil, 421, "--playground-allowed-hosts"},
		{"GET", out + "/out?after=0", "evil.example", nil, 421, "Host"},
		{"POST", in + "/test/counter/victim", "", []string{"Origin", "http://evil.example", "Sec-Fetch-Site", "cross-site"}, 403, "--playground-allowed-origins"},
		{"GET", out + "/out", "", []string{"Sec-Fetch-Site", "cross-site", "Sec-Fetch-Dest", "image"}, 403, "Sec-Fetch-Site"},
		{"GET", out + "/out", "", []string{"Sec-Fetch-Site", "same-site", "Sec-Fetch-Dest", "iframe"}, 403, "Sec-Fetch-Site"},
		{"POST", out + "/out?ack=1000", "", []string{"Origin", "http://localhost:3000"}, 403, "Origin"},
		{"GET", out + "/out?after=0", "statefun.internal:9", nil, 200, ""},
	} {
		status, body := playgroundCall(t, c.method, c.url, c.host, c.hdr...)
		if status != c.want || !strings.Contains(body, c.names) {
			t.Errorf("%s %s (Host %q, %q): %d %s, want %d naming %s", c.method, c.url, c.host, c.hdr, status, body, c.want, c.names)
		}
	}
	// Nothing was popped, acknowledged or sent: the seed's record is the
	// oldest, and the victim's first message is the one sent now.
	if _, p := readWhenThere(t, out, "0"); p != "seed=1" {
		t.Errorf("the oldest record is %q, want seed=1", p)
	}
	if status, body := playgroundCall(t, "PUT", in+"/test/counter/victim", "statefun.internal"); status != 200 {
		t.Fatalf("a message under an allowed Host: %d %s", status, body)
	}
	if got := poll(t, out, 2); strings.Join(got, " ") != "seed=1 victim=1" {
		t.Errorf("popped %q, want seed=1 victim=1", got)
	}
}

// Start refuses a malformed allowed host or origin, naming the flag.
func TestPlaygroundGuardValidated(t *testing.T) {
	_, err := Start(Config{ModulePath: "unused.yaml", DataDir: t.TempDir(), PlaygroundAllowedOrigins: []string{"evil.example"}})
	if err == nil || !strings.Contains(err.Error(), `allowed origin "evil.example" in --playground-allowed-origins`) {
		t.Fatalf("Start: %v", err)
	}
}
