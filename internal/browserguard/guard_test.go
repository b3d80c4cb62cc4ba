package browserguard

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// serve starts a guarded listener whose handler counts the requests that
// got through.
func serve(t *testing.T, opts Options) (string, *int) {
	t.Helper()
	var reached int
	srv := httptest.NewServer(New(opts).Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached++
		io.WriteString(w, "reached")
	})))
	t.Cleanup(srv.Close)
	return srv.URL, &reached
}

// do sends one request with the Host header host ("" keeps the URL's)
// and the header pairs hdr, and returns the status and body.
func do(t *testing.T, base, method, host string, hdr ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, base+"/x", nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
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

// TestHost: only loopback names and the allowed hosts are answered; a
// refusal is a 421 that names the Host header and the setting, and the
// handler never runs. AnyHost answers every Host.
func TestHost(t *testing.T) {
	plain, plainReached := serve(t, Options{HostsSetting: "--x-allowed-hosts"})
	allowed, _ := serve(t, Options{AllowedHosts: []string{"statefun.internal", "box:8090"}})
	anyHost, _ := serve(t, Options{AnyHost: true, AllowedHosts: []string{"ignored"}})
	for _, c := range []struct {
		base, host string
		want       int
	}{
		{plain, "localhost", 200},
		{plain, "LOCALHOST:8090", 200},
		{plain, "127.0.0.1:8090", 200},
		{plain, "127.9.9.9", 200},
		{plain, "[::1]:8090", 200},
		{plain, "[::ffff:127.0.0.1]:8090", 200},
		{plain, "evil.example:8090", 421},
		{plain, "localhost.evil.example", 421},
		{plain, "127.0.0.1.nip.io", 421},
		{plain, "0.0.0.0:8090", 421},
		{plain, "10.0.0.5:8090", 421},
		{plain, "[fe80::1%25eth0]:8090", 421},
		{allowed, "statefun.internal:1234", 200},
		{allowed, "Box:8090", 200},
		{allowed, "box:8091", 421},
		{allowed, "evil.example", 421},
		{anyHost, "evil.example", 200},
	} {
		status, body := do(t, c.base, "GET", c.host)
		if status != c.want {
			t.Errorf("Host %s: %d %s, want %d", c.host, status, body, c.want)
		}
		if status == 421 && c.base == plain && (!strings.Contains(body, "Host") || !strings.Contains(body, "--x-allowed-hosts")) {
			t.Errorf("Host %s: the 421 does not name the Host header and the setting: %s", c.host, body)
		}
	}
	before := *plainReached
	do(t, plain, "POST", "evil.example")
	if *plainReached != before {
		t.Error("a refused request reached the handler")
	}
}

// TestOrigin: requests from another origin are refused with a 403 naming
// the header and the setting; with EveryMethod GET, HEAD and OPTIONS too,
// which is what keeps an <img> on another site from popping the
// playground egress. Clients that are no browser (no Sec-Fetch-Site, no
// Origin) and a person's own navigation (Sec-Fetch-Site: none) get
// through.
func TestOrigin(t *testing.T) {
	safe, _ := serve(t, Options{OriginsSetting: "--x-allowed-origins"})
	every, everyReached := serve(t, Options{EveryMethod: true, OriginsSetting: "--x-allowed-origins"})
	trusted, _ := serve(t, Options{EveryMethod: true, AllowedOrigins: []string{"https://app.example"}})
	// An Origin of the listener's own URL is same-origin: httptest's URL
	// is scheme://Host.
	for _, c := range []struct {
		base, method string
		hdr          []string
		want         int
		names        string
	}{
		{safe, "POST", []string{"Sec-Fetch-Site", "cross-site", "Origin", "http://evil.example"}, 403, "Sec-Fetch-Site"},
		{safe, "PUT", []string{"Origin", "http://evil.example"}, 403, "Origin"},
		{safe, "POST", []string{"Sec-Fetch-Site", "same-site", "Origin", "http://127.0.0.1:1"}, 403, "Sec-Fetch-Site"},
		{safe, "GET", []string{"Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "no-cors", "Sec-Fetch-Dest", "image"}, 200, ""},
		{safe, "POST", nil, 200, ""},
		{safe, "POST", []string{"Sec-Fetch-Site", "same-origin", "Origin", safe}, 200, ""},
		{every, "GET", []string{"Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "no-cors", "Sec-Fetch-Dest", "image"}, 403, "Sec-Fetch-Site"},
		{every, "GET", []string{"Sec-Fetch-Site", "same-site", "Sec-Fetch-Dest", "iframe"}, 403, "Sec-Fetch-Site"},
		{every, "HEAD", []string{"Sec-Fetch-Site", "cross-site"}, 403, ""},
		{every, "OPTIONS", []string{"Origin", "http://evil.example"}, 403, "Origin"},
		{every, "GET", []string{"Origin", "http://evil.example"}, 403, "Origin"},
		{every, "GET", nil, 200, ""},
		{every, "GET", []string{"Sec-Fetch-Site", "none", "Sec-Fetch-Mode", "navigate", "Sec-Fetch-Dest", "document"}, 200, ""},
		{every, "GET", []string{"Sec-Fetch-Site", "same-origin", "Origin", every}, 200, ""},
		{every, "GET", []string{"Origin", every}, 200, ""},
		{trusted, "GET", []string{"Sec-Fetch-Site", "cross-site", "Origin", "https://app.example"}, 200, ""},
		{trusted, "POST", []string{"Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example"}, 403, ""},
	} {
		status, body := do(t, c.base, c.method, "", c.hdr...)
		if status != c.want {
			t.Errorf("%s %q: %d %s, want %d", c.method, c.hdr, status, body, c.want)
			continue
		}
		if c.names != "" && (!strings.Contains(body, c.names) || !strings.Contains(body, "--x-allowed-origins")) {
			t.Errorf("%s %q: the 403 does not name %s and the setting: %s", c.method, c.hdr, c.names, body)
		}
	}
	if *everyReached != 4 {
		t.Errorf("%d requests reached the EveryMethod handler, want the 4 allowed ones", *everyReached)
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		o    Options
		ok   bool
		name string
	}{
		{Options{AllowedHosts: []string{"statefun.internal", "box:8070", "10.0.0.1", "[fd00::1]:80"}, AllowedOrigins: []string{"https://a.example", "http://b.example:8080"}}, true, ""},
		{Options{AllowedHosts: []string{""}, HostsSetting: "--h"}, false, "--h"},
		{Options{AllowedHosts: []string{"http://box"}, HostsSetting: "--h"}, false, "--h"},
		{Options{AllowedHosts: []string{"a b"}}, false, ""},
		{Options{AllowedHosts: []string{"a,b"}}, false, ""},
		{Options{AllowedOrigins: []string{"a.example"}, OriginsSetting: "--o"}, false, "--o"},
		{Options{AllowedOrigins: []string{"https://a.example/path"}}, false, ""},
	} {
		err := c.o.Validate()
		if (err == nil) != c.ok {
			t.Errorf("%+v: %v", c.o, err)
		} else if err != nil && (!strings.HasPrefix(err.Error(), "browserguard: allowed ") || !strings.Contains(err.Error(), c.name)) {
			t.Errorf("%+v: %v", c.o, err)
		}
	}
}
