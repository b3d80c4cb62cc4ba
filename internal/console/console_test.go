package console

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func get(t *testing.T, h http.Handler, method, path string, hdr ...string) *http.Response {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

// Every answer under /ui/ carries the strict policy; the page is served
// at /ui/, /ui redirects there, assets have their types and revalidate by
// ETag, and only GET and HEAD are served.
func TestHandler(t *testing.T) {
	h := Handler()
	r := get(t, h, "GET", "/ui")
	if r.StatusCode != http.StatusMovedPermanently || r.Header.Get("Location") != "/ui/" {
		t.Fatalf("GET /ui: %d Location %q", r.StatusCode, r.Header.Get("Location"))
	}
	for path, ct := range map[string]string{
		"/ui/":            "text/html; charset=utf-8",
		"/ui/index.html":  "text/html; charset=utf-8",
		"/ui/app.css":     "text/css; charset=utf-8",
		"/ui/js/main.js":  "text/javascript; charset=utf-8",
		"/ui/favicon.svg": "image/svg+xml",
	} {
		r := get(t, h, "GET", path)
		if r.StatusCode != 200 || r.Header.Get("Content-Type") != ct {
			t.Errorf("GET %s: %d %q, want 200 %q", path, r.StatusCode, r.Header.Get("Content-Type"), ct)
		}
		if r.Header.Get("Content-Security-Policy") != ContentSecurityPolicy || r.Header.Get("X-Content-Type-Options") != "nosniff" || r.Header.Get("X-Frame-Options") != "DENY" {
			t.Errorf("GET %s: headers %v", path, r.Header)
		}
		etag := r.Header.Get("ETag")
		if r2 := get(t, h, "GET", path, "If-None-Match", etag); etag == "" || r2.StatusCode != http.StatusNotModified {
			t.Errorf("GET %s with If-None-Match %s: %d", path, etag, r2.StatusCode)
		}
	}
	for _, c := range []struct {
		method, path string
		status       int
	}{
		{"GET", "/ui/nope.js", 404},
		{"POST", "/ui/", 405},
		{"PUT", "/ui/app.css", 405},
	} {
		r := get(t, h, c.method, c.path)
		if r.StatusCode != c.status || r.Header.Get("Content-Security-Policy") == "" {
			t.Errorf("%s %s: %d, want %d with the policy", c.method, c.path, r.StatusCode, c.status)
		}
	}
}

// The policy allows nothing inline and nothing from another origin, and
// the page itself needs nothing of the kind: no inline script or style,
// no inline event handler, no URL of another origin in any asset.
func TestAssetsKeepThePolicy(t *testing.T) {
	for _, want := range []string{"default-src 'self'", "script-src 'self'", "style-src 'self'", "object-src 'none'", "frame-ancestors 'none'"} {
		if !strings.Contains(ContentSecurityPolicy, want) {
			t.Errorf("the policy lacks %q", want)
		}
	}
	if strings.Contains(ContentSecurityPolicy, "unsafe") {
		t.Errorf("the policy allows something unsafe: %s", ContentSecurityPolicy)
	}
	inlineScript := regexp.MustCompile(`<script(?:\s[^>]*)?>\s*[^<\s]`)
	otherOrigin := regexp.MustCompile(`(?i)(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
	h := Handler()
	var paths []string
	fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			paths = append(paths, Prefix+strings.TrimPrefix(p, "static/"))
		}
		return err
	})
	if len(paths) < 10 {
		t.Fatalf("embedded assets: %v", paths)
	}
	for _, path := range paths {
		r := get(t, h, "GET", path)
		b, _ := io.ReadAll(r.Body)
		if r.StatusCode != 200 {
			t.Fatalf("GET %s: %d", path, r.StatusCode)
		}
		s := string(b)
		if strings.HasSuffix(path, ".html") {
			if inlineScript.MatchString(s) || strings.Contains(s, "<style") || strings.Contains(s, " style=") || regexp.MustCompile(`\son[a-z]+=`).MatchString(s) {
				t.Errorf("%s has inline script, style or an event handler attribute", path)
			}
		}
		if m := otherOrigin.FindString(s); m != "" && !strings.Contains(m, "www.w3.org") {
			t.Errorf("%s names another origin: %s", path, m)
		}
		if strings.Contains(s, "innerHTML") || strings.Contains(s, "insertAdjacentHTML") || strings.Contains(s, "document.write") {
			t.Errorf("%s builds markup from strings: values must go in as text", path)
		}
	}
}

// Every module of the page is named in index.html with modulepreload, so
// the browser fetches them all at once with main.js instead of one import
// level after another: a module left out would add round trips to the
// first view (bench/console_test.go measures it).
func TestIndexPreloadsEveryModule(t *testing.T) {
	index, err := fs.ReadFile(static, "static/index.html")
	if err != nil {
		t.Fatal(err)
	}
	mods, err := fs.Glob(static, "static/js/*.js")
	if err != nil || len(mods) < 5 {
		t.Fatalf("modules: %v %v", mods, err)
	}
	for _, m := range mods {
		name := strings.TrimPrefix(m, "static/")
		if name == "js/main.js" {
			continue
		}
		if !strings.Contains(string(index), `<link rel="modulepreload" href="`+name+`">`) {
			t.Errorf("index.html does not modulepreload %s", name)
		}
	}
}
