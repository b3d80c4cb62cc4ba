package types

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"

	"github.com/apache/flink-statefun/statefun-sdk-go/v3/pkg/statefun"
)

// sdkCase is one value written by the official Go SDK v3.3.0.
type sdkCase struct {
	sdk  statefun.PrimitiveType
	val  any // the Go value handed to the SDK
	want scalar
}

func sdkCases() []sdkCase {
	var cs []sdkCase
	for _, b := range []bool{false, true} {
		cs = append(cs, sdkCase{statefun.BoolType, b, scalar{k: kindBool, b: b}})
	}
	for _, i := range []int32{0, 1, -1, 42, 255, 256, math.MaxInt32, math.MinInt32} {
		cs = append(cs, sdkCase{statefun.Int32Type, i, scalar{k: kindInt, i: int64(i)}})
	}
	for _, i := range []int64{0, 1, -1, 42, 1 << 32, 1<<53 + 1, math.MaxInt64, math.MinInt64} {
		cs = append(cs, sdkCase{statefun.Int64Type, i, scalar{k: kindLong, i: i}})
	}
	for _, f := range []float32{0, float32(math.Copysign(0, -1)), 3.5, 0.1, -2.75e-3, 16777217,
		math.MaxFloat32, math.SmallestNonzeroFloat32, float32(math.Inf(1)), float32(math.Inf(-1)),
		float32(math.NaN()), math.Float32frombits(0x7F800001), math.Float32frombits(0xFFC00000)} {
		cs = append(cs, sdkCase{statefun.Float32Type, f, scalar{k: kindFloat, f32: f}})
	}
	for _, f := range []float64{0, math.Copysign(0, -1), 3.5, 0.1, 1e21, 1e-7, 1e100, -123456.789,
		math.MaxFloat64, math.SmallestNonzeroFloat64, math.Inf(1), math.Inf(-1),
		math.NaN(), math.Float64frombits(0x7FF0000000000001)} {
		cs = append(cs, sdkCase{statefun.Float64Type, f, scalar{k: kindDouble, f64: f}})
	}
	for _, s := range []string{"", "a", "hé", "😀", "line\nbreak", string(bytes.Repeat([]byte("x"), 300))} {
		cs = append(cs, sdkCase{statefun.StringType, s, scalar{k: kindString, s: s}})
	}
	return cs
}

// TestAgainstGoSDK cross-checks the encodings with the official Go SDK: our
// bytes equal the SDK's Serialize, decode to the same value, and the SDK's
// Deserialize reads our bytes back; the text round trip gives the same bytes
// too, except for a NaN's payload.
func TestAgainstGoSDK(t *testing.T) {
	for _, tc := range sdkCases() {
		tn := tc.want.k.typename()
		if got := tc.sdk.GetTypeName().String(); got != tn {
			t.Fatalf("SDK typename %q, ours %q", got, tn)
		}
		var buf bytes.Buffer
		if err := tc.sdk.Serialize(&buf, tc.val); err != nil {
			t.Fatalf("SDK Serialize(%s, %v): %v", tn, tc.val, err)
		}
		sdkBytes := buf.Bytes()

		ours, err := tc.want.encode()
		if err != nil || !bytes.Equal(ours, sdkBytes) {
			t.Errorf("%s %v: ours % X (%v), SDK % X", tn, tc.val, ours, err, sdkBytes)
		}
		got, err := decode(tc.want.k, sdkBytes)
		if err != nil {
			t.Errorf("%s %v: decode(SDK % X): %v", tn, tc.val, sdkBytes, err)
		} else if !sameScalar(got, tc.want) {
			t.Errorf("%s %v: decode(SDK % X) = %+v", tn, tc.val, sdkBytes, got)
		}
		if !sdkReads(t, tc.sdk, ours, tc.val) {
			t.Errorf("%s %v: the SDK reads our % X differently", tn, tc.val, ours)
		}

		text, err := Text(tn, sdkBytes)
		if err != nil {
			t.Errorf("%s %v: Text: %v", tn, tc.val, err)
			continue
		}
		fromText, err := ParseText(tn, text)
		if err != nil {
			t.Errorf("%s %v: ParseText(%q): %v", tn, tc.val, text, err)
		} else if !bytes.Equal(fromText, sdkBytes) && !tc.want.isNaN() {
			t.Errorf("%s %v: ParseText(Text) = % X, SDK % X", tn, tc.val, fromText, sdkBytes)
		}
		j, _, _ := JSONValue(tn, sdkBytes)
		fromJSON, err := FromJSONValue(tn, j)
		if err != nil {
			t.Errorf("%s %v: FromJSONValue(%s): %v", tn, tc.val, j, err)
		} else if !bytes.Equal(fromJSON, sdkBytes) && !tc.want.isNaN() {
			t.Errorf("%s %v: FromJSONValue(JSONValue) = % X, SDK % X", tn, tc.val, fromJSON, sdkBytes)
		}
	}
}

