package stateapi

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"sort"
	"time"

	"github.com/statefun-go/statefun/internal/address"
)

// This file serves two small reads made for the operator's console
// (docs/how-to/console.md), usable by any client: who the caller is (GET
// /whoami), so a page can show only the actions its token may take, and a
// per-type overview (GET /overview) that answers quickly however many
// addresses there are.

// Overviewer is what GET /overview asks of the partitions (the state
// sizes it reads of Store).
type Overviewer interface {
	// QueuedByType counts the messages not processed yet per function
	// type (queued, or in a batch in flight or failing), across the
	// partitions this node runs, each asked through its mailbox.
	QueuedByType(ctx context.Context) (map[address.TypeName]int, error)
}

// OverviewMaxKeys is how many state entries GET /overview reads per
// function type at most; past it the counts are lower bounds.
const OverviewMaxKeys = 10000

// serveWhoami answers GET /whoami: the caller's principal and scopes.
// Any valid token may ask (a write-only token too): it is how a page
// learns what its token allows without trying a write.
func (s *Server) serveWhoami(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed(w, r, "GET, HEAD")
		return
	}
	if len(r.URL.Query()) != 0 {
		fail(w, r, http.StatusBadRequest, "/whoami takes no parameters")
		return
	}
	out := struct {
		Principal     string   `json:"principal"`
		Scopes        []string `json:"scopes"`
		Tokens        bool     `json:"tokens"`
		RequireReason bool     `json:"requireReason"`
		ReadOnly      bool     `json:"readOnly"`
	}{Principal: "anonymous", Scopes: []string{ScopeRead, ScopeWrite}, RequireReason: s.opts.RequireReason, ReadOnly: s.opts.ReadOnly}
	if len(s.tokens) > 0 {
		t, ok := s.identify(w, r)
		if !ok {
			return
		}
		out.Principal, out.Scopes, out.Tokens = t.Name, slices.Clone(t.Scopes), true
		sort.Strings(out.Scopes)
	}
	if s.opts.ReadOnly {
		// Nothing may be written, whatever the token: the console shows
		// no write action.
		out.Scopes = slices.DeleteFunc(out.Scopes, func(sc string) bool { return sc == ScopeWrite })
	}
	writeJSON(w, http.StatusOK, out)
}

// typeOverview is one function type of GET /overview.
type typeOverview struct {
	Namespace  string `json:"namespace"`
	Type       string `json:"type"`
	Registered bool   `json:"registered"`
	HoldsState bool   `json:"holdsState"`
	// Invocations are the requests sent to the type's function since the
	// process started, by outcome; a client takes the rate from two reads.
	Invocations struct {
		OK    uint64 `json:"ok"`
		Error uint64 `json:"error"`
	} `json:"invocations"`
	Failing    int  `json:"failing"`
	Paused     int  `json:"paused"`
	TypePaused bool `json:"typePaused"`
	Queued     int  `json:"queued"`
	// Addresses, Entries and StateBytes count the durable state read, up
	// to OverviewMaxKeys entries; Complete is false past that, when they
	// are lower bounds and EstimatedBytes is the store's estimate.
	Addresses      int     `json:"addresses"`
	Entries        int     `json:"entries"`
	StateBytes     int64   `json:"stateBytes"`
	Complete       bool    `json:"complete"`
	EstimatedBytes *uint64 `json:"estimatedBytes"`
}

