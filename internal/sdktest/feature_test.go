package sdktest

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/statefun-go/statefun/internal/kafkaegress"
	"github.com/statefun-go/statefun/internal/protocol"
)

func TestFeatureIncompleteContextListsEverySpec(t *testing.T) {
	srv := StartFeatureServer(t)
	from := Invoke(t, srv.URL, Request(Address(FeaturesFn, "spec"), nil,
		Invocation(nil, CommandValue(Command{Op: OpReport}))))
	inc := from.GetIncompleteInvocationContext()
	if inc == nil {
		t.Fatalf("want IncompleteInvocationContext, got %v", from)
	}
	type spec struct {
		typename string
		mode     protocol.FromFunction_ExpirationSpec_ExpireMode
		millis   int64
	}
	none := protocol.FromFunction_ExpirationSpec_NONE
	want := map[string]spec{
		StateBool:     {TypeBool, none, 0},
		StateInt32:    {TypeInt32, none, 0},
		StateInt64:    {TypeInt64, none, 0},
		StateFloat32:  {TypeFloat32, none, 0},
		StateFloat64:  {TypeFloat64, none, 0},
		StateString:   {TypeString, none, 0},
		StateDoc:      {DocType, none, 0},
		StateTTLWrite: {TypeString, protocol.FromFunction_ExpirationSpec_AFTER_WRITE, TTLWrite.Milliseconds()},
		StateTTLCall:  {TypeString, protocol.FromFunction_ExpirationSpec_AFTER_INVOKE, TTLCall.Milliseconds()},
	}
	got := map[string]spec{}
	for _, m := range inc.GetMissingValues() {
		// The Go SDK always sets expiration_spec, with mode NONE when there is no TTL.
		if m.GetExpirationSpec() == nil {
			t.Errorf("state %q: expiration_spec unset", m.GetStateName())
		}
		got[m.GetStateName()] = spec{m.GetTypeTypename(), m.GetExpirationSpec().GetMode(), m.GetExpirationSpec().GetExpireAfterMillis()}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("missing values:\n got %v\nwant %v", got, want)
	}
	if n := srv.Invocations(FeaturesFn, "spec"); n != 0 {
		t.Errorf("Invocations after an incomplete context = %d, want 0", n)
	}
	// Giving only some states still leaves the others missing.
	from = Invoke(t, srv.URL, Request(Address(FeaturesFn, "spec"), EmptyStates(StateBool, StateDoc),
		Invocation(nil, CommandValue(Command{Op: OpReport}))))
	if n := len(from.GetIncompleteInvocationContext().GetMissingValues()); n != len(want)-2 {
		t.Errorf("with 2 states attached, %d missing, want %d", n, len(want)-2)
	}
}

// allStates is a state list for sdktest/features with a value for every
// state but ttl_write.
func allStates() []*protocol.ToFunction_PersistedValue {
	return []*protocol.ToFunction_PersistedValue{
		State(StateBool, BoolValue(true)),
		State(StateInt32, Int32Value(41)),
		State(StateInt64, Int64Value(1<<40)),
		State(StateFloat32, Float32Value(1.5)),
		State(StateFloat64, Float64Value(2.25)),
		State(StateString, StringValue("old")),
		State(StateDoc, JSONValue(DocType, Doc{Name: "d", N: 1})),
		State(StateTTLWrite, nil),
		State(StateTTLCall, StringValue("call")),
		State("retired_state", StringValue("ignored")), // a state the SDK no longer declares
	}
}