// TestAgainstGoSDKJSON: the Go SDK's MakeJsonType bytes end with "\n" and
// survive Text and ParseText unchanged.
func TestAgainstGoSDKJSON(t *testing.T) {
	type user struct {
		Name   string   `json:"name"`
		Visits int      `json:"visits"`
		Tags   []string `json:"tags"`
	}
	jt := statefun.MakeJsonType(statefun.TypeNameFrom("example/user"))
	var buf bytes.Buffer
	if err := jt.Serialize(&buf, user{"Ada <3", 3, []string{"a&b"}}); err != nil {
		t.Fatal(err)
	}
	stored := buf.Bytes()
	if stored[len(stored)-1] != '\n' {
		t.Fatalf("MakeJsonType bytes %q do not end with a newline", stored)
	}
	text, err := Text("example/user", stored)
	if err != nil || text != string(stored) {
		t.Fatalf("Text = %q, %v; want %q", text, err, stored)
	}
	back, err := ParseText("example/user", text)
	if err != nil || !bytes.Equal(back, stored) {
		t.Fatalf("ParseText(Text) = %q, %v", back, err)
	}
	// The envelope's value (compacted) is still what the SDK reads.
	v, ok, err := JSONValue("example/user", stored)
	if err != nil || !ok {
		t.Fatalf("JSONValue: %v %v", ok, err)
	}
	fromJSON, err := FromJSONValue("example/user", v)
	if err != nil {
		t.Fatal(err)
	}
	var u user
	if err := jt.Deserialize(bytes.NewReader(fromJSON), &u); err != nil || u.Name != "Ada <3" || u.Visits != 3 {
		t.Fatalf("SDK Deserialize(%s) = %+v, %v", fromJSON, u, err)
	}
	if !json.Valid(fromJSON) {
		t.Fatalf("%q is not JSON", fromJSON)
	}
}

// sdkReads reports whether the SDK's Deserialize of b gives want, by bits for
// floats.
func sdkReads(t *testing.T, p statefun.PrimitiveType, b []byte, want any) bool {
	t.Helper()
	r := bytes.NewReader(b)
	var err error
	var ok bool
	switch w := want.(type) {
	case bool:
		var v bool
		err, ok = p.Deserialize(r, &v), v == w
	case int32:
		var v int32
		err, ok = p.Deserialize(r, &v), v == w
	case int64:
		var v int64
		err, ok = p.Deserialize(r, &v), v == w
	case float32:
		var v float32
		err, ok = p.Deserialize(r, &v), math.Float32bits(v) == math.Float32bits(w)
	case float64:
		var v float64
		err, ok = p.Deserialize(r, &v), math.Float64bits(v) == math.Float64bits(w)
	case string:
		var v string
		err, ok = p.Deserialize(r, &v), v == w
	}
	if err != nil {
		t.Errorf("SDK Deserialize(% X): %v", b, err)
	}
	return ok
}

// sameScalar compares two scalars, floats by bits.
func sameScalar(a, b scalar) bool {
	return a.k == b.k && a.b == b.b && a.i == b.i && a.s == b.s &&
		math.Float32bits(a.f32) == math.Float32bits(b.f32) &&
		math.Float64bits(a.f64) == math.Float64bits(b.f64)
}

func (v scalar) isNaN() bool {
	return v.k == kindFloat && v.f32 != v.f32 || v.k == kindDouble && math.IsNaN(v.f64)
}
