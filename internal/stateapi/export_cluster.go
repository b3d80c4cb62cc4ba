package stateapi

// Cluster mode: an export page gathered from every node
// (docs/how-to/export-import.md, "Cluster mode").
//
// The entries of a type are keyed by id, not by partition, so a page in
// key order is made of every partition's entries: the node taking the
// request asks every node (forward's Gather) for its share of the page
// after the same cursor (exportShare); each answers from the partitions it
// owns (localPart: never a stale copy of a partition that moved away) and
// ends, as in embedded mode, after that many entries, 4 MiB of values or
// maxExportScan entries read. The merged page is exact up to the lowest point where a node's
// page ended: beyond it that node may hold entries it did not send. So the
// page ends there at the latest, and its cursor is the same (id, state)
// cursor embedded mode gives: a page, a cursor and a line are the same in
// both engines. A partition no node answered for is a 503, never a short
// page.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/cluster/forward"
)

// exportPageJSON is one node's export page, its entries kept as sent.
type exportPageJSON struct {
	Namespace string            `json:"namespace"`
	Type      string            `json:"type"`
	Entries   []json.RawMessage `json:"entries"`
	Next      *string           `json:"next"`
}

// exportKey is an exported line's place in key order.
type exportKey struct{ id, state string }

func (k exportKey) less(o exportKey) bool {
	if k.id != o.id {
		return k.id < o.id
	}
	return k.state < o.state
}

// gatherExport answers an export page from every node (cluster mode) and
// reports whether it answered. A request another node sent is answered
// here alone.
func (s *Server) gatherExport(w http.ResponseWriter, r *http.Request, t address.TypeName, limit int) bool {
	c := s.opts.Cluster
	if c == nil || forward.Forwarded(r) {
		return false
	}
	fr := r
	if share := exportShare(limit, len(c.Owned()), s.eng.Partitions()); share < limit {
		fr = r.Clone(r.Context())
		q := fr.URL.Query()
		q.Set("limit", strconv.Itoa(share))
		fr.URL.RawQuery = q.Encode()
	}
	answers, missing := c.Gather(fr, 0, nil)
	var pages []exportPageJSON
	for _, a := range answers {
		switch {
		case a.Status == http.StatusOK:
			var p exportPageJSON
			if err := json.Unmarshal(a.Body, &p); err != nil {
				fail(w, r, http.StatusBadGateway, fmt.Sprintf("node %s answered an export page this node cannot read: %v", a.Node, err))
				return true
			}
			pages = append(pages, p)
		case a.Status < 500:
			// A refusal (a bad query, say): every node would give it.
			s.passAnswer(w, a)
			return true
		}
	}
	if len(missing) > 0 || len(pages) == 0 {
		w.Header().Set("Retry-After", "1")
		w.Header().Set(MissingHeader, forward.FormatPartitions(missing))
		writeProblem(w, r, problem{Status: http.StatusServiceUnavailable, MissingPartitions: missing,
			Detail: fmt.Sprintf("no node answered for partitions %s in time (they are moving, or their owner is unreachable): the page would miss their entries; ask for it again (same ?after=)",
				forward.FormatPartitions(missing))})
		return true
	}
	status, body := mergeExport(t, pages, limit)
	if status != http.StatusOK {
		fail(w, r, status, string(body))
		return true
	}
	writeJSON(w, http.StatusOK, json.RawMessage(body))
	return true
}

// exportShare is how many entries each node is asked for, for a gathered
// page of limit entries: about its share of them, not all. The entries of
// a type are spread over the partitions by the hash of their ids, so a
// node owning k of P partitions holds about k/P of any range of ids, and
// a page of limit entries takes about that many of each node's; asking
// every node for limit made each read and render, and this node decode,
// N times what the page keeps. The nodes own about as many partitions
// each, so this node's share (owned of partitions) stands for every
// node's, with half again as much for the spread and a few more for
// small pages. A node whose page ends early only ends the merged page
// there (mergeExport): a shorter page, whose cursor says where the next
// begins, never a missed entry.
func exportShare(limit, owned, partitions int) int {
	if owned <= 0 || partitions <= 0 || owned >= partitions {
		return limit
	}
	return min(limit, (3*limit*owned+2*partitions-1)/(2*partitions)+16)
}

// mergeExport merges the nodes' pages of one export page (see the top of
// this file): the entries up to the lowest end of a node's page, in key
// order, without duplicates (a partition two answers covered), ending
// after limit entries or MaxExportPageBytes of lines.
func mergeExport(t address.TypeName, pages []exportPageJSON, limit int) (int, []byte) {
	var bound *exportKey // the lowest end of a page that has more
	for _, p := range pages {
		if p.Next == nil {
			continue
		}
		c, err := parseExportCursor(*p.Next)
		if err != nil {
			return http.StatusBadGateway, []byte("a node answered an export page with a cursor this node cannot read: " + err.Error())
		}
		k := exportKey{c.ID, c.State}
		if bound == nil || k.less(*bound) {
			bound = &k
		}
	}
	type item struct {
		key  exportKey
		line json.RawMessage
	}
	var items []item
	seen := map[exportKey]bool{}
	for _, p := range pages {
		for _, e := range p.Entries {
			var l struct {
				Address struct {
					ID string `json:"id"`
				} `json:"address"`
				State string `json:"state"`
			}
			if err := json.Unmarshal(e, &l); err != nil {
				return http.StatusBadGateway, []byte("a node answered an exported line this node cannot read: " + err.Error())
			}
			k := exportKey{l.Address.ID, l.State}
			if seen[k] || (bound != nil && bound.less(k)) {
				continue
			}
			seen[k] = true
			items = append(items, item{k, e})
		}
	}
	sort.Slice(items, func(i, j int) bool { return items[i].key.less(items[j].key) })
	out := exportPageJSON{Namespace: t.Namespace, Type: t.Name, Entries: []json.RawMessage{}}
	size := 0
	for i, it := range items {
		if i == limit || size >= MaxExportPageBytes {
			c := formatExportCursor(exportCursor{ID: items[i-1].key.id, State: items[i-1].key.state})
			out.Next = &c
			break
		}
		out.Entries = append(out.Entries, it.line)
		size += len(it.line)
	}
	if out.Next == nil && bound != nil {
		c := formatExportCursor(exportCursor{ID: bound.id, State: bound.state})
		out.Next = &c
	}
	b, err := json.Marshal(out)
	if err != nil {
		return http.StatusInternalServerError, []byte(err.Error())
	}
	return http.StatusOK, b
}

// stillOwned reports whether this node still owns every partition of own,
// the partitions it owned when it began a read (cluster mode).
func (s *Server) stillOwned(own map[int]bool) bool {
	now := s.opts.Cluster.Owned()
	for p := range own {
		if !slices.Contains(now, p) {
			return false
		}
	}
	return true
}
