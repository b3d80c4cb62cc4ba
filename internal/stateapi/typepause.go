package stateapi

// Cluster mode: a pause or resume of every address of a function type is
// applied by every partition, each on the node that owns it
// (docs/explanation/cluster.md, "The state access API on every node").

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/cluster/forward"
	"github.com/statefun-go/statefun/internal/engine"
)

// MutationIDHeader carries the mutation id of a type-level pause or
// resume in cluster mode: the node spreading it sends it to every owner,
// and a client sends it again, as the 503 of a change that did not reach
// every partition names it, to complete that change rather than make a
// new one. A node sending a change to its owner once sends its id in it
// too (once.go).
const MutationIDHeader = forward.MutationID

// changedElsewhereHeader, on the share of a type's resume sent to the
// type's owner partition, says other partitions lifted a pause.
const changedElsewhereHeader = "Statefun-Changed-Elsewhere"

// mutationIDPattern is the shape of the ids newMutationID makes.
var mutationIDPattern = regexp.MustCompile(`^[0-9a-z]{1,13}-[0-9a-f]{8}-[0-9a-f]{8}$`)

// typePauseID returns the mutation id of a pause or resume of a: a new
// one, or in cluster mode for a type the one MutationIDHeader gives.
func (s *Server) typePauseID(r *http.Request, a address.Address) (string, error) {
	id := r.Header.Get(MutationIDHeader)
	switch {
	case id == "":
		return s.newMutationID(), nil
	case a.ID != "" && !forward.Forwarded(r):
		return "", fmt.Errorf("%s is taken only by a pause or resume of a whole function type (in cluster mode)", MutationIDHeader)
	case s.opts.Cluster == nil:
		return "", fmt.Errorf("%s is taken only in cluster mode, where a pause of a function type may reach some partitions only; here it always reaches all", MutationIDHeader)
	case !mutationIDPattern.MatchString(id):
		return "", fmt.Errorf("%s %q is not a mutation id this API made: send the one a 503 named", MutationIDHeader, id)
	}
	return id, nil
}

// shareAnswer is a node's answer to its share of a type-level change.
type shareAnswer struct {
	// Applied are the partitions of the share that hold the change
	// durably (also in forward.Partitions).
	Applied []int `json:"applied"`
	// Changed, for a resume, says one of them held a pause and lifted it.
	Changed bool `json:"changed"`
	// Receipt is the type's receipt, from the node of its owner partition.
	Receipt *receiptJSON `json:"receipt"`
}

// applyTypePauseShare answers a node's share of a type-level change that
// another node spreads: the partitions named in forward.Partitions that
// this node owns apply it (engine.PauseIn), and the answer names those
// that hold it durably.
func (s *Server) applyTypePauseShare(w http.ResponseWriter, r *http.Request, req engine.PauseRequest) {
	if r.Header.Get(MutationIDHeader) == "" || r.Header.Get(forward.Partitions) == "" {
		fail(w, r, http.StatusBadRequest, fmt.Sprintf("a type-level pause sent on by another node needs %s and %s", MutationIDHeader, forward.Partitions))
		return
	}
	req.ChangedElsewhere = r.Header.Get(changedElsewhereHeader) == "true"
	owned := s.opts.Cluster.Owned()
	var parts []int
	for _, p := range forward.ParsePartitions(r.Header.Get(forward.Partitions)) {
		if slices.Contains(owned, p) {
			parts = append(parts, p)
		}
	}
	out, err := s.eng.PauseIn(r.Context(), req, parts)
	if err != nil {
		s.engineError(w, r, err)
		return
	}
	ans := shareAnswer{Applied: out.Applied, Changed: out.Changed}
	if ans.Applied == nil {
		ans.Applied = []int{}
	}
	if out.Receipt != nil {
		rc := receiptOf(*out.Receipt)
		ans.Receipt = &rc
	}
	w.Header().Set(forward.Partitions, forward.FormatPartitions(out.Applied))
	writeJSON(w, http.StatusOK, ans)
}

