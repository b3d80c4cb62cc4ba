// Package stateapi is the HTTP state access API: read, write and delete any
// function's state while the application runs (docs/reference/state-api.md is the
// contract). Every mutation goes through the mailbox
// of the partition that owns the address, in order with its messages.
package stateapi

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/browserguard"
	"github.com/statefun-go/statefun/internal/cluster/trust"
	"github.com/statefun-go/statefun/internal/engine"
	"github.com/statefun-go/statefun/internal/jobs"
)

// Options configure the API.
type Options struct {
	// Tokens enable bearer authentication; none means every caller may read
	// and write, and the listener must be loopback-only (the app checks).
	Tokens []Token
	// RequireReason refuses mutations without a Statefun-Reason header.
	RequireReason bool
	// MaxBodyBytes caps a PUT body; default 8 MiB.
	MaxBodyBytes int64
	// MaxWait caps ?wait= on a receipt long-poll; default 60s.
	MaxWait time.Duration
	// AllowedHosts are Host header values the API answers besides the
	// loopback names (localhost, 127.0.0.0/8, [::1]): a host name or IP,
	// matching any port, or host:port. Without tokens any other Host is a
	// 421 (guard.go says why); with tokens the Host is checked only when
	// this is set.
	AllowedHosts []string
	// Now is the clock of mutation ids; default time.Now. The runtime
	// passes the engine's clock, so a simulated run names its mutations
	// by simulated time.
	Now func() time.Time
	// Metrics is the runtime's metrics registry: GET /overview reads the
	// engine's invocation counters and repair gauges from it (nil: those
	// figures are zero).
	Metrics prometheus.Gatherer
	// Commands, in cluster mode, takes the writes (PUT and DELETE of an
	// entry, DELETE of an address) about addresses whose partition this
	// node does not serve: they go to the owner as commands through the
	// messages topic (commands.go). Nil: those answer 503 naming the owner.
	Commands Commands
	// AllowedOrigins are other origins (scheme://host[:port]) whose
	// browser pages may send state-changing requests; any other
	// cross-origin PUT, DELETE or POST is a 403.
	AllowedOrigins []string
	// Cluster, in cluster mode, answers the reads and listings about
	// partitions other nodes own (remote.go). Nil in embedded mode.
	Cluster Cluster
	// Owner, in cluster mode, names the node that owns a partition and the
	// URL of its admin listener (empty when not known), for the 503 of a
	// request about an address this node does not own. Nil (embedded
	// mode, or not known): the 503 names no owner.
	Owner func(ctx context.Context, partition int) (node, adminURL string, ok bool)
	// NodeID is this node's id in cluster mode: a partition Owner names
	// this node for is being restored here.
	NodeID string
	// Nodes, in cluster mode with a cluster secret, checks the requests
	// other nodes sign (trust.Header) and names the caller they vouch for
	// (nodeauth.go). Nil: the header is ignored.
	Nodes *trust.NodeAuth
	// Distrusted, in cluster mode, says why this node does not trust the
	// member record of a node ("" when it has nothing against it), for the
	// 503 of a request about a partition that node owns: no request is
	// sent to a member this node does not trust.
	Distrusted func(node string) string
	// Endpoints reports the module's function endpoints and whether each
	// is reachable, as this node's calls saw them (GET /endpoints). Nil:
	// none listed.
	Endpoints func() []EndpointStatus
	// ClusterView, in cluster mode, says what this node knows of the
	// cluster (GET /cluster). Nil in embedded mode: /cluster is a 404.
	ClusterView func(ctx context.Context) ClusterView
	// Backup takes a backup of the store (POST /backups, backups.go); an
	// error wrapping ErrNoBackups is answered 409 (cluster mode). Nil:
	// POST /backups answers 409.
	Backup BackupFunc
	// BackupPart, in cluster mode, writes this node's part of a cluster
	// backup (backups.go); with it, POST /backups coordinates a backup of
	// every partition.
	BackupPart BackupPartFunc
	// ReadOnly refuses every request that could change something (any
	// method but GET, HEAD and OPTIONS) with a 409 naming read-only mode
	// (statefun run --read-only).
	ReadOnly bool
	// Jobs runs the bulk jobs (jobs.go); in cluster mode UseJobs sets it,
	// with its backend. Nil: /jobs and /orphans answer 501.
	Jobs *jobs.Manager
}

