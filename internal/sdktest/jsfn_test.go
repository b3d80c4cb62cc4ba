package sdktest

import (
	"reflect"
	"testing"

	"github.com/statefun-go/statefun/internal/protocol"
)

// TestJSServer drives the official JavaScript SDK (testdata/jsfn/server.js)
// with hand-built requests.
func TestJSServer(t *testing.T) {
	url := StartJSServer(t)
	target := Address(JSCounterFn, "alice")

	// Registration: the JS SDK leaves expiration_spec unset without a TTL.
	from := Invoke(t, url, Request(target, nil, Invocation(nil, StringValue("Alice"))))
	inc := from.GetIncompleteInvocationContext()
	if inc == nil {
		t.Fatalf("want IncompleteInvocationContext, got %v", from)
	}
	got := map[string]string{}
	for _, m := range inc.GetMissingValues() {
		got[m.GetStateName()] = m.GetTypeTypename()
		if m.GetExpirationSpec() != nil {
			t.Errorf("state %q: expiration_spec %v, want unset", m.GetStateName(), m.GetExpirationSpec())
		}
	}
	if want := map[string]string{"seen": TypeInt32, "last_name": TypeString}; !reflect.DeepEqual(got, want) {
		t.Errorf("missing values %v, want %v", got, want)
	}

	// First call with both states present but empty.
	from = Invoke(t, url, Request(target, EmptyStates("seen", "last_name"),
		Invocation(nil, StringValue("Alice"))))
	res := from.GetInvocationResult()
	if res == nil {
		t.Fatalf("want an invocation result, got %v", from)
	}
	muts := map[string]*protocol.TypedValue{}
	for _, m := range res.GetStateMutations() {
		if m.GetMutationType() != protocol.FromFunction_PersistedValueMutation_MODIFY {
			t.Errorf("mutation %v, want MODIFY", m)
		}
		muts[m.GetStateName()] = m.GetStateValue()
	}
	if v, err := DecodeInt32(muts["seen"]); err != nil || v != 1 {
		t.Errorf("seen = %d, %v; want 1", v, err)
	}
	if v, err := DecodeString(muts["last_name"]); err != nil || v != "Alice" {
		t.Errorf("last_name = %q, %v; want Alice", v, err)
	}
	out := res.GetOutgoingMessages()
	if len(out) != 1 || AddressKey(out[0].GetTarget()) != "jsfn/echo/alice" {
		t.Fatalf("outgoing %v, want one message to jsfn/echo/alice", out)
	}
	if v, err := DecodeString(out[0].GetArgument()); err != nil || v != "1" {
		t.Errorf("message to echo = %q, %v; want \"1\"", v, err)
	}
	if eg := res.GetOutgoingEgresses(); len(eg) != 1 || mustRecord(t, eg[0]) != (EgressRecord{Topic: JSTopic, Payload: "alice:1"}) {
		t.Errorf("egress %v, want alice:1 on topic js", eg)
	}

	// A batch of two with state attached, one with a caller and raw bytes.
	from = Invoke(t, url, Request(target,
		[]*protocol.ToFunction_PersistedValue{State("seen", Int32Value(41)), State("last_name", StringValue("Alice"))},
		Invocation(Address("other/fn", "x"), StringValue("Bob")),
		Invocation(nil, RawValue("example/Raw", []byte("Carol")))))
	res = from.GetInvocationResult()
	if len(res.GetOutgoingMessages()) != 2 || len(res.GetOutgoingEgresses()) != 2 {
		t.Fatalf("result %v, want two messages and two records", res)
	}
	if rec := mustRecord(t, res.GetOutgoingEgresses()[1]); rec.Payload != "alice:43" {
		t.Errorf("second record %+v, want alice:43", rec)
	}
	for _, m := range res.GetStateMutations() {
		switch m.GetStateName() {
		case "seen":
			if v, _ := DecodeInt32(m.GetStateValue()); v != 43 {
				t.Errorf("seen = %d, want 43", v)
			}
		case "last_name":
			if v, _ := DecodeString(m.GetStateValue()); v != "Carol" {
				t.Errorf("last_name = %q, want Carol", v)
			}
		}
	}

	// The echo function reports its caller, or "none".
	echo := Address(JSEchoFn, "alice")
	from = Invoke(t, url, Request(echo, nil,
		Invocation(target, StringValue("1")),
		Invocation(nil, StringValue("2"))))
	var payloads []string
	for _, m := range from.GetInvocationResult().GetOutgoingEgresses() {
		payloads = append(payloads, mustRecord(t, m).Payload)
	}
	if want := []string{"echo:alice:jsfn/counter/alice", "echo:alice:none"}; !reflect.DeepEqual(payloads, want) {
		t.Errorf("echo payloads %q, want %q", payloads, want)
	}
}

func mustRecord(t *testing.T, m *protocol.FromFunction_EgressMessage) EgressRecord {
	t.Helper()
	rec, err := DecodeEgressRecord(m)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}
