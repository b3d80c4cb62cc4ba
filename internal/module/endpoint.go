package module

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/endpointurl"
)

// endpoint validates the spec of an io.statefun.endpoints.v{1,2}/http
// component and adds the endpoint to the module.
func (p *parser) endpoint(d *doc, spec field, pos Position) {
	o, ok := d.requireObject(spec)
	if !ok {
		return
	}
	before := len(p.errs)
	e := &Endpoint{Kind: d.kind, Pos: pos, MaxNumBatchRequests: DefaultMaxNumBatchRequests}
	if d.kind == KindHTTPEndpointV1 {
		d.knownFields(o, []string{"functions", "urlPathTemplate", "maxNumBatchRequests", "timeouts"},
			map[string]string{"transport": "a " + KindHTTPEndpointV1 + " endpoint always uses okhttp; use " + KindHTTPEndpointV2 + " to pick a transport"})
	} else {
		d.knownFields(o, []string{"functions", "urlPathTemplate", "maxNumBatchRequests", "transport"},
			map[string]string{"timeouts": "spec-level timeouts belong to " + KindHTTPEndpointV1 + "; in " + KindHTTPEndpointV2 + " write them under transport"})
	}

	ff := o.get("functions")
	if s, ok := d.requireStr(ff); ok {
		if sel, err := parseSelector(s); err != "" {
			d.errorf(ff.node, ff.path, "%s", err)
		} else {
			e.Functions = sel
		}
	}
	uf := o.get("urlPathTemplate")
	if s, ok := d.requireStr(uf); ok {
		if err := checkURLTemplate(s); err != "" {
			d.errorf(uf.node, uf.path, "%s", err)
		} else {
			e.URLPathTemplate = s
		}
	}
	e.MaxNumBatchRequests = int(d.optInt(o, "maxNumBatchRequests", DefaultMaxNumBatchRequests, minInt32, maxInt32))

	if d.kind == KindHTTPEndpointV1 {
		// v1 hands its whole spec to the okhttp client, which reads the
		// spec-level timeouts.
		e.Transport = d.okhttp(o)
	} else {
		e.Transport = d.transport(o.get("transport"))
	}

	if len(p.errs) > before {
		return
	}
	p.bindFunctions(d, e, ff)
	p.mod.Endpoints = append(p.mod.Endpoints, e)
}

// bindFunctions records e's function selector, reporting a second binding
// of the same type or namespace. A type and a wildcard over its namespace
// do not conflict: the type wins (see Module.EndpointFor).
func (p *parser) bindFunctions(d *doc, e *Endpoint, ff field) {
	at := d.pos(ff.node)
	var prev Position
	var dup bool
	if e.Functions.Wildcard {
		prev, dup = p.namespaces[e.Functions.Namespace]
		if !dup {
			p.namespaces[e.Functions.Namespace] = at
		}
	} else {
		t := address.TypeName{Namespace: e.Functions.Namespace, Name: e.Functions.Name}
		prev, dup = p.exact[t]
		if !dup {
			p.exact[t] = at
		}
	}
	if dup {
		d.errorf(ff.node, ff.path, "%s is already bound by document %d (%s)", e.Functions, prev.Document, prev)
	}
}

// parseSelector parses "<namespace>/<name>" or "<namespace>/*". It returns
// the problem as text, empty when there is none.
func parseSelector(s string) (FunctionSelector, string) {
	const want = "want <namespace>/<name> or <namespace>/*"
	t, err := address.ParseTypeName(s)
	if err != nil {
		return FunctionSelector{}, fmt.Sprintf("invalid function type %q: %s", s, want)
	}
	if t.Name == "*" && !strings.Contains(t.Namespace, "*") {
		return FunctionSelector{Namespace: t.Namespace, Wildcard: true}, ""
	}
	if strings.Contains(s, "*") {
		return FunctionSelector{}, fmt.Sprintf("invalid function type %q: a wildcard may only stand for the whole name; %s", s, want)
	}
	return FunctionSelector{Namespace: t.Namespace, Name: t.Name}, ""
}

// checkURLTemplate checks that a template becomes a URL the invoker can
// call once {function.name} is replaced. The rules are package
// endpointurl's, shared with the invoker. It returns the problem as text,
// empty when there is none.
func checkURLTemplate(s string) string {
	expanded := strings.ReplaceAll(s, functionNamePlaceholder, "fn")
	if strings.ContainsAny(expanded, "{}") {
		// A brace left over is usually a misspelt placeholder.
		return fmt.Sprintf("invalid URL template %q: the only placeholder is %s", s, functionNamePlaceholder)
	}
	if _, err := endpointurl.Parse(expanded); err != nil {
		var ue *endpointurl.Error
		if errors.As(err, &ue) {
			return fmt.Sprintf("invalid URL template %q: %s", s, ue.Reason)
		}
		return fmt.Sprintf("invalid URL template %q: %v", s, err)
	}
	return ""
}