func TestFeatureBatchSideEffects(t *testing.T) {
	srv := StartFeatureServer(t)
	self := Address(FeaturesFn, "batch")
	other := Address(FeaturesFn, "peer")
	nested := Command{Op: OpReport, Tag: "nested"}

	from := Invoke(t, srv.URL, Request(self, allStates(),
		// 1: from an ingress: report the attached state.
		Invocation(nil, CommandValue(Command{Op: OpReport, Tag: "before"})),
		// 2: from another function: write, increment, report.
		Invocation(other, CommandValue(Command{Op: OpSeq, Commands: []Command{
			{Op: OpSet, Values: &States{
				Bool: new(false), Int32: new(int32(-7)), Float32: new(float32(0.25)), Float64: new(-1e300),
				Doc: &Doc{Name: "new", Tags: []string{"x"}, N: 99}, TTLWrite: new("w"),
			}},
			{Op: OpIncr},
			{Op: OpReport, Tag: "after", Topic: "reports"},
		}})),
		// 3: messages, delayed messages, a cancellation, an egress, a removal.
		Invocation(nil, CommandValue(Command{Op: OpSeq, Commands: []Command{
			{Op: OpSend, To: &Target{ID: "peer"}, Command: &nested},
			{Op: OpSend, To: &Target{Fn: StatelessFn, ID: "s"}, Text: "hi"},
			{Op: OpSendAfter, To: &Target{ID: "later"}, DelayMs: 1500, Token: "t1", Command: &nested},
			{Op: OpSendAfter, DelayMs: 0, Text: "self"},
			{Op: OpCancel, Token: "t0"},
			{Op: OpEgress, Topic: "raw", Payload: "p"},
			{Op: OpClear, States: []string{StateString, StateTTLCall}},
		}})),
	))
	res := from.GetInvocationResult()
	if res == nil {
		t.Fatalf("want an invocation result, got %v", from)
	}

	// State mutations: one per touched state, with the registered typenames.
	muts := map[string]*protocol.FromFunction_PersistedValueMutation{}
	for _, m := range res.GetStateMutations() {
		muts[m.GetStateName()] = m
	}
	modified := func(name, typename string) *protocol.TypedValue {
		t.Helper()
		m := muts[name]
		if m.GetMutationType() != protocol.FromFunction_PersistedValueMutation_MODIFY {
			t.Fatalf("state %q: mutation %v, want MODIFY", name, m)
		}
		if m.GetStateValue().GetTypename() != typename || !m.GetStateValue().GetHasValue() {
			t.Fatalf("state %q: value %v, want typename %q with has_value", name, m.GetStateValue(), typename)
		}
		return m.GetStateValue()
	}
	if len(muts) != 9 {
		t.Errorf("%d mutations, want 9 (7 MODIFY, 2 DELETE): %v", len(muts), res.GetStateMutations())
	}
	if v, err := DecodeBool(modified(StateBool, TypeBool)); err != nil || v {
		t.Errorf("b = %v, %v; want false", v, err)
	}
	if v, err := DecodeInt32(modified(StateInt32, TypeInt32)); err != nil || v != -7 {
		t.Errorf("i32 = %v, %v; want -7", v, err)
	}
	if v, err := DecodeInt64(modified(StateInt64, TypeInt64)); err != nil || v != 1<<40+1 {
		t.Errorf("i64 = %v, %v; want 2^40+1", v, err)
	}
	if v, err := DecodeFloat32(modified(StateFloat32, TypeFloat32)); err != nil || v != 0.25 {
		t.Errorf("f32 = %v, %v; want 0.25", v, err)
	}
	if v, err := DecodeFloat64(modified(StateFloat64, TypeFloat64)); err != nil || v != -1e300 {
		t.Errorf("f64 = %v, %v; want -1e300", v, err)
	}
	var doc Doc
	if err := DecodeJSON(modified(StateDoc, DocType), DocType, &doc); err != nil || !reflect.DeepEqual(doc, Doc{Name: "new", Tags: []string{"x"}, N: 99}) {
		t.Errorf("doc = %+v, %v", doc, err)
	}
	if v, err := DecodeString(modified(StateTTLWrite, TypeString)); err != nil || v != "w" {
		t.Errorf("ttl_write = %q, %v; want w", v, err)
	}
	for _, name := range []string{StateString, StateTTLCall} {
		if m := muts[name]; m.GetMutationType() != protocol.FromFunction_PersistedValueMutation_DELETE {
			t.Errorf("state %q: mutation %v, want DELETE", name, m)
		}
	}

	// Outgoing messages.
	out := res.GetOutgoingMessages()
	if len(out) != 2 {
		t.Fatalf("%d outgoing messages, want 2: %v", len(out), out)
	}
	var got Command
	if AddressKey(out[0].GetTarget()) != "sdktest/features/peer" || DecodeJSON(out[0].GetArgument(), CommandType, &got) != nil || !reflect.DeepEqual(got, nested) {
		t.Errorf("message 0 = %v, want the nested report to sdktest/features/peer", out[0])
	}
	if s, err := DecodeString(out[1].GetArgument()); AddressKey(out[1].GetTarget()) != "sdktest/stateless/s" || err != nil || s != "hi" {
		t.Errorf("message 1 = %v, want string hi to sdktest/stateless/s", out[1])
	}

	// Delayed messages and the cancellation, in call order.
	del := res.GetDelayedInvocations()
	if len(del) != 3 {
		t.Fatalf("%d delayed invocations, want 3: %v", len(del), del)
	}
	if d := del[0]; d.GetIsCancellationRequest() || d.GetCancellationToken() != "t1" || d.GetDelayInMs() != 1500 ||
		AddressKey(d.GetTarget()) != "sdktest/features/later" || d.GetArgument().GetTypename() != CommandType {
		t.Errorf("delayed 0 = %v, want a 1500 ms command to later with token t1", d)
	}
	if d := del[1]; d.GetIsCancellationRequest() || d.GetCancellationToken() != "" || d.GetDelayInMs() != 0 ||
		AddressKey(d.GetTarget()) != "sdktest/features/batch" || d.GetArgument().GetTypename() != TypeString {
		t.Errorf("delayed 1 = %v, want a 0 ms string to itself without token", d)
	}
	if d := del[2]; !d.GetIsCancellationRequest() || d.GetCancellationToken() != "t0" {
		t.Errorf("delayed 2 = %v, want a cancellation of t0", d)
	}

	// Egress: two reports and the raw record.
	eg := res.GetOutgoingEgresses()
	if len(eg) != 3 {
		t.Fatalf("%d egress messages, want 3: %v", len(eg), eg)
	}
	for _, m := range eg {
		if m.GetArgument().GetTypename() != EgressRecordType || m.GetEgressNamespace() != "io.statefun.playground" || m.GetEgressType() != "egress" {
			t.Errorf("egress %v, want an EgressRecord for io.statefun.playground/egress", m)
		}
	}
	before := mustReport(t, eg[0], DefaultTopic)
	if before.Tag != "before" || before.Self != "sdktest/features/batch" || before.Caller != nil || before.ArgType != CommandType {
		t.Errorf("first report = %+v, want tag before, self batch and a nil caller", before)
	}
	wantBefore := States{
		Bool: new(true), Int32: new(int32(41)), Int64: new(int64(1 << 40)), Float32: new(float32(1.5)),
		Float64: new(2.25), String: new("old"), Doc: &Doc{Name: "d", N: 1}, TTLCall: new("call"),
	}
	if !reflect.DeepEqual(before.States, wantBefore) {
		t.Errorf("first report states = %s, want %s", show(before.States), show(wantBefore))
	}
	after := mustReport(t, eg[1], "reports")
	if after.Tag != "after" || after.Caller == nil || *after.Caller != "sdktest/features/peer" || after.Calls != before.Calls+1 {
		t.Errorf("second report = %+v, want caller sdktest/features/peer and calls+1", after)
	}
	if after.States.Int64 == nil || *after.States.Int64 != 1<<40+1 || after.States.TTLWrite == nil || *after.States.TTLWrite != "w" {
		t.Errorf("second report states = %s, want incremented i64 and ttl_write w", show(after.States))
	}
	if rec, err := DecodeEgressRecord(eg[2]); err != nil || rec != (EgressRecord{Topic: "raw", Payload: "p"}) {
		t.Errorf("third egress = %+v, %v; want raw/p", rec, err)
	}

	if n := srv.Invocations(FeaturesFn, "batch"); n != 3 {
		t.Errorf("Invocations = %d, want 3", n)
	}
	var seen *Batch
	for _, b := range srv.Batches() {
		if b.Target == "sdktest/features/batch" {
			seen = &b
		}
	}
	if seen == nil || !reflect.DeepEqual(seen.Callers, []string{"", "sdktest/features/peer", ""}) || seen.Status != 200 || seen.Incomplete {
		t.Errorf("recorded batch = %+v", seen)
	}
}

