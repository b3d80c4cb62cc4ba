package types

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/statefun-go/statefun/internal/protocol"
)

// The typenames of the built-in scalar types, as every SDK spells them.
const (
	Bool   = "io.statefun.types/bool"
	Int    = "io.statefun.types/int"
	Long   = "io.statefun.types/long"
	Float  = "io.statefun.types/float"
	Double = "io.statefun.types/double"
	String = "io.statefun.types/string"
)

// kind is a built-in scalar type, or kindNone for a user type.
type kind uint8

const (
	kindNone kind = iota
	kindBool
	kindInt
	kindLong
	kindFloat
	kindDouble
	kindString
)

func kindOf(typename string) kind {
	switch typename {
	case Bool:
		return kindBool
	case Int:
		return kindInt
	case Long:
		return kindLong
	case Float:
		return kindFloat
	case Double:
		return kindDouble
	case String:
		return kindString
	}
	return kindNone
}

func (k kind) typename() string {
	return [...]string{kindNone: "", kindBool: Bool, kindInt: Int, kindLong: Long,
		kindFloat: Float, kindDouble: Double, kindString: String}[k]
}

// wireType is the protobuf wire type of the wrapper's field 1.
func (k kind) wireType() protowire.Type {
	switch k {
	case kindBool:
		return protowire.VarintType
	case kindInt, kindFloat:
		return protowire.Fixed32Type
	case kindLong, kindDouble:
		return protowire.Fixed64Type
	}
	return protowire.BytesType
}

// IsScalar reports whether typename is one of the six built-in scalar types.
func IsScalar(typename string) bool { return kindOf(typename) != kindNone }

// scalar is a decoded value of a built-in type. Floats keep their own width so
// that a NaN's payload survives decode and encode unchanged.
type scalar struct {
	k   kind
	b   bool    // kindBool
	i   int64   // kindInt (within int32) and kindLong
	f32 float32 // kindFloat
	f64 float64 // kindDouble
	s   string  // kindString
}

// encode returns the wrapper's bytes, marshaled by the protobuf runtime as the
// Go SDK does. It fails only for a string that is not UTF-8.
func (v scalar) encode() ([]byte, error) {
	var m proto.Message
	switch v.k {
	case kindBool:
		m = &protocol.BooleanWrapper{Value: v.b}
	case kindInt:
		m = &protocol.IntWrapper{Value: int32(v.i)}
	case kindLong:
		m = &protocol.LongWrapper{Value: v.i}
	case kindFloat:
		m = &protocol.FloatWrapper{Value: v.f32}
	case kindDouble:
		m = &protocol.DoubleWrapper{Value: v.f64}
	case kindString:
		m = &protocol.StringWrapper{Value: v.s}
	default:
		panic("types: encode of a user type")
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(m)
}

// Validate returns nil when value is the canonical encoding of a value of the
// built-in scalar type typename (see the package doc, "Strict decoding"), and
// an error wrapping ErrMalformed otherwise. Bytes of any other typename are
// always valid: their format is the function's business.
func Validate(typename string, value []byte) error {
	k := kindOf(typename)
	if k == kindNone {
		return nil
	}
	_, err := decode(k, value)
	return err
}

// decode parses the canonical encoding of a k. The scan gives the value and a
// precise reason for bytes that are not a wrapper at all; the final comparison
// with the re-encoded value makes "accepted" mean "exactly what the SDKs
// write" whatever the scan missed.
func decode(k kind, b []byte) (scalar, error) {
	v := scalar{k: k}
	if len(b) == 0 {
		return v, nil
	}
	bad := func(format string, args ...any) (scalar, error) {
		return scalar{}, newError(ErrMalformed, k.typename(), "%s value is malformed: %s (bytes: %s)",
			k.typename(), fmt.Sprintf(format, args...), hexBytes(b))
	}
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return bad("no field tag at the start (%v)", protowire.ParseError(n))
	}
	if num != 1 {
		return bad("field %d, but the wrapper has only field 1; these bytes are of some other type", num)
	}
	if want := k.wireType(); typ != want {
		return bad("field 1 has wire type %s, want %s%s", wireTypeName(typ), wireTypeName(want), lookLike(typ))
	}
	rest := b[n:]
	switch typ {
	case protowire.VarintType:
		x, m := protowire.ConsumeVarint(rest)
		if m < 0 {
			return bad("truncated varint")
		}
		if x > 1 {
			return bad("a bool is 0 or 1, got %d", x)
		}
		v.b = x == 1
		rest = rest[m:]
	case protowire.Fixed32Type:
		x, m := protowire.ConsumeFixed32(rest)
		if m < 0 {
			return bad("truncated: 4 bytes after the tag wanted, %d present", len(rest))
		}
		if k == kindInt {
			v.i = int64(int32(x))
		} else {
			v.f32 = math.Float32frombits(x)
		}
		rest = rest[m:]
	case protowire.Fixed64Type:
		x, m := protowire.ConsumeFixed64(rest)
		if m < 0 {
			return bad("truncated: 8 bytes after the tag wanted, %d present", len(rest))
		}
		if k == kindLong {
			v.i = int64(x)
		} else {
			v.f64 = math.Float64frombits(x)
		}
		rest = rest[m:]
	case protowire.BytesType:
		s, m := protowire.ConsumeBytes(rest)
		if m < 0 {
			return bad("truncated: the length prefix is longer than the bytes")
		}
		if !utf8.Valid(s) {
			return bad("the string is not valid UTF-8")
		}
		v.s = string(s)
		rest = rest[m:]
	}
	if len(rest) > 0 {
		return bad("%d bytes after field 1", len(rest))
	}
	canon, err := v.encode()
	if err != nil {
		return bad("%v", err)
	}
	if !bytes.Equal(canon, b) {
		if len(canon) == 0 {
			return bad("an explicit zero value; the SDKs write %s as no bytes", v.text())
		}
		return bad("not the canonical encoding; the SDKs write %s as %s", v.text(), hexBytes(canon))
	}
	return v, nil
}

func wireTypeName(t protowire.Type) string {
	switch t {
	case protowire.VarintType:
		return "varint"
	case protowire.Fixed32Type:
		return "fixed32"
	case protowire.Fixed64Type:
		return "fixed64"
	case protowire.BytesType:
		return "length-delimited"
	case protowire.StartGroupType, protowire.EndGroupType:
		return "group"
	}
	return fmt.Sprintf("%d", t)
}

// lookLike names the built-in types whose field 1 has wire type t, as a hint
// for bytes sent under the wrong typename.
func lookLike(t protowire.Type) string {
	var names []string
	for k := kindBool; k <= kindString; k++ {
		if k.wireType() == t {
			names = append(names, k.typename())
		}
	}
	if len(names) == 0 {
		return ""
	}
	return "; these look like the bytes of " + strings.Join(names, " or ")
}
