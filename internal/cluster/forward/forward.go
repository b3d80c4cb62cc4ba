// Package forward lets any node of a cluster-mode application answer the
// state access API (docs/explanation/cluster.md, "The state access API on every
// node"), for the partitions other nodes own.
//
// The contract:
//
//   - A node owns a partition when its engine runs it and the consumer
//     group's assignment gives it to the node (Owned).
//
//   - A read of one address whose partition this node does not own is
//     forwarded over HTTP to the owner's admin URL (the consumer group's
//     assignment names the node, its member record the URL: only a record
//     this node trusts, package members): the same method, path and query,
//     the caller's request headers and the owner's status, headers and body
//     passed back unchanged.
//
//   - The caller's credentials are never sent on: Authorization and
//     Cookie are dropped. With a cluster secret, every request is signed
//     instead (package trust), vouching for the caller this node
//     authenticated (Config.Caller), and the owner takes the caller from
//     the signature. Only http and https URLs are sent to.
//
//   - Every request a node sends to another carries the hop header
//     (Header, naming the sending node). A node answers a request that
//     carries it from itself alone, never forwarding or gathering again:
//     a read of a partition it does not own is its 503, a listing is the
//     part of its partitions, and the header Partitions lists them.
//
//   - While a partition moves (no owner known, the owner unreachable, or
//     answering 503 because it is restoring the partition or no longer
//     owns it) a read is retried with backoff for at most Budget and never
//     past the request's context. Then the caller answers 503 with
//     Retry-After itself (Forward reports false), or, when the owner
//     answered 503 last, that answer is passed back.
//
//   - A state change about one address that does not travel as a command
//     (a restore, a pause or resume of the address, an inbox repair,
//     deleting the address) is sent to the owner with a mutation id of its
//     own (MutationID), which the owner applies once (ForwardOnce). So it
//     is sent again, within the budget, whenever its outcome is not known:
//     no connection made, a 503, an answer lost after sending. An answer
//     still lost when the budget ends is a 502 that names the id.
//
//   - A listing is gathered: the request is sent, with the hop header, to
//     every node that owns a partition; each answers for the partitions it
//     owns. Partitions that no answer covers are asked again, within the
//     same budget, and are then reported missing to the caller, which
//     says so in its answer: a gathered listing is never silently short.
//
//   - A change every partition applies in its own partition (a pause or
//     resume of a function type) is spread (Spread): each owner gets its
//     share of the partitions, named in the header Partitions, and names
//     in its answer those it applied; the rest are sent again, within the
//     budget, to their owner then. The change carries its mutation id and
//     each partition applies an id once, so a share sent twice is
//     harmless.
//
// A counter, statefun_cluster_forwarded_requests_total, counts the
// requests by kind (read, write, gather, spread) and outcome.
package forward

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/statefun-go/statefun/internal/cluster/trust"
)

// Header marks a request one node sent to another (its value is the
// sending node's id): the receiving node answers it from itself alone.
const Header = "Statefun-Forwarded"

// Partitions is the header of a node's answer to a request with Header:
// the partitions it answered for, comma-separated.
const Partitions = "Statefun-Partitions"

// MutationID carries the mutation id of a state change: on a change
// ForwardOnce sends, the id the sending node gave it, which the owner
// applies once.
const MutationID = "Statefun-Mutation-Id"

// Config configures a Forwarder.
type Config struct {
	// NodeID is this node's id, sent as the hop header's value.
	NodeID string
	// Partitions is the application's P.
	Partitions int
	// Assignment returns the consumer group's assignment now: the node
	// owning each partition (a partition without an owner is absent), and
	// each node's admin URL ("" when its member record is not known).
	Assignment func(ctx context.Context) (owners map[int]string, urls map[string]string, err error)
	// Owned returns the partitions this node serves now.
	Owned func() []int
	// Budget bounds the retries of a request while a partition moves;
	// default 5s.
	Budget time.Duration
	// Client sends the requests; default one that gives up connecting
	// after a second (an owner that is gone must not hold the budget).
	Client *http.Client
	// Metrics receives the counter of forwarded requests (nil: none).
	Metrics prometheus.Registerer
	// Auth signs every request sent to another node with the cluster
	// secret; nil (no secret): requests go unsigned.
	Auth *trust.NodeAuth
	// Caller names the caller of a request this node authenticated, whom
	// a signed request vouches for; nil: nobody.
	Caller func(r *http.Request) trust.Caller
}

