package module

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/statefun-go/statefun/internal/address"
)

// greeterModule is the module.yaml of the playground's go/greeter example.
const greeterModule = `kind: io.statefun.endpoints.v2/http
spec:
  functions: example/*
  urlPathTemplate: http://functions:8000/statefun
  transport:
    type: io.statefun.transports.v1/async
---
kind: io.statefun.playground.v1/ingress
spec:
  port: 8090
---
kind: io.statefun.playground.v1/egress
spec:
  port: 8091
  topics:
    - greetings
`

func mustParse(t *testing.T, src string) *Module {
	t.Helper()
	m, err := Parse("module.yaml", []byte(src))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return m
}

func TestGreeterModule(t *testing.T) {
	m := mustParse(t, greeterModule)
	want := &Module{
		Endpoints: []*Endpoint{{
			Kind:                KindHTTPEndpointV2,
			Functions:           FunctionSelector{Namespace: "example", Wildcard: true},
			URLPathTemplate:     "http://functions:8000/statefun",
			MaxNumBatchRequests: 1000,
			Transport: Transport{
				Type:            TransportAsync,
				Call:            2 * time.Minute,
				Connect:         20 * time.Second,
				PoolTTL:         15 * time.Second,
				PoolSize:        1024,
				PayloadMaxBytes: 33554432,
			},
			Pos: Position{File: "module.yaml", Document: 1, Line: 1, Column: 1},
		}},
		Ingresses: []*PlaygroundIngress{{Port: 8090, Pos: Position{File: "module.yaml", Document: 2, Line: 8, Column: 1}}},
		Egresses: []*PlaygroundEgress{{Port: 8091, Topics: []string{"greetings"},
			Pos: Position{File: "module.yaml", Document: 3, Line: 12, Column: 1}}},
	}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("got\n%s\nwant\n%s", dump(m), dump(want))
	}
	for _, name := range []string{"person", "greeter"} {
		e, ok := m.EndpointFor(address.TypeName{Namespace: "example", Name: name})
		if !ok || e.URL(address.TypeName{Namespace: "example", Name: name}) != "http://functions:8000/statefun" {
			t.Errorf("EndpointFor(example/%s) = %v, %v", name, e, ok)
		}
	}
}

// dump prints a module for failure messages; %+v of *Module shows only
// pointers.
func dump(m *Module) string {
	var b strings.Builder
	for _, e := range m.Endpoints {
		fmt.Fprintf(&b, "endpoint %+v\n", *e)
	}
	for _, i := range m.Ingresses {
		fmt.Fprintf(&b, "ingress %+v\n", *i)
	}
	for _, e := range m.Egresses {
		fmt.Fprintf(&b, "egress %+v\n", *e)
	}
	return b.String()
}

