// Package egress holds the edges where records leave the application.
// Playground is the HTTP egress of the StateFun playground
// (io.statefun.playground.v1/egress); Kafka comes with cluster mode.
package egress

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/statefun-go/statefun/internal/protocol"
)

// PlaygroundID is the fixed identifier of the playground egress.
const PlaygroundID = "io.statefun.playground/egress"

// RecordTypename is the typename a function must give a playground egress
// record.
const RecordTypename = "io.statefun.playground/EgressRecord"

// Record is the JSON body of a playground egress record.
type Record struct {
	Topic   string `json:"topic"`
	Payload string `json:"payload"`
}

// Router checks the records functions send to the egresses of a module and
// returns each one's route (its topic). It is pure: the partition core calls
// it while validating a response.
type Router struct {
	topics map[string]bool
}

// NewRouter returns a Router for a playground egress with these topics; with
// no topics it refuses every record.
func NewRouter(topics []string) *Router {
	r := &Router{topics: map[string]bool{}}
	for _, t := range topics {
		r.topics[t] = true
	}
	return r
}

// Route implements partition.Config.Egress.
func (r *Router) Route(namespace, typ string, arg *protocol.TypedValue) (string, error) {
	if namespace+"/"+typ != PlaygroundID || len(r.topics) == 0 {
		return "", fmt.Errorf("unknown egress %s/%s (module.yaml binds %s)", namespace, typ, r.bound())
	}
	if arg.GetTypename() != RecordTypename {
		return "", fmt.Errorf("a playground egress record must have typename %s, got %q", RecordTypename, arg.GetTypename())
	}
	rec, err := DecodeRecord(arg)
	if err != nil {
		return "", err
	}
	if !r.topics[rec.Topic] {
		return "", fmt.Errorf("topic %q is not one of the egress's topics [%s]", rec.Topic, strings.Join(r.list(), ", "))
	}
	return rec.Topic, nil
}

func (r *Router) list() []string {
	var out []string
	for t := range r.topics {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

func (r *Router) bound() string {
	if len(r.topics) == 0 {
		return "no egress"
	}
	return PlaygroundID
}

// DecodeRecord reads a playground egress record's JSON.
func DecodeRecord(arg *protocol.TypedValue) (Record, error) {
	var rec Record
	if err := json.Unmarshal(arg.GetValue(), &rec); err != nil {
		return rec, fmt.Errorf("a playground egress record must be JSON {\"topic\":..,\"payload\":..}: %v", err)
	}
	return rec, nil
}

// Source is the outbox the playground egress hands out: the durable
// records functions sent to one egress, per route (topic). The engine
// implements it (in cluster mode it refuses every call: the playground
// egress is embedded-only). Errors Playground.Unavailable accepts answer
// 503.
type Source interface {
	// PopEgress removes and returns the oldest record of a route, or false
	// when there is none. It returns once the removal is durable, so a
	// record is handed out at most once: one whose caller stops waiting,
	// or never gets the answer, is lost.
	PopEgress(ctx context.Context, egress, route string) (*protocol.EgressRecord, bool, error)
	// ReadEgress returns the first record of a route whose position is
	// greater than after (0: the oldest), with that position, without
	// removing it; false when there is none. Positions grow with every
	// record and are never given twice.
	ReadEgress(ctx context.Context, egress, route string, after uint64) (uint64, *protocol.EgressRecord, bool, error)
	// AckEgress removes every record of a route at or below pos and
	// returns once the removal is durable; again is harmless. It refuses
	// (Playground.NotRead) a position beyond what reads handed out while
	// unread records lie at or below it.
	AckEgress(ctx context.Context, egress, route string, pos uint64) error
}

// PositionHeader carries a record's position in the answer to a cursor
// read; the consumer acknowledges it with POST /<topic>?ack=<position>.
const PositionHeader = "Statefun-Egress-Position"

// Playground serves the playground egress: one queue per topic.
//
//   - GET /<topic> pops the oldest record and answers its payload as UTF-8
//     text (StateFun's playground; at most once: a record whose answer is
//     lost is lost); 404 when the topic is empty.
//   - GET /<topic>?after=<position> reads the first record after a position
//     (0: the oldest) without removing it, its position in the
//     Statefun-Egress-Position header; 404 when there is none.
//   - POST /<topic>?ack=<position> removes the records up to a position
//     once durable (204); 409 when a record at or below it was never read.
//
// An unknown topic is answered 405, as by StateFun's playground. See
// docs/reference/egress.md.
type Playground struct {
	Source Source
	Topics []string
	// NotRead tells whether an AckEgress error means the position was not
	// read yet (409).
	NotRead func(error) bool
	// Unavailable tells whether an error means the runtime cannot serve
	// now (stopping, or stopped on a store error): 503 with Retry-After
	// rather than 500. Nil means never.
	Unavailable func(error) bool
	Logger      *slog.Logger
}

// allowed is the Allow header of a 405.
const allowed = "GET, POST"

// ServeHTTP pops, reads or acknowledges.
func (p *Playground) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		w.Header().Set("Allow", allowed)
		http.Error(w, "egress: GET /<topic> pops one record, GET /<topic>?after=<position> reads one, POST /<topic>?ack=<position> acknowledges", http.StatusMethodNotAllowed)
		return
	}
	topic := strings.TrimPrefix(r.URL.Path, "/")
	known := false
	for _, t := range p.Topics {
		known = known || t == topic
	}
	if !known {
		http.Error(w, fmt.Sprintf("egress: unknown topic %q", topic), http.StatusMethodNotAllowed)
		return
	}
	q := r.URL.Query()
	allowedParam := "after"
	if r.Method == http.MethodPost {
		allowedParam = "ack"
	}
	if err := checkQuery(q, allowedParam); err != nil {
		// A misspelt ?after= would otherwise pop (remove) the record it
		// meant to read, and a repeated one pick one of its values.
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	switch {
	case r.Method == http.MethodPost:
		p.ack(w, r, topic, q)
	case q.Has("after"):
		p.read(w, r, topic, q.Get("after"))
	default:
		p.pop(w, r, topic)
	}
}

// checkQuery refuses a query parameter other than allowed, and a
// repeated one, as the state API does.
func checkQuery(q url.Values, allowed string) error {
	for k, vs := range q {
		if k != allowed {
			return fmt.Errorf("egress: unknown query parameter %q; GET takes only after, POST only ack", k)
		}
		if len(vs) > 1 {
			return fmt.Errorf("egress: query parameter %q is repeated", k)
		}
	}
	return nil
}

// position parses a position parameter, naming it in the error.
func position(name, v string) (uint64, error) {
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("egress: %s must be a position (a decimal number from a %s header, or 0), got %q", name, PositionHeader, v)
	}
	return n, nil
}