// Forwarder forwards reads and gathers listings.
type Forwarder struct {
	cfg     Config
	counter *prometheus.CounterVec

	// The assignment read last, reused for assignmentTTL: reading it is a
	// round trip to Kafka. A request that finds it wrong (the node named
	// did not answer, or answered 503) drops it.
	mu     sync.Mutex
	owners map[int]string
	urls   map[string]string
	readAt time.Time
}

// assignmentTTL is how long a read of the group's assignment is reused.
const assignmentTTL = 250 * time.Millisecond

// assignment returns the group's assignment, read at most assignmentTTL
// ago.
func (f *Forwarder) assignment(ctx context.Context) (map[int]string, map[string]string, error) {
	f.mu.Lock()
	if f.owners != nil && time.Since(f.readAt) < assignmentTTL {
		o, u := f.owners, f.urls
		f.mu.Unlock()
		return o, u, nil
	}
	f.mu.Unlock()
	o, u, err := f.cfg.Assignment(ctx)
	if err != nil {
		return nil, nil, err
	}
	f.mu.Lock()
	f.owners, f.urls, f.readAt = o, u, time.Now()
	f.mu.Unlock()
	return o, u, nil
}

// stale drops the assignment read last: the next request reads it anew.
func (f *Forwarder) stale() {
	f.mu.Lock()
	f.owners, f.urls = nil, nil
	f.mu.Unlock()
}

// New returns a Forwarder; it registers its counter.
func New(cfg Config) (*Forwarder, error) {
	if cfg.Assignment == nil || cfg.Owned == nil || cfg.Partitions <= 0 {
		return nil, errors.New("forward: Config.Assignment, Owned and Partitions are required")
	}
	if cfg.Budget <= 0 {
		cfg.Budget = 5 * time.Second
	}
	if cfg.Client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.DialContext = (&net.Dialer{Timeout: time.Second}).DialContext
		tr.MaxIdleConnsPerHost = 16
		cfg.Client = &http.Client{Transport: tr}
	}
	f := &Forwarder{cfg: cfg, counter: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "statefun_cluster_forwarded_requests_total",
		Help: "State API requests this node answered through other nodes, by kind (read: forwarded to the owner; write: a state change sent to the owner once; gather: a listing gathered from every node; spread: a type-level pause or resume sent to every owner) and outcome.",
	}, []string{"kind", "outcome"})}
	if cfg.Metrics != nil {
		if err := cfg.Metrics.Register(f.counter); err != nil {
			return nil, fmt.Errorf("forward: %w", err)
		}
	}
	return f, nil
}

// Owned returns the partitions this node serves now: those its engine
// runs that the group's assignment also gives it. A node whose session has
// not heard of a revocation yet (or never does) must not answer from its
// copy of a partition another node now owns and writes; when the
// assignment cannot be read, the engine's partitions are the answer.
func (f *Forwarder) Owned() []int {
	own := f.cfg.Owned()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	owners, _, err := f.assignment(ctx)
	if err != nil {
		return own
	}
	return slices.DeleteFunc(own, func(p int) bool { return owners[p] != f.cfg.NodeID })
}

// Forwarded reports whether r came from another node (carries Header).
func Forwarded(r *http.Request) bool { return r.Header.Get(Header) != "" }

// hopByHop are the headers that belong to one connection, not to the
// request or the answer passed on.
var hopByHop = []string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Proxy-Connection",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// credentials are the caller's headers that must not reach another node:
// a token or cookie given to this node is this node's to check, and the
// owner would accept a forged signature header no more than a replayed
// one.
var credentials = []string{"Authorization", "Cookie", trust.Header}

