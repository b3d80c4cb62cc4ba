package stateapi

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/statefun-go/statefun/internal/cluster/forward"
	"github.com/statefun-go/statefun/internal/partition"
)

// receiptRound is how long one round of resentAcross's wait asks each node
// to wait for the receipt (?wait=); receiptRoundMin is the least time a
// round takes.
const (
	receiptRound    = 5 * time.Second
	receiptRoundMin = 100 * time.Millisecond
)

// resentAcross answers a re-send of a message dead letter to an address of
// another partition (cluster mode; engine.Resend's AckAccepted receipt):
// the dead letter is gone and the re-send is a command in the messages
// topic, committed with that removal, which the target's owner applies
// once (docs/explanation/cluster.md, "A re-send to another partition"). The answer
// waits, up to MaxWait, for the receipt that owner writes when it applies
// the command — read from every node, as GET /mutations/<id>?wait= is —
// and is then embedded mode's 200 (without the inbox key, which that
// owner chose). Past the wait, or for a token that may not read receipts,
// it is a 202 whose Location is the receipt: the re-send applies all the
// same, and must not be sent again.
func (s *Server) resentAcross(w http.ResponseWriter, r *http.Request, rc partition.Receipt) {
	out := resentJSON{Mutation: rc.Mutation, Status: "accepted", Address: addressOf(rc.Addr)}
	if final, ok := s.finalReceipt(r, rc.Mutation); ok {
		switch final.Status {
		case "committed":
			out.Status = "committed"
			writeJSON(w, http.StatusOK, out)
			return
		case "rejected":
			// The target's core takes every re-send; a rejection is a
			// build that does not know the operation.
			fail(w, r, http.StatusConflict, "the owner of the target refused the re-send: "+final.Reason)
			return
		}
	}
	w.Header().Set("Location", "/mutations/"+escapeSegment(rc.Mutation))
	writeJSON(w, http.StatusAccepted, out)
}

// finalReceipt reads mutation id's receipt from every node until one
// answers it final (committed or rejected), for at most MaxWait; false
// when none did, or the caller's token may not read receipts.
func (s *Server) finalReceipt(r *http.Request, id string) (receiptJSON, bool) {
	c := s.opts.Cluster
	if c == nil {
		return receiptJSON{}, false
	}
	final := func(a forward.Answer) (receiptJSON, bool) {
		var rj receiptJSON
		if a.Status != http.StatusOK || json.Unmarshal(a.Body, &rj) != nil {
			return rj, false
		}
		return rj, rj.Status == "committed" || rj.Status == "rejected"
	}
	deadline := time.Now().Add(s.opts.MaxWait)
	for r.Context().Err() == nil {
		wait := min(receiptRound, time.Until(deadline))
		if wait <= 0 {
			break
		}
		lr := lookupRequest(r, "/mutations/"+escapeSegment(id))
		lr.Header.Del(PartitionHeader)
		lr.URL.RawQuery = "wait=" + wait.String()
		started := time.Now()
		answers, _ := c.Gather(lr, wait, func(a forward.Answer) bool { _, ok := final(a); return ok })
		for _, a := range answers {
			if rj, ok := final(a); ok {
				return rj, true
			}
			if a.Status == http.StatusUnauthorized || a.Status == http.StatusForbidden {
				return receiptJSON{}, false
			}
		}
		// A round that ended early (every node refused at once) is not
		// repeated at once.
		if pause := receiptRoundMin - time.Since(started); pause > 0 {
			t := time.NewTimer(pause)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
			}
		}
	}
	return receiptJSON{}, false
}
