package stateapi

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/engine"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/types"
)

// Media types the API speaks.
const (
	mediaOctet = "application/octet-stream"
	mediaText  = "text/plain"
	mediaJSON  = "application/json"
)

func (s *Server) getEntry(w http.ResponseWriter, r *http.Request, a address.Address, state string) {
	im, inm, err := conditions(r)
	if err != nil {
		fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	rep, err := s.eng.Read(r.Context(), a, state)
	if err != nil {
		s.engineError(w, r, err)
		return
	}
	if len(rep.Entries) == 0 {
		fail(w, r, http.StatusNotFound, s.whyEmpty(a, state, rep.Specs))
		return
	}
	e := rep.Entries[0].Entry
	media, body, err := negotiate(r.Header.Get("Accept"), a, state, e)
	if err != nil {
		writeProblem(w, r, problem{Status: http.StatusNotAcceptable, Detail: err.Error(), Available: available(e)})
		return
	}
	// Conditions are evaluated after the answers that ignore them (404 and
	// 406 above: RFC 9110 §13.2.1), If-Match first (§13.2.2).
	h := w.Header()
	h.Set("ETag", etag(e.Version))
	h.Set("Vary", "Accept")
	if e.ExpiresAt != 0 {
		h.Set("Statefun-Expires-At", time.UnixMilli(e.ExpiresAt).UTC().Format(time.RFC3339Nano))
	}
	h.Set("Statefun-Type", e.Typename)
	switch {
	case im != nil && !im.Matches(true, e.Version):
		writeProblem(w, r, problem{Status: http.StatusPreconditionFailed, Detail: "If-Match: no listed entity tag matches the entry's current version",
			CurrentVersion: versionString(e.Version)})
		return
	case inm != nil && inm.Matches(true, e.Version):
		// 304 Not Modified: the client's copy is current; no body.
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Type", media)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(body)
	}
}

// whyEmpty says why an entry has no value: an unknown function type, a
// state the function never registered, or simply no value.
func (s *Server) whyEmpty(a address.Address, state string, specs []partition.Spec) string {
	if len(specs) == 0 && !s.typeHoldsState(a.Type) {
		return fmt.Sprintf("function type %s is unknown: it registered no states and holds no state", a.Type)
	}
	registered := false
	var names []string
	for _, sp := range specs {
		names = append(names, sp.Name)
		registered = registered || sp.Name == state
	}
	if !registered {
		return fmt.Sprintf("state %q is not registered by %s (registered: %s), and %s holds no value under it", state, a.Type, strings.Join(names, ", "), a.ID)
	}
	return fmt.Sprintf("%s/%s has no value for state %q", a.Type, a.ID, state)
}

func (s *Server) typeHoldsState(t address.TypeName) bool {
	found := false
	s.st.ScanIDs(t, "", "", func(string) bool { found = true; return false })
	return found
}

// available lists the representations an entry has.
func available(e partition.Entry) []string {
	out := []string{mediaOctet, mediaJSON}
	if _, err := types.Text(e.Typename, e.Value); err == nil {
		out = append(out, mediaText+"; charset=utf-8")
	}
	return out
}

// negotiate picks the response representation from Accept, most preferred
// first: the first media range that can be served wins.
func negotiate(accept string, a address.Address, state string, e partition.Entry) (string, []byte, error) {
	ranges := parseAccept(accept)
	for _, m := range ranges {
		switch m {
		case "*/*", "":
			if e.Typename == types.String {
				if t, err := types.Text(e.Typename, e.Value); err == nil {
					return mediaText + "; charset=utf-8", []byte(t), nil
				}
			}
			return mediaOctet, e.Value, nil
		case mediaOctet, "application/*":
			return mediaOctet, e.Value, nil
		case mediaText, "text/*":
			if t, err := types.Text(e.Typename, e.Value); err == nil {
				return mediaText + "; charset=utf-8", []byte(t), nil
			}
		case mediaJSON:
			b, err := json.Marshal(envelopeOf(a, state, e))
			return mediaJSON, append(b, '\n'), err
		}
	}
	return "", nil, fmt.Errorf("no representation of %s (%s) matches Accept %q", state, e.Typename, accept)
}

// parseAccept returns the media ranges of an Accept header, by descending
// quality (stable for equal ones); q=0 ranges are dropped.
func parseAccept(h string) []string {
	if strings.TrimSpace(h) == "" {
		return []string{"*/*"}
	}
	type rng struct {
		m string
		q float64
	}
	var rs []rng
	for _, part := range strings.Split(h, ",") {
		m, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		q := 1.0
		if v, ok := params["q"]; ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				q = f
			}
		}
		if q > 0 {
			rs = append(rs, rng{m, q})
		}
	}
	sort.SliceStable(rs, func(i, j int) bool { return rs[i].q > rs[j].q })
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.m
	}
	return out
}

