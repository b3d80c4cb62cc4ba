package stateapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/cluster/forward"
	"github.com/statefun-go/statefun/internal/engine"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/types"
)

// This file is the repair loop's side of the API: what is failing, what
// one address's inbox holds, and pausing and resuming an address or every
// address of a function type (docs/how-to/repair.md).

// Repairer is what the repair routes need of the runtime.
type Repairer interface {
	// Failing returns the addresses whose batch is failing, of type t
	// (every type when t is zero), in address order.
	Failing(ctx context.Context, t address.TypeName) ([]partition.FailingAddress, error)
	// Inbox returns what the runtime holds for one address.
	Inbox(ctx context.Context, a address.Address) (*partition.Inbox, error)
	// Pauses returns the pauses in force, of type t (every type when t is
	// zero), in address order; a type-level one has an empty Addr.ID.
	Pauses(ctx context.Context, t address.TypeName) ([]partition.PauseWrite, error)
	// Pause sets or lifts a pause and returns its receipt once durable.
	Pause(ctx context.Context, r engine.PauseRequest) (partition.Receipt, error)
	// PauseIn applies a pause or resume of a function type in some
	// partitions this node owns (cluster mode), and says which hold it
	// durably.
	PauseIn(ctx context.Context, r engine.PauseRequest, parts []int) (engine.PauseOutcome, error)
	// Partitions returns P.
	Partitions() int
}

// MaxFailingLimit caps ?limit= on GET /failing; MaxInboxLimit the queued
// messages GET /inbox lists (it always counts them all).
const (
	MaxFailingLimit = 1000
	MaxInboxLimit   = 1000
)

type addressJSON struct {
	Namespace string `json:"namespace"`
	Type      string `json:"type"`
	ID        string `json:"id"`
}

func addressOf(a address.Address) addressJSON {
	return addressJSON{Namespace: a.Type.Namespace, Type: a.Type.Name, ID: a.ID}
}

type failingJSON struct {
	Namespace   string     `json:"namespace"`
	Type        string     `json:"type"`
	ID          string     `json:"id"`
	Since       time.Time  `json:"since"`
	Attempts    int        `json:"attempts"`
	NextAttempt *time.Time `json:"nextAttempt"`
	LastError   string     `json:"lastError"`
	Violation   bool       `json:"violation"`
	Messages    int        `json:"messages"`
	Queued      int        `json:"queued"`
	Paused      bool       `json:"paused"`
}

type pauseJSON struct {
	Namespace string `json:"namespace"`
	Type      string `json:"type"`
	// ID is null for a pause of every address of the type.
	ID        *string    `json:"id"`
	Mutation  string     `json:"mutation"`
	Principal string     `json:"principal"`
	Reason    string     `json:"reason"`
	Since     time.Time  `json:"since"`
	ExpiresAt *time.Time `json:"expiresAt"`
	Auto      bool       `json:"auto"`
}

type messageJSON struct {
	// Key is the message's inbox key, "<partition>/<source>/<seq>" (source
	// "ingress" or the producing partition).
	Key string `json:"key"`
	// Mutation is set for an accepted state mutation waiting its turn.
	Mutation  string       `json:"mutation,omitempty"`
	Typename  string       `json:"typename"`
	Caller    *addressJSON `json:"caller"`
	Size      int          `json:"size"`
	ArrivedAt time.Time    `json:"arrivedAt"`
	// Value is the message's argument, typed like a state value; nil for
	// an operator mutation.
	Value *messageValueJSON `json:"value,omitempty"`
}

// MaxShownMessageBytes bounds the bytes of one message's value GET /inbox
// shows: an inbox lists up to ?limit= messages, each up to what its
// endpoint carries (megabytes), and an operator reading the batch that is
// stuck needs its beginning, not a page of hundreds of megabytes.
const MaxShownMessageBytes = 4096

// messageValueJSON is a message's argument in GET /inbox: its value as JSON
// when the typename is a built-in scalar or the bytes are JSON (as for a
// state entry), its bytes as base64, both of at most MaxShownMessageBytes
// (Truncated says the value is longer: its size is the message's).
type messageValueJSON struct {
	JSON      json.RawMessage `json:"json,omitempty"`
	Base64    string          `json:"base64"`
	Truncated bool            `json:"truncated"`
}

