package stateapi

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
)

// sendAs makes a request over HTTP with the Host header set to host (as a
// browser driven by a DNS-rebinding page would send it) and the header
// pairs hdr.
func sendAs(t testing.TB, base, host, method, target string, body []byte, hdr ...string) *response {
	t.Helper()
	req, err := http.NewRequest(method, base+target, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := &response{Response: resp, body: b}
	observe(t, method, target, r)
	return r
}

// TestHostCheck: without tokens the API answers only loopback Host names
// and the configured ones; a forged Host gets a 421 naming the header and
// changes nothing. With tokens the Host is checked only when hosts are
// configured.
func TestHostCheck(t *testing.T) {
	eng := startEngine(t, engineConfig{})
	open := serve(t, eng, Options{})
	allowed := serve(t, eng, Options{AllowedHosts: []string{"statefun.internal", "box:8070"}})
	tokens := serve(t, eng, Options{Tokens: []Token{tokenBoth}})
	tokensHosts := serve(t, eng, Options{Tokens: []Token{tokenBoth}, AllowedHosts: []string{"statefun.internal"}})
	const target = "/state/x/y/z/s"
	mustPut(t, open, target, "application/octet-stream", "v", "Statefun-Type", "x/T")
	auth := []string{"Authorization", "Bearer " + tokenBoth.Secret}
	for _, c := range []struct {
		api    string
		host   string
		hdr    []string
		status int
	}{
		{open, "localhost", nil, 200},
		{open, "LocalHost:8070", nil, 200},
		{open, "127.0.0.1:8070", nil, 200},
		{open, "127.200.3.4", nil, 200},
		{open, "[::1]:8070", nil, 200},
		{open, "[::1]", nil, 200},
		{open, "[::ffff:127.0.0.1]:8070", nil, 200},
		{open, "evil.example", nil, 421},
		{open, "evil.example:8070", nil, 421},
		{open, "localhost.evil.example", nil, 421},
		{open, "127.0.0.1.nip.io:8070", nil, 421},
		{open, "0.0.0.0:8070", nil, 421},
		{open, "192.168.1.5:8070", nil, 421},
		{open, "[::2]:8070", nil, 421},
		{open, "statefun.internal", nil, 421},
		{allowed, "statefun.internal", nil, 200},
		{allowed, "STATEFUN.internal:9000", nil, 200},
		{allowed, "box:8070", nil, 200},
		{allowed, "box:8071", nil, 421},
		{allowed, "localhost:1", nil, 200},
		{allowed, "evil.example", nil, 421},
		{tokens, "evil.example", nil, 401},
		{tokens, "evil.example", auth, 200},
		{tokensHosts, "evil.example", auth, 421},
		{tokensHosts, "statefun.internal", auth, 200},
		{tokensHosts, "127.0.0.1", auth, 200},
	} {
		for _, method := range []string{"GET", "PUT"} {
			hdr := append([]string{"Statefun-Type", "x/T"}, c.hdr...)
			r := sendAs(t, c.api, c.host, method, target, []byte("forged"), hdr...)
			want := c.status
			if r.StatusCode != want {
				t.Errorf("%s with Host %s: %s, want %d\n%s", method, c.host, r.Status, want, r.body)
				continue
			}
			if want == 421 && !strings.Contains(r.problem(t).Detail, "Host") {
				t.Errorf("the 421 does not name the Host header: %s", r.body)
			}
			if method == "PUT" && want == 200 {
				mustPut(t, open, target, "application/octet-stream", "v", "Statefun-Type", "x/T")
			}
		}
	}
	if r := send(t, open, "GET", target, nil); string(r.body) != "v" {
		t.Errorf("after the refused PUTs the entry is %q", r.body)
	}
}

// TestCrossOrigin: a state change from another origin (Origin that is not
// the listener's, or Sec-Fetch-Site cross-site) is a 403 naming the
// header, with or without tokens; reads and same-origin or allowed
// origins go through.
func TestCrossOrigin(t *testing.T) {
	eng := startEngine(t, engineConfig{})
	open := serve(t, eng, Options{AllowedOrigins: []string{"https://console.example"}})
	tokens := serve(t, eng, Options{Tokens: []Token{tokenBoth}})
	const target = "/state/x/y/z/s"
	rc := mustPut(t, open, target, "application/octet-stream", "v", "Statefun-Type", "x/T")
	self := "http://" + strings.TrimPrefix(open, "http://")
	auth := []string{"Authorization", "Bearer " + tokenBoth.Secret}
	for _, c := range []struct {
		api, method, target string
		hdr                 []string
		status              int
		names               string // the header the refusal names
	}{
		{open, "PUT", target, []string{"Origin", "http://evil.example"}, 403, "Origin"},
		{open, "PUT", target, []string{"Origin", "null"}, 403, "Origin"},
		{open, "PUT", target, []string{"Origin", "http://localhost:1"}, 403, "Origin"},
		{open, "DELETE", target, []string{"Sec-Fetch-Site", "cross-site"}, 403, "Sec-Fetch-Site"},
		{open, "DELETE", target, []string{"Sec-Fetch-Site", "same-site", "Origin", "http://localhost:1"}, 403, "Sec-Fetch-Site"},
		{open, "DELETE", "/state/x/y/z", []string{"Origin", "http://evil.example"}, 403, "Origin"},
		{open, "POST", "/mutations/" + rc.Mutation + "/revert", []string{"Origin", "http://evil.example", "Content-Type", "application/x-www-form-urlencoded"}, 403, "Origin"},
		{tokens, "PUT", target, append([]string{"Origin", "http://evil.example"}, auth...), 403, "Origin"},
		{open, "GET", target, []string{"Origin", "http://evil.example", "Sec-Fetch-Site", "cross-site"}, 200, ""},
		{open, "PUT", target, []string{"Origin", self}, 200, ""},
		{open, "PUT", target, []string{"Sec-Fetch-Site", "same-origin", "Origin", self}, 200, ""},
		{open, "PUT", target, []string{"Sec-Fetch-Site", "none"}, 200, ""},
		{open, "PUT", target, []string{"Origin", "https://console.example", "Sec-Fetch-Site", "cross-site"}, 200, ""},
		{tokens, "PUT", target, append([]string{"Origin", strings.Replace(tokens, "http://", "http://", 1)}, auth...), 200, ""},
	} {
		hdr := append([]string{"Statefun-Type", "x/T"}, c.hdr...)
		r := sendAs(t, c.api, "", c.method, c.target, []byte("v"), hdr...)
		if r.StatusCode != c.status {
			t.Errorf("%s %s %q: %s, want %d\n%s", c.method, c.target, c.hdr, r.Status, c.status, r.body)
			continue
		}
		if c.status == 403 && !strings.Contains(r.problem(t).Detail, c.names) {
			t.Errorf("%s %s %q: the 403 does not name %s: %s", c.method, c.target, c.hdr, c.names, r.body)
		}
	}
	var audit struct{ Records []auditJSON }
	send(t, open, "GET", "/audit", nil).json(t, &audit)
	for _, a := range audit.Records {
		if a.Op != "put" || a.Reverts != "" {
			t.Errorf("a refused request was applied: %+v", a)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, c := range []struct {
		o  Options
		ok bool
	}{
		{Options{AllowedHosts: []string{"statefun.internal", "box:8070", "10.0.0.1", "[fd00::1]:80"}, AllowedOrigins: []string{"https://a.example", "http://b.example:8080"}}, true},
		{Options{AllowedHosts: []string{""}}, false},
		{Options{AllowedHosts: []string{"http://box"}}, false},
		{Options{AllowedHosts: []string{"a b"}}, false},
		{Options{AllowedOrigins: []string{"a.example"}}, false},
		{Options{AllowedOrigins: []string{"https://a.example/path"}}, false},
	} {
		if err := c.o.Validate(); (err == nil) != c.ok {
			t.Errorf("%+v: %v", c.o, err)
		} else if err != nil && (!strings.HasPrefix(err.Error(), "browserguard: allowed ") || !strings.Contains(err.Error(), " in --api-allowed-")) {
			t.Errorf("%+v: %v", c.o, err)
		}
	}
}
