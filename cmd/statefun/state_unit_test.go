package main

import (
	"encoding/json"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/statefun-go/statefun/pkg/stateclient"
)

// normalizeArgs moves a state command's flags before its arguments and
// puts the arguments after "--", so that an argument may be a negative
// number or "-", and flags may come anywhere; a flag's value stays with
// it; "--" ends the flags; a long flag with one dash gets its second.
func TestNormalizeArgs(t *testing.T) {
	root := newRootCmd(newCLI(strings.NewReader(""), io.Discard, io.Discard))
	for _, tc := range []struct{ args, want []string }{
		{[]string{"state", "put", "a", "b", "c"}, []string{"state", "put", "--", "a", "b", "c"}},
		{[]string{"state", "put", "-o", "json", "a", "b"}, []string{"state", "put", "-o", "json", "--", "a", "b"}},
		{[]string{"state", "put", "a", "-o", "json", "b", "-q"}, []string{"state", "put", "-o", "json", "-q", "--", "a", "b"}},
		{[]string{"state", "put", "a", "b", "-5"}, []string{"state", "put", "--", "a", "b", "-5"}},
		{[]string{"state", "put", "a", "-.5", "-q"}, []string{"state", "put", "-q", "--", "a", "-.5"}},
		{[]string{"state", "put", "a", "-", "-q"}, []string{"state", "put", "-q", "--", "a", "-"}},
		{[]string{"state", "put", "-q", "--", "a", "-b", "-o"}, []string{"state", "put", "-q", "--", "a", "-b", "-o"}},
		{[]string{"state", "put", "a", "--", "-b"}, []string{"state", "put", "--", "a", "-b"}},
		{[]string{"state", "put", "--o=json", "--", "--"}, []string{"state", "put", "-o=json", "--", "--"}},
		{[]string{"--server", "http://x", "-o", "json", "state", "get", "a", "b", "c"}, []string{"state", "get", "--server", "http://x", "-o", "json", "--", "a", "b", "c"}},
		{[]string{"state", "history", "--limit", "-1", "a", "b", "c"}, []string{"state", "history", "--limit", "-1", "--", "a", "b", "c"}},
		{[]string{"state", "put", "-reason", "why", "a"}, []string{"state", "put", "--reason", "why", "--", "a"}},
		{[]string{"state", "ls", "-0", "a/b"}, []string{"state", "ls", "-0", "--", "a/b"}},
		{[]string{"state", "get", "-h"}, []string{"state", "get", "-h"}},
		{[]string{"run", "-module", "m.yaml", "extra"}, []string{"run", "--module", "m.yaml", "extra"}},
		{[]string{"frobnicate", "-x"}, []string{"frobnicate", "-x"}},
	} {
		if got := normalizeArgs(root, tc.args); !slices.Equal(got, tc.want) {
			t.Errorf("normalizeArgs(%q) = %q; want %q", tc.args, got, tc.want)
		}
	}
}

func TestUnifiedDiff(t *testing.T) {
	if d := unifiedDiff("a", "b", "x\n", "x\n"); d != "" {
		t.Errorf("equal: %q", d)
	}
	old := "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13\n14\n15\n"
	new := "1\n2\nthree\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13\n14\n15\n16\n"
	want := `--- old
+++ new
@@ -1,6 +1,6 @@
 1
 2
-3
+three
 4
 5
 6
@@ -13,3 +13,4 @@
 13
 14
 15
+16
`
	if d := unifiedDiff("old", "new", old, new); d != want {
		t.Errorf("diff:\n%s\nwant:\n%s", d, want)
	}
	// Changes 6 lines apart share a hunk.
	d := unifiedDiff("old", "new", "a\n1\n2\n3\n4\n5\n6\nb\n", "A\n1\n2\n3\n4\n5\n6\nB\n")
	want = "--- old\n+++ new\n@@ -1,8 +1,8 @@\n-a\n+A\n 1\n 2\n 3\n 4\n 5\n 6\n-b\n+B\n"
	if d != want {
		t.Errorf("diff:\n%s\nwant:\n%s", d, want)
	}
	if d := unifiedDiff("old", "new", "", "x\n"); d != "--- old\n+++ new\n@@ -0,0 +1 @@\n+x\n" {
		t.Errorf("from nothing: %q", d)
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"Bob": "Bob", "a/b": "a/b", "😀": "😀", "with space": "'with space'", "it's": `'it'\''s'`, "": "''", "$x": "'$x'",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestChangeOf(t *testing.T) {
	env := &stateclient.Envelope{Address: stateclient.EnvelopeAddress{Namespace: "n", Type: "t", ID: "i"}, State: "s",
		Typename: "io.statefun.types/int", Version: "3", Value: json.RawMessage("41"), ValueBase64: "DSkAAAA="}
	bin := &stateclient.Envelope{Address: env.Address, State: "s", Typename: "example/Blob", Version: "3", ValueBase64: "AAE="}
	for _, tc := range []struct {
		env    *stateclient.Envelope
		edited string
		body   string // "" for no change
		err    string
	}{
		{env, `{"value":41,"valueBase64":"DSkAAAA="}`, "", ""},
		{env, `{"value":41}`, "", ""},
		{env, "# just a comment\n", "", ""},
		{env, `{"value":42,"valueBase64":"DSkAAAA="}`, `{"typename":"io.statefun.types/int","value":42}`, ""},
		{env, `{"value":41,"valueBase64":"DSoAAAA="}`, `{"typename":"io.statefun.types/int","valueBase64":"DSoAAAA="}`, ""},
		{env, `{"value":43,"valueBase64":"DSoAAAA="}`, `{"typename":"io.statefun.types/int","value":43,"valueBase64":"DSoAAAA="}`, ""},
		{env, `{"typename":"io.statefun.types/long","value":41,"valueBase64":"DSkAAAA="}`, `{"typename":"io.statefun.types/long","value":41}`, ""},
		{env, `{"typename":"io.statefun.types/long","valueBase64":"DSkAAAA="}`, `{"typename":"io.statefun.types/long","valueBase64":"DSkAAAA="}`, ""},
		{env, `{"vaule":42}`, "", `unknown key "vaule"`},
		{env, `{"state":"other","value":42}`, "", `"state" was changed`},
		{env, `{"address":{"namespace":"n","type":"t","id":"j"},"value":42}`, "", `"address" was changed`},
		{env, `{"typename":"io.statefun.types/int"}`, "", "neither"},
		{env, `{"value":42} {}`, "", "more than one"},
		{env, `[1]`, "", "not a JSON object"},
		{bin, `{"value":null,"valueBase64":"AAE="}`, "", ""},
		{bin, `{"valueBase64":"AAI="}`, `{"typename":"example/Blob","valueBase64":"AAI="}`, ""},
		{bin, `{"value":{"a":1},"valueBase64":"AAE="}`, `{"typename":"example/Blob","value":{"a":1}}`, ""},
	} {
		ch, err := changeOf(tc.env, []byte(tc.edited))
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("changeOf(%s) = %v; want an error with %q", tc.edited, err, tc.err)
			}
		case err != nil:
			t.Errorf("changeOf(%s): %v", tc.edited, err)
		case tc.body == "" && ch != nil:
			t.Errorf("changeOf(%s) = %s; want no change", tc.edited, ch.body)
		case tc.body != "" && (ch == nil || string(ch.body) != tc.body):
			t.Errorf("changeOf(%s) = %+v; want %s", tc.edited, ch, tc.body)
		}
	}
}