func messageValueOf(typename string, v []byte) *messageValueJSON {
	out := &messageValueJSON{}
	shown := v
	if len(shown) > MaxShownMessageBytes {
		shown, out.Truncated = shown[:MaxShownMessageBytes], true
	}
	out.Base64 = base64.StdEncoding.EncodeToString(shown)
	if !out.Truncated {
		if j, ok, err := types.JSONValue(typename, v); err == nil && ok {
			out.JSON = j
		}
	}
	return out
}

type inflightJSON struct {
	Attempt     int           `json:"attempt"`
	Waiting     bool          `json:"waiting"`
	Since       *time.Time    `json:"since"`
	NextAttempt *time.Time    `json:"nextAttempt"`
	LastError   string        `json:"lastError"`
	Violation   bool          `json:"violation"`
	Messages    []messageJSON `json:"messages"`
}

type queuedJSON struct {
	Count    int           `json:"count"`
	OldestAt *time.Time    `json:"oldestAt"`
	Messages []messageJSON `json:"messages"`
	// Truncated says Messages lists only the first ?limit= of Count.
	Truncated bool `json:"truncated"`
	// PagedInPartition is the partition's messages waiting in the store,
	// not listed (partition.Inbox.PagedInPartition).
	PagedInPartition int `json:"pagedInPartition"`
}

type delayedJSON struct {
	// Timer is "<partition>/<timer id>": the partition of the sender.
	Timer    string       `json:"timer"`
	DueAt    time.Time    `json:"dueAt"`
	Token    string       `json:"token"`
	Sender   *addressJSON `json:"sender"`
	Typename string       `json:"typename"`
	Size     int          `json:"size"`
}

type inboxJSON struct {
	Address    addressJSON   `json:"address"`
	Paused     *pauseJSON    `json:"paused"`
	TypePaused *pauseJSON    `json:"typePaused"`
	Inflight   *inflightJSON `json:"inflight"`
	Queued     queuedJSON    `json:"queued"`
	Delayed    []delayedJSON `json:"delayed"`
}

func ms(v int64) time.Time { return time.UnixMilli(v).UTC() }

func msPtr(v int64) *time.Time {
	if v == 0 {
		return nil
	}
	t := ms(v)
	return &t
}

func pauseOf(a address.Address, p *partition.Pause) *pauseJSON {
	if p == nil {
		return nil
	}
	out := &pauseJSON{Namespace: a.Type.Namespace, Type: a.Type.Name, Mutation: p.Mutation, Principal: p.Principal,
		Reason: p.Reason, Since: ms(p.Since), ExpiresAt: msPtr(p.ExpiresAt), Auto: p.Auto}
	if a.ID != "" {
		id := a.ID
		out.ID = &id
	}
	return out
}

func messageOf(m partition.InboxMessage) messageJSON {
	out := messageJSON{Key: engine.FormatInboxKey(m.Key), Mutation: m.Mutation,
		Typename: m.Typename, Size: m.Size, ArrivedAt: ms(m.ArrivedAt)}
	if m.Mutation == "" {
		out.Value = messageValueOf(m.Typename, m.Value)
	}
	if m.Caller != nil {
		c := addressOf(*m.Caller)
		out.Caller = &c
	}
	return out
}

// typeParam reads ?type=<namespace>/<name>; zero when absent.
func typeParam(v string) (address.TypeName, error) {
	if v == "" {
		return address.TypeName{}, nil
	}
	ns, name, ok := strings.Cut(v, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") || !utf8.ValidString(v) {
		return address.TypeName{}, fmt.Errorf("?type=%q: want <namespace>/<name>", v)
	}
	return address.TypeName{Namespace: ns, Name: name}, nil
}

// checkParams refuses a query parameter that is not allowed or is repeated:
// a misspelt filter must not silently list everything.
func checkParams(r *http.Request, allowed ...string) error {
	for k, vs := range r.URL.Query() {
		ok := false
		for _, a := range allowed {
			ok = ok || a == k
		}
		if !ok {
			return fmt.Errorf("unknown query parameter %q; allowed: %s", k, strings.Join(allowed, ", "))
		}
		if len(vs) > 1 {
			return fmt.Errorf("query parameter %q is repeated", k)
		}
	}
	return nil
}

func limitParam(r *http.Request, def, maxLimit int) (int, error) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxLimit {
		return 0, fmt.Errorf("?limit= must be an integer from 1 to %d", maxLimit)
	}
	return n, nil
}

