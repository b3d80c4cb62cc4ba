package stateapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
	"github.com/statefun-go/statefun/internal/types"
)

// This file serves the history of entries (GET …/<state>/history), reads
// as of a point in the past (?asOf=, ?asOfTime=), restores (POST of an
// entry or address with ?asOf=) and reads that wait for a commit
// (?minCommit=): docs/reference/state-api.md, "History, as-of reads and restore".

// Limits of a history page: 100 records by default, at most 1000 (a
// record carries its value).
const (
	defaultHistoryLimit = 100
	MaxHistoryLimit     = 1000
)

// defaultMinCommitWait is how long a read with ?minCommit= waits for the
// commit by default (?wait= changes it, up to Options.MaxWait).
const defaultMinCommitWait = 5 * time.Second

// position is the token of a receipt's commit: "<partition>.<commit id>".
// Commit ids count per partition, so the token names both.
func position(partition int, commit uint64) string {
	return strconv.Itoa(partition) + "." + strconv.FormatUint(commit, 10)
}

// parsePosition reads a ?minCommit= token for an address of partition p:
// "<partition>.<commit>" (the partition must be p's) or a bare commit id of
// p.
func parsePosition(v string, p int) (uint64, error) {
	part, commit, ok := strings.Cut(v, ".")
	if !ok {
		part, commit = strconv.Itoa(p), v
	}
	n, err1 := strconv.Atoi(part)
	c, err2 := strconv.ParseUint(commit, 10, 64)
	if err1 != nil || err2 != nil || n < 0 {
		return 0, fmt.Errorf("?minCommit=%q: want a receipt's commit, <partition>.<commit id>, or a commit id", v)
	}
	if n != p {
		return 0, fmt.Errorf("?minCommit=%q names partition %d; this address is in partition %d (a commit of another partition says nothing about it)", v, n, p)
	}
	return c, nil
}

// awaitMinCommit makes a read with ?minCommit= wait until that commit of
// the address's partition is durable: up to ?wait= (default 5s, at most
// MaxWait), then a 412 with the partition's position. It reports whether
// the read may go on.
func (s *Server) awaitMinCommit(w http.ResponseWriter, r *http.Request, a address.Address) bool {
	q := r.URL.Query()
	v := q.Get("minCommit")
	if v == "" {
		return true
	}
	p := s.partitionOf(a)
	min, err := parsePosition(v, p)
	if err != nil {
		fail(w, r, http.StatusBadRequest, err.Error())
		return false
	}
	wait := defaultMinCommitWait
	if wv := q.Get("wait"); wv != "" {
		d, err := time.ParseDuration(wv)
		if err != nil || d < 0 {
			fail(w, r, http.StatusBadRequest, fmt.Sprintf("?wait=%q: want a duration like 5s", wv))
			return false
		}
		wait = d
	}
	ctx, cancel := context.WithTimeout(r.Context(), min64(wait, s.opts.MaxWait))
	defer cancel()
	cur, ok, err := s.eng.WaitDurable(ctx, p, min)
	if err != nil {
		s.engineError(w, r, err)
		return false
	}
	if !ok {
		pos := position(p, cur)
		writeProblem(w, r, problem{Status: http.StatusPreconditionFailed, Position: &pos,
			Detail: fmt.Sprintf("commit %s is not durable yet: partition %d is at commit %d", position(p, min), p, cur)})
		return false
	}
	return true
}

func min64(a, b time.Duration) time.Duration {
	if a < b {
		return a
	}
	return b
}

// historyRecordJSON is one change of an entry.
type historyRecordJSON struct {
	Commit      uint64          `json:"commit"`
	Position    string          `json:"position"`
	At          time.Time       `json:"at"`
	Deleted     bool            `json:"deleted"`
	Version     *string         `json:"version"`
	Typename    string          `json:"typename,omitempty"`
	Value       json.RawMessage `json:"value,omitempty"`
	ValueBase64 *string         `json:"valueBase64"`
	ExpiresAt   *time.Time      `json:"expiresAt,omitempty"`
	Truncated   bool            `json:"truncated"`
	Cause       causeJSON       `json:"cause"`
}

type causeJSON struct {
	// Kind: invocation, mutation, expiry, or before-history (the record
	// that started the history of an entry written before it existed).
	Kind         string             `json:"kind"`
	Messages     []causeMessageJSON `json:"messages,omitempty"`
	MessageCount int                `json:"messageCount,omitempty"`
	Mutation     string             `json:"mutation,omitempty"`
	Principal    string             `json:"principal,omitempty"`
	Reason       string             `json:"reason,omitempty"`
	Reverts      string             `json:"reverts,omitempty"`
}

