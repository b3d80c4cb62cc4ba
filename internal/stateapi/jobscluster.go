package stateapi

// Cluster mode: the bulk jobs' backend (internal/jobs runs the same jobs
// on both engines; docs/explanation/cluster.md, "Bulk jobs"). A job's
// record is written by commits of its home partition (jobs.Home), so it is
// in that partition's changelog and moves with it; the job reads the
// entries of every partition from their owners through this node's own
// state API — the listings it gathers and the reads it forwards — and
// writes each entry as a command its owner applies once per mutation id.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/cluster/trust"
	"github.com/statefun-go/statefun/internal/engine"
	"github.com/statefun-go/statefun/internal/jobs"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
	"github.com/statefun-go/statefun/internal/types"
)

// JobsEngine is what the cluster backend uses of this node's engine: it
// writes a job's record in a commit of its home partition (PutJob; a nil
// record deletes it), and gives the round trips of the calls to remote
// functions that a job's pace hears (CallLatencies, jobs.Engine's).
type JobsEngine interface {
	PutJob(ctx context.Context, p int, id string, record []byte) error
	CallLatencies(cursor uint64, buf []time.Duration) ([]time.Duration, uint64)
}

// JobsLocal is what the cluster backend reads of this node's own store
// (*store.DB): the job records its partitions restored, and the orphans
// of the partitions it owns.
type JobsLocal interface {
	jobs.Local
	ScanJobs(fn func(id string, record []byte) error) error
}

// ClusterJobs is the jobs' backend in cluster mode.
type ClusterJobs struct {
	s     *Server
	local JobsLocal
	eng   JobsEngine
	// ctx ends when the node stops (Close): a read or write waiting for a
	// partition to come back gives up then.
	ctx    context.Context
	cancel context.CancelFunc
	// missingWait is clusterJobsMissingWait (shorter in tests).
	missingWait time.Duration
}

// Cluster jobs' patience: how long a read waits for partitions no node
// answers for (a node killed: its partitions move within seconds) before
// it is jobs.ErrUnavailable — a runner then goes on from its cursor at
// the next look, a preview or a new job is a 503.
const (
	clusterJobsMissingWait = 10 * time.Second
	clusterJobsRetry       = 250 * time.Millisecond
	// clusterJobsPageLimit is the size of the pages a job reads from every
	// node at once: entries, audit records.
	clusterJobsPageLimit = 500
)

// NewClusterJobs returns the backend of the jobs s serves (call UseJobs
// with the manager made of it).
func NewClusterJobs(s *Server, local JobsLocal, eng JobsEngine) *ClusterJobs {
	c := &ClusterJobs{s: s, local: local, eng: eng, missingWait: clusterJobsMissingWait}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	return c
}

// Close ends the waits of the backend's reads and writes.
func (c *ClusterJobs) Close() { c.cancel() }

// UseJobs sets the jobs manager s serves, and in cluster mode its backend;
// call it before the API serves.
func (s *Server) UseJobs(m *jobs.Manager, c *ClusterJobs) {
	s.opts.Jobs, s.clusterJobs = m, c
}

// StoreAs is the jobs.Store of a job run by principal: reads go to the
// other nodes in its name, with the read and write scopes its token has
// there.
func (c *ClusterJobs) StoreAs(principal string) jobs.Store {
	return &clusterJobStore{c: c, caller: trust.Caller{Principal: principal, Scopes: []string{ScopeRead, ScopeWrite}}}
}

// Store is the jobs.Store of the manager's own records (reads as nobody:
// the manager reads only its records through it).
func (c *ClusterJobs) Store() jobs.Store { return c.StoreAs("") }

// Engine is the jobs.Engine: writes travel as commands, applied once per
// mutation id by their owner (jobs.Config.IdempotentWrites).
func (c *ClusterJobs) Engine() jobs.Engine { return clusterJobEngine{c} }

// call answers a request to this node's own API, made in caller's name
// (as if another node had vouched for it), without the network.
func (c *ClusterJobs) call(ctx context.Context, caller trust.Caller, method, uri string,
	serve func(*Server, http.ResponseWriter, *http.Request), header ...string) (*recorder, error) {
	r, err := http.NewRequestWithContext(context.WithValue(ctx, nodeCallerKey{}, caller), method, "http://localhost"+uri, nil)
	if err != nil {
		return nil, err
	}
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := newRecorder()
	serve(c.s, w, r)
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w, nil
}

