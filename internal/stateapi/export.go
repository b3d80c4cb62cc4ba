package stateapi

// GET /export/<ns>/<type>: the state entries of a function type, values
// included, in pages (docs/how-to/export-import.md).
//
// Why pages and not one snapshot: each page is read on one store iterator,
// a consistent view of what is durable, and the iterator is closed before
// the page is sent. A Pebble snapshot held for a whole export (minutes for
// millions of entries, or however long a slow or stalled client takes)
// would pin every file the runtime's writes make obsolete meanwhile:
// compactions could not drop them, and the disk would grow with the
// traffic for as long as the export ran. Paging costs consistency across
// pages instead, and the cursor bounds what that means: an entry that
// holds a value for the whole export is exported exactly once, with the
// value and version it had when its page was read; an entry created or
// deleted during the export may or may not be in it. Every line carries
// the entry's version, so what changed since can be told (and an import
// with If-Match refuses to overwrite it).

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/cluster/forward"
	"github.com/statefun-go/statefun/internal/store"
	"github.com/statefun-go/statefun/internal/types"
)

// Export page bounds: ?limit= entries (default, most), and the value bytes
// a page gathers before it ends (it ends after the entry that reaches
// them, so one large value still makes a page). A page is read whole
// before it is sent, so these bound the memory of one export request and
// how long it holds a store iterator.
const (
	DefaultExportLimit   = 1000
	MaxExportLimit       = 10000
	MaxExportPageBytes   = 4 << 20
	exportCursorMaxBytes = 16 * address.MaxSegmentBytes
	// maxExportScan bounds the entries one page reads when ?state= or
	// expiry leaves most of them out: the page then ends early, with a
	// cursor, rather than hold its iterator over the whole type.
	maxExportScan = 10 * MaxExportLimit
)

// ExportLine is one exported entry: the JSON envelope a GET of the entry
// answers (docs/reference/state-api.md, "Reads"), on one line. Value is the value as
// JSON where its type has a JSON form that gives back the exact stored
// bytes; ValueBase64 the exact bytes otherwise (or as well, when the JSON
// form would store other bytes). An import reads either.
type ExportLine struct {
	Address   types.EnvelopeAddress `json:"address"`
	State     string                `json:"state"`
	Typename  string                `json:"typename"`
	Version   string                `json:"version,omitempty"`
	ExpiresAt *time.Time            `json:"expiresAt,omitempty"`
	Value     json.RawMessage       `json:"value,omitempty"`
	// ValueBase64 is a pointer: "" is a value of zero bytes, absent is
	// "see value".
	ValueBase64 *string `json:"valueBase64,omitempty"`
}

// exportLineOf renders one stored entry.
func exportLineOf(t address.TypeName, id, state string, e store.Entry) ExportLine {
	l := ExportLine{Address: types.EnvelopeAddress{Namespace: t.Namespace, Type: t.Name, ID: id}, State: state,
		Typename: e.Typename, Version: strconv.FormatUint(e.Version, 10)}
	if e.ExpiresAt != 0 {
		at := time.UnixMilli(e.ExpiresAt).UTC()
		l.ExpiresAt = &at
	}
	if v, ok, err := types.JSONValue(e.Typename, e.Value); err == nil && ok {
		var compact bytes.Buffer
		if json.Compact(&compact, v) == nil {
			l.Value = compact.Bytes()
			// The line is read back through FromJSONValue: keep the JSON
			// alone only when it stores the same bytes again.
			if back, err := types.FromJSONValue(e.Typename, l.Value); err == nil && bytes.Equal(back, e.Value) {
				return l
			}
		} else {
			l.Value = nil
		}
	}
	b64 := base64.StdEncoding.EncodeToString(e.Value)
	l.ValueBase64 = &b64
	return l
}

// exportCursor is where an export page ended: its last entry.
type exportCursor = store.StateCursor

func formatExportCursor(c exportCursor) string {
	b, _ := json.Marshal([]string{c.ID, c.State})
	return base64.RawURLEncoding.EncodeToString(b)
}

