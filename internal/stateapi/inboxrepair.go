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
	"github.com/statefun-go/statefun/internal/engine"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
)

// This file is the API of the repair of an inbox (docs/reference/state-api.md,
// "Repair routes"; docs/how-to/repair.md): skip, edit or cancel a
// message, cancel a delayed message, delete an address, and the message
// dead letters a skip leaves, listed, read and re-sent.

// InboxRepairer is what the inbox repair routes need of the runtime.
type InboxRepairer interface {
	// Repair applies a repair mutation in the address's mailbox order and
	// returns its receipt once durable.
	Repair(ctx context.Context, m partition.Mutation) (partition.Receipt, error)
	// RepairDelayed cancels a delayed message (or puts back what a cancel
	// took, held by partition part) and returns its receipt once durable.
	RepairDelayed(ctx context.Context, part int, ev partition.DelayedRepair) (partition.Receipt, error)
	// Resend sends a message dead letter again as a new message.
	Resend(ctx context.Context, r engine.ResendRequest) (partition.Receipt, partition.InboxKey, error)
}

// maxRepairBody caps the body of a repair request: an edit carries a
// message's value.
const maxRepairBody = 8 << 20

// repairBody is the body of POST /inbox/…/skip, …/edit and …/cancel, of
// DELETE /addresses/… and of POST /dead-letters/messages/<id>/resend.
// Which fields a route takes is checked by the route.
type repairBody struct {
	Reason string `json:"reason"`
	// Key is an inbox key as GET /inbox lists it.
	Key string `json:"key"`
	// Typename, Value (base64) and Text are an edit's new argument.
	Typename string  `json:"typename"`
	Value    *string `json:"value"`
	Text     *string `json:"text"`
	// Timer ("<partition>/<timer id>") or Sender and Token name a delayed
	// message to cancel.
	Timer  string       `json:"timer"`
	Sender *addressJSON `json:"sender"`
	Token  string       `json:"token"`
	// Target receives a re-sent dead letter instead of its address.
	Target *addressJSON `json:"target"`
}

// readRepairBody reads an optional JSON body and the reason (the body's,
// else Statefun-Reason).
func (s *Server) readRepairBody(w http.ResponseWriter, r *http.Request) (repairBody, bool) {
	rb, _, ok := s.readRepairBodyBytes(w, r)
	return rb, ok
}

// readRepairBodyBytes is readRepairBody that also returns the body as
// read, for a request that may be sent on to another node.
func (s *Server) readRepairBodyBytes(w http.ResponseWriter, r *http.Request) (repairBody, []byte, bool) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRepairBody+1))
	if err != nil {
		fail(w, r, http.StatusBadRequest, "reading the body: "+err.Error())
		return repairBody{}, nil, false
	}
	if len(body) > maxRepairBody {
		fail(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is over %d bytes", maxRepairBody))
		return repairBody{}, nil, false
	}
	rb, ok := s.decodeRepairBody(w, r, body)
	return rb, body, ok
}

// decodeRepairBody decodes a repair's body and takes its reason.
func (s *Server) decodeRepairBody(w http.ResponseWriter, r *http.Request, body []byte) (repairBody, bool) {
	var rb repairBody
	if len(bytes.TrimSpace(body)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rb); err != nil {
			fail(w, r, http.StatusBadRequest, "the body must be a JSON object: "+err.Error())
			return rb, false
		}
	}
	if rb.Reason == "" {
		rb.Reason = r.Header.Get("Statefun-Reason")
	}
	if !utf8.ValidString(rb.Reason) {
		fail(w, r, http.StatusBadRequest, "reason: not valid UTF-8")
		return rb, false
	}
	if s.opts.RequireReason && strings.TrimSpace(rb.Reason) == "" {
		fail(w, r, http.StatusBadRequest, "this deployment requires a reason: give \"reason\" in the body or a Statefun-Reason header")
		return rb, false
	}
	return rb, true
}

