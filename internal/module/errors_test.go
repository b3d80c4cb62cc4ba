package module

import (
	"errors"
	"strings"
	"testing"
)

// v2 prefixes a spec body (indented two spaces) with an endpoint kind, so
// that spec keys start on line 3.
func v2(body string) string {
	return "kind: io.statefun.endpoints.v2/http\nspec:\n" + body
}

func TestMalformedModules(t *testing.T) {
	for _, tc := range []struct {
		name  string
		src   string
		doc   int
		line  int
		field string
		msg   string // a fragment of the message
	}{
		// Endpoints.
		{"missing urlPathTemplate", v2("  functions: example/*\n"),
			1, 2, "spec.urlPathTemplate", "required"},
		{"missing functions", v2("  urlPathTemplate: http://h/\n"),
			1, 2, "spec.functions", "required"},
		{"function type without namespace", v2("  functions: greeter\n  urlPathTemplate: http://h/\n"),
			1, 3, "spec.functions", `invalid function type "greeter": want <namespace>/<name> or <namespace>/*`},
		{"function type with two slashes", v2("  functions: a/b/c\n  urlPathTemplate: http://h/\n"),
			1, 3, "spec.functions", `invalid function type "a/b/c"`},
		{"wildcard in namespace", v2("  functions: ex*/greeter\n  urlPathTemplate: http://h/\n"),
			1, 3, "spec.functions", "a wildcard may only stand for the whole name"},
		{"partial wildcard in name", v2("  functions: example/greet*\n  urlPathTemplate: http://h/\n"),
			1, 3, "spec.functions", "a wildcard may only stand for the whole name"},
		{"functions is a list", v2("  functions: [a/b]\n  urlPathTemplate: http://h/\n"),
			1, 3, "spec.functions", "want a string, got a list"},
		{"unsupported URL scheme", v2("  functions: a/b\n  urlPathTemplate: ftp://h/fn\n"),
			1, 4, "spec.urlPathTemplate", `unsupported scheme "ftp"; want http, https, http+unix or https+unix`},
		{"relative URL", v2("  functions: a/b\n  urlPathTemplate: /statefun\n"),
			1, 4, "spec.urlPathTemplate", "want an absolute URL"},
		{"URL without host", v2("  functions: a/b\n  urlPathTemplate: \"http:///statefun\"\n"),
			1, 4, "spec.urlPathTemplate", "want an absolute URL with a host"},
		{"misspelt placeholder", v2("  functions: a/b\n  urlPathTemplate: http://h/{function_name}\n"),
			1, 4, "spec.urlPathTemplate", "the only placeholder is {function.name}"},
		{"unix socket URL with a host", v2("  functions: a/b\n  urlPathTemplate: http+unix://run/fn.sock/{function.name}\n"),
			1, 4, "spec.urlPathTemplate", `has no host, but this one has "run": write three slashes, such as http+unix:///run/fn.sock/fn`},
		{"port out of range", v2("  functions: a/b\n  urlPathTemplate: http://h:80000/\n"),
			1, 4, "spec.urlPathTemplate", "port 80000 is out of range"},
		{"unix socket without .sock", v2("  functions: a/b\n  urlPathTemplate: http+unix:///run/fn\n"),
			1, 4, "spec.urlPathTemplate", "names its socket file in the path"},
		{"maxNumBatchRequests not an integer", v2("  functions: a/b\n  urlPathTemplate: http://h/\n  maxNumBatchRequests: lots\n"),
			1, 5, "spec.maxNumBatchRequests", `want an integer, got string "lots"`},
		{"maxNumBatchRequests beyond a Java int", v2("  functions: a/b\n  urlPathTemplate: http://h/\n  maxNumBatchRequests: 3000000000\n"),
			1, 5, "spec.maxNumBatchRequests", "out of range"},

		// Transports.
		{"transport is a string", v2("  functions: a/b\n  urlPathTemplate: http://h/\n  transport: fast\n"),
			1, 5, "spec.transport", `want a mapping, got string "fast"`},
		{"unknown transport type", v2("  functions: a/b\n  urlPathTemplate: http://h/\n  transport:\n    type: io.statefun.transports.v1/grpc\n"),
			1, 6, "spec.transport.type", `unknown transport type "io.statefun.transports.v1/grpc"`},
		{"negative duration", v2("  functions: a/b\n  urlPathTemplate: http://h/\n  transport:\n    call: -5s\n"),
			1, 6, "spec.transport.call", `invalid duration "-5s": must not be negative`},
		{"unknown duration unit", v2("  functions: a/b\n  urlPathTemplate: http://h/\n  transport:\n    connect: 10 parsecs\n"),
			1, 6, "spec.transport.connect", `unknown unit "parsecs"`},
		{"duration is a list", v2("  functions: a/b\n  urlPathTemplate: http://h/\n  transport:\n    pool_ttl: [1s]\n"),
			1, 6, "spec.transport.pool_ttl", "want a duration such as"},
		{"zero async timeout", v2("  functions: a/b\n  urlPathTemplate: http://h/\n  transport:\n    connect: 0ms\n"),
			1, 6, "spec.transport.connect", "a timeout must be larger than 0"},
		{"zero legacy async timeout", v2("  functions: a/b\n  urlPathTemplate: http://h/\n  transport:\n    timeouts:\n      call: 0\n"),
			1, 7, "spec.transport.timeouts.call", "a timeout must be larger than 0"},
		{"pool_size zero", v2("  functions: a/b\n  urlPathTemplate: http://h/\n  transport:\n    pool_size: 0\n"),
			1, 6, "spec.transport.pool_size", "0 is out of range; want 1 to 2147483647"},
		{"payload_max_bytes a float", v2("  functions: a/b\n  urlPathTemplate: http://h/\n  transport:\n    payload_max_bytes: 1.5\n"),
			1, 6, "spec.transport.payload_max_bytes", "want an integer, got number 1.5"},
		{"okhttp connect exceeds call", v2("  functions: a/b\n  urlPathTemplate: http://h/\n  transport:\n    type: io.statefun.transports.v1/okhttp\n    timeouts:\n      call: 1m\n      connect: 2m\n"),
			1, 9, "spec.transport.timeouts.connect", "the connect timeout (2m0s) must not exceed the call timeout (1m0s)"},
		{"okhttp call below default read", v2("  functions: a/b\n  urlPathTemplate: http://h/\n  transport:\n    type: io.statefun.transports.v1/okhttp\n    timeouts: {call: 5s, connect: 1s, write: 1s}\n"),
			1, 7, "spec.transport.timeouts.call", "shorter than the default read timeout (10s); set read too"},
		{"v1 zero read timeout", "kind: io.statefun.endpoints.v1/http\nspec:\n  functions: a/b\n  urlPathTemplate: http://h/\n  timeouts:\n    read: 0 s\n",
			1, 6, "spec.timeouts.read", "a timeout must be larger than 0"},

		// Playground ingress and egress.
		{"port not an integer", "kind: io.statefun.playground.v1/ingress\nspec:\n  port: abc\n",
			1, 3, "spec.port", `want an integer, got string "abc"`},
		{"port out of range", "kind: io.statefun.playground.v1/ingress\nspec:\n  port: 70000\n",
			1, 3, "spec.port", "70000 is out of range; want 1 to 65535"},
		{"port missing", "kind: io.statefun.playground.v1/ingress\nspec:\n  {}\n",
			1, 2, "spec.port", "required"},
		{"topics not a list", "kind: io.statefun.playground.v1/egress\nspec:\n  port: 8091\n  topics: greetings\n",
			1, 4, "spec.topics", `want a list, got string "greetings"`},
		{"topic is a mapping", "kind: io.statefun.playground.v1/egress\nspec:\n  port: 8091\n  topics:\n    - greetings\n    - {name: x}\n",
			1, 6, "spec.topics[1]", "want a string, got a mapping"},
		{"topics missing", "kind: io.statefun.playground.v1/egress\nspec:\n  port: 8091\n",
			1, 2, "spec.topics", "required"},
		{"two playground ingresses", greeterModule + "---\nkind: io.statefun.playground.v1/ingress\nspec: {port: 9000}\n",
			4, 18, "kind", "at most one playground ingress (its id io.statefun.playground/ingress is fixed); the first is in document 2 (module.yaml:8:1)"},
		{"ingress and egress on one port", "kind: io.statefun.playground.v1/ingress\nspec: {port: 8090}\n---\nkind: io.statefun.playground.v1/egress\nspec:\n  port: 8090\n  topics: [t]\n",
			2, 6, "spec.port", "port 8090 is already used by the playground ingress in document 1 (module.yaml:1:1)"},

		// Kinds and document shape.
		{"kinesis ingress", "kind: io.statefun.kinesis.v1/ingress\nspec:\n  id: example/names\n",
			1, 1, "kind", "io.statefun.kinesis.v1/ingress is not supported yet"},
		{"kinesis egress", greeterModule + "---\n\nkind: io.statefun.kinesis.v1/egress\nspec: {}\n",
			4, 19, "kind", "io.statefun.kinesis.v1/egress is not supported yet"},
		{"kinesis ingress without version", "kind: io.statefun.kinesis/ingress\nspec:\n  id: example/names\n",
			1, 1, "kind", "io.statefun.kinesis.v1/ingress (legacy io.statefun.kinesis/ingress) is not supported yet"},
		{"unknown kind", "kind: io.statefun.endpoints.v3/http\nspec: {}\n",
			1, 1, "kind", `unknown kind "io.statefun.endpoints.v3/http"; supported kinds: io.statefun.endpoints.v2/http, io.statefun.endpoints.v1/http, io.statefun.playground.v1/ingress, io.statefun.playground.v1/egress, io.statefun.kafka.v1/ingress, io.statefun.kafka.v1/egress`},
		{"missing kind", "# a comment\nspec:\n  port: 1\n",
			1, 2, "kind", "required"},
		{"missing spec", "kind: io.statefun.playground.v1/ingress\n",
			1, 1, "spec", "required"},
		{"spec is a list", "kind: io.statefun.playground.v1/ingress\nspec:\n  - port: 1\n",
			1, 3, "spec", "want a mapping, got a list"},
		{"document is a list", "- kind: io.statefun.playground.v1/ingress\n",
			1, 1, "", "a document must be a mapping with kind and spec, got a list"},
		{"duplicate key", v2("  functions: a/b\n  urlPathTemplate: http://h/\n  functions: a/c\n"),
			1, 5, "spec.functions", "duplicate key; it is also on line 3"},

		// Bindings.
		{"same type bound twice", v2("  functions: a/b\n  urlPathTemplate: http://h/\n") + "---\n" + v2("  functions: a/b\n  urlPathTemplate: http://other/\n"),
			2, 8, "spec.functions", "a/b is already bound by document 1 (module.yaml:3:14)"},
		{"same namespace bound twice", v2("  functions: a/*\n  urlPathTemplate: http://h/\n") + "---\n" + "kind: io.statefun.endpoints.v1/http\nspec: {functions: a/*, urlPathTemplate: \"http://h/\"}\n",
			2, 7, "spec.functions", "a/* is already bound by document 1 (module.yaml:3:14)"},

		// YAML syntax.
		{"tab indentation", "kind: io.statefun.playground.v1/ingress\nspec:\n\tport: 8090\n",
			1, 3, "", "invalid YAML: found character that cannot start any token"},
		{"unclosed flow mapping", greeterModule + "---\nkind: io.statefun.playground.v1/ingress\nspec: {port: 1\n",
			4, 19, "", "invalid YAML: did not find expected ',' or '}'"},
		{"unclosed flow list at the end", "kind: io.statefun.playground.v1/egress\nspec:\n  topics: [a,\n",
			1, 3, "", "invalid YAML"},
		{"bad indentation", "kind: io.statefun.playground.v1/ingress\nspec:\n  port: 1\n   topics: 2\n",
			1, 4, "", "invalid YAML: mapping values are not allowed in this context"},
		{"unknown anchor", "kind: io.statefun.playground.v1/ingress\nspec:\n  port: *port\n",
			1, 3, "", "invalid YAML: unknown anchor 'port' referenced"},

		// Legacy format.
		{"legacy version 2.0", "version: \"2.0\"\nmodule:\n  meta:\n    type: remote\n  spec: {}\n",
			1, 1, "version", "format version 2.0 is no longer supported"},
		{"legacy version 1.0", "version: \"1.0\"\nmodule:\n  meta:\n    type: remote\n  spec: {}\n",
			1, 1, "version", "format version 1.0 is no longer supported"},
		{"legacy version 3.1", "version: \"3.1\"\nmodule:\n  meta:\n    type: remote\n  spec: {}\n",
			1, 1, "version", `unknown format version "3.1"`},
		{"legacy embedded module", "version: \"3.0\"\nmodule:\n  meta:\n    type: embedded\n  spec: {}\n",
			1, 4, "module.meta.type", `unknown module type "embedded"; only remote is supported`},
		{"legacy kinesis ingress", `version: "3.0"
module:
  meta:
    type: remote
  spec:
    ingresses:
      - ingress:
          meta:
            type: io.statefun.kinesis/ingress
            id: example/names
          spec:
            awsRegion: {type: default}
`, 1, 9, "module.spec.ingresses[0].ingress.meta.type", "io.statefun.kinesis.v1/ingress (legacy io.statefun.kinesis/ingress) is not supported yet"},
		{"legacy kafka ingress without meta.id", `version: "3.0"
module:
  meta:
    type: remote
  spec:
    ingresses:
      - ingress:
          meta:
            type: io.statefun.kafka/ingress
          spec:
            id: example/ignored
            address: kafka:9092
            consumerGroupId: g
            topics: [{topic: t, valueType: a/b, targets: [a/c]}]
`, 1, 8, "module.spec.ingresses[0].ingress.meta.id", "required"},
		{"legacy endpoint without functions", `version: "3.0"
module:
  meta:
    type: remote
  spec:
    endpoints:
      - endpoint:
          meta:
            kind: http
          spec:
            urlPathTemplate: http://h/
`, 1, 10, "module.spec.endpoints[0].endpoint.spec.functions", "required"},
		{"legacy document among others", "version: \"3.0\"\nmodule: {}\n---\n" + greeterModule,
			1, 1, "version", "a legacy module (with a version and no kind) must be the only document in its file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("module.yaml", []byte(tc.src))
			if err == nil {
				t.Fatalf("Parse succeeded; want an error at line %d", tc.line)
			}
			var errs Errors
			if !errors.As(err, &errs) || len(errs) == 0 {
				t.Fatalf("error %T is not a non-empty Errors: %v", err, err)
			}
			t.Log(err)
			e := errs[0]
			if e.Document != tc.doc || e.Line != tc.line || e.Field != tc.field || !strings.Contains(e.Msg, tc.msg) {
				t.Errorf("got  document %d line %d field %q msg %q\nwant document %d line %d field %q msg containing %q\n(all: %v)",
					e.Document, e.Line, e.Field, e.Msg, tc.doc, tc.line, tc.field, tc.msg, err)
			}
			if e.File != "module.yaml" || e.Line == 0 {
				t.Errorf("error lacks its file or line: %+v", e)
			}
		})
	}
}