func TestDefaultsAndTransports(t *testing.T) {
	async := asyncDefaults()
	okhttp := Transport{Type: TransportOkHTTP, Call: time.Minute, Connect: 10 * time.Second,
		Read: 10 * time.Second, Write: 10 * time.Second}
	with := func(t Transport, f func(*Transport)) Transport { f(&t); return t }

	for _, tc := range []struct {
		name     string
		src      string
		maxBatch int
		want     Transport
	}{
		{"v2 minimal", `
kind: io.statefun.endpoints.v2/http
spec: {functions: a/b, urlPathTemplate: "http://h/"}`, 1000, async},
		{"v2 async all properties", `
kind: io.statefun.endpoints.v2/http
spec:
  functions: a/b
  urlPathTemplate: https://h:8443/{function.name}
  maxNumBatchRequests: 10
  transport:
    type: io.statefun.transports.v1/async
    call: 1day
    connect: 30 s
    pool_ttl: 0
    pool_size: 8
    payload_max_bytes: 1048576
    trust_cacerts: file:///ca.pem
    client_cert: file:certs/cert.pem
    client_key: /key.pem
    read: 5s # not an async property: ignored`, 10, Transport{
			Type: TransportAsync, Call: 24 * time.Hour, Connect: 30 * time.Second, PoolTTL: 0,
			PoolSize: 8, PayloadMaxBytes: 1 << 20, TrustCACerts: "/ca.pem",
			ClientCert: "certs/cert.pem", ClientKey: "/key.pem"}},
		{"v2 async type defaulted", `
kind: io.statefun.endpoints.v2/http
spec: {functions: a/b, urlPathTemplate: "http://h/", transport: {call: 5s}}`, 1000,
			with(async, func(t *Transport) { t.Call = 5 * time.Second })},
		{"v2 async legacy timeouts win, with their own defaults", `
kind: io.statefun.endpoints.v2/http
spec:
  functions: a/b
  urlPathTemplate: http://h/
  transport:
    call: 5m
    connect: 1m
    timeouts: {connect: 3s}`, 1000,
			with(async, func(t *Transport) { t.Call, t.Connect = time.Minute, 3*time.Second })},
		{"v2 okhttp defaults", `
kind: io.statefun.endpoints.v2/http
spec: {functions: a/b, urlPathTemplate: "http://h/", transport: {type: io.statefun.transports.v1/okhttp}}`, 1000, okhttp},
		{"v2 okhttp timeouts", `
kind: io.statefun.endpoints.v2/http
spec:
  functions: a/b
  urlPathTemplate: http://h/
  transport:
    type: io.statefun.transports.v1/okhttp
    timeouts: {call: 2 min, connect: 1s, read: 90s, write: 2m}`, 1000,
			Transport{Type: TransportOkHTTP, Call: 2 * time.Minute, Connect: time.Second, Read: 90 * time.Second, Write: 2 * time.Minute}},
		{"v1 defaults", `
kind: io.statefun.endpoints.v1/http
spec: {functions: a/b, urlPathTemplate: "http://h/", maxNumBatchRequests: 0}`, 0, okhttp},
		{"v1 spec-level timeouts", `
kind: io.statefun.endpoints.v1/http
spec:
  functions: a/b
  urlPathTemplate: http://h/
  maxNumBatchRequests: -1
  timeouts:
    call: 20seconds
    read: 15 s`, -1, with(okhttp, func(t *Transport) { t.Call, t.Read = 20*time.Second, 15*time.Second })},
		{"v2 ignores v1-style spec-level timeouts", `
kind: io.statefun.endpoints.v2/http
spec: {functions: a/b, urlPathTemplate: "http://h/", timeouts: {call: 1s}}`, 1000, async},
		{"quoted integer and YAML integer duration", `
kind: io.statefun.endpoints.v2/http
spec: {functions: a/b, urlPathTemplate: "http://h/", maxNumBatchRequests: "7", transport: {call: 1500}}`, 7,
			with(async, func(t *Transport) { t.Call = 1500 * time.Millisecond })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := mustParse(t, tc.src)
			if len(m.Endpoints) != 1 {
				t.Fatalf("got %d endpoints", len(m.Endpoints))
			}
			e := m.Endpoints[0]
			if e.MaxNumBatchRequests != tc.maxBatch {
				t.Errorf("MaxNumBatchRequests = %d, want %d", e.MaxNumBatchRequests, tc.maxBatch)
			}
			if e.Transport != tc.want {
				t.Errorf("Transport =\n%+v\nwant\n%+v", e.Transport, tc.want)
			}
		})
	}
}

