package stateapi

// POST /import/<import-id>?mode=: a batch of exported lines written back,
// each line one mutation (docs/how-to/export-import.md). A line is a PUT
// of its entry in every way the promises of docs/reference/state-api.md name: it is
// applied in its address's mailbox order, its condition (the mode) is
// evaluated at its turn, it is audited with its before-image, and it has
// a receipt. What the batch adds:
//
//   - The whole batch is validated before any line is handed on: a bad
//     line is a 400 (422 for a value that is not its type) naming the line,
//     and nothing of the batch is applied.
//   - Line n of import I is mutation "I.n", so the import id and the line
//     are in the receipt and in every audit record. A line is applied at
//     most once, however often it is sent (a client that resends a batch
//     whose answer it lost, or resumes an import after a crash): a line
//     in flight here is waited for and its answer shared; a line with a
//     final receipt, or failing that an audit record (receipts are kept
//     for less long), is answered from it ("replayed") and not applied
//     again.
//   - A line waits for its commit whatever happens to the request that
//     sent it, so that "in flight" lasts exactly as long as the mutation
//     can still be applied: a client that gives up and resends never races
//     its own earlier copy. A runtime that crashes before the commit loses
//     the line with its receipt, and a resend applies it then, once.
//   - Lines of the same entry are applied in the batch's order; the others
//     concurrently, so that a partition commits many in one store write.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/cluster/forward"
	"github.com/statefun-go/statefun/internal/engine"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
	"github.com/statefun-go/statefun/internal/types"
)

// Import bounds: the lines of one batch, the lines of a batch applied at
// once, and how long a line refused for a full queue is tried again
// before its answer says so.
const (
	MaxImportLines   = 1000
	importWorkers    = 256
	importBusyBudget = 30 * time.Second
)

// importIDPattern is an import id; a line's mutation id is the import id,
// a dot and the line number (importLinePattern), which no other mutation
// id looks like.
var (
	importIDPattern   = regexp.MustCompile(`^import-[0-9a-z]{1,40}$`)
	importLinePattern = regexp.MustCompile(`^(import-[0-9a-z]{1,40})\.([1-9][0-9]{0,17})$`)
)

// importLineOf returns the import id and line of a mutation id that names
// a line of an import.
func importLineOf(mutation string) (string, int64, bool) {
	m := importLinePattern.FindStringSubmatch(mutation)
	if m == nil {
		return "", 0, false
	}
	n, err := strconv.ParseInt(m[2], 10, 64)
	return m[1], n, err == nil
}

// Import modes (?mode=).
const (
	ImportAbsent    = "absent"
	ImportOverwrite = "overwrite"
	ImportIfMatch   = "if-match"
)

// importRequest is the body of POST /import/<id>.
type importRequest struct {
	Lines []struct {
		Line  int64           `json:"line"`
		Entry json.RawMessage `json:"entry"`
	} `json:"lines"`
}

// importResult is the answer for one line.
type importResult struct {
	Line     int64  `json:"line"`
	Mutation string `json:"mutation"`
	// Status is committed, rejected, or failed (not applied; send the
	// line again).
	Status string `json:"status"`
	// Replayed says the line had been applied (or rejected) before: this is
	// that outcome, and nothing was applied now.
	Replayed        bool    `json:"replayed,omitempty"`
	Version         *string `json:"version"`
	PreviousVersion *string `json:"previousVersion,omitempty"`
	Rejection       string  `json:"rejection,omitempty"`
	Reason          string  `json:"reason,omitempty"`
	Commit          string  `json:"commit,omitempty"`
	// err is why a failed line was not applied.
	err error
}

// importCall is one line being applied here; done is closed with res set.
type importCall struct {
	done chan struct{}
	res  importResult
}

// importCalls are the lines being applied here, by mutation id.
type importCalls struct {
	mu sync.Mutex
	m  map[string]*importCall
}

