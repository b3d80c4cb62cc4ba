package stateapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/statefun-go/statefun/internal/jobs"
)

// This file checks openapi.json against the real handlers: the document is
// well formed, documents every route the server registers and every method
// it allows, and every answer the tests of this package get (send calls
// observe) has a status, content type, required headers and a JSON body
// that the document describes for its operation.

// oaOp is one operation of the document.
type oaOp struct {
	key      string // "GET /state/{namespace}"
	method   string // "GET"
	template string // "/state/{namespace}"
	segs     []string
	node     map[string]any
}

type oaSpec struct {
	raw map[string]any
	ops []*oaOp
}

var oaMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

var (
	specOnce sync.Once
	specVal  *oaSpec
	specErr  error
)

// theSpec is the parsed embedded openapi.json.
func theSpec(t testing.TB) *oaSpec {
	t.Helper()
	specOnce.Do(func() { specVal, specErr = parseSpec(openapiJSON) })
	if specErr != nil {
		t.Fatalf("openapi.json: %v", specErr)
	}
	return specVal
}

func decodeJSON(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if d.More() {
		return nil, fmt.Errorf("trailing data after the JSON value")
	}
	return v, nil
}

func parseSpec(b []byte) (*oaSpec, error) {
	v, err := decodeJSON(b)
	if err != nil {
		return nil, err
	}
	raw, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("not a JSON object")
	}
	s := &oaSpec{raw: raw}
	paths, _ := raw["paths"].(map[string]any)
	for tmpl, item := range paths {
		item, _ := item.(map[string]any)
		for _, m := range oaMethods {
			node, ok := item[m].(map[string]any)
			if !ok {
				continue
			}
			s.ops = append(s.ops, &oaOp{key: strings.ToUpper(m) + " " + tmpl, method: strings.ToUpper(m),
				template: tmpl, segs: strings.Split(tmpl, "/"), node: node})
		}
	}
	sort.Slice(s.ops, func(i, j int) bool { return s.ops[i].key < s.ops[j].key })
	return s, nil
}

// resolve follows $ref (local references only).
func (s *oaSpec) resolve(v any) map[string]any {
	for range 32 {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		ref, ok := m["$ref"].(string)
		if !ok {
			return m
		}
		v = s.pointer(ref)
	}
	return nil
}

// pointer returns the node a local JSON pointer names, or nil.
func (s *oaSpec) pointer(ref string) any {
	p, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return nil
	}
	var v any = s.raw
	for _, k := range strings.Split(p, "/") {
		k = strings.NewReplacer("~1", "/", "~0", "~").Replace(k)
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		if v, ok = m[k]; !ok {
			return nil
		}
	}
	return v
}

// find returns the operation that serves method on an escaped path.
func (s *oaSpec) find(method, escapedPath string) (*oaOp, bool) {
	segs := strings.Split(escapedPath, "/")
	for _, op := range s.ops {
		if op.method != method || len(op.segs) != len(segs) {
			continue
		}
		match := true
		for i, ts := range op.segs {
			if strings.HasPrefix(ts, "{") {
				match = match && segs[i] != ""
			} else {
				match = match && ts == segs[i]
			}
		}
		if match {
			return op, true
		}
	}
	return nil, false
}

// responseFor returns the documented response of op for a status.
func (s *oaSpec) responseFor(op *oaOp, status int) (map[string]any, bool) {
	rs, _ := op.node["responses"].(map[string]any)
	r, ok := rs[strconv.Itoa(status)]
	if !ok {
		return nil, false
	}
	return s.resolve(r), true
}

