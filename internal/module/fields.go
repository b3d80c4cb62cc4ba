package module

import (
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Unknown keys. StateFun ignores spec keys it does not know
// (FAIL_ON_UNKNOWN_PROPERTIES is off), so real module.yaml files may carry
// extra keys, and refusing every one of them would break files StateFun
// loads. But an ignored misspelling silently drops a setting: "functons"
// leaves the endpoint without functions, "timeout" leaves the default
// timeouts in place. So an unknown key that is a near miss of a key known
// at that place (see nearMiss) is refused with a suggestion, and any other
// unknown key is kept as a warning in Module.Warnings, for the caller to
// log.

// knownFields checks the keys of o against the keys known at its place.
// hints explains keys that are known elsewhere, to make their warning
// useful; it may be nil.
func (d *doc) knownFields(o object, known []string, hints map[string]string) {
	names := make([]string, 0, len(o.fields))
	for name := range o.fields {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if slices.Contains(known, name) {
			continue
		}
		f := o.fields[name]
		if f.key == nil || f.key.Line == 0 {
			continue
		}
		if want, ok := nearMiss(name, known); ok {
			o.typos[want] = f.key
			d.errorf(f.key, f.path, "unknown field %q; did you mean %q?", name, want)
			continue
		}
		msg := fmt.Sprintf("unknown field %q is ignored, as StateFun ignores it", name)
		if h, ok := hints[name]; ok {
			msg = fmt.Sprintf("field %q is ignored here: %s", name, h)
		}
		d.warn(f.key, f.path, msg)
	}
}

// warn records a warning at node n; the same warning twice (a key reached
// again through an alias or merge key) is kept once.
func (d *doc) warn(n *yaml.Node, path, msg string) {
	w := &Error{File: d.p.file, Document: d.num, Kind: d.kind, Field: path, Msg: msg, Line: n.Line, Column: n.Column}
	for _, prev := range d.p.warns {
		if prev.Line == w.Line && prev.Column == w.Column && prev.Msg == w.Msg {
			return
		}
	}
	d.p.warns = append(d.p.warns, w)
}

// nearMiss returns the known key that name most likely misspells: one that
// differs only in case, '_' or '-' ("url_path_template"), or within a small
// edit distance, counting a swap of two neighbours as one edit: none for
// keys of two letters, 1 for keys of three or four ("tpye"), 2 for longer
// ones ("functons", "urlPathTemplte", "timeout").
func nearMiss(name string, known []string) (string, bool) {
	norm := func(s string) string {
		return strings.NewReplacer("_", "", "-", "").Replace(strings.ToLower(s))
	}
	best, bestDist := "", -1
	for _, k := range known {
		if norm(k) == norm(name) {
			return k, true
		}
		limit := 2
		switch {
		case len(k) <= 2:
			limit = 0
		case len(k) <= 4:
			limit = 1
		}
		d := editDistance(strings.ToLower(name), strings.ToLower(k))
		if d <= limit && (bestDist < 0 || d < bestDist) {
			best, bestDist = k, d
		}
	}
	return best, bestDist >= 0
}

// editDistance is the optimal string alignment distance between a and b,
// in bytes: insertions, deletions, substitutions and swaps of adjacent
// bytes each cost one.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		// No key is that long; a long unknown key is no near miss.
		if a == b {
			return 0
		}
		return 64
	}
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
