package stateapi

// Cluster mode: reads of one address answered by the owner of its
// partition, listings gathered from every node (docs/explanation/cluster.md, "The
// state access API on every node"; internal/cluster/forward carries the
// requests).

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"time"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/cluster/forward"
)

// Cluster is what the API needs of the other nodes in cluster mode;
// internal/cluster/forward implements it.
type Cluster interface {
	// Owned returns the partitions this node serves now.
	Owned() []int
	// Forward answers r, a read of one address of partition p, from p's
	// owner; false when no owner answered (the API answers its 503).
	Forward(w http.ResponseWriter, r *http.Request, p int) bool
	// ForwardOnce answers r, a state change about one address of
	// partition p that does not travel as a command, from p's owner,
	// sending it at most once; false when no owner answered.
	ForwardOnce(w http.ResponseWriter, r *http.Request, p int) (bool, error)
	// Gather sends r to every node and returns their answers and the
	// partitions none of them covered.
	Gather(r *http.Request, wait time.Duration, stop func(forward.Answer) bool) ([]forward.Answer, []int)
	// Spread sends r with body, a change each of parts applies in its own
	// partition, to their owners, each owner its share, each having wait
	// beyond the retry budget to answer; it returns their 200 answers, a
	// refusal (4xx) that stopped it, and the partitions none applied.
	Spread(r *http.Request, body []byte, parts []int, wait time.Duration) ([]forward.Answer, *forward.Answer, []int)
}

// MissingHeader names, on a listing gathered from every node, the
// partitions no node answered for in time (comma-separated); the body's
// missingPartitions says the same.
const MissingHeader = "Statefun-Missing-Partitions"

// forwardRead answers a read of address a from the owner of its partition
// when this node does not own it (cluster mode), and reports whether it
// answered. A request another node forwarded is not forwarded again: its
// answer here is the 503 naming the owner.
func (s *Server) forwardRead(w http.ResponseWriter, r *http.Request, a address.Address) bool {
	p, elsewhere := s.ownedElsewhere(a)
	if !elsewhere {
		return false
	}
	if forward.Forwarded(r) || !s.opts.Cluster.Forward(w, r, p) {
		s.notOwned(w, r, p)
	}
	return true
}

// ownedElsewhere returns the partition of address a and whether another
// node owns it (cluster mode; false in embedded mode).
func (s *Server) ownedElsewhere(a address.Address) (int, bool) {
	c := s.opts.Cluster
	if c == nil {
		return 0, false
	}
	p := s.partitionOf(a)
	return p, !slices.Contains(c.Owned(), p)
}

// forwardChange answers a state change about address a that does not
// travel as a command — a restore, a pause or resume of the address, an
// inbox repair, deleting the address — from the owner of its partition
// when this node does not own it (cluster mode), and reports whether it
// answered. It is decided before this node's engine sees the change, so a
// change this node took is never also sent to another. A request another
// node forwarded is not forwarded again.
func (s *Server) forwardChange(w http.ResponseWriter, r *http.Request, a address.Address) bool {
	p, elsewhere := s.ownedElsewhere(a)
	if !elsewhere {
		return false
	}
	if forward.Forwarded(r) {
		s.notOwned(w, r, p)
		return true
	}
	s.sendOnce(w, r, r, p)
	return true
}