type causeMessageJSON struct {
	Typename string                 `json:"typename"`
	Caller   *types.EnvelopeAddress `json:"caller"`
}

func (s *Server) historyJSON(p int, rec store.HistoryRecord) historyRecordJSON {
	out := historyRecordJSON{Commit: rec.Commit, Position: position(p, rec.Commit), At: time.UnixMilli(rec.GetAt()).UTC(),
		Deleted: rec.GetDeleted(), Truncated: rec.GetTruncated()}
	if !rec.GetDeleted() {
		out.Version = versionString(rec.GetVersion())
		out.Typename = rec.GetTypename()
		b := base64.StdEncoding.EncodeToString(rec.GetValue())
		out.ValueBase64 = &b
		if v, ok, err := types.JSONValue(rec.GetTypename(), rec.GetValue()); err == nil && ok {
			out.Value = v
		}
		if rec.GetExpiresAt() != 0 {
			t := time.UnixMilli(rec.GetExpiresAt()).UTC()
			out.ExpiresAt = &t
		}
	}
	c := rec.GetCause()
	switch partition.CauseKind(c.GetKind()) {
	case partition.CauseInvocation:
		out.Cause.Kind = "invocation"
	case partition.CauseMutation:
		out.Cause.Kind = "mutation"
	case partition.CauseExpiry:
		out.Cause.Kind = "expiry"
	default:
		out.Cause.Kind = "before-history"
	}
	out.Cause.MessageCount = int(c.GetMessageCount())
	out.Cause.Mutation, out.Cause.Principal, out.Cause.Reason, out.Cause.Reverts = c.GetMutation(), c.GetPrincipal(), c.GetReason(), c.GetReverts()
	for _, m := range c.GetMessages() {
		cm := causeMessageJSON{Typename: m.GetTypename()}
		if a := m.GetCaller(); a != nil {
			cm.Caller = &types.EnvelopeAddress{Namespace: a.GetNamespace(), Type: a.GetType(), ID: a.GetId()}
		}
		out.Cause.Messages = append(out.Cause.Messages, cm)
	}
	return out
}

// getHistory answers GET …/<state>/history?order=&after=&limit=: the
// entry's committed changes, newest first by default, paged by commit.
func (s *Server) getHistory(w http.ResponseWriter, r *http.Request, a address.Address, state string) {
	q := r.URL.Query()
	for k := range q {
		switch k {
		case "order", "after", "limit", "minCommit", "wait":
		default:
			fail(w, r, http.StatusBadRequest, fmt.Sprintf("?%s: unknown parameter; history takes order, after, limit, minCommit and wait", k))
			return
		}
	}
	oldest := false
	switch v := q.Get("order"); v {
	case "", "newest":
	case "oldest":
		oldest = true
	default:
		fail(w, r, http.StatusBadRequest, fmt.Sprintf("?order=%q: want newest or oldest", v))
		return
	}
	var after uint64
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			fail(w, r, http.StatusBadRequest, fmt.Sprintf("?after=%q: want the commit id of the last record of the previous page", v))
			return
		}
		after = n
	}
	limit := defaultHistoryLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxHistoryLimit {
			fail(w, r, http.StatusBadRequest, fmt.Sprintf("?limit=%q: want an integer from 1 to %d", v, MaxHistoryLimit))
			return
		}
		limit = n
	}
	if !s.awaitMinCommit(w, r, a) {
		return
	}
	p := s.partitionOf(a)
	out := struct {
		Address types.EnvelopeAddress `json:"address"`
		State   string                `json:"state"`
		Order   string                `json:"order"`
		Records []historyRecordJSON   `json:"records"`
		Next    *string               `json:"next"`
	}{Address: types.EnvelopeAddress{Namespace: a.Type.Namespace, Type: a.Type.Name, ID: a.ID}, State: state, Order: "newest", Records: []historyRecordJSON{}}
	if oldest {
		out.Order = "oldest"
	}
	more := false
	err := s.st.ScanHistory(a, state, oldest, after, func(rec store.HistoryRecord) bool {
		if len(out.Records) == limit {
			more = true
			return false
		}
		out.Records = append(out.Records, s.historyJSON(p, rec))
		return true
	})
	if err != nil {
		s.engineError(w, r, err)
		return
	}
	if more {
		n := strconv.FormatUint(out.Records[len(out.Records)-1].Commit, 10)
		out.Next = &n
	}
	writeJSON(w, http.StatusOK, out)
}

