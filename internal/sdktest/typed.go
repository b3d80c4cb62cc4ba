package sdktest

import (
	"encoding/json"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/statefun-go/statefun/internal/protocol"
)

// Typenames of the StateFun built-in types.
const (
	TypeBool    = "io.statefun.types/bool"
	TypeInt32   = "io.statefun.types/int"
	TypeInt64   = "io.statefun.types/long"
	TypeFloat32 = "io.statefun.types/float"
	TypeFloat64 = "io.statefun.types/double"
	TypeString  = "io.statefun.types/string"
)

// ErrNoValue is returned by the Decode functions when the typed value is nil
// or has has_value unset.
var ErrNoValue = errors.New("sdktest: typed value has no value")

// BoolValue encodes v as an io.statefun.types/bool (a BooleanWrapper).
func BoolValue(v bool) *protocol.TypedValue {
	return wrap(TypeBool, &protocol.BooleanWrapper{Value: v})
}

// Int32Value encodes v as an io.statefun.types/int (an IntWrapper).
func Int32Value(v int32) *protocol.TypedValue { return wrap(TypeInt32, &protocol.IntWrapper{Value: v}) }

// Int64Value encodes v as an io.statefun.types/long (a LongWrapper).
func Int64Value(v int64) *protocol.TypedValue {
	return wrap(TypeInt64, &protocol.LongWrapper{Value: v})
}

// Float32Value encodes v as an io.statefun.types/float (a FloatWrapper).
func Float32Value(v float32) *protocol.TypedValue {
	return wrap(TypeFloat32, &protocol.FloatWrapper{Value: v})
}

// Float64Value encodes v as an io.statefun.types/double (a DoubleWrapper).
func Float64Value(v float64) *protocol.TypedValue {
	return wrap(TypeFloat64, &protocol.DoubleWrapper{Value: v})
}

// StringValue encodes v as an io.statefun.types/string (a StringWrapper).
func StringValue(v string) *protocol.TypedValue {
	return wrap(TypeString, &protocol.StringWrapper{Value: v})
}

// JSONValue encodes v with encoding/json under typename. It panics when v
// cannot be marshalled, which is a bug in the calling test.
func JSONValue(typename string, v any) *protocol.TypedValue {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("sdktest: JSONValue(%s): %v", typename, err))
	}
	return &protocol.TypedValue{Typename: typename, HasValue: true, Value: b}
}

// CommandValue encodes c as an sdktest/Command message.
func CommandValue(c Command) *protocol.TypedValue { return JSONValue(CommandType, c) }

// RawValue is a typed value carrying b unchanged, as the playground ingress
// and Kafka ingress deliver it.
func RawValue(typename string, b []byte) *protocol.TypedValue {
	return &protocol.TypedValue{Typename: typename, HasValue: true, Value: b}
}

func wrap(typename string, m proto.Message) *protocol.TypedValue {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("sdktest: marshal %s: %v", typename, err))
	}
	return &protocol.TypedValue{Typename: typename, HasValue: true, Value: b}
}

// DecodeBool decodes an io.statefun.types/bool.
func DecodeBool(tv *protocol.TypedValue) (bool, error) {
	var w protocol.BooleanWrapper
	err := unwrap(tv, TypeBool, &w)
	return w.GetValue(), err
}

// DecodeInt32 decodes an io.statefun.types/int.
func DecodeInt32(tv *protocol.TypedValue) (int32, error) {
	var w protocol.IntWrapper
	err := unwrap(tv, TypeInt32, &w)
	return w.GetValue(), err
}

// DecodeInt64 decodes an io.statefun.types/long.
func DecodeInt64(tv *protocol.TypedValue) (int64, error) {
	var w protocol.LongWrapper
	err := unwrap(tv, TypeInt64, &w)
	return w.GetValue(), err
}

// DecodeFloat32 decodes an io.statefun.types/float.
func DecodeFloat32(tv *protocol.TypedValue) (float32, error) {
	var w protocol.FloatWrapper
	err := unwrap(tv, TypeFloat32, &w)
	return w.GetValue(), err
}

// DecodeFloat64 decodes an io.statefun.types/double.
func DecodeFloat64(tv *protocol.TypedValue) (float64, error) {
	var w protocol.DoubleWrapper
	err := unwrap(tv, TypeFloat64, &w)
	return w.GetValue(), err
}

// DecodeString decodes an io.statefun.types/string.
func DecodeString(tv *protocol.TypedValue) (string, error) {
	var w protocol.StringWrapper
	err := unwrap(tv, TypeString, &w)
	return w.GetValue(), err
}

// DecodeJSON unmarshals a JSON typed value of the given typename into out.
// Both the Go SDK's output (ending in a newline) and the JS SDK's are read.
func DecodeJSON(tv *protocol.TypedValue, typename string, out any) error {
	if err := check(tv, typename); err != nil {
		return err
	}
	if err := json.Unmarshal(tv.GetValue(), out); err != nil {
		return fmt.Errorf("sdktest: %s: %w", typename, err)
	}
	return nil
}

// DecodeAny decodes a built-in typed value to bool, int32, int64, float32,
// float64 or string, and any other typed value to its raw bytes.
func DecodeAny(tv *protocol.TypedValue) (any, error) {
	switch tv.GetTypename() {
	case TypeBool:
		return DecodeBool(tv)
	case TypeInt32:
		return DecodeInt32(tv)
	case TypeInt64:
		return DecodeInt64(tv)
	case TypeFloat32:
		return DecodeFloat32(tv)
	case TypeFloat64:
		return DecodeFloat64(tv)
	case TypeString:
		return DecodeString(tv)
	}
	if err := check(tv, tv.GetTypename()); err != nil {
		return nil, err
	}
	return tv.GetValue(), nil
}

// DecodeEgressRecord reads a playground egress record
// (io.statefun.playground/egress carrying an
// io.statefun.playground/EgressRecord).
func DecodeEgressRecord(m *protocol.FromFunction_EgressMessage) (EgressRecord, error) {
	if got := m.GetEgressNamespace() + "/" + m.GetEgressType(); got != PlaygroundEgress {
		return EgressRecord{}, fmt.Errorf("sdktest: egress %q, want %q", got, PlaygroundEgress)
	}
	var rec EgressRecord
	err := DecodeJSON(m.GetArgument(), EgressRecordType, &rec)
	return rec, err
}

// DecodeReport reads the Report a feature function egressed.
func DecodeReport(m *protocol.FromFunction_EgressMessage) (Report, error) {
	rec, err := DecodeEgressRecord(m)
	if err != nil {
		return Report{}, err
	}
	return rec.Report()
}

func unwrap(tv *protocol.TypedValue, typename string, m proto.Message) error {
	if err := check(tv, typename); err != nil {
		return err
	}
	if err := proto.Unmarshal(tv.GetValue(), m); err != nil {
		return fmt.Errorf("sdktest: %s: %w", typename, err)
	}
	return nil
}

func check(tv *protocol.TypedValue, typename string) error {
	if tv == nil || !tv.GetHasValue() {
		return ErrNoValue
	}
	if tv.GetTypename() != typename {
		return fmt.Errorf("sdktest: typed value is a %q, want %q", tv.GetTypename(), typename)
	}
	return nil
}