func TestErrorText(t *testing.T) {
	src := greeterModule + `---
kind: io.statefun.endpoints.v2/http
spec:
  functions: other/*
`
	_, err := Parse("module.yaml", []byte(src))
	const want = "module.yaml:19:1: document 4 (io.statefun.endpoints.v2/http): spec.urlPathTemplate: required"
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v\nwant  %s", err, want)
	}
	e := &Error{Msg: "m"}
	if got := e.Error(); got != "module: m" {
		t.Errorf("bare error = %q", got)
	}
}

func TestAllErrorsReported(t *testing.T) {
	src := `kind: io.statefun.endpoints.v2/http
spec:
  functions: a
  urlPathTemplate: ftp://x/
  transport: {call: forever}
---
kind: io.statefun.kinesis.v1/egress
spec: {}
---
kind: io.statefun.playground.v1/ingress
spec: {port: 0}
`
	_, err := Parse("m.yaml", []byte(src))
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("err = %v", err)
	}
	var got []string
	for _, e := range errs {
		got = append(got, e.Field)
	}
	want := []string{"spec.functions", "spec.urlPathTemplate", "spec.transport.call", "kind", "spec.port"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("fields = %v, want %v\n%v", got, want, err)
	}
	if !errors.Is(err, ErrNotSupported) {
		t.Errorf("errors.Is(err, ErrNotSupported) = false")
	}
	var first *Error
	if !errors.As(err, &first) || first.Field != "spec.functions" {
		t.Errorf("errors.As first = %+v", first)
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[3], "m.yaml:7:7: document 2 (io.statefun.kinesis.v1/egress): kind: ") {
		t.Errorf("text:\n%v", err)
	}
}
