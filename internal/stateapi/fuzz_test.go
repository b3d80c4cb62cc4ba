package stateapi

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzSplitPath: the address parser never panics; what it accepts are
// non-empty, valid UTF-8 segments within the size limit; and escaping each
// segment and splitting again gives the same segments.
func FuzzSplitPath(f *testing.F) {
	for _, s := range []string{
		"/state", "/state/", "/state/ns/t/id/s", "/state/ns/t/a%2Fb/s", "/state/ns/t/100%25/s",
		"/state/ns/t/%F0%9F%98%80/s", "/state/ns//id", "/state/ns/t/", "/state/%ZZ", "/state/%FF",
		"/state/%", "/state/.", "/state/..", "/state/%2E", "/statex", "/state/a/b/c/d/e",
		"/state/" + strings.Repeat("x", MaxSegmentBytes+1), "/state/a+b/%20/%2B",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, escaped string) {
		segs, err := splitPath(escaped, "/state")
		if err != nil {
			if segs != nil {
				t.Errorf("%q: segments %q with the error %v", escaped, segs, err)
			}
			return
		}
		rest := strings.TrimPrefix(escaped, "/state")
		if want := strings.Count(rest, "/"); len(segs) != want && rest != "/" {
			t.Errorf("%q: %d segments, want one per '/' (%d)", escaped, len(segs), want)
		}
		for _, s := range segs {
			if s == "" || !utf8.ValidString(s) || len(s) > MaxSegmentBytes {
				t.Errorf("%q: accepted the segment %q", escaped, s)
			}
		}
		// Escaped again, the segments split back to themselves.
		var b strings.Builder
		b.WriteString("/state")
		for _, s := range segs {
			b.WriteString("/" + escapeSegment(s))
		}
		again, err := splitPath(b.String(), "/state")
		if err != nil || !slices.Equal(again, segs) {
			t.Errorf("%q → %q → %q: %q, %v", escaped, segs, b.String(), again, err)
		}
		// url.PathEscape alone round-trips every segment but "." and "..",
		// which it leaves as they are and which are refused as they are.
		for _, s := range segs {
			got, err := splitPath("/state/"+url.PathEscape(s), "/state")
			if s == "." || s == ".." {
				if err == nil {
					t.Errorf("the literal dot segment %q was accepted", s)
				}
				continue
			}
			if err != nil || len(got) != 1 || got[0] != s {
				t.Errorf("segment %q → %q: %q, %v", s, url.PathEscape(s), got, err)
			}
		}
	})
}

// fuzzStates are the states FuzzPutBody writes: registered ones of every
// kind, and two the function never registered.
var fuzzStates = []string{"i32", "str", "doc", "bin", "b", "f64", "ttl", "i64", "free", "other"}

