package stateapi

// Cluster mode: the state changes named by an id rather than by an
// address — a revert (POST /mutations/<id>/revert) and a re-send of a
// message dead letter (POST /dead-letters/messages/<id>/resend) — are
// answered by the node that holds the id's record, the owner of the
// partition that wrote it (docs/explanation/cluster.md, "The state access API on every
// node"). The id names no address, so a node that does not hold the record
// finds the holder by reading the record from every node, as GET
// /mutations/<id> and GET /dead-letters/messages/<id> do, and then sends
// the change to the owner of the record's partition once.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/cluster/forward"
)

// PartitionHeader is set on a state change one node sends another about a
// record named by an id: the partition the sending node found the record
// in. The receiving node answers it only as that partition's owner, and
// otherwise with the 503 that makes the sender try the partition's next
// owner — not with a 404 for a record it never held because the
// partition moved. It means nothing on a request without the hop header.
const PartitionHeader = "Statefun-Partition"

// holder is how one kind of record named by an id is found on the other
// nodes.
type holder struct {
	// lookup is the path of the read that answers the record by id.
	lookup string
	// notFound is the detail of the 404 when no node has the record, as
	// the route words it in embedded mode.
	notFound string
	// partition reads, from the record a node answered, the partition
	// that holds it; an error is the answer instead (status and detail).
	partition func(record []byte) (int, *statusError)
}

// statusError is an answer decided from a found record.
type statusError struct {
	status int
	detail string
}

// forwardByID answers r, a state change about the record an id names,
// from the node that holds the record when that is not this node (cluster
// mode), and reports whether it answered. held and p say whether this
// node's store has the record and in which partition. A node holding it in
// a partition it owns answers itself, as embedded mode does; so does a
// node another node sent the request to (the hop header), unless the
// record is in a partition it does not own (its 503 then sends the sender
// on to the owner). Otherwise the record is read from every node and the
// request, with body (nil: r's own), is sent once to the owner of its
// partition (forward.ForwardOnce). The decision is made before this
// node's engine sees the change.
func (s *Server) forwardByID(w http.ResponseWriter, r *http.Request, body []byte, held bool, p int, h holder) bool {
	c := s.opts.Cluster
	if c == nil {
		return false
	}
	owned := c.Owned()
	if forward.Forwarded(r) {
		if v := r.Header.Get(PartitionHeader); v != "" {
			if n, err := strconv.Atoi(v); err == nil && n >= 0 && !slices.Contains(owned, n) {
				s.notOwned(w, r, n)
				return true
			}
		}
		if held && !slices.Contains(owned, p) {
			s.notOwned(w, r, p)
			return true
		}
		return false
	}
	if held && slices.Contains(owned, p) {
		return false
	}
	status, hdr, found := mergeOne(c.Gather(lookupRequest(r, h.lookup), 0, func(a forward.Answer) bool { return a.Status == http.StatusOK }))
	switch status {
	case http.StatusOK:
	case http.StatusNotFound:
		fail(w, r, http.StatusNotFound, h.notFound)
		return true
	case http.StatusUnauthorized, http.StatusForbidden:
		fail(w, r, http.StatusForbidden, fmt.Sprintf("this node does not hold the record this change is about, and finding the node that does reads it from every node (GET %s), which your token may not do (%s): give the token the read scope, or send the request to the node that owns the record's address",
			h.lookup, detailOf(found)))
		return true
	default:
		for k, vs := range hdr {
			w.Header()[k] = vs
		}
		w.WriteHeader(status)
		w.Write(found)
		return true
	}
	hp, serr := h.partition(found)
	if serr != nil {
		fail(w, r, serr.status, serr.detail)
		return true
	}
	fr := r.Clone(r.Context())
	if body != nil {
		fr.Body = io.NopCloser(bytes.NewReader(body))
		fr.ContentLength = int64(len(body))
	}
	fr.Header.Set(PartitionHeader, strconv.Itoa(hp))
	s.sendOnce(w, r, fr, hp)
	return true
}

// lookupRequest is the GET of path that reads a record by id from every
// node, with r's headers (its Authorization among them).
func lookupRequest(r *http.Request, path string) *http.Request {
	lr := r.Clone(r.Context())
	lr.Method = http.MethodGet
	u := *r.URL
	u.RawQuery = ""
	if pu, err := url.Parse(path); err == nil {
		u.Path, u.RawPath = pu.Path, pu.RawPath
	}
	lr.URL = &u
	lr.Body, lr.ContentLength = http.NoBody, 0
	lr.Header.Del("Content-Type")
	return lr
}

// detailOf is the detail of a problem+json body, or the body itself.
func detailOf(body []byte) string {
	var p problem
	if json.Unmarshal(body, &p) == nil && p.Detail != "" {
		return p.Detail
	}
	return strings.TrimSpace(string(body))
}

// receiptHolder finds the node holding mutation id's receipt and audit
// records: the owner of the partition its receipt's commit names. A
// mutation that is not committed has nothing to revert wherever it is, so
// that answer (embedded mode's 409) is given here.
func receiptHolder(id string) holder {
	return holder{
		lookup:   "/mutations/" + escapeSegment(id),
		notFound: "no receipt for mutation " + id,
		partition: func(record []byte) (int, *statusError) {
			var rc receiptJSON
			if err := json.Unmarshal(record, &rc); err != nil {
				return 0, &statusError{http.StatusBadGateway, fmt.Sprintf("the node holding mutation %s answered a receipt this node cannot read: %v", id, err)}
			}
			if rc.Status != "committed" {
				return 0, &statusError{http.StatusConflict, fmt.Sprintf("mutation %s is %s; only a committed mutation can be reverted", id, rc.Status)}
			}
			part, _, ok := strings.Cut(rc.Commit, ".")
			n, err := strconv.Atoi(part)
			if !ok || err != nil || n < 0 {
				return 0, &statusError{http.StatusBadGateway, fmt.Sprintf("the node holding mutation %s answered a receipt without its commit (%q), which names the partition to send the revert to", id, rc.Commit)}
			}
			return n, nil
		},
	}
}

// deadLetterHolder finds the node holding message dead letter id: the
// owner of the partition of the skipped message's address, whose skip
// wrote it.
func (s *Server) deadLetterHolder(id string) holder {
	return holder{
		lookup:   "/dead-letters/messages/" + escapeSegment(id),
		notFound: noDeadLetter(id),
		partition: func(record []byte) (int, *statusError) {
			var d messageDeadLetterJSON
			if err := json.Unmarshal(record, &d); err != nil {
				return 0, &statusError{http.StatusBadGateway, fmt.Sprintf("the node holding message dead letter %s answered a record this node cannot read: %v", id, err)}
			}
			a := address.Address{Type: address.TypeName{Namespace: d.Address.Namespace, Name: d.Address.Type}, ID: d.Address.ID}
			return s.partitionOf(a), nil
		},
	}
}

// noDeadLetter is the 404 detail of a message dead letter that is not
// stored.
func noDeadLetter(id string) string {
	return "no message dead letter " + id + " (never skipped, re-sent already, or removed by retention)"
}
