package stateapi

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
	"github.com/statefun-go/statefun/internal/types"
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
	// Messages and Delayed are the messages and delayed messages a repair
	// of an inbox took away or put back (inboxrepair.go).
	Messages []auditMessage `json:"messages,omitempty"`
	Delayed  []auditDelayed `json:"delayed,omitempty"`
	// Import and Line name the import and its line a mutation wrote back
	// (import.go); absent for any other mutation.
	Import string `json:"import,omitempty"`
	Line   int64  `json:"line,omitempty"`
}

type auditImage struct {
	Typename string `json:"typename"`
	Version  string `json:"version"`
	// Value is the value as JSON when its type has a JSON form (the
	// built-in scalars, JSON bytes), as a history record shows it;
	// ValueBase64 is always the exact stored bytes.
	Value       json.RawMessage `json:"value,omitempty"`
	ValueBase64 string          `json:"valueBase64"`
}

var opNames = []string{"put", "delete", "delete-all", "restore"}

// MaxAuditLimit caps ?limit= on GET /audit. Records are streamed, so the
// cap bounds how long one request holds a store iterator open (pinning
// data that compactions would otherwise drop), not its memory; page with
// ?after=.
const MaxAuditLimit = 10000

// auditCursor is where a page of the audit log ended: the key of its last
// record (time, mutation, state), the log's order.
type auditCursor struct {
	At       int64
	Mutation string
	State    string
}

// String is the cursor as ?after= carries it: base64url of a JSON array.
func (c auditCursor) String() string {
	b, _ := json.Marshal([]any{c.At, c.Mutation, c.State})
	return base64.RawURLEncoding.EncodeToString(b)
}

// parseAuditCursor reads a cursor String made.
func parseAuditCursor(s string) (auditCursor, error) {
	var c auditCursor
	b, err := base64.RawURLEncoding.DecodeString(s)
	var parts []json.RawMessage
	if err == nil {
		err = json.Unmarshal(b, &parts)
	}
	if err == nil && len(parts) != 3 {
		err = errors.New("want three parts")
	}
	if err == nil {
		err = errors.Join(json.Unmarshal(parts[0], &c.At), json.Unmarshal(parts[1], &c.Mutation), json.Unmarshal(parts[2], &c.State))
	}
	if err != nil {
		return c, fmt.Errorf("?after=%q is not a cursor of this API (pass the next of the previous page)", s)
	}
	return c, nil
}

// after reports whether a record comes after the cursor in the log's order.
func (c auditCursor) after(a *protocol.AuditRecord) bool {
	if a.GetAt() != c.At {
		return a.GetAt() > c.At
	}
	if a.GetMutation() != c.Mutation {
		return a.GetMutation() > c.Mutation
	}
	return a.GetState() > c.State
}

// before reports whether a record comes before the cursor in the log's
// order: after it in a page read newest first.
func (c auditCursor) before(a *protocol.AuditRecord) bool {
	return !c.after(a) && (a.GetAt() != c.At || a.GetMutation() != c.Mutation || a.GetState() != c.State)
}