func (p *Playground) pop(w http.ResponseWriter, r *http.Request, topic string) {
	rec, ok, err := p.Source.PopEgress(r.Context(), PlaygroundID, topic)
	if err != nil {
		p.fail(w, r, "pop", topic, err)
		return
	}
	if !ok {
		http.Error(w, "egress: no message in topic "+topic, http.StatusNotFound)
		return
	}
	p.answer(w, rec)
}

func (p *Playground) read(w http.ResponseWriter, r *http.Request, topic, after string) {
	from, err := position("after", after)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	pos, rec, ok, err := p.Source.ReadEgress(r.Context(), PlaygroundID, topic, from)
	if err != nil {
		p.fail(w, r, "read", topic, err)
		return
	}
	if !ok {
		http.Error(w, fmt.Sprintf("egress: no message in topic %s after position %d", topic, from), http.StatusNotFound)
		return
	}
	w.Header().Set(PositionHeader, strconv.FormatUint(pos, 10))
	w.Header().Set("Cache-Control", "no-store")
	p.answer(w, rec)
}

func (p *Playground) ack(w http.ResponseWriter, r *http.Request, topic string, q url.Values) {
	if !q.Has("ack") {
		http.Error(w, "egress: POST /<topic>?ack=<position> acknowledges; the ack parameter is missing", http.StatusBadRequest)
		return
	}
	pos, err := position("ack", q.Get("ack"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if err := p.Source.AckEgress(r.Context(), PlaygroundID, topic, pos); err != nil {
		if p.NotRead != nil && p.NotRead(err) {
			http.Error(w, "egress: ack: "+err.Error(), http.StatusConflict)
			return
		}
		p.fail(w, r, "ack", topic, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (p *Playground) fail(w http.ResponseWriter, r *http.Request, what, topic string, err error) {
	if r.Context().Err() != nil {
		// The client went away (or its deadline passed): not a fault
		// of the runtime; nobody reads the answer.
		if p.Logger != nil {
			p.Logger.Debug("egress: the request ended before its answer", "op", what, "topic", topic, "error", err)
		}
		w.Header().Set("Retry-After", "1")
		http.Error(w, "egress: the request ended before its answer", http.StatusServiceUnavailable)
		return
	}
	if p.Logger != nil {
		p.Logger.Error("egress: "+what+" failed", "topic", topic, "error", err)
	}
	if p.Unavailable != nil && p.Unavailable(err) {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "egress: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	http.Error(w, "egress: "+err.Error(), http.StatusInternalServerError)
}

// answer writes a record's payload.
func (p *Playground) answer(w http.ResponseWriter, rec *protocol.EgressRecord) {
	out, err := DecodeRecord(rec.GetArgument())
	if err != nil { // checked when it was produced; only corruption gets here
		http.Error(w, "egress: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte(out.Payload))
}
