package jobs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"cel.dev/cel-go/ext"

	stypes "github.com/statefun-go/statefun/internal/types"
)

// This file evaluates a job's expressions. They are CEL (the Common
// Expression Language, cel.dev): a small, side-effect-free language whose
// evaluation is bounded by a cost limit, so an operator's expression can
// neither loop forever nor reach anything but the entry it is given.
//
// An expression sees the entry as these variables:
//
//	value     the decoded value: a built-in scalar as bool, int, double or
//	          string; a value whose bytes are JSON as maps, lists, numbers
//	          (int when integral, else double), strings, bools and null;
//	          anything else as bytes
//	id        the instance id (string)
//	state     the state name (string)
//	typename  the value's typename (string)
//	version   the entry's version (int)
//
// with CEL's standard functions and its string extension (ext.Strings).

// MaxExprBytes caps the text of one expression.
const MaxExprBytes = 4096

// costLimit bounds one evaluation: an expression that would run longer
// (a comprehension over a huge value) fails with an error instead.
const costLimit = 1_000_000

// newEnv returns the CEL environment every expression compiles in.
func newEnv() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("value", cel.DynType),
		cel.Variable("id", cel.StringType),
		cel.Variable("state", cel.StringType),
		cel.Variable("typename", cel.StringType),
		cel.Variable("version", cel.IntType),
		// The string functions (lowerAscii, replace, split, ...): a
		// migration often reshapes text.
		ext.Strings(),
	)
}

// program is a compiled expression.
type program struct {
	src string
	prg cel.Program
}

// compile parses and checks one expression; wantBool requires it to give
// a bool (or a dynamic value, checked when it runs). The error names
// what (where or expr) and says what is wrong where, as CEL reports it.
func compile(env *cel.Env, what, src string, wantBool bool) (*program, error) {
	if len(src) > MaxExprBytes {
		return nil, fmt.Errorf("%s: %d bytes, at most %d", what, len(src), MaxExprBytes)
	}
	ast, iss := env.Compile(src)
	if iss != nil && iss.Err() != nil {
		return nil, fmt.Errorf("%s: %v", what, iss.Err())
	}
	if wantBool {
		if out := ast.OutputType(); !out.IsExactType(cel.BoolType) && !out.IsExactType(cel.DynType) {
			return nil, fmt.Errorf("%s: gives %s, want a bool (true selects the entry)", what, out)
		}
	}
	prg, err := env.Program(ast, cel.CostLimit(costLimit))
	if err != nil {
		return nil, fmt.Errorf("%s: %v", what, err)
	}
	return &program{src: src, prg: prg}, nil
}

// input is one entry as an expression sees it.
type input struct {
	ID, State, Typename string
	Value               []byte
	Version             uint64
}

// vars decodes the entry into the expression's variables.
func (in input) vars() (map[string]any, error) {
	v, err := decode(in.Typename, in.Value)
	if err != nil {
		return nil, err
	}
	return map[string]any{"value": v, "id": in.ID, "state": in.State, "typename": in.Typename,
		"version": int64(min(in.Version, math.MaxInt64))}, nil
}

// eval runs p over vars.
func (p *program) eval(vars map[string]any) (ref.Val, error) {
	out, _, err := p.prg.Eval(vars)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// test runs a predicate.
func (p *program) test(vars map[string]any) (bool, error) {
	out, err := p.eval(vars)
	if err != nil {
		return false, err
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, fmt.Errorf("where: gave %s, want a bool", out.Type())
	}
	return bool(b), nil
}

// decode turns stored bytes into the value an expression sees.
func decode(typename string, value []byte) (any, error) {
	raw, ok, err := stypes.JSONValue(typename, value)
	if err != nil {
		return nil, err
	}
	if !ok {
		return bytes.Clone(value), nil
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, fmt.Errorf("jobs: decode %s value: %v", typename, err)
	}
	return numbers(v), nil
}

// numbers replaces every json.Number in v by an int64 when it is one,
// else a float64: CEL keeps ints and doubles apart, and a counter must
// stay an int through value + 1.
func numbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = numbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = numbers(e)
		}
	}
	return v
}

// encode turns what an expression gave into the bytes of typename: bytes
// as they are, anything else through its JSON form (types.FromJSONValue),
// as a PUT of the JSON envelope would store it.
func encode(typename string, v ref.Val) ([]byte, error) {
	if b, ok := v.(types.Bytes); ok {
		return []byte(b), nil
	}
	n, err := native(v)
	if err != nil {
		return nil, err
	}
	j, err := json.Marshal(n)
	if err != nil {
		return nil, fmt.Errorf("expr: the result has no JSON form: %v", err)
	}
	out, err := stypes.FromJSONValue(typename, j)
	if err != nil {
		return nil, fmt.Errorf("expr: the result %s is not a %s value: %v", truncate(string(j), 64), typename, err)
	}
	return out, nil
}

// native converts a CEL value to what encoding/json marshals.
func native(v ref.Val) (any, error) {
	switch x := v.(type) {
	case types.Null:
		return nil, nil
	case types.Bool:
		return bool(x), nil
	case types.Int:
		return int64(x), nil
	case types.Uint:
		return uint64(x), nil
	case types.Double:
		f := float64(x)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, errors.New("expr: the result holds NaN or an infinity, which JSON cannot")
		}
		return f, nil
	case types.String:
		return string(x), nil
	case types.Bytes:
		return []byte(x), nil
	case types.Timestamp:
		return x.Time.UTC().Format(time.RFC3339Nano), nil
	case types.Duration:
		return x.Duration.String(), nil
	case traits.Mapper:
		out := map[string]any{}
		for it := x.Iterator(); it.HasNext() == types.True; {
			k := it.Next()
			ks, ok := k.(types.String)
			if !ok {
				return nil, fmt.Errorf("expr: a map key is %s; JSON keys are strings", k.Type())
			}
			e, err := native(x.Get(k))
			if err != nil {
				return nil, err
			}
			out[string(ks)] = e
		}
		return out, nil
	case traits.Lister:
		out := []any{}
		for it := x.Iterator(); it.HasNext() == types.True; {
			e, err := native(it.Next())
			if err != nil {
				return nil, err
			}
			out = append(out, e)
		}
		return out, nil
	case *types.Err:
		return nil, x
	}
	return nil, fmt.Errorf("expr: a result of type %s cannot be stored", v.Type())
}

// truncate cuts s to n bytes for an error message.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
