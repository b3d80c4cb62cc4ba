package module

import (
	"strings"

	"go.yaml.in/yaml/v3"
)

// The legacy format is StateFun's single-document module.yaml (format
// version 3.0):
//
//	version: "3.0"
//	module:
//	  meta:
//	    type: remote
//	  spec:
//	    endpoints:
//	      - endpoint:
//	          meta:
//	            kind: http
//	          spec: {functions: ..., urlPathTemplate: ..., timeouts: ...}
//	    ingresses:
//	      - ingress:
//	          meta: {type: io.statefun.kafka/ingress, id: ...}
//	          spec: ...
//	    egresses: (like ingresses, under egress:)
//
// StateFun (jsonmodule/LegacyRemoteModuleV30.java) turns each entry into a
// component: meta.kind or meta.type is converted by legacyKinds, or taken
// as a kind when it is not listed there, and spec becomes the spec.

// legacyKinds converts the legacy kind names.
var legacyKinds = map[string]string{
	"http":                        KindHTTPEndpointV1,
	"io.statefun.kafka/ingress":   KindKafkaIngress,
	"io.statefun.kafka/egress":    KindKafkaEgress,
	"io.statefun.kinesis/ingress": KindKinesisIngress,
	"io.statefun.kinesis/egress":  KindKinesisEgress,
}

// legacy validates a legacy-format document and adds its components.
func (p *parser) legacy(num int, root *yaml.Node) {
	d := &doc{p: p, num: num}
	top, ok := d.object(field{node: root})
	if !ok {
		return
	}
	d.knownFields(top, []string{"version", "module"}, nil)
	before := len(p.errs)
	vf := top.get("version")
	if v, ok := d.str(vf); ok {
		switch v {
		case "3.0":
		case "1.0", "2.0":
			d.errorf(vf.node, vf.path, "format version %s is no longer supported; use \"3.0\", or better one kind/spec document per component", v)
		default:
			// StateFun knows "3.1" as a version but cannot load it either.
			d.errorf(vf.node, vf.path, "unknown format version %q; the legacy format is version \"3.0\"", v)
		}
	}
	mod, ok := d.requireObject(top.get("module"))
	if !ok {
		return
	}
	d.knownFields(mod, []string{"meta", "spec"}, nil)
	if meta, ok := d.requireObject(mod.get("meta")); ok {
		tf := meta.get("type")
		if t, ok := d.requireStr(tf); ok && !strings.EqualFold(t, "remote") {
			d.errorf(tf.node, tf.path, "unknown module type %q; only remote is supported", t)
		}
	}
	spec, ok := d.requireObject(mod.get("spec"))
	if !ok || len(p.errs) > before {
		return
	}
	d.knownFields(spec, []string{"endpoints", "ingresses", "egresses"}, nil)
	p.legacyList(d, spec.get("endpoints"), "endpoint", "kind")
	p.legacyList(d, spec.get("ingresses"), "ingress", "type")
	p.legacyList(d, spec.get("egresses"), "egress", "type")
}

// legacyList binds each entry of a legacy endpoints, ingresses or egresses
// list. Each entry is {<entry>: {meta: {<kindKey>: kind}, spec: ...}}.
func (p *parser) legacyList(d *doc, f field, entry, kindKey string) {
	if f.node == nil {
		return
	}
	items, ok := d.list(f)
	if !ok {
		return
	}
	for _, it := range items {
		c := &doc{p: p, num: d.num}
		item, ok := c.object(it)
		if !ok {
			continue
		}
		c.knownFields(item, []string{entry}, nil)
		e, ok := c.requireObject(item.get(entry))
		if !ok {
			continue
		}
		c.knownFields(e, []string{"meta", "spec"}, nil)
		meta, ok := c.requireObject(e.get("meta"))
		if !ok {
			continue
		}
		kf := meta.get(kindKey)
		kind, ok := c.requireStr(kf)
		if !ok {
			continue
		}
		if k, ok := legacyKinds[kind]; ok {
			kind = k
		}
		c.kind = kind
		if entry != "endpoint" {
			idf := meta.get("id")
			c.legacyID = &idf
		}
		p.bind(c, kf, e.get("spec"), c.pos(it.node))
	}
}
