package stateapi

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
)

// serveMutations answers GET /mutations/<id>[?wait=] and POST
// /mutations/<id>/revert.
func (s *Server) serveMutations(w http.ResponseWriter, r *http.Request) {
	segs, err := splitPath(r.URL.EscapedPath(), "/mutations")
	if err != nil || len(segs) == 0 || len(segs) > 2 || (len(segs) == 2 && segs[1] != "revert") {
		fail(w, r, http.StatusNotFound, "want /mutations/<id> or /mutations/<id>/revert")
		return
	}
	id := segs[0]
	if len(segs) == 2 {
		if r.Method != http.MethodPost {
			methodNotAllowed(w, r, "POST")
			return
		}
		principal, ok := s.authorize(w, r, ScopeWrite)
		if ok {
			s.revert(w, r, principal, id)
		}
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed(w, r, "GET, HEAD")
		return
	}
	_, ok := s.authorize(w, r, ScopeRead)
	if !ok {
		return
	}
	// Without ?wait= the receipt is read once: WaitReceipt would wait for a
	// final one (or for an unknown id to appear) until the client gave up.
	var rc *protocol.Receipt
	if v := r.URL.Query().Get("wait"); v != "" {
		d, perr := time.ParseDuration(v)
		if perr != nil || d < 0 {
			fail(w, r, http.StatusBadRequest, fmt.Sprintf("?wait=%q: want a duration like 5s", v))
			return
		}
		if s.gatherOne(w, r, min(d, s.opts.MaxWait)) {
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), min(d, s.opts.MaxWait))
		defer cancel()
		rc, ok, err = s.eng.WaitReceipt(ctx, id)
	} else {
		if s.gatherOne(w, r, 0) {
			return
		}
		rc, ok, err = s.st.Receipt(id)
	}
	if err != nil {
		s.engineError(w, r, err)
		return
	}
	if own := s.localPart(w, r); ok && own != nil && !own[s.receiptPartition(rc)] {
		ok = false // a stale copy of a partition that moved away: its owner answers
	}
	if !ok {
		fail(w, r, http.StatusNotFound, fmt.Sprintf("no receipt for mutation %s (unknown, or applied with ack=applied and not committed yet)", id))
		return
	}
	out := storedReceipt(rc)
	out.Commit = s.receiptPosition(rc)
	writeJSON(w, http.StatusOK, out)
}

func storedReceipt(rc *protocol.Receipt) receiptJSON {
	out := receiptJSON{Mutation: rc.GetMutation(), Status: rc.GetStatus(), Reason: rc.GetReason(),
		Version: versionString(rc.GetVersion())}
	if rc.GetStatus() == "rejected" {
		out.Rejection = rejectionName(partition.RejectCode(rc.GetReject()))
	}
	if rc.GetStatus() != "accepted" {
		cp := rc.GetCheckpoint()
		out.Checkpoint = &cp
		if rc.GetStatus() == "committed" {
			out.PreviousVersion = versionString(rc.GetPreviousVersion())
		}
	}
	return out
}

// revert restores the before-images of a committed mutation, each on the
// condition that the entry still holds the version that mutation wrote (or,
// for a deletion, still holds no value). The revert is a mutation of its
// own, audited, that names the one it undoes. In cluster mode it runs on
// the node holding the mutation's receipt and audit records (holder.go).
func (s *Server) revert(w http.ResponseWriter, r *http.Request, principal, id string) {
	rc, ok, err := s.st.Receipt(id)
	if err != nil {
		s.engineError(w, r, err)
		return
	}
	h := receiptHolder(id)
	if s.forwardByID(w, r, nil, ok, s.receiptPartition(rc), h) {
		return
	}
	if !ok {
		fail(w, r, http.StatusNotFound, h.notFound)
		return
	}
	if rc.GetStatus() != "committed" {
		fail(w, r, http.StatusConflict, fmt.Sprintf("mutation %s is %s; only a committed mutation can be reverted", id, rc.GetStatus()))
		return
	}
	records, err := s.st.AuditOf(id, rc.GetAt())
	if err != nil {
		s.engineError(w, r, err)
		return
	}
	if len(records) == 0 {
		fail(w, r, http.StatusConflict, "mutation "+id+" changed nothing to revert")
		return
	}
	if s.revertRepair(w, r, principal, id, records) {
		return
	}
	if _, ok := pauseOpNames[partition.MutationOp(records[0].GetOp())]; ok {
		fail(w, r, http.StatusConflict, "mutation "+id+" is a pause or a resume; lift a pause with POST /resume/…, set one with POST /pause/…")
		return
	}
	reason, err := s.reasonOf(r)
	if err != nil {
		fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	if strings.TrimSpace(reason) == "" {
		reason = "revert of " + id
	}
	var receipts []receiptJSON
	status, rejected := http.StatusOK, -1
	// A revert sent once (once.go) applies each of its mutations once: the
	// last carries the id it was sent with, whose receipt says the whole
	// revert is done; the others ids derived from it, and one with a
	// receipt already (a repeat of a revert cut short) is not applied
	// again.
	changeID, once := s.changeID(r), false
	if _, ok := sentOnce(r); ok {
		once = changeID == r.Header.Get(MutationIDHeader)
	}
	for i, a := range records {
		mid := changeID
		switch {
		case i < len(records)-1 && once:
			mid = fmt.Sprintf("%s.%d", changeID, i)
		case i < len(records)-1:
			mid = s.newMutationID()
		}
		if stored, ok, err := s.st.Receipt(mid); once && err == nil && ok && stored.GetStatus() != "accepted" {
			if stored.GetStatus() == "rejected" && rejected < 0 {
				status, rejected = http.StatusPreconditionFailed, len(receipts)
			}
			rj := storedReceipt(stored)
			rj.Commit = s.receiptPosition(stored)
			receipts = append(receipts, rj)
			continue
		}
		m := partition.Mutation{ID: mid, Addr: addrOf(a.GetTarget()), State: a.GetState(),
			Principal: principal, Reason: reason, Reverts: id, Ack: partition.AckCommitted}
		if a.GetHadBefore() {
			m.Op, m.Typename, m.Value = partition.OpPut, a.GetBeforeTypename(), a.GetBeforeValue()
		} else {
			m.Op = partition.OpDelete
		}
		if a.GetVersion() != 0 {
			m.IfMatch = a.GetVersion()
		} else {
			m.IfNoneMatch = true
		}
		out, err := s.eng.Mutate(r.Context(), m)
		if err != nil {
			s.engineError(w, r, err)
			return
		}
		if out.Reject != partition.Applied && rejected < 0 {
			status, rejected = http.StatusPreconditionFailed, len(receipts)
		}
		rj := receiptOf(out)
		rj.Commit = position(s.partitionOf(out.Addr), out.Checkpoint)
		receipts = append(receipts, rj)
	}
	if status != http.StatusOK {
		rc := receipts[rejected]
		writeProblem(w, r, problem{Status: status, Detail: "the entry changed since mutation " + id + "; nothing was reverted where it did",
			CurrentVersion: rc.Version, Receipt: &rc})
		return
	}
	if len(receipts) == 1 {
		writeJSON(w, status, receipts[0])
		return
	}
	writeJSON(w, status, receipts)
}