func TestFeatureStringMessageAndStateless(t *testing.T) {
	srv := StartFeatureServer(t)
	// A stateless function needs no registration round trip.
	from := Invoke(t, srv.URL, Request(Address(StatelessFn, "x"), nil,
		Invocation(Address("other.ns/fn", "7"), StringValue("hello"))))
	eg := from.GetInvocationResult().GetOutgoingEgresses()
	if len(eg) != 1 {
		t.Fatalf("want one report, got %v", from)
	}
	r := mustReport(t, eg[0], DefaultTopic)
	if r.Self != "sdktest/stateless/x" || r.Caller == nil || *r.Caller != "other.ns/fn/7" ||
		r.ArgType != TypeString || r.ArgText != "hello" || r.States != (States{}) {
		t.Errorf("report = %+v", r)
	}
	// State commands fail on the stateless function: HTTP 500.
	_, err := Post(context.Background(), srv.URL, Request(Address(StatelessFn, "x"), nil,
		Invocation(nil, CommandValue(Command{Op: OpIncr}))))
	if err == nil || !strings.Contains(err.Error(), "500") {
		t.Errorf("incr on stateless: err = %v, want status 500", err)
	}
}

func TestFeatureSessionKeepsState(t *testing.T) {
	srv := StartFeatureServer(t)
	s := NewSession(srv.URL, Address(FeaturesFn, "session"))
	s.Call(t, Invocation(nil, CommandValue(Command{Op: OpSet, Values: &States{String: new("kept")}})))
	if len(s.Specs()) != 9 {
		t.Errorf("%d specs registered, want 9", len(s.Specs()))
	}
	res := s.Call(t, Invocation(nil, CommandValue(Command{Op: OpSeq, Commands: []Command{
		{Op: OpIncr}, {Op: OpIncr}, {Op: OpReport},
	}})))
	r := mustReport(t, res.GetOutgoingEgresses()[0], DefaultTopic)
	if r.States.String == nil || *r.States.String != "kept" || r.States.Int64 == nil || *r.States.Int64 != 2 {
		t.Errorf("report states = %s, want str kept and i64 2", show(r.States))
	}
	if v, err := DecodeInt64(s.Value(StateInt64)); err != nil || v != 2 {
		t.Errorf("session i64 = %v, %v", v, err)
	}
	s.Call(t, Invocation(nil, CommandValue(Command{Op: OpClear})))
	if s.Value(StateString) != nil || s.Value(StateInt64) != nil {
		t.Error("clear left values behind")
	}
	if n := srv.Invocations(FeaturesFn, "session"); n != 3 {
		t.Errorf("Invocations = %d, want 3 (registration round trips do not count)", n)
	}
}