// sendOnce sends fr, the request r or a copy of it, to the owner of
// partition p (Cluster.ForwardOnce) with a mutation id of its own, which
// the owner applies once (once.go), and answers r: with the owner's
// answer, or this node's when fr could not be sent.
func (s *Server) sendOnce(w http.ResponseWriter, r, fr *http.Request, p int) {
	if fr == r {
		fr = r.Clone(r.Context())
	}
	fr.Header.Set(MutationIDHeader, s.newMutationID())
	answered, err := s.opts.Cluster.ForwardOnce(w, fr, p)
	switch {
	case errors.Is(err, forward.ErrTooLarge):
		fail(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is over %d bytes", forward.MaxOnceBody))
	case err != nil:
		fail(w, r, http.StatusBadRequest, err.Error())
	case !answered:
		s.notOwned(w, r, p)
	}
}

// localPart is, for a request another node sent to gather a listing, the
// partitions this node answers for (those it owns), named in the
// forward.Partitions header; nil for any other request (answered for
// every partition in the store).
func (s *Server) localPart(w http.ResponseWriter, r *http.Request) map[int]bool {
	if s.opts.Cluster == nil || !forward.Forwarded(r) {
		return nil
	}
	ps := s.opts.Cluster.Owned()
	w.Header().Set(forward.Partitions, forward.FormatPartitions(ps))
	own := make(map[int]bool, len(ps))
	for _, p := range ps {
		own[p] = true
	}
	return own
}

// listing is how the pages of one listing route merge.
type listing struct {
	// field is the array of items.
	field string
	// key orders the items (and finds the same item twice).
	key func(item json.RawMessage) (string, error)
	// cursor is the ?after= of the page that ends with item; nil for an
	// unpaged listing.
	cursor func(item json.RawMessage) (string, error)
	// desc lists the items in descending key order.
	desc bool
	// limit is the page's size (0: all).
	limit int
	// combine merges two answers' copies of one item (nil: the first).
	combine func(a, b json.RawMessage) json.RawMessage
	// finish adjusts the merged body (other fields that derive from the
	// items).
	finish func(body map[string]json.RawMessage, items []json.RawMessage)
}

// gather answers a listing from every node (cluster mode) and reports
// whether it answered. HEAD, and a request another node sent, are
// answered here alone.
func (s *Server) gather(w http.ResponseWriter, r *http.Request, l listing) bool {
	c := s.opts.Cluster
	if c == nil || forward.Forwarded(r) || r.Method == http.MethodHead {
		return false
	}
	answers, missing := c.Gather(r, 0, nil)
	status, h, body := mergeListing(l, answers, missing)
	for k, vs := range h {
		w.Header()[k] = vs
	}
	if status != http.StatusOK {
		w.WriteHeader(status)
		w.Write(body)
		return true
	}
	writeJSON(w, status, json.RawMessage(body))
	return true
}

// mergeListing merges the nodes' pages of one listing: the items of every
// answer, in order, without duplicates, one page of l.limit with its
// cursor, and the partitions missing named in missingPartitions and
// MissingHeader. A node's answer other than 200 and below 500 (a bad
// query, say) is passed back as it is; a 5xx counts as no answer.
func mergeListing(l listing, answers []forward.Answer, missing []int) (int, http.Header, []byte) {
	var ok []forward.Answer
	for _, a := range answers {
		switch {
		case a.Status == http.StatusOK:
			ok = append(ok, a)
		case a.Status < 500:
			return a.Status, passHeader(a.Header), a.Body
		}
	}
	if len(ok) == 0 {
		return unavailable(missing)
	}
	var body map[string]json.RawMessage
	type keyed struct {
		key  string
		item json.RawMessage
	}
	byKey := map[string]int{}
	var items []keyed
	more := false
	for _, a := range ok {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(a.Body, &m); err != nil {
			return http.StatusBadGateway, nil, problemBody(http.StatusBadGateway, fmt.Sprintf("node %s answered a body that is not a JSON object: %v", a.Node, err))
		}
		if body == nil {
			body = m
		}
		var its []json.RawMessage
		if err := json.Unmarshal(m[l.field], &its); err != nil {
			return http.StatusBadGateway, nil, problemBody(http.StatusBadGateway, fmt.Sprintf("node %s answered no %s array: %v", a.Node, l.field, err))
		}
		if n := m["next"]; len(n) > 0 && string(n) != "null" {
			more = true
		}
		for _, it := range its {
			k, err := l.key(it)
			if err != nil {
				return http.StatusBadGateway, nil, problemBody(http.StatusBadGateway, fmt.Sprintf("node %s answered an item of %s this node cannot read: %v", a.Node, l.field, err))
			}
			if i, dup := byKey[k]; dup {
				if l.combine != nil {
					items[i].item = l.combine(items[i].item, it)
				}
				continue
			}
			byKey[k] = len(items)
			items = append(items, keyed{k, it})
		}
	}
	sort.SliceStable(items, func(i, j int) bool {
		if l.desc {
			return items[i].key > items[j].key
		}
		return items[i].key < items[j].key
	})
	if l.limit > 0 && len(items) > l.limit {
		items, more = items[:l.limit], true
	}
	out := make([]json.RawMessage, len(items))
	for i, it := range items {
		out[i] = it.item
	}
	body[l.field], _ = json.Marshal(out)
	if l.cursor != nil {
		body["next"] = json.RawMessage("null")
		if more && len(out) > 0 {
			c, err := l.cursor(out[len(out)-1])
			if err != nil {
				return http.StatusBadGateway, nil, problemBody(http.StatusBadGateway, err.Error())
			}
			body["next"], _ = json.Marshal(c)
		}
	}
	if l.finish != nil {
		l.finish(body, out)
	}
	h := http.Header{}
	if len(missing) > 0 {
		body["missingPartitions"], _ = json.Marshal(missing)
		h.Set(MissingHeader, forward.FormatPartitions(missing))
	}
	b, _ := json.Marshal(body)
	return http.StatusOK, h, b
}

// passHeader is the part of a node's answer headers passed back with it.
func passHeader(h http.Header) http.Header {
	out := http.Header{}
	for _, k := range []string{"Content-Type", "Retry-After", "Www-Authenticate", "Allow"} {
		if v := h.Values(k); len(v) > 0 {
			out[k] = v
		}
	}
	return out
}

// unavailable is the 503 of a gathered request no node answered.
func unavailable(missing []int) (int, http.Header, []byte) {
	h := http.Header{}
	h.Set("Retry-After", "1")
	h.Set("Content-Type", "application/problem+json")
	if len(missing) > 0 {
		h.Set(MissingHeader, forward.FormatPartitions(missing))
	}
	return http.StatusServiceUnavailable, h, problemBody(http.StatusServiceUnavailable,
		fmt.Sprintf("no node answered for partitions %s in time (they are moving, or their owner is unreachable); retry", forward.FormatPartitions(missing)))
}

func problemBody(status int, detail string) []byte {
	b, _ := json.Marshal(problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail})
	return b
}

