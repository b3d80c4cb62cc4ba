package stateapi

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// This file guards the API against browsers that a web page drives at it.
//
// DNS rebinding: a page at http://evil.example:8070 that re-resolves its
// own name to 127.0.0.1 talks to a loopback listener as a same-origin page,
// so neither the listener's address nor the Origin header stops it; only
// the Host header, which still says evil.example, gives it away. Without
// tokens (where any request that reaches the listener is trusted) the API
// answers only a Host that names the loopback interface (localhost,
// 127.0.0.0/8, [::1]) or one configured in Options.AllowedHosts. With
// tokens a page cannot authenticate (browsers attach no bearer token on
// their own), and the listener is usually reached under names we cannot
// guess, so the Host is checked only when AllowedHosts is configured.
//
// Cross-site request forgery: a page on another origin can make a browser
// send a POST (a form, or fetch in no-cors mode) without a preflight, and
// with the Host of the real listener. Unsafe methods from another origin
// are refused whether or not tokens are configured, by Go's
// http.CrossOriginProtection: Sec-Fetch-Site other than same-origin or
// none, or else an Origin whose host is not the request's Host, unless the
// origin is in Options.AllowedOrigins.

// hostAllowed reports whether host (the Host header, with or without a
// port) may reach the API.
func (s *Server) hostAllowed(host string) bool {
	if len(s.tokens) > 0 && len(s.opts.AllowedHosts) == 0 {
		return true
	}
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	}
	if isLoopbackName(name) {
		return true
	}
	for _, a := range s.opts.AllowedHosts {
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

// guard refuses a request whose Host the API does not answer (421) or
// that is a cross-origin state change (403), and says which header and
// what to configure. It reports whether the request may go on.
func (s *Server) guard(w http.ResponseWriter, r *http.Request) bool {
	if !s.hostAllowed(r.Host) {
		fail(w, r, http.StatusMisdirectedRequest, fmt.Sprintf("Host %q is not a loopback name (localhost, 127.0.0.1, [::1]) nor an allowed host; "+
			"a name that resolves to this listener may be a DNS rebinding attack; allow it with --api-allowed-hosts", r.Host))
		return false
	}
	if err := s.cop.Check(r); err != nil {
		detail := fmt.Sprintf("a cross-origin %s is refused: Origin %q is not this listener's origin (Host %q); allow it with --api-allowed-origins", r.Method, r.Header.Get("Origin"), r.Host)
		if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
			detail = fmt.Sprintf("a cross-origin %s is refused: Sec-Fetch-Site is %q (Origin %q); allow the origin with --api-allowed-origins", r.Method, site, r.Header.Get("Origin"))
		}
		fail(w, r, http.StatusForbidden, detail)
		return false
	}
	return true
}

// Validate checks the options a deployment configures: each allowed host
// is a host name or IP, with an optional port; each allowed origin is
// scheme://host[:port] without a path.
func (o Options) Validate() error {
	for _, h := range o.AllowedHosts {
		name := h
		if n, _, err := net.SplitHostPort(h); err == nil {
			name = n
		}
		if name == "" || strings.ContainsAny(h, "/ \t,@?#") {
			return fmt.Errorf("stateapi: allowed host %q: want a host name or IP, with an optional :port", h)
		}
	}
	cop := http.NewCrossOriginProtection()
	for _, o := range o.AllowedOrigins {
		if err := cop.AddTrustedOrigin(o); err != nil {
			return fmt.Errorf("stateapi: allowed origin %q: want scheme://host[:port] (%v)", o, err)
		}
	}
	return nil
}
