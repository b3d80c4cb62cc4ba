// Package browserguard refuses the requests a web page can make its
// visitor's browser send to a listener the page has no business with: the
// admin listener's state API and the playground ingress and egress, which
// trust any request that reaches them (the state API without tokens, the
// playground always).
//
// DNS rebinding: a page at http://evil.example:8090 that re-resolves its
// own name to 127.0.0.1 talks to a loopback listener as a same-origin page,
// so neither the listener's address nor the Origin header stops it, and it
// can read the answers; only the Host header, which still says
// evil.example, gives it away. A guarded listener answers only a Host that
// names the loopback interface (localhost, 127.0.0.0/8, [::1]) or one
// configured in Options.AllowedHosts, unless Options.AnyHost.
//
// Cross-site request forgery: a page on another origin can make a browser
// send a POST (a form, or fetch in no-cors mode), and a GET (an image, a
// frame, a link), without a preflight and with the Host of the real
// listener; it cannot read the answer, but the request has its effect.
// Requests that change something from another origin are refused by Go's
// http.CrossOriginProtection: Sec-Fetch-Site other than same-origin or
// none, or else an Origin whose host is not the request's Host, unless the
// origin is in Options.AllowedOrigins. Options.EveryMethod counts GET,
// HEAD and OPTIONS among them, for a listener whose GET changes something
// (the playground egress pops a record).
//
// What a browser does not send cannot be checked: Chromium, Firefox and
// Safari (16.4 and later) send Sec-Fetch-Site to loopback and https URLs,
// not to plain http under other names; an image or a frame (GET) carries
// no Origin. docs/reference/egress.md says what that leaves.
package browserguard

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Options configure a Guard.
type Options struct {
	// AllowedHosts are Host header values answered besides the loopback
	// names (localhost, 127.0.0.0/8, [::1]): a host name or IP, matching
	// any port, or host:port.
	AllowedHosts []string
	// AnyHost answers every Host (AllowedHosts is then not consulted):
	// for a listener that authenticates its callers, which a web page
	// cannot do on its own.
	AnyHost bool
	// AllowedOrigins are other origins (scheme://host[:port]) whose pages
	// may send requests that change something.
	AllowedOrigins []string
	// EveryMethod treats every method as one that changes something, GET
	// included; otherwise GET, HEAD and OPTIONS are not checked for their
	// origin.
	EveryMethod bool
	// HostsSetting and OriginsSetting name what configures AllowedHosts
	// and AllowedOrigins (a command-line flag), for the refusals.
	HostsSetting, OriginsSetting string
}

// Validate checks the options a deployment configures: each allowed host
// is a host name or IP, with an optional port; each allowed origin is
// scheme://host[:port] without a path. The error names the setting.
func (o Options) Validate() error {
	for _, h := range o.AllowedHosts {
		name := h
		if n, _, err := net.SplitHostPort(h); err == nil {
			name = n
		}
		if name == "" || strings.ContainsAny(h, "/ \t,@?#") {
			return fmt.Errorf("browserguard: allowed host %q%s: want a host name or IP, with an optional :port", h, in(o.HostsSetting))
		}
	}
	cop := http.NewCrossOriginProtection()
	for _, origin := range o.AllowedOrigins {
		if err := cop.AddTrustedOrigin(origin); err != nil {
			return fmt.Errorf("browserguard: allowed origin %q%s: want scheme://host[:port] (%v)", origin, in(o.OriginsSetting), err)
		}
	}
	return nil
}

// in is " in <setting>", or nothing for an unnamed setting.
func in(setting string) string {
	if setting == "" {
		return ""
	}
	return " in " + setting
}

// Guard checks requests against its Options.
type Guard struct {
	opts Options
	cop  *http.CrossOriginProtection
}

// New returns a Guard. A malformed allowed origin allows nothing;
// Options.Validate reports it.
func New(opts Options) *Guard {
	cop := http.NewCrossOriginProtection()
	for _, o := range opts.AllowedOrigins {
		cop.AddTrustedOrigin(o)
	}
	return &Guard{opts: opts, cop: cop}
}

// Refusal is why a request was refused: the status to answer (421 for the
// Host, 403 for the origin) and a detail that names the header and what
// to configure.
type Refusal struct {
	Status int
	Detail string
}

func (r *Refusal) Error() string { return r.Detail }

// Check returns nil when r may go on, or why it may not.
func (g *Guard) Check(r *http.Request) *Refusal {
	if !g.HostAllowed(r.Host) {
		return &Refusal{Status: http.StatusMisdirectedRequest, Detail: fmt.Sprintf("Host %q is not a loopback name (localhost, 127.0.0.1, [::1]) nor an allowed host; "+
			"a name that resolves to this listener may be a DNS rebinding attack; allow it with %s", r.Host, g.opts.HostsSetting)}
	}
	checked := r
	if g.opts.EveryMethod && (r.Method == http.MethodGet || r.Method == http.MethodHead || r.Method == http.MethodOptions) {
		// CrossOriginProtection lets the safe methods through; here they
		// are not safe. A shallow copy with a method it checks asks it
		// the same question about the same headers.
		c := *r
		c.Method = http.MethodPost
		checked = &c
	}
	if err := g.cop.Check(checked); err != nil {
		if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
			return &Refusal{Status: http.StatusForbidden, Detail: fmt.Sprintf("a cross-origin %s is refused: Sec-Fetch-Site is %q (Origin %q); allow the origin with %s", r.Method, site, r.Header.Get("Origin"), g.opts.OriginsSetting)}
		}
		return &Refusal{Status: http.StatusForbidden, Detail: fmt.Sprintf("a cross-origin %s is refused: Origin %q is not this listener's origin (Host %q); allow it with %s", r.Method, r.Header.Get("Origin"), r.Host, g.opts.OriginsSetting)}
	}
	return nil
}

// Handler returns a handler that answers a refused request with its
// status and detail as text/plain, and hands the others to next.
func (g *Guard) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ref := g.Check(r); ref != nil {
			http.Error(w, ref.Detail, ref.Status)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// HostAllowed reports whether host (the Host header, with or without a
// port) may reach the listener.
func (g *Guard) HostAllowed(host string) bool {
	if g.opts.AnyHost {
		return true
	}
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	}
	if isLoopbackName(name) {
		return true
	}
	for _, a := range g.opts.AllowedHosts {
		if strings.EqualFold(a, host) || strings.EqualFold(a, name) {
			return true
		}
	}
	return false
}

// isLoopbackName reports whether a host name (without a port; an IPv6
// literal with or without its brackets) can only name this machine's
// loopback interface: localhost, 127.0.0.0/8 and ::1 (IPv4-mapped too).
func isLoopbackName(name string) bool {
	if strings.EqualFold(name, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(name, "["), "]"))
	return err == nil && ip.Zone() == "" && ip.Unmap().IsLoopback()
}
