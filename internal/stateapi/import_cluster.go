package stateapi

// Cluster mode: an import batch applied by the owners of its lines
// (docs/how-to/export-import.md, "Cluster mode").
//
// The node that takes the batch validates it whole, as in embedded mode,
// then spreads it (forward's Spread): each node that owns partitions of
// its lines gets the batch with its share named in forward.Partitions,
// and applies the lines of the partitions it owns exactly as embedded mode
// does — the same mutation ids, the receipt or audit record looked for in
// the store that holds the partition (receipts and audit records travel
// in its changelog, so the check holds on whichever node owns it now), a
// line in flight waited for, the rest handed to its engine in mailbox
// order. A line whose partition moved before it reached the core is left
// out of the answer, and its partition with it, so Spread sends that share
// again to the new owner; a line the old owner's core had is applied only
// if the commit carrying it committed, and then its receipt is in the
// changelog the new owner restored, which answers the line as replayed.
// Partitions no owner answered for in time make the batch a 503, as a
// full queue does in embedded mode: the client sends the batch again, and
// its applied lines are answered as replayed.

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/statefun-go/statefun/internal/cluster/forward"
	"github.com/statefun-go/statefun/internal/engine"
)

// spreadImport answers a validated batch by sending it to the owners of
// its lines' partitions and merging their answers in the batch's order.
func (s *Server) spreadImport(w http.ResponseWriter, r *http.Request, id, mode string, body []byte, lines []importLine) {
	var parts []int
	for _, l := range lines {
		if p := s.partitionOf(l.m.Addr); !slices.Contains(parts, p) {
			parts = append(parts, p)
		}
	}
	slices.Sort(parts)
	fw := r.Clone(r.Context())
	fw.Header.Del("Content-Length")
	// An owner answers once its lines are committed: it has as long as a
	// receipt is waited for (?wait=) before its share is sent again.
	answers, refusal, missing := s.opts.Cluster.Spread(fw, body, parts, s.opts.MaxWait)
	if refusal != nil {
		s.passAnswer(w, *refusal)
		return
	}
	if len(missing) > 0 {
		w.Header().Set("Retry-After", "1")
		w.Header().Set(MissingHeader, forward.FormatPartitions(missing))
		writeProblem(w, r, problem{Status: http.StatusServiceUnavailable, MissingPartitions: missing,
			Detail: fmt.Sprintf("no node owning partitions %s answered for their lines in time (they are moving, or their owner is unreachable); lines of other partitions may be applied: send the batch again to import %s, and a line applied before is answered as replayed, not applied twice",
				forward.FormatPartitions(missing), id)})
		return
	}
	byLine := make(map[int64]importResult, len(lines))
	for _, a := range answers {
		var share struct {
			Results []importResult `json:"results"`
		}
		if err := json.Unmarshal(a.Body, &share); err != nil {
			fail(w, r, http.StatusBadGateway, fmt.Sprintf("node %s answered its share of import %s with a body this node cannot read: %v; send the batch again", a.Node, id, err))
			return
		}
		for _, res := range share.Results {
			byLine[res.Line] = res
		}
	}
	results := make([]importResult, len(lines))
	for i, l := range lines {
		res, ok := byLine[l.line]
		if !ok {
			fail(w, r, http.StatusBadGateway, fmt.Sprintf("no node answered for line %d of import %s (partition %d); send the batch again", l.line, id, s.partitionOf(l.m.Addr)))
			return
		}
		results[i] = res
	}
	writeJSON(w, http.StatusOK, struct {
		Import  string         `json:"import"`
		Mode    string         `json:"mode"`
		Results []importResult `json:"results"`
	}{id, mode, results})
}

// importShare keeps, of a batch another node spread, the lines of the
// partitions of this node's share (forward.Partitions) that it owns, and
// returns those partitions (not nil). It answers the request itself and
// returns false when the share is not named.
func (s *Server) importShare(w http.ResponseWriter, r *http.Request, lines []importLine) ([]importLine, []int, bool) {
	share := r.Header.Get(forward.Partitions)
	if share == "" {
		fail(w, r, http.StatusBadRequest, "an import batch sent on by another node names its share in "+forward.Partitions)
		return nil, nil, false
	}
	owned := s.opts.Cluster.Owned()
	covered := []int{}
	for _, p := range forward.ParsePartitions(share) {
		if slices.Contains(owned, p) && !slices.Contains(covered, p) {
			covered = append(covered, p)
		}
	}
	var mine []importLine
	for _, l := range lines {
		if slices.Contains(covered, s.partitionOf(l.m.Addr)) {
			mine = append(mine, l)
		}
	}
	return mine, covered, true
}

// shareResults leaves out of a share's answer the partitions a line found
// moved away (engine.ErrMoved: it was not applied here), with all their
// lines: the node spreading the batch sends them to the new owner.
func (s *Server) shareResults(lines []importLine, results []importResult, covered []int) ([]importResult, []int) {
	moved := map[int]bool{}
	for i, res := range results {
		if errors.Is(res.err, engine.ErrMoved) {
			moved[s.partitionOf(lines[i].m.Addr)] = true
		}
	}
	if len(moved) == 0 {
		return results, covered
	}
	var keep []importResult
	for i, res := range results {
		if !moved[s.partitionOf(lines[i].m.Addr)] {
			keep = append(keep, res)
		}
	}
	return keep, slices.DeleteFunc(covered, func(p int) bool { return moved[p] })
}