// conform checks one answer against the operation's documented responses.
func (s *oaSpec) conform(t testing.TB, op *oaOp, what string, r *response) {
	t.Helper()
	doc, ok := s.responseFor(op, r.StatusCode)
	if !ok {
		t.Errorf("%s: status %d is not documented for %s\n%s", what, r.StatusCode, op.key, r.body)
		return
	}
	ct := r.Header.Get("Content-Type")
	if r.StatusCode >= 400 && ct != "application/problem+json" {
		t.Errorf("%s: %d with Content-Type %q, want application/problem+json", what, r.StatusCode, ct)
	}
	for name, h := range mapOf(doc["headers"]) {
		h := s.resolve(h)
		got := r.Header.Get(name)
		if got == "" {
			if h["required"] == true {
				t.Errorf("%s: %d lacks the documented header %s", what, r.StatusCode, name)
			}
			continue
		}
		for _, e := range s.validate(h["schema"], headerValue(h["schema"], s, got), name) {
			t.Errorf("%s: header %s: %s", what, name, e)
		}
	}
	content := mapOf(doc["content"])
	if len(content) == 0 {
		return
	}
	media, _, err := mime.ParseMediaType(ct)
	if err != nil {
		t.Errorf("%s: Content-Type %q: %v", what, ct, err)
		return
	}
	mt, ok := content[media].(map[string]any)
	if !ok {
		t.Errorf("%s: %d with Content-Type %s, documented: %v", what, r.StatusCode, media, keys(content))
		return
	}
	if op.method == "HEAD" || (media != "application/json" && !strings.HasSuffix(media, "+json")) {
		return
	}
	v, err := decodeJSON(r.body)
	if err != nil {
		t.Errorf("%s: the %s body is not JSON: %v\n%s", what, media, err, r.body)
		return
	}
	for _, e := range s.validate(mt["schema"], v, "body") {
		t.Errorf("%s: %d body does not match the schema: %s\n%s", what, r.StatusCode, e, r.body)
	}
}

// headerValue turns a header's text into the JSON value its schema types.
func headerValue(schema any, s *oaSpec, text string) any {
	if m := s.resolve(schema); m != nil && m["type"] == "integer" {
		if _, err := strconv.ParseInt(text, 10, 64); err == nil {
			return json.Number(text)
		}
	}
	return text
}

