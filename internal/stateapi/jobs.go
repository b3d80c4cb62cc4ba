package stateapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

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

// maxJobBody caps the body of POST /jobs and /jobs/preview.
const maxJobBody = 64 << 10

// noJobs is the detail of every jobs route in cluster mode.
const noJobs = "bulk jobs and orphans run in embedded mode only: a job keeps its cursor and record in the store of the one process that runs it, " +
	"and in cluster mode a partition's store belongs to whichever node owns it now; change entries one by one (PUT, DELETE) or run the job on an embedded runtime"

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
	switch {
	case len(segs) == 0:
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			if _, ok := s.authorize(w, r, ScopeRead); ok {
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
	if _, ok := s.authorize(w, r, ScopeRead); !ok {
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
	p, err := s.opts.Jobs.Preview(r.Context(), spec, sample)
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
	err = s.st.ScanAuditFiltered(store.AuditFilter{From: from, To: math.MaxInt64, Principal: rec.Principal}, func(a *protocol.AuditRecord) bool {
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
		s.engineError(w, r, err)
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
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.MaxWait)
	defer cancel()
	o, err := s.opts.Jobs.ListOrphans(ctx)
	if err != nil {
		s.engineError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, o)
}
