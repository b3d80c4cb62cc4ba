package stateapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/statefun-go/statefun/internal/cluster/forward"
	"github.com/statefun-go/statefun/internal/jobs"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// This file serves the bulk jobs (internal/jobs; docs/how-to/bulk-jobs.md):
//
//	GET  /jobs                       every job, newest first
//	POST /jobs                       create and start a job (201)
//	POST /jobs/preview?sample=       what a job would do, nothing written
//	GET  /jobs/<id>                  one job and its progress
//	DELETE /jobs/<id>                forget an ended job (204)
//	POST /jobs/<id>/pause|resume|cancel
//	POST /jobs/<id>/revert           a job undoing every write of <id> (201)
//	GET  /jobs/<id>/writes?after=&limit=   the job's audit records
//	GET  /orphans                    state no deployed type or registered state owns
//
// In cluster mode (jobscluster.go) a job lives on the node that owns its
// home partition (jobs.Home): GET /jobs and GET /orphans gather every
// node's; a request about one job is sent to its home's owner; a job is
// created, and previewed, on the node asked.

// maxJobBody caps the body of POST /jobs and /jobs/preview.
const maxJobBody = 64 << 10

// noJobs is the detail of every jobs route of an API without jobs.
const noJobs = "bulk jobs are not served by this runtime"

func (s *Server) serveJobs(w http.ResponseWriter, r *http.Request) {
	segs, err := splitPath(r.URL.EscapedPath(), "/jobs")
	if err != nil || len(segs) > 2 {
		fail(w, r, http.StatusNotFound, "want /jobs, /jobs/preview, /jobs/<id> or /jobs/<id>/{pause,resume,cancel,revert,writes}")
		return
	}
	m := s.opts.Jobs
	if m == nil {
		fail(w, r, http.StatusNotImplemented, noJobs)
		return
	}
	if len(segs) >= 1 && segs[0] != "preview" && s.jobElsewhere(w, r, segs[0]) {
		return
	}
	switch {
	case len(segs) == 0:
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			if _, ok := s.authorize(w, r, ScopeRead); ok && !s.gather(w, r, jobsListing()) {
				s.localPart(w, r) // this node's: the jobs of its partitions
				writeJSON(w, http.StatusOK, map[string]any{"jobs": m.List()})
			}
		case http.MethodPost:
			s.createJob(w, r)
		default:
			methodNotAllowed(w, r, "GET, HEAD, POST")
		}
	case len(segs) == 1 && segs[0] == "preview":
		if r.Method != http.MethodPost {
			methodNotAllowed(w, r, "POST")
			return
		}
		s.previewJob(w, r)
	case len(segs) == 1:
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			if _, ok := s.authorize(w, r, ScopeRead); !ok {
				return
			}
			rec, err := m.Get(segs[0])
			s.jobAnswer(w, r, http.StatusOK, rec, err)
		case http.MethodDelete:
			if _, ok := s.authorize(w, r, ScopeWrite); !ok {
				return
			}
			if err := m.Delete(segs[0]); err != nil {
				s.jobError(w, r, err)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		default:
			methodNotAllowed(w, r, "GET, HEAD, DELETE")
		}
	default:
		s.jobAction(w, r, segs[0], segs[1])
	}
}

// jobAction answers POST /jobs/<id>/<action> and GET /jobs/<id>/writes.
func (s *Server) jobAction(w http.ResponseWriter, r *http.Request, id, action string) {
	m := s.opts.Jobs
	if action == "writes" {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			methodNotAllowed(w, r, "GET, HEAD")
			return
		}
		if _, ok := s.authorize(w, r, ScopeRead); ok {
			s.jobWrites(w, r, id)
		}
		return
	}
	var do func(string) (jobs.Record, error)
	switch action {
	case "pause":
		do = m.Pause
	case "resume":
		do = m.Resume
	case "cancel":
		do = m.Cancel
	case "revert":
	default:
		fail(w, r, http.StatusNotFound, fmt.Sprintf("no action %q; want pause, resume, cancel, revert or writes", action))
		return
	}
	if r.Method != http.MethodPost {
		methodNotAllowed(w, r, "POST")
		return
	}
	principal, ok := s.authorize(w, r, ScopeWrite)
	if !ok {
		return
	}
	if action != "revert" {
		rec, err := do(id)
		s.jobAnswer(w, r, http.StatusOK, rec, err)
		return
	}
	reason, err := s.reasonOf(r)
	if err != nil {
		fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	rec, err := m.Revert(id, principal, reason)
	if err != nil {
		s.jobError(w, r, err)
		return
	}
	w.Header().Set("Location", "/jobs/"+rec.ID)
	writeJSON(w, http.StatusCreated, rec)
}