// Server serves the state API routes on the admin listener.
type Server struct {
	eng    Engine
	st     Store
	tokens []Token
	opts   Options
	// browsers refuses what a web page makes a browser send (guard.go).
	browsers *browserguard.Guard
	onces    onceCalls // changes other nodes sent once (once.go)
	// clusterJobs is the jobs' backend in cluster mode (jobscluster.go).
	clusterJobs *ClusterJobs
	imports     importCalls // import lines being applied (import.go)
	// seq numbers the mutation ids this server makes (newMutationID).
	seq atomic.Uint32
}

// New returns the API over the partitions of a running engine and the
// durable store they write (the embedded *engine.Engine and its
// engine.Reads).
func New(eng Engine, st Store, opts Options) *Server {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 8 << 20
	}
	if opts.MaxWait <= 0 {
		opts.MaxWait = time.Minute
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	// A malformed origin trusts nothing; Options.Validate reports it.
	return &Server{eng: eng, st: st, tokens: opts.Tokens, opts: opts, browsers: browserguard.New(guardOptions(opts)), onces: onceCalls{m: map[string]*onceCall{}}}
}

// route is one path of the API and the method that serves it.
type route struct {
	path  string
	serve func(*Server, http.ResponseWriter, *http.Request)
}

// routes are the paths the API serves, each with every method: a handler
// answers a method it does not serve with a problem+json 405 and Allow. A
// path ending in '/' covers every path below it. openapi_test.go checks
// that openapi.json documents each of them.
var routes = []route{
	{"/state", (*Server).serveState},
	{"/state/", (*Server).serveState},
	{"/mutations", (*Server).serveMutations},
	{"/mutations/", (*Server).serveMutations},
	{"/audit", (*Server).serveAudit},
	{"/ingresses", (*Server).serveIngresses},
	{"/ingresses/", (*Server).serveIngresses},
	{"/openapi.json", (*Server).serveOpenAPI},
	{"/failing", (*Server).serveFailing},
	{"/pauses", (*Server).servePauses},
	{"/inbox/", (*Server).serveInbox},
	{"/pause/", (*Server).servePause},
	{"/resume/", (*Server).serveResume},
	{"/addresses/", (*Server).serveAddresses},
	{"/dead-letters/", (*Server).serveDeadLetters},
	{"/whoami", (*Server).serveWhoami},
	{"/overview", (*Server).serveOverview},
	{"/endpoints", (*Server).serveEndpoints},
	{"/cluster", (*Server).serveCluster},
	{"/backups", (*Server).serveBackups},
	{"/export/", (*Server).serveExport},
	{"/import/", (*Server).serveImport},
	{"/jobs", (*Server).serveJobs},
	{"/jobs/", (*Server).serveJobs},
	{"/orphans", (*Server).serveOrphans},
}

// Register mounts the API's routes on mux.
//
// A ServeMux answers a path that is not in canonical form (an empty
// segment, or a "." or ".." segment) with a 307 redirect to the cleaned
// path, before any handler runs, and a client that follows it (307 keeps
// the method) acts on another address: DELETE /state/ns/t//count becomes
// DELETE /state/ns/t/count, every entry of the id "count". Serve Handler
// instead, which answers such paths with a 400.
func (s *Server) Register(mux *http.ServeMux) {
	for _, rt := range routes {
		mux.HandleFunc(rt.path, func(w http.ResponseWriter, r *http.Request) {
			s.serve(rt, w, r)
		})
	}
}