// claim returns a new call for id, or the one in flight (mine false).
func (ic *importCalls) claim(id string) (c *importCall, mine bool) {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	if c := ic.m[id]; c != nil {
		return c, false
	}
	if ic.m == nil {
		ic.m = map[string]*importCall{}
	}
	c = &importCall{done: make(chan struct{})}
	ic.m[id] = c
	return c, true
}

func (ic *importCalls) release(id string, c *importCall) {
	ic.mu.Lock()
	delete(ic.m, id)
	ic.mu.Unlock()
	close(c.done)
}

// importLine is a validated line, ready to apply.
type importLine struct {
	line int64
	m    partition.Mutation
}

// badLine is the answer to a batch with a bad line.
type badLine struct {
	line   int64
	status int
	detail string
}

// serveImport answers POST /import/<import-id>?mode=absent|overwrite|if-match.
func (s *Server) serveImport(w http.ResponseWriter, r *http.Request) {
	segs, err := splitPath(r.URL.EscapedPath(), "/import")
	if err != nil {
		fail(w, r, http.StatusBadRequest, "bad path: "+err.Error())
		return
	}
	if len(segs) != 1 {
		fail(w, r, http.StatusNotFound, "want /import/<import-id>")
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
	id := segs[0]
	if !importIDPattern.MatchString(id) {
		fail(w, r, http.StatusBadRequest, fmt.Sprintf("import id %q: want import- and 1 to 40 of [0-9a-z] (statefun state import makes one)", id))
		return
	}
	mode := r.URL.Query().Get("mode")
	switch mode {
	case ImportAbsent, ImportOverwrite, ImportIfMatch:
	default:
		fail(w, r, http.StatusBadRequest, fmt.Sprintf("?mode=%q: want absent, overwrite or if-match", mode))
		return
	}
	reason, err := s.reasonOf(r)
	if err != nil {
		fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	if strings.TrimSpace(reason) == "" {
		reason = "import " + id
	}
	if name, ok := hasCondition(r); ok {
		fail(w, r, http.StatusBadRequest, name+": an import's conditions are its ?mode=, per line")
		return
	}
	// A line may carry a value as large as a PUT's, in base64.
	limit := 4*s.opts.MaxBodyBytes + 1<<20
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			fail(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("the batch is over the limit of %d bytes; send fewer lines", limit))
			return
		}
		fail(w, r, http.StatusBadRequest, "reading the body: "+err.Error())
		return
	}
	var req importRequest
	if err := json.Unmarshal(body, &req); err != nil {
		fail(w, r, http.StatusBadRequest, `the body is not {"lines":[{"line":<n>,"entry":<exported line>}...]}: `+err.Error())
		return
	}
	switch n := len(req.Lines); {
	case n == 0:
		fail(w, r, http.StatusBadRequest, "the batch has no lines")
		return
	case n > MaxImportLines:
		fail(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("the batch has %d lines; send at most %d", n, MaxImportLines))
		return
	}
	lines := make([]importLine, 0, len(req.Lines))
	prev := int64(0)
	for _, l := range req.Lines {
		if l.Line <= prev {
			s.badLine(w, r, badLine{l.Line, http.StatusBadRequest, fmt.Sprintf("line numbers must be 1 or more and increase within a batch (after %d)", prev)})
			return
		}
		prev = l.Line
		m, bad := s.importMutation(l.Entry, mode)
		if bad != nil {
			bad.line = l.Line
			s.badLine(w, r, *bad)
			return
		}
		m.ID = id + "." + strconv.FormatInt(l.Line, 10)
		m.Principal, m.Reason, m.Ack = principal, reason, partition.AckCommitted
		lines = append(lines, importLine{line: l.Line, m: m})
	}
	var covered []int // a share another node sent: the partitions answered for
	if s.opts.Cluster != nil {
		if !forward.Forwarded(r) {
			s.spreadImport(w, r, id, mode, body, lines)
			return
		}
		if lines, covered, ok = s.importShare(w, r, lines); !ok {
			return
		}
	}
	// Nothing below depends on the request's context: a line handed on is
	// waited for (see the top of this file).
	ctx := context.WithoutCancel(r.Context())
	var stopped atomic.Bool // the engine is closing: touch nothing more
	results := make([]importResult, len(lines))
	slots := make(chan struct{}, importWorkers)
	after := map[string]chan struct{}{} // the last line of each entry
	var wg sync.WaitGroup
	for i, l := range lines {
		key := l.m.Addr.String() + "\x00" + l.m.State
		prev, done := after[key], make(chan struct{})
		after[key] = done
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(done)
			if prev != nil {
				<-prev
			}
			slots <- struct{}{}
			defer func() { <-slots }()
			if stopped.Load() {
				results[i] = importResult{Line: l.line, Mutation: l.m.ID, Status: "failed", Reason: "the runtime is shutting down", err: engine.ErrClosed}
				return
			}
			results[i] = s.importOne(ctx, l)
			if errors.Is(results[i].err, engine.ErrClosed) {
				stopped.Store(true)
			}
		}()
	}
	wg.Wait()
	// A line the runtime could not take makes the batch a 503: send it
	// again, and the lines it applied are answered as replayed.
	for _, res := range results {
		if errors.Is(res.err, engine.ErrClosed) || errors.Is(res.err, engine.ErrBusy) {
			s.engineError(w, r, res.err)
			return
		}
	}
	if covered != nil {
		results, covered = s.shareResults(lines, results, covered)
		w.Header().Set(forward.Partitions, forward.FormatPartitions(covered))
	}
	writeJSON(w, http.StatusOK, struct {
		Import  string         `json:"import"`
		Mode    string         `json:"mode"`
		Results []importResult `json:"results"`
	}{id, mode, results})
}

