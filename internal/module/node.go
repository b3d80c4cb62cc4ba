package module

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// This file reads typed values out of yaml.Node trees. Every reader reports
// its own errors (with the field's path and position) to the document, so
// callers only decide what to do with the value.

// field is one value in a document together with the path that names it in
// errors.
type field struct {
	path string
	node *yaml.Node // the value, aliases resolved; nil when the key is absent
	key  *yaml.Node // the key the value stands under; nil for roots and list items
	// parent is where the absence of this field is reported: the key of the
	// enclosing mapping, or the mapping itself.
	parent *yaml.Node
	// typo is the key that misspells this absent field, already reported
	// as unknown; its absence is then not reported again.
	typo *yaml.Node
}

// object is a YAML mapping with its keys indexed, merge keys ("<<") applied.
type object struct {
	field
	fields map[string]field
	// typos maps a known key to the unknown key that misspells it (see
	// knownFields).
	typos map[string]*yaml.Node
}

// get returns the field called name; its node is nil when o lacks it.
func (o object) get(name string) field {
	if f, ok := o.fields[name]; ok {
		return f
	}
	return field{path: childPath(o.path, name), parent: o.where(), typo: o.typos[name]}
}

// where is the node that errors about o as a whole point at: the key it
// stands under, or else the mapping itself.
func (f field) where() *yaml.Node {
	if f.key != nil {
		return f.key
	}
	return f.node
}

func childPath(parent, name string) string {
	if parent == "" {
		return name
	}
	return parent + "." + name
}

// resolve follows aliases so that readers see the anchored value.
func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// doc is the document being validated; it attributes errors to it.
type doc struct {
	p    *parser
	num  int
	kind string
	// merges counts the merge-key sources expanded (see maxMerges).
	merges int
	// legacyID is meta.id of a legacy-format ingress or egress entry, which
	// stands for spec.id; nil otherwise.
	legacyID *field
}

// errorf records an error at node n, or at line 0 when n is nil.
func (d *doc) errorf(n *yaml.Node, path string, format string, args ...any) {
	d.report(n, path, nil, fmt.Sprintf(format, args...))
}

// report records an error with an underlying cause.
func (d *doc) report(n *yaml.Node, path string, cause error, msg string) {
	e := &Error{File: d.p.file, Document: d.num, Kind: d.kind, Field: path, Msg: msg, Err: cause}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	d.p.errs = append(d.p.errs, e)
}

// pos returns the position of n in this document.
func (d *doc) pos(n *yaml.Node) Position {
	return Position{File: d.p.file, Document: d.num, Line: n.Line, Column: n.Column}
}

// present reports whether f has a value, recording "required" when not.
func (d *doc) present(f field) bool {
	if f.node == nil {
		if f.typo == nil {
			d.errorf(f.parent, f.path, "required")
		}
		return false
	}
	return true
}

// describe names a node's type and value for "want X, got Y" messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "null"
		case "!!str":
			return "string " + strconv.Quote(n.Value)
		case "!!int":
			return "integer " + n.Value
		case "!!float":
			return "number " + n.Value
		case "!!bool":
			return "boolean " + n.Value
		default:
			return n.ShortTag() + " " + strconv.Quote(n.Value)
		}
	}
	return "an unexpected YAML node"
}

// maxMerges bounds the merge-key (<<) sources one document may expand.
// Real files merge a handful; aliases of aliases could otherwise make the
// work grow exponentially with the file's size.
const maxMerges = 1000

// object indexes the mapping in f. It reports an error and returns false
// when f is not a mapping or has a duplicate key.
func (d *doc) object(f field) (object, bool) {
	return d.objectIn(f, nil)
}

// objectIn is object for a mapping reached through the merge keys of the
// mappings in merging, which it must not merge again: a mapping that merges
// itself (spec: &s {<<: *s}) is a cycle.
func (d *doc) objectIn(f field, merging []*yaml.Node) (object, bool) {
	if f.node.Kind != yaml.MappingNode {
		d.errorf(f.node, f.path, "want a mapping, got %s", describe(f.node))
		return object{}, false
	}
	o := object{field: f, fields: make(map[string]field), typos: make(map[string]*yaml.Node)}
	ok := true
	var merges []*yaml.Node
	for i := 0; i+1 < len(f.node.Content); i += 2 {
		k, v := resolve(f.node.Content[i]), resolve(f.node.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			d.errorf(k, f.path, "want a string key, got %s", describe(k))
			ok = false
			continue
		}
		if k.ShortTag() == "!!merge" {
			merges = append(merges, v)
			continue
		}
		path := childPath(f.path, k.Value)
		if prev, dup := o.fields[k.Value]; dup {
			// StateFun (Jackson) silently keeps the last value; a repeated
			// key is almost always an editing mistake, so say so.
			d.errorf(k, path, "duplicate key; it is also on line %d", prev.key.Line)
			ok = false
			continue
		}
		o.fields[k.Value] = field{path: path, node: v, key: k, parent: o.where()}
	}
	// Explicit keys win over merged ones, and earlier merge sources over
	// later ones, as the YAML merge-key spec says.
	for _, m := range merges {
		srcs := []*yaml.Node{m}
		if m.Kind == yaml.SequenceNode {
			srcs = nil
			for _, s := range m.Content {
				srcs = append(srcs, resolve(s))
			}
		}
		for _, s := range srcs {
			if s.Kind != yaml.MappingNode {
				d.errorf(s, f.path, "a merge key (<<) wants a mapping or a list of mappings, got %s", describe(s))
				ok = false
				continue
			}
			if s == f.node || slices.Contains(merging, s) {
				d.errorf(s, f.path, "a merge key (<<) refers to a mapping that contains it")
				ok = false
				continue
			}
			if d.merges++; d.merges > maxMerges {
				if d.merges == maxMerges+1 {
					d.errorf(s, f.path, "more than %d merge-key (<<) expansions in one document", maxMerges)
				}
				ok = false
				continue
			}
			src, good := d.objectIn(field{path: f.path, node: s, key: f.key, parent: f.parent}, append(merging, f.node))
			if !good {
				ok = false
				continue
			}
			for name, v := range src.fields {
				if _, exists := o.fields[name]; !exists {
					o.fields[name] = v
				}
			}
		}
	}
	return o, ok
}

