package stateapi

// Cluster mode: a state change that does not travel as a command (a
// restore, a pause or resume of an address, an inbox repair, deleting an
// address, a revert, a re-send) is sent by the node that took it to the
// owner of its address (forward.ForwardOnce), with a mutation id that
// node gave it (MutationIDHeader). The owner applies an id once, so that
// the sender may send it again whenever it does not know the outcome —
// a 503, an answer lost on the way — and a change is never applied twice
// (docs/explanation/cluster.md, "The state access API on every node"):
//
//   - while an application of the id runs here, a repeat waits for its
//     answer, and gets the same answer;
//   - the application runs to its end whatever happens to the request that
//     started it (its context is not the request's): the engine answers
//     it, or the partition moves, or the engine stops. So an application
//     whose caller gave up is still known here until its outcome is;
//   - the answer is kept for onceKeep for repeats; afterwards, and on a
//     node the partition moved to, the id's receipt (receipts travel in
//     the changelog) answers a repeat;
//   - an application answered 503 (refused before it reached the
//     partition, or the partition moved away, the engine stopped) applied
//     nothing that is not in a receipt: a repeat runs again, after looking
//     for the receipt.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/statefun-go/statefun/internal/cluster/forward"
)

// onceKeep is how long the answer to a change sent once is kept for a
// repeat: longer than a sender retries (forward's budget).
const onceKeep = time.Minute

// onceCall is one application of a mutation id sent once, and its answer
// once done is closed.
type onceCall struct {
	done   chan struct{}
	status int
	header http.Header
	body   []byte
}

// onceCalls are the applications of ids sent once that run, or ended
// within onceKeep.
type onceCalls struct {
	mu sync.Mutex
	m  map[string]*onceCall
}

// sentOnce returns the mutation id of r when r is a state change another
// node sent once (the hop header and MutationIDHeader, not a share of a
// type-level change, which names its partitions and is applied once by
// the engine).
func sentOnce(r *http.Request) (string, bool) {
	id := r.Header.Get(MutationIDHeader)
	if id == "" || !forward.Forwarded(r) || r.Header.Get(forward.Partitions) != "" || r.Method == http.MethodGet || r.Method == http.MethodHead {
		return "", false
	}
	return id, true
}

// changeID returns the mutation id of a state change: the one the sending
// node gave a change sent once, else a new one.
func (s *Server) changeID(r *http.Request) string {
	if id, ok := sentOnce(r); ok && mutationIDPattern.MatchString(id) {
		return id
	}
	return s.newMutationID()
}

// once answers r, a state change another node sent once under mutation
// id, by serve, applying the id at most once (see the top of this file).
func (s *Server) once(w http.ResponseWriter, r *http.Request, id string, serve func(http.ResponseWriter, *http.Request)) {
	if !mutationIDPattern.MatchString(id) {
		fail(w, r, http.StatusBadRequest, fmt.Sprintf("%s %q is not a mutation id this API made", MutationIDHeader, id))
		return
	}
	// Before anything is looked up: a receipt is not for everyone.
	if _, ok := s.authorize(w, r, ScopeWrite); !ok {
		return
	}
	var c *onceCall
	for c == nil {
		s.onces.mu.Lock()
		running := s.onces.m[id]
		if running == nil {
			c = &onceCall{done: make(chan struct{})}
			s.onces.m[id] = c
		}
		s.onces.mu.Unlock()
		if running == nil {
			break
		}
		select {
		case <-running.done:
		case <-r.Context().Done():
			s.stillApplying(w, r, id)
			return
		}
		if running.status != http.StatusServiceUnavailable {
			replay(w, running)
			return
		}
		// It applied nothing that is not in a receipt; the one that ran it
		// dropped it.
	}
	if rc, ok, err := s.st.Receipt(id); err == nil && ok && rc.GetStatus() != "accepted" {
		// Applied here before onceKeep ago, or by the partition's owner
		// before it moved here.
		rec := newRecorder()
		out := storedReceipt(rc)
		out.Commit = s.receiptPosition(rc)
		writeJSON(rec, http.StatusOK, out)
		s.settle(id, c, rec)
		replay(w, c)
		return
	}
	limit := max(s.opts.MaxBodyBytes, forward.MaxOnceBody)
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil || int64(len(body)) > limit {
		rec := newRecorder()
		if err != nil {
			fail(rec, r, http.StatusBadRequest, "reading the body: "+err.Error())
		} else {
			fail(rec, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is over %d bytes", limit))
		}
		s.settle(id, c, rec)
		replay(w, c)
		return
	}
	// The request's context ends when its sender gives up; the application
	// must not: its outcome is what a repeat waits for.
	dr := r.Clone(context.WithoutCancel(r.Context()))
	dr.Body, dr.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	go func() {
		rec := newRecorder()
		serve(rec, dr)
		s.settle(id, c, rec)
	}()
	select {
	case <-c.done:
		replay(w, c)
	case <-r.Context().Done():
		s.stillApplying(w, r, id)
	}
}

// settle records rec as the answer of c, the application of id, and keeps
// it for onceKeep; a 503 is dropped at once (a repeat runs again).
func (s *Server) settle(id string, c *onceCall, rec *recorder) {
	c.status, c.header, c.body = rec.status, rec.header, rec.buf.Bytes()
	if c.status == 0 {
		c.status = http.StatusOK // the handler wrote nothing
	}
	close(c.done)
	drop := func() {
		s.onces.mu.Lock()
		if s.onces.m[id] == c {
			delete(s.onces.m, id)
		}
		s.onces.mu.Unlock()
	}
	if c.status == http.StatusServiceUnavailable {
		drop()
		return
	}
	time.AfterFunc(onceKeep, drop)
}

// stillApplying answers a change sent once whose application here has not
// ended when its request did.
func (s *Server) stillApplying(w http.ResponseWriter, r *http.Request, id string) {
	w.Header().Set("Retry-After", "1")
	w.Header().Set("Location", "/mutations/"+id)
	writeProblem(w, r, problem{Status: http.StatusServiceUnavailable, Mutation: id,
		Detail: fmt.Sprintf("mutation %s is being applied here and its outcome is not known yet; it applies once: read its receipt at /mutations/%s rather than sending the change again", id, id)})
}

// replay writes c's answer to w.
func replay(w http.ResponseWriter, c *onceCall) {
	h := w.Header()
	for k, vs := range c.header {
		h[k] = slices.Clone(vs)
	}
	w.WriteHeader(c.status)
	w.Write(c.body)
}

// recorder is a ResponseWriter that keeps the answer, for replay.
type recorder struct {
	header http.Header
	status int
	buf    bytes.Buffer
}

func newRecorder() *recorder { return &recorder{header: http.Header{}} }

func (rec *recorder) Header() http.Header { return rec.header }

func (rec *recorder) WriteHeader(status int) {
	if rec.status == 0 {
		rec.status = status
	}
}

func (rec *recorder) Write(b []byte) (int, error) {
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	return rec.buf.Write(b)
}