func TestEndpointFor(t *testing.T) {
	// The specific binding comes after the wildcard on purpose: file order
	// must not matter.
	m := mustParse(t, `
kind: io.statefun.endpoints.v2/http
spec: {functions: "example/*", urlPathTemplate: "http://all:8000/{function.name}"}
---
kind: io.statefun.endpoints.v2/http
spec: {functions: example/special, urlPathTemplate: "http://special:9000/fn"}
---
kind: io.statefun.endpoints.v1/http
spec: {functions: other/one, urlPathTemplate: "http+unix:///run/fn.sock/{function.name}"}
`)
	for _, tc := range []struct {
		typ, url string
		ok       bool
	}{
		{"example/greeter", "http://all:8000/greeter", true},
		{"example/special", "http://special:9000/fn", true},
		{"other/one", "http+unix:///run/fn.sock/one", true},
		{"other/two", "", false},
		{"example.sub/greeter", "", false}, // namespaces are not hierarchical
		{"exampl/greeter", "", false},
	} {
		typ, err := address.ParseTypeName(tc.typ)
		if err != nil {
			t.Fatal(err)
		}
		e, ok := m.EndpointFor(typ)
		if ok != tc.ok {
			t.Errorf("EndpointFor(%s) ok = %v, want %v", tc.typ, ok, tc.ok)
			continue
		}
		if ok && e.URL(typ) != tc.url {
			t.Errorf("EndpointFor(%s).URL = %q, want %q", tc.typ, e.URL(typ), tc.url)
		}
	}
	// The zero Module binds nothing.
	if _, ok := (&Module{}).EndpointFor(address.TypeName{Namespace: "a", Name: "b"}); ok {
		t.Error("empty module resolved a type")
	}
}

func TestURLTemplate(t *testing.T) {
	for _, tc := range []struct{ tmpl, name, want string }{
		{"http://functions:8000/statefun", "greeter", "http://functions:8000/statefun"},
		{"https://host/{function.name}", "greeter", "https://host/greeter"},
		{"http://{function.name}:8000/{function.name}/x", "fn", "http://fn:8000/fn/x"},
		{"http://h/?fn={function.name}", "a-b", "http://h/?fn=a-b"},
		{"HTTP://h/", "x", "HTTP://h/"},
		{"https+unix:///var/run/uds.sock/{function.name}", "g", "https+unix:///var/run/uds.sock/g"},
	} {
		src := "kind: io.statefun.endpoints.v2/http\nspec:\n  functions: ns/*\n  urlPathTemplate: \"" + tc.tmpl + "\"\n"
		m := mustParse(t, src)
		if got := m.Endpoints[0].URL(address.TypeName{Namespace: "ns", Name: tc.name}); got != tc.want {
			t.Errorf("URL(%q, %q) = %q, want %q", tc.tmpl, tc.name, got, tc.want)
		}
	}
}

func TestLegacyFormat(t *testing.T) {
	m := mustParse(t, `# StateFun 3.0 style
version: "3.0"
module:
  meta:
    type: remote
  spec:
    endpoints:
      - endpoint:
          meta:
            kind: http
          spec:
            functions: example/*
            urlPathTemplate: http://functions:8000/statefun
            maxNumBatchRequests: 500
            timeouts:
              call: 2 min
              connect: 5 s
      - endpoint:
          meta:
            kind: http
          spec:
            functions: example/special
            urlPathTemplate: https://special/{function.name}
    ingresses:
      - ingress:
          meta:
            type: io.statefun.playground.v1/ingress
            id: ignored/by-the-playground
          spec:
            port: 8090
`)
	want := []*Endpoint{{
		Kind:                KindHTTPEndpointV1,
		Functions:           FunctionSelector{Namespace: "example", Wildcard: true},
		URLPathTemplate:     "http://functions:8000/statefun",
		MaxNumBatchRequests: 500,
		Transport: Transport{Type: TransportOkHTTP, Call: 2 * time.Minute, Connect: 5 * time.Second,
			Read: 10 * time.Second, Write: 10 * time.Second},
		Pos: Position{File: "module.yaml", Document: 1, Line: 8, Column: 9},
	}, {
		Kind:                KindHTTPEndpointV1,
		Functions:           FunctionSelector{Namespace: "example", Name: "special"},
		URLPathTemplate:     "https://special/{function.name}",
		MaxNumBatchRequests: 1000,
		Transport: Transport{Type: TransportOkHTTP, Call: time.Minute, Connect: 10 * time.Second,
			Read: 10 * time.Second, Write: 10 * time.Second},
		Pos: Position{File: "module.yaml", Document: 1, Line: 18, Column: 9},
	}}
	if !reflect.DeepEqual(m.Endpoints, want) {
		t.Errorf("endpoints:\n%s", dump(m))
	}
	if len(m.Ingresses) != 1 || m.Ingresses[0].Port != 8090 {
		t.Errorf("ingresses: %s", dump(m))
	}
	e, _ := m.EndpointFor(address.TypeName{Namespace: "example", Name: "special"})
	if e != m.Endpoints[1] {
		t.Errorf("specific legacy binding lost to the wildcard")
	}
}