func envelopeOf(a address.Address, state string, e partition.Entry) types.Envelope {
	env := types.Envelope{
		Address:     types.EnvelopeAddress{Namespace: a.Type.Namespace, Type: a.Type.Name, ID: a.ID},
		State:       state,
		Typename:    e.Typename,
		Version:     strconv.FormatUint(e.Version, 10),
		ValueBase64: base64.StdEncoding.EncodeToString(e.Value),
	}
	if e.ExpiresAt != 0 {
		t := time.UnixMilli(e.ExpiresAt).UTC()
		env.ExpiresAt = &t
	}
	if v, ok, err := types.JSONValue(e.Typename, e.Value); err == nil && ok {
		env.Value = v
	}
	return env
}

// reasonOf returns the Statefun-Reason header. A reason that is not UTF-8
// is refused: the audit record keeps it in a protobuf string, which must be
// UTF-8, and a commit that cannot be encoded stops the partition.
func (s *Server) reasonOf(r *http.Request) (string, error) {
	reason := r.Header.Get("Statefun-Reason")
	if !utf8.ValidString(reason) {
		return "", errors.New("Statefun-Reason is not valid UTF-8")
	}
	if s.opts.RequireReason && strings.TrimSpace(reason) == "" {
		return "", errors.New("this deployment requires a Statefun-Reason header on every mutation")
	}
	return reason, nil
}

// mutationFrom reads the headers every mutation shares: ack mode, reason,
// conditions.
func (s *Server) mutationFrom(r *http.Request, principal string, a address.Address, state string) (partition.Mutation, error) {
	reason, err := s.reasonOf(r)
	m := partition.Mutation{ID: s.changeID(r), Addr: a, State: state, Principal: principal, Reason: reason}
	if err != nil {
		return m, err
	}
	switch ack := r.URL.Query().Get("ack"); ack {
	case "", "committed":
		m.Ack = partition.AckCommitted
	case "applied":
		m.Ack = partition.AckApplied
	case "accepted":
		m.Ack = partition.AckAccepted
	default:
		return m, fmt.Errorf("?ack=%q: want committed, applied or accepted", ack)
	}
	if strings.Contains(strings.ToLower(r.Header.Get("Prefer")), "respond-async") {
		m.Ack = partition.AckAccepted
	}
	m.IfMatchTags, m.IfNoneMatchTags, err = conditions(r)
	return m, err
}

