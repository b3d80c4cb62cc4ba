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
	"sort"
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
	id := namespace + "/" + typ
	if id != PlaygroundID || len(r.topics) == 0 {
		return "", fmt.Errorf("unknown egress %s (module.yaml binds %s)", id, r.bound())
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

// Source pops durable records (engine.Engine.PopEgress).
type Source interface {
	PopEgress(ctx context.Context, egress, route string) (*protocol.EgressRecord, bool, error)
}

// Playground serves GET /<topic>: it pops one record and answers its payload
// as UTF-8 text; 404 when the topic is empty, 405 for an unknown topic.
type Playground struct {
	Source Source
	Topics []string
	Logger *slog.Logger
}

func (p *Playground) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		http.Error(w, "egress: GET /<topic> pops one record", http.StatusMethodNotAllowed)
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
	rec, ok, err := p.Source.PopEgress(r.Context(), PlaygroundID, topic)
	if err != nil {
		if p.Logger != nil {
			p.Logger.Error("egress: pop failed", "topic", topic, "error", err)
		}
		http.Error(w, "egress: "+err.Error(), http.StatusInternalServerError)
		return
	}
	if !ok {
		http.Error(w, "egress: no message in topic "+topic, http.StatusNotFound)
		return
	}
	out, err := DecodeRecord(rec.GetArgument())
	if err != nil { // checked when it was produced; only corruption gets here
		http.Error(w, "egress: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte(out.Payload))
}
