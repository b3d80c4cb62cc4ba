package module

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/statefun-go/statefun/internal/address"
)

// supportedKinds is listed in "unknown kind" errors.
const supportedKinds = KindHTTPEndpointV2 + ", " + KindHTTPEndpointV1 + ", " +
	KindPlaygroundIngress + ", " + KindPlaygroundEgress + ", " + KindKafkaIngress + ", " + KindKafkaEgress

// Load reads and validates the module file at path. It returns an error
// prefixed "module: " when the file cannot be read, and Errors when it is
// invalid (see Parse). Unlike Parse, it also reads the TLS files the module
// names (trust_cacerts, client_cert, client_key), so that a missing file or
// one without the expected PEM blocks is reported at its field.
func Load(path string) (*Module, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("module: reading module file: %w", err)
	}
	return parse(path, data, readTLSFile)
}

// Parse validates the module file contents data; filename only names the
// file in errors. When data is invalid it returns a nil Module and Errors,
// which lists every problem found, in file order. A YAML syntax error stops
// the reading at the broken document; the documents before it are still
// checked. Parse does no I/O: it checks the TLS file locations a module
// names, but only Load reads the files.
func Parse(filename string, data []byte) (*Module, error) {
	return parse(filename, data, nil)
}

// parse is Parse, reading TLS files with readFile unless it is nil.
func parse(filename string, data []byte, readFile func(string) ([]byte, error)) (*Module, error) {
	p := &parser{
		readFile:   readFile,
		file:       filename,
		mod:        &Module{},
		exact:      make(map[address.TypeName]Position),
		namespaces: make(map[string]Position),
		ports:      make(map[int]string),
		ingressIDs: make(map[address.TypeName]Position),
		egressIDs:  make(map[address.TypeName]Position),
	}
	roots := p.decode(data)

	var live []int
	for i, r := range roots {
		if r != nil {
			live = append(live, i)
		}
	}
	if len(live) == 1 && isLegacy(roots[live[0]]) {
		p.legacy(live[0]+1, roots[live[0]])
	} else {
		for _, i := range live {
			p.component(i+1, roots[i])
		}
	}

	if len(p.errs) == 0 && len(p.mod.Endpoints) == 0 {
		p.noEndpoints(len(live) == 0)
	}
	if len(p.errs) > 0 {
		sortErrors(p.errs)
		return nil, p.errs
	}
	sortErrors(p.warns)
	p.mod.Warnings = p.warns
	return p.mod, nil
}

// sortErrors sorts errors or warnings into file order.
func sortErrors(es []*Error) {
	slices.SortStableFunc(es, func(a, b *Error) int {
		if a.Document != b.Document {
			return a.Document - b.Document
		}
		if a.Line != b.Line {
			return a.Line - b.Line
		}
		return a.Column - b.Column
	})
}

// noEndpoints reports a module without endpoints. One without any
// component is refused: a file that loads as nothing is almost always the
// wrong file or a broken template. One with only ingresses and egresses
// (playground or Kafka) loads with a warning: no message can be delivered, but the state API can
// still read and repair the state of function types that left the module.
func (p *parser) noEndpoints(noDocuments bool) {
	switch {
	case noDocuments:
		p.errs = append(p.errs, &Error{File: p.file, Msg: "the module is empty: it has no components (only blank lines, comments, null documents or ---); " +
			"a module needs at least one " + KindHTTPEndpointV2 + " component, a document with kind and spec"})
	case len(p.mod.Ingresses)+len(p.mod.Egresses)+len(p.mod.KafkaIngresses)+len(p.mod.KafkaEgresses) == 0:
		p.errs = append(p.errs, &Error{File: p.file, Msg: "the module is empty: it declares no endpoints, ingresses or egresses; " +
			"a module needs at least one " + KindHTTPEndpointV2 + " component"})
	default:
		p.warns = append(p.warns, &Error{File: p.file, Msg: "the module binds no function type (it has no " + KindHTTPEndpointV2 +
			" component), so no message can be delivered; only the state API is of use"})
	}
}

// parser holds the state of one Parse call.
type parser struct {
	// readFile reads the TLS files a module names; nil skips reading them.
	readFile func(string) ([]byte, error)

	file  string
	errs  Errors
	warns []*Error
	mod   *Module

	// exact and namespaces hold where each function type and namespace was
	// bound (the position of the functions value), to report duplicates.
	exact      map[address.TypeName]Position
	namespaces map[string]Position
	// ingress and egress are the playground components seen so far; a
	// module may have one of each, because their ids are fixed.
	ingress, egress *Position
	// ports says which playground component listens on a port.
	ports map[int]string
	// ingressIDs and egressIDs hold where each Kafka ingress and egress id
	// was declared, to report duplicates.
	ingressIDs, egressIDs map[address.TypeName]Position
}

// decode splits data into documents and returns their roots, nil for null
// documents. A syntax error is recorded and ends the stream.
func (p *parser) decode(data []byte) []*yaml.Node {
	var roots []*yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return roots
		}
		if err != nil {
			p.syntaxError(len(roots)+1, err, data)
			return roots
		}
		var root *yaml.Node
		if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
			root = resolve(n.Content[0])
		}
		if root != nil && root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null" {
			root = nil
		}
		roots = append(roots, root)
	}
}

var (
	syntaxLineRE    = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)
	unknownAnchorRE = regexp.MustCompile(`^yaml: unknown anchor '(.*)' referenced$`)
)

