// Package metricsdoc writes the metrics reference, docs/reference/metrics.md,
// from the source code that defines the metrics, so that the page cannot
// drift from what /metrics exports.
//
// It reads the Go files of the repository's internal/ tree (tests left
// out) and finds every prometheus.NewCounter, NewGauge, NewHistogram and
// NewSummary (plain, Vec and Func): the metric's name and help text come
// from its Opts literal, its labels from the Vec's label list. A metric it
// cannot read statically (a name built at run time, a prometheus.NewDesc,
// a label list held in a variable) is an error naming the file and line,
// not a silent gap in the page; so is a package with metrics that has no
// section of the page yet.
package metricsdoc

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// promPath is the import path of the Prometheus client library.
const promPath = "github.com/prometheus/client_golang/prometheus"

// Metric is one metric the runtime defines.
type Metric struct {
	Name   string   // e.g. statefun_invocations_total
	Type   string   // counter, gauge, histogram or summary
	Labels []string // the variable labels, in order
	Help   string   // the help text /metrics exports
	Pkg    string   // the package directory, from the root, e.g. internal/engine
	Pos    string   // file:line of the definition, from the root
}

// constructors maps a prometheus constructor to the metric type it makes
// and whether its second argument is the label list.
var constructors = map[string]struct {
	typ string
	vec bool
}{
	"NewCounter":      {"counter", false},
	"NewCounterVec":   {"counter", true},
	"NewCounterFunc":  {"counter", false},
	"NewGauge":        {"gauge", false},
	"NewGaugeVec":     {"gauge", true},
	"NewGaugeFunc":    {"gauge", false},
	"NewHistogram":    {"histogram", false},
	"NewHistogramVec": {"histogram", true},
	"NewSummary":      {"summary", false},
	"NewSummaryVec":   {"summary", true},
}

// Scan reads the non-test Go files under root/internal and returns every
// metric defined there, sorted by section and name.
func Scan(root string) ([]Metric, error) {
	var out []Metric
	fset := token.NewFileSet()
	dir := filepath.Join(root, "internal")
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		ms, err := scanFile(fset, f, filepath.ToSlash(rel))
		out = append(out, ms...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("metricsdoc: reading %s (run from the repository's root, or give its path): %w", dir, err)
	}
	seen := map[string]Metric{}
	for _, m := range out {
		if prev, ok := seen[m.Name]; ok {
			return nil, fmt.Errorf("metricsdoc: %s is defined twice, at %s and %s: give one of them another name", m.Name, prev.Pos, m.Pos)
		}
		seen[m.Name] = m
		if _, err := sectionOf(m); err != nil {
			return nil, err
		}
	}
	slices.SortFunc(out, func(a, b Metric) int {
		sa, _ := sectionOf(a)
		sb, _ := sectionOf(b)
		if sa.order != sb.order {
			return sa.order - sb.order
		}
		return strings.Compare(a.Name, b.Name)
	})
	if len(out) == 0 {
		return nil, fmt.Errorf("metricsdoc: no metrics found under %s: is it the repository's root?", dir)
	}
	return out, nil
}

// scanFile returns the metrics one file defines.
func scanFile(fset *token.FileSet, f *ast.File, rel string) ([]Metric, error) {
	prom := ""
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == promPath {
			prom = "prometheus"
			if imp.Name != nil {
				prom = imp.Name.Name
			}
		}
	}
	if prom == "" {
		return nil, nil
	}
	var out []Metric
	var err error
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || err != nil {
			return err == nil
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if x, ok := sel.X.(*ast.Ident); !ok || x.Name != prom {
			return true
		}
		pos := fmt.Sprintf("%s:%d", rel, fset.Position(call.Pos()).Line)
		if sel.Sel.Name == "NewDesc" {
			err = fmt.Errorf("metricsdoc: %s: prometheus.NewDesc is not read by the generator; define the metric with an Opts literal, or teach internal/metricsdoc to read it", pos)
			return false
		}
		c, ok := constructors[sel.Sel.Name]
		if !ok || len(call.Args) == 0 {
			return true
		}
		m := Metric{Type: c.typ, Pkg: filepath.ToSlash(filepath.Dir(rel)), Pos: pos}
		if m.Name, m.Help, err = optsOf(call.Args[0]); err != nil {
			err = fmt.Errorf("metricsdoc: %s: %w", pos, err)
			return false
		}
		if c.vec {
			if len(call.Args) < 2 {
				err = fmt.Errorf("metricsdoc: %s: %s without a label list", pos, sel.Sel.Name)
				return false
			}
			if m.Labels, err = stringList(call.Args[1]); err != nil {
				err = fmt.Errorf("metricsdoc: %s: the labels of %s: %w", pos, m.Name, err)
				return false
			}
		}
		out = append(out, m)
		return true
	})
	return out, err
}