// Handler returns a handler that serves the API's routes itself, matching
// the escaped path as received (no cleaning, no redirects), and hands every
// other request to next (the admin listener's mux).
func (s *Server) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.EscapedPath()
		for _, rt := range routes {
			if p == rt.path || (strings.HasSuffix(rt.path, "/") && strings.HasPrefix(p, rt.path)) {
				s.serve(rt, w, r)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// serve answers r with rt once the guard let it through and, for a
// request another node signed, its signature verified; a change another
// node sent once is applied once (once.go).
func (s *Server) serve(rt route, w http.ResponseWriter, r *http.Request) {
	if !s.guard(w, r) {
		return
	}
	r, ok := s.fromNode(w, r)
	if !ok {
		return
	}
	if s.readOnlyRefused(w, r) {
		return
	}
	if id, ok := sentOnce(r); ok {
		s.once(w, r, id, func(w http.ResponseWriter, r *http.Request) { rt.serve(s, w, r) })
		return
	}
	rt.serve(s, w, r)
}

func (s *Server) serveState(w http.ResponseWriter, r *http.Request) {
	segs, err := splitPath(r.URL.EscapedPath(), "/state")
	if err != nil {
		fail(w, r, http.StatusBadRequest, "bad address: "+err.Error())
		return
	}
	history := len(segs) == 5 && segs[4] == "history"
	if history {
		segs = segs[:4]
	}
	if len(segs) > 4 {
		fail(w, r, http.StatusBadRequest, fmt.Sprintf("bad address: the path has %d segments; the deepest is /state/<namespace>/<type>/<id>/<state> (percent-encode a '/' inside an id as %%2F)", len(segs)))
		return
	}
	scope := ScopeRead
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		scope = ScopeWrite
	}
	principal, ok := s.authorize(w, r, scope)
	if !ok {
		return
	}
	var a address.Address
	if len(segs) >= 2 {
		a.Type = address.TypeName{Namespace: segs[0], Name: segs[1]}
	}
	if len(segs) >= 3 {
		a.ID = segs[2]
	}
	if len(segs) >= 3 && (r.Method == http.MethodGet || r.Method == http.MethodHead) && s.forwardRead(w, r, a) {
		return
	}
	// A restore (POST) reads the history of the owner's store: it is sent
	// there. PUT and DELETE travel as commands instead (commands.go).
	if len(segs) >= 3 && r.Method == http.MethodPost && s.forwardChange(w, r, a) {
		return
	}
	switch len(segs) {
	case 4:
		if history {
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				methodNotAllowed(w, r, "GET, HEAD")
				return
			}
			s.getHistory(w, r, a, segs[3])
			return
		}
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			if s.readPast(w, r, a, segs[3]) {
				return
			}
			s.getEntry(w, r, a, segs[3])
		case http.MethodPost:
			s.restore(w, r, principal, a, segs[3])
		case http.MethodPut:
			s.putEntry(w, r, principal, a, segs[3])
		case http.MethodDelete:
			s.deleteEntry(w, r, principal, a, segs[3])
		default:
			methodNotAllowed(w, r, "GET, HEAD, PUT, DELETE, POST")
		}
	case 3:
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			if s.readPast(w, r, a, "") {
				return
			}
			s.listEntries(w, r, a)
		case http.MethodDelete:
			s.deleteAddress(w, r, principal, a)
		case http.MethodPost:
			s.restore(w, r, principal, a, "")
		default:
			methodNotAllowed(w, r, "GET, HEAD, DELETE, POST")
		}
	default:
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			methodNotAllowed(w, r, "GET, HEAD")
			return
		}
		switch len(segs) {
		case 2:
			s.listIDs(w, r, a.Type)
		case 1:
			s.listTypes(w, r, segs[0])
		default:
			s.listTypes(w, r, "")
		}
	}
}

func methodNotAllowed(w http.ResponseWriter, r *http.Request, allow string) {
	w.Header().Set("Allow", allow)
	fail(w, r, http.StatusMethodNotAllowed, fmt.Sprintf("%s is not allowed here; allowed: %s", r.Method, allow))
}

// engineError maps an engine error to a response.
func (s *Server) engineError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, engine.ErrMoved):
		s.moved(w, r, err)
	case errors.Is(err, engine.ErrBusy):
		w.Header().Set("Retry-After", "1")
		fail(w, r, http.StatusServiceUnavailable, "the partition's queue is full; retry later")
	case errors.Is(err, engine.ErrTooLarge):
		fail(w, r, http.StatusRequestEntityTooLarge, strings.TrimPrefix(err.Error(), "engine: "))
	case errors.Is(err, engine.ErrClosed):
		w.Header().Set("Retry-After", "5")
		fail(w, r, http.StatusServiceUnavailable, "the runtime is shutting down")
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		w.Header().Set("Retry-After", "1")
		fail(w, r, http.StatusServiceUnavailable, "the request ended before the runtime answered: "+err.Error())
	default:
		fail(w, r, http.StatusInternalServerError, err.Error())
	}
}