// The listings gathered from every node.

func stringKey(item json.RawMessage) (string, error) {
	var s string
	err := json.Unmarshal(item, &s)
	return s, err
}

func idsListing(limit int) listing {
	return listing{field: "ids", key: stringKey, cursor: stringKey, limit: limit}
}

// addrItem is what an item about an address holds of it.
type addrItem struct {
	Namespace string  `json:"namespace"`
	Type      string  `json:"type"`
	ID        *string `json:"id"`
}

// addrKey orders items by address, a type-wide one (id null) first.
func addrKey(item json.RawMessage) (string, error) {
	var a addrItem
	if err := json.Unmarshal(item, &a); err != nil {
		return "", err
	}
	id := "\x00"
	if a.ID != nil {
		id = "\x01" + *a.ID
	}
	return a.Namespace + "\x00" + a.Type + "\x00" + id, nil
}

func failingListing(limit int) listing {
	return listing{field: "failing", key: addrKey, limit: limit, cursor: func(item json.RawMessage) (string, error) {
		var f failingJSON
		err := json.Unmarshal(item, &f)
		return addressCursor(f), err
	}}
}

func pausesListing() listing { return listing{field: "pauses", key: addrKey} }

// deadLettersListing orders message dead letters by id (the skip's
// mutation id), their cursor.
func deadLettersListing(limit int) listing {
	id := func(item json.RawMessage) (string, error) {
		var d struct {
			ID string `json:"id"`
		}
		err := json.Unmarshal(item, &d)
		return d.ID, err
	}
	return listing{field: "deadLetters", key: id, cursor: id, limit: limit}
}

