// Package console is the operator's web console: a small single-page
// application served on the admin listener at /ui/, beside the state API
// it calls (docs/how-to/console.md). Every asset is embedded in the binary, and
// every answer carries a strict Content-Security-Policy: the page runs
// only its own scripts and styles, and talks only to its own origin.
package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed static
var static embed.FS

// Prefix is the path the console is served under.
const Prefix = "/ui/"

// ContentSecurityPolicy is sent with every answer under Prefix. No inline
// script or style, nothing from another origin, no framing, no plugins:
// a value an operator views (state is data written by anyone who can
// send a message) can never run as code in the page that holds a token.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// asset is one embedded file, ready to serve.
type asset struct {
	body        []byte
	contentType string
	etag        string
}

// contentTypes maps the extensions the console uses; the system's MIME
// table is not consulted, so a machine without one serves the same.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".svg":  "image/svg+xml",
	".png":  "image/png",
	".ico":  "image/x-icon",
}

// Handler serves the console: Prefix and every asset below it, and a
// redirect from the prefix without its slash. Assets are read once.
func Handler() http.Handler {
	assets := map[string]asset{}
	err := fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := static.ReadFile(p)
		if err != nil {
			return err
		}
		ct, ok := contentTypes[path.Ext(p)]
		if !ok {
			return fmt.Errorf("console: no content type for %s", p)
		}
		sum := sha256.Sum256(b)
		assets[strings.TrimPrefix(p, "static/")] = asset{body: b, contentType: ct, etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
		return nil
	})
	if err != nil {
		// The files are compiled in: this is a build defect, not input.
		panic(err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == strings.TrimSuffix(Prefix, "/") {
			http.Redirect(w, r, Prefix, http.StatusMovedPermanently)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "console: only GET and HEAD", http.StatusMethodNotAllowed)
			return
		}
		name := strings.TrimPrefix(r.URL.Path, Prefix)
		if name == "" {
			name = "index.html"
		}
		a, ok := assets[name]
		if !ok {
			http.Error(w, "console: no such file: "+name, http.StatusNotFound)
			return
		}
		h.Set("Content-Type", a.contentType)
		// Revalidate every time (cheap: a 304 by ETag), so a new binary's
		// console is never mixed with cached modules of the old one.
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", a.etag)
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(a.body))
	})
}