// pointOf reads ?asOf=<commit> or ?asOfTime=<RFC 3339>; ok is false when
// neither is given.
func pointOf(r *http.Request, p int) (pt store.Point, ok bool, err error) {
	q := r.URL.Query()
	c, t := q.Get("asOf"), q.Get("asOfTime")
	switch {
	case c != "" && t != "":
		return pt, false, fmt.Errorf("?asOf= and ?asOfTime=: give one of them")
	case c != "":
		n, err := parsePosition(c, p)
		if err != nil {
			return pt, false, fmt.Errorf("?asOf=%q: want a commit id of the address's partition, or a receipt's <partition>.<commit>", c)
		}
		return store.Point{Commit: n}, true, nil
	case t != "":
		tm, err := time.Parse(time.RFC3339Nano, t)
		if err != nil {
			return pt, false, fmt.Errorf("?asOfTime=%q: want an RFC 3339 time like 2024-05-01T12:00:00Z", t)
		}
		return store.Point{ByTime: true, Time: tm.UnixMilli()}, true, nil
	}
	return pt, false, nil
}

func describePoint(pt store.Point) string {
	if pt.ByTime {
		return time.UnixMilli(pt.Time).UTC().Format(time.RFC3339Nano)
	}
	return "commit " + strconv.FormatUint(pt.Commit, 10)
}

// pastEntry is an entry as a history record left it.
func pastEntry(rec *store.HistoryRecord) partition.Entry {
	return partition.Entry{Typename: rec.GetTypename(), Value: rec.GetValue(), Version: rec.GetVersion(), ExpiresAt: rec.GetExpiresAt()}
}

// getEntryAsOf answers GET …/<state>?asOf=: the value the entry held then,
// in the representation Accept asks for, with Statefun-Commit naming the
// change that set it.
func (s *Server) getEntryAsOf(w http.ResponseWriter, r *http.Request, a address.Address, state string, pt store.Point) {
	es, _, err := s.st.HistoryAt(a, state, pt)
	if err != nil {
		s.engineError(w, r, err)
		return
	}
	e := es[0]
	switch {
	case !e.Known:
		fail(w, r, http.StatusGone, fmt.Sprintf("the history of this entry does not reach back to %s (retention removed older changes)", describePoint(pt)))
		return
	case !e.HasValue():
		fail(w, r, http.StatusNotFound, fmt.Sprintf("the entry had no value at %s", describePoint(pt)))
		return
	}
	ent := pastEntry(e.Record)
	media, body, err := negotiate(r.Header.Get("Accept"), a, state, ent)
	if err != nil {
		writeProblem(w, r, problem{Status: http.StatusNotAcceptable, Detail: err.Error(), Available: available(ent)})
		return
	}
	h := w.Header()
	h.Set("ETag", etag(ent.Version))
	h.Set("Vary", "Accept")
	h.Set("Statefun-Type", ent.Typename)
	h.Set("Statefun-Commit", position(s.partitionOf(a), e.Record.Commit))
	if ent.ExpiresAt != 0 {
		h.Set("Statefun-Expires-At", time.UnixMilli(ent.ExpiresAt).UTC().Format(time.RFC3339Nano))
	}
	h.Set("Content-Type", media)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}

// pastEntryJSON is one entry of an address as of a point.
type pastEntryJSON struct {
	State string `json:"state"`
	// Known is false when the history does not reach back that far.
	Known  bool            `json:"known"`
	Value  *types.Envelope `json:"value"`
	Commit *uint64         `json:"commit"`
}

// listEntriesAsOf answers GET /state/<ns>/<type>/<id>?asOf=: every entry
// the address's history knows, as it was then; complete says whether
// every entry the address may have held then is known.
func (s *Server) listEntriesAsOf(w http.ResponseWriter, r *http.Request, a address.Address, pt store.Point) {
	es, complete, err := s.st.HistoryAt(a, "", pt)
	if err != nil {
		s.engineError(w, r, err)
		return
	}
	out := struct {
		Address  types.EnvelopeAddress `json:"address"`
		AsOf     string                `json:"asOf"`
		Complete bool                  `json:"complete"`
		Entries  []pastEntryJSON       `json:"entries"`
	}{Address: types.EnvelopeAddress{Namespace: a.Type.Namespace, Type: a.Type.Name, ID: a.ID}, AsOf: describePoint(pt), Complete: complete, Entries: []pastEntryJSON{}}
	for _, e := range es {
		pe := pastEntryJSON{State: e.State, Known: e.Known}
		if e.HasValue() {
			env := envelopeOf(a, e.State, pastEntry(e.Record))
			pe.Value = &env
		}
		if e.Record != nil {
			c := e.Record.Commit
			pe.Commit = &c
		}
		out.Entries = append(out.Entries, pe)
	}
	writeJSON(w, http.StatusOK, out)
}

