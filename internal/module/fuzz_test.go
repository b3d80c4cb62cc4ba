package module

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/endpointurl"
)

// FuzzParse feeds arbitrary files to the loader. Whatever the input, Parse
// must not panic or hang, every error must name the file and, when it is
// inside a document, its line, and a module that loads must have a
// component and bind function types only to URLs the invoker can call.
//
// The seed corpus is testdata/*.yaml, the example modules and the
// tests' fuzz corpus, so `go test` (and make test) runs it as a normal
// test. Bounded fuzzing:
//
//	go test ./internal/module -run '^$' -fuzz '^FuzzParse$' -fuzztime 20s
func FuzzParse(f *testing.F) {
	seeds, err := filepath.Glob("testdata/*.yaml")
	if err != nil {
		f.Fatal(err)
	}
	seeds = append(seeds, "../../examples/greeter/module.yaml")
	for _, path := range seeds {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{"", "---\n", "~", "- a\n", "kind: [\n", "a: &a [*a]\n", greeterModule,
		ki(ingressBody), ki(ingressBody + "  startupPosition: {type: date, date: \"2024-03-01 08:00:00.000 +0100\"}\n"),
		ki(ingressBody + "  startupPosition:\n    type: specific-offsets\n    offsets:\n      - t/0: 1\n  properties:\n    - client.id: c\n"),
		ke("  id: a/out\n  address: k:1\n  deliverySemantic: {type: exactly-once, transactionTimeoutMillis: 1000}\n")} {
		f.Add([]byte(s))
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		const name = "fuzz.yaml"
		m, err := Parse(name, data)
		if err != nil {
			if m != nil {
				t.Fatalf("Parse returned a module and an error: %v", err)
			}
			var errs Errors
			if !errors.As(err, &errs) || len(errs) == 0 {
				t.Fatalf("error %T is not a non-empty Errors: %v", err, err)
			}
			for _, e := range errs {
				checkPositioned(t, e, name)
			}
			return
		}
		if len(m.Endpoints)+len(m.Ingresses)+len(m.Egresses)+len(m.KafkaIngresses)+len(m.KafkaEgresses) == 0 {
			t.Fatalf("a module without components loaded")
		}
		for _, in := range m.KafkaIngresses {
			if in.ID.IsZero() || in.Address == "" || in.ConsumerGroupID == "" || len(in.Topics) == 0 {
				t.Fatalf("loaded an incomplete Kafka ingress %+v", in)
			}
			for _, tp := range in.Topics {
				if tp.Topic == "" || tp.ValueType == "" || len(tp.Targets) == 0 {
					t.Fatalf("loaded an incomplete Kafka topic %+v", tp)
				}
			}
		}
		for _, eg := range m.KafkaEgresses {
			if eg.ID.IsZero() || eg.Address == "" || (eg.Semantic == ExactlyOnce) != (eg.TransactionTimeout > 0) {
				t.Fatalf("loaded an inconsistent Kafka egress %+v", eg)
			}
		}
		for _, w := range m.Warnings {
			checkPositioned(t, w, name)
		}
		for _, e := range m.Endpoints {
			name := e.Functions.Name
			if e.Functions.Wildcard {
				name = "some-fn_1.v2"
			}
			u := e.URL(address.TypeName{Namespace: e.Functions.Namespace, Name: name})
			if _, err := endpointurl.Parse(u); err != nil {
				t.Fatalf("loaded endpoint %q expands to %q, which the invoker refuses: %v", e.URLPathTemplate, u, err)
			}
		}
	})
}

// checkPositioned fails unless e names the file and, when it is about a
// document, a line within the file.
func checkPositioned(t *testing.T, e *Error, file string) {
	t.Helper()
	if e.File != file {
		t.Fatalf("error without its file: %v", e)
	}
	if e.Document > 0 && e.Line <= 0 {
		t.Fatalf("error in document %d without a line: %v", e.Document, e)
	}
	if e.Msg == "" {
		t.Fatalf("error without a message: %+v", e)
	}
}

// TestMergeCycles: a mapping that merges itself, found by FuzzParse, used
// to recurse until the stack overflowed (a fatal error, not a panic), and
// aliases of aliases could make the merging exponential. Both are errors
// at the merge now.
func TestMergeCycles(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		line      int
		msg       string
	}{
		{"self", v2("  &s\n  <<: *s\n  functions: a/*\n  urlPathTemplate: http://h/\n"), 3, "a merge key (<<) refers to a mapping that contains it"},
		{"self in a list", v2("  &s\n  <<: [*s]\n  functions: a/*\n  urlPathTemplate: http://h/\n"), 3, "refers to a mapping that contains it"},
		{"through another", "a: &a {x: 1}\nkind: io.statefun.endpoints.v2/http\nspec: &s\n  <<: &b {<<: *s}\n", 3, "refers to a mapping that contains it"},
		{"exponential", func() string {
			src := "l0: &l0 {x: 1}\n"
			for i := 1; i <= 30; i++ {
				src += fmt.Sprintf("l%d: &l%d {<<: [*l%d, *l%d, *l%d]}\n", i, i, i-1, i-1, i-1)
			}
			return src + "kind: io.statefun.endpoints.v2/http\nspec: {<<: *l30, functions: a/*, urlPathTemplate: \"http://h/\"}\n"
		}(), 0, fmt.Sprintf("more than %d merge-key (<<) expansions", maxMerges)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("module.yaml", []byte(tc.src))
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("Parse = %v, want Errors", err)
			}
			var found bool
			for _, e := range errs {
				if strings.Contains(e.Msg, tc.msg) && (tc.line == 0 || e.Line == tc.line) && e.Line > 0 {
					found = true
				}
			}
			if !found {
				t.Errorf("got\n%v\nwant an error at line %d with %q", err, tc.line, tc.msg)
			}
		})
	}
}
