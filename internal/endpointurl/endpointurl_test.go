package endpointurl

import (
	"errors"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in, socket, out, err string
	}{
		{in: "http://localhost:8000/statefun", out: "http://localhost:8000/statefun"},
		{in: "HTTPS://fn.example.com", out: "https://fn.example.com"},
		{in: "http://[::1]:8000/x?y=1", out: "http://[::1]:8000/x?y=1"},
		{in: "http+unix:///run/fn.sock/statefun", socket: "/run/fn.sock", out: "http://localhost/statefun"},
		{in: "http+unix:///run/fn.sock", socket: "/run/fn.sock", out: "http://localhost/"},
		{in: "http+unix:///run/fn.sock/", socket: "/run/fn.sock", out: "http://localhost/"},
		{in: "HTTPS+UNIX:///a/b.sock.d/fn.sock/x/y.sock?q=1", socket: "/a/b.sock.d/fn.sock", out: "https://localhost/x/y.sock?q=1"},
		{in: "http+unix:///run/my%20fn.sock/a%2Fb/c", socket: "/run/my fn.sock", out: "http://localhost/a%2Fb/c"},

		{in: "http+unix://run/fn.sock/x", err: `a http+unix URL has no host, but this one has "run": write three slashes, such as http+unix:///run/fn.sock/x`},
		{in: "http+unix://localhost/run/fn.sock/x", err: `such as http+unix:///localhost/run/fn.sock/x`},
		{in: "http+unix://user:pw@/run/fn.sock/x", err: `has "user@": write three slashes, such as http+unix:///run/fn.sock/x`},
		{in: "http+unix:run/fn.sock", err: "needs an absolute socket path"},
		{in: "http+unix:///run/fn/x", err: "names its socket file in the path, with a component ending in .sock"},
		{in: "ftp://host/x", err: `unsupported scheme "ftp"`},
		{in: "localhost:8000", err: `unsupported scheme "localhost"`},
		{in: "/statefun", err: "want an absolute URL"},
		{in: "http:///x", err: "want an absolute URL with a host"},
		{in: "http://:8000/x", err: "want an absolute URL with a host"},
		{in: "http:host/x", err: "want an absolute URL with a host"},
		{in: "http://h:0/", err: "port 0 is out of range"},
		{in: "http://h:65536/", err: "port 65536 is out of range"},
		{in: "http://h/a b", err: "space or control character"},
		{in: "http://h/\x7f", err: "space or control character"},
		{in: "http://h/{function_name}", err: "brace"},
		{in: "http://[::1", err: "missing ']' in host"},
		{in: "http://h/%zz", err: `invalid URL escape "%zz"`},
	}
	for _, tt := range tests {
		got, err := Parse(tt.in)
		switch {
		case tt.err != "":
			var e *Error
			if !errors.As(err, &e) || !strings.Contains(e.Reason, tt.err) ||
				!strings.HasPrefix(err.Error(), "endpointurl: ") {
				t.Errorf("Parse(%q) error = %v, want one with %q", tt.in, err, tt.err)
			}
			if strings.Contains(err.Error(), "pw") {
				t.Errorf("Parse(%q) error shows the password: %v", tt.in, err)
			}
		case err != nil:
			t.Errorf("Parse(%q) error = %v", tt.in, err)
		case got.Socket != tt.socket || got.URL.String() != tt.out:
			t.Errorf("Parse(%q) = %q, %q; want %q, %q", tt.in, got.Socket, got.URL, tt.socket, tt.out)
		}
	}
}

// FuzzParse checks that Parse never panics and that what it accepts is a
// URL the HTTP client can send to: an http or https URL with a host.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"http://h:1/x", "https+unix:///a.sock/b?c", "http+unix://h/a.sock", "x", "http://[::1]:80/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		got, err := Parse(raw)
		if err != nil {
			return
		}
		if (got.URL.Scheme != "http" && got.URL.Scheme != "https") || got.URL.Host == "" {
			t.Fatalf("Parse(%q) accepted a URL with no request target: %v", raw, got.URL)
		}
	})
}
