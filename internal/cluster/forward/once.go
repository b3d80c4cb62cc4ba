package forward

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
)

// MaxOnceBody caps the body of a state change ForwardOnce sends on: a
// repair's body is a small JSON object, an edited message a value the
// owner caps again.
const MaxOnceBody = 16 << 20

// ErrTooLarge is ForwardOnce's answer for a body over MaxOnceBody: the
// caller answers 413.
var ErrTooLarge = errors.New("forward: the request body is over the cap of a forwarded state change")

// ForwardOnce answers r, a state change about one address of partition p
// that does not travel as a command (a restore, a pause or resume of the
// address, an inbox repair, deleting an address), from p's owner. r
// carries the change's mutation id (MutationID), which the owner applies
// once, answering a repeat as it answered the first (or with the id's
// receipt, on a node the partition moved to). So the change is sent again,
// within the budget, whenever its outcome is not known: the owner could not
// be reached, answered 503 (restoring, no longer the owner, busy, or still
// applying it), or its answer was lost after the request was sent. An
// answer still lost at the end is a 502 that names the id, whose receipt
// tells whether it was applied. Without a mutation id, a lost answer is
// not sent again (the owner could apply the change twice) but answered
// 502 at once. It reports false when no owner answered within the budget
// (the caller answers its 503), and ErrTooLarge for a body over
// MaxOnceBody.
func (f *Forwarder) ForwardOnce(w http.ResponseWriter, r *http.Request, p int) (bool, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxOnceBody+1))
	if err != nil {
		return false, fmt.Errorf("forward: reading the request body: %w", err)
	}
	if len(body) > MaxOnceBody {
		return false, ErrTooLarge
	}
	return f.exchange(w, r, p, body, true), nil
}

// notSent reports whether a request's error says it never left this node:
// no connection could be made to the owner.
func notSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// lost answers a state change whose answer was lost after it was sent;
// id is its mutation id ("" when it has none).
func lost(w http.ResponseWriter, node string, err error, id string) {
	w.Header().Set("Content-Type", "application/problem+json")
	detail := fmt.Sprintf("the change was sent to node %s, which owns the address, but its answer was lost (%v); it may have been applied: "+
		"look at GET /audit or the address before sending it again", node, err)
	if id != "" {
		w.Header().Set("Location", "/mutations/"+id)
		detail = fmt.Sprintf("the change, mutation %s, was sent to node %s, which owns the address, but its answer was lost (%v), also when sent again; it applies at most once: "+
			"read its receipt at /mutations/%s before sending it again", id, node, err, id)
	}
	w.WriteHeader(http.StatusBadGateway)
	b, _ := json.Marshal(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}{"about:blank", "Bad Gateway", http.StatusBadGateway, detail})
	w.Write(append(b, '\n'))
}