func TestFeatureHoldKeepsRequestInFlight(t *testing.T) {
	srv := StartFeatureServer(t)
	h := srv.Hold(StatelessFn, "held")
	done := make(chan error, 1)
	go func() {
		_, err := Post(context.Background(), srv.URL, Request(Address(StatelessFn, "held"), nil,
			Invocation(nil, CommandValue(Command{Op: OpReport}))))
		done <- err
	}()
	select {
	case <-h.Arrived():
	case <-time.After(10 * time.Second):
		t.Fatal("held request never arrived")
	}
	select {
	case err := <-done:
		t.Fatalf("held request finished before release: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	if n := srv.Invocations(StatelessFn, "held"); n != 0 {
		t.Errorf("Invocations while held = %d, want 0", n)
	}
	h.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := srv.Invocations(StatelessFn, "held"); n != 1 {
		t.Errorf("Invocations after release = %d, want 1", n)
	}
	if c := srv.InvocationCounts()["sdktest/stateless/held"]; c != 1 {
		t.Errorf("InvocationCounts = %d, want 1", c)
	}
}

func TestFeatureFailNext(t *testing.T) {
	srv := StartFeatureServer(t)
	srv.FailNext(StatelessFn, "flaky", 2)
	req := Request(Address(StatelessFn, "flaky"), nil, Invocation(nil, StringValue("x")))
	for i := range 2 {
		if _, err := Post(context.Background(), srv.URL, req); err == nil || !strings.Contains(err.Error(), "500") {
			t.Fatalf("attempt %d: err = %v, want status 500", i, err)
		}
	}
	Invoke(t, srv.URL, req)
	if n := srv.Invocations(StatelessFn, "flaky"); n != 1 {
		t.Errorf("Invocations = %d, want 1", n)
	}
}

func TestFeatureRejectsBadRequestsLikeTheSDK(t *testing.T) {
	srv := StartFeatureServer(t)
	for _, op := range []string{OpFail, "no-such-op"} {
		_, err := Post(context.Background(), srv.URL, Request(Address(StatelessFn, "bad"), nil,
			Invocation(nil, CommandValue(Command{Op: op}))))
		if err == nil || !strings.Contains(err.Error(), "500") {
			t.Errorf("op %q: err = %v, want status 500", op, err)
		}
	}
	// The FeatureServer keeps the SDK's own request checks.
	resp, err := httpClient.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 {
		t.Errorf("GET: status %d, want 405", resp.StatusCode)
	}
}

func mustReport(t *testing.T, m *protocol.FromFunction_EgressMessage, topic string) Report {
	t.Helper()
	rec, err := DecodeEgressRecord(m)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Topic != topic {
		t.Errorf("record topic %q, want %q", rec.Topic, topic)
	}
	r, err := rec.Report()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func show(s States) string { return string(JSONValue("x/y", s).GetValue()) }

// With a Kafka route, reports and egress commands go to that Kafka egress
// as the SDK's KafkaProducerRecord (topic prefixed, key the sender's id,
// value the payload), for feature and counter functions alike.
func TestEgressRouteKafka(t *testing.T) {
	srv := StartFeatureServer(t)
	srv.SendEgressTo(EgressRoute{Kafka: "e2e/out", TopicPrefix: "app."})
	from := Invoke(t, srv.URL, Request(Address(StatelessFn, "x"), nil,
		Invocation(nil, CommandValue(Command{Op: OpSeq, Commands: []Command{{Op: OpReport, Tag: "r"}, {Op: OpEgress, Topic: "alpha", Payload: "p"}}}))))
	cs := StartCounterServer(t)
	cs.SendEgressTo(EgressRoute{Kafka: "e2e/out", TopicPrefix: "app."})
	counted := NewSession(cs.URL, Address(CounterFn, "c")).Call(t, Invocation(nil, StringValue("tick")))
	egs := append(from.GetInvocationResult().GetOutgoingEgresses(), counted.GetOutgoingEgresses()...)
	if len(egs) != 3 {
		t.Fatalf("want 3 egress records, got %v", egs)
	}
	var got []kafkaegress.Record
	for _, eg := range egs {
		if eg.GetEgressNamespace()+"/"+eg.GetEgressType() != "e2e/out" || eg.GetArgument().GetTypename() != kafkaegress.RecordTypename {
			t.Fatalf("egress %s/%s typed %s, want e2e/out typed %s", eg.GetEgressNamespace(), eg.GetEgressType(), eg.GetArgument().GetTypename(), kafkaegress.RecordTypename)
		}
		rec, err := kafkaegress.DecodeRecord(eg.GetArgument().GetValue())
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, rec)
	}
	var rep Report
	if err := json.Unmarshal(got[0].Value, &rep); err != nil || rep.Tag != "r" || got[0].Topic != "app."+DefaultTopic || got[0].Key != "x" {
		t.Errorf("report record %+v (%v), want a report tagged r on app.%s keyed x", got[0], err, DefaultTopic)
	}
	if r := got[1]; r.Topic != "app.alpha" || string(r.Value) != "p" || r.Key != "x" {
		t.Errorf("egress record %+v, want p on app.alpha keyed x", r)
	}
	if r := got[2]; r.Topic != "app."+CounterTopic || string(r.Value) != "c:1" || r.Key != "c" {
		t.Errorf("counter record %+v, want c:1 on app.%s keyed c", r, CounterTopic)
	}
}
