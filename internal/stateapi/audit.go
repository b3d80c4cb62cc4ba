package stateapi

import (
	"encoding/base64"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/protocol"
)

type auditJSON struct {
	Mutation  string    `json:"mutation"`
	At        time.Time `json:"at"`
	Principal string    `json:"principal"`
	Reason    string    `json:"reason,omitempty"`
	Reverts   string    `json:"reverts,omitempty"`
	Namespace string    `json:"namespace"`
	Type      string    `json:"type"`
	ID        string    `json:"id"`
	State     string    `json:"state"`
	Op        string    `json:"op"`
	// Before is the before-image; null when the entry had no value.
	Before   *auditImage `json:"before"`
	Version  *string     `json:"version"`
	Typename string      `json:"typename,omitempty"`
}

type auditImage struct {
	Typename    string `json:"typename"`
	Version     string `json:"version"`
	ValueBase64 string `json:"valueBase64"`
}

var opNames = []string{"put", "delete", "delete-all"}

// serveAudit answers GET /audit?namespace=&type=&id=&state=&principal=
// &since=&until=&limit=: the audit log, oldest first, filtered.
func (s *Server) serveAudit(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed(w, r, "GET, HEAD")
		return
	}
	if _, ok := s.authorize(w, r, ScopeRead); !ok {
		return
	}
	q := r.URL.Query()
	from, to := int64(math.MinInt64), int64(math.MaxInt64)
	for name, dst := range map[string]*int64{"since": &from, "until": &to} {
		if v := q.Get(name); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				fail(w, r, http.StatusBadRequest, fmt.Sprintf("?%s=%q: want an RFC 3339 time", name, v))
				return
			}
			*dst = t.UnixMilli()
		}
	}
	limit := 1000
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100000 {
			fail(w, r, http.StatusBadRequest, "?limit= must be an integer from 1 to 100000")
			return
		}
		limit = n
	}
	match := func(a *protocol.AuditRecord) bool {
		t := a.GetTarget()
		for k, v := range map[string]string{"namespace": t.GetNamespace(), "type": t.GetType(), "id": t.GetId(),
			"state": a.GetState(), "principal": a.GetPrincipal(), "mutation": a.GetMutation()} {
			if want := q.Get(k); want != "" && want != v {
				return false
			}
		}
		return true
	}
	out := []auditJSON{}
	err := s.eng.ScanAudit(from, to, func(a *protocol.AuditRecord) bool {
		if match(a) {
			out = append(out, auditOf(a))
		}
		return len(out) < limit
	})
	if err != nil {
		fail(w, r, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Records []auditJSON `json:"records"`
	}{out})
}

func auditOf(a *protocol.AuditRecord) auditJSON {
	t := a.GetTarget()
	out := auditJSON{Mutation: a.GetMutation(), At: time.UnixMilli(a.GetAt()).UTC(), Principal: a.GetPrincipal(),
		Reason: a.GetReason(), Reverts: a.GetReverts(), Namespace: t.GetNamespace(), Type: t.GetType(), ID: t.GetId(),
		State: a.GetState(), Version: versionString(a.GetVersion()), Typename: a.GetTypename()}
	if op := int(a.GetOp()); op >= 0 && op < len(opNames) {
		out.Op = opNames[op]
	}
	if a.GetHadBefore() {
		out.Before = &auditImage{Typename: a.GetBeforeTypename(), Version: strconv.FormatUint(a.GetBeforeVersion(), 10),
			ValueBase64: base64.StdEncoding.EncodeToString(a.GetBeforeValue())}
	}
	return out
}

func addrOf(a *protocol.Address) address.Address {
	return address.Address{Type: address.TypeName{Namespace: a.GetNamespace(), Name: a.GetType()}, ID: a.GetId()}
}
