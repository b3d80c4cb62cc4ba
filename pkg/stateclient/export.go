package stateclient

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// ExportLine is one exported entry, the line `statefun state export`
// writes: the JSON envelope a GET of the entry answers. Value is the value
// as JSON where its type has a JSON form that gives back the exact stored
// bytes; ValueBase64 the exact bytes otherwise (nil when Value says it all).
type ExportLine struct {
	Address     EnvelopeAddress `json:"address"`
	State       string          `json:"state"`
	Typename    string          `json:"typename"`
	Version     string          `json:"version,omitempty"`
	ExpiresAt   *time.Time      `json:"expiresAt,omitempty"`
	Value       json.RawMessage `json:"value,omitempty"`
	ValueBase64 *string         `json:"valueBase64,omitempty"`
}

// ExportOptions select and page an export of one function type.
type ExportOptions struct {
	// Prefix keeps the ids that start with it; State one state name.
	Prefix, State string
	// After is the Next of the previous page ("" for the first).
	After string
	// Limit is the most entries of a page (0: the server's default,
	// 1000). A page also ends after 4 MiB of values.
	Limit int
}

// ExportPage is one page of an export. Next is the cursor of the next page,
// nil after the last.
type ExportPage struct {
	Namespace string       `json:"namespace"`
	Type      string       `json:"type"`
	Entries   []ExportLine `json:"entries"`
	Next      *string      `json:"next"`
}

// ExportPage reads one page of the entries of function type t, values
// included (GET /export/<ns>/<type>). Each page is one consistent read of
// the store; an entry that holds a value through the whole export is on
// exactly one page.
func (c *Client) ExportPage(ctx context.Context, t TypeName, o ExportOptions) (*ExportPage, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	q := url.Values{}
	for k, v := range map[string]string{"prefix": o.Prefix, "state": o.State, "after": o.After} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	resp, err := c.do(ctx, request{method: http.MethodGet, url: c.endpoint("export", []string{t.Namespace, t.Type}, q)})
	if err != nil {
		return nil, err
	}
	var p ExportPage
	if err := decodeJSON(resp, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// Import modes: which lines an import writes.
const (
	// ImportAbsent writes an entry only where it has no value.
	ImportAbsent = "absent"
	// ImportOverwrite writes every entry.
	ImportOverwrite = "overwrite"
	// ImportIfMatch writes an entry only where it still holds the version
	// of the line (the exported one).
	ImportIfMatch = "if-match"
)

// ImportLine is one line of an import batch: its number in the file, and
// the exported line as it is there.
type ImportLine struct {
	Line  int64           `json:"line"`
	Entry json.RawMessage `json:"entry"`
}

// ImportResult is what became of one line.
type ImportResult struct {
	Line     int64  `json:"line"`
	Mutation string `json:"mutation"`
	// Status is "committed", "rejected" (its condition failed: Rejection
	// says which, e.g. "precondition"), or "failed" (not applied: send it
	// again).
	Status string `json:"status"`
	// Replayed: the line had been applied (or rejected) before, this is
	// that outcome, and nothing was applied now.
	Replayed        bool    `json:"replayed"`
	Version         *string `json:"version"`
	PreviousVersion *string `json:"previousVersion"`
	Rejection       string  `json:"rejection"`
	Reason          string  `json:"reason"`
	Commit          string  `json:"commit"`
}

// ImportBatch is the answer to one batch.
type ImportBatch struct {
	Import  string         `json:"import"`
	Mode    string         `json:"mode"`
	Results []ImportResult `json:"results"`
}

// MaxImportLines is the most lines one Import call takes.
const MaxImportLines = 1000

// NewImportID returns a new import id: "import-" and a time-ordered
// random name.
func NewImportID() string {
	var b [8]byte
	rand.Read(b[:])
	return "import-" + strconv.FormatInt(time.Now().UnixMilli(), 36) + hex.EncodeToString(b[:])
}

// Import writes a batch of exported lines back (POST /import/<id>), each
// line as one mutation in its address's mailbox order, audited, with the
// condition mode names. Line n of import id is mutation "<id>.<n>", and is
// applied at most once however often it is sent: send a batch again when
// its answer is lost or a result "failed". A batch with a bad line is
// refused whole: a *ProblemError whose Line names it.
func (c *Client) Import(ctx context.Context, id, mode, reason string, lines []ImportLine) (*ImportBatch, error) {
	body, err := json.Marshal(struct {
		Lines []ImportLine `json:"lines"`
	}{lines})
	if err != nil {
		return nil, fmt.Errorf("stateclient: encode the batch: %w", err)
	}
	h := http.Header{"Content-Type": {"application/json"}}
	if reason != "" {
		h.Set("Statefun-Reason", reason)
	}
	resp, err := c.do(ctx, request{method: http.MethodPost, url: c.endpoint("import", []string{id}, url.Values{"mode": {mode}}), header: h, body: body})
	if err != nil {
		return nil, err
	}
	var b ImportBatch
	if err := decodeJSON(resp, &b); err != nil {
		return nil, err
	}
	return &b, nil
}