// optsOf reads the Name and Help fields of a prometheus Opts literal.
func optsOf(e ast.Expr) (name, help string, err error) {
	lit, ok := e.(*ast.CompositeLit)
	if !ok {
		return "", "", fmt.Errorf("the options are not a literal: write them in place so the generator can read them")
	}
	for _, el := range lit.Elts {
		kv, ok := el.(*ast.KeyValueExpr)
		if !ok {
			continue
		}
		key, _ := kv.Key.(*ast.Ident)
		if key == nil {
			continue
		}
		switch key.Name {
		case "Name":
			name, err = stringOf(kv.Value)
		case "Help":
			help, err = stringOf(kv.Value)
		case "Namespace", "Subsystem", "ConstLabels":
			err = fmt.Errorf("%s is not read by the generator: write the whole name in Name", key.Name)
		}
		if err != nil {
			return "", "", err
		}
	}
	if name == "" || help == "" {
		return "", "", fmt.Errorf("a metric needs a Name and a Help written as string literals")
	}
	return name, help, nil
}

// stringOf evaluates a string literal or a sum of them.
func stringOf(e ast.Expr) (string, error) {
	switch v := e.(type) {
	case *ast.BasicLit:
		if v.Kind == token.STRING {
			return strconv.Unquote(v.Value)
		}
	case *ast.BinaryExpr:
		if v.Op == token.ADD {
			a, err := stringOf(v.X)
			if err != nil {
				return "", err
			}
			b, err := stringOf(v.Y)
			return a + b, err
		}
	case *ast.ParenExpr:
		return stringOf(v.X)
	}
	return "", fmt.Errorf("not a string literal: write it as one so the generator can read it")
}

// stringList reads a []string{...} literal.
func stringList(e ast.Expr) ([]string, error) {
	lit, ok := e.(*ast.CompositeLit)
	if !ok {
		return nil, fmt.Errorf("not a []string literal: write it in place so the generator can read it")
	}
	var out []string
	for _, el := range lit.Elts {
		s, err := stringOf(el)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// section is a part of the page: the packages whose metrics it lists and
// when a process exports them.
type section struct {
	order int
	title string
	when  string
}

// sections maps a package directory (or its parent, for internal/cluster)
// to its section. A package with metrics and no entry here fails Scan.
var sections = map[string]section{
	"internal/engine":       {1, "Engine: invocations, commits, queues, the state API", "Every process."},
	"internal/functions":    {2, "Remote functions", "Every process."},
	"internal/app":          {3, "Admin listener", "Every process, unless the admin lane is turned off (`--no-admin-lane`)."},
	"internal/connlimit":    {4, "Listeners", "Every process."},
	"internal/store":        {5, "Store retention", "Every process; updated by each retention sweep."},
	"internal/kafkaingress": {6, "Kafka ingress", "Processes whose module has Kafka ingresses (labelled by ingress id)."},
	"internal/kafkaegress":  {7, "Kafka egress", "Embedded mode with Kafka egresses (labelled by egress id). In cluster mode egress records go in the node's transaction and are counted by the cluster metrics."},
	"internal/cluster":      {8, "Cluster mode", "Processes started with `--cluster`."},
	"internal/jobs":         {9, "Bulk jobs", "Processes that run bulk jobs (`/jobs`); docs/how-to/bulk-jobs.md says how a job paces itself."},
}

// sectionOf returns the section m belongs to.
func sectionOf(m Metric) (section, error) {
	for p := m.Pkg; p != "." && p != "/"; p = filepath.ToSlash(filepath.Dir(p)) {
		if s, ok := sections[p]; ok {
			return s, nil
		}
	}
	return section{}, fmt.Errorf("metricsdoc: %s (%s) is in a package with no section of the metrics reference: add %s to sections in internal/metricsdoc", m.Name, m.Pos, m.Pkg)
}

// Write writes the reference page of ms (as Scan returns them) to w;
// command is the command that regenerates it.
func Write(w io.Writer, ms []Metric, command string) error {
	var b strings.Builder
	b.WriteString(`# Metrics reference

<!-- Generated from the metric definitions in internal/ by "` + command + `"; do not edit.
     make test fails when this page differs from what the code generates. -->

Every metric the runtime exports at ` + "`GET /metrics`" + ` on the admin listener
(Prometheus text format), with its type, labels and meaning. Which alerts to
set on them: [Operate it](../how-to/operate.md).

A labelled metric appears once it has a first value (a function type's
counters after its first call). Labels take their values from the module
and the runtime — function types (at most ` + "`--max-wildcard-types`" + ` per
namespace endpoint), partitions, ingress and egress ids, fixed lists of
reasons — so the number of series is bounded by the configuration, not by
what clients send. Besides these, the Go client's standard ` + "`go_*`" + ` and
` + "`process_*`" + ` metrics are exported, with the scheduler's latency histogram
` + "`go_sched_latencies_seconds`" + ` (how long goroutines wait for a CPU).

`)
	for i, m := range ms {
		s, err := sectionOf(m)
		if err != nil {
			return err
		}
		if i == 0 || s.order != mustSection(ms[i-1]).order {
			if i > 0 {
				b.WriteString("\n")
			}
			fmt.Fprintf(&b, "## %s\n\n%s\n\n| metric | type | labels | meaning |\n|---|---|---|---|\n", s.title, s.when)
		}
		labels := ""
		if len(m.Labels) > 0 {
			labels = "`" + strings.Join(m.Labels, "`, `") + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", m.Name, m.Type, labels, cell(m.Help))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// mustSection is sectionOf for a metric already checked.
func mustSection(m Metric) section {
	s, _ := sectionOf(m)
	return s
}

// cell escapes a help text for a Markdown table cell.
func cell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ", "<", "&lt;", ">", "&gt;", "*", `\*`).Replace(s)
}
