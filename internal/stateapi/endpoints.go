package stateapi

import (
	"net/http"
	"time"
)

// EndpointStatus is the state of one module.yaml endpoint as this node's
// calls saw it (GET /endpoints): up while its function server answers,
// down once calls in a row could not connect to it, until one gets an
// answer.
type EndpointStatus struct {
	Functions      string
	URL            string
	Up             bool
	Since          time.Time // zero: it never changed
	FailuresInARow int
	LastError      string
}

// endpointJSON is an EndpointStatus in GET /endpoints.
type endpointJSON struct {
	Functions      string     `json:"functions"`
	URL            string     `json:"url"`
	Up             bool       `json:"up"`
	Since          *time.Time `json:"since"`
	FailuresInARow int        `json:"failuresInARow"`
	LastError      string     `json:"lastError,omitempty"`
}

// serveEndpoints answers GET /endpoints: every function endpoint of the
// module and whether its function server is reachable, so that a server
// that is down shows once, as the endpoint's state, rather than as one
// failing row per address.
func (s *Server) serveEndpoints(w http.ResponseWriter, r *http.Request) {
	if !s.readWithoutParams(w, r, "/endpoints") {
		return
	}
	out := struct {
		Endpoints []endpointJSON `json:"endpoints"`
	}{Endpoints: []endpointJSON{}}
	if s.opts.Endpoints != nil {
		for _, e := range s.opts.Endpoints() {
			j := endpointJSON{Functions: e.Functions, URL: e.URL, Up: e.Up, FailuresInARow: e.FailuresInARow, LastError: e.LastError}
			if !e.Since.IsZero() {
				t := e.Since.UTC()
				j.Since = &t
			}
			out.Endpoints = append(out.Endpoints, j)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// readWithoutParams admits a GET or HEAD of a route that takes no
// parameters (route names it in the 400), for a caller with the read
// scope; false when it answered the request itself.
func (s *Server) readWithoutParams(w http.ResponseWriter, r *http.Request, route string) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed(w, r, "GET, HEAD")
		return false
	}
	if _, ok := s.authorize(w, r, ScopeRead); !ok {
		return false
	}
	if len(r.URL.Query()) != 0 {
		fail(w, r, http.StatusBadRequest, route+" takes no parameters")
		return false
	}
	return true
}