// spreadTypePause applies a type-level change across the cluster: every
// partition but the type's owner first, each on the node that owns it;
// then, once all of them hold it durably, the owner partition, which
// writes the one receipt and audit record. A change repeated with its
// mutation id (MutationIDHeader) whose receipt exists is answered with it
// and applied nowhere again.
func (s *Server) spreadTypePause(w http.ResponseWriter, r *http.Request, req engine.PauseRequest) {
	c := s.opts.Cluster
	if r.Header.Get(MutationIDHeader) != "" {
		if done, ok := s.storedTypeReceipt(w, r, req); done || !ok {
			return
		}
	}
	pb := pauseBody{Reason: req.Reason}
	if req.ExpiresAt != 0 {
		pb.ExpiresAt = time.UnixMilli(req.ExpiresAt).UTC().Format(time.RFC3339Nano)
	}
	body, _ := json.Marshal(pb)
	fw := r.Clone(r.Context())
	fw.Header.Set(MutationIDHeader, req.Mutation)
	fw.Header.Set("Content-Type", "application/json")
	fw.Header.Del("Statefun-Reason")
	fw.Header.Del("Content-Length")
	owner := s.partitionOf(req.Addr)
	var others []int
	for p := range s.eng.Partitions() {
		if p != owner {
			others = append(others, p)
		}
	}
	// spread sends the change to parts, and answers the request itself
	// when some refused it or were not reached (ok false).
	spread := func(parts []int) (answers []forward.Answer, ok bool) {
		answers, refusal, missing := c.Spread(fw, body, parts, 0)
		switch {
		case refusal != nil:
			s.passAnswer(w, *refusal)
		case len(missing) > 0:
			s.typePauseMissing(w, r, req, missing)
		default:
			return answers, true
		}
		return nil, false
	}
	answers, ok := spread(others)
	if !ok {
		return
	}
	changed := false
	for _, a := range answers {
		var sa shareAnswer
		if err := json.Unmarshal(a.Body, &sa); err != nil {
			fail(w, r, http.StatusBadGateway, fmt.Sprintf("node %s answered its share of the change with a body this node cannot read: %v", a.Node, err))
			return
		}
		changed = changed || sa.Changed
	}
	fw.Header.Set(changedElsewhereHeader, strconv.FormatBool(changed))
	if answers, ok = spread([]int{owner}); !ok {
		return
	}
	for _, a := range answers {
		var sa shareAnswer
		if err := json.Unmarshal(a.Body, &sa); err == nil && sa.Receipt != nil {
			s.answerPause(w, r, req.Addr, *sa.Receipt)
			return
		}
	}
	fail(w, r, http.StatusBadGateway, fmt.Sprintf("the node of partition %d, which keeps the receipts of %s, answered without the receipt of %s", owner, req.Addr.Type, req.Mutation))
}

// storedTypeReceipt answers a repeated type-level change from its stored
// receipt, read from the node of the type's owner partition: done when it
// answered with it. ok is false when it answered otherwise (the receipt
// could not be looked for): the caller stops too.
func (s *Server) storedTypeReceipt(w http.ResponseWriter, r *http.Request, req engine.PauseRequest) (done, ok bool) {
	q, err := http.NewRequestWithContext(r.Context(), http.MethodGet, "/mutations/"+req.Mutation, nil)
	if err != nil {
		fail(w, r, http.StatusInternalServerError, err.Error())
		return false, false
	}
	if v := r.Header.Get("Authorization"); v != "" {
		q.Header.Set("Authorization", v)
	}
	answers, missing := s.opts.Cluster.Gather(q, 0, func(a forward.Answer) bool { return a.Status == http.StatusOK })
	status, _, body := mergeOne(answers, missing)
	switch {
	case status == http.StatusOK:
		var rc receiptJSON
		if err := json.Unmarshal(body, &rc); err != nil {
			fail(w, r, http.StatusBadGateway, "the stored receipt of "+req.Mutation+" could not be read: "+err.Error())
			return false, false
		}
		s.answerPause(w, r, req.Addr, rc)
		return true, true
	case status == http.StatusNotFound:
		return false, true
	case status == http.StatusServiceUnavailable:
		s.typePauseMissing(w, r, req, missing)
		return false, false
	}
	writeProblem(w, r, problem{Status: status, Detail: "looking for the receipt of " + req.Mutation + ": " + string(body)})
	return false, false
}

// typePauseMissing answers a type-level change that the partitions
// missing do not have: a 503 naming them and the mutation id, which a
// retry sends as MutationIDHeader to complete the change.
func (s *Server) typePauseMissing(w http.ResponseWriter, r *http.Request, req engine.PauseRequest, missing []int) {
	what := "pause"
	if req.Resume {
		what = "resume"
	}
	w.Header().Set("Retry-After", "1")
	w.Header().Set("Location", "/mutations/"+req.Mutation)
	w.Header().Set(MissingHeader, forward.FormatPartitions(missing))
	writeProblem(w, r, problem{Status: http.StatusServiceUnavailable, Mutation: req.Mutation, MissingPartitions: missing,
		Detail: fmt.Sprintf("the %s of %s (mutation %s) did not reach partitions %s in time (they are moving, or their owner is unreachable); "+
			"it may have been applied by the other partitions: send it again with the header %s: %s to complete it",
			what, req.Addr.Type, req.Mutation, forward.FormatPartitions(missing), MutationIDHeader, req.Mutation)})
}

// passAnswer passes a node's answer back as it is.
func (s *Server) passAnswer(w http.ResponseWriter, a forward.Answer) {
	for k, vs := range passHeader(a.Header) {
		w.Header()[k] = vs
	}
	w.WriteHeader(a.Status)
	w.Write(a.Body)
}
