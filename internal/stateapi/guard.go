package stateapi

import (
	"net/http"

	"github.com/statefun-go/statefun/internal/browserguard"
)

// This file guards the API against browsers that a web page drives at it
// (package browserguard says how). Without tokens, where any request that
// reaches the listener is trusted, the API answers only a Host that names
// the loopback interface or one configured in Options.AllowedHosts. With
// tokens a page cannot authenticate (browsers attach no bearer token on
// their own), and the listener is usually reached under names we cannot
// guess, so the Host is checked only when AllowedHosts is configured.
// Unsafe methods from another origin are refused whether or not tokens
// are configured, unless the origin is in Options.AllowedOrigins; GET,
// HEAD and OPTIONS change nothing and are not checked for their origin.

// guardOptions are the options of the API's browser guard.
func guardOptions(opts Options) browserguard.Options {
	return browserguard.Options{
		AllowedHosts:   opts.AllowedHosts,
		AnyHost:        len(opts.Tokens) > 0 && len(opts.AllowedHosts) == 0,
		AllowedOrigins: opts.AllowedOrigins,
		HostsSetting:   "--api-allowed-hosts",
		OriginsSetting: "--api-allowed-origins",
	}
}

// guard refuses a request whose Host the API does not answer (421) or
// that is a cross-origin state change (403), and says which header and
// what to configure. It reports whether the request may go on.
func (s *Server) guard(w http.ResponseWriter, r *http.Request) bool {
	if ref := s.browsers.Check(r); ref != nil {
		fail(w, r, ref.Status, ref.Detail)
		return false
	}
	return true
}

// Validate checks the options a deployment configures: each allowed host
// is a host name or IP, with an optional port; each allowed origin is
// scheme://host[:port] without a path. The error names the flag.
func (o Options) Validate() error {
	return guardOptions(o).Validate()
}