// complete calls a gathered listing until every partition answered: a
// page missing partitions (a node killed, a partition moving) would make
// a job skip their entries. It gives up after clusterJobsMissingWait.
func (c *ClusterJobs) complete(caller trust.Caller, uri string, serve func(*Server, http.ResponseWriter, *http.Request)) ([]byte, error) {
	deadline := time.Now().Add(c.missingWait)
	for {
		w, err := c.call(c.ctx, caller, http.MethodGet, uri, serve)
		if err != nil {
			return nil, err
		}
		missing := w.header.Get(MissingHeader)
		if w.status == http.StatusOK && missing == "" {
			return w.buf.Bytes(), nil
		}
		if w.status != http.StatusOK && w.status < 500 {
			return nil, fmt.Errorf("stateapi: jobs: GET %s: %d %s", uri, w.status, bytes.TrimSpace(w.buf.Bytes()))
		}
		if time.Now().After(deadline) {
			if missing == "" {
				missing = "?"
			}
			return nil, fmt.Errorf("%w: GET %s: no node answered for partitions %s within %v (they are moving, or their owner is down and they have not moved yet); retry", jobs.ErrUnavailable, uri, missing, c.missingWait)
		}
		select {
		case <-c.ctx.Done():
			return nil, c.ctx.Err()
		case <-time.After(clusterJobsRetry):
		}
	}
}

// clusterJobStore is a job's jobs.Store in cluster mode.
type clusterJobStore struct {
	c      *ClusterJobs
	caller trust.Caller
}

func typePath(t address.TypeName) string {
	return url.PathEscape(t.Namespace) + "/" + url.PathEscape(t.Name)
}

// ScanTypes lists the types holding state on any node.
func (st *clusterJobStore) ScanTypes(fn func(t address.TypeName) bool) error {
	b, err := st.c.complete(st.caller, "/state", (*Server).serveState)
	if err != nil {
		return err
	}
	var page struct {
		Types []typeInfo `json:"types"`
	}
	if err := json.Unmarshal(b, &page); err != nil {
		return fmt.Errorf("stateapi: jobs: the types listing: %w", err)
	}
	for _, t := range page.Types {
		if t.HoldsState && !fn(address.TypeName{Namespace: t.Namespace, Name: t.Type}) {
			return nil
		}
	}
	return nil
}

// ScanState pages through the entries of t gathered from every owner
// (GET /export).
func (st *clusterJobStore) ScanState(t address.TypeName, prefix string, after *store.StateCursor, fn func(id, state string, e store.Entry) bool) error {
	cursor := ""
	if after != nil {
		cursor = formatExportCursor(*after)
	}
	for {
		q := url.Values{"limit": {strconv.Itoa(clusterJobsPageLimit)}}
		if prefix != "" {
			q.Set("prefix", prefix)
		}
		if cursor != "" {
			q.Set("after", cursor)
		}
		b, err := st.c.complete(st.caller, "/export/"+typePath(t)+"?"+q.Encode(), (*Server).serveExport)
		if err != nil {
			return err
		}
		var page struct {
			Entries []ExportLine `json:"entries"`
			Next    *string      `json:"next"`
		}
		if err := json.Unmarshal(b, &page); err != nil {
			return fmt.Errorf("stateapi: jobs: an export page of %s: %w", t, err)
		}
		for _, l := range page.Entries {
			e, err := entryOfLine(l)
			if err != nil {
				return err
			}
			if !fn(l.Address.ID, l.State, e) {
				return nil
			}
		}
		if page.Next == nil {
			return nil
		}
		cursor = *page.Next
	}
}

// entryOfLine reads an export line back into an entry.
func entryOfLine(l ExportLine) (store.Entry, error) {
	e := store.Entry{Typename: l.Typename}
	var err error
	if e.Version, err = strconv.ParseUint(l.Version, 10, 64); err != nil {
		return e, fmt.Errorf("stateapi: jobs: an export line of %s/%s/%s has version %q", l.Address.Type, l.Address.ID, l.State, l.Version)
	}
	if l.ExpiresAt != nil {
		e.ExpiresAt = l.ExpiresAt.UnixMilli()
	}
	if l.ValueBase64 != nil {
		e.Value, err = base64.StdEncoding.DecodeString(*l.ValueBase64)
	} else {
		e.Value, err = types.FromJSONValue(l.Typename, l.Value)
	}
	if err != nil {
		return e, fmt.Errorf("stateapi: jobs: the value of %s/%s/%s: %w", l.Address.Type, l.Address.ID, l.State, err)
	}
	return e, nil
}

// StateStatsOf counts the entries of t that keep accepts, reading at most
// maxKeys of them, through the owners' export pages.
func (st *clusterJobStore) StateStatsOf(t address.TypeName, maxKeys int, keep func(id string) bool) (store.StateStats, error) {
	out := store.StateStats{Complete: true}
	last := ""
	read := 0
	err := st.ScanState(t, "", nil, func(id, state string, e store.Entry) bool {
		if read == maxKeys {
			out.Complete = false
			return false
		}
		read++
		if keep != nil && !keep(id) {
			return true
		}
		out.Entries++
		out.Bytes += int64(len(id) + len(state) + len(e.Value) + len(e.Typename))
		if id != last {
			out.IDs++
			last = id
		}
		return true
	})
	return out, err
}