// serveFailing answers GET /failing?type=&after=&limit=: the addresses
// whose batch is failing, gathered across partitions, in address order.
func (s *Server) serveFailing(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed(w, r, "GET, HEAD")
		return
	}
	if _, ok := s.authorize(w, r, ScopeRead); !ok {
		return
	}
	if err := checkParams(r, "type", "after", "limit", "group"); err != nil {
		fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	q := r.URL.Query()
	t, err := typeParam(q.Get("type"))
	if err != nil {
		fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	switch g := q.Get("group"); {
	case g == "error" && (q.Has("after") || q.Has("limit")):
		fail(w, r, http.StatusBadRequest, "?group=error answers every group at once: it takes no ?after= or ?limit=")
		return
	case g == "error":
		s.serveFailingGroups(w, r, t)
		return
	case q.Has("group"):
		fail(w, r, http.StatusBadRequest, "?group= takes error (the failing addresses grouped by type and error)")
		return
	}
	limit, err := limitParam(r, 100, MaxFailingLimit)
	if err != nil {
		fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	var after *address.Address
	if v := q.Get("after"); v != "" {
		a, err := parseAddressCursor(v)
		if err != nil {
			fail(w, r, http.StatusBadRequest, err.Error())
			return
		}
		after = &a
	}
	if s.gather(w, r, failingListing(limit)) {
		return
	}
	// The engine lists the partitions it runs; a hop-marked request
	// keeps those the group gives this node too.
	own := s.localPart(w, r)
	list, err := s.eng.Failing(r.Context(), t)
	if err != nil {
		s.engineError(w, r, err)
		return
	}
	page := struct {
		Failing []failingJSON `json:"failing"`
		Next    *string       `json:"next"`
	}{Failing: []failingJSON{}}
	for _, f := range list {
		if (after != nil && !addressAfter(f.Addr, *after)) || (own != nil && !own[s.partitionOf(f.Addr)]) {
			continue
		}
		if len(page.Failing) == limit {
			c := addressCursor(page.Failing[limit-1])
			page.Next = &c
			break
		}
		page.Failing = append(page.Failing, failingJSON{Namespace: f.Addr.Type.Namespace, Type: f.Addr.Type.Name, ID: f.Addr.ID,
			Since: ms(f.Since), Attempts: f.Attempts, NextAttempt: msPtr(f.RetryAt), LastError: f.LastError,
			Violation: f.Violation, Messages: f.Messages, Queued: f.Queued, Paused: f.Paused})
	}
	writeJSON(w, http.StatusOK, page)
}

func addressCursor(f failingJSON) string {
	b, _ := json.Marshal([]string{f.Namespace, f.Type, f.ID})
	return base64.RawURLEncoding.EncodeToString(b)
}

func parseAddressCursor(s string) (address.Address, error) {
	var parts []string
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil {
		err = json.Unmarshal(b, &parts)
	}
	if err != nil || len(parts) != 3 {
		return address.Address{}, fmt.Errorf("?after=%q is not a cursor of this API (pass the next of the previous page)", s)
	}
	return address.Address{Type: address.TypeName{Namespace: parts[0], Name: parts[1]}, ID: parts[2]}, nil
}

func addressAfter(a, c address.Address) bool {
	if a.Type.Namespace != c.Type.Namespace {
		return a.Type.Namespace > c.Type.Namespace
	}
	if a.Type.Name != c.Type.Name {
		return a.Type.Name > c.Type.Name
	}
	return a.ID > c.ID
}

// serveInbox answers GET /inbox/<ns>/<type>/<id>?limit=: what the runtime
// holds for one address.
func (s *Server) serveInbox(w http.ResponseWriter, r *http.Request) {
	segs, err := splitPath(r.URL.EscapedPath(), "/inbox")
	if err != nil {
		fail(w, r, http.StatusBadRequest, "bad address: "+err.Error())
		return
	}
	if len(segs) == 4 {
		s.serveInboxAction(w, r, segs)
		return
	}
	if len(segs) != 3 {
		fail(w, r, http.StatusNotFound, "want /inbox/<namespace>/<type>/<id>")
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed(w, r, "GET, HEAD")
		return
	}
	if _, ok := s.authorize(w, r, ScopeRead); !ok {
		return
	}
	if err := checkParams(r, "limit"); err != nil {
		fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	limit, err := limitParam(r, 100, MaxInboxLimit)
	if err != nil {
		fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	a := address.Address{Type: address.TypeName{Namespace: segs[0], Name: segs[1]}, ID: segs[2]}
	if s.forwardRead(w, r, a) {
		return
	}
	in, err := s.eng.Inbox(r.Context(), a)
	if err != nil {
		s.engineError(w, r, err)
		return
	}
	out := inboxJSON{Address: addressOf(a), Paused: pauseOf(a, in.Pause), TypePaused: pauseOf(address.Address{Type: a.Type}, in.TypePause),
		Queued: queuedJSON{Count: len(in.Queued), Messages: []messageJSON{}, PagedInPartition: in.PagedInPartition}, Delayed: []delayedJSON{}}
	if b := in.Inflight; b != nil {
		f := &inflightJSON{Attempt: b.Attempt, Waiting: b.Waiting, Since: msPtr(b.Since), NextAttempt: msPtr(b.RetryAt),
			LastError: b.LastError, Violation: b.Violation, Messages: []messageJSON{}}
		for _, m := range b.Messages {
			f.Messages = append(f.Messages, messageOf(m))
		}
		out.Inflight = f
	}
	for i, m := range in.Queued {
		if i == 0 {
			t := ms(m.ArrivedAt)
			out.Queued.OldestAt = &t
		}
		if i == limit {
			out.Queued.Truncated = true
			break
		}
		out.Queued.Messages = append(out.Queued.Messages, messageOf(m))
	}
	for _, d := range in.Delayed {
		dj := delayedJSON{Timer: fmt.Sprintf("%d/%d", d.Key.Partition, d.Key.ID), DueAt: ms(d.Key.Due), Token: d.Token,
			Typename: d.Typename, Size: d.Size}
		if d.Sender != nil {
			sa := addressOf(*d.Sender)
			dj.Sender = &sa
		}
		out.Delayed = append(out.Delayed, dj)
	}
	writeJSON(w, http.StatusOK, out)
}

// servePauses answers GET /pauses?type=: the pauses in force.
func (s *Server) servePauses(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed(w, r, "GET, HEAD")
		return
	}
	if _, ok := s.authorize(w, r, ScopeRead); !ok {
		return
	}
	if err := checkParams(r, "type"); err != nil {
		fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	t, err := typeParam(r.URL.Query().Get("type"))
	if err != nil {
		fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	if s.gather(w, r, pausesListing()) {
		return
	}
	// As /failing; a pause of a whole type is in every partition.
	own := s.localPart(w, r)
	list, err := s.eng.Pauses(r.Context(), t)
	if err != nil {
		s.engineError(w, r, err)
		return
	}
	out := struct {
		Pauses []*pauseJSON `json:"pauses"`
	}{Pauses: []*pauseJSON{}}
	for _, p := range list {
		if own != nil && p.Addr.ID != "" && !own[s.partitionOf(p.Addr)] {
			continue
		}
		out.Pauses = append(out.Pauses, pauseOf(p.Addr, p.Pause))
	}
	writeJSON(w, http.StatusOK, out)
}

// pauseBody is the body of POST /pause/… and POST /resume/… (optional).
type pauseBody struct {
	Reason    string `json:"reason"`
	ExpiresAt string `json:"expiresAt"`
	ExpiresIn string `json:"expiresIn"`
}

// maxPauseBody caps the body of a pause or resume.
const maxPauseBody = 64 << 10

func (s *Server) servePause(w http.ResponseWriter, r *http.Request) { s.pauseOrResume(w, r, false) }

func (s *Server) serveResume(w http.ResponseWriter, r *http.Request) { s.pauseOrResume(w, r, true) }

// pauseOrResume answers POST /pause/<ns>/<type>[/<id>] and POST
// /resume/<ns>/<type>[/<id>]: without an id, every address of the type.
func (s *Server) pauseOrResume(w http.ResponseWriter, r *http.Request, resume bool) {
	prefix := "/pause"
	if resume {
		prefix = "/resume"
	}
	segs, err := splitPath(r.URL.EscapedPath(), prefix)
	if err != nil {
		fail(w, r, http.StatusBadRequest, "bad address: "+err.Error())
		return
	}
	if len(segs) != 2 && len(segs) != 3 {
		fail(w, r, http.StatusNotFound, fmt.Sprintf("want %s/<namespace>/<type>[/<id>]", prefix))
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
	a := address.Address{Type: address.TypeName{Namespace: segs[0], Name: segs[1]}}
	if len(segs) == 3 {
		a.ID = segs[2]
	}
	mutation, err := s.typePauseID(r, a)
	if err != nil {
		fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	if a.ID != "" {
		if s.forwardChange(w, r, a) {
			return
		}
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxPauseBody+1))
	if err != nil {
		fail(w, r, http.StatusBadRequest, "reading the body: "+err.Error())
		return
	}
	if len(body) > maxPauseBody {
		fail(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is over %d bytes", maxPauseBody))
		return
	}
	var pb pauseBody
	if len(bytes.TrimSpace(body)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&pb); err != nil {
			fail(w, r, http.StatusBadRequest, "the body must be a JSON object {\"reason\", \"expiresAt\" | \"expiresIn\"}: "+err.Error())
			return
		}
	}
	req := engine.PauseRequest{Mutation: mutation, Addr: a, Resume: resume, Principal: principal, Reason: pb.Reason}
	if req.Reason == "" {
		req.Reason = r.Header.Get("Statefun-Reason")
	}
	if !utf8.ValidString(req.Reason) {
		fail(w, r, http.StatusBadRequest, "the reason (body or Statefun-Reason) is not valid UTF-8")
		return
	}
	if s.opts.RequireReason && strings.TrimSpace(req.Reason) == "" {
		fail(w, r, http.StatusBadRequest, "this deployment requires a reason: give \"reason\" in the body or a Statefun-Reason header")
		return
	}
	// A node spreading a type-level change resolved expiresIn already:
	// its expiresAt is not checked against this node's clock again.
	typeWide := a.ID == "" && s.opts.Cluster != nil
	spread := typeWide && forward.Forwarded(r)
	if req.ExpiresAt, err = s.expiry(pb, resume, spread); err != nil {
		fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	if typeWide {
		if spread {
			s.applyTypePauseShare(w, r, req)
		} else {
			s.spreadTypePause(w, r, req)
		}
		return
	}
	rc, err := s.eng.Pause(r.Context(), req)
	if err != nil {
		s.engineError(w, r, err)
		return
	}
	s.answerPause(w, r, a, receiptOf(rc))
}

// answerPause answers a pause or resume with its receipt: a 404 when it
// was rejected (a resume of what is not paused).
func (s *Server) answerPause(w http.ResponseWriter, r *http.Request, a address.Address, out receiptJSON) {
	if out.Status == "rejected" {
		what := "the address"
		if a.ID == "" {
			what = "the function type"
		}
		writeProblem(w, r, problem{Status: http.StatusNotFound, Detail: what + " is not paused (a pause of the whole type is lifted at /resume/<namespace>/<type>)", Receipt: &out})
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// expiry reads expiresAt or expiresIn of a pause body; past allows an
// expiresAt that is not in the future.
func (s *Server) expiry(pb pauseBody, resume, past bool) (int64, error) {
	if pb.ExpiresAt == "" && pb.ExpiresIn == "" {
		return 0, nil
	}
	switch {
	case resume:
		return 0, errors.New("a resume takes no expiresAt or expiresIn")
	case pb.ExpiresAt != "" && pb.ExpiresIn != "":
		return 0, errors.New("give expiresAt or expiresIn, not both")
	}
	now := s.opts.Now()
	var at time.Time
	if pb.ExpiresIn != "" {
		d, err := time.ParseDuration(pb.ExpiresIn)
		if err != nil || d <= 0 {
			return 0, fmt.Errorf("expiresIn %q: want a positive duration like 30m", pb.ExpiresIn)
		}
		at = now.Add(d)
	} else {
		t, err := time.Parse(time.RFC3339Nano, pb.ExpiresAt)
		if err != nil {
			return 0, fmt.Errorf("expiresAt %q: want an RFC 3339 time", pb.ExpiresAt)
		}
		if !t.After(now) && !past {
			return 0, fmt.Errorf("expiresAt %q is not in the future", pb.ExpiresAt)
		}
		at = t
	}
	return at.UnixMilli(), nil
}

// pauseOpNames are the audit log's names of pause operations.
var pauseOpNames = map[partition.MutationOp]string{partition.OpPause: "pause", partition.OpResume: "resume"}