func auditListing(limit int, newest bool) listing {
	read := func(item json.RawMessage) (auditCursor, error) {
		var a struct {
			Mutation string    `json:"mutation"`
			At       time.Time `json:"at"`
			State    string    `json:"state"`
		}
		err := json.Unmarshal(item, &a)
		return auditCursor{At: a.At.UnixMilli(), Mutation: a.Mutation, State: a.State}, err
	}
	return listing{field: "records", limit: limit, desc: newest,
		key: func(item json.RawMessage) (string, error) {
			c, err := read(item)
			// Offset so that negative times sort too.
			return fmt.Sprintf("%020d\x00%s\x00%s", uint64(c.At)^(1<<63), c.Mutation, c.State), err
		},
		cursor: func(item json.RawMessage) (string, error) {
			c, err := read(item)
			return c.String(), err
		}}
}

// typesListing merges GET /state and /state/<ns>: a type is registered or
// holds state when any node says so; namespaces (GET /state) follow.
func typesListing() listing {
	return listing{field: "types",
		key: func(item json.RawMessage) (string, error) {
			var t typeInfo
			err := json.Unmarshal(item, &t)
			return t.Namespace + "\x00" + t.Type, err
		},
		combine: func(a, b json.RawMessage) json.RawMessage {
			var x, y typeInfo
			json.Unmarshal(a, &x)
			json.Unmarshal(b, &y)
			x.Registered = x.Registered || y.Registered
			x.HoldsState = x.HoldsState || y.HoldsState
			x.StatesCount = max(x.StatesCount, y.StatesCount)
			out, _ := json.Marshal(x)
			return out
		},
		finish: func(body map[string]json.RawMessage, items []json.RawMessage) {
			if _, ok := body["namespaces"]; !ok {
				return
			}
			nss := []string{}
			for _, it := range items {
				var t typeInfo
				json.Unmarshal(it, &t)
				if len(nss) == 0 || nss[len(nss)-1] != t.Namespace {
					nss = append(nss, t.Namespace)
				}
			}
			body["namespaces"], _ = json.Marshal(nss)
		}}
}

// gatherOne answers a read of one thing named by an id, not by its
// address (GET /mutations/<id>[?wait=], GET /dead-letters/messages/<id>),
// from the node that owns its address (cluster mode): every node is
// asked, each answers only for a partition it owns, and the first found
// is the answer. It reports whether it answered.
func (s *Server) gatherOne(w http.ResponseWriter, r *http.Request, wait time.Duration) bool {
	c := s.opts.Cluster
	if c == nil || forward.Forwarded(r) {
		return false
	}
	answers, missing := c.Gather(r, wait, func(a forward.Answer) bool { return a.Status == http.StatusOK })
	status, h, body := mergeOne(answers, missing)
	for k, vs := range h {
		w.Header()[k] = vs
	}
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		w.Write(body)
	}
	return true
}

// mergeOne picks the answer to a read by id asked of every node: a 200
// when one node has it; a 503 naming the partitions missing when none has
// it and some did not answer (the receipt may be there); else the 404 (or
// other refusal) of a node.
func mergeOne(answers []forward.Answer, missing []int) (int, http.Header, []byte) {
	var refusal *forward.Answer
	for i, a := range answers {
		switch {
		case a.Status == http.StatusOK:
			return a.Status, passHeader(a.Header), a.Body
		case a.Status < 500 && (refusal == nil || refusal.Status == http.StatusNotFound):
			refusal = &answers[i]
		}
	}
	if len(missing) > 0 || refusal == nil {
		return unavailable(missing)
	}
	return refusal.Status, passHeader(refusal.Header), refusal.Body
}