// parserProblems are the messages of libyaml's parser (as opposed to its
// scanner). yaml.v3 reports their line 0-based, scanner lines 1-based.
var parserProblems = map[string]bool{
	"did not find expected <stream-start>":   true,
	"did not find expected <document start>": true,
	"found undefined tag handle":             true,
	"did not find expected node content":     true,
	"did not find expected '-' indicator":    true,
	"did not find expected key":              true,
	"did not find expected ',' or ']'":       true,
	"did not find expected ',' or '}'":       true,
	"found duplicate %YAML directive":        true,
	"found incompatible YAML document":       true,
	"found duplicate %TAG directive":         true,
}

// syntaxError records a yaml.v3 error, recovering its line: yaml.v3 only
// puts it in the message text, 0-based for some problems, and not at all
// for unknown anchors or problems on the first line.
func (p *parser) syntaxError(num int, err error, data []byte) {
	text := err.Error()
	e := &Error{File: p.file, Document: num, Msg: "invalid YAML: " + strings.TrimPrefix(text, "yaml: "), Err: err}
	switch m := syntaxLineRE.FindStringSubmatch(text); {
	case m != nil:
		e.Line, _ = strconv.Atoi(m[1])
		e.Msg = "invalid YAML: " + m[2]
		if parserProblems[m[2]] {
			e.Line++
		}
	case unknownAnchorRE.MatchString(text):
		name := unknownAnchorRE.FindStringSubmatch(text)[1]
		if i := bytes.Index(data, []byte("*"+name)); i >= 0 {
			e.Line = bytes.Count(data[:i], []byte("\n")) + 1
			e.Column = i - bytes.LastIndexByte(data[:i], '\n')
		}
	default:
		e.Line = 1
	}
	// Problems found at the end of the stream point past the last line.
	lines := bytes.Count(data, []byte("\n"))
	if !bytes.HasSuffix(data, []byte("\n")) {
		lines++
	}
	e.Line = min(e.Line, lines)
	p.errs = append(p.errs, e)
}

// isLegacy reports whether root is a document of the single-document
// format of StateFun 2.x and 3.0: a "version" key and no "kind".
func isLegacy(root *yaml.Node) bool {
	if root.Kind != yaml.MappingNode {
		return false
	}
	var version, kind bool
	for i := 0; i+1 < len(root.Content); i += 2 {
		switch resolve(root.Content[i]).Value {
		case "version":
			version = true
		case "kind":
			kind = true
		}
	}
	return version && !kind
}

// component validates one kind/spec document and adds it to the module.
func (p *parser) component(num int, root *yaml.Node) {
	d := &doc{p: p, num: num}
	if root.Kind != yaml.MappingNode {
		d.errorf(root, "", "a document must be a mapping with kind and spec, got %s", describe(root))
		return
	}
	top, ok := d.object(field{node: root})
	if !ok {
		return
	}
	d.knownFields(top, []string{"kind", "spec"}, nil)
	kf := top.get("kind")
	if kf.node == nil {
		if vf := top.get("version"); vf.node != nil {
			d.errorf(vf.key, vf.path, "a legacy module (with a version and no kind) must be the only document in its file")
			return
		}
	}
	kind, ok := d.requireStr(kf)
	if !ok {
		return
	}
	if k, alt := alternativeKinds[kind]; alt {
		kind = k
	}
	d.kind = kind
	p.bind(d, kf, top.get("spec"), d.pos(root))
}

// alternativeKinds are the other names StateFun 3.x's component binders
// take for a kind in a component document: each v1 kind without its
// version. The bare `http` is the legacy format's name for a v1 endpoint
// (legacyKinds); StateFun refuses it in a component document (a kind there
// must be a typename), but modules written by hand mix the two styles, and
// taking it can break no module StateFun runs, so it is taken as the v1
// endpoint here too (docs/reference/module.md).
var alternativeKinds = map[string]string{
	"http":                        KindHTTPEndpointV1,
	"io.statefun.endpoints/http":  KindHTTPEndpointV1,
	"io.statefun.kafka/ingress":   KindKafkaIngress,
	"io.statefun.kafka/egress":    KindKafkaEgress,
	"io.statefun.kinesis/ingress": KindKinesisIngress,
	"io.statefun.kinesis/egress":  KindKinesisEgress,
}

// bind validates spec as a component of the kind in kf and adds it to the
// module. pos is where the component starts.
func (p *parser) bind(d *doc, kf, spec field, pos Position) {
	switch d.kind {
	case KindHTTPEndpointV2, KindHTTPEndpointV1:
		p.endpoint(d, spec, pos)
	case KindPlaygroundIngress:
		p.playgroundIngress(d, kf, spec, pos)
	case KindPlaygroundEgress:
		p.playgroundEgress(d, kf, spec, pos)
	case KindKafkaIngress:
		p.kafkaIngress(d, spec, pos)
	case KindKafkaEgress:
		p.kafkaEgress(d, spec, pos)
	case KindKinesisIngress, KindKinesisEgress:
		what := d.kind
		if kf.node.Value != d.kind {
			what = fmt.Sprintf("%s (legacy %s)", d.kind, kf.node.Value)
		}
		d.report(kf.node, kf.path, ErrNotSupported, fmt.Sprintf(
			"%s is not supported yet; supported kinds: %s", what, supportedKinds))
	default:
		d.errorf(kf.node, kf.path, "unknown kind %q; supported kinds: %s", d.kind, supportedKinds)
	}
}
