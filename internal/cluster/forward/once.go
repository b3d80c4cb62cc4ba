package forward

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
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
// address, an inbox repair, deleting an address), from p's owner. Unlike
// a read it is sent to the owner at most once: the owner gives the change
// a mutation id of its own, so a second send after a lost answer could
// apply it twice. It is sent again only when it certainly was not applied:
// the owner could not be reached (no connection was made) or answered 503
// (it refused the change: restoring, no longer the owner, busy). An answer
// lost after the request was sent is a 502 that says the change may have
// been applied. It reports false when no owner answered within the budget
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
	ctx := r.Context()
	deadline := time.Now().Add(f.cfg.Budget)
	d := 50 * time.Millisecond
	var last *http.Response // the owner's last 503
	var lastBody []byte
	for {
		owners, urls, err := f.assignment(ctx)
		node := owners[p]
		if err == nil && node != "" && urls[node] != "" {
			req, err := f.request(ctx, r, urls[node])
			if err != nil {
				return false, err
			}
			req.Body = io.NopCloser(bytes.NewReader(body))
			req.ContentLength = int64(len(body))
			resp, err := f.cfg.Client.Do(req)
			switch {
			case err != nil && !notSent(err):
				f.counter.WithLabelValues("write", "lost").Inc()
				lost(w, node, err)
				return true, nil
			case err == nil && resp.StatusCode != http.StatusServiceUnavailable:
				f.pass(w, resp)
				resp.Body.Close()
				f.counter.WithLabelValues("write", "answered").Inc()
				return true, nil
			case err == nil:
				lastBody, _ = io.ReadAll(io.LimitReader(resp.Body, 1<<20))
				resp.Body.Close()
				last = resp
			}
		}
		f.stale()
		if !backoff(ctx, &d, deadline) {
			break
		}
	}
	if last != nil {
		last.Body = io.NopCloser(bytes.NewReader(lastBody))
		f.pass(w, last)
		f.counter.WithLabelValues("write", "owner_unavailable").Inc()
		return true, nil
	}
	f.counter.WithLabelValues("write", "no_owner").Inc()
	return false, nil
}

// notSent reports whether a request's error says it never left this node:
// no connection could be made to the owner.
func notSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// lost answers a state change whose answer was lost after it was sent.
func lost(w http.ResponseWriter, node string, err error) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(http.StatusBadGateway)
	detail := fmt.Sprintf("the change was sent to node %s, which owns the address, but its answer was lost (%v); it may have been applied: "+
		"look at GET /audit or the address before sending it again", node, err)
	b, _ := json.Marshal(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}{"about:blank", "Bad Gateway", http.StatusBadGateway, detail})
	w.Write(append(b, '\n'))
}
