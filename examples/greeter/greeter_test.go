package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// This package links the official SDK, whose generated request-reply
// messages occupy the proto names io.statefun.sdk.reqreply.*, so it cannot
// also link our internal/protocol. The tests build requests in the protobuf
// text format and read replies through protojson, using the message
// descriptors the SDK registers.

// fromFunction mirrors the protojson form of a FromFunction.
type fromFunction struct {
	InvocationResult *struct {
		StateMutations []struct {
			MutationType string // "" is DELETE, the enum's zero
			StateName    string
			StateValue   typedValue
		}
		OutgoingMessages []struct {
			Target   address
			Argument typedValue
		}
		OutgoingEgresses []struct {
			EgressNamespace string
			EgressType      string
			Argument        typedValue
		}
	}
	IncompleteInvocationContext *struct {
		MissingValues []struct {
			StateName      string
			TypeTypename   string
			ExpirationSpec *struct{ Mode string }
		}
	}
}

type address struct{ Namespace, Type, Id string }

type typedValue struct {
	Typename string
	HasValue bool
	Value    []byte
}

func message(t *testing.T, name string) proto.Message {
	t.Helper()
	mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName("io.statefun.sdk.reqreply." + name))
	if err != nil {
		t.Fatal(err)
	}
	return mt.New().Interface()
}