// readSpec reads a job's definition from the body, strictly: an unknown
// field (a misspelt "were") must not silently select everything.
func (s *Server) readSpec(w http.ResponseWriter, r *http.Request) (jobs.Spec, bool) {
	var spec jobs.Spec
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		fail(w, r, http.StatusUnsupportedMediaType, fmt.Sprintf("Content-Type %q: a job is application/json", ct))
		return spec, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJobBody))
	if err != nil {
		fail(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("a job's definition is at most %d bytes", maxJobBody))
		return spec, false
	}
	d := json.NewDecoder(strings.NewReader(string(body)))
	d.DisallowUnknownFields()
	if err := d.Decode(&spec); err != nil {
		fail(w, r, http.StatusBadRequest, "the body is not a job definition: "+err.Error()+
			`; want {"select":{"type":"ns/name",...},"action":{"op":"set","expr":"value + 1"}}`)
		return spec, false
	}
	if d.More() {
		fail(w, r, http.StatusBadRequest, "the body holds more than one JSON value")
		return spec, false
	}
	return spec, true
}

func (s *Server) previewJob(w http.ResponseWriter, r *http.Request) {
	principal, ok := s.authorize(w, r, ScopeRead)
	if !ok {
		return
	}
	sample := 20
	if v := r.URL.Query().Get("sample"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > jobs.MaxSample {
			fail(w, r, http.StatusBadRequest, fmt.Sprintf("?sample=%q: want 0 to %d diffs", v, jobs.MaxSample))
			return
		}
		sample = n
	}
	spec, ok := s.readSpec(w, r)
	if !ok {
		return
	}
	p, err := s.opts.Jobs.Preview(r.Context(), spec, sample, principal)
	if err != nil {
		s.jobError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

func (s *Server) createJob(w http.ResponseWriter, r *http.Request) {
	principal, ok := s.authorize(w, r, ScopeWrite)
	if !ok {
		return
	}
	spec, ok := s.readSpec(w, r)
	if !ok {
		return
	}
	reason, err := s.reasonOf(r)
	if err != nil && strings.TrimSpace(spec.Reason) == "" {
		fail(w, r, http.StatusBadRequest, err.Error()+" (or a reason in the job's definition)")
		return
	}
	if spec.Reason == "" {
		spec.Reason = reason
	}
	rec, err := s.opts.Jobs.Create(spec, principal)
	if err != nil {
		s.jobError(w, r, err)
		return
	}
	w.Header().Set("Location", "/jobs/"+rec.ID)
	writeJSON(w, http.StatusCreated, rec)
}

func (s *Server) jobAnswer(w http.ResponseWriter, r *http.Request, status int, rec jobs.Record, err error) {
	if err != nil {
		s.jobError(w, r, err)
		return
	}
	writeJSON(w, status, rec)
}

// jobError maps the jobs package's errors to statuses.
func (s *Server) jobError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case jobs.IsBadSpec(err):
		fail(w, r, http.StatusBadRequest, strings.TrimPrefix(err.Error(), "jobs: bad job: "))
	case errors.Is(err, jobs.ErrNotFound):
		fail(w, r, http.StatusNotFound, err.Error()+"; GET /jobs lists them")
	case errors.Is(err, jobs.ErrState), errors.Is(err, jobs.ErrTooMany):
		fail(w, r, http.StatusConflict, err.Error())
	case errors.Is(err, jobs.ErrMoved), errors.Is(err, jobs.ErrUnavailable):
		w.Header().Set("Retry-After", "1")
		fail(w, r, http.StatusServiceUnavailable, err.Error())
	default:
		s.engineError(w, r, err)
	}
}

// jobWrites lists the audit records of a job's writes, oldest first.
func (s *Server) jobWrites(w http.ResponseWriter, r *http.Request, id string) {
	rec, err := s.opts.Jobs.Get(id)
	if err != nil {
		s.jobError(w, r, err)
		return
	}
	q := r.URL.Query()
	limit := 1000
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxAuditLimit {
			fail(w, r, http.StatusBadRequest, fmt.Sprintf("?limit= must be an integer from 1 to %d; page with ?after=", MaxAuditLimit))
			return
		}
		limit = n
	}
	var cursor *auditCursor
	from := rec.CreatedAt.Add(-time.Minute).UnixMilli()
	if v := q.Get("after"); v != "" {
		c, err := parseAuditCursor(v)
		if err != nil {
			fail(w, r, http.StatusBadRequest, err.Error())
			return
		}
		cursor, from = &c, max(from, c.At)
	}
	if r.Method == http.MethodHead {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		return
	}
	marker := jobs.Marker(id)
	out := []auditJSON{}
	var last *protocol.AuditRecord
	more := false
	var audit interface {
		ScanAuditFiltered(store.AuditFilter, func(*protocol.AuditRecord) bool) error
	} = s.st
	if s.clusterJobs != nil {
		// The job's writes are in the audit logs of their entries'
		// partitions: gathered from every node.
		audit = s.clusterJobs.StoreAs(s.Caller(r).Principal)
	}
	err = audit.ScanAuditFiltered(store.AuditFilter{From: from, To: math.MaxInt64, Principal: rec.Principal}, func(a *protocol.AuditRecord) bool {
		if r.Context().Err() != nil {
			return false
		}
		if !strings.Contains(a.GetMutation(), marker) || (cursor != nil && !cursor.after(a)) {
			return true
		}
		if len(out) == limit {
			more = true
			return false
		}
		last = a
		out = append(out, auditOf(a))
		return true
	})
	if err == nil {
		err = r.Context().Err()
	}
	if err != nil {
		s.jobError(w, r, err)
		return
	}
	var next *string
	if more {
		c := auditCursor{At: last.GetAt(), Mutation: last.GetMutation(), State: last.GetState()}.String()
		next = &c
	}
	writeJSON(w, http.StatusOK, map[string]any{"records": out, "next": next})
}