// badLine answers a batch with a bad line: nothing of it was applied.
func (s *Server) badLine(w http.ResponseWriter, r *http.Request, b badLine) {
	p := problem{Status: b.status, Detail: fmt.Sprintf("line %d: %s; nothing of this batch was applied", b.line, b.detail)}
	if b.line >= 1 {
		line := b.line
		p.Line = &line
	}
	writeProblem(w, r, p)
}

// importMutation reads one exported line into the mutation that writes it
// back under mode; a bad line says why.
func (s *Server) importMutation(raw json.RawMessage, mode string) (partition.Mutation, *badLine) {
	bad := func(status int, format string, args ...any) (partition.Mutation, *badLine) {
		return partition.Mutation{}, &badLine{status: status, detail: fmt.Sprintf(format, args...)}
	}
	var e types.Envelope
	if len(raw) == 0 || raw[0] != '{' {
		return bad(http.StatusBadRequest, "the entry is not a JSON object")
	}
	if err := json.Unmarshal(raw, &e); err != nil {
		return bad(http.StatusBadRequest, "the entry is not an exported line: %v", err)
	}
	a := address.Address{Type: address.TypeName{Namespace: e.Address.Namespace, Name: e.Address.Type}, ID: e.Address.ID}
	for _, c := range []struct{ field, v string }{{"address.namespace", a.Type.Namespace}, {"address.type", a.Type.Name}, {"address.id", a.ID}, {"state", e.State}} {
		if err := address.CheckSegment(c.field, c.v); err != nil {
			return bad(http.StatusBadRequest, "%s", strings.TrimPrefix(err.Error(), "address: "))
		}
	}
	typename := e.Typename
	if typename == "" {
		for _, sp := range s.eng.SpecsOf(a.Type) {
			if sp.Name == e.State {
				typename = sp.Typename
			}
		}
	}
	if typename == "" {
		return bad(http.StatusBadRequest, "no typename for %q: the line has none and %s registered no such state", e.State, a.Type)
	}
	if err := address.CheckTypename(typename); err != nil {
		return bad(http.StatusBadRequest, "%s", strings.TrimPrefix(err.Error(), "address: "))
	}
	value, err := types.DecodeEnvelopeValue(typename, nil, raw)
	if err != nil {
		status := http.StatusUnprocessableEntity
		if errors.Is(err, types.ErrEnvelope) {
			status = http.StatusBadRequest
		}
		return bad(status, "%s", valueDetail(err))
	}
	if err := types.Validate(typename, value); err != nil {
		return bad(http.StatusUnprocessableEntity, "%s", valueDetail(err))
	}
	if int64(len(value)) > s.opts.MaxBodyBytes {
		return bad(http.StatusRequestEntityTooLarge, "the value is %d bytes, over the limit of %d a PUT takes", len(value), s.opts.MaxBodyBytes)
	}
	if value == nil {
		value = []byte{}
	}
	m := partition.Mutation{Addr: a, State: e.State, Op: partition.OpPut, Typename: e.Typename, Value: value}
	switch mode {
	case ImportAbsent:
		m.IfNoneMatch = true
	case ImportIfMatch:
		v, err := strconv.ParseUint(e.Version, 10, 64)
		if err != nil || v == 0 {
			return bad(http.StatusBadRequest, "mode if-match needs the line's version (a number above 0), not %q", e.Version)
		}
		m.IfMatch = v
	}
	return m, nil
}

