package module

import (
	"testing"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/invoker"
)

// TestURLsAgreeWithInvoker checks the promise that the loader and the
// invoker share one rule: a template the loader accepts expands to URLs the
// invoker can call, and a template it refuses expands to URLs the invoker
// refuses too (so nothing is refused that could have worked).
func TestURLsAgreeWithInvoker(t *testing.T) {
	for _, tmpl := range []string{
		"http://functions:8000/statefun",
		"https://h/{function.name}",
		"http://{function.name}:8000/",
		"HTTP://h/?fn={function.name}",
		"http+unix:///run/fn.sock/{function.name}",
		"https+unix:///run/fn.sock",
		"http+unix://run/fn.sock/statefun", // StateFun ignores the host; we refuse it
		"http+unix://localhost/run/fn.sock/statefun",
		"http+unix:///run/fn/statefun",
		"http+unix:run/fn.sock",
		"http://:8000/",
		"http://h:0/",
		"http://h:65536/",
		"http:///statefun",
		"ftp://h/",
		"/statefun",
		"http://h/%zz",
		"http://[::1",
		"http://h/a b",
	} {
		src := "kind: io.statefun.endpoints.v2/http\nspec:\n  functions: ns/*\n  urlPathTemplate: \"" + tmpl + "\"\n"
		m, loadErr := Parse("module.yaml", []byte(src))
		url := tmpl
		if loadErr == nil {
			url = m.Endpoints[0].URL(address.TypeName{Namespace: "ns", Name: "fn"})
		}
		callErr := invoker.CheckURL(url)
		if (loadErr == nil) != (callErr == nil) {
			t.Errorf("%q: loader says %v, invoker says %v", tmpl, loadErr, callErr)
		}
	}
}

// TestURLEscapesFunctionName checks that a wildcard endpoint cannot turn an
// odd function name into a URL the invoker refuses on every call.
func TestURLEscapesFunctionName(t *testing.T) {
	m := mustParse(t, "kind: io.statefun.endpoints.v2/http\nspec:\n  functions: ns/*\n  urlPathTemplate: http://h/fn/{function.name}\n")
	for name, want := range map[string]string{
		"greeter":  "http://h/fn/greeter",
		"a.b-c_d~": "http://h/fn/a.b-c_d~",
		"a b":      "http://h/fn/a%20b",
		"100%":     "http://h/fn/100%25",
		"x?y#z":    "http://h/fn/x%3Fy%23z",
	} {
		got := m.Endpoints[0].URL(address.TypeName{Namespace: "ns", Name: name})
		if got != want {
			t.Errorf("URL(%q) = %q, want %q", name, got, want)
		}
		if err := invoker.CheckURL(got); err != nil {
			t.Errorf("URL(%q) = %q, which the invoker refuses: %v", name, got, err)
		}
	}
}