func TestSkipsEmptyDocumentsAndResolvesAliases(t *testing.T) {
	m := mustParse(t, `---
---
~
---
kind: io.statefun.endpoints.v2/http
spec: &common
  functions: a/*
  urlPathTemplate: http://h/
  transport: &tr {call: 3s}
  unknownKey: [1, 2, {x: y}]
  another: ignored
---
kind: io.statefun.endpoints.v2/http
spec:
  <<: *common
  functions: b/*
---
`)
	if len(m.Endpoints) != 2 {
		t.Fatalf("got %d endpoints", len(m.Endpoints))
	}
	e := m.Endpoints[1]
	if e.Functions.Namespace != "b" || e.URLPathTemplate != "http://h/" || e.Transport.Call != 3*time.Second {
		t.Errorf("merged endpoint = %+v", e)
	}
	if m.Endpoints[0].Pos.Document != 3 || e.Pos.Document != 4 {
		t.Errorf("document numbers = %d, %d, want 3, 4", m.Endpoints[0].Pos.Document, e.Pos.Document)
	}
}

// TestEmptyModule: a module without components is refused with the
// file's name.
func TestEmptyModule(t *testing.T) {
	for src, want := range map[string]string{
		"":                        "module.yaml: the module is empty: it has no components",
		"# nothing\n":             "module.yaml: the module is empty",
		"---\n":                   "module.yaml: the module is empty",
		"---\n# a\n---\n~\n---\n": "module.yaml: the module is empty",
		"version: \"3.0\"\nmodule:\n  meta: {type: remote}\n  spec: {endpoints: []}\n": "module.yaml: the module is empty: it declares no endpoints, ingresses or egresses",
	} {
		_, err := Parse("module.yaml", []byte(src))
		var errs Errors
		if !errors.As(err, &errs) || len(errs) != 1 || !strings.HasPrefix(err.Error(), want) || errs[0].File != "module.yaml" {
			t.Errorf("Parse(%q) = %v, want %q", src, err, want)
		}
	}
}

// TestModuleWithoutEndpoints: a module with only playground components
// loads, with a warning, so that the state API can still serve the state of
// function types that left the module.
func TestModuleWithoutEndpoints(t *testing.T) {
	m := mustParse(t, "kind: io.statefun.playground.v1/ingress\nspec: {port: 8090}\n")
	if len(m.Warnings) != 1 || !strings.HasPrefix(m.Warnings[0].Error(), "module.yaml: the module binds no function type") {
		t.Errorf("warnings = %v", m.Warnings)
	}
}

func TestEgressTopicsDeduplicated(t *testing.T) {
	m := mustParse(t, v2("  functions: a/b\n  urlPathTemplate: http://h/\n")+"---\nkind: io.statefun.playground.v1/egress\nspec: {port: 1, topics: [b, a, b, \"2024\", 2024]}\n")
	if got := m.Egresses[0].Topics; !reflect.DeepEqual(got, []string{"b", "a", "2024"}) {
		t.Errorf("topics = %q", got)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "module.yaml")
	if err := os.WriteFile(path, []byte(greeterModule), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if m.Endpoints[0].Pos.File != path {
		t.Errorf("Pos.File = %q, want %q", m.Endpoints[0].Pos.File, path)
	}
	_, err = Load(filepath.Join(dir, "missing.yaml"))
	if err == nil || !strings.HasPrefix(err.Error(), "module: ") || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v", err)
	}
}