func (s *Server) putEntry(w http.ResponseWriter, r *http.Request, principal string, a address.Address, state string) {
	m, err := s.mutationFrom(r, principal, a, state)
	if err != nil {
		fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			fail(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is over the limit of %d bytes", s.opts.MaxBodyBytes))
			return
		}
		fail(w, r, http.StatusBadRequest, "reading the body: "+err.Error())
		return
	}
	media := mediaOctet
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if media, _, err = mime.ParseMediaType(ct); err != nil {
			fail(w, r, http.StatusUnsupportedMediaType, fmt.Sprintf("Content-Type %q: %v", ct, err))
			return
		}
	}
	var env *types.Envelope
	if media == mediaJSON {
		env = new(types.Envelope)
		if err := json.Unmarshal(body, env); err != nil {
			fail(w, r, http.StatusBadRequest, "the body is not the JSON envelope: "+err.Error())
			return
		}
	}
	typename, status, err := s.targetType(r, a, state, env)
	if err != nil && status == 0 && s.opts.Commands != nil && errors.Is(err, engine.ErrMoved) {
		// Owned elsewhere: the owner resolves the typename when the
		// command takes its turn, but a text or JSON value is parsed here.
		typename, err = "", nil
		if media != mediaOctet {
			status, err = http.StatusBadRequest, noTypenameHere(state)
		}
	}
	if err != nil {
		if status == 0 {
			s.engineError(w, r, err)
			return
		}
		fail(w, r, status, err.Error())
		return
	}
	m.Typename = typename
	switch media {
	case mediaOctet:
		m.Value = body
	case mediaText:
		if m.Value, err = types.ParseText(typename, string(body)); err != nil {
			status := http.StatusUnprocessableEntity
			if errors.Is(err, types.ErrNoText) {
				status = http.StatusUnsupportedMediaType
			}
			fail(w, r, status, valueDetail(err))
			return
		}
	case mediaJSON:
		if m.Value, err = types.DecodeEnvelopeValue(typename, env, body); err != nil {
			status := http.StatusUnprocessableEntity
			if errors.Is(err, types.ErrEnvelope) {
				status = http.StatusBadRequest
			}
			fail(w, r, status, valueDetail(err))
			return
		}
	default:
		fail(w, r, http.StatusUnsupportedMediaType, fmt.Sprintf("Content-Type %s: want %s, %s or %s", media, mediaOctet, mediaText, mediaJSON))
		return
	}
	if m.Value == nil {
		m.Value = []byte{}
	}
	if err := types.Validate(typename, m.Value); typename != "" && err != nil {
		fail(w, r, http.StatusUnprocessableEntity, valueDetail(err))
		return
	}
	m.Op = partition.OpPut
	s.submit(w, r, m)
}

// targetType resolves the typename to store, in the spec's order: the
// Statefun-Type header (or the envelope's typename), the registered one,
// the existing value's. A given typename that differs from the registered
// one is a 409: the function would fail on it. A status of 0 with an error
// is an engine error.
func (s *Server) targetType(r *http.Request, a address.Address, state string, env *types.Envelope) (string, int, error) {
	given := r.Header.Get("Statefun-Type")
	if given == "" && env != nil {
		given = env.Typename
	}
	if given != "" {
		// UTF-8 too: the store keeps the typename in a protobuf string, and
		// a commit that cannot be encoded stops the partition.
		if _, err := address.ParseTypeNameLax(given); err != nil || !utf8.ValidString(given) {
			return "", http.StatusBadRequest, fmt.Errorf("Statefun-Type %q is not a typename <namespace>/<name> in UTF-8", given)
		}
	}
	for _, sp := range s.eng.SpecsOf(a.Type) {
		if sp.Name != state {
			continue
		}
		if given != "" && given != sp.Typename {
			return "", http.StatusConflict, fmt.Errorf("%s registered state %q as %s; storing %s would make the function fail", a.Type, state, sp.Typename, given)
		}
		return sp.Typename, 0, nil
	}
	if given != "" {
		return given, 0, nil
	}
	rep, err := s.eng.Read(r.Context(), a, state)
	if err != nil {
		return "", 0, err // engineError's answer
	}
	if len(rep.Entries) > 0 && rep.Entries[0].Entry.Typename != "" {
		return rep.Entries[0].Entry.Typename, 0, nil
	}
	return "", http.StatusBadRequest, fmt.Errorf("no typename for %q: send a Statefun-Type header (the function has not registered this state and it holds no value)", state)
}

