package module

import (
	"errors"
	"strings"
	"testing"
)

// TestMisspelledFields: an unknown key that is a near miss of a key known
// at its place is refused with file, line and the key it most likely means,
// and the field it misspells is not reported again as missing.
func TestMisspelledFields(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		line      int
		field     string
		msg       string
	}{
		{"functions", v2("  functons: a/*\n  urlPathTemplate: http://h/\n"),
			3, "spec.functons", `unknown field "functons"; did you mean "functions"?`},
		{"urlPathTemplate", v2("  functions: a/*\n  urlPathTemplte: http://h/\n"),
			4, "spec.urlPathTemplte", `did you mean "urlPathTemplate"?`},
		{"snake case", v2("  functions: a/*\n  url_path_template: http://h/\n"),
			4, "spec.url_path_template", `did you mean "urlPathTemplate"?`},
		{"case", v2("  functions: a/*\n  urlPathTemplate: http://h/\n  MaxNumBatchRequests: 5\n"),
			5, "spec.MaxNumBatchRequests", `did you mean "maxNumBatchRequests"?`},
		{"transport type swapped letters", v2("  functions: a/*\n  urlPathTemplate: http://h/\n  transport:\n    tpye: io.statefun.transports.v1/okhttp\n"),
			6, "spec.transport.tpye", `did you mean "type"?`},
		{"timeout", v2("  functions: a/*\n  urlPathTemplate: http://h/\n  transport:\n    timeout: {call: 1s}\n"),
			6, "spec.transport.timeout", `did you mean "timeouts"?`},
		{"okhttp read", v2("  functions: a/*\n  urlPathTemplate: http://h/\n  transport:\n    type: io.statefun.transports.v1/okhttp\n    timeouts: {call: 1m, raed: 1s}\n"),
			7, "spec.transport.timeouts.raed", `did you mean "read"?`},
		{"pool size dash", v2("  functions: a/*\n  urlPathTemplate: http://h/\n  transport:\n    pool-size: 4\n"),
			6, "spec.transport.pool-size", `did you mean "pool_size"?`},
		{"trust_cacert", v2("  functions: a/*\n  urlPathTemplate: http://h/\n  transport:\n    trust_cacert: /ca.pem\n"),
			6, "spec.transport.trust_cacert", `did you mean "trust_cacerts"?`},
		{"spec", "kind: io.statefun.endpoints.v2/http\nspce:\n  functions: a/*\n",
			2, "spce", `did you mean "spec"?`},
		{"kind", "knid: io.statefun.endpoints.v2/http\nspec: {}\n",
			1, "knid", `did you mean "kind"?`},
		{"topic", "kind: io.statefun.playground.v1/egress\nspec:\n  port: 1\n  topic: [a]\n",
			4, "spec.topic", `did you mean "topics"?`},
		{"legacy endpoints", "version: \"3.0\"\nmodule:\n  meta: {type: remote}\n  spec:\n    endpoint: []\n",
			5, "module.spec.endpoint", `did you mean "endpoints"?`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("module.yaml", []byte(tc.src))
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("Parse = %v, want Errors", err)
			}
			e := errs[0]
			if len(errs) != 1 || e.File != "module.yaml" || e.Line != tc.line || e.Field != tc.field || !strings.Contains(e.Msg, tc.msg) {
				t.Errorf("got\n%v\nwant one error at line %d, field %s, msg containing %q", err, tc.line, tc.field, tc.msg)
			}
		})
	}
}

// TestUnknownFieldsWarn: keys that are no near miss are ignored, as StateFun
// ignores them, and listed as warnings with their position.
func TestUnknownFieldsWarn(t *testing.T) {
	m := mustParse(t, `kind: io.statefun.endpoints.v2/http
metadata: {owner: team-a}
spec: &s
  functions: a/*
  urlPathTemplate: http://h/
  timeouts: {call: 1s}
  description: the a functions
  transport:
    type: io.statefun.transports.v1/okhttp
    trust_cacerts: /ca.pem
---
kind: io.statefun.endpoints.v2/http
spec:
  <<: *s
  functions: b/*
`)
	want := []string{
		// The top-level keys are checked before the kind is read.
		`module.yaml:2:1: document 1: metadata: unknown field "metadata" is ignored, as StateFun ignores it`,
		`module.yaml:6:3: document 1 (io.statefun.endpoints.v2/http): spec.timeouts: field "timeouts" is ignored here: spec-level timeouts belong to io.statefun.endpoints.v1/http; in io.statefun.endpoints.v2/http write them under transport`,
		`module.yaml:7:3: document 1 (io.statefun.endpoints.v2/http): spec.description: unknown field "description" is ignored, as StateFun ignores it`,
		`module.yaml:10:5: document 1 (io.statefun.endpoints.v2/http): spec.transport.trust_cacerts: field "trust_cacerts" is ignored here: it applies to the io.statefun.transports.v1/async transport only`,
	}
	var got []string
	for _, w := range m.Warnings {
		got = append(got, w.Error())
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(m.Endpoints) != 2 || m.Endpoints[0].Transport.TrustCACerts != "" {
		t.Errorf("endpoints: %s", dump(m))
	}
}

func TestNearMiss(t *testing.T) {
	known := []string{"functions", "urlPathTemplate", "type", "port", "id"}
	for name, want := range map[string]string{
		"functons": "functions", "fucntions": "functions", "Functions": "functions", "functionz": "functions",
		"url-path-template": "urlPathTemplate", "typ": "type", "tpye": "type", "prot": "port",
		"fun": "", "description": "", "kind": "", "ports2": "", "types": "type", "x": "", "ip": "", "host": "",
		strings.Repeat("a", 100): "",
	} {
		got, ok := nearMiss(name, known)
		if ok != (want != "") || got != want {
			t.Errorf("nearMiss(%q) = %q, %v; want %q", name, got, ok, want)
		}
	}
}