// restore answers POST /state/<ns>/<type>/<id>[/<state>]?asOf=: one
// mutation that sets the address (or the entry) back to what it held then.
// The image is read from the durable history (the past does not change);
// the mutation applies in the address's mailbox order like any other, and
// leaves alone an entry that still holds the version it had then.
func (s *Server) restore(w http.ResponseWriter, r *http.Request, principal string, a address.Address, state string) {
	pt, ok, err := pointOf(r, s.partitionOf(a))
	if err == nil && !ok {
		err = fmt.Errorf("POST restores the %s as of a point: give ?asOf=<commit> or ?asOfTime=<RFC 3339>", map[bool]string{true: "address", false: "entry"}[state == ""])
	}
	if err != nil {
		fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	if name, ok := hasCondition(r); ok {
		fail(w, r, http.StatusBadRequest, name+": a restore takes no conditions; it leaves alone what did not change since the point restored to")
		return
	}
	m, err := s.mutationFrom(r, principal, a, state)
	if err != nil {
		fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	es, complete, err := s.st.HistoryAt(a, state, pt)
	if err != nil {
		s.engineError(w, r, err)
		return
	}
	if !complete {
		var unknown []string
		for _, e := range es {
			if !e.Known {
				unknown = append(unknown, e.State)
			}
		}
		detail := fmt.Sprintf("the history of this address does not reach back to %s (retention removed older changes)", describePoint(pt))
		if len(unknown) > 0 {
			detail += "; not known then: " + strings.Join(unknown, ", ")
		}
		fail(w, r, http.StatusGone, detail)
		return
	}
	m.Op = partition.OpRestore
	if strings.TrimSpace(m.Reason) == "" {
		m.Reason = "restore to " + describePoint(pt)
	}
	for _, e := range es {
		re := partition.RestoreEntry{State: e.State, Absent: !e.HasValue()}
		if e.HasValue() {
			re.Typename, re.Value, re.Version = e.Record.GetTypename(), e.Record.GetValue(), e.Record.GetVersion()
		}
		m.Image = append(m.Image, re)
	}
	s.submit(w, r, m)
}

// receiptPosition is the position token of a stored receipt, "" while it
// has no commit.
func (s *Server) receiptPosition(rc *protocol.Receipt) string {
	if rc.GetStatus() == "accepted" {
		return ""
	}
	return position(s.receiptPartition(rc), rc.GetCheckpoint())
}

// receiptPartition is the partition that keeps a stored receipt: the one
// it names, or, for a receipt written before receipts named one, its
// target's (the same but for a cancel of a delayed message, kept by the
// sender's partition).
func (s *Server) receiptPartition(rc *protocol.Receipt) int {
	if rc != nil && rc.Partition != nil {
		return int(rc.GetPartition())
	}
	return s.partitionOf(addrOf(rc.GetTarget()))
}

// auditPartition is receiptPartition for an audit record.
func (s *Server) auditPartition(a *protocol.AuditRecord) int {
	if a != nil && a.Partition != nil {
		return int(a.GetPartition())
	}
	return s.partitionOf(addrOf(a.GetTarget()))
}

// readPast serves what a GET of an entry or an address asks beyond the
// present: it waits for ?minCommit=, and answers ?asOf= / ?asOfTime= from
// the history. It reports whether it answered.
func (s *Server) readPast(w http.ResponseWriter, r *http.Request, a address.Address, state string) bool {
	pt, ok, err := pointOf(r, s.partitionOf(a))
	if err != nil {
		fail(w, r, http.StatusBadRequest, err.Error())
		return true
	}
	if !s.awaitMinCommit(w, r, a) {
		return true
	}
	if !ok {
		return false
	}
	if state == "" {
		s.listEntriesAsOf(w, r, a, pt)
	} else {
		s.getEntryAsOf(w, r, a, state, pt)
	}
	return true
}
