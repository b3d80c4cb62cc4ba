package stateapi

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/statefun-go/statefun/internal/engine"
	"github.com/statefun-go/statefun/internal/store"
)

// The dead letters of the Kafka ingresses (docs/reference/kafka-ingress.md): the
// records an ingress consumed but could not deliver, kept in the store
// until retention removes them (in cluster mode, by the owner of the
// partition that keeps them; docs/explanation/cluster.md, "Edges"). Read-only; re-sending them is left to a
// later repair tool.

// DefaultDeadLetterLimit and MaxDeadLetterLimit are the default and the
// largest ?limit= of a dead-letter page. The page is streamed, so the cap
// bounds how long one request holds a store iterator (and how long one
// answer is: a dead letter carries its record's value, up to the size
// Kafka allows), not memory.
const (
	DefaultDeadLetterLimit = 100
	MaxDeadLetterLimit     = 1000
)

// deadLetterParams are the query parameters of a dead-letter listing; any
// other is a 400, so that a misspelt filter is not taken for "everything".
var deadLetterParams = []string{"topic", "partition", "reason", "since", "until", "after", "limit"}

// deadLetterJSON is one dead letter as the API answers it.
type deadLetterJSON struct {
	Ingress   string `json:"ingress"`
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Reason    string `json:"reason"`
	// Timestamp is the record's own timestamp.
	Timestamp time.Time `json:"timestamp"`
	// StoredAt is when the runtime stored it; retention counts from it.
	StoredAt time.Time `json:"storedAt"`
	// Key is null for a record without a key.
	Key   *bytesJSON `json:"key"`
	Value bytesJSON  `json:"value"`
	// ValueOmitted is true when the value was not kept (cluster mode, a
	// value too large for a record of the messages topic).
	ValueOmitted bool `json:"valueOmitted,omitempty"`
}

// bytesJSON is a record's key or value: its exact bytes in base64, and as
// text when they are valid UTF-8.
type bytesJSON struct {
	Length int     `json:"length"`
	Base64 string  `json:"base64"`
	Text   *string `json:"text,omitempty"`
}

func bytesOf(b []byte) bytesJSON {
	out := bytesJSON{Length: len(b), Base64: base64.StdEncoding.EncodeToString(b)}
	if utf8.Valid(b) {
		s := string(b)
		out.Text = &s
	}
	return out
}

func deadLetterOf(d *store.DeadLetter) deadLetterJSON {
	out := deadLetterJSON{Ingress: d.Ingress, Topic: d.Topic, Partition: d.Partition, Offset: d.Offset, Reason: d.Reason,
		Timestamp: time.UnixMilli(d.Timestamp).UTC(), StoredAt: time.UnixMilli(d.At).UTC(), Value: bytesOf(d.Value), ValueOmitted: d.ValueOmitted}
	if !d.KeyNull {
		k := bytesOf(d.Key)
		out.Key = &k
	}
	return out
}

// deadLetterCursor is where a page of dead letters ended: the last
// record's place in the scan order (stored time, topic, partition, offset;
// the ingress is the path's).
type deadLetterCursor struct {
	At        int64
	Topic     string
	Partition int32
	Offset    int64
}

// String is the cursor as ?after= carries it: base64url of a JSON array.
func (c deadLetterCursor) String() string {
	b, _ := json.Marshal([]any{c.At, c.Topic, c.Partition, c.Offset})
	return base64.RawURLEncoding.EncodeToString(b)
}

func parseDeadLetterCursor(s string) (deadLetterCursor, error) {
	var c deadLetterCursor
	b, err := base64.RawURLEncoding.DecodeString(s)
	var parts []json.RawMessage
	if err == nil {
		err = json.Unmarshal(b, &parts)
	}
	if err == nil && len(parts) != 4 {
		err = errors.New("want four parts")
	}
	if err == nil {
		err = errors.Join(json.Unmarshal(parts[0], &c.At), json.Unmarshal(parts[1], &c.Topic),
			json.Unmarshal(parts[2], &c.Partition), json.Unmarshal(parts[3], &c.Offset))
	}
	if err != nil {
		return c, fmt.Errorf("?after=%q is not a dead-letter cursor of this API (pass the next of the previous page)", s)
	}
	return c, nil
}

// after reports whether a dead letter of the same ingress comes after the
// cursor in the store's order. The store's string encoding preserves
// order, so comparing the strings compares the keys.
func (c deadLetterCursor) after(d *store.DeadLetter) bool {
	if d.At != c.At {
		return d.At > c.At
	}
	if d.Topic != c.Topic {
		return d.Topic > c.Topic
	}
	if d.Partition != c.Partition {
		return d.Partition > c.Partition
	}
	return d.Offset > c.Offset
}

