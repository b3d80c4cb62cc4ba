package stateapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/cluster/forward"
	"github.com/statefun-go/statefun/internal/engine"
	"github.com/statefun-go/statefun/internal/invoker"
	"github.com/statefun-go/statefun/internal/store"
)

// exportAll pages GET /export/<ns>/<type> with limit and returns every
// line as its JSON, in order.
func exportAll(t *testing.T, api, typ string, limit int, query string) []string {
	t.Helper()
	var out []string
	after := ""
	for pages := 0; ; pages++ {
		if pages > 1000 {
			t.Fatal("the export does not end")
		}
		target := fmt.Sprintf("/export/%s?limit=%d%s", typ, limit, query)
		if after != "" {
			target += "&after=" + url.QueryEscape(after)
		}
		r := send(t, api, "GET", target, nil)
		if r.StatusCode != 200 {
			t.Fatalf("GET %s: %s %s", target, r.Status, r.body)
		}
		var p struct {
			Entries []json.RawMessage
			Next    *string
		}
		r.json(t, &p)
		if len(p.Entries) > limit {
			t.Fatalf("a page of %d entries, limit %d", len(p.Entries), limit)
		}
		for _, e := range p.Entries {
			var c bytes.Buffer
			json.Compact(&c, e)
			out = append(out, c.String())
		}
		if p.Next == nil {
			return out
		}
		after = *p.Next
	}
}

