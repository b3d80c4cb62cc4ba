package sdktest

import (
	"fmt"
	"testing"

	"github.com/statefun-go/statefun/internal/protocol"
)

func TestCounterCountsEveryMessage(t *testing.T) {
	srv := StartCounterServer(t)
	target := Address(CounterFn, "c1")

	from := Invoke(t, srv.URL, Request(target, nil, Invocation(nil, StringValue("x"))))
	missing := from.GetIncompleteInvocationContext().GetMissingValues()
	if len(missing) != 1 || missing[0].GetStateName() != CounterState || missing[0].GetTypeTypename() != TypeInt64 ||
		missing[0].GetExpirationSpec().GetMode() != protocol.FromFunction_ExpirationSpec_NONE {
		t.Fatalf("missing values = %v, want count as a long without expiration", missing)
	}

	s := NewSession(srv.URL, target)
	var payloads []string
	for _, batch := range [][]*protocol.ToFunction_Invocation{
		{Invocation(nil, StringValue("emit"))},
		{Invocation(Address("a/b", "c"), Int32Value(5)), Invocation(nil, RawValue("any/thing", []byte("{}")))},
	} {
		res := s.Call(t, batch...)
		for _, m := range res.GetOutgoingEgresses() {
			rec, err := DecodeEgressRecord(m)
			if err != nil {
				t.Fatal(err)
			}
			if rec.Topic != CounterTopic {
				t.Errorf("topic %q, want %q", rec.Topic, CounterTopic)
			}
			payloads = append(payloads, rec.Payload)
		}
	}
	if got, want := fmt.Sprint(payloads), "[c1:1 c1:2 c1:3]"; got != want {
		t.Errorf("payloads %s, want %s", got, want)
	}
	if v, err := DecodeInt64(s.Value(CounterState)); err != nil || v != 3 {
		t.Errorf("count = %d, %v; want 3", v, err)
	}

	srv.Close()
	if _, err := Post(t.Context(), srv.URL, Request(target, nil, Invocation(nil, StringValue("x")))); err == nil {
		t.Error("the closed counter server still answers")
	}
}