// serveIngresses serves /ingresses (a summary of the stored dead letters
// of every ingress) and /ingresses/<namespace>/<name>/dead-letters (one
// ingress's dead letters, paged). Both read the durable store only.
func (s *Server) serveIngresses(w http.ResponseWriter, r *http.Request) {
	segs, err := splitPath(r.URL.EscapedPath(), "/ingresses")
	if err != nil {
		fail(w, r, http.StatusBadRequest, "bad ingress: "+err.Error())
		return
	}
	if len(segs) != 0 && (len(segs) != 3 || segs[2] != "dead-letters") {
		fail(w, r, http.StatusNotFound, "no such resource: /ingresses is the summary of the dead letters of every ingress; /ingresses/<namespace>/<name>/dead-letters lists one ingress's")
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed(w, r, "GET, HEAD")
		return
	}
	if _, ok := s.authorize(w, r, ScopeRead); !ok {
		return
	}
	if len(segs) == 0 {
		s.deadLetterSummary(w, r)
		return
	}
	for i, what := range []string{"namespace", "name"} {
		if strings.Contains(segs[i], "/") {
			fail(w, r, http.StatusBadRequest, fmt.Sprintf("bad ingress: the %s %q contains a '/'; an ingress id is <namespace>/<name> with exactly one '/'", what, segs[i]))
			return
		}
	}
	s.listDeadLetters(w, r, segs[0]+"/"+segs[1])
}

// deadLetterQuery is a validated dead-letter listing query.
type deadLetterQuery struct {
	filter store.DeadLetterFilter
	// reason filters after the value is read (the reason is in it).
	reason string
	limit  int
	cursor *deadLetterCursor
}

// parseDeadLetterQuery validates every query parameter; the error names
// the one at fault.
func parseDeadLetterQuery(q url.Values, ingress string) (deadLetterQuery, error) {
	out := deadLetterQuery{filter: store.DeadLetterFilter{Ingress: ingress}, limit: DefaultDeadLetterLimit}
	for name, vs := range q {
		if !slices.Contains(deadLetterParams, name) {
			return out, fmt.Errorf("unknown query parameter ?%s=; the filters are ?%s=", name, strings.Join(deadLetterParams, "=, ?"))
		}
		if len(vs) != 1 {
			return out, fmt.Errorf("?%s= is given %d times; give it once", name, len(vs))
		}
	}
	var (
		topic, reason string
		partition     = int32(-1)
		from, to      = int64(math.MinInt64), int64(math.MaxInt64)
	)
	for _, name := range []string{"topic", "reason"} {
		if !q.Has(name) {
			continue
		}
		v := q.Get(name)
		if v == "" || !utf8.ValidString(v) {
			return out, fmt.Errorf("?%s=%q: want a non-empty UTF-8 %s, or leave the parameter out", name, v, name)
		}
		if name == "topic" {
			topic = v
		} else {
			reason = v
		}
	}
	if q.Has("partition") {
		v := q.Get("partition")
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < 0 {
			return out, fmt.Errorf("?partition=%q: want a Kafka partition number from 0 to %d", v, math.MaxInt32)
		}
		partition = int32(n)
	}
	for _, p := range []struct {
		name string
		dst  *int64
	}{{"since", &from}, {"until", &to}} {
		if v := q.Get(p.name); q.Has(p.name) {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return out, fmt.Errorf("?%s=%q: want an RFC 3339 time, like 2024-05-06T07:08:09Z", p.name, v)
			}
			*p.dst = t.UnixMilli()
		}
	}
	if from > to {
		return out, fmt.Errorf("?since=%s is after ?until=%s", q.Get("since"), q.Get("until"))
	}
	if q.Has("limit") {
		v := q.Get("limit")
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxDeadLetterLimit {
			return out, fmt.Errorf("?limit=%q: want an integer from 1 to %d; page with ?after= (the next of the previous page)", v, MaxDeadLetterLimit)
		}
		out.limit = n
	}
	if q.Has("after") {
		c, err := parseDeadLetterCursor(q.Get("after"))
		if err != nil {
			return out, err
		}
		out.cursor = &c
		from = max(from, c.At)
	}
	// Since and Until bound the store's scan (0 there means "no bound",
	// so Match checks the times too); Match runs on the key's fields,
	// before a record's value is read.
	if from != math.MinInt64 {
		out.filter.Since = from
	}
	if to != math.MaxInt64 {
		out.filter.Until = to
	}
	cursor := out.cursor
	out.filter.Match = func(d *store.DeadLetter) bool {
		return d.At >= from && d.At <= to && (topic == "" || d.Topic == topic) &&
			(partition < 0 || d.Partition == partition) && (cursor == nil || cursor.after(d))
	}
	out.reason = reason
	return out, nil
}