// importOne applies one line at most once (see the top of this file).
func (s *Server) importOne(ctx context.Context, l importLine) importResult {
	c, mine := s.imports.claim(l.m.ID)
	if !mine {
		<-c.done
		res := c.res
		if res.Status != "failed" {
			res.Replayed = true
			return res
		}
		// It applied nothing; try again.
		c, mine = s.imports.claim(l.m.ID)
		if !mine {
			<-c.done
			return c.res
		}
	}
	res := s.applyLine(ctx, l)
	c.res = res
	s.imports.release(l.m.ID, c)
	return res
}

// applyLine answers a line from its receipt or audit records, or applies it.
func (s *Server) applyLine(ctx context.Context, l importLine) importResult {
	res := importResult{Line: l.line, Mutation: l.m.ID}
	failed := func(err error) importResult {
		res.Status, res.Reason, res.err = "failed", err.Error(), err
		return res
	}
	if rc, ok, err := s.st.Receipt(l.m.ID); err != nil {
		return failed(err)
	} else if ok && (rc.GetStatus() == "committed" || rc.GetStatus() == "rejected") {
		rj := storedReceipt(rc)
		res.Status, res.Replayed, res.Version, res.PreviousVersion, res.Rejection, res.Reason =
			rj.Status, true, rj.Version, rj.PreviousVersion, rj.Rejection, rj.Reason
		res.Commit = s.receiptPosition(rc)
		return res
	}
	var found *protocol.AuditRecord
	if err := s.st.ScanAuditFiltered(store.AuditFilter{From: -1 << 63, To: 1<<63 - 1, Mutation: l.m.ID}, func(a *protocol.AuditRecord) bool {
		found = a
		return false
	}); err != nil {
		return failed(err)
	}
	if found != nil {
		// Applied and committed; its receipt is gone (receipts are kept
		// for less long than the audit log).
		res.Status, res.Replayed, res.Version = "committed", true, versionString(found.GetVersion())
		return res
	}
	deadline := time.Now().Add(importBusyBudget)
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		rc, err := s.eng.Mutate(ctx, l.m)
		if errors.Is(err, engine.ErrBusy) && time.Now().Before(deadline) {
			time.Sleep(wait)
			continue
		}
		if err != nil {
			return failed(err)
		}
		out := receiptOf(rc)
		res.Status, res.Version, res.PreviousVersion, res.Rejection, res.Reason = out.Status, out.Version, out.PreviousVersion, out.Rejection, out.Reason
		res.Commit = position(s.partitionOf(rc.Addr), rc.Checkpoint)
		return res
	}
}
