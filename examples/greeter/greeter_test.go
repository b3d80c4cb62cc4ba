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

	"google.golang.org/protobuf/proto"

	"github.com/statefun-go/statefun/internal/protocol"
)

func startGreeter(t *testing.T) string {
	srv := httptest.NewServer(newMux())
	t.Cleanup(srv.Close)
	return srv.URL + "/statefun"
}

// post sends a ToFunction to the greeter over real HTTP, as the runtime
// does, and returns the response with its body.
func post(t *testing.T, url string, req *protocol.ToFunction) (*http.Response, []byte) {
	t.Helper()
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
	return resp, reply
}

// invoke posts a ToFunction and decodes the FromFunction.
func invoke(t *testing.T, url string, req *protocol.ToFunction) *protocol.FromFunction {
	t.Helper()
	resp, reply := post(t, url, req)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("status %s, Content-Type %q: %s", resp.Status, resp.Header.Get("Content-Type"), reply)
	}
	var from protocol.FromFunction
	if err := proto.Unmarshal(reply, &from); err != nil {
		t.Fatal(err)
	}
	return &from
}

// batch is a ToFunction carrying one invocation batch for target.
func batch(target *protocol.Address, state []*protocol.ToFunction_PersistedValue, invs ...*protocol.ToFunction_Invocation) *protocol.ToFunction {
	return &protocol.ToFunction{Request: &protocol.ToFunction_Invocation_{
		Invocation: &protocol.ToFunction_InvocationBatchRequest{Target: target, State: state, Invocations: invs},
	}}
}

// greetValue is an example/GreetRequest carrying the JSON text j.
func greetValue(j string) *protocol.TypedValue {
	return &protocol.TypedValue{Typename: "example/GreetRequest", HasValue: true, Value: []byte(j)}
}

// personRequest is a batch for example/person/<name> carrying one ingress
// message and the given state entries.
func personRequest(name string, state ...*protocol.ToFunction_PersistedValue) *protocol.ToFunction {
	return batch(&protocol.Address{Namespace: "example", Type: "person", Id: name}, state,
		&protocol.ToFunction_Invocation{Argument: greetValue(fmt.Sprintf(`{"name": %q}`, name))})
}

// intValue is an io.statefun.types/int: an IntWrapper.
func intValue(t *testing.T, v int32) *protocol.TypedValue {
	t.Helper()
	b, err := proto.Marshal(&protocol.IntWrapper{Value: v})
	if err != nil {
		t.Fatal(err)
	}
	return &protocol.TypedValue{Typename: "io.statefun.types/int", HasValue: true, Value: b}
}

func decodeInt(t *testing.T, tv *protocol.TypedValue) int32 {
	t.Helper()
	var w protocol.IntWrapper
	if err := proto.Unmarshal(tv.GetValue(), &w); err != nil {
		t.Fatalf("not an IntWrapper: % x", tv.GetValue())
	}
	return w.GetValue()
}

func TestPersonRegistersVisits(t *testing.T) {
	url := startGreeter(t)
	from := invoke(t, url, personRequest("Alice"))
	missing := from.GetIncompleteInvocationContext().GetMissingValues()
	if len(missing) != 1 {
		t.Fatalf("want one missing value, got %v", from)
	}
	mv := missing[0]
	if mv.GetStateName() != "visits" || mv.GetTypeTypename() != "io.statefun.types/int" ||
		mv.GetExpirationSpec() == nil || mv.GetExpirationSpec().GetMode() != protocol.FromFunction_ExpirationSpec_NONE {
		t.Errorf("missing value %v, want visits as an int with expiration mode NONE", mv)
	}
}

