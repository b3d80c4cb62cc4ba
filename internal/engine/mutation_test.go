package engine

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
)

// An accepted mutation is stored and applied later, maybe by another
// process (a restart; a partition's new owner in cluster mode): every field
// the core reads must survive its stored form. The mutation is filled
// field by field by reflection, so a field added to partition.Mutation (or
// to what it holds) and not to the stored format fails here.
func TestMutationStoredFormKeepsEveryField(t *testing.T) {
	var m partition.Mutation
	fill(reflect.ValueOf(&m).Elem(), new(int))
	m.Request = 0 // the waiting caller's, in this process only

	stored, err := proto.MarshalOptions{Deterministic: true}.Marshal(mutationToProto(m))
	if err != nil {
		t.Fatal(err)
	}
	var p protocol.StateMutation
	if err := proto.Unmarshal(stored, &p); err != nil {
		t.Fatal(err)
	}
	back := mutationFromProto(&p)
	if back.Ack != AckAccepted {
		t.Errorf("Ack = %v, want AckAccepted (nobody waits for a stored mutation)", back.Ack)
	}
	for _, path := range zeroFields(reflect.ValueOf(*back), "Mutation") {
		if path == "Mutation.Request" || path == "Mutation.Repair.Entries[0].Spec" {
			// Request belongs to the caller; a reinstated entry's spec is
			// the registered one, looked up when it is applied.
			continue
		}
		t.Errorf("%s is lost in the stored form (protocol.StateMutation): add it to stored.proto and mutationToProto/FromProto", path)
	}
	again, err := proto.MarshalOptions{Deterministic: true}.Marshal(mutationToProto(*back))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stored, again) {
		t.Errorf("a stored mutation read back and stored again differs:\n%x\n%x", stored, again)
	}
}

// fill sets every field reachable from v to a distinct non-zero value
// (slices get one element, pointers a filled target; protobuf messages a
// small valid message).
func fill(v reflect.Value, n *int) {
	*n++
	if v.CanAddr() {
		switch p := v.Addr().Interface().(type) {
		case **protocol.Envelope:
			*p = &protocol.Envelope{Target: &protocol.Address{Namespace: "ns", Type: "t", Id: fmt.Sprint(*n)},
				Argument: &protocol.TypedValue{Typename: "x/y", HasValue: true, Value: []byte{byte(*n)}}}
			return
		case **protocol.TypedValue:
			*p = &protocol.TypedValue{Typename: "x/y", HasValue: true, Value: []byte{byte(*n)}}
			return
		}
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", *n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int32, reflect.Int64:
		v.SetInt(int64(*n))
	case reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(*n))
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			v.SetBytes([]byte{byte(*n)})
			return
		}
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0), n)
		v.Set(s)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(p.Elem(), n)
		v.Set(p)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), n)
			}
		}
	default:
		panic(fmt.Sprintf("fill: %s", v.Type()))
	}
}

// zeroFields lists the paths of the zero fields reachable from v.
func zeroFields(v reflect.Value, path string) []string {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return []string{path}
		}
		if _, ok := v.Interface().(proto.Message); ok {
			return nil // a message stored whole
		}
		return zeroFields(v.Elem(), path)
	case reflect.Slice:
		if v.Len() == 0 {
			return []string{path}
		}
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return nil
		}
		return zeroFields(v.Index(0), path+"[0]")
	case reflect.Struct:
		var out []string
		for i := range v.NumField() {
			if f := v.Type().Field(i); f.IsExported() {
				out = append(out, zeroFields(v.Field(i), path+"."+f.Name)...)
			}
		}
		return out
	default:
		if v.IsZero() {
			return []string{path}
		}
		return nil
	}
}
