package stateapi

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/statefun-go/statefun/internal/partition"
)

// This file reads the conditional request headers If-Match and
// If-None-Match as RFC 9110 §13 defines them. The API evaluates nothing
// here for a mutation: it turns each header into a partition.Condition that
// the partition core evaluates at the mutation's turn in its mailbox, so a
// condition holds against the entry the mutation changes, not against the
// one a read saw before an invocation ran.

// entityTag is one entity tag of a list: its opaque part without the
// quotes, and whether it was weak (W/"...").
type entityTag struct {
	weak   bool
	opaque string
}

// tagList is a parsed If-Match or If-None-Match field: "*" or a list of
// entity tags (possibly empty: RFC 9110 §5.6.1 lets a list have no
// elements).
type tagList struct {
	any  bool
	tags []entityTag
}

// conditionHeaders are the conditional headers the API reads.
var conditionHeaders = []string{"If-Match", "If-None-Match"}

// hasCondition reports whether r carries If-Match or If-None-Match, and
// names the first it finds. A header with an empty value counts: it is a
// list of no entity tags.
func hasCondition(r *http.Request) (string, bool) {
	for _, name := range conditionHeaders {
		if _, ok := r.Header[name]; ok {
			return name, true
		}
	}
	return "", false
}

// parseTagList reads the field name of r; nil when it is absent. Several
// field lines are one comma-separated list (RFC 9110 §5.3). The error
// names the header and says what is wrong where.
func parseTagList(r *http.Request, name string) (*tagList, error) {
	lines, ok := r.Header[name]
	if !ok {
		return nil, nil
	}
	v := strings.Join(lines, ", ")
	l := &tagList{}
	for i := 0; ; {
		// Skip OWS and empty list elements.
		for i < len(v) && (v[i] == ' ' || v[i] == '\t' || v[i] == ',') {
			i++
		}
		if i == len(v) {
			break
		}
		if v[i] == '*' {
			if l.any || len(l.tags) > 0 {
				return nil, fmt.Errorf("%s: * must stand alone, not in a list (%q)", name, v)
			}
			l.any = true
			i++
		} else {
			if l.any {
				return nil, fmt.Errorf("%s: * must stand alone, not in a list (%q)", name, v)
			}
			t, n, err := parseEntityTag(v[i:])
			if err != nil {
				return nil, fmt.Errorf("%s: at byte %d of %q: %v; want * or entity tags like \"42\" or W/\"42\", separated by commas", name, i, v, err)
			}
			l.tags = append(l.tags, t)
			i += n
		}
		for i < len(v) && (v[i] == ' ' || v[i] == '\t') {
			i++
		}
		if i < len(v) && v[i] != ',' {
			return nil, fmt.Errorf("%s: at byte %d of %q: want a comma after an element", name, i, v)
		}
	}
	return l, nil
}

// parseEntityTag reads one entity-tag = [ W/ ] DQUOTE *etagc DQUOTE at
// the start of s and returns how many bytes it took. etagc is %x21,
// %x23-7E or obs-text (%x80-FF); the weak prefix is case-sensitive.
func parseEntityTag(s string) (entityTag, int, error) {
	var t entityTag
	i := 0
	if strings.HasPrefix(s, "W/") {
		t.weak, i = true, 2
	}
	if i >= len(s) || s[i] != '"' {
		return t, 0, fmt.Errorf("an entity tag starts with a double quote (or W/ and one)")
	}
	for j := i + 1; j < len(s); j++ {
		switch c := s[j]; {
		case c == '"':
			t.opaque = s[i+1 : j]
			return t, j + 1, nil
		case c == 0x21 || (c >= 0x23 && c <= 0x7e) || c >= 0x80:
		default:
			return t, 0, fmt.Errorf("byte %#02x is not allowed in an entity tag", c)
		}
	}
	return t, 0, fmt.Errorf("the entity tag has no closing double quote")
}

// version returns the entry version an entity tag names when the API
// could have issued it (etag): the canonical decimal form of a version
// above 0. Any other tag is well formed but not ours, and matches nothing.
func (t entityTag) version() (uint64, bool) {
	v, err := strconv.ParseUint(t.opaque, 10, 64)
	if err != nil || v == 0 || strconv.FormatUint(v, 10) != t.opaque {
		return 0, false
	}
	return v, true
}

// condition is the list as the core evaluates it. If-Match compares
// strongly (RFC 9110 §8.8.3.2): a weak tag never matches, since every
// ETag the API sends is strong. If-None-Match compares weakly: W/"42"
// matches the version 42.
func (l *tagList) condition(strong bool) *partition.Condition {
	if l == nil {
		return nil
	}
	c := &partition.Condition{Any: l.any}
	for _, t := range l.tags {
		if t.weak && strong {
			continue
		}
		if v, ok := t.version(); ok {
			c.Versions = append(c.Versions, v)
		}
	}
	return c
}

// conditions reads If-Match and If-None-Match of r into the conditions
// the core evaluates; either is nil when its header is absent.
func conditions(r *http.Request) (ifMatch, ifNoneMatch *partition.Condition, err error) {
	im, err := parseTagList(r, "If-Match")
	if err != nil {
		return nil, nil, err
	}
	inm, err := parseTagList(r, "If-None-Match")
	if err != nil {
		return nil, nil, err
	}
	return im.condition(true), inm.condition(false), nil
}