// serveOrphans answers GET /orphans.
func (s *Server) serveOrphans(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed(w, r, "GET, HEAD")
		return
	}
	if s.opts.Jobs == nil {
		fail(w, r, http.StatusNotImplemented, noJobs)
		return
	}
	if _, ok := s.authorize(w, r, ScopeRead); !ok {
		return
	}
	if len(r.URL.Query()) > 0 {
		fail(w, r, http.StatusBadRequest, "GET /orphans takes no parameters")
		return
	}
	if s.opts.Cluster != nil && !forward.Forwarded(r) && r.Method != http.MethodHead {
		s.gatherOrphans(w, r)
		return
	}
	s.localPart(w, r)
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.MaxWait)
	defer cancel()
	o, err := s.opts.Jobs.ListOrphans(ctx)
	if err != nil {
		s.engineError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, o)
}

// jobElsewhere answers, in cluster mode, a request about job id whose home
// partition another node owns, from that node, and reports whether it
// answered: a read is forwarded; a change is sent once, with a mutation id
// the owner applies once.
func (s *Server) jobElsewhere(w http.ResponseWriter, r *http.Request, id string) bool {
	if s.opts.Cluster == nil {
		return false
	}
	p := jobs.Home(id, s.eng.Partitions())
	if ownedNow(s, p) {
		return false
	}
	switch {
	case forward.Forwarded(r):
		s.notOwned(w, r, p)
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
		if !s.opts.Cluster.Forward(w, r, p) {
			s.notOwned(w, r, p)
		}
	default:
		s.sendOnce(w, r, r, p)
	}
	return true
}

// jobsListing merges GET /jobs: newest first, as each node lists its own.
func jobsListing() listing {
	return listing{field: "jobs", desc: true, key: func(item json.RawMessage) (string, error) {
		var j struct {
			ID        string    `json:"id"`
			CreatedAt time.Time `json:"createdAt"`
		}
		err := json.Unmarshal(item, &j)
		return fmt.Sprintf("%020d\x00%s", uint64(j.CreatedAt.UnixNano())^(1<<63), j.ID), err
	}}
}

// gatherOrphans answers GET /orphans in cluster mode: every node counts
// the orphans of the partitions it owns, and the counts add up.
func (s *Server) gatherOrphans(w http.ResponseWriter, r *http.Request) {
	answers, missing := s.opts.Cluster.Gather(r, 0, nil)
	type key struct{ ns, typ, state, reason string }
	by := map[key]*jobs.Orphan{}
	var order []key
	complete, answered := len(missing) == 0, false
	for _, a := range answers {
		switch {
		case a.Status != http.StatusOK && a.Status < 500:
			for k, vs := range passHeader(a.Header) {
				w.Header()[k] = vs
			}
			w.WriteHeader(a.Status)
			w.Write(a.Body)
			return
		case a.Status != http.StatusOK:
			continue
		}
		var page jobs.Orphans
		if err := json.Unmarshal(a.Body, &page); err != nil {
			fail(w, r, http.StatusBadGateway, fmt.Sprintf("node %s answered an orphans listing this node cannot read: %v", a.Node, err))
			return
		}
		answered = true
		complete = complete && page.Complete
		for _, o := range page.Orphans {
			k := key{o.Namespace, o.Type, o.State, o.Reason}
			if t := by[k]; t != nil {
				t.IDs, t.Entries, t.Bytes = t.IDs+o.IDs, t.Entries+o.Entries, t.Bytes+o.Bytes
				continue
			}
			o := o
			by[k] = &o
			order = append(order, k)
		}
	}
	if !answered {
		status, h, b := unavailable(missing)
		for k, vs := range h {
			w.Header()[k] = vs
		}
		w.WriteHeader(status)
		w.Write(b)
		return
	}
	sort.Slice(order, func(i, j int) bool {
		a, b := order[i], order[j]
		if a.ns != b.ns {
			return a.ns < b.ns
		}
		if a.typ != b.typ {
			return a.typ < b.typ
		}
		return a.state < b.state
	})
	out := struct {
		jobs.Orphans
		MissingPartitions []int `json:"missingPartitions,omitempty"`
	}{Orphans: jobs.Orphans{Orphans: []jobs.Orphan{}, Complete: complete}, MissingPartitions: missing}
	for _, k := range order {
		out.Orphans.Orphans = append(out.Orphans.Orphans, *by[k])
	}
	if len(missing) > 0 {
		w.Header().Set(MissingHeader, forward.FormatPartitions(missing))
	}
	writeJSON(w, http.StatusOK, out)
}
