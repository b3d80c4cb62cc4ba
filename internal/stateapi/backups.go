package stateapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/statefun-go/statefun/internal/store"
)

// Backups (POST /backups) and read-only mode.

// ErrNoBackups is wrapped by the error Options.Backup returns where the
// runtime takes no backups (cluster mode): the API answers 409 with it.
var ErrNoBackups = errors.New("stateapi: backups are not taken here")

// maxBackupBody bounds the body of POST /backups.
const maxBackupBody = 64 << 10

// backupRequest is the body of POST /backups.
type backupRequest struct {
	To string `json:"to"`
}

// serveBackups answers POST /backups: a backup of the store, written on
// the runtime's host (Options.Backup).
func (s *Server) serveBackups(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		methodNotAllowed(w, r, "POST")
		return
	}
	principal, ok := s.authorize(w, r, ScopeWrite)
	if !ok {
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBackupBody+1))
	if err != nil {
		fail(w, r, http.StatusBadRequest, "reading the body: "+err.Error())
		return
	}
	if len(body) > maxBackupBody {
		fail(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is over %d bytes", maxBackupBody))
		return
	}
	var req backupRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		fail(w, r, http.StatusBadRequest, `the body must be a JSON object {"to": "<directory on the runtime's host>"}: `+err.Error())
		return
	}
	if req.To == "" {
		fail(w, r, http.StatusBadRequest, `"to" is required: the directory on the runtime's host to write the backup to`)
		return
	}
	if s.opts.Backup == nil {
		fail(w, r, http.StatusConflict, "this runtime takes no backups")
		return
	}
	// A backup of a large store to another filesystem may take longer
	// than the listener's write timeout: the answer waits for it (one
	// backup at a time, so one such request).
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
	m, err := s.opts.Backup(r.Context(), req.To, principal)
	switch {
	case err == nil:
		writeJSON(w, http.StatusCreated, m)
	case errors.Is(err, store.ErrBackupDest):
		fail(w, r, http.StatusBadRequest, err.Error())
	case errors.Is(err, store.ErrBackupRunning), errors.Is(err, ErrNoBackups):
		fail(w, r, http.StatusConflict, err.Error())
	case errors.Is(err, store.ErrNoRoom):
		fail(w, r, http.StatusInsufficientStorage, err.Error())
	default:
		fail(w, r, http.StatusInternalServerError, err.Error())
	}
}

// readOnlyRefused answers, in read-only mode, a request that could
// change something (any method but GET, HEAD and OPTIONS) with a 409
// naming the mode, once the caller is authenticated for writing; it
// reports whether it answered.
func (s *Server) readOnlyRefused(w http.ResponseWriter, r *http.Request) bool {
	if !s.opts.ReadOnly {
		return false
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	if _, ok := s.authorize(w, r, ScopeWrite); !ok {
		return true
	}
	fail(w, r, http.StatusConflict, fmt.Sprintf("the runtime runs in read-only mode (statefun run --read-only): it serves a store it does not change, so %s %s is refused. To change the store, start statefun on a copy of it without --read-only",
		r.Method, r.URL.EscapedPath()))
	return true
}

// BackupFunc takes a backup of the store to dir on the runtime's host,
// for principal (Options.Backup).
type BackupFunc func(ctx context.Context, dir, principal string) (*store.BackupManifest, error)