// ScanAuditFiltered pages through the audit records gathered from every
// node (GET /audit), oldest first.
func (st *clusterJobStore) ScanAuditFiltered(f store.AuditFilter, fn func(*protocol.AuditRecord) bool) error {
	if f.Newest {
		return errors.New("stateapi: jobs: the cluster backend reads the audit log oldest first only")
	}
	q := url.Values{"limit": {strconv.Itoa(clusterJobsPageLimit)}}
	for k, v := range map[string]string{"namespace": f.Namespace, "type": f.Type, "id": f.ID, "state": f.State,
		"principal": f.Principal, "mutation": f.Mutation} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if f.From > -1<<62 {
		q.Set("since", time.UnixMilli(f.From).UTC().Format(time.RFC3339Nano))
	}
	if f.To < 1<<62 {
		q.Set("until", time.UnixMilli(f.To).UTC().Format(time.RFC3339Nano))
	}
	for {
		b, err := st.c.complete(st.caller, "/audit?"+q.Encode(), (*Server).serveAudit)
		if err != nil {
			return err
		}
		var page struct {
			Records []auditJSON `json:"records"`
			Next    *string     `json:"next"`
		}
		if err := json.Unmarshal(b, &page); err != nil {
			return fmt.Errorf("stateapi: jobs: an audit page: %w", err)
		}
		for _, a := range page.Records {
			rec, err := auditRecordOf(a)
			if err != nil {
				return err
			}
			if !fn(rec) {
				return nil
			}
		}
		if page.Next == nil {
			return nil
		}
		q.Set("after", *page.Next)
	}
}

// auditRecordOf reads an audit record as GET /audit shows it back into
// the parts a job reads: what was written, and the before-image.
func auditRecordOf(a auditJSON) (*protocol.AuditRecord, error) {
	rec := &protocol.AuditRecord{Mutation: a.Mutation, At: a.At.UnixMilli(), Principal: a.Principal, Reason: a.Reason,
		Reverts: a.Reverts, Target: &protocol.Address{Namespace: a.Namespace, Type: a.Type, Id: a.ID}, State: a.State,
		Typename: a.Typename}
	for i, n := range opNames {
		if n == a.Op {
			rec.Op = int32(i)
		}
	}
	if a.Version != nil {
		v, err := strconv.ParseUint(*a.Version, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("stateapi: jobs: audit record %s: version %q", a.Mutation, *a.Version)
		}
		rec.Version = v
	}
	if b := a.Before; b != nil {
		v, err := base64.StdEncoding.DecodeString(b.ValueBase64)
		if err != nil {
			return nil, fmt.Errorf("stateapi: jobs: audit record %s: before-image: %w", a.Mutation, err)
		}
		bv, _ := strconv.ParseUint(b.Version, 10, 64)
		rec.HadBefore, rec.BeforeTypename, rec.BeforeValue, rec.BeforeVersion = true, b.Typename, v, bv
	}
	return rec, nil
}

// PutJob writes a job's record in a commit of its home partition, trying
// again while the partition is being rebuilt after an aborted
// transaction; one that is not this node's is jobs.ErrMoved.
func (st *clusterJobStore) PutJob(id string, record []byte) error {
	if record == nil {
		record = []byte{}
	}
	return st.c.putJob(id, record)
}

// DeleteJob deletes a job's record in a commit of its home partition.
func (st *clusterJobStore) DeleteJob(id string) error { return st.c.putJob(id, nil) }

func (c *ClusterJobs) putJob(id string, record []byte) error {
	p := jobs.Home(id, c.s.eng.Partitions())
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
		err := c.eng.PutJob(ctx, p, id, record)
		cancel()
		switch {
		case err == nil:
			return nil
		case errors.Is(err, engine.ErrMoved) && !ownedNow(c.s, p):
			return fmt.Errorf("%w: %w", jobs.ErrMoved, err)
		case errors.Is(err, engine.ErrClosed) || c.ctx.Err() != nil || time.Now().After(deadline):
			if errors.Is(err, engine.ErrMoved) || errors.Is(err, engine.ErrAborted) {
				return fmt.Errorf("%w: %w", jobs.ErrMoved, err)
			}
			return err
		}
		// Aborted, busy, or moved while the partition is rebuilt here.
		select {
		case <-c.ctx.Done():
		case <-time.After(clusterJobsRetry):
		}
	}
}

// ownedNow reports whether this node serves partition p.
func ownedNow(s *Server, p int) bool {
	for _, o := range s.opts.Cluster.Owned() {
		if o == p {
			return true
		}
	}
	return false
}

