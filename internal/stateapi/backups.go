package stateapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/statefun-go/statefun/internal/cluster/forward"
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
	// Backup is, on a node's share of a cluster backup, the backup's id
	// (sent by the node that coordinates it, never by a client).
	Backup string `json:"backup,omitempty"`
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
	if req.Backup != "" && !forward.Forwarded(r) {
		fail(w, r, http.StatusBadRequest, `"backup" is sent only by the node that coordinates a cluster backup`)
		return
	}
	if s.opts.Cluster != nil && s.opts.BackupPart != nil {
		_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
		if forward.Forwarded(r) {
			s.backupShare(w, r, req, principal)
		} else {
			s.clusterBackup(w, r, req)
		}
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
	if err == nil {
		writeJSON(w, http.StatusCreated, m)
		return
	}
	backupFailed(w, r, err)
}

// backupFailed answers a failed backup (or a node's part of one).
func backupFailed(w http.ResponseWriter, r *http.Request, err error) {
	switch {
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

// BackupPartFunc writes, on a cluster node, its part of the cluster backup
// id: a backup of its store in a directory of its own under dir on the
// node's host, recording parts, the partitions it serves of the ones
// asked for (Options.BackupPart). It returns the part's manifest and
// directory name (relative to dir).
type BackupPartFunc func(ctx context.Context, dir, id string, parts []int, principal string) (*store.BackupManifest, string, error)

// clusterBackupWait is how long the nodes of a cluster backup have to
// write their parts, beyond the forwarding budget.
const clusterBackupWait = 30 * time.Minute

// shareBackupAnswer is a node's answer to its share of a cluster backup.
type shareBackupAnswer struct {
	Dir      string                `json:"dir"`
	Manifest *store.BackupManifest `json:"manifest"`
}

// backupShare answers a node's share of a cluster backup another node
// coordinates: the partitions of the share this node serves are backed up
// (its store's checkpoint, with their positions), and the answer names
// them in forward.Partitions; a node serving none of them answers with
// none.
func (s *Server) backupShare(w http.ResponseWriter, r *http.Request, req backupRequest, principal string) {
	if req.Backup == "" || r.Header.Get(forward.Partitions) == "" {
		fail(w, r, http.StatusBadRequest, fmt.Sprintf(`a node's share of a cluster backup needs "backup" and %s`, forward.Partitions))
		return
	}
	owned := s.opts.Cluster.Owned()
	var parts []int
	for _, p := range forward.ParsePartitions(r.Header.Get(forward.Partitions)) {
		if slices.Contains(owned, p) {
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 {
		writeJSON(w, http.StatusOK, shareBackupAnswer{})
		return
	}
	m, dir, err := s.opts.BackupPart(r.Context(), req.To, req.Backup, parts, principal)
	if err != nil {
		backupFailed(w, r, err)
		return
	}
	var done []int
	for _, pb := range m.Cluster.Partitions {
		done = append(done, pb.Partition)
	}
	w.Header().Set(forward.Partitions, forward.FormatPartitions(done))
	writeJSON(w, http.StatusOK, shareBackupAnswer{Dir: dir, Manifest: m})
}

// clusterBackup coordinates a cluster backup: every partition's owner
// writes its part on its own host, under req.To; then this node writes
// the top-level manifest there, listing every partition and the part
// that holds it. A partition no owner backed up fails the backup with a
// 503 naming it, and no top-level manifest is written.
func (s *Server) clusterBackup(w http.ResponseWriter, r *http.Request, req backupRequest) {
	if !filepath.IsAbs(req.To) || filepath.Clean(req.To) != req.To {
		fail(w, r, http.StatusBadRequest, fmt.Sprintf("%q is not a clean absolute path; give the directory on the nodes' hosts to write the backup to, e.g. /var/backups/statefun/2026-12-02", req.To))
		return
	}
	if store.IsClusterBackup(req.To) {
		fail(w, r, http.StatusBadRequest, fmt.Sprintf("%s holds a cluster backup already: write a backup to a new or empty directory", req.To))
		return
	}
	start := time.Now()
	view := s.opts.ClusterView(r.Context())
	id := fmt.Sprintf("%s-%s", start.UTC().Format("20060102T150405.000Z"), s.newMutationID())
	body, _ := json.Marshal(backupRequest{To: req.To, Backup: id})
	fw := r.Clone(r.Context())
	fw.Header.Set("Content-Type", "application/json")
	fw.Header.Del("Content-Length")
	all := make([]int, view.Partitions)
	for p := range all {
		all[p] = p
	}
	answers, refusal, missing := s.opts.Cluster.Spread(fw, body, all, clusterBackupWait)
	if refusal != nil {
		s.passAnswer(w, *refusal)
		return
	}
	var parts []*store.BackupManifest
	var dirs []string
	for _, a := range answers {
		var sa shareBackupAnswer
		if err := json.Unmarshal(a.Body, &sa); err != nil {
			fail(w, r, http.StatusBadGateway, fmt.Sprintf("node %s answered its share of the backup with a body this node cannot read: %v", a.Node, err))
			return
		}
		if sa.Manifest != nil && sa.Manifest.Cluster != nil {
			parts, dirs = append(parts, sa.Manifest), append(dirs, sa.Dir)
		}
	}
	m, unheld := store.NewClusterManifest(view.App, id, req.To, view.Partitions, start, parts, dirs)
	missing = append(missing, unheld...)
	slices.Sort(missing)
	missing = slices.Compact(missing)
	if len(missing) > 0 {
		w.Header().Set(MissingHeader, forward.FormatPartitions(missing))
		w.Header().Set("Retry-After", "1")
		var written []string
		for _, n := range m.Nodes {
			written = append(written, fmt.Sprintf("%s on node %s", filepath.Join(req.To, n.Dir), n.Node))
		}
		fail(w, r, http.StatusServiceUnavailable, fmt.Sprintf("the backup is incomplete: no node backed up partitions %s (they are moving, or their owner is unreachable), so no cluster manifest was written; remove the parts written (%s) and retry into a new directory",
			forward.FormatPartitions(missing), strings.Join(written, ", ")))
		return
	}
	if err := os.Mkdir(req.To, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		fail(w, r, http.StatusBadRequest, fmt.Sprintf("the backup's parts are written, but the directory for its manifest on this node's host could not be made: %v", err))
		return
	}
	m.TotalMillis = time.Since(start).Milliseconds()
	if err := store.WriteClusterManifest(m); err != nil {
		backupFailed(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, m)
}

// BackupFunc takes a backup of the store to dir on the runtime's host,
// for principal (Options.Backup).
type BackupFunc func(ctx context.Context, dir, principal string) (*store.BackupManifest, error)