func mapOf(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// validate checks a JSON value (decoded with UseNumber) against the subset
// of JSON Schema 2020-12 that openapi.json uses: $ref, type, enum, const,
// properties, required, items, oneOf, anyOf, pattern, format date-time,
// minLength, minimum and maximum. A property that an object schema does
// not list is an error too: the document must name every field.
func (s *oaSpec) validate(schema, v any, at string) []string {
	if schema == nil || schema == true {
		return nil
	}
	m := s.resolve(schema)
	if m == nil {
		return []string{at + ": unresolvable schema"}
	}
	var errs []string
	errf := func(format string, args ...any) { errs = append(errs, at+": "+fmt.Sprintf(format, args...)) }
	if t, ok := m["type"]; ok {
		var allowed []string
		switch t := t.(type) {
		case string:
			allowed = []string{t}
		case []any:
			for _, x := range t {
				allowed = append(allowed, x.(string))
			}
		}
		if !slices.ContainsFunc(allowed, func(t string) bool { return isType(v, t) }) {
			return append(errs, at+": "+fmt.Sprintf("%s is not of type %v", short(v), allowed))
		}
	}
	if e, ok := m["enum"].([]any); ok && !slices.ContainsFunc(e, func(x any) bool { return fmt.Sprint(x) == fmt.Sprint(v) }) {
		errf("%s is not one of %v", short(v), e)
	}
	if c, ok := m["const"]; ok && fmt.Sprint(c) != fmt.Sprint(v) {
		errf("%s is not %v", short(v), c)
	}
	switch v := v.(type) {
	case string:
		if p, ok := m["pattern"].(string); ok && !regexp.MustCompile(p).MatchString(v) {
			errf("%q does not match %s", v, p)
		}
		if m["format"] == "date-time" {
			if _, err := time.Parse(time.RFC3339Nano, v); err != nil {
				errf("%q is not an RFC 3339 date-time", v)
			}
		}
		if n, ok := m["minLength"].(json.Number); ok {
			if min, _ := n.Int64(); int64(len([]rune(v))) < min {
				errf("%q is shorter than %d", v, min)
			}
		}
	case json.Number:
		f, _ := v.Float64()
		if n, ok := m["minimum"].(json.Number); ok {
			if min, _ := n.Float64(); f < min {
				errf("%s is below %s", v, n)
			}
		}
		if n, ok := m["maximum"].(json.Number); ok {
			if max, _ := n.Float64(); f > max {
				errf("%s is above %s", v, n)
			}
		}
	case map[string]any:
		props := mapOf(m["properties"])
		for _, r := range asList(m["required"]) {
			if _, ok := v[r]; !ok {
				errf("lacks the required property %q", r)
			}
		}
		for k, pv := range v {
			ps, ok := props[k]
			if !ok {
				if props != nil {
					errf("has the undocumented property %q", k)
				}
				continue
			}
			errs = append(errs, s.validate(ps, pv, at+"."+k)...)
		}
	case []any:
		if items, ok := m["items"]; ok {
			for i, x := range v {
				errs = append(errs, s.validate(items, x, fmt.Sprintf("%s[%d]", at, i))...)
			}
		}
	}
	if alts, ok := m["oneOf"].([]any); ok {
		n := 0
		for _, a := range alts {
			if len(s.validate(a, v, at)) == 0 {
				n++
			}
		}
		if n != 1 {
			errf("matches %d of the oneOf alternatives, want 1", n)
		}
	}
	if alts, ok := m["anyOf"].([]any); ok && !slices.ContainsFunc(alts, func(a any) bool { return len(s.validate(a, v, at)) == 0 }) {
		errf("matches none of the anyOf alternatives")
	}
	return errs
}

func isType(v any, t string) bool {
	switch v := v.(type) {
	case nil:
		return t == "null"
	case bool:
		return t == "boolean"
	case string:
		return t == "string"
	case json.Number:
		return t == "number" || (t == "integer" && !strings.ContainsAny(string(v), ".eE"))
	case map[string]any:
		return t == "object"
	case []any:
		return t == "array"
	}
	return false
}

func asList(v any) []string {
	var out []string
	l, _ := v.([]any)
	for _, x := range l {
		out = append(out, x.(string))
	}
	return out
}

func short(v any) string {
	b, _ := json.Marshal(v)
	if len(b) > 80 {
		return string(b[:80]) + "…"
	}
	return string(b)
}

// TestOpenAPIDocument checks the document on its own: version, references,
// path parameters, operation ids and security, and that every route the
// server registers is documented.
func TestOpenAPIDocument(t *testing.T) {
	s := theSpec(t)
	if s.raw["openapi"] != "3.1.0" {
		t.Errorf("openapi is %v, want 3.1.0", s.raw["openapi"])
	}
	var walk func(v any, at string)
	walk = func(v any, at string) {
		switch v := v.(type) {
		case map[string]any:
			if ref, ok := v["$ref"].(string); ok && s.pointer(ref) == nil {
				t.Errorf("%s: $ref %s resolves to nothing", at, ref)
			}
			for k, x := range v {
				walk(x, at+"/"+k)
			}
		case []any:
			for i, x := range v {
				walk(x, fmt.Sprintf("%s/%d", at, i))
			}
		}
	}
	walk(s.raw, "#")

	ids := map[string]string{}
	paths := mapOf(s.raw["paths"])
	for _, op := range s.ops {
		id, _ := op.node["operationId"].(string)
		if id == "" {
			t.Errorf("%s has no operationId", op.key)
		} else if other, dup := ids[id]; dup {
			t.Errorf("%s and %s share the operationId %s", op.key, other, id)
		}
		ids[id] = op.key
		if _, ok := op.node["security"].([]any); !ok {
			t.Errorf("%s does not state its security", op.key)
		}
		if len(mapOf(op.node["responses"])) == 0 {
			t.Errorf("%s documents no response", op.key)
		}
		// Path parameters: declared exactly once per template variable.
		declared := map[string]bool{}
		params := append(asAnyList(mapOf(paths[op.template])["parameters"]), asAnyList(op.node["parameters"])...)
		for _, p := range params {
			p := s.resolve(p)
			if p["in"] == "path" {
				declared[p["name"].(string)] = true
				if p["required"] != true {
					t.Errorf("%s: path parameter %s is not required", op.key, p["name"])
				}
			}
		}
		for _, seg := range op.segs {
			if name, ok := strings.CutPrefix(seg, "{"); ok {
				name = strings.TrimSuffix(name, "}")
				if !declared[name] {
					t.Errorf("%s: path parameter %s is not declared", op.key, name)
				}
				delete(declared, name)
			}
		}
		for name := range declared {
			t.Errorf("%s declares the path parameter %s, which its path lacks", op.key, name)
		}
	}

	// Every route the server registers is documented: the path itself, or
	// (for a route that covers a subtree) paths below it.
	for _, rt := range routes {
		documented := false
		for tmpl := range paths {
			below := strings.TrimSuffix(rt.path, "/") + "/"
			documented = documented || tmpl == rt.path || strings.HasPrefix(tmpl, below)
		}
		if !documented {
			t.Errorf("the route %s is registered but not documented", rt.path)
		}
	}
	// And every documented path is served by a registered route.
	for tmpl := range paths {
		served := slices.ContainsFunc(routes, func(rt route) bool {
			return tmpl == rt.path || (strings.HasSuffix(rt.path, "/") && strings.HasPrefix(tmpl, rt.path))
		})
		if !served {
			t.Errorf("%s is documented but no route serves it", tmpl)
		}
	}
}

func asAnyList(v any) []any {
	l, _ := v.([]any)
	return l
}

// TestOpenAPIOperations makes a real request for every documented
// operation, with test data in place, and checks that the handler serves
// it successfully and as documented; that the methods each path documents
// are the ones its 405 allows; and that /openapi.json serves this document.
func TestOpenAPIOperations(t *testing.T) {
	s := theSpec(t)
	eng := startWithFunction(t, engineConfig{})
	// A view of a cluster of one node, so that GET /cluster answers as
	// in cluster mode (its schema is checked against it).
	api := serve(t, eng, Options{Backup: backupTo(eng), ClusterView: func(context.Context) ClusterView {
		return ClusterView{App: "app", Partitions: 2, GroupState: "Stable", Owners: map[int]string{0: "a"},
			Self: ClusterNode{Node: "a", AdminURL: "http://a:8070", Ready: true, Member: "a-1", Generation: 3,
				Serving: []int{0}, Lag: map[int]int64{0: 5}, LastCommit: time.Now(), Commits: 7},
			Members: []ClusterMember{{Node: "a", AdminURL: "http://a:8070", StartedAt: time.Now()}, {Node: "b", AdminURL: "http://b:8070", StartedAt: time.Now()}}}
	}, Jobs: newJobs(t, eng)})

	mustPut(t, api, "/state/test/fn/ops/i32", "text/plain", "42")
	mustPut(t, api, "/state/test/fn/ops/str", "text/plain", "hello")
	mustPut(t, api, "/state/test/fn/ops-del/str", "text/plain", "x")
	mustPut(t, api, "/state/test/fn/ops-rev/i32", "text/plain", "1")
	rev := mustPut(t, api, "/state/test/fn/ops-rev/i32", "text/plain", "2")
	seen := mustPut(t, api, "/state/test/fn/ops/b", "text/plain", "true")
	for _, target := range []string{"/pause/test/fn/ops-r", "/pause/test/t3"} {
		if r := send(t, api, "POST", target, nil); r.StatusCode != 200 {
			t.Fatalf("POST %s: %s %s", target, r.Status, r.body)
		}
	}
	first := mustPut(t, api, "/state/test/fn/ops-hist/str", "text/plain", "one")
	mustPut(t, api, "/state/test/fn/ops-hist/str", "text/plain", "two")

	// The repairs of an inbox: ops-s and ops-s2 are paused with messages
	// queued; two of ops-s2's are skipped (dead letters to read and to
	// re-send); ops-d is paused with state.
	for _, target := range []string{"/pause/test/fn/ops-s", "/pause/test/fn/ops-s2", "/pause/test/fn/ops-d"} {
		if r := send(t, api, "POST", target, nil); r.StatusCode != 200 {
			t.Fatalf("POST %s: %s %s", target, r.Status, r.body)
		}
	}
	mustPut(t, api, "/state/test/fn/ops-d/str", "text/plain", "x")
	for range 3 {
		ingest(t, eng, "ops-s")
		ingest(t, eng, "ops-s2")
	}
	var deadLetters []string
	for range 2 {
		r := send(t, api, "POST", "/inbox/test/fn/ops-s2/skip", nil)
		var rc repairReceiptJSON
		r.json(t, &rc)
		if r.StatusCode != 200 || rc.DeadLetter == "" {
			t.Fatalf("skip: %s %s", r.Status, r.body)
		}
		deadLetters = append(deadLetters, rc.DeadLetter)
	}
	var inbox inboxJSON
	send(t, api, "GET", "/inbox/test/fn/ops-s", nil).json(t, &inbox)
	if len(inbox.Queued.Messages) != 3 {
		t.Fatalf("inbox of ops-s: %+v", inbox)
	}
	lastKey := inbox.Queued.Messages[2].Key

	// Jobs: one ended (to read, revert and forget), two running slowly
	// (to pause and to cancel), one paused (to resume); and an orphan.
	for i := range 3 {
		mustPut(t, api, fmt.Sprintf("/state/test/fn/ops-job-%d/i32", i), "text/plain", "1")
	}
	mustPut(t, api, "/state/test/gone/x/str", "text/plain", "old", "Statefun-Type", "io.statefun.types/string")
	const jobSpec = `{"select":{"type":"test/fn","idPrefix":"ops-job-","state":"i32","where":"value > 0"},"action":{"op":"set","expr":"value + 1"}}`
	const slowSpec = `{"select":{"type":"test/fn","idPrefix":"ops-job-"},"action":{"op":"set","expr":"value + 1"},"rate":0.01}`
	ended := startJob(t, api, jobSpec)
	awaitJob(t, api, ended, func(j jobs.Record) bool { return j.Status == jobs.StatusDone })
	forget := startJob(t, api, jobSpec)
	awaitJob(t, api, forget, func(j jobs.Record) bool { return j.Status == jobs.StatusDone })
	toPause, toCancel, toResume := startJob(t, api, slowSpec), startJob(t, api, slowSpec), startJob(t, api, slowSpec)
	if r := send(t, api, "POST", "/jobs/"+toResume+"/pause", nil); r.StatusCode != 200 {
		t.Fatalf("pause: %s %s", r.Status, r.body)
	}

	type req struct {
		method, target, contentType, body string
	}
	examples := map[string]req{
		"listNamespaces":             {"GET", "/state", "", ""},
		"headListNamespaces":         {"HEAD", "/state", "", ""},
		"listTypes":                  {"GET", "/state/test", "", ""},
		"headListTypes":              {"HEAD", "/state/test", "", ""},
		"listIds":                    {"GET", "/state/test/fn?prefix=ops&limit=2", "", ""},
		"headListIds":                {"HEAD", "/state/test/fn", "", ""},
		"listEntries":                {"GET", "/state/test/fn/ops", "", ""},
		"headListEntries":            {"HEAD", "/state/test/fn/ops", "", ""},
		"deleteAddress":              {"DELETE", "/state/test/fn/ops-del", "", ""},
		"getEntry":                   {"GET", "/state/test/fn/ops/i32", "", ""},
		"headGetEntry":               {"HEAD", "/state/test/fn/ops/i32", "", ""},
		"putEntry":                   {"PUT", "/state/test/fn/ops/i32", "text/plain", "43"},
		"deleteEntry":                {"DELETE", "/state/test/fn/ops/str", "", ""},
		"getMutation":                {"GET", "/mutations/" + seen.Mutation + "?wait=1s", "", ""},
		"headGetMutation":            {"HEAD", "/mutations/" + seen.Mutation, "", ""},
		"revertMutation":             {"POST", "/mutations/" + rev.Mutation + "/revert", "", ""},
		"getAudit":                   {"GET", "/audit?namespace=test&type=fn&id=ops&limit=10", "", ""},
		"headGetAudit":               {"HEAD", "/audit", "", ""},
		"getOpenAPI":                 {"GET", "/openapi.json", "", ""},
		"headOpenAPI":                {"HEAD", "/openapi.json", "", ""},
		"getDeadLetterSummary":       {"GET", "/ingresses", "", ""},
		"headDeadLetterSummary":      {"HEAD", "/ingresses", "", ""},
		"listDeadLetters":            {"GET", "/ingresses/test/in/dead-letters?topic=t&limit=10", "", ""},
		"headListDeadLetters":        {"HEAD", "/ingresses/test/in/dead-letters", "", ""},
		"listFailing":                {"GET", "/failing?type=test/fn&limit=10", "", ""},
		"headListFailing":            {"HEAD", "/failing", "", ""},
		"listPauses":                 {"GET", "/pauses", "", ""},
		"headListPauses":             {"HEAD", "/pauses?type=test/fn", "", ""},
		"getInbox":                   {"GET", "/inbox/test/fn/ops-r?limit=5", "", ""},
		"headGetInbox":               {"HEAD", "/inbox/test/fn/ops-r", "", ""},
		"pauseAddress":               {"POST", "/pause/test/fn/ops-p", "application/json", `{"reason":"look","expiresIn":"1h"}`},
		"pauseType":                  {"POST", "/pause/test/t2", "application/json", `{"reason":"deploy"}`},
		"resumeAddress":              {"POST", "/resume/test/fn/ops-r", "", ""},
		"resumeType":                 {"POST", "/resume/test/t3", "application/json", `{"reason":"done"}`},
		"getHistory":                 {"GET", "/state/test/fn/ops-hist/str/history?limit=1", "", ""},
		"headGetHistory":             {"HEAD", "/state/test/fn/ops-hist/str/history", "", ""},
		"restoreEntry":               {"POST", "/state/test/fn/ops-hist/str?asOf=" + first.Commit, "", ""},
		"restoreAddress":             {"POST", "/state/test/fn/ops-hist?asOf=" + first.Commit, "", ""},
		"skipMessage":                {"POST", "/inbox/test/fn/ops-s/skip", "application/json", `{"reason":"poison"}`},
		"editMessage":                {"POST", "/inbox/test/fn/ops-s/edit", "application/json", `{"typename":"io.statefun.types/string","text":"pong"}`},
		"cancelMessage":              {"POST", "/inbox/test/fn/ops-s/cancel", "application/json", `{"key":"` + lastKey + `"}`},
		"deleteWholeAddress":         {"DELETE", "/addresses/test/fn/ops-d", "application/json", `{"reason":"gone"}`},
		"listMessageDeadLetters":     {"GET", "/dead-letters/messages?type=test/fn&limit=10", "", ""},
		"headListMessageDeadLetters": {"HEAD", "/dead-letters/messages", "", ""},
		"getMessageDeadLetter":       {"GET", "/dead-letters/messages/" + deadLetters[0], "", ""},
		"headGetMessageDeadLetter":   {"HEAD", "/dead-letters/messages/" + deadLetters[0], "", ""},
		"resendMessageDeadLetter":    {"POST", "/dead-letters/messages/" + deadLetters[1] + "/resend", "application/json", `{"target":{"namespace":"test","type":"fn","id":"ops-s"}}`},
		"whoami":                     {"GET", "/whoami", "", ""},
		"headWhoami":                 {"HEAD", "/whoami", "", ""},
		"getOverview":                {"GET", "/overview", "", ""},
		"getEndpoints":               {"GET", "/endpoints", "", ""},
		"getCluster":                 {"GET", "/cluster", "", ""},
		"headCluster":                {"HEAD", "/cluster", "", ""},
		"headEndpoints":              {"HEAD", "/endpoints", "", ""},
		"headGetOverview":            {"HEAD", "/overview", "", ""},
		"createBackup":               {"POST", "/backups", "application/json", `{"to":"/backup-ops"}`},
		"exportEntries":              {"GET", "/export/test/fn?prefix=ops&limit=2", "", ""},
		"headExportEntries":          {"HEAD", "/export/test/fn", "", ""},
		"importEntries": {"POST", "/import/import-ops?mode=overwrite", "application/json",
			`{"lines":[{"line":1,"entry":{"address":{"namespace":"test","type":"fn","id":"ops-imp"},"state":"str","typename":"io.statefun.types/string","value":"imported"}}]}`},
		"listJobs":          {"GET", "/jobs", "", ""},
		"headListJobs":      {"HEAD", "/jobs", "", ""},
		"createJob":         {"POST", "/jobs", "application/json", jobSpec},
		"previewJob":        {"POST", "/jobs/preview?sample=3", "application/json", jobSpec},
		"getJob":            {"GET", "/jobs/" + ended, "", ""},
		"headGetJob":        {"HEAD", "/jobs/" + ended, "", ""},
		"deleteJob":         {"DELETE", "/jobs/" + forget, "", ""},
		"pauseJob":          {"POST", "/jobs/" + toPause + "/pause", "", ""},
		"resumeJob":         {"POST", "/jobs/" + toResume + "/resume", "", ""},
		"cancelJob":         {"POST", "/jobs/" + toCancel + "/cancel", "", ""},
		"revertJob":         {"POST", "/jobs/" + ended + "/revert", "", ""},
		"listJobWrites":     {"GET", "/jobs/" + ended + "/writes?limit=2", "", ""},
		"headListJobWrites": {"HEAD", "/jobs/" + ended + "/writes", "", ""},
		"listOrphans":       {"GET", "/orphans", "", ""},
		"headListOrphans":   {"HEAD", "/orphans", "", ""},
	}
	for _, op := range s.ops {
		id := op.node["operationId"].(string)
		ex, ok := examples[id]
		if !ok {
			t.Errorf("%s (%s) has no example request in this test", op.key, id)
			continue
		}
		delete(examples, id)
		path, _, _ := strings.Cut(ex.target, "?")
		if got, ok := s.find(ex.method, path); !ok || got != op {
			t.Errorf("the example of %s, %s %s, is not that operation", op.key, ex.method, ex.target)
			continue
		}
		var hdr []string
		if ex.contentType != "" {
			hdr = []string{"Content-Type", ex.contentType}
		}
		r := send(t, api, ex.method, ex.target, []byte(ex.body), hdr...)
		if r.StatusCode < 200 || r.StatusCode > 299 {
			t.Errorf("%s (%s %s): %s %s", op.key, ex.method, ex.target, r.Status, r.body)
		}
	}
	for id := range examples {
		t.Errorf("example %s names no documented operation", id)
	}

	// The methods a path documents are the ones its 405 allows.
	for tmpl, item := range mapOf(s.raw["paths"]) {
		target := strings.NewReplacer("{namespace}", "test", "{type}", "fn", "{id}", "ops", "{state}", "i32",
			"{mutation}", seen.Mutation, "{name}", "in", "{import}", "import-ops", "{job}", ended).Replace(tmpl)
		r := send(t, api, "PATCH", target, nil)
		if r.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("PATCH %s: %s, want 405", target, r.Status)
			continue
		}
		var documented []string
		for _, m := range oaMethods {
			if _, ok := mapOf(item)[m]; ok {
				documented = append(documented, strings.ToUpper(m))
			}
		}
		allowed := strings.Split(r.Header.Get("Allow"), ", ")
		slices.Sort(documented)
		slices.Sort(allowed)
		if !slices.Equal(documented, allowed) {
			t.Errorf("%s documents %v, its 405 allows %v", tmpl, documented, allowed)
		}
	}

	r := send(t, api, "GET", "/openapi.json", nil)
	if !bytes.Equal(r.body, openapiJSON) || r.Header.Get("Content-Type") != "application/json" {
		t.Errorf("GET /openapi.json does not serve the embedded document (%s, %d bytes)", r.Header.Get("Content-Type"), len(r.body))
	}
}