func (s *Server) deleteEntry(w http.ResponseWriter, r *http.Request, principal string, a address.Address, state string) {
	m, err := s.mutationFrom(r, principal, a, state)
	if err != nil {
		fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	m.Op = partition.OpDelete
	s.submit(w, r, m)
}

func (s *Server) deleteAddress(w http.ResponseWriter, r *http.Request, principal string, a address.Address) {
	m, err := s.mutationFrom(r, principal, a, "")
	if err != nil {
		fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	if name, ok := hasCondition(r); ok {
		fail(w, r, http.StatusBadRequest, name+": conditions apply to one entry; If-Match and If-None-Match are not supported on a whole address")
		return
	}
	m.Op = partition.OpDeleteAll
	s.submit(w, r, m)
}

// receiptJSON is the receipt of docs/reference/state-api.md ("Failure guarantees").
type receiptJSON struct {
	Mutation        string  `json:"mutation"`
	Status          string  `json:"status"`
	Checkpoint      *uint64 `json:"checkpoint"`
	Version         *string `json:"version"`
	PreviousVersion *string `json:"previousVersion"`
	Reason          string  `json:"reason,omitempty"`
	// Rejection names why a rejected mutation was not applied
	// (rejectionName): "precondition", "type-conflict", "no-typename",
	// "not-found", "conflict".
	Rejection string `json:"rejection,omitempty"`
	// Commit is the position of the commit carrying the mutation,
	// "<partition>.<commit id>", for a read's ?minCommit= (history.go).
	Commit string `json:"commit,omitempty"`
}

// submit hands a mutation to the engine and answers with its receipt.
func (s *Server) submit(w http.ResponseWriter, r *http.Request, m partition.Mutation) {
	rc, err := s.mutate(r, m)
	if err != nil {
		if !commandError(w, r, err) {
			s.engineError(w, r, err)
		}
		return
	}
	if m.Ack == partition.AckAccepted {
		w.Header().Set("Location", "/mutations/"+m.ID)
		writeJSON(w, http.StatusAccepted, receiptJSON{Mutation: m.ID, Status: "accepted"})
		return
	}
	out := receiptOf(rc)
	out.Commit = position(s.partitionOf(rc.Addr), rc.Checkpoint)
	if rc.Reject == partition.Applied {
		if rc.Version != 0 {
			w.Header().Set("ETag", etag(rc.Version))
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	p := problem{Detail: rc.Reason, Receipt: &out}
	switch rc.Reject {
	case partition.RejectPrecondition:
		p.Status = http.StatusPreconditionFailed
		p.CurrentVersion = versionString(rc.Version)
		if rc.Version != 0 {
			w.Header().Set("ETag", etag(rc.Version))
		}
	case partition.RejectTypeConflict:
		p.Status = http.StatusConflict
	case partition.RejectNoTypename:
		p.Status = http.StatusBadRequest
	case partition.RejectNotFound:
		p.Status = http.StatusNotFound
	default:
		p.Status = http.StatusInternalServerError
	}
	writeProblem(w, r, p)
}

func receiptOf(rc partition.Receipt) receiptJSON {
	out := receiptJSON{Mutation: rc.Mutation, Status: "committed", Reason: rc.Reason}
	if rc.Ack == partition.AckApplied {
		out.Status = "applied"
	}
	if rc.Reject != partition.Applied {
		out.Status = "rejected"
		out.Rejection = rejectionName(rc.Reject)
		out.Version = versionString(rc.Version)
	} else {
		out.Version = versionString(rc.Version)
		out.PreviousVersion = versionString(rc.PreviousVersion)
	}
	cp := rc.Checkpoint
	out.Checkpoint = &cp
	return out
}

// valueDetail is a value error as a problem detail: the types package's
// explanation without its package prefix.
func valueDetail(err error) string {
	var te *types.Error
	if errors.As(err, &te) {
		return te.Detail
	}
	return err.Error()
}