// listDeadLetters answers GET /ingresses/<ns>/<name>/dead-letters: the
// ingress's dead letters in the order they were stored, filtered, one page
// of at most ?limit=, streamed like the audit log (a store error after the
// first record cuts the connection). In cluster mode the page is gathered
// from every node, each answering for the partitions it owns. HEAD
// validates the query and scans nothing. An ingress the module does not
// declare (any longer) is not an error: its dead letters stay readable
// until retention removes them.
func (s *Server) listDeadLetters(w http.ResponseWriter, r *http.Request, ingress string) {
	q, err := parseDeadLetterQuery(r.URL.Query(), ingress)
	if err != nil {
		fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	if r.Method == http.MethodHead {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		return
	}
	if s.gather(w, r, ingressDeadLettersListing(q.limit)) {
		return
	}
	s.ownDeadLetters(w, r, &q.filter)
	page := pageWriter{w: w, field: "deadLetters"}
	var last deadLetterCursor
	more := false
	err = s.st.ScanDeadLetters(q.filter, func(d store.DeadLetter) bool {
		if r.Context().Err() != nil {
			return false
		}
		if q.reason != "" && d.Reason != q.reason {
			return true
		}
		if page.n == q.limit {
			more = true // one more record matches: there is a next page
			return false
		}
		last = deadLetterCursor{At: d.At, Topic: d.Topic, Partition: d.Partition, Offset: d.Offset}
		return page.item(deadLetterOf(&d))
	})
	switch {
	case err != nil && page.n == 0:
		s.engineError(w, r, err)
		return
	case err != nil || page.err != nil || r.Context().Err() != nil:
		// The status is out; cut the connection so that the client cannot
		// take the part it got for the whole page.
		panic(http.ErrAbortHandler)
	}
	var next *string
	if more {
		c := last.String()
		next = &c
	}
	page.end(next)
}

// deadLetterCount is one row of the summary: the dead letters of one
// ingress, topic and reason.
type deadLetterCount struct {
	Topic          string    `json:"topic"`
	Reason         string    `json:"reason"`
	Count          int       `json:"count"`
	OldestStoredAt time.Time `json:"oldestStoredAt"`
	NewestStoredAt time.Time `json:"newestStoredAt"`
}

// ingressDeadLetters is the summary of one ingress's dead letters.
type ingressDeadLetters struct {
	Ingress        string            `json:"ingress"`
	DeadLetters    int               `json:"deadLetters"`
	OldestStoredAt time.Time         `json:"oldestStoredAt"`
	NewestStoredAt time.Time         `json:"newestStoredAt"`
	Counts         []deadLetterCount `json:"counts"`
}

// deadLetterSummary answers GET /ingresses: every ingress holding dead
// letters, with counts by topic and reason (in cluster mode, summed over
// the nodes, each counting the partitions it owns). It scans every
// stored dead letter without copying keys or values; retention bounds how
// many there are (100,000 by default). HEAD scans nothing.
func (s *Server) deadLetterSummary(w http.ResponseWriter, r *http.Request) {
	if len(r.URL.Query()) > 0 {
		for name := range r.URL.Query() {
			fail(w, r, http.StatusBadRequest, fmt.Sprintf("unknown query parameter ?%s=; /ingresses takes none (filter one ingress's dead letters at /ingresses/<namespace>/<name>/dead-letters)", name))
			return
		}
	}
	if r.Method == http.MethodHead {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		return
	}
	if s.gather(w, r, ingressSummaryListing()) {
		return
	}
	f := store.DeadLetterFilter{SkipPayload: true}
	s.ownDeadLetters(w, r, &f)
	type group struct{ ingress, topic, reason string }
	counts := map[group]*deadLetterCount{}
	err := s.st.ScanDeadLetters(f, func(d store.DeadLetter) bool {
		if r.Context().Err() != nil {
			return false
		}
		at := time.UnixMilli(d.At).UTC()
		g := group{d.Ingress, d.Topic, d.Reason}
		c := counts[g]
		if c == nil {
			c = &deadLetterCount{Topic: d.Topic, Reason: d.Reason, OldestStoredAt: at}
			counts[g] = c
		}
		c.Count++
		c.NewestStoredAt = at // the scan is in stored order
		return true
	})
	if err == nil {
		err = r.Context().Err()
	}
	if err != nil {
		s.engineError(w, r, err)
		return
	}
	byIngress := map[string]*ingressDeadLetters{}
	for g, c := range counts {
		one := ingressDeadLetters{Ingress: g.ingress, DeadLetters: c.Count,
			OldestStoredAt: c.OldestStoredAt, NewestStoredAt: c.NewestStoredAt, Counts: []deadLetterCount{*c}}
		if in := byIngress[g.ingress]; in != nil {
			in.add(one)
		} else {
			byIngress[g.ingress] = &one
		}
	}
	out := struct {
		Ingresses []ingressDeadLetters `json:"ingresses"`
	}{Ingresses: []ingressDeadLetters{}}
	for _, in := range byIngress {
		sortCounts(in.Counts)
		out.Ingresses = append(out.Ingresses, *in)
	}
	slices.SortFunc(out.Ingresses, func(a, b ingressDeadLetters) int { return strings.Compare(a.Ingress, b.Ingress) })
	writeJSON(w, http.StatusOK, out)
}

// ownDeadLetters narrows f, for a listing another node is gathering
// (cluster mode), to the dead letters of the partitions this node owns:
// its store may still hold those of a partition that moved away, a cache
// that only the partition's owner keeps current.
func (s *Server) ownDeadLetters(w http.ResponseWriter, r *http.Request, f *store.DeadLetterFilter) {
	own := s.localPart(w, r)
	if own == nil {
		return
	}
	match := f.Match
	f.Match = func(d *store.DeadLetter) bool {
		return own[engine.IngressDeadLetterPartition(d.Partition, s.eng.Partitions())] && (match == nil || match(d))
	}
}

// ingressDeadLettersListing merges the nodes' pages of one ingress's dead
// letters in the store's order (stored time, topic, partition, offset),
// the order of their cursor.
func ingressDeadLettersListing(limit int) listing {
	read := func(item json.RawMessage) (deadLetterCursor, error) {
		var d struct {
			StoredAt  time.Time `json:"storedAt"`
			Topic     string    `json:"topic"`
			Partition int32     `json:"partition"`
			Offset    int64     `json:"offset"`
		}
		err := json.Unmarshal(item, &d)
		return deadLetterCursor{At: d.StoredAt.UnixMilli(), Topic: d.Topic, Partition: d.Partition, Offset: d.Offset}, err
	}
	return listing{field: "deadLetters", limit: limit,
		key: func(item json.RawMessage) (string, error) {
			c, err := read(item)
			// Offset so that negative times sort too; topic names hold
			// no NUL.
			return fmt.Sprintf("%020d\x00%s\x00%010d\x00%020d", uint64(c.At)^(1<<63), c.Topic, uint32(c.Partition), uint64(c.Offset)), err
		},
		cursor: func(item json.RawMessage) (string, error) {
			c, err := read(item)
			return c.String(), err
		}}
}

// ingressSummaryListing merges the nodes' summaries: one item per
// ingress, its counts added by topic and reason, its times the oldest and
// newest of any node.
func ingressSummaryListing() listing {
	return listing{field: "ingresses",
		key: func(item json.RawMessage) (string, error) {
			var in ingressDeadLetters
			err := json.Unmarshal(item, &in)
			return in.Ingress, err
		},
		combine: func(a, b json.RawMessage) json.RawMessage {
			var x, y ingressDeadLetters
			if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
				return a
			}
			x.add(y)
			sortCounts(x.Counts)
			out, _ := json.Marshal(x)
			return out
		}}
}