// ScanJobs reads the job records in this node's store (the manager keeps
// those of the partitions it owns).
func (st *clusterJobStore) ScanJobs(fn func(id string, record []byte) error) error {
	return st.c.local.ScanJobs(fn)
}

// clusterJobEngine is the jobs.Engine of cluster mode.
type clusterJobEngine struct{ c *ClusterJobs }

// Read returns an entry's latest applied value, read from its owner (a
// GET of the entry, forwarded): what the job evaluates again after a
// conflict.
func (e clusterJobEngine) Read(ctx context.Context, a address.Address, state string) (partition.Reply, error) {
	caller := trust.Caller{Principal: jobs.PrincipalOf(ctx), Scopes: []string{ScopeRead, ScopeWrite}}
	uri := "/state/" + typePath(a.Type) + "/" + url.PathEscape(a.ID) + "/" + url.PathEscape(state)
	deadline := time.Now().Add(e.c.missingWait)
	for {
		w, err := e.c.call(ctx, caller, http.MethodGet, uri, (*Server).serveState, "Accept", mediaOctet)
		if err != nil {
			return partition.Reply{}, err
		}
		switch {
		case w.status == http.StatusNotFound:
			return partition.Reply{}, nil // no value
		case w.status == http.StatusOK:
			en := partition.Entry{Typename: w.header.Get("Statefun-Type"), Value: bytes.Clone(w.buf.Bytes())}
			v, err := strconv.ParseUint(strings.Trim(w.header.Get("ETag"), `"`), 10, 64)
			if err != nil {
				return partition.Reply{}, fmt.Errorf("stateapi: jobs: GET %s: ETag %q", uri, w.header.Get("ETag"))
			}
			en.Version = v
			if x := w.header.Get("Statefun-Expires-At"); x != "" {
				if t, err := time.Parse(time.RFC3339Nano, x); err == nil {
					en.ExpiresAt = t.UnixMilli()
				}
			}
			return partition.Reply{Entries: []partition.StateEntry{{State: state, Entry: en}}}, nil
		case w.status < 500:
			return partition.Reply{}, fmt.Errorf("stateapi: jobs: GET %s: %d %s", uri, w.status, bytes.TrimSpace(w.buf.Bytes()))
		case time.Now().After(deadline):
			return partition.Reply{}, fmt.Errorf("%w: GET %s: %d %s", jobs.ErrUnavailable, uri, w.status, bytes.TrimSpace(w.buf.Bytes()))
		}
		// The partition is moving: its next owner answers.
		select {
		case <-ctx.Done():
			return partition.Reply{}, ctx.Err()
		case <-time.After(clusterJobsRetry):
		}
	}
}

// Mutate sends m as a command, whoever owns its address (this node too):
// the owner applies its id once, so a write the job sends again under the
// same id after a crash or a move is answered by its receipt. It waits
// for the owner's final receipt (m.Ack is taken as committed), sending it
// again while the owner cannot be reached.
func (e clusterJobEngine) Mutate(ctx context.Context, m partition.Mutation) (partition.Receipt, error) {
	m.Ack = partition.AckCommitted
	caller := trust.Caller{Principal: m.Principal, Scopes: []string{ScopeRead, ScopeWrite}}
	for {
		rc, err := e.c.s.opts.Commands.Send(ctx, m, caller)
		var ce CommandError
		switch {
		case err == nil:
			return rc, nil
		case errors.As(err, &ce) && ce.HTTPStatus() == http.StatusRequestEntityTooLarge:
			return rc, fmt.Errorf("%w: %s", engine.ErrTooLarge, ce.Error())
		case errors.As(err, &ce) && ce.HTTPStatus() != http.StatusServiceUnavailable:
			return rc, err
		case ctx.Err() != nil:
			return rc, ctx.Err()
		}
		select {
		case <-ctx.Done():
			return partition.Receipt{}, ctx.Err()
		case <-time.After(clusterJobsRetry):
		}
	}
}

func (e clusterJobEngine) SpecsOf(t address.TypeName) []partition.Spec { return e.c.s.eng.SpecsOf(t) }

// WaitDurable: every write was answered committed already.
func (e clusterJobEngine) WaitDurable(ctx context.Context, p int, min uint64) (uint64, bool, error) {
	return min, true, nil
}

func (e clusterJobEngine) Partitions() int { return e.c.s.eng.Partitions() }

// CallLatencies: this node's calls, those its job's writes compete with
// (none without an engine).
func (e clusterJobEngine) CallLatencies(cursor uint64, buf []time.Duration) ([]time.Duration, uint64) {
	if e.c.eng == nil {
		return buf, cursor
	}
	return e.c.eng.CallLatencies(cursor, buf)
}