// request is r, to be sent to node at base with the hop header, with body
// (nil: none), signed when the node has a cluster secret.
func (f *Forwarder) request(ctx context.Context, r *http.Request, node, base string, body []byte) (*http.Request, error) {
	if u, err := url.Parse(base); err != nil || u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("forward: node %s's admin URL %q is not http or https; nothing is sent to it", node, base)
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, strings.TrimSuffix(base, "/")+r.URL.RequestURI(), nil)
	if err != nil {
		return nil, err
	}
	for k, vs := range r.Header {
		req.Header[k] = slices.Clone(vs)
	}
	for _, h := range append(hopByHop, credentials...) {
		req.Header.Del(h)
	}
	// Go's transport negotiates its own compression; an Accept-Encoding of
	// the caller's would hand it a body it does not decode.
	req.Header.Del("Accept-Encoding")
	req.Header.Set(Header, f.cfg.NodeID)
	if body != nil {
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
	}
	if f.cfg.Auth != nil {
		var c trust.Caller
		if f.cfg.Caller != nil {
			c = f.cfg.Caller(r)
		}
		f.cfg.Auth.Sign(req, node, c, body)
	}
	return req, nil
}

// backoff sleeps before the next attempt, doubling d up to a second; false
// when the deadline or ctx comes first.
func backoff(ctx context.Context, d *time.Duration, deadline time.Time) bool {
	wait := *d
	if time.Until(deadline) < wait {
		return false
	}
	*d = min(2**d, time.Second)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Forward answers r, a read of one address of partition p, from p's owner,
// retrying while p moves (see the package's contract). It reports false
// when no owner answered within the budget: the caller answers its 503.
func (f *Forwarder) Forward(w http.ResponseWriter, r *http.Request, p int) bool {
	return f.exchange(w, r, p, nil, false)
}

// exchange answers r from p's owner (with body, when r's was read), and
// reports false when no owner answered within the budget. It asks again,
// with backoff, while no owner is known, the owner cannot be reached, or
// it answers 503; the owner's last 503 is then the answer. once is for a
// state change: an error after it may have been sent is asked again only
// when r carries a mutation id (MutationID), which the owner applies
// once; without one, or when the budget ends, it is answered 502 (lost).
func (f *Forwarder) exchange(w http.ResponseWriter, r *http.Request, p int, body []byte, once bool) bool {
	kind := "read"
	if once {
		kind = "write"
	}
	ctx := r.Context()
	deadline := time.Now().Add(f.cfg.Budget)
	d := 50 * time.Millisecond
	var (
		last     *http.Response // the owner's last 503, its body read
		lostNode string         // the owner whose answer was lost last, and how
		lostErr  error
	)
	for {
		resp, node, err := f.attempt(ctx, r, p, body)
		switch {
		case err != nil && once && !notSent(err) && r.Header.Get(MutationID) == "":
			f.counter.WithLabelValues(kind, "lost").Inc()
			lost(w, node, err, "")
			return true
		case err != nil && once && !notSent(err):
			// The owner may have it: asking again is safe, since the owner
			// applies the id once, and answers a repeat as the first.
			lostNode, lostErr, last = node, err, nil
		case err == nil && resp != nil && resp.StatusCode != http.StatusServiceUnavailable:
			f.pass(w, resp)
			resp.Body.Close()
			f.counter.WithLabelValues(kind, "answered").Inc()
			return true
		case err == nil && resp != nil:
			// Read now: a connection held across the backoff could be cut.
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			resp.Body = io.NopCloser(bytes.NewReader(b))
			last = resp
		}
		f.stale()
		if !backoff(ctx, &d, deadline) {
			break
		}
	}
	switch {
	case last != nil:
		f.pass(w, last)
		f.counter.WithLabelValues(kind, "owner_unavailable").Inc()
		return true
	case lostErr != nil:
		f.counter.WithLabelValues(kind, "lost").Inc()
		lost(w, lostNode, lostErr, r.Header.Get(MutationID))
		return true
	}
	f.counter.WithLabelValues(kind, "no_owner").Inc()
	return false
}

// attempt sends r (with body, if not nil) to p's owner once: the answer,
// or the error of sending it, and the owner's id; nil and no error when p
// has no owner known with a URL.
func (f *Forwarder) attempt(ctx context.Context, r *http.Request, p int, body []byte) (*http.Response, string, error) {
	owners, urls, err := f.assignment(ctx)
	if err != nil {
		return nil, "", nil
	}
	node, ok := owners[p]
	if !ok || urls[node] == "" {
		return nil, "", nil
	}
	req, err := f.request(ctx, r, node, urls[node], body)
	if err != nil {
		return nil, node, nil
	}
	resp, err := f.cfg.Client.Do(req)
	return resp, node, err
}

// pass writes an answer to w unchanged.
func (f *Forwarder) pass(w http.ResponseWriter, resp *http.Response) {
	h := w.Header()
	for k, vs := range resp.Header {
		h[k] = vs
	}
	for _, k := range hopByHop {
		h.Del(k)
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}

// Answer is one node's answer to a gathered request.
type Answer struct {
	Node   string
	Status int
	Header http.Header
	Body   []byte
	// Partitions are those the node answered for (its Partitions header).
	Partitions []int
}

// maxAnswer caps the body of one node's answer to a gathered request.
const maxAnswer = 64 << 20

// Gather sends r, with the hop header, to every node that owns a partition
// and returns their answers, and the partitions no answer covered after
// retrying them within the budget (sorted). A node has the budget plus
// wait (what the request asks a node to wait, as ?wait= on a receipt) to
// answer. When stop returns true for an answer, Gather returns at once
// with the answers so far (the others are cancelled) and no missing
// partitions.
func (f *Forwarder) Gather(r *http.Request, wait time.Duration, stop func(Answer) bool) ([]Answer, []int) {
	todo := make(map[int]bool, f.cfg.Partitions)
	for p := range f.cfg.Partitions {
		todo[p] = true
	}
	var answers []Answer
	missing, ended := f.rounds(r, sweep{kind: "gather", timeout: f.cfg.Budget + wait, stop: stop}, todo,
		func(got []Answer, stopped bool) (covered []int, end bool) {
			answers = append(answers, got...)
			if stopped {
				return nil, true
			}
			for _, a := range got {
				covered = append(covered, a.Partitions...)
			}
			return covered, false
		})
	if ended {
		f.counter.WithLabelValues("gather", "complete").Inc()
		return answers, nil
	}
	return answers, missing
}

// sweep is how rounds sends a request: Gather's or Spread's.
type sweep struct {
	kind    string        // the counter's kind: gather or spread
	timeout time.Duration // how long the nodes of a round have to answer
	// With shares, each node gets body and the header Partitions naming
	// its share: the partitions still to do that it owns.
	shares bool
	body   []byte
	stop   func(Answer) bool // see fanOut
}

// rounds sends r, as s says, to the owners of the partitions in todo, in
// rounds within the budget. A round reads the group's assignment, sends r
// at once to every node owning a partition in todo and hands the answers
// (and whether s.stop took one) to take, which names the partitions they
// cover, or ends the request at once. Partitions still to do are sent
// again after backoff, with the assignment read anew. rounds returns the
// partitions no answer covered (sorted), and whether take ended it; when
// take did not, the counter counts the request partial or complete.
func (f *Forwarder) rounds(r *http.Request, s sweep, todo map[int]bool, take func(got []Answer, stopped bool) (covered []int, end bool)) (missing []int, ended bool) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	deadline := time.Now().Add(f.cfg.Budget)
	d := 50 * time.Millisecond
	for len(todo) > 0 {
		owners, urls, err := f.assignment(ctx)
		if err == nil {
			of := map[string][]int{}
			for p := range todo {
				if n, ok := owners[p]; ok && urls[n] != "" {
					of[n] = append(of[n], p)
				}
			}
			for _, ps := range of {
				slices.Sort(ps)
			}
			rctx, rcancel := context.WithTimeout(ctx, s.timeout)
			got, stopped := f.fanOut(rctx, rcancel, r, s, of, urls)
			rcancel()
			covered, end := take(got, stopped)
			if end {
				return nil, true
			}
			for _, p := range covered {
				delete(todo, p)
			}
		}
		if len(todo) == 0 {
			break
		}
		f.stale()
		if !backoff(r.Context(), &d, deadline) {
			break
		}
	}
	for p := range todo {
		missing = append(missing, p)
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		f.counter.WithLabelValues(s.kind, "partial").Inc()
	} else {
		f.counter.WithLabelValues(s.kind, "complete").Inc()
	}
	return missing, false
}

// fanOut sends r to each node of of at once and collects the answers (a
// node that did not answer has none); stopped reports that s.stop took
// one. With s.shares, s.body goes to each node with the header Partitions
// naming its share in of.
func (f *Forwarder) fanOut(ctx context.Context, cancel context.CancelFunc, r *http.Request, s sweep, of map[string][]int, urls map[string]string) ([]Answer, bool) {
	var (
		mu      sync.Mutex
		out     []Answer
		stopped bool
		wg      sync.WaitGroup
	)
	for n := range of {
		wg.Add(1)
		go func() {
			defer wg.Done()
			src, body := r, []byte(nil)
			if s.shares {
				body = s.body
				if body == nil {
					body = []byte{}
				}
				// Set on a copy of r before it is signed.
				src = r.Clone(ctx)
				src.Header.Set(Partitions, FormatPartitions(of[n]))
			}
			req, err := f.request(ctx, src, n, urls[n], body)
			if err != nil {
				return
			}
			resp, err := f.cfg.Client.Do(req)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
			if err != nil {
				return
			}
			a := Answer{Node: n, Status: resp.StatusCode, Header: resp.Header, Body: b}
			if resp.StatusCode < 500 {
				// A node that failed answers for none of its partitions.
				a.Partitions = ParsePartitions(resp.Header.Get(Partitions))
			}
			mu.Lock()
			defer mu.Unlock()
			if stopped {
				return
			}
			out = append(out, a)
			if s.stop != nil && s.stop(a) {
				stopped = true
				cancel()
			}
		}()
	}
	wg.Wait()
	return out, stopped
}

// Spread sends r, with body, a change that each of parts applies in its
// own partition (a pause or resume of a function type), to the owners of
// parts: each owner at once, with the hop header and the header
// Partitions naming its share. An owner answers 200 naming in Partitions
// the ones of its share it applied; the others (moved, their owner
// unreachable or answering 5xx, an answer lost) are sent again to their
// owner as the group's assignment says then, with backoff, within the
// budget. Unlike ForwardOnce it may send a partition's share twice: the
// change must be idempotent (a type-level pause carries its mutation id,
// and each partition applies an id once). It returns the 200 answers, the
// first other answer below 500 (a refusal: 4xx; then it stops, and that is
// the answer), and the partitions no answer applied.
func (f *Forwarder) Spread(r *http.Request, body []byte, parts []int) (answers []Answer, refusal *Answer, missing []int) {
	return f.SpreadWait(r, body, parts, 0)
}

// SpreadWait is Spread for a change that takes its owners time (a
// backup): each round gives the nodes wait beyond the budget to answer.
func (f *Forwarder) SpreadWait(r *http.Request, body []byte, parts []int, wait time.Duration) (answers []Answer, refusal *Answer, missing []int) {
	todo := map[int]bool{}
	for _, p := range parts {
		todo[p] = true
	}
	missing, ended := f.rounds(r, sweep{kind: "spread", timeout: f.cfg.Budget + wait, shares: true, body: body}, todo,
		func(got []Answer, _ bool) (covered []int, end bool) {
			for _, a := range got {
				switch {
				case a.Status == http.StatusOK:
					answers = append(answers, a)
					covered = append(covered, a.Partitions...)
				case a.Status < 500:
					refusal = &a
					return nil, true
				}
			}
			return covered, false
		})
	if ended {
		f.counter.WithLabelValues("spread", "refused").Inc()
		return answers, refusal, nil
	}
	return answers, nil, missing
}

// FormatPartitions is the Partitions header's value of ps.
func FormatPartitions(ps []int) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ",")
}

// ParsePartitions reads a Partitions header's value; it skips what is not
// a partition number.
func ParsePartitions(v string) []int {
	var out []int
	for _, f := range strings.Split(v, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && n >= 0 {
			out = append(out, n)
		}
	}
	return out
}