// parseInboxKey reads "<partition>/<source>/<seq>" (source "ingress",
// "messages" — cluster mode's messages topic, seq its offset — or a
// partition), as GET /inbox lists keys (engine.FormatInboxKey).
func parseInboxKey(s string) (partition.InboxKey, error) {
	parts := strings.Split(s, "/")
	bad := fmt.Errorf("key %q: want <partition>/<source>/<seq> as GET /inbox lists it, e.g. 3/ingress/17, 3/messages/17 or 3/1/17", s)
	if len(parts) != 3 {
		return partition.InboxKey{}, bad
	}
	p, err1 := strconv.ParseUint(parts[0], 10, 16)
	seq, err2 := strconv.ParseUint(parts[2], 10, 64)
	if err1 != nil || err2 != nil {
		return partition.InboxKey{}, bad
	}
	k := partition.InboxKey{Partition: int(p), Seq: seq}
	switch parts[1] {
	case "ingress":
		k.Source = partition.SourceIngress
	case "messages":
		k.Source = partition.SourceMessages
	default:
		src, err := strconv.ParseUint(parts[1], 10, 16)
		if err != nil {
			return partition.InboxKey{}, bad
		}
		k.Source = uint32(src)
	}
	return k, nil
}

// serveInboxAction answers POST /inbox/<ns>/<type>/<id>/skip, …/edit and
// …/cancel.
func (s *Server) serveInboxAction(w http.ResponseWriter, r *http.Request, segs []string) {
	action := segs[3]
	if action != "skip" && action != "edit" && action != "cancel" {
		fail(w, r, http.StatusNotFound, "want /inbox/<namespace>/<type>/<id>[/skip|/edit|/cancel]")
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
	a := address.Address{Type: address.TypeName{Namespace: segs[0], Name: segs[1]}, ID: segs[2]}
	if s.forwardChange(w, r, a) {
		return
	}
	rb, ok := s.readRepairBody(w, r)
	if !ok {
		return
	}
	if rb.Target != nil {
		fail(w, r, http.StatusBadRequest, "target: only a re-send of a dead letter takes a target")
		return
	}
	m := partition.Mutation{ID: s.changeID(r), Addr: a, Principal: principal, Reason: rb.Reason, Repair: &partition.MessageRepair{}}
	if rb.Key != "" {
		k, err := parseInboxKey(rb.Key)
		if err != nil {
			fail(w, r, http.StatusBadRequest, err.Error())
			return
		}
		m.Repair.Key = &k
	}
	delayed := rb.Timer != "" || rb.Sender != nil || rb.Token != ""
	switch action {
	case "skip":
		m.Op = partition.OpSkipMessage
	case "edit":
		m.Op = partition.OpEditMessage
		arg, err := editArgument(rb)
		if err != nil {
			fail(w, r, http.StatusBadRequest, err.Error())
			return
		}
		m.Repair.Argument = arg
	case "cancel":
		if delayed {
			s.cancelDelayed(w, r, principal, a, rb)
			return
		}
		if rb.Key == "" {
			fail(w, r, http.StatusBadRequest, "key: a cancel names the queued message by its key, or a delayed message by timer, or by sender and token")
			return
		}
		m.Op = partition.OpCancelMessage
	}
	if delayed {
		fail(w, r, http.StatusBadRequest, "timer, sender and token name a delayed message: only a cancel takes them")
		return
	}
	if action != "edit" && (rb.Typename != "" || rb.Value != nil || rb.Text != nil) {
		fail(w, r, http.StatusBadRequest, "typename, value and text: only an edit takes them")
		return
	}
	rc, err := s.eng.Repair(r.Context(), m)
	if err != nil {
		s.engineError(w, r, err)
		return
	}
	s.answerRepair(w, r, rc, action)
}

// editArgument is an edit's new argument: the typename (required: the
// runtime does not know which the function expects) and the value, as
// base64 (value) or UTF-8 text (text).
func editArgument(rb repairBody) (*protocol.TypedValue, error) {
	if rb.Typename == "" {
		return nil, errors.New("typename: an edit gives the message's typename (the current one to keep it)")
	}
	if err := address.CheckTypename(rb.Typename); err != nil {
		return nil, fmt.Errorf("typename: %v", err)
	}
	switch {
	case rb.Value != nil && rb.Text != nil:
		return nil, errors.New("give value (base64) or text, not both")
	case rb.Value != nil:
		v, err := base64.StdEncoding.DecodeString(*rb.Value)
		if err != nil {
			return nil, fmt.Errorf("value: not base64: %v", err)
		}
		return &protocol.TypedValue{Typename: rb.Typename, HasValue: true, Value: v}, nil
	case rb.Text != nil:
		return &protocol.TypedValue{Typename: rb.Typename, HasValue: true, Value: []byte(*rb.Text)}, nil
	}
	return nil, errors.New("value or text: an edit gives the message's new value")
}

// cancelDelayed answers a cancel of a delayed message.
func (s *Server) cancelDelayed(w http.ResponseWriter, r *http.Request, principal string, a address.Address, rb repairBody) {
	ev := partition.DelayedRepair{Mutation: s.changeID(r), Principal: principal, Reason: rb.Reason, Addr: a}
	part := 0
	switch {
	case rb.Key != "":
		fail(w, r, http.StatusBadRequest, "key names a queued message; a delayed one is named by timer, or by sender and token")
		return
	case rb.Timer != "" && (rb.Sender != nil || rb.Token != ""):
		fail(w, r, http.StatusBadRequest, "give timer, or sender and token, not both")
		return
	case rb.Timer != "":
		p, id, ok := strings.Cut(rb.Timer, "/")
		pn, err1 := strconv.ParseUint(p, 10, 16)
		n, err2 := strconv.ParseUint(id, 10, 64)
		if !ok || err1 != nil || err2 != nil || n == 0 {
			fail(w, r, http.StatusBadRequest, fmt.Sprintf("timer %q: want <partition>/<timer id> as GET /inbox lists it", rb.Timer))
			return
		}
		part, ev.TimerID = int(pn), n
	default:
		if rb.Sender == nil || rb.Token == "" {
			fail(w, r, http.StatusBadRequest, "sender and token: both name a delayed message (a token is scoped by its sender)")
			return
		}
		ev.Sender = address.Address{Type: address.TypeName{Namespace: rb.Sender.Namespace, Name: rb.Sender.Type}, ID: rb.Sender.ID}
		if err := address.CheckAddress(ev.Sender); err != nil {
			fail(w, r, http.StatusBadRequest, "sender: "+err.Error())
			return
		}
		ev.Token = rb.Token
	}
	rc, err := s.eng.RepairDelayed(r.Context(), part, ev)
	if errors.Is(err, engine.ErrNoSuchPartition) {
		fail(w, r, http.StatusBadRequest, "timer: "+err.Error())
		return
	}
	if err != nil {
		s.engineError(w, r, err)
		return
	}
	s.answerRepair(w, r, rc, "cancel")
}

// repairReceiptJSON is the receipt of a repair: a skip names the dead
// letter it made.
type repairReceiptJSON struct {
	receiptJSON
	// DeadLetter is the id of the skipped message among the message dead
	// letters (GET /dead-letters/messages/<id>).
	DeadLetter string `json:"deadLetter,omitempty"`
}

// answerRepair writes a repair's receipt, or its rejection: 404 when the
// message or address holds nothing to act on, 409 when the address is
// not in a state that allows it, 412 when a revert finds the entry (or
// token) taken again.
func (s *Server) answerRepair(w http.ResponseWriter, r *http.Request, rc partition.Receipt, action string) {
	out := repairReceiptJSON{receiptJSON: receiptOf(rc)}
	out.Commit = position(rc.Partition, rc.Checkpoint)
	if rc.Reject == partition.Applied {
		if action == "skip" {
			out.DeadLetter = rc.Mutation
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	status := http.StatusConflict
	switch rc.Reject {
	case partition.RejectNotFound:
		status = http.StatusNotFound
	case partition.RejectPrecondition:
		status = http.StatusPreconditionFailed
	}
	rj := out.receiptJSON
	writeProblem(w, r, problem{Status: status, Detail: rc.Reason, Receipt: &rj})
}

// serveAddresses answers DELETE /addresses/<ns>/<type>/<id>: the address
// deleted entirely (it must be paused).
func (s *Server) serveAddresses(w http.ResponseWriter, r *http.Request) {
	segs, err := splitPath(r.URL.EscapedPath(), "/addresses")
	if err != nil {
		fail(w, r, http.StatusBadRequest, "bad address: "+err.Error())
		return
	}
	if len(segs) != 3 {
		fail(w, r, http.StatusNotFound, "want /addresses/<namespace>/<type>/<id>")
		return
	}
	if r.Method != http.MethodDelete {
		methodNotAllowed(w, r, "DELETE")
		return
	}
	principal, ok := s.authorize(w, r, ScopeWrite)
	if !ok {
		return
	}
	a := address.Address{Type: address.TypeName{Namespace: segs[0], Name: segs[1]}, ID: segs[2]}
	if s.forwardChange(w, r, a) {
		return
	}
	rb, ok := s.readRepairBody(w, r)
	if !ok {
		return
	}
	rc, err := s.eng.Repair(r.Context(), partition.Mutation{ID: s.changeID(r), Addr: a, Op: partition.OpDeleteAddress,
		Principal: principal, Reason: rb.Reason, Repair: &partition.MessageRepair{}})
	if err != nil {
		s.engineError(w, r, err)
		return
	}
	if rc.Reject == partition.RejectConflict {
		rj := receiptOf(rc)
		writeProblem(w, r, problem{Status: http.StatusConflict, Detail: "the address is not paused: pause it first (POST /pause/<namespace>/<type>/<id>), so that nothing of it is in flight and no message is invoked unseen", Receipt: &rj})
		return
	}
	s.answerRepair(w, r, rc, "delete-address")
}

// revertRepair reverts a cancel or a delete of an address from its audit
// records: one reinstate that puts back the entries, the messages (as new
// messages at the end of the inbox) and the delayed messages. It reports
// false for records of another kind of mutation.
func (s *Server) revertRepair(w http.ResponseWriter, r *http.Request, principal, id string, records []*protocol.AuditRecord) bool {
	op := partition.MutationOp(records[0].GetOp())
	switch op {
	case partition.OpCancelMessage, partition.OpCancelDelayed, partition.OpDeleteAddress:
	case partition.OpSkipMessage:
		fail(w, r, http.StatusConflict, "mutation "+id+" is a skip: re-send its message with POST /dead-letters/messages/"+id+"/resend")
		return true
	case partition.OpEditMessage, partition.OpReinstate, partition.OpResendMessage:
		fail(w, r, http.StatusConflict, "mutation "+id+" moved or changed a message that may have run since; it cannot be reverted")
		return true
	default:
		return false
	}
	reason, err := s.reasonOf(r)
	if err != nil {
		fail(w, r, http.StatusBadRequest, err.Error())
		return true
	}
	if strings.TrimSpace(reason) == "" {
		reason = "revert of " + id
	}
	a := addrOf(records[0].GetTarget())
	var rc partition.Receipt
	if op == partition.OpCancelDelayed {
		timers := engine.TimersFromImages(records[0].GetTimers())
		ev := partition.DelayedRepair{Mutation: s.changeID(r), Principal: principal, Reason: reason, Reverts: id, Addr: a, Reinstate: timers}
		part := 0
		if len(timers) > 0 {
			part = timers[0].Key.Partition
		}
		rc, err = s.eng.RepairDelayed(r.Context(), part, ev)
	} else {
		rep := &partition.MessageRepair{}
		for _, rec := range records {
			if rec.GetState() != "" && rec.GetHadBefore() {
				rep.Entries = append(rep.Entries, partition.StateEntry{State: rec.GetState(), Entry: partition.Entry{
					Typename: rec.GetBeforeTypename(), Value: rec.GetBeforeValue(), ExpiresAt: rec.GetBeforeExpiresAt()}})
			}
			rep.Messages = append(rep.Messages, rec.GetMessages()...)
			rep.Timers = append(rep.Timers, engine.TimersFromImages(rec.GetTimers())...)
		}
		rc, err = s.eng.Repair(r.Context(), partition.Mutation{ID: s.changeID(r), Addr: a, Op: partition.OpReinstate,
			Principal: principal, Reason: reason, Reverts: id, Repair: rep})
	}
	if err != nil {
		s.engineError(w, r, err)
		return true
	}
	s.answerRepair(w, r, rc, "revert")
	return true
}

// messageDeadLetterJSON is a skipped message as the API answers it.
type messageDeadLetterJSON struct {
	// ID is the skip's mutation id.
	ID        string       `json:"id"`
	SkippedAt time.Time    `json:"skippedAt"`
	Address   addressJSON  `json:"address"`
	InboxKey  string       `json:"inboxKey"`
	Caller    *addressJSON `json:"caller"`
	Typename  string       `json:"typename"`
	Value     bytesJSON    `json:"value"`
	Principal string       `json:"principal"`
	Reason    string       `json:"reason"`
	Attempts  int          `json:"attempts"`
	LastError string       `json:"lastError"`
}

func messageDeadLetterOf(d *protocol.MessageDeadLetter) messageDeadLetterJSON {
	env := d.GetEnvelope()
	out := messageDeadLetterJSON{ID: d.GetId(), SkippedAt: ms(d.GetAt()), Address: addressOf(addrOf(env.GetTarget())), InboxKey: d.GetInboxKey(),
		Typename: env.GetArgument().GetTypename(), Value: bytesOf(env.GetArgument().GetValue()), Principal: d.GetPrincipal(),
		Reason: d.GetReason(), Attempts: int(d.GetAttempts()), LastError: d.GetLastError()}
	if c := env.GetCaller(); c != nil {
		ca := addressOf(addrOf(c))
		out.Caller = &ca
	}
	return out
}

// serveDeadLetters answers GET /dead-letters/messages?after=&limit=, GET
// /dead-letters/messages/<id> and POST /dead-letters/messages/<id>/resend.
// (The dead letters of the Kafka ingresses are at
// /ingresses/<name>/dead-letters.)
func (s *Server) serveDeadLetters(w http.ResponseWriter, r *http.Request) {
	segs, err := splitPath(r.URL.EscapedPath(), "/dead-letters")
	if err != nil {
		fail(w, r, http.StatusBadRequest, "bad path: "+err.Error())
		return
	}
	if len(segs) == 0 || segs[0] != "messages" || len(segs) > 3 || (len(segs) == 3 && segs[2] != "resend") {
		fail(w, r, http.StatusNotFound, "want /dead-letters/messages[/<id>[/resend]] (the dead letters of a Kafka ingress are at /ingresses/<name>/dead-letters)")
		return
	}
	if len(segs) == 3 {
		if r.Method != http.MethodPost {
			methodNotAllowed(w, r, "POST")
			return
		}
		principal, ok := s.authorize(w, r, ScopeWrite)
		if ok {
			s.resend(w, r, principal, segs[1])
		}
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed(w, r, "GET, HEAD")
		return
	}
	if _, ok := s.authorize(w, r, ScopeRead); !ok {
		return
	}
	if len(segs) == 2 {
		if s.gatherOne(w, r, 0) {
			return
		}
		d, ok, err := s.st.MessageDeadLetter(segs[1])
		if err != nil {
			s.engineError(w, r, err)
			return
		}
		if own := s.localPart(w, r); ok && own != nil && !own[s.partitionOf(addrOf(d.GetEnvelope().GetTarget()))] {
			ok = false // a stale copy of a partition that moved away: its owner answers
		}
		if !ok {
			fail(w, r, http.StatusNotFound, noDeadLetter(segs[1]))
			return
		}
		writeJSON(w, http.StatusOK, messageDeadLetterOf(d))
		return
	}
	if err := checkParams(r, "after", "limit", "type"); err != nil {
		fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	limit, err := limitParam(r, DefaultDeadLetterLimit, MaxDeadLetterLimit)
	if err != nil {
		fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	t, err := typeParam(r.URL.Query().Get("type"))
	if err != nil {
		fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	if s.gather(w, r, deadLettersListing(limit)) {
		return
	}
	own := s.localPart(w, r)
	page := struct {
		DeadLetters []messageDeadLetterJSON `json:"deadLetters"`
		Next        *string                 `json:"next"`
	}{DeadLetters: []messageDeadLetterJSON{}}
	err = s.st.ScanMessageDeadLetters(r.URL.Query().Get("after"), func(d *protocol.MessageDeadLetter) bool {
		if a := addrOf(d.GetEnvelope().GetTarget()); ((t != address.TypeName{}) && a.Type != t) || (own != nil && !own[s.partitionOf(a)]) {
			return true
		}
		if len(page.DeadLetters) == limit {
			next := page.DeadLetters[limit-1].ID
			page.Next = &next
			return false
		}
		page.DeadLetters = append(page.DeadLetters, messageDeadLetterOf(d))
		return true
	})
	if err != nil {
		s.engineError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, page)
}

// resend answers POST /dead-letters/messages/<id>/resend {target?, reason?}.
func (s *Server) resend(w http.ResponseWriter, r *http.Request, principal, id string) {
	rb, body, ok := s.readRepairBodyBytes(w, r)
	if !ok {
		return
	}
	if rb.Key != "" || rb.Timer != "" || rb.Sender != nil || rb.Token != "" || rb.Typename != "" || rb.Value != nil || rb.Text != nil {
		fail(w, r, http.StatusBadRequest, "a re-send takes only target and reason (edit a message before skipping it, or re-send it and edit it at its new place)")
		return
	}
	req := engine.ResendRequest{Mutation: s.changeID(r), DeadLetter: id, Principal: principal, Reason: rb.Reason}
	if rb.Target != nil {
		a := address.Address{Type: address.TypeName{Namespace: rb.Target.Namespace, Name: rb.Target.Type}, ID: rb.Target.ID}
		if err := address.CheckAddress(a); err != nil {
			fail(w, r, http.StatusBadRequest, "target: "+err.Error())
			return
		}
		req.Target = &a
	}
	if s.opts.Cluster != nil {
		d, held, err := s.st.MessageDeadLetter(id)
		if err != nil {
			s.engineError(w, r, err)
			return
		}
		if s.forwardByID(w, r, body, held, s.partitionOf(addrOf(d.GetEnvelope().GetTarget())), s.deadLetterHolder(id)) {
			return
		}
	}
	rc, key, err := s.eng.Resend(r.Context(), req)
	switch {
	case errors.Is(err, engine.ErrNoDeadLetter):
		fail(w, r, http.StatusNotFound, noDeadLetter(id))
		return
	case errors.Is(err, engine.ErrNotRoutable):
		fail(w, r, http.StatusBadRequest, "target: no endpoint in module.yaml serves "+req.Target.Type.String())
		return
	case err != nil:
		s.engineError(w, r, err)
		return
	}
	if rc.Ack == engine.AckAccepted {
		s.resentAcross(w, r, rc)
		return
	}
	writeJSON(w, http.StatusOK, resentJSON{Mutation: rc.Mutation, Status: "committed", Address: addressOf(rc.Addr), InboxKey: engine.FormatInboxKey(key)})
}

// resentJSON is the answer to a re-send.
type resentJSON struct {
	Mutation string      `json:"mutation"`
	Status   string      `json:"status"`
	Address  addressJSON `json:"address"`
	// InboxKey is the new message's; absent when another node's partition
	// took the message in (resentAcross).
	InboxKey string `json:"inboxKey,omitempty"`
}

// repairOpNames are the audit log's names of the inbox repairs.
var repairOpNames = map[partition.MutationOp]string{
	partition.OpSkipMessage: "skip", partition.OpEditMessage: "edit-message", partition.OpCancelMessage: "cancel",
	partition.OpCancelDelayed: "cancel-delayed", partition.OpDeleteAddress: "delete-address",
	partition.OpReinstate: "reinstate", partition.OpResendMessage: "resend",
}

// auditMessage is a message in an audit record.
type auditMessage struct {
	Caller   *addressJSON `json:"caller"`
	Typename string       `json:"typename"`
	Value    bytesJSON    `json:"value"`
}

// auditDelayed is a delayed message in an audit record.
type auditDelayed struct {
	Timer    string       `json:"timer"`
	DueAt    time.Time    `json:"dueAt"`
	Token    string       `json:"token"`
	Target   addressJSON  `json:"target"`
	Sender   *addressJSON `json:"sender"`
	Typename string       `json:"typename"`
	Value    bytesJSON    `json:"value"`
}

func auditMessageOf(env *protocol.Envelope) auditMessage {
	m := auditMessage{Typename: env.GetArgument().GetTypename(), Value: bytesOf(env.GetArgument().GetValue())}
	if c := env.GetCaller(); c != nil {
		ca := addressOf(addrOf(c))
		m.Caller = &ca
	}
	return m
}

// addRepairImages names a repair's operation in an audit record and adds
// the messages it took away or put back.
func addRepairImages(out *auditJSON, a *protocol.AuditRecord) {
	out.Op = repairOpNames[partition.MutationOp(a.GetOp())]
	for _, env := range a.GetMessages() {
		out.Messages = append(out.Messages, auditMessageOf(env))
	}
	for _, t := range a.GetTimers() {
		env := t.GetEnvelope()
		m := auditMessageOf(env)
		out.Delayed = append(out.Delayed, auditDelayed{Timer: fmt.Sprintf("%d/%d", t.GetPartition(), t.GetId()), DueAt: ms(t.GetDue()),
			Token: env.GetCancellationToken(), Target: addressOf(addrOf(env.GetTarget())), Sender: m.Caller, Typename: m.Typename, Value: m.Value})
	}
}