// FuzzPutBody sends arbitrary bodies, content types and headers to PUT (of
// an arbitrary id) over HTTP against the real runtime and checks that the
// answer is never a 5xx (nor a panic, which would cut the connection), is
// documented, that a request answered 4xx left the entry as it was, and
// that no request stopped the engine.
func FuzzPutBody(f *testing.F) {
	eng := startWithFunction(f, engineConfig{})
	api := serve(f, eng, Options{MaxBodyBytes: 256})
	f.Add("fz", uint8(0), "text/plain", []byte("42"), "", "", "", "", "", "")
	f.Add("fz", uint8(0), "application/octet-stream", []byte("\x0d\x2a\x00\x00\x00"), "", "", "", "applied", "", "")
	f.Add("fz", uint8(1), "application/json", []byte(`{"value":"x"}`), "", "", "*", "", "", "")
	f.Add("fz", uint8(2), "application/json", []byte(`{"valueBase64":"e30K","value":{}}`), "", `"1"`, "", "", "", "")
	f.Add("fz", uint8(3), "text/plain; charset=utf-8", []byte("hi"), "test/Blob", "", "", "accepted", "", "")
	f.Add("fz", uint8(4), "", []byte("\x08\x01"), "io.statefun.types/bool", "", "", "", "respond-async", "")
	f.Add("fz", uint8(5), "application/json", []byte(`{"typename":"io.statefun.types/double","value":"NaN"}`), "", "", "", "", "", "")
	f.Add("fz", uint8(8), "text/plain", []byte(`{"a":1}`), "x/Y", "", "", "", "", "")
	f.Add("fz", uint8(9), "text/plain", []byte("x"), "", "W/\"3\"", "", "committed", "", "")
	f.Add("fz", uint8(0), "application/json", []byte(strings.Repeat("1", 300)), "", "", "", "", "", "")
	f.Add("fz", uint8(1), "text/plain", []byte("x"), "", "", "", "", "", "fix \xff")
	f.Add("fz", uint8(8), "", []byte("x"), "x/\xffT", "", "", "accepted", "", "")
	f.Add("a/b\x00 😀", uint8(0), "text/plain", []byte("1"), "", "", "", "", "", "")
	f.Add("fz", uint8(0), "text/plain", []byte("7"), "", `"1", "xyzzy", W/"2"`, "", "", "", "")
	f.Add("fz", uint8(0), "text/plain", []byte("7"), "", "*", `W/"1", "2"`, "", "", "")
	f.Add("fz", uint8(0), "text/plain", []byte("7"), "", `*, "1"`, "", "applied", "", "")
	f.Add("fz", uint8(0), "text/plain", []byte("7"), "", "", `"1" "2"`, "accepted", "", "")
	f.Add("fz", uint8(0), "text/plain", []byte("7"), "", `w/"1"`, `""`, "", "", "")
	f.Fuzz(func(t *testing.T, id string, stateIdx uint8, contentType string, body []byte, statefunType, ifMatch, ifNoneMatch, ack, prefer, reason string) {
		if id == "" || !utf8.ValidString(id) || len(id) > MaxSegmentBytes {
			id = "fz"
		}
		target := "/state/test/fn/" + escapeSegment(id) + "/" + fuzzStates[int(stateIdx)%len(fuzzStates)]
		before := send(t, api, "GET", target, nil, "Accept", "application/octet-stream")
		var hdr []string
		for _, h := range [][2]string{{"Content-Type", contentType}, {"Statefun-Type", statefunType},
			{"If-Match", ifMatch}, {"If-None-Match", ifNoneMatch}, {"Prefer", prefer}, {"Statefun-Reason", reason}} {
			if h[1] != "" && validHeaderValue(h[1]) {
				hdr = append(hdr, h[0], h[1])
			}
		}
		put := target
		if ack != "" {
			put += "?ack=" + url.QueryEscape(ack)
		}
		r := send(t, api, "PUT", put, body, hdr...)
		if err := eng.Err(); err != nil {
			t.Fatalf("PUT %s %q (%s) stopped the engine: %v", put, hdr, r.Status, err)
		}
		switch {
		case r.StatusCode >= 500:
			t.Fatalf("PUT %s %q: %s %s", put, hdr, r.Status, r.body)
		case r.StatusCode == 202:
			// Let the accepted mutation land before the next input reads.
			loc := r.Header.Get("Location")
			if w := send(t, api, "GET", loc+"?wait=10s", nil); w.StatusCode != 200 || strings.Contains(string(w.body), `"accepted"`) {
				t.Fatalf("GET %s?wait=10s: %s %s", loc, w.Status, w.body)
			}
		case r.StatusCode == 200:
			var rc receiptJSON
			r.json(t, &rc)
			after := send(t, api, "GET", target, nil, "Accept", "application/octet-stream")
			if rc.Version == nil || after.Header.Get("ETag") != etag(mustUint(t, *rc.Version)) {
				t.Errorf("PUT answered %s, the entry now has ETag %s", r.body, after.Header.Get("ETag"))
			}
			if ok, why := conditionsHeld(r.Request.Header, before); !ok {
				t.Errorf("PUT %q was applied though %s (the entry was %s, ETag %s)", hdr, why, before.Status, before.Header.Get("ETag"))
			}
		case r.StatusCode >= 400:
			after := send(t, api, "GET", target, nil, "Accept", "application/octet-stream")
			if after.StatusCode != before.StatusCode || string(after.body) != string(before.body) ||
				after.Header.Get("ETag") != before.Header.Get("ETag") || after.Header.Get("Statefun-Type") != before.Header.Get("Statefun-Type") {
				t.Errorf("PUT %s %q answered %s but the entry changed: %s %q %s → %s %q %s", put, hdr, r.Status,
					before.Status, before.body, before.Header.Get("ETag"), after.Status, after.body, after.Header.Get("ETag"))
			}
		default:
			t.Errorf("PUT %s: %s", put, r.Status)
		}
	})
}

