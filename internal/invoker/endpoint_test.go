package invoker

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

func TestRoute(t *testing.T) {
	tests := []struct {
		in, socket, out, err string
	}{
		{in: "http://localhost:8000/statefun", out: "http://localhost:8000/statefun"},
		{in: "HTTPS://fn.example.com", out: "https://fn.example.com"},
		{in: "http+unix:///run/fn.sock/statefun", socket: "/run/fn.sock", out: "http://localhost/statefun"},
		{in: "http+unix:///run/fn.sock", socket: "/run/fn.sock", out: "http://localhost/"},
		{in: "http+unix:///run/fn.sock/", socket: "/run/fn.sock", out: "http://localhost/"},
		{in: "https+unix:///a/b.sock.d/fn.sock/x/y.sock?q=1", socket: "/a/b.sock.d/fn.sock", out: "https://localhost/x/y.sock?q=1"},
		{in: "http+unix:///run/my%20fn.sock/a%2Fb/c", socket: "/run/my fn.sock", out: "http://localhost/a%2Fb/c"},
		{in: "http+unix://run/fn.sock/x", err: `has host "run", want none`},
		{in: "http+unix://user@/run/fn.sock/x", err: "want none"},
		{in: "http+unix:run/fn.sock", err: "needs an absolute socket path"},
		{in: "http+unix:///run/fn/x", err: `path "/run/fn/x" has no component ending in .sock`},
		{in: "ftp://host/x", err: `unsupported scheme "ftp"`},
		{in: "http:///x", err: "URL has no host"},
	}
	for _, tt := range tests {
		u, err := url.Parse(tt.in)
		if err != nil {
			t.Fatal(err)
		}
		socket, err := route(u)
		switch {
		case tt.err != "":
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("route(%q) error = %v, want %q", tt.in, err, tt.err)
			}
		case err != nil:
			t.Errorf("route(%q) error = %v", tt.in, err)
		case socket != tt.socket || u.String() != tt.out:
			t.Errorf("route(%q) = %q, %q; want %q, %q", tt.in, socket, u, tt.socket, tt.out)
		}
	}
}

func TestOctetStream(t *testing.T) {
	tests := []struct {
		values []string
		ok     bool
	}{
		{nil, true},
		{[]string{"application/octet-stream"}, true},
		{[]string{"APPLICATION/OCTET-STREAM"}, true},
		{[]string{"application/octet-stream;charset=utf-8"}, true},
		{[]string{"text/plain, application/octet-stream"}, true},
		{[]string{"text/plain", "application/octet-stream"}, true},
		{[]string{""}, false},
		{[]string{"text/plain"}, false},
		{[]string{"application/octet-streamx"}, false},
		{[]string{"application/x-protobuf"}, false},
	}
	for _, tt := range tests {
		h := http.Header{}
		for _, v := range tt.values {
			h.Add("Content-Type", v)
		}
		if _, ok := octetStream(h); ok != tt.ok {
			t.Errorf("octetStream(%q) = %v, want %v", tt.values, ok, tt.ok)
		}
	}
}

func TestKindString(t *testing.T) {
	for k := KindUnknown; k <= KindTooLarge; k++ {
		if s := k.String(); s == "" || (k != KindUnknown && s == "unknown") {
			t.Errorf("Kind(%d) has no name", k)
		}
	}
	if Kind(99).String() != "unknown" || Kind(-1).String() != "unknown" {
		t.Error("out-of-range kinds should be unknown")
	}
}