// serveOverview answers GET /overview: every function type known (with
// registered states, holding state, or seen by the metrics) with its
// invocation counts, failing and paused addresses, queued messages and
// the size of its state. It never lists ids: the state of a type is
// counted up to OverviewMaxKeys entries.
func (s *Server) serveOverview(w http.ResponseWriter, r *http.Request) {
	if !s.readWithoutParams(w, r, "/overview") {
		return
	}
	if s.gather(w, r, overviewListing()) {
		return
	}
	// Asked by another node gathering the overview: the state of the
	// partitions this node owns alone.
	own := s.localPart(w, r)
	at := s.opts.Now().UTC()
	byType := map[address.TypeName]*typeOverview{}
	get := func(t address.TypeName) *typeOverview {
		if byType[t] == nil {
			byType[t] = &typeOverview{Namespace: t.Namespace, Type: t.Name, Complete: true}
		}
		return byType[t]
	}
	for _, t := range s.eng.KnownTypes() {
		get(t).Registered = true
	}
	if err := s.st.ScanTypes(func(t address.TypeName) bool {
		get(t).HoldsState = true
		return true
	}); err != nil {
		fail(w, r, http.StatusInternalServerError, err.Error())
		return
	}
	queued, err := s.eng.QueuedByType(r.Context())
	if err != nil {
		s.engineError(w, r, err)
		return
	}
	for t, n := range queued {
		get(t).Queued = n
	}
	if err := s.readMetrics(get); err != nil {
		fail(w, r, http.StatusInternalServerError, "reading the runtime's metrics: "+err.Error())
		return
	}
	list := make([]*typeOverview, 0, len(byType))
	for t, o := range byType {
		if o.HoldsState {
			var keep func(string) bool
			if own != nil {
				keep = func(id string) bool { return own[s.partitionOf(address.Address{Type: t, ID: id})] }
			}
			st, err := s.st.StateStatsOf(t, OverviewMaxKeys, keep)
			if err != nil {
				fail(w, r, http.StatusInternalServerError, err.Error())
				return
			}
			o.Addresses, o.Entries, o.StateBytes, o.Complete = st.IDs, st.Entries, st.Bytes, st.Complete
			if !st.Complete {
				est := st.EstimatedBytes
				o.EstimatedBytes = &est
			}
		}
		list = append(list, o)
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].Namespace != list[j].Namespace {
			return list[i].Namespace < list[j].Namespace
		}
		return list[i].Type < list[j].Type
	})
	writeJSON(w, http.StatusOK, struct {
		At    time.Time       `json:"at"`
		Types []*typeOverview `json:"types"`
	}{at, list})
}

// overviewListing merges the nodes' overviews (cluster mode): each node
// counts the state of the partitions it owns and its own invocations,
// failing, paused and queued messages, so a type's figures are the sums;
// it is registered, holds state or is paused when any node says so, and
// complete only when every node's count is.
func overviewListing() listing {
	return listing{field: "types",
		key: func(item json.RawMessage) (string, error) {
			var o typeOverview
			err := json.Unmarshal(item, &o)
			return o.Namespace + "\x00" + o.Type, err
		},
		combine: func(a, b json.RawMessage) json.RawMessage {
			var m, o typeOverview
			json.Unmarshal(a, &m)
			json.Unmarshal(b, &o)
			m.Registered = m.Registered || o.Registered
			m.HoldsState = m.HoldsState || o.HoldsState
			m.TypePaused = m.TypePaused || o.TypePaused
			m.Invocations.OK += o.Invocations.OK
			m.Invocations.Error += o.Invocations.Error
			m.Failing += o.Failing
			m.Paused += o.Paused
			m.Queued += o.Queued
			m.Addresses += o.Addresses
			m.Entries += o.Entries
			m.StateBytes += o.StateBytes
			m.Complete = m.Complete && o.Complete
			if o.EstimatedBytes != nil {
				sum := *o.EstimatedBytes
				if m.EstimatedBytes != nil {
					sum += *m.EstimatedBytes
				}
				m.EstimatedBytes = &sum
			}
			out, _ := json.Marshal(m)
			return out
		}}
}

// readMetrics adds what the runtime's metrics know per function type:
// invocations by outcome, failing and paused addresses, type pauses (the
// engine's collectors, by name). A series whose function label is not a
// typename is ignored; only the series of these four names are read.
func (s *Server) readMetrics(get func(address.TypeName) *typeOverview) error {
	if s.opts.Metrics == nil {
		return nil
	}
	mfs, err := s.opts.Metrics.Gather()
	if err != nil {
		return err
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "statefun_invocations_total", "statefun_failing_addresses", "statefun_paused_addresses", "statefun_paused_function_types":
		default:
			continue
		}
		for _, m := range mf.GetMetric() {
			var fn, outcome string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "function":
					fn = l.GetValue()
				case "outcome":
					outcome = l.GetValue()
				}
			}
			t, err := address.ParseTypeName(fn)
			if err != nil {
				continue
			}
			switch mf.GetName() {
			case "statefun_invocations_total":
				n := uint64(m.GetCounter().GetValue())
				switch outcome {
				case "ok":
					get(t).Invocations.OK = n
				case "error":
					get(t).Invocations.Error = n
				}
			case "statefun_failing_addresses":
				get(t).Failing = int(m.GetGauge().GetValue())
			case "statefun_paused_addresses":
				get(t).Paused = int(m.GetGauge().GetValue())
			case "statefun_paused_function_types":
				get(t).TypePaused = m.GetGauge().GetValue() == 1
			}
		}
	}
	return nil
}
