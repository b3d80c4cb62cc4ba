package jobs

import (
	"strings"
	"testing"

	stypes "github.com/statefun-go/statefun/internal/types"
)

// TestExpressions evaluates expressions over values of every kind and
// checks the bytes stored, as a PUT of the JSON envelope would store them.
func TestExpressions(t *testing.T) {
	env, err := newEnv()
	if err != nil {
		t.Fatal(err)
	}
	enc := func(typename, text string) []byte {
		b, err := stypes.ParseText(typename, text)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, c := range []struct {
		name, typename, value, expr, want, wantType string
	}{
		{"long + 1", stypes.Long, "41", "value + 1", "42", ""},
		{"a long beyond 2^53 stays exact", stypes.Long, "9007199254740993", "value + 1", "9007199254740994", ""},
		{"int", stypes.Int, "7", "value * 3", "21", ""},
		{"double", stypes.Double, "1.5", "value * 2.0", "3", ""},
		{"bool", stypes.Bool, "true", "!value", "false", ""},
		{"string", stypes.String, "bob", "value.upperAscii()", "BOB", ""},
		{"string to long", stypes.String, "12", "int(value)", "12", stypes.Long},
		{"long to string", stypes.Long, "12", "string(value)", "12", stypes.String},
		{"json", "test/Doc", `{"n":1,"tags":["a"]}`, `{"n": value.n + 1, "tags": value.tags + ["b"]}`, `{"n":2,"tags":["a","b"]}`, ""},
		{"json, the id and state", "test/Doc", `{}`, `{"who": id + "/" + state}`, `{"who":"i/s"}`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := input{ID: "i", State: "s", Typename: c.typename, Value: enc(c.typename, c.value), Version: 3}
			if c.typename == "test/Doc" {
				in.Value = []byte(c.value)
			}
			p, err := compile(env, "action.expr", c.expr, false)
			if err != nil {
				t.Fatal(err)
			}
			vars, err := in.vars()
			if err != nil {
				t.Fatal(err)
			}
			v, err := p.eval(vars)
			if err != nil {
				t.Fatal(err)
			}
			tn := c.typename
			if c.wantType != "" {
				tn = c.wantType
			}
			b, err := encode(tn, v)
			if err != nil {
				t.Fatal(err)
			}
			got := string(b)
			if tn != "test/Doc" {
				if got, err = stypes.Text(tn, b); err != nil {
					t.Fatal(err)
				}
			}
			if got != c.want {
				t.Fatalf("%s over %s = %q, want %q", c.expr, c.value, got, c.want)
			}
		})
	}
}

// TestExpressionErrors: what cannot be stored, or does not compile, says
// why.
func TestExpressionErrors(t *testing.T) {
	env, _ := newEnv()
	if _, err := compile(env, "select.where", "value +", true); err == nil || !strings.Contains(err.Error(), "select.where") {
		t.Fatalf("a syntax error: %v", err)
	}
	if _, err := compile(env, "select.where", `"x"`, true); err == nil || !strings.Contains(err.Error(), "want a bool") {
		t.Fatalf("a string predicate: %v", err)
	}
	if _, err := compile(env, "action.expr", strings.Repeat("1+", MaxExprBytes), false); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Fatalf("an expression too long: %v", err)
	}
	p, _ := compile(env, "action.expr", `"twelve"`, false)
	v, _ := p.eval(map[string]any{"value": int64(1), "id": "", "state": "", "typename": "", "version": int64(0)})
	if _, err := encode(stypes.Long, v); err == nil || !strings.Contains(err.Error(), "is not a io.statefun.types/long value") {
		t.Fatalf("a string for a long: %v", err)
	}
	p, _ = compile(env, "action.expr", `[1, 2].map(x, x / (x - 1))`, false)
	if _, err := p.eval(map[string]any{"value": int64(1), "id": "", "state": "", "typename": "", "version": int64(0)}); err == nil {
		t.Fatal("a division by zero evaluated")
	}
	p, _ = compile(env, "action.expr", `[1,2,3,4,5,6,7,8,9,10].map(a, [1,2,3,4,5,6,7,8,9,10].map(b, [1,2,3,4,5,6,7,8,9,10].map(c, [1,2,3,4,5,6,7,8,9,10].map(d, [1,2,3,4,5,6,7,8,9,10].map(e, [1,2,3,4,5,6,7,8,9,10].map(f, a+b+c+d+e+f))))))`, false)
	if _, err := p.eval(map[string]any{"value": int64(1), "id": "", "state": "", "typename": "", "version": int64(0)}); err == nil || !strings.Contains(err.Error(), "cost") {
		t.Fatalf("an expression over the cost limit: %v", err)
	}
}

// TestSelectIDs: prefix and range as the runner applies them.
func TestSelectIDs(t *testing.T) {
	s := Select{IDPrefix: "u-", IDFrom: "u-10", IDTo: "u-20"}
	for id, keep := range map[string]bool{"u-1": false, "u-10": true, "u-15": true, "u-20": false, "v-15": false} {
		if s.keepID(id) != keep {
			t.Errorf("keepID(%q) = %v, want %v", id, !keep, keep)
		}
	}
	if !s.pastEnd("u-20") || s.pastEnd("u-19") || !(Select{IDPrefix: "u-"}).pastEnd("v") {
		t.Error("pastEnd")
	}
	if a := s.scanAfter(); a >= "u-10" || !strings.HasPrefix("u-10", a) {
		t.Errorf("scanAfter = %q", a)
	}
}