func parseExportCursor(s string) (*exportCursor, error) {
	var parts []string
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil && len(b) <= exportCursorMaxBytes {
		err = json.Unmarshal(b, &parts)
	} else if err == nil {
		err = errors.New("too long")
	}
	if err != nil || len(parts) != 2 {
		return nil, fmt.Errorf("?after=%q is not an export cursor of this API (pass the next of the previous page)", s)
	}
	return &exportCursor{ID: parts[0], State: parts[1]}, nil
}

// serveExport answers GET /export/<ns>/<type>?prefix=&state=&after=&limit=:
// {"entries":[ExportLine...],"next":cursor|null}.
func (s *Server) serveExport(w http.ResponseWriter, r *http.Request) {
	segs, err := splitPath(r.URL.EscapedPath(), "/export")
	if err != nil {
		fail(w, r, http.StatusBadRequest, "bad address: "+err.Error())
		return
	}
	if len(segs) != 2 {
		fail(w, r, http.StatusNotFound, "want /export/<namespace>/<type> (percent-encoded segments)")
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed(w, r, "GET, HEAD")
		return
	}
	if _, ok := s.authorize(w, r, ScopeRead); !ok {
		return
	}
	t := address.TypeName{Namespace: segs[0], Name: segs[1]}
	q := r.URL.Query()
	limit := DefaultExportLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxExportLimit {
			fail(w, r, http.StatusBadRequest, fmt.Sprintf("?limit= must be an integer from 1 to %d; page with ?after= (the next of the previous page)", MaxExportLimit))
			return
		}
		limit = n
	}
	prefix, state := q.Get("prefix"), q.Get("state")
	for _, p := range []struct{ name, v string }{{"prefix", prefix}, {"state", state}} {
		if !utf8.ValidString(p.v) || len(p.v) > address.MaxSegmentBytes {
			fail(w, r, http.StatusBadRequest, fmt.Sprintf("?%s= must be UTF-8 of at most %d bytes", p.name, address.MaxSegmentBytes))
			return
		}
	}
	var after *exportCursor
	if v := q.Get("after"); v != "" {
		if after, err = parseExportCursor(v); err != nil {
			fail(w, r, http.StatusBadRequest, err.Error())
			return
		}
	}
	if r.Method == http.MethodHead {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		return
	}
	if s.gatherExport(w, r, t, limit) {
		return
	}
	// In cluster mode, asked by the node gathering the page: the entries
	// of the partitions this node owns, never a stale copy of one that
	// moved away.
	own := s.localPart(w, r)
	now := s.opts.Now().UnixMilli()
	var (
		page    []ExportLine
		size    int
		scanned int
		last    exportCursor
		more    bool
	)
	err = s.st.ScanState(t, prefix, after, func(id, st string, e store.Entry) bool {
		if len(page) == limit || size >= MaxExportPageBytes || scanned == maxExportScan {
			more = true
			return false
		}
		// The page ends at the last entry it read, listed or not, so that
		// a page of skipped entries still moves the cursor on.
		last = exportCursor{ID: id, State: st}
		scanned++
		if (state != "" && st != state) || (e.ExpiresAt != 0 && e.ExpiresAt <= now) ||
			(own != nil && !own[address.Partition(id, s.eng.Partitions())]) {
			return r.Context().Err() == nil
		}
		page = append(page, exportLineOf(t, id, st, e))
		size += len(e.Value)
		return r.Context().Err() == nil
	})
	if err != nil {
		s.engineError(w, r, err)
		return
	}
	if r.Context().Err() != nil {
		return
	}
	if own != nil && !s.stillOwned(own) {
		// A partition moved while the page was read: what it read of it
		// may be older than its new owner's. The gathering node asks
		// again (a 503 covers no partition).
		w.Header().Del(forward.Partitions)
		w.Header().Set("Retry-After", "1")
		fail(w, r, http.StatusServiceUnavailable, "a partition this node read moved away during the read; ask again")
		return
	}
	out := struct {
		Namespace string       `json:"namespace"`
		Type      string       `json:"type"`
		Entries   []ExportLine `json:"entries"`
		Next      *string      `json:"next"`
	}{Namespace: t.Namespace, Type: t.Name, Entries: page}
	if out.Entries == nil {
		out.Entries = []ExportLine{}
	}
	if more {
		c := formatExportCursor(last)
		out.Next = &c
	}
	writeJSON(w, http.StatusOK, out)
}