// moved answers a request about a partition this node does not own
// (cluster mode): see notOwned.
func (s *Server) moved(w http.ResponseWriter, r *http.Request, err error) {
	p, ok := engine.MovedPartition(err)
	if !ok {
		w.Header().Set("Retry-After", "1")
		fail(w, r, http.StatusServiceUnavailable, "the address's partition is not served by this node (it moved, or is moving); retry")
		return
	}
	s.notOwned(w, r, p)
}

// notOwned answers a request about partition p, which this node does not
// own: 503 with Retry-After, naming the owner and its admin URL when they
// are known. Reads are forwarded to the owner (remote.go): this is the
// answer to one that was forwarded here already, or that found no owner
// in time.
func (s *Server) notOwned(w http.ResponseWriter, r *http.Request, p int) {
	w.Header().Set("Retry-After", "1")
	pr := problem{Status: http.StatusServiceUnavailable, Partition: &p}
	if s.opts.Owner != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		node, url, known := s.opts.Owner(ctx, p)
		cancel()
		if known {
			pr.OwnerNode, pr.OwnerURL = node, url
		}
	}
	switch {
	case pr.OwnerNode != "" && pr.OwnerNode == s.opts.NodeID:
		pr.Detail = fmt.Sprintf("partition %d, which holds this address, is assigned to this node and being restored; retry", p)
	case pr.OwnerNode != "" && pr.OwnerURL != "":
		pr.Detail = fmt.Sprintf("partition %d, which holds this address, is owned by node %s (%s), not by this node; retry, or send the request there", p, pr.OwnerNode, pr.OwnerURL)
	case pr.OwnerNode != "" && s.distrusted(pr.OwnerNode) != "":
		pr.Detail = fmt.Sprintf("partition %d, which holds this address, is owned by node %s, and this node does not trust %s, so no request was sent there: "+
			"if %s is a node of this application, give it the same cluster secret as the others; if not, someone who may write the meta topic and join the consumer group published it (docs/explanation/cluster.md, \"Trust between nodes\")",
			p, pr.OwnerNode, s.distrusted(pr.OwnerNode), pr.OwnerNode)
	case pr.OwnerNode != "":
		pr.Detail = fmt.Sprintf("partition %d, which holds this address, is owned by node %s, not by this node, and its admin URL is not known; retry", p, pr.OwnerNode)
	default:
		pr.Detail = fmt.Sprintf("partition %d, which holds this address, is not served by this node and has no owner at the moment (it is moving); retry", p)
	}
	writeProblem(w, r, pr)
}

// distrusted says why this node does not trust node's member record
// (Options.Distrusted); "" when it has nothing against it.
func (s *Server) distrusted(node string) string {
	if s.opts.Distrusted == nil {
		return ""
	}
	return s.opts.Distrusted(node)
}

// newMutationID returns a unique, time-ordered mutation id.
//
// Ids sort in creation order within this server — the millisecond of
// Options.Now, then a counter — and the audit log breaks ties of one
// millisecond by id, so the mutations an operator sends one after another
// are listed in that order. The random tail keeps ids unique across
// restarts and processes. A clock before 1970 counts as 1970: a negative
// millisecond would sort after the others.
func (s *Server) newMutationID() string {
	var b [4]byte
	rand.Read(b[:])
	ms := max(s.opts.Now().UnixMilli(), 0)
	// "<ms base 36>-<seq, 8 hex digits>-<8 hex digits>", built in place:
	// one allocation, the string.
	var id [13 + 1 + 8 + 1 + 8]byte
	out := strconv.AppendInt(id[:0], ms, 36)
	out = append(out, '-')
	var seq [4]byte
	binary.BigEndian.PutUint32(seq[:], s.seq.Add(1))
	out = hex.AppendEncode(out, seq[:])
	out = append(out, '-')
	out = hex.AppendEncode(out, b[:])
	return string(out)
}

func etag(v uint64) string { return `"` + strconv.FormatUint(v, 10) + `"` }

func versionString(v uint64) *string {
	if v == 0 {
		return nil
	}
	s := strconv.FormatUint(v, 10)
	return &s
}