// transport validates an endpoints.v2 transport object; absent means the
// async transport with its defaults.
func (d *doc) transport(f field) Transport {
	if f.node == nil {
		return asyncDefaults()
	}
	o, ok := d.object(f)
	if !ok {
		return asyncDefaults()
	}
	typ := TransportAsync
	if tf := o.get("type"); tf.node != nil {
		s, ok := d.str(tf)
		if !ok {
			return asyncDefaults()
		}
		if s != TransportAsync && s != TransportOkHTTP {
			d.errorf(tf.node, tf.path, "unknown transport type %q; want %s (the default) or %s", s, TransportAsync, TransportOkHTTP)
			return asyncDefaults()
		}
		typ = s
	}
	if typ == TransportOkHTTP {
		onlyAsync := "it applies to the " + TransportAsync + " transport only"
		d.knownFields(o, []string{"type", "timeouts"}, map[string]string{
			"call": onlyAsync + "; for okhttp write timeouts.call", "connect": onlyAsync + "; for okhttp write timeouts.connect",
			"pool_ttl": onlyAsync, "pool_size": onlyAsync, "payload_max_bytes": onlyAsync,
			"trust_cacerts": onlyAsync, "client_cert": onlyAsync, "client_key": onlyAsync, "client_key_password": onlyAsync,
		})
		return d.okhttp(o)
	}
	d.knownFields(o, []string{"type", "call", "connect", "timeouts", "pool_ttl", "pool_size", "payload_max_bytes",
		"trust_cacerts", "client_cert", "client_key", "client_key_password"}, nil)
	return d.async(o)
}

func asyncDefaults() Transport {
	return Transport{
		Type:            TransportAsync,
		Call:            DefaultAsyncCall,
		Connect:         DefaultAsyncConnect,
		PoolTTL:         DefaultPoolTTL,
		PoolSize:        DefaultPoolSize,
		PayloadMaxBytes: DefaultPayloadMaxBytes,
	}
}

// async reads the properties of the async transport from its transport
// object o.
func (d *doc) async(o object) Transport {
	t := asyncDefaults()
	t.Call = d.optTimeout(o, "call", DefaultAsyncCall)
	t.Connect = d.optTimeout(o, "connect", DefaultAsyncConnect)
	// The nested timeouts object predates call/connect; when present it
	// wins, with the old defaults, as in StateFun's NettyRequestReplySpec.
	if tf := o.get("timeouts"); tf.node != nil {
		if to, ok := d.object(tf); ok {
			onlyOkHTTP := "it applies to the " + TransportOkHTTP + " transport only"
			d.knownFields(to, []string{"call", "connect"}, map[string]string{"read": onlyOkHTTP, "write": onlyOkHTTP})
			t.Call = d.optTimeout(to, "call", DefaultAsyncLegacyCall)
			t.Connect = d.optTimeout(to, "connect", DefaultAsyncLegacyConnect)
		}
	}
	t.PoolTTL = d.optDuration(o, "pool_ttl", DefaultPoolTTL)
	t.PoolSize = int(d.optInt(o, "pool_size", DefaultPoolSize, 1, maxInt32))
	t.PayloadMaxBytes = d.optInt(o, "payload_max_bytes", DefaultPayloadMaxBytes, 1, maxInt32)
	d.tlsFiles(o, &t)
	return t
}

// okhttp reads the okhttp transport's timeouts object from o: the
// transport object of a v2 endpoint, or the spec of a v1 endpoint.
func (d *doc) okhttp(o object) Transport {
	t := Transport{
		Type:    TransportOkHTTP,
		Call:    DefaultOkHTTPCall,
		Connect: DefaultOkHTTPConnect,
		Read:    DefaultOkHTTPRead,
		Write:   DefaultOkHTTPWrite,
	}
	tf := o.get("timeouts")
	if tf.node == nil {
		return t
	}
	to, ok := d.object(tf)
	if !ok {
		return t
	}
	d.knownFields(to, []string{"call", "connect", "read", "write"}, nil)
	before := len(d.p.errs)
	t.Call = d.optTimeout(to, "call", DefaultOkHTTPCall)
	t.Connect = d.optTimeout(to, "connect", DefaultOkHTTPConnect)
	t.Read = d.optTimeout(to, "read", DefaultOkHTTPRead)
	t.Write = d.optTimeout(to, "write", DefaultOkHTTPWrite)
	if len(d.p.errs) > before {
		return t
	}
	for _, c := range []struct {
		name string
		v    time.Duration
	}{{"connect", t.Connect}, {"read", t.Read}, {"write", t.Write}} {
		if c.v <= t.Call {
			continue
		}
		if f := to.get(c.name); f.node != nil {
			d.errorf(f.node, f.path, "the %s timeout (%v) must not exceed the call timeout (%v)", c.name, c.v, t.Call)
		} else {
			// The default is what exceeds call, so the fix is at call.
			f := to.get("call")
			d.errorf(f.node, f.path, "the call timeout (%v) is shorter than the default %s timeout (%v); set %s too",
				t.Call, c.name, c.v, c.name)
		}
	}
	return t
}