// importBody is a batch of lines numbered from first.
func importBody(first int, lines ...string) []byte {
	var b strings.Builder
	b.WriteString(`{"lines":[`)
	for i, l := range lines {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"line":%d,"entry":%s}`, first+i, l)
	}
	b.WriteString("]}")
	return []byte(b.String())
}

type importAnswer struct {
	Import  string
	Results []struct {
		Line                        int64
		Mutation, Status, Rejection string
		Replayed                    bool
		Version                     *string
	}
}

func mustImport(t *testing.T, api, id, mode string, body []byte) importAnswer {
	t.Helper()
	r := send(t, api, "POST", "/import/"+id+"?mode="+mode, body, "Content-Type", "application/json")
	if r.StatusCode != 200 {
		t.Fatalf("POST /import/%s: %s %s", id, r.Status, r.body)
	}
	var a importAnswer
	r.json(t, &a)
	return a
}

// withoutVersion drops the version of exported lines (it differs between
// runtimes) to compare what they hold.
func withoutVersion(t *testing.T, lines []string) []string {
	t.Helper()
	out := make([]string, len(lines))
	for i, l := range lines {
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		delete(m, "version")
		delete(m, "expiresAt")
		b, _ := json.Marshal(m)
		out[i] = string(b)
	}
	return out
}

// An export pages every entry of a type exactly once, each value in the
// representation a GET gives, and an import of it into a fresh runtime
// gives back the same entries, byte for byte.
func TestExportImportRoundTrip(t *testing.T) {
	src := serve(t, startWithFunction(t, engineConfig{}), Options{})
	ids := []string{"a", "a/b", "nul\x00", "😀", ".", "z"}
	for _, id := range ids {
		base := "/state/test/fn/" + escapeSegment(id)
		mustPut(t, src, base+"/str", "text/plain", "hello "+id)
		mustPut(t, src, base+"/i32", "text/plain", "42")
		mustPut(t, src, base+"/f64", "text/plain", "3.5")
		mustPut(t, src, base+"/doc", "text/plain", `{"k": [1, 2]}`) // not compact: exported as base64 too
		mustPut(t, src, base+"/bin", "application/octet-stream", "\x00\xff\x10")
		mustPut(t, src, base+"/ttl", "text/plain", "soon")
		mustPut(t, src, base+"/extra", "text/plain", `"x"`, "Statefun-Type", "test/Other")
	}
	lines := exportAll(t, src, "test/fn", 4, "")
	// The warm-up message of startWithFunction left test/fn/warmup's i64.
	if want := len(ids)*7 + 1; len(lines) != want {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), want, strings.Join(lines, "\n"))
	}
	for _, want := range []string{
		`{"address":{"namespace":"test","type":"fn","id":"a"},"state":"i32","typename":"io.statefun.types/int","version":`,
		`"state":"str","typename":"io.statefun.types/string","version":`,
		`"value":"hello a"}`, `"value":42}`, `"value":3.5}`, `"valueBase64":"AP8Q"}`,
		`"value":{"k":[1,2]},"valueBase64":"eyJrIjogWzEsIDJdfQ=="}`,
	} {
		if !strings.Contains(strings.Join(lines, "\n"), want) {
			t.Errorf("the export lacks %s:\n%s", want, strings.Join(lines, "\n"))
		}
	}
	// Pages of one entry give the same lines.
	if one := exportAll(t, src, "test/fn", 1, ""); strings.Join(one, "\n") != strings.Join(lines, "\n") {
		t.Errorf("paged by 1:\n%s\nby 4:\n%s", strings.Join(one, "\n"), strings.Join(lines, "\n"))
	}
	// --state and --prefix.
	if got := exportAll(t, src, "test/fn", 2, "&state=i32&prefix=a"); len(got) != 2 {
		t.Errorf("i32 of ids a*: %q", got)
	}

	dst := serve(t, startWithFunction(t, engineConfig{}), Options{})
	a := mustImport(t, dst, "import-rt1", ImportOverwrite, importBody(1, lines...))
	for _, r := range a.Results {
		if r.Status != "committed" || r.Replayed || r.Mutation != fmt.Sprintf("import-rt1.%d", r.Line) {
			t.Errorf("line %d: %+v", r.Line, r)
		}
	}
	back := exportAll(t, dst, "test/fn", 1000, "")
	if got, want := strings.Join(withoutVersion(t, back), "\n"), strings.Join(withoutVersion(t, lines), "\n"); got != want {
		t.Errorf("after the round trip:\n%s\nwant:\n%s", got, want)
	}
	for _, id := range ids {
		target := "/state/test/fn/" + escapeSegment(id) + "/doc"
		if r := send(t, dst, "GET", target, nil, "Accept", "application/octet-stream"); string(r.body) != `{"k": [1, 2]}` {
			t.Errorf("GET %s: %q, want the exact bytes", target, r.body)
		}
	}
}

// An import line is applied at most once: a batch sent again is answered
// from the receipts, and, once the receipts are gone, from the audit log.
// The audit log names the import and the line.
func TestImportAppliesEachLineOnce(t *testing.T) {
	db, err := store.Open("data", store.Options{Partitions: 4, FS: vfs.NewMem(), Logger: quietPebble{},
		Retention: store.Retention{ReceiptCount: 1}})
	if err != nil {
		t.Fatal(err)
	}
	inv, err := invoker.New(invoker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(engine.Options{Store: db, Functions: fnClient{inv, "http://127.0.0.1:1/none"},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	eng.Start()
	t.Cleanup(func() { eng.Close(); inv.Close(); db.Close() })
	api := serve(t, eng, Options{})

	line := func(id, v string) string {
		return `{"address":{"namespace":"x","type":"y","id":"` + id + `"},"state":"s","typename":"x/T","value":` + v + `}`
	}
	body := importBody(1, line("a", `"1"`), line("b", `"2"`), line("a", `"3"`))
	first := mustImport(t, api, "import-once", ImportOverwrite, body)
	again := mustImport(t, api, "import-once", ImportOverwrite, body)
	for i := range first.Results {
		f, g := first.Results[i], again.Results[i]
		if f.Status != "committed" || f.Replayed || g.Status != "committed" || !g.Replayed || versionOf(f.Version) != versionOf(g.Version) {
			t.Errorf("line %d: first %s (replayed %v) at version %s, again %s (replayed %v) at version %s",
				i+1, f.Status, f.Replayed, versionOf(f.Version), g.Status, g.Replayed, versionOf(g.Version))
		}
	}
	// Lines of one entry apply in order: a holds line 3's value.
	if r := send(t, api, "GET", "/state/x/y/a/s", nil, "Accept", "application/octet-stream"); string(r.body) != `"3"` {
		t.Errorf("a holds %q, want line 3's", r.body)
	}
	if _, err := db.Sweep(); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := db.Receipt("import-once.1"); ok {
		t.Fatal("the sweep kept line 1's receipt")
	}
	third := mustImport(t, api, "import-once", ImportOverwrite, body)
	for i, r := range third.Results {
		if r.Status != "committed" || !r.Replayed {
			t.Errorf("line %d, its receipt gone: %s (replayed %v) at version %s", i+1, r.Status, r.Replayed, versionOf(r.Version))
		}
	}
	var audit struct{ Records []auditJSON }
	send(t, api, "GET", "/audit?namespace=x&type=y", nil).json(t, &audit)
	if len(audit.Records) != 3 {
		t.Fatalf("%d audit records, want one per line:\n%+v", len(audit.Records), audit.Records)
	}
	for _, a := range audit.Records {
		if a.Import != "import-once" || a.Line < 1 || a.Line > 3 || a.Mutation != fmt.Sprintf("import-once.%d", a.Line) || a.Reason != "import import-once" {
			t.Errorf("audit record %+v", a)
		}
	}
}

// The modes: absent writes only where there is no value, if-match only
// where the entry holds the line's version; each refusal is its line's.
func TestImportModes(t *testing.T) {
	api := serve(t, startEngine(t, engineConfig{}), Options{})
	mustPut(t, api, "/state/x/y/has/s", "application/octet-stream", "old", "Statefun-Type", "x/T")
	var cur struct{ Version string }
	send(t, api, "GET", "/state/x/y/has/s", nil, "Accept", "application/json").json(t, &cur)
	line := func(id, version string) string {
		return `{"address":{"namespace":"x","type":"y","id":"` + id + `"},"state":"s","typename":"x/T","version":"` + version + `","valueBase64":"bmV3"}`
	}
	a := mustImport(t, api, "import-absent", ImportAbsent, importBody(1, line("has", "1"), line("new", "1")))
	if r := a.Results; r[0].Status != "rejected" || r[0].Rejection != "precondition" || versionOf(r[0].Version) != cur.Version || r[1].Status != "committed" {
		t.Errorf("absent: %+v", r)
	}
	a = mustImport(t, api, "import-ifmatch", ImportIfMatch, importBody(1, line("has", cur.Version), line("new", "999")))
	if r := a.Results; r[0].Status != "committed" || r[1].Status != "rejected" || r[1].Rejection != "precondition" {
		t.Errorf("if-match: %+v", r)
	}
	a = mustImport(t, api, "import-ifmatch2", ImportIfMatch, importBody(1, line("has", cur.Version)))
	if r := a.Results; r[0].Status != "rejected" {
		t.Errorf("if-match of a version overwritten since: %+v", r)
	}
	a = mustImport(t, api, "import-over", ImportOverwrite, importBody(1, line("has", "1")))
	if r := a.Results; r[0].Status != "committed" {
		t.Errorf("overwrite: %+v", r)
	}
}

// A bad line refuses its whole batch, naming the line; nothing is applied.
func TestImportBadLines(t *testing.T) {
	eng := startWithFunction(t, engineConfig{})
	api := serve(t, eng, Options{})
	good := `{"address":{"namespace":"x","type":"y","id":"g"},"state":"s","typename":"x/T","value":1}`
	for _, c := range []struct {
		name, line string
		status     int
		detail     string
	}{
		{"not an object", `[1]`, 400, "line 2: the entry is not a JSON object"},
		{"no id", `{"address":{"namespace":"x","type":"y"},"state":"s","typename":"x/T","value":1}`, 400, "line 2: address.id is empty"},
		{"no value", `{"address":{"namespace":"x","type":"y","id":"b"},"state":"s","typename":"x/T"}`, 400, `neither "value" nor "valueBase64"`},
		{"not an int", `{"address":{"namespace":"test","type":"fn","id":"b"},"state":"i32","typename":"io.statefun.types/int","value":"x"}`, 422, "line 2: "},
		{"bad base64", `{"address":{"namespace":"x","type":"y","id":"b"},"state":"s","typename":"x/T","valueBase64":"!"}`, 400, "line 2: "},
		{"no typename", `{"address":{"namespace":"x","type":"y","id":"b"},"state":"s","value":1}`, 400, "no typename"},
		{"if-match without version", ``, 0, ""},
	} {
		if c.status == 0 {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			r := send(t, api, "POST", "/import/import-bad?mode=overwrite", importBody(1, good, c.line), "Content-Type", "application/json")
			p := r.problem(t)
			if r.StatusCode != c.status || p.Line == nil || *p.Line != 2 || !strings.Contains(p.Detail, c.detail) || !strings.Contains(p.Detail, "nothing of this batch was applied") {
				t.Errorf("%s: %s", r.Status, r.body)
			}
		})
	}
	r := send(t, api, "POST", "/import/import-bad?mode=if-match", importBody(1, good), "Content-Type", "application/json")
	if p := r.problem(t); r.StatusCode != 400 || !strings.Contains(p.Detail, "line 1: mode if-match needs the line's version") {
		t.Errorf("if-match without a version: %s %s", r.Status, r.body)
	}
	if r := send(t, api, "GET", "/state/x/y/g/s", nil); r.StatusCode != 404 {
		t.Errorf("the good line of a refused batch was applied: %s %s", r.Status, r.body)
	}
	for _, c := range []struct {
		target, body string
		status       int
	}{
		{"/import/nope?mode=overwrite", `{"lines":[]}`, 400},
		{"/import/import-x?mode=merge", `{"lines":[]}`, 400},
		{"/import/import-x?mode=overwrite", `{"lines":[]}`, 400},
		{"/import/import-x?mode=overwrite", `{"lines":`, 400},
		{"/import/import-x?mode=overwrite", string(importBody(0, good)), 400},
		{"/import/import-x?mode=overwrite", `{"lines":[{"line":2,"entry":` + good + `},{"line":2,"entry":` + good + `}]}`, 400},
		{"/import/import-x?mode=overwrite", string(importBody(1, slicesRepeat(good, MaxImportLines+1)...)), 413},
		{"/import", "", 404},
		{"/import/a/b", "", 404},
	} {
		if r := send(t, api, "POST", c.target, []byte(c.body)); r.StatusCode != c.status {
			t.Errorf("POST %s %.40s: %s, want %d\n%s", c.target, c.body, r.Status, c.status, r.body)
		}
	}
	small := serve(t, eng, Options{MaxBodyBytes: 16})
	big := `{"address":{"namespace":"x","type":"y","id":"g"},"state":"s","typename":"x/T","valueBase64":"` + strings.Repeat("A", 40) + `"}`
	if r := send(t, small, "POST", "/import/import-x?mode=overwrite", importBody(1, big)); r.StatusCode != 413 || !strings.Contains(string(r.body), "line 1: the value is 30 bytes") {
		t.Errorf("a value over the PUT limit: %s %s", r.Status, r.body)
	}
	if r := send(t, small, "POST", "/import/import-x?mode=overwrite", importBody(1, slicesRepeat(big, 3)...)); r.StatusCode != 413 || !strings.Contains(string(r.body), "over the limit") {
		t.Errorf("a batch over the body limit: %s %s", r.Status, r.body)
	}
	if r := send(t, api, "POST", "/import/import-x?mode=overwrite", importBody(1, good), "If-Match", `"1"`); r.StatusCode != 400 {
		t.Errorf("If-Match on an import: %s %s", r.Status, r.body)
	}
	reason := serve(t, eng, Options{RequireReason: true})
	if r := send(t, reason, "POST", "/import/import-x?mode=overwrite", importBody(1, good)); r.StatusCode != 400 {
		t.Errorf("no reason where one is required: %s %s", r.Status, r.body)
	}
}

func slicesRepeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// The export's own refusals, cluster mode, and a closed runtime.
func TestExportImportRefusals(t *testing.T) {
	eng := startEngine(t, engineConfig{})
	api := serve(t, eng, Options{})
	for _, c := range []struct {
		method, target string
		status         int
	}{
		{"GET", "/export/x/y?limit=0", 400},
		{"GET", "/export/x/y?limit=10001", 400},
		{"GET", "/export/x/y?after=nope", 400},
		{"GET", "/export/x/y?after=" + formatExportCursor(exportCursor{ID: "a", State: "b"}), 200},
		{"GET", "/export/x/y?state=%FF", 400},
		{"GET", "/export/x", 404},
		{"GET", "/export/x/y/z", 404},
		{"HEAD", "/export/x/y", 200},
		{"PUT", "/export/x/y", 405},
		{"GET", "/import/import-x", 405},
	} {
		if r := send(t, api, c.method, c.target, nil); r.StatusCode != c.status {
			t.Errorf("%s %s: %s, want %d\n%s", c.method, c.target, r.Status, c.status, r.body)
		}
	}
	// Cluster mode, no node answering: a 503 naming the partitions, never
	// a short page or a batch taken in part.
	fc := &fakeCluster{}
	cl := serve(t, eng, Options{Cluster: fc})
	if r := send(t, cl, "GET", "/export/x/y", nil); r.StatusCode != 503 || r.Header.Get(MissingHeader) != "0,1,2,3" || r.Header.Get("Retry-After") == "" {
		t.Errorf("GET /export in cluster mode, no node answering: %s %v %s; want 503 naming partitions 0-3", r.Status, r.Header, r.body)
	}
	if r := send(t, cl, "HEAD", "/export/x/y", nil); r.StatusCode != 200 {
		t.Errorf("HEAD /export in cluster mode: %s", r.Status)
	}
	one := `{"address":{"namespace":"x","type":"y","id":"g"},"state":"s","typename":"x/T","value":1}`
	p := partitionOf(eng, address.Address{Type: address.TypeName{Namespace: "x", Name: "y"}, ID: "g"})
	if r := send(t, cl, "POST", "/import/import-x?mode=overwrite", importBody(1, one)); r.StatusCode != 503 || r.Header.Get(MissingHeader) != fmt.Sprint(p) ||
		!slices.Equal(fc.spread, []string{fmt.Sprintf("POST /import/import-x %d", p)}) {
		t.Errorf("POST /import in cluster mode, no owner answering: %s %s, spread %v; want 503 naming partition %d", r.Status, r.body, fc.spread, p)
	}
	if r := send(t, cl, "POST", "/import/import-x?mode=overwrite", importBody(1, `{"address":1}`)); r.StatusCode != 400 || len(fc.spread) != 1 {
		t.Errorf("a bad batch in cluster mode: %s, spread %v; want 400, validated before it is sent on", r.Status, fc.spread)
	}
	eng.Close()
	line := `{"address":{"namespace":"x","type":"y","id":"g"},"state":"s","typename":"x/T","value":1}`
	for _, c := range []struct {
		method, target string
		body           []byte
	}{{"GET", "/export/x/y", nil}, {"POST", "/import/import-closed?mode=overwrite", importBody(1, line, line)}} {
		r := send(t, api, c.method, c.target, c.body)
		if r.StatusCode != 503 || r.Header.Get("Retry-After") == "" {
			t.Errorf("%s %s after Close: %s %s", c.method, c.target, r.Status, r.body)
		}
	}
}

// An export sees each entry that holds a value throughout exactly once
// while the entries around it are written.
func TestExportWhileWriting(t *testing.T) {
	api := serve(t, startEngine(t, engineConfig{}), Options{})
	var ids []string
	for i := range 200 {
		id := fmt.Sprintf("k%03d", i)
		ids = append(ids, id)
		mustPut(t, api, "/state/x/y/"+id+"/s", "application/octet-stream", "v", "Statefun-Type", "x/T")
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			// Rewrite the stable entries, and create and delete others
			// between them.
			id := ids[n%len(ids)]
			send(t, api, "PUT", "/state/x/y/"+id+"/s", []byte(fmt.Sprint(n)), "Statefun-Type", "x/T")
			send(t, api, "PUT", "/state/x/y/"+id+"-tmp/s", []byte("t"), "Statefun-Type", "x/T")
			send(t, api, "DELETE", "/state/x/y/"+ids[(n+7)%len(ids)]+"-tmp/s", nil)
		}
	}()
	time.Sleep(20 * time.Millisecond)
	lines := exportAll(t, api, "x/y", 7, "")
	close(stop)
	<-done
	seen := map[string]int{}
	for _, l := range lines {
		var e ExportLine
		json.Unmarshal([]byte(l), &e)
		seen[e.Address.ID]++
	}
	for _, id := range ids {
		if seen[id] != 1 {
			t.Errorf("%s exported %d times", id, seen[id])
		}
	}
}

func versionOf(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

// exportNodes is a Cluster whose nodes answer an export page with the
// pages given.
type exportNodes struct {
	fakeCluster
	pages []string
}

func (c *exportNodes) Gather(r *http.Request, _ time.Duration, _ func(forward.Answer) bool) ([]forward.Answer, []int) {
	var out []forward.Answer
	for i, p := range c.pages {
		out = append(out, forward.Answer{Node: fmt.Sprintf("n%d", i), Status: 200, Body: []byte(p)})
	}
	return out, nil
}

// TestExportGathered: in cluster mode an export page merges every node's
// page in (id, state) order, and ends where the earliest node's page
// ended early (its byte bound): the entries after it may still be on that
// node, and the next page must not skip them.
func TestExportGathered(t *testing.T) {
	eng := startWithFunction(t, engineConfig{})
	line := func(id, state string) string {
		return fmt.Sprintf(`{"address":{"namespace":"x","type":"y","id":%q},"state":%q,"typename":"io.statefun.types/long","version":"1","value":1}`, id, state)
	}
	page := func(next *exportCursor, lines ...string) string {
		n := "null"
		if next != nil {
			n = strconv.Quote(formatExportCursor(*next))
		}
		return `{"namespace":"x","type":"y","entries":[` + strings.Join(lines, ",") + `],"next":` + n + `}`
	}
	nodes := &exportNodes{pages: []string{
		// n0 ended its page early, after b/s: c/s may follow on it.
		page(&exportCursor{ID: "b", State: "s"}, line("a", "s"), line("b", "s")),
		page(nil, line("a", "t"), line("b", "t"), line("d", "s")),
	}}
	api := serve(t, eng, Options{Cluster: nodes})
	var got struct {
		Entries []ExportLine `json:"entries"`
		Next    *string      `json:"next"`
	}
	send(t, api, "GET", "/export/x/y", nil).json(t, &got)
	var keys []string
	for _, l := range got.Entries {
		keys = append(keys, l.Address.ID+"/"+l.State)
	}
	if strings.Join(keys, " ") != "a/s a/t b/s" || got.Next == nil || *got.Next != formatExportCursor(exportCursor{ID: "b", State: "s"}) {
		t.Fatalf("merged page %v, next %v; want a/s a/t b/s, next after b/s (b/t and d/s come on the next page)", keys, got.Next)
	}
	// A page bounded by ?limit= ends at its last entry.
	nodes.pages = []string{page(nil, line("a", "s"), line("c", "s")), page(nil, line("b", "s"))}
	send(t, api, "GET", "/export/x/y?limit=2", nil).json(t, &got)
	if len(got.Entries) != 2 || got.Entries[1].Address.ID != "b" || got.Next == nil || *got.Next != formatExportCursor(exportCursor{ID: "b", State: "s"}) {
		t.Fatalf("a page of 2: %+v, next %v", got.Entries, got.Next)
	}
}