func TestPersonCountsVisitsAndMessagesGreeter(t *testing.T) {
	url := startGreeter(t)
	for _, tc := range []struct {
		state *protocol.ToFunction_PersistedValue
		want  int32
	}{
		{&protocol.ToFunction_PersistedValue{StateName: "visits"}, 1}, // registered, no value yet
		{&protocol.ToFunction_PersistedValue{StateName: "visits", StateValue: intValue(t, 2)}, 3},
	} {
		from := invoke(t, url, personRequest("Alice", tc.state))
		res := from.GetInvocationResult()
		if res == nil {
			t.Fatalf("want an invocation result, got %v", from)
		}
		if len(res.GetStateMutations()) != 1 {
			t.Fatalf("mutations %v, want one", res.GetStateMutations())
		}
		m := res.GetStateMutations()[0]
		if m.GetMutationType() != protocol.FromFunction_PersistedValueMutation_MODIFY || m.GetStateName() != "visits" ||
			m.GetStateValue().GetTypename() != "io.statefun.types/int" || !m.GetStateValue().GetHasValue() {
			t.Errorf("mutation %v, want MODIFY of visits as io.statefun.types/int", m)
		}
		if got := decodeInt(t, m.GetStateValue()); got != tc.want {
			t.Errorf("visits = %d, want %d", got, tc.want)
		}
		if len(res.GetOutgoingMessages()) != 1 {
			t.Fatalf("outgoing %v, want one message", res.GetOutgoingMessages())
		}
		out := res.GetOutgoingMessages()[0]
		if !proto.Equal(out.GetTarget(), &protocol.Address{Namespace: "example", Type: "greeter", Id: "Alice"}) ||
			out.GetArgument().GetTypename() != "example/GreetRequest" {
			t.Errorf("message %v, want an example/GreetRequest to example/greeter/Alice", out)
		}
		var req GreetRequest
		if err := json.Unmarshal(out.GetArgument().GetValue(), &req); err != nil || req != (GreetRequest{Name: "Alice", Visits: tc.want}) {
			t.Errorf("message value %q (%v), want name Alice and visits %d", out.GetArgument().GetValue(), err, tc.want)
		}
		if len(res.GetOutgoingEgresses()) != 0 {
			t.Errorf("person egressed %v", res.GetOutgoingEgresses())
		}
	}
}

func TestGreeterEgressesGreetings(t *testing.T) {
	url := startGreeter(t)
	bob := &protocol.Address{Namespace: "example", Type: "person", Id: "Bob"}
	var invs []*protocol.ToFunction_Invocation
	for v := 1; v <= 5; v++ {
		invs = append(invs, &protocol.ToFunction_Invocation{
			Caller:   bob,
			Argument: greetValue(fmt.Sprintf(`{"name":"Bob","visits":%d}`, v)),
		})
	}
	from := invoke(t, url, batch(&protocol.Address{Namespace: "example", Type: "greeter", Id: "Bob"}, nil, invs...))
	res := from.GetInvocationResult()
	if len(res.GetOutgoingEgresses()) != 5 {
		t.Fatalf("want five egress records, got %v", from)
	}
	seen := map[string]bool{}
	for i, eg := range res.GetOutgoingEgresses() {
		if eg.GetEgressNamespace() != "io.statefun.playground" || eg.GetEgressType() != "egress" ||
			eg.GetArgument().GetTypename() != "io.statefun.playground/EgressRecord" {
			t.Errorf("egress %v, want an EgressRecord for io.statefun.playground/egress", eg)
		}
		var rec EgressRecord
		if err := json.Unmarshal(eg.GetArgument().GetValue(), &rec); err != nil {
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
	if len(res.GetStateMutations()) != 0 || len(res.GetOutgoingMessages()) != 0 {
		t.Errorf("greeter had other effects: %v", res)
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
	name, err := proto.Marshal(&protocol.StringWrapper{Value: "Eve"})
	if err != nil {
		t.Fatal(err)
	}
	req := batch(&protocol.Address{Namespace: "example", Type: "person", Id: "Eve"},
		[]*protocol.ToFunction_PersistedValue{{StateName: "visits"}},
		&protocol.ToFunction_Invocation{Argument: &protocol.TypedValue{Typename: "io.statefun.types/string", HasValue: true, Value: name}})
	if resp, _ := post(t, url, req); resp.StatusCode != http.StatusInternalServerError {
		t.Errorf("status %d, want 500", resp.StatusCode)
	}
}
