package egress

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/statefun-go/statefun/internal/protocol"
)

// stoppedSource is the egress's test double of a runtime whose engine has
// stopped: every call fails with errStopped. The real path (pops, reads and
// acks against the engine) is tested in internal/app and e2e.
type stoppedSource struct{}

var errStopped = errors.New("engine: closed: store: disk full")

func (stoppedSource) PopEgress(context.Context, string, string) (*protocol.EgressRecord, bool, error) {
	return nil, false, errStopped
}

func (stoppedSource) ReadEgress(context.Context, string, string, uint64) (uint64, *protocol.EgressRecord, bool, error) {
	return 0, nil, false, errStopped
}

func (stoppedSource) AckEgress(context.Context, string, string, uint64) error { return errStopped }

// TestUnavailableIs503: when the runtime cannot serve (its engine stopped
// on a store error, or is shutting down), a pop, a read and an ack answer
// 503 with Retry-After, not a 500 that a client would take as final.
func TestUnavailableIs503(t *testing.T) {
	p := &Playground{Source: stoppedSource{}, Topics: []string{"out"},
		Unavailable: func(err error) bool { return errors.Is(err, errStopped) }}
	for _, req := range []*http.Request{
		httptest.NewRequest(http.MethodGet, "/out", nil),
		httptest.NewRequest(http.MethodGet, "/out?after=0", nil),
		httptest.NewRequest(http.MethodPost, "/out?ack=1", nil),
	} {
		w := httptest.NewRecorder()
		p.ServeHTTP(w, req)
		if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
			t.Errorf("%s %s: %d Retry-After=%q, want 503 with Retry-After", req.Method, req.URL, w.Code, w.Header().Get("Retry-After"))
		}
	}
}