// add counts o's dead letters (of the same ingress) in in: the counts
// summed, the times the oldest and newest of both, o's rows added to in's
// row of the same topic and reason (appended when in has none).
func (in *ingressDeadLetters) add(o ingressDeadLetters) {
	in.DeadLetters += o.DeadLetters
	in.OldestStoredAt = minTime(in.OldestStoredAt, o.OldestStoredAt)
	in.NewestStoredAt = maxTime(in.NewestStoredAt, o.NewestStoredAt)
	for _, c := range o.Counts {
		i := slices.IndexFunc(in.Counts, func(r deadLetterCount) bool { return r.Topic == c.Topic && r.Reason == c.Reason })
		if i < 0 {
			in.Counts = append(in.Counts, c)
			continue
		}
		in.Counts[i].Count += c.Count
		in.Counts[i].OldestStoredAt = minTime(in.Counts[i].OldestStoredAt, c.OldestStoredAt)
		in.Counts[i].NewestStoredAt = maxTime(in.Counts[i].NewestStoredAt, c.NewestStoredAt)
	}
}

// sortCounts sorts a summary's rows by topic, then reason.
func sortCounts(cs []deadLetterCount) {
	slices.SortFunc(cs, func(a, b deadLetterCount) int {
		return cmp.Or(strings.Compare(a.Topic, b.Topic), strings.Compare(a.Reason, b.Reason))
	})
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
