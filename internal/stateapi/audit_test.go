package stateapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// auditPage is the decoded body of GET /audit.
type auditPage struct {
	Records []auditJSON
	Next    *string
}

// TestAuditPaging: pages of ?limit= followed by ?after=next give every
// record once, in the log's order (reversed with ?order=newest), with next
// null on the last page only;
// the cap on limit is a 400 that says how to page.
func TestAuditPaging(t *testing.T) {
	eng := startEngine(t, engineConfig{})
	api := serve(t, eng, Options{})
	for i := range 30 {
		mustPut(t, api, fmt.Sprintf("/state/pg/t/id%d/s%d", i%3, i), "application/octet-stream", "v", "Statefun-Type", "x/T")
	}
	get := func(query string) auditPage {
		t.Helper()
		r := send(t, api, "GET", "/audit?"+query, nil)
		if r.StatusCode != 200 {
			t.Fatalf("GET /audit?%s: %s %s", query, r.Status, r.body)
		}
		var p auditPage
		r.json(t, &p)
		return p
	}
	key := func(a auditJSON) string { return a.Mutation + "/" + a.State }
	for _, order := range []string{"", "newest"} {
		for _, c := range []struct {
			filter string
			limit  int
			want   int
		}{
			{"namespace=pg", 7, 30},
			{"namespace=pg", 10, 30}, // the last page is exactly full
			{"namespace=pg", 1, 30},
			{"namespace=pg&id=id1", 4, 10},
			{"namespace=pg&id=nobody", 4, 0},
		} {
			all := get(c.filter + "&limit=1000")
			if order != "" {
				c.filter += "&order=" + order
			}
			if len(all.Records) != c.want || all.Next != nil {
				t.Fatalf("%s: %d records, next %v; want %d and null", c.filter, len(all.Records), all.Next, c.want)
			}
			var got []string
			after, pages := "", 0
			for {
				q := c.filter + "&limit=" + strconv.Itoa(c.limit)
				if after != "" {
					q += "&after=" + url.QueryEscape(after)
				}
				p := get(q)
				pages++
				if len(p.Records) > c.limit || (p.Next != nil && len(p.Records) != c.limit) {
					t.Fatalf("%s: a page of %d records with next %v", q, len(p.Records), p.Next)
				}
				for _, a := range p.Records {
					got = append(got, key(a))
				}
				if p.Next == nil {
					break
				}
				after = *p.Next
			}
			var want []string
			for _, a := range all.Records {
				want = append(want, key(a))
			}
			if order == "newest" {
				// The same records, newest first: the log's order reversed
				// (many of them share a millisecond: the cursor's tie-break).
				slices.Reverse(want)
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s by %d: paged %q, want %q", c.filter, c.limit, got, want)
			}
			if wantPages := max(1, (c.want+c.limit-1)/c.limit); pages != wantPages {
				t.Errorf("%s by %d: %d pages, want %d", c.filter, c.limit, pages, wantPages)
			}
		}
	}
	for _, q := range []string{"limit=100000", "limit=10001", "after=bm9wZQ", "after=" + url.QueryEscape("[1,2]"), "order=sideways"} {
		r := send(t, api, "GET", "/audit?"+q, nil)
		if r.StatusCode != 400 || !strings.Contains(r.problem(t).Detail, strings.Split(q, "=")[0]) {
			t.Errorf("GET /audit?%s: %s %s", q, r.Status, r.body)
		}
	}
	if p := get("limit=10000"); len(p.Records) != 30 {
		t.Errorf("limit=10000: %d records", len(p.Records))
	}
}

// goneWriter is a client that hangs up once the first record arrives: it
// cancels the request's context on its second write (the first is the
// page's head with the first record, see auditWriter).
type goneWriter struct {
	*httptest.ResponseRecorder
	writes int
	cancel context.CancelFunc
}

func (g *goneWriter) Write(b []byte) (int, error) {
	g.writes++
	if g.writes == 2 {
		g.cancel()
	}
	return g.ResponseRecorder.Write(b)
}

// TestAuditStreams: the audit log is written while it is scanned, not
// gathered first: a client that goes away after the first record has
// been sent gets no more records, and the response is cut (not ended as
// a page that looks complete).
func TestAuditStreams(t *testing.T) {
	eng := startEngine(t, engineConfig{})
	api := serve(t, eng, Options{})
	for i := range 20 {
		mustPut(t, api, fmt.Sprintf("/state/st/t/id/s%d", i), "application/octet-stream", "v", "Statefun-Type", "x/T")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &goneWriter{ResponseRecorder: httptest.NewRecorder(), cancel: cancel}
	req := httptest.NewRequestWithContext(ctx, "GET", "http://127.0.0.1/audit?namespace=st", nil)
	func() {
		defer func() {
			if v := recover(); v != nil && !errors.Is(v.(error), http.ErrAbortHandler) {
				panic(v)
			}
		}()
		New(eng, eng.Reads(), Options{}).Handler(http.NotFoundHandler()).ServeHTTP(w, req)
	}()
	body := w.Body.String()
	if n := strings.Count(body, `"mutation"`); n < 1 || n > 2 {
		t.Errorf("the client left after the first record; %d records were written:\n%s", n, body)
	}
	if strings.Contains(body, `"next"`) {
		t.Errorf("a page cut short ended like a whole one:\n%s", body)
	}
}

// An audit record shows the before-image's value readably where its type
// has a JSON form (a built-in scalar, JSON bytes), as history does, beside
// the exact bytes; an opaque type has only the bytes.
func TestAuditShowsTypedValues(t *testing.T) {
	eng := startEngine(t, engineConfig{})
	api := serve(t, eng, Options{})
	const intType = "Statefun-Type"
	mustPut(t, api, "/state/av/t/a/n", "text/plain", "41", intType, "io.statefun.types/int")
	mustPut(t, api, "/state/av/t/a/n", "text/plain", "42", intType, "io.statefun.types/int")
	mustPut(t, api, "/state/av/t/a/o", "application/octet-stream", "\x01\x02", intType, "x/Opaque")
	mustPut(t, api, "/state/av/t/a/o", "application/octet-stream", "\x03", intType, "x/Opaque")
	r := send(t, api, "GET", "/audit?namespace=av&limit=100", nil)
	if r.StatusCode != 200 {
		t.Fatalf("GET /audit: %s %s", r.Status, r.body)
	}
	var p struct {
		Records []struct {
			State  string `json:"state"`
			Before *struct {
				Value       json.RawMessage `json:"value"`
				ValueBase64 string          `json:"valueBase64"`
			} `json:"before"`
		} `json:"records"`
	}
	r.json(t, &p)
	seen := 0
	for _, rec := range p.Records {
		if rec.Before == nil {
			continue
		}
		seen++
		switch rec.State {
		case "n":
			if string(rec.Before.Value) != "41" || rec.Before.ValueBase64 == "" {
				t.Errorf("int before-image: value %s, bytes %q; want 41 and the bytes", rec.Before.Value, rec.Before.ValueBase64)
			}
		case "o":
			if rec.Before.Value != nil || rec.Before.ValueBase64 != "AQI=" {
				t.Errorf("opaque before-image: value %s, bytes %q; want no value and AQI=", rec.Before.Value, rec.Before.ValueBase64)
			}
		}
	}
	if seen != 2 {
		t.Fatalf("%d records with a before-image; want 2 (%s)", seen, r.body)
	}
}