// conditionsHeld is a model of RFC 9110 §13.1.1-2 for an applied PUT,
// written apart from the parser: it looks for the entry's ETag as text in
// the headers sent. It reports whether the headers could have held against
// the entry before the PUT (no mutation ran in between: the fuzz target is
// sequential), and why not.
func conditionsHeld(h http.Header, before *response) (bool, string) {
	exists := before.StatusCode == 200
	tag := before.Header.Get("ETag")
	if v, ok := h["If-Match"]; ok {
		im := strings.TrimSpace(strings.Join(v, ","))
		switch {
		case !exists:
			return false, "If-Match needs a value"
		case im == "*":
		case !strongIn(im, tag):
			return false, "If-Match does not list the ETag strongly"
		}
	}
	if v, ok := h["If-None-Match"]; ok && exists {
		inm := strings.TrimSpace(strings.Join(v, ","))
		if inm == "*" || strings.Contains(inm, tag) {
			return false, "If-None-Match matches the ETag"
		}
	}
	return true, ""
}

// strongIn reports whether list holds tag not directly after "W/".
func strongIn(list, tag string) bool {
	for i := 0; ; {
		j := strings.Index(list[i:], tag)
		if j < 0 {
			return false
		}
		if at := i + j; at < 2 || list[at-2:at] != "W/" {
			return true
		}
		i += j + 1
	}
}

// FuzzConditionHeader: the If-Match / If-None-Match parser never panics;
// what it accepts is * alone or entity tags of allowed bytes; written back
// as a list the tags parse to themselves; and the condition it hands the
// core holds only versions of tags the API could have issued (strong ones
// for If-Match).
func FuzzConditionHeader(f *testing.F) {
	for _, s := range []string{
		"*", `"1"`, `W/"1"`, `"1", "2"`, ` , "1" ,, W/"2",`, `""`, "", `*, "1"`, `"1" "2"`, `w/"1"`,
		`"a b"`, `"a"b"`, `"1`, "1", "* *", `"ÿ"`, `W/`, `"18446744073709551615"`, `"18446744073709551616"`, `"01"`, `"0"`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		r := &http.Request{Header: http.Header{"If-Match": {v}}}
		l, err := parseTagList(r, "If-Match")
		if err != nil {
			if l != nil || !strings.HasPrefix(err.Error(), "If-Match: ") {
				t.Fatalf("%q: %v with %+v", v, err, l)
			}
			return
		}
		if l.any && len(l.tags) > 0 {
			t.Fatalf("%q: * with tags %+v", v, l.tags)
		}
		var b strings.Builder
		for i, tg := range l.tags {
			for k := 0; k < len(tg.opaque); k++ {
				if c := tg.opaque[k]; c == '"' || c < 0x21 || c == 0x7f {
					t.Fatalf("%q: tag %q holds byte %#x", v, tg.opaque, c)
				}
			}
			if i > 0 {
				b.WriteString(", ")
			}
			if tg.weak {
				b.WriteString("W/")
			}
			b.WriteString(`"` + tg.opaque + `"`)
		}
		if !l.any {
			again, err := parseTagList(&http.Request{Header: http.Header{"If-Match": {b.String()}}}, "If-Match")
			if err != nil || !slices.Equal(again.tags, l.tags) {
				t.Fatalf("%q → %q → %+v, %v; want %+v", v, b.String(), again, err, l.tags)
			}
		}
		for _, strong := range []bool{true, false} {
			c := l.condition(strong)
			if c.Any != l.any {
				t.Fatalf("%q: Any %v", v, c.Any)
			}
			for _, ver := range c.Versions {
				found := false
				for _, tg := range l.tags {
					found = found || (tg.opaque == strconv.FormatUint(ver, 10) && ver != 0 && !(strong && tg.weak))
				}
				if !found {
					t.Fatalf("%q (strong %v): version %d is not a tag of the list", v, strong, ver)
				}
			}
		}
	})
}

// validHeaderValue reports whether Go's HTTP client will send v as a header
// value: no control characters but tab.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c != '\t' && (c < 0x20 || c == 0x7f) {
			return false
		}
	}
	return true
}