// invoke POSTs a ToFunction, given in the protobuf text format, to the
// greeter over real HTTP and decodes the FromFunction.
func invoke(t *testing.T, url, toFunction string) fromFunction {
	t.Helper()
	req := message(t, "ToFunction")
	if err := prototext.Unmarshal([]byte(toFunction), req); err != nil {
		t.Fatalf("bad request text: %v\n%s", err, toFunction)
	}
	body, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(url, "application/octet-stream", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	reply, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("status %s, Content-Type %q: %s", resp.Status, resp.Header.Get("Content-Type"), reply)
	}
	from := message(t, "FromFunction")
	if err := proto.Unmarshal(reply, from); err != nil {
		t.Fatal(err)
	}
	j, err := protojson.Marshal(from)
	if err != nil {
		t.Fatal(err)
	}
	var out fromFunction
	if err := json.Unmarshal(j, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func startGreeter(t *testing.T) string {
	srv := httptest.NewServer(newMux())
	t.Cleanup(srv.Close)
	return srv.URL + "/statefun"
}

// intState is the bytes of an io.statefun.types/int: an IntWrapper, whose
// field 1 is an sfixed32.
func intState(v int32) []byte {
	b := protowire.AppendTag(nil, 1, protowire.Fixed32Type)
	return protowire.AppendFixed32(b, uint32(v))
}

func decodeInt(t *testing.T, b []byte) int32 {
	t.Helper()
	if len(b) == 0 {
		return 0 // proto3 zero
	}
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 || num != 1 || typ != protowire.Fixed32Type {
		t.Fatalf("not an IntWrapper: % x", b)
	}
	v, m := protowire.ConsumeFixed32(b[n:])
	if m < 0 {
		t.Fatalf("not an IntWrapper: % x", b)
	}
	return int32(v)
}

// personRequest is a batch for example/person/<name> carrying one ingress
// message; state is the text of its state entries.
func personRequest(name, state string) string {
	return fmt.Sprintf(`invocation {
		target { namespace: "example" type: "person" id: %q }
		%s
		invocations { argument { typename: "example/GreetRequest" has_value: true value: %q } }
	}`, name, state, fmt.Sprintf(`{"name": %q}`, name))
}

func TestPersonRegistersVisits(t *testing.T) {
	url := startGreeter(t)
	from := invoke(t, url, personRequest("Alice", ""))
	inc := from.IncompleteInvocationContext
	if inc == nil || len(inc.MissingValues) != 1 {
		t.Fatalf("want one missing value, got %+v", from)
	}
	mv := inc.MissingValues[0]
	if mv.StateName != "visits" || mv.TypeTypename != "io.statefun.types/int" || mv.ExpirationSpec == nil || mv.ExpirationSpec.Mode != "" {
		t.Errorf("missing value %+v, want visits as an int with expiration mode NONE", mv)
	}
}

func TestPersonCountsVisitsAndMessagesGreeter(t *testing.T) {
	url := startGreeter(t)
	for _, tc := range []struct {
		state string
		want  int32
	}{
		{`state { state_name: "visits" }`, 1}, // registered, no value yet
		{fmt.Sprintf(`state { state_name: "visits" state_value { typename: "io.statefun.types/int" has_value: true value: %q } }`, intState(2)), 3},
	} {
		from := invoke(t, url, personRequest("Alice", tc.state))
		res := from.InvocationResult
		if res == nil {
			t.Fatalf("want an invocation result, got %+v", from)
		}
		if len(res.StateMutations) != 1 {
			t.Fatalf("mutations %+v, want one", res.StateMutations)
		}
		m := res.StateMutations[0]
		if m.MutationType != "MODIFY" || m.StateName != "visits" || m.StateValue.Typename != "io.statefun.types/int" || !m.StateValue.HasValue {
			t.Errorf("mutation %+v, want MODIFY of visits as io.statefun.types/int", m)
		}
		if got := decodeInt(t, m.StateValue.Value); got != tc.want {
			t.Errorf("visits = %d, want %d", got, tc.want)
		}
		if len(res.OutgoingMessages) != 1 {
			t.Fatalf("outgoing %+v, want one message", res.OutgoingMessages)
		}
		out := res.OutgoingMessages[0]
		if out.Target != (address{"example", "greeter", "Alice"}) || out.Argument.Typename != "example/GreetRequest" {
			t.Errorf("message %+v, want an example/GreetRequest to example/greeter/Alice", out)
		}
		var req GreetRequest
		if err := json.Unmarshal(out.Argument.Value, &req); err != nil || req != (GreetRequest{Name: "Alice", Visits: tc.want}) {
			t.Errorf("message value %q (%v), want name Alice and visits %d", out.Argument.Value, err, tc.want)
		}
		if len(res.OutgoingEgresses) != 0 {
			t.Errorf("person egressed %+v", res.OutgoingEgresses)
		}
	}
}

func TestGreeterEgressesGreetings(t *testing.T) {
	url := startGreeter(t)
	var invs string
	for v := 1; v <= 5; v++ {
		invs += fmt.Sprintf(`invocations {
			caller { namespace: "example" type: "person" id: "Bob" }
			argument { typename: "example/GreetRequest" has_value: true value: %q }
		}`, fmt.Sprintf(`{"name":"Bob","visits":%d}`, v))
	}
	from := invoke(t, url, `invocation { target { namespace: "example" type: "greeter" id: "Bob" } `+invs+` }`)
	res := from.InvocationResult
	if res == nil || len(res.OutgoingEgresses) != 5 {
		t.Fatalf("want five egress records, got %+v", from)
	}
	seen := map[string]bool{}
	for i, eg := range res.OutgoingEgresses {
		if eg.EgressNamespace != "io.statefun.playground" || eg.EgressType != "egress" || eg.Argument.Typename != "io.statefun.playground/EgressRecord" {
			t.Errorf("egress %+v, want an EgressRecord for io.statefun.playground/egress", eg)
		}
		var rec EgressRecord
		if err := json.Unmarshal(eg.Argument.Value, &rec); err != nil {
			t.Fatal(err)
		}
		want := EgressRecord{Topic: "greetings", Payload: Greeting("Bob", int32(i+1))}
		if rec != want {
			t.Errorf("record %d = %+v, want %+v", i, rec, want)
		}
		seen[rec.Payload] = true
	}
	if len(seen) != 5 {
		t.Errorf("greetings are not all different: %v", seen)
	}
	if len(res.StateMutations) != 0 || len(res.OutgoingMessages) != 0 {
		t.Errorf("greeter had other effects: %+v", res)
	}
}

func TestGreetingTexts(t *testing.T) {
	got := []string{Greeting("Alice", 1), Greeting("Alice", 2), Greeting("Alice", 3), Greeting("Alice", 4), Greeting("Alice", 10)}
	want := []string{
		"Hello Alice! Welcome, this is your first visit.",
		"Hello Alice! Nice to see you again.",
		"Hello Alice! Third time is a charm.",
		"Hello Alice! Happy to see you once again: this is visit number 4.",
		"Hello Alice! Happy to see you once again: this is visit number 10.",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("greetings\n got %q\nwant %q", got, want)
	}
}

func TestRejectsOtherMessages(t *testing.T) {
	url := startGreeter(t)
	req := message(t, "ToFunction")
	if err := prototext.Unmarshal([]byte(`invocation {
		target { namespace: "example" type: "person" id: "Eve" }
		state { state_name: "visits" }
		invocations { argument { typename: "io.statefun.types/string" has_value: true value: "\n\x03Eve" } }
	}`), req); err != nil {
		t.Fatal(err)
	}
	body, _ := proto.Marshal(req)
	resp, err := http.Post(url, "application/octet-stream", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError {
		t.Errorf("status %d, want 500", resp.StatusCode)
	}
}