// serveAudit answers GET /audit?namespace=&type=&id=&state=&principal=
// &mutation=&since=&until=&order=&after=&limit=: the audit log, oldest
// first (?order=newest: newest first), filtered, one page of at most limit
// records.
//
// The page is streamed as the store is scanned: no more than one record is
// held at a time. Once the first record is written the status is sent, so
// a store error after it cannot become a 500: the connection is then cut,
// and the client sees a truncated body, never a short page that looks
// complete. HEAD validates the query and scans nothing.
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
	for _, p := range []struct {
		name string
		dst  *int64
	}{{"since", &from}, {"until", &to}} {
		if v := q.Get(p.name); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				fail(w, r, http.StatusBadRequest, fmt.Sprintf("?%s=%q: want an RFC 3339 time", p.name, v))
				return
			}
			*p.dst = t.UnixMilli()
		}
	}
	limit := 1000
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxAuditLimit {
			fail(w, r, http.StatusBadRequest, fmt.Sprintf("?limit= must be an integer from 1 to %d; page with ?after= (the next of the previous page)", MaxAuditLimit))
			return
		}
		limit = n
	}
	newest := false
	switch v := q.Get("order"); v {
	case "", "oldest":
	case "newest":
		newest = true
	default:
		fail(w, r, http.StatusBadRequest, fmt.Sprintf("?order=%q: want oldest (the default) or newest", v))
		return
	}
	var cursor *auditCursor
	if v := q.Get("after"); v != "" {
		c, err := parseAuditCursor(v)
		if err != nil {
			fail(w, r, http.StatusBadRequest, err.Error())
			return
		}
		cursor = &c
		// The page goes on from the cursor's millisecond, in the page's
		// direction (until is exclusive, since inclusive).
		if newest {
			if c.At < math.MaxInt64 {
				to = min(to, c.At+1)
			}
		} else {
			from = max(from, c.At)
		}
	}
	// The store applies the filters (through its indexes when an address
	// or a principal is named); the cursor skips what the previous page
	// already returned at the same millisecond.
	filter := store.AuditFilter{From: from, To: to, Namespace: q.Get("namespace"), Type: q.Get("type"), ID: q.Get("id"),
		State: q.Get("state"), Principal: q.Get("principal"), Mutation: q.Get("mutation"), Newest: newest}
	if err := filter.Check(); err != nil {
		// Answering it would read the whole log, however long: the
		// filters narrow what an index selects.
		var named []string
		for _, p := range []string{"type", "state"} {
			if q.Get(p) != "" {
				named = append(named, "?"+p+"=")
			}
		}
		fail(w, r, http.StatusBadRequest, fmt.Sprintf("%s alone would read the whole audit log; add ?mutation=, ?principal=, ?id= or ?namespace=: the log is indexed by those, by address (?namespace=&type=&id=) and type (?namespace=&type=), and by time (?since=, ?until=)",
			strings.Join(named, " with ")))
		return
	}
	match := func(a *protocol.AuditRecord) bool {
		switch {
		case cursor == nil:
			return true
		case newest:
			return cursor.before(a)
		default:
			return cursor.after(a)
		}
	}
	if r.Method == http.MethodHead {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		return
	}
	if s.gather(w, r, auditListing(limit, newest)) {
		return
	}
	own := s.localPart(w, r)
	page := pageWriter{w: w, field: "records"}
	var last *protocol.AuditRecord
	more := false
	err := s.st.ScanAuditFiltered(filter, func(a *protocol.AuditRecord) bool {
		if r.Context().Err() != nil || !match(a) || (own != nil && !own[s.auditPartition(a)]) {
			return r.Context().Err() == nil
		}
		if page.n == limit {
			more = true // one more record matches: there is a next page
			return false
		}
		last = a
		return page.item(auditOf(a))
	})
	switch {
	case err != nil && page.n == 0:
		fail(w, r, http.StatusInternalServerError, err.Error())
		return
	case err != nil || page.err != nil || r.Context().Err() != nil:
		// The status is out; cut the connection so that the client cannot
		// take the part it got for the whole page.
		panic(http.ErrAbortHandler)
	}
	var next *string
	if more {
		c := auditCursor{At: last.GetAt(), Mutation: last.GetMutation(), State: last.GetState()}.String()
		next = &c
	}
	page.end(next)
}

func auditOf(a *protocol.AuditRecord) auditJSON {
	t := a.GetTarget()
	out := auditJSON{Mutation: a.GetMutation(), At: time.UnixMilli(a.GetAt()).UTC(), Principal: a.GetPrincipal(),
		Reason: a.GetReason(), Reverts: a.GetReverts(), Namespace: t.GetNamespace(), Type: t.GetType(), ID: t.GetId(),
		State: a.GetState(), Version: versionString(a.GetVersion()), Typename: a.GetTypename()}
	out.Import, out.Line, _ = importLineOf(a.GetMutation())
	if op := int(a.GetOp()); op >= 0 && op < len(opNames) {
		out.Op = opNames[op]
	} else if n, ok := pauseOpNames[partition.MutationOp(op)]; ok {
		out.Op = n
	} else {
		addRepairImages(&out, a)
	}
	if a.GetHadBefore() {
		out.Before = &auditImage{Typename: a.GetBeforeTypename(), Version: strconv.FormatUint(a.GetBeforeVersion(), 10),
			ValueBase64: base64.StdEncoding.EncodeToString(a.GetBeforeValue())}
		if v, ok, err := types.JSONValue(a.GetBeforeTypename(), a.GetBeforeValue()); err == nil && ok {
			out.Before.Value = v
		}
	}
	return out
}

func addrOf(a *protocol.Address) address.Address {
	return address.Address{Type: address.TypeName{Namespace: a.GetNamespace(), Name: a.GetType()}, ID: a.GetId()}
}