// requireObject is object for a required field.
func (d *doc) requireObject(f field) (object, bool) {
	if !d.present(f) {
		return object{}, false
	}
	return d.object(f)
}

// str reads a string. Other scalars are taken as written (Jackson coerces
// them too); null, lists and mappings are errors.
func (d *doc) str(f field) (string, bool) {
	if f.node.Kind != yaml.ScalarNode || f.node.ShortTag() == "!!null" {
		d.errorf(f.node, f.path, "want a string, got %s", describe(f.node))
		return "", false
	}
	return f.node.Value, true
}

// requireStr is str for a required field.
func (d *doc) requireStr(f field) (string, bool) {
	if !d.present(f) {
		return "", false
	}
	return d.str(f)
}

// integer reads an integer in [lo, hi]. A quoted decimal integer is
// accepted, as Jackson coerces it.
func (d *doc) integer(f field, lo, hi int64) (int64, bool) {
	n := f.node
	var v int64
	var err error
	switch {
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!int":
		err = n.Decode(&v)
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str":
		v, err = strconv.ParseInt(strings.TrimSpace(n.Value), 10, 64)
	default:
		d.errorf(n, f.path, "want an integer, got %s", describe(n))
		return 0, false
	}
	if err != nil {
		if n.ShortTag() == "!!str" {
			d.errorf(n, f.path, "want an integer, got %s", describe(n))
		} else {
			d.errorf(n, f.path, "integer %s is out of range", n.Value)
		}
		return 0, false
	}
	if v < lo || v > hi {
		d.errorf(n, f.path, "%d is out of range; want %d to %d", v, lo, hi)
		return 0, false
	}
	return v, true
}

// optInt reads an optional integer in [lo, hi], def when absent or invalid.
func (d *doc) optInt(o object, name string, def, lo, hi int64) int64 {
	f := o.get(name)
	if f.node == nil {
		return def
	}
	if v, ok := d.integer(f, lo, hi); ok {
		return v
	}
	return def
}

// duration reads a duration in Flink's syntax; YAML integers are
// milliseconds, as StateFun reads their text.
func (d *doc) duration(f field) (time.Duration, bool) {
	n := f.node
	if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!str" && n.ShortTag() != "!!int") {
		d.errorf(n, f.path, "want a duration such as \"30s\" or \"2 min\", got %s", describe(n))
		return 0, false
	}
	v, err := parseDuration(n.Value)
	if err != nil {
		d.report(n, f.path, err, err.Error())
		return 0, false
	}
	return v, true
}

// optDuration reads an optional duration, def when absent or invalid.
func (d *doc) optDuration(o object, name string, def time.Duration) time.Duration {
	f := o.get(name)
	if f.node == nil {
		return def
	}
	if v, ok := d.duration(f); ok {
		return v
	}
	return def
}

// optTimeout is optDuration for a timeout, which must not be zero: StateFun
// rejects zero timeouts ("Timeout durations must be larger than 0").
func (d *doc) optTimeout(o object, name string, def time.Duration) time.Duration {
	f := o.get(name)
	if f.node == nil {
		return def
	}
	v, ok := d.duration(f)
	if !ok {
		return def
	}
	if v == 0 {
		d.errorf(f.node, f.path, "a timeout must be larger than 0")
		return def
	}
	return v
}

// list reads a list; its items are named path[i].
func (d *doc) list(f field) ([]field, bool) {
	if f.node.Kind != yaml.SequenceNode {
		d.errorf(f.node, f.path, "want a list, got %s", describe(f.node))
		return nil, false
	}
	items := make([]field, len(f.node.Content))
	for i, n := range f.node.Content {
		n = resolve(n)
		items[i] = field{path: fmt.Sprintf("%s[%d]", f.path, i), node: n, parent: n}
	}
	return items, true
}

// minInt32 and maxInt32 bound values that StateFun reads into a Java int.
const (
	minInt32 = math.MinInt32
	maxInt32 = math.MaxInt32
)
