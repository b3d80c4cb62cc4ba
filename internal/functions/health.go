package functions

import (
	"fmt"
	"net/url"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/invoker"
	"github.com/statefun-go/statefun/internal/module"
)

// An endpoint whose function server is down fails every call of every
// address it serves, each with its own "connection refused": without a
// state of its own, an operator would read one failing row per address and
// one log line per address and attempt. So each endpoint keeps whether it
// is reachable: down after downAfter calls in a row could not connect,
// and up again at the first call that got an answer, whatever the answer
// (a 500 is a function's failure, not its server's absence). Calls that
// connected but failed on the way (a reset, a timeout) say nothing either
// way: the server may be slow, not gone. A change is logged once, and the
// state is in Endpoints, statefun_function_endpoint_up, GET /endpoints
// and /readyz's detail.

// downAfter is how many calls in a row that could not connect make an
// endpoint down.
const downAfter = 3

// health is one endpoint's reachability.
type health struct {
	// clean is set while the endpoint is up with no failure counted: the
	// state of almost every call, which then changes nothing and takes no
	// lock (every call of every address passes here).
	clean    atomic.Bool
	mu       sync.Mutex
	down     bool
	since    time.Time // of the current state; zero until the first change
	failures int       // calls in a row that could not connect
	lastErr  string    // the last of them
}

// EndpointStatus is what Endpoints says of one module.yaml endpoint.
type EndpointStatus struct {
	// Functions is what the endpoint serves: "ns/name" or "ns/*".
	Functions string
	// URL is its urlPathTemplate.
	URL string
	// Up is false once downAfter calls in a row could not connect, until a
	// call gets an answer.
	Up bool
	// Since is when it went down, or came up again; zero if it never
	// changed.
	Since time.Time
	// FailuresInARow counts the calls in a row that could not connect, and
	// LastError is the last one's error.
	FailuresInARow int
	LastError      string
}

// Endpoints returns the state of every endpoint of the module, in
// module.yaml order.
func (r *Router) Endpoints() []EndpointStatus {
	out := make([]EndpointStatus, 0, len(r.mod.Endpoints))
	for _, mep := range r.mod.Endpoints {
		h := &r.endpoints[mep].health
		h.mu.Lock()
		out = append(out, EndpointStatus{Functions: mep.Functions.String(), URL: redactedURL(mep), Up: !h.down,
			Since: h.since, FailuresInARow: h.failures, LastError: h.lastErr})
		h.mu.Unlock()
	}
	return out
}

// Down describes the endpoints that are down, one line each, in a stable
// order; empty when all are up (/readyz's detail).
func (r *Router) Down() []string {
	var out []string
	for _, st := range r.Endpoints() {
		if !st.Up {
			out = append(out, fmt.Sprintf("function endpoint for %s (%s) down since %s: %s",
				st.Functions, st.URL, st.Since.UTC().Format(time.RFC3339), st.LastError))
		}
	}
	sort.Strings(out)
	return out
}

// observe records the outcome of one call to mep.
func (r *Router) observe(mep *module.Endpoint, ep *endpoint, err error) {
	h := &ep.health
	if err == nil && h.clean.Load() {
		return
	}
	kind := invoker.KindOf(err)
	h.mu.Lock()
	var changed, down bool
	var was time.Time
	switch {
	case err == nil || kind == invoker.KindStatus || kind == invoker.KindContentType ||
		kind == invoker.KindEmptyBody || kind == invoker.KindDecode:
		// An answer, whatever it says: the server is there. (A request
		// over the payload cap is never sent: it says nothing either way.)
		h.failures, h.lastErr = 0, ""
		if h.down {
			h.down, changed, was = false, true, h.since
			h.since = time.Now()
		}
	case kind == invoker.KindConnect:
		h.failures++
		h.lastErr = err.Error()
		if !h.down && h.failures >= downAfter {
			h.down, changed, down = true, true, true
			h.since = time.Now()
		}
	}
	lastErr, failures := h.lastErr, h.failures
	h.clean.Store(!h.down && h.failures == 0)
	h.mu.Unlock()
	if !changed {
		return
	}
	label := mep.Functions.String()
	if r.metrics != nil {
		v := 1.0
		if down {
			v = 0
		}
		r.metrics.endpointUp.WithLabelValues(label).Set(v)
	}
	if r.log == nil {
		return
	}
	if down {
		r.log.Warn("function endpoint down: calls in a row could not connect; the messages of its functions wait in their inboxes and are retried (each address's retries are logged at DEBUG while it is down)",
			"functions", label, "url", redactedURL(mep), "failures_in_a_row", failures, "error", lastErr)
		return
	}
	r.log.Info("function endpoint reachable again", "functions", label, "url", redactedURL(mep), "was_down_for", time.Since(was).Round(time.Millisecond))
}

// EndpointDown reports whether the endpoint that serves t is down (the
// engine logs an address's retry at DEBUG then: the endpoint's state says
// it once).
func (r *Router) EndpointDown(t address.TypeName) bool {
	mep, ok := r.mod.EndpointFor(t)
	if !ok {
		return false
	}
	h := &r.endpoints[mep].health
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.down
}

// redactedURL is an endpoint's URL template without a password.
func redactedURL(mep *module.Endpoint) string {
	u, err := url.Parse(mep.URLPathTemplate)
	if err != nil {
		return mep.URLPathTemplate
	}
	return u.Redacted()
}
