package partition

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/protocol"
)

// memStore is the test double of the durable store: it applies commits the
// way the engine's committer does.
type memStore struct {
	state  map[stateKey]Entry
	specs  map[address.TypeName][]Spec
	inbox  map[InboxKey]*protocol.Envelope
	timers map[TimerKey]*protocol.Envelope
}

func newMemStore() *memStore {
	return &memStore{state: map[stateKey]Entry{}, specs: map[address.TypeName][]Spec{}, inbox: map[InboxKey]*protocol.Envelope{},
		timers: map[TimerKey]*protocol.Envelope{}}
}

// sortedTimers returns the durable timers in key order.
func (m *memStore) sortedTimers() []Timer {
	out := make([]Timer, 0, len(m.timers))
	for k, env := range m.timers {
		out = append(out, Timer{Key: k, Env: env})
	}
	slices.SortFunc(out, func(a, b Timer) int {
		switch {
		case timerKeyLess(a.Key, b.Key):
			return -1
		case timerKeyLess(b.Key, a.Key):
			return 1
		}
		return 0
	})
	return out
}

func (m *memStore) Timers(after *TimerKey, fn func(Timer) bool) error {
	for _, t := range m.sortedTimers() {
		if after != nil && !timerKeyLess(*after, t.Key) {
			continue
		}
		if !fn(t) {
			return nil
		}
	}
	return nil
}

func (m *memStore) TimerByToken(sender, token string) (TimerKey, bool, error) {
	for k, env := range m.timers {
		if env.GetCancellationToken() == token && env.GetCaller().GetId() == sender {
			return k, true, nil
		}
	}
	return TimerKey{}, false, nil
}

func (m *memStore) State(a address.Address, s string) (Entry, bool, error) {
	e, ok := m.state[stateKey{a, s}]
	return e, ok, nil
}

func (m *memStore) Specs(t address.TypeName) ([]Spec, error) { return m.specs[t], nil }

func (m *memStore) AddressState(a address.Address) (map[string]Entry, error) {
	out := map[string]Entry{}
	for k, e := range m.state {
		if k.addr == a {
			out[k.state] = e
		}
	}
	return out, nil
}

func (m *memStore) apply(c *Commit) {
	for _, p := range c.Produced {
		m.inbox[p.Key] = p.Env
	}
	for _, w := range c.State {
		if w.Delete {
			delete(m.state, stateKey{w.Addr, w.State})
		} else {
			m.state[stateKey{w.Addr, w.State}] = w.Entry
		}
	}
	for t, s := range c.Specs {
		m.specs[t] = s
	}
	for _, k := range c.Consumed {
		delete(m.inbox, k)
	}
	for _, t := range c.TimersAdded {
		m.timers[t.Key] = t.Env
	}
	for _, r := range c.TimersRemoved {
		delete(m.timers, r.Key)
	}
}

var (
	counterT = address.TypeName{Namespace: "test", Name: "counter"}
	intType  = "io.statefun.types/int"
)

func addr(id string) address.Address { return address.Address{Type: counterT, ID: id} }

// harness drives one core the way the engine does, with a fake clock.
type harness struct {
	t     *testing.T
	core  *Core
	store *memStore
	now   int64
	seq   uint64
}

func newHarness(t *testing.T, cfg Config) *harness {
	if cfg.Partitions == 0 {
		cfg.Partitions = 1
	}
	if cfg.Egress == nil {
		cfg.Egress = func(ns, typ string, arg *protocol.TypedValue) (string, error) {
			if ns+"/"+typ != "io.statefun.playground/egress" {
				return "", errors.New("unknown egress")
			}
			return "topic", nil
		}
	}
	s := newMemStore()
	return &harness{t: t, core: New(cfg, s, Restore{}), store: s}
}

func (h *harness) step(ev Event) {
	h.t.Helper()
	if err := h.core.Step(h.now, ev); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) ingress(a address.Address, arg *protocol.TypedValue) InboxKey {
	h.seq++
	k := InboxKey{Partition: h.core.cfg.ID, Source: SourceIngress, Seq: h.seq}
	h.step(MessageArrived{Key: k, Env: &protocol.Envelope{Target: toProto(a), Argument: arg}})
	return k
}

// ready takes the Ready and makes its commit durable at once.
func (h *harness) ready() Ready {
	rd := h.core.Ready()
	if rd.Commit != nil {
		h.store.apply(rd.Commit)
		h.step(CommitDurable{ID: rd.Commit.ID})
	}
	return rd
}

func (h *harness) oneInvocation() Invocation {
	h.t.Helper()
	rd := h.ready()
	if len(rd.Invocations) != 1 {
		h.t.Fatalf("want 1 invocation, got %d", len(rd.Invocations))
	}
	return rd.Invocations[0]
}

func (h *harness) respond(inv Invocation, r *protocol.FromFunction) {
	h.t.Helper()
	h.step(ResultArrived{Addr: inv.Addr, Request: inv.Request, Response: r})
}

func intVal(v int32) *protocol.TypedValue {
	return &protocol.TypedValue{Typename: intType, HasValue: true, Value: mustMarshal(&protocol.IntWrapper{Value: v})}
}

func incomplete(specs ...*protocol.FromFunction_PersistedValueSpec) *protocol.FromFunction {
	return &protocol.FromFunction{Response: &protocol.FromFunction_IncompleteInvocationContext_{
		IncompleteInvocationContext: &protocol.FromFunction_IncompleteInvocationContext{MissingValues: specs}}}
}

func spec(name, typ string, mode protocol.FromFunction_ExpirationSpec_ExpireMode, ms int64) *protocol.FromFunction_PersistedValueSpec {
	return &protocol.FromFunction_PersistedValueSpec{StateName: name, TypeTypename: typ,
		ExpirationSpec: &protocol.FromFunction_ExpirationSpec{Mode: mode, ExpireAfterMillis: ms}}
}

func result(r *protocol.FromFunction_InvocationResponse) *protocol.FromFunction {
	return &protocol.FromFunction{Response: &protocol.FromFunction_InvocationResult{InvocationResult: r}}
}

func modify(name string, v *protocol.TypedValue) *protocol.FromFunction_PersistedValueMutation {
	return &protocol.FromFunction_PersistedValueMutation{MutationType: protocol.FromFunction_PersistedValueMutation_MODIFY, StateName: name, StateValue: v}
}

func batchOf(inv Invocation) *protocol.ToFunction_InvocationBatchRequest {
	return inv.Body.GetInvocation()
}

// registered makes the counter's "count" state known, as after a first
// IncompleteInvocationContext round trip.
func (h *harness) registered(specs ...Spec) {
	h.store.specs[counterT] = specs
}

func TestFirstInvocationNegotiatesStatesAndPersistsThem(t *testing.T) {
	h := newHarness(t, Config{})
	k := h.ingress(addr("a"), intVal(7))
	inv := h.oneInvocation()
	b := batchOf(inv)
	if len(b.State) != 0 || len(b.Invocations) != 1 || b.Invocations[0].Caller != nil {
		t.Fatalf("first request: %v", b)
	}
	h.respond(inv, incomplete(spec("count", intType, protocol.FromFunction_ExpirationSpec_NONE, 0)))
	rd := h.ready()
	if len(rd.Invocations) != 1 {
		t.Fatalf("want the same invocation re-sent, got %d", len(rd.Invocations))
	}
	b = batchOf(rd.Invocations[0])
	if len(b.State) != 1 || b.State[0].StateName != "count" || b.State[0].StateValue != nil {
		t.Fatalf("re-sent request must carry the registered state with no value: %v", b.State)
	}
	if got := h.store.specs[counterT]; len(got) != 1 || got[0].Typename != intType {
		t.Fatalf("specs not persisted: %v", got)
	}
	h.respond(rd.Invocations[0], result(&protocol.FromFunction_InvocationResponse{
		StateMutations: []*protocol.FromFunction_PersistedValueMutation{modify("count", intVal(1))}}))
	rd = h.ready()
	if rd.Commit == nil || len(rd.Commit.State) != 1 || len(rd.Commit.Consumed) != 1 || rd.Commit.Consumed[0] != k {
		t.Fatalf("commit: %+v", rd.Commit)
	}
	e, ok, _ := h.store.State(addr("a"), "count")
	if !ok || e.Typename != intType || string(e.Value) != string(intVal(1).Value) {
		t.Fatalf("stored %v %v", e, ok)
	}
	if len(h.store.inbox) != 0 {
		t.Fatalf("inbox not drained: %v", h.store.inbox)
	}
}

func TestOneRequestInFlightPerAddressLaterMessagesBatched(t *testing.T) {
	h := newHarness(t, Config{})
	h.registered(Spec{Name: "count", Typename: intType})
	h.ingress(addr("a"), intVal(1))
	first := h.oneInvocation()
	h.ingress(addr("a"), intVal(2))
	h.ingress(addr("a"), intVal(3))
	other := h.ingress(addr("b"), intVal(9))
	rd := h.ready()
	if len(rd.Invocations) != 1 || rd.Invocations[0].Addr != addr("b") {
		t.Fatalf("only b may go out while a is in flight: %+v", rd.Invocations)
	}
	_ = other
	// a's two queued messages, and the one in flight at a and at b.
	if h.core.Backlog() != 4 {
		t.Fatalf("backlog %d, want 4", h.core.Backlog())
	}
	h.respond(first, result(nil))
	next := h.oneInvocation()
	inv := batchOf(next).Invocations
	if len(inv) != 2 || string(inv[0].Argument.Value) != string(intVal(2).Value) || string(inv[1].Argument.Value) != string(intVal(3).Value) {
		t.Fatalf("backlog must go out as one batch in arrival order: %v", inv)
	}
}

func TestMaxBatchCapsRequests(t *testing.T) {
	h := newHarness(t, Config{MaxBatch: func(address.TypeName) int { return 2 }})
	h.ingress(addr("a"), intVal(0))
	first := h.oneInvocation()
	for i := int32(1); i <= 5; i++ {
		h.ingress(addr("a"), intVal(i))
	}
	sizes := []int{}
	inv := first
	for i := 0; i < 3; i++ {
		h.respond(inv, result(nil))
		inv = h.oneInvocation()
		sizes = append(sizes, len(batchOf(inv).Invocations))
	}
	if sizes[0] != 2 || sizes[1] != 2 || sizes[2] != 1 {
		t.Fatalf("batch sizes %v, want [2 2 1]", sizes)
	}
}

// TestMaxBatchBytesCapsRequests: messages that each fit the endpoint's
// payload cap go out in batches that fit it too; without the byte cap, the
// queue behind a call went out as one request over the cap, which the
// client refused on every retry and the address never moved again.
func TestMaxBatchBytesCapsRequests(t *testing.T) {
	arg := func(i int) *protocol.TypedValue {
		return &protocol.TypedValue{Typename: "t/blob", HasValue: true, Value: []byte(strings.Repeat(string(rune('a'+i)), 1000))}
	}
	one := proto.Size(&protocol.ToFunction_Invocation{Argument: arg(0)})
	h := newHarness(t, Config{MaxBatchBytes: func(address.TypeName) int { return 2*one + one/2 }})
	h.ingress(addr("a"), arg(0))
	first := h.oneInvocation()
	for i := 1; i <= 5; i++ {
		h.ingress(addr("a"), arg(i))
	}
	var sizes []int
	var got []byte
	inv := first
	for range 3 {
		h.respond(inv, result(nil))
		inv = h.oneInvocation()
		b := batchOf(inv).Invocations
		sizes = append(sizes, len(b))
		for _, in := range b {
			got = append(got, in.Argument.Value[0])
		}
	}
	if !slices.Equal(sizes, []int{2, 2, 1}) || string(got) != "bcdef" {
		t.Fatalf("batches of %v carrying %q; want [2 2 1] carrying \"bcdef\"", sizes, got)
	}
	// One message over the cap still goes, alone: refusing it is the
	// ingress's and the response validation's job, not the batcher's.
	h.respond(inv, result(nil))
	h.ingress(addr("b"), &protocol.TypedValue{Typename: "t/blob", HasValue: true, Value: make([]byte, 4*one)})
	if n := len(batchOf(h.oneInvocation()).Invocations); n != 1 {
		t.Fatalf("an oversized message went out in a batch of %d; want 1", n)
	}
}

func TestFailedCallIsRetriedWithCappedBackoffAndLosesNothing(t *testing.T) {
	h := newHarness(t, Config{RetryBase: 50, RetryMax: 150})
	k := h.ingress(addr("a"), intVal(1))
	inv := h.oneInvocation()
	wantDelays := []int64{50, 100, 150, 150}
	for i, d := range wantDelays {
		h.step(ResultArrived{Addr: inv.Addr, Request: inv.Request, Err: errors.New("connection refused")})
		rd := h.ready()
		if len(rd.Invocations) != 0 || len(rd.Failures) != 1 || rd.Failures[0].RetryAt != h.now+d || rd.Failures[0].Attempt != i+1 {
			t.Fatalf("attempt %d: %+v", i, rd)
		}
		if at, ok := h.core.NextDeadline(); !ok || at != h.now+d {
			t.Fatalf("deadline %d %v", at, ok)
		}
		h.now += d - 1
		h.step(Tick{})
		if h.core.HasReady() {
			t.Fatalf("retried before the backoff ended")
		}
		h.now++
		h.step(Tick{})
		inv = h.oneInvocation()
		if inv.Attempt != i+1 {
			t.Fatalf("attempt = %d", inv.Attempt)
		}
	}
	// A late result of an abandoned attempt changes nothing.
	h.step(ResultArrived{Addr: inv.Addr, Request: inv.Request - 1, Response: result(nil)})
	if h.core.HasReady() {
		t.Fatal("stale result was applied")
	}
	h.respond(inv, result(nil))
	rd := h.ready()
	if rd.Commit == nil || len(rd.Commit.Consumed) != 1 || rd.Commit.Consumed[0] != k {
		t.Fatalf("message must be consumed exactly when it succeeds: %+v", rd.Commit)
	}
}

func TestProtocolViolationsChangeNothingAndAreRetried(t *testing.T) {
	typed := func(tn string) *protocol.TypedValue { return &protocol.TypedValue{Typename: tn, HasValue: true} }
	target := &protocol.Address{Namespace: "test", Type: "counter", Id: "b"}
	for _, tc := range []struct {
		name string
		resp *protocol.FromFunction_InvocationResponse
		want string
	}{
		{"unregistered state", &protocol.FromFunction_InvocationResponse{StateMutations: []*protocol.FromFunction_PersistedValueMutation{modify("nope", intVal(1))}}, `state "nope" is not registered`},
		{"typename mismatch", &protocol.FromFunction_InvocationResponse{StateMutations: []*protocol.FromFunction_PersistedValueMutation{modify("count", typed("io.statefun.types/long"))}}, "registered as io.statefun.types/int"},
		{"modify without value", &protocol.FromFunction_InvocationResponse{StateMutations: []*protocol.FromFunction_PersistedValueMutation{modify("count", nil)}}, "without a value"},
		{"unknown egress", &protocol.FromFunction_InvocationResponse{OutgoingEgresses: []*protocol.FromFunction_EgressMessage{{EgressNamespace: "x", EgressType: "y", Argument: intVal(1)}}}, "egress message 0 to x/y"},
		{"negative delay", &protocol.FromFunction_InvocationResponse{DelayedInvocations: []*protocol.FromFunction_DelayedInvocation{{DelayInMs: -1, Target: target, Argument: intVal(1)}}}, "negative delay"},
		{"cancel without token", &protocol.FromFunction_InvocationResponse{DelayedInvocations: []*protocol.FromFunction_DelayedInvocation{{IsCancellationRequest: true}}}, "without a token"},
		{"duplicate token", &protocol.FromFunction_InvocationResponse{DelayedInvocations: []*protocol.FromFunction_DelayedInvocation{
			{DelayInMs: 5, Target: target, Argument: intVal(1), CancellationToken: "t"},
			{DelayInMs: 5, Target: target, Argument: intVal(1), CancellationToken: "t"}}}, `token "t" is already pending`},
		{"message without type", &protocol.FromFunction_InvocationResponse{OutgoingMessages: []*protocol.FromFunction_Invocation{{Target: &protocol.Address{Id: "x"}, Argument: intVal(1)}}}, "outgoing message 0: target namespace is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Config{})
			h.registered(Spec{Name: "count", Typename: intType})
			h.ingress(addr("a"), intVal(1))
			inv := h.oneInvocation()
			// A valid side effect in the same response must not leak out.
			tc.resp.OutgoingMessages = append(tc.resp.OutgoingMessages, &protocol.FromFunction_Invocation{Target: target, Argument: intVal(5)})
			h.respond(inv, result(tc.resp))
			rd := h.ready()
			if rd.Commit != nil {
				t.Fatalf("a refused response must write nothing: %+v", rd.Commit)
			}
			if len(rd.Failures) != 1 || !rd.Failures[0].Violation || !strings.Contains(rd.Failures[0].Err.Error(), tc.want) {
				t.Fatalf("failures %+v, want one violation containing %q", rd.Failures, tc.want)
			}
			h.now = rd.Failures[0].RetryAt
			h.step(Tick{})
			if inv := h.oneInvocation(); len(batchOf(inv).Invocations) != 1 {
				t.Fatal("the batch must be retried")
			}
		})
	}
}

func TestDelayedMessagesFireFromTheSenderAndCanBeCancelled(t *testing.T) {
	h := newHarness(t, Config{Partitions: 1})
	h.now = 1000
	h.ingress(addr("a"), intVal(1))
	inv := h.oneInvocation()
	to := func(id string) *protocol.Address {
		return &protocol.Address{Namespace: "test", Type: "counter", Id: id}
	}
	h.respond(inv, result(&protocol.FromFunction_InvocationResponse{DelayedInvocations: []*protocol.FromFunction_DelayedInvocation{
		{DelayInMs: 500, Target: to("b"), Argument: intVal(1)},
		{DelayInMs: 200, Target: to("c"), Argument: intVal(2), CancellationToken: "tok"},
	}}))
	rd := h.ready()
	if len(rd.Commit.TimersAdded) != 2 || rd.Commit.TimersAdded[0].Key.Due != 1500 {
		t.Fatalf("timers: %+v", rd.Commit.TimersAdded)
	}
	if at, _ := h.core.NextDeadline(); at != 1200 {
		t.Fatalf("next deadline %d", at)
	}
	// a cancels its token before it is due.
	h.ingress(addr("a"), intVal(2))
	inv = h.oneInvocation()
	h.respond(inv, result(&protocol.FromFunction_InvocationResponse{DelayedInvocations: []*protocol.FromFunction_DelayedInvocation{
		{IsCancellationRequest: true, CancellationToken: "tok"},
		{IsCancellationRequest: true, CancellationToken: "unknown"},
	}}))
	rd = h.ready()
	if len(rd.Commit.TimersRemoved) != 1 {
		t.Fatalf("cancel: %+v", rd.Commit)
	}
	h.now = 1499
	h.step(Tick{})
	if h.core.HasReady() {
		t.Fatal("fired early or fired a cancelled message")
	}
	h.now = 1500
	h.step(Tick{})
	rd = h.ready()
	if len(rd.Invocations) != 1 || rd.Invocations[0].Addr != addr("b") {
		t.Fatalf("due message: %+v", rd.Invocations)
	}
	c := batchOf(rd.Invocations[0]).Invocations[0].Caller
	if c.GetId() != "a" || c.GetType() != "counter" {
		t.Fatalf("delayed message caller = %v, want the sender", c)
	}
	if len(rd.Commit.TimersRemoved) != 1 || len(rd.Commit.Produced) != 1 {
		t.Fatalf("firing must remove the timer and produce the message in one commit: %+v", rd.Commit)
	}
}

func TestMessagesCarryCallerAndCrossPartitionsOnlyAfterCommit(t *testing.T) {
	// With two partitions, find ids on each side.
	var local, remote string
	for i := 0; local == "" || remote == ""; i++ {
		id := string(rune('a' + i))
		if address.Partition(id, 2) == 0 {
			if local == "" {
				local = id
			} else if remote != "" {
				break
			}
		} else if remote == "" {
			remote = id
		}
	}
	h := newHarness(t, Config{ID: 0, Partitions: 2})
	h.ingress(addr(local), intVal(1))
	inv := h.oneInvocation()
	h.respond(inv, result(&protocol.FromFunction_InvocationResponse{OutgoingMessages: []*protocol.FromFunction_Invocation{
		{Target: toProto(addr(remote)), Argument: intVal(2)},
		{Target: toProto(addr(local + "x")), Argument: intVal(3)},
	}}))
	rd := h.core.Ready()
	var toRemote *Produced
	for i := range rd.Commit.Produced {
		if rd.Commit.Produced[i].Key.Partition == 1 {
			toRemote = &rd.Commit.Produced[i]
		}
	}
	if toRemote == nil || toRemote.Env.GetCaller().GetId() != local || toRemote.Key.Source != 0 {
		t.Fatalf("produced: %+v", rd.Commit.Produced)
	}
	for _, inv := range rd.Invocations {
		if inv.Addr.ID == remote {
			t.Fatal("a message for another partition was invoked here")
		}
	}
}

func TestTTLAfterWriteAndAfterInvoke(t *testing.T) {
	h := newHarness(t, Config{})
	h.registered(Spec{Name: "w", Typename: intType, Mode: ExpireAfterWrite, TTL: 100},
		Spec{Name: "i", Typename: intType, Mode: ExpireAfterInvoke, TTL: 100})
	h.ingress(addr("a"), intVal(1))
	inv := h.oneInvocation()
	h.respond(inv, result(&protocol.FromFunction_InvocationResponse{StateMutations: []*protocol.FromFunction_PersistedValueMutation{
		modify("w", intVal(1)), modify("i", intVal(2))}}))
	h.ready()
	// At 80 an invocation restarts the AFTER_INVOKE clock only.
	h.now = 80
	h.ingress(addr("a"), intVal(1))
	inv = h.oneInvocation()
	if st := batchOf(inv).State; st[0].StateValue == nil || st[1].StateValue == nil {
		t.Fatalf("both values alive at 80: %v", st)
	}
	h.respond(inv, result(nil))
	h.ready()
	h.now = 150
	h.ingress(addr("a"), intVal(1))
	inv = h.oneInvocation()
	st := batchOf(inv).State
	if st[0].StateValue != nil {
		t.Fatal("AFTER_WRITE value must be gone 150ms after its write")
	}
	if st[1].StateValue == nil {
		t.Fatal("AFTER_INVOKE value must live 100ms after the last invocation")
	}
	h.respond(inv, result(nil))
	rd := h.ready()
	if _, ok, _ := h.store.State(addr("a"), "w"); ok {
		t.Fatalf("expired value must be deleted from the store: %+v", rd.Commit)
	}
}

func TestEmptyValueIsAValue(t *testing.T) {
	h := newHarness(t, Config{})
	h.registered(Spec{Name: "count", Typename: intType})
	h.ingress(addr("a"), intVal(1))
	inv := h.oneInvocation()
	zero := &protocol.TypedValue{Typename: intType, HasValue: true} // int 0 is zero bytes
	h.respond(inv, result(&protocol.FromFunction_InvocationResponse{StateMutations: []*protocol.FromFunction_PersistedValueMutation{modify("count", zero)}}))
	h.ready()
	h.ingress(addr("a"), intVal(1))
	st := batchOf(h.oneInvocation()).State
	if st[0].StateValue == nil || !st[0].StateValue.HasValue || len(st[0].StateValue.Value) != 0 {
		t.Fatalf("int 0 must be attached as a present, empty value: %v", st[0])
	}
}

func TestRestoredTimersFireAfterRestart(t *testing.T) {
	s := newMemStore()
	env := &protocol.Envelope{Target: toProto(addr("b")), Caller: toProto(addr("a")), Argument: intVal(1), CancellationToken: "t"}
	c := New(Config{Partitions: 1}, s, Restore{Timers: []Timer{{Key: TimerKey{Due: 100, ID: 7}, Env: env}}})
	if at, ok := c.NextDeadline(); !ok || at != 100 {
		t.Fatalf("deadline %d %v", at, ok)
	}
	if err := c.Step(5000, Tick{}); err != nil { // overdue after a long downtime
		t.Fatal(err)
	}
	rd := c.Ready()
	if len(rd.Invocations) != 1 || rd.Commit.TimersRemoved[0].Key.ID != 7 {
		t.Fatalf("%+v", rd)
	}
	if rd.Commit.Produced[0].Env.CancellationToken != "" {
		t.Fatal("a delivered message keeps no token")
	}
}

func TestVersionsNeverRepeatAcrossRestores(t *testing.T) {
	h := newHarness(t, Config{})
	h.registered(Spec{Name: "count", Typename: intType})
	h.ingress(addr("a"), intVal(1))
	h.respond(h.oneInvocation(), result(&protocol.FromFunction_InvocationResponse{StateMutations: []*protocol.FromFunction_PersistedValueMutation{modify("count", intVal(1))}}))
	rd := h.ready()
	v1 := rd.Commit.State[0].Entry.Version
	c2 := New(Config{Partitions: 1}, h.store, Restore{CommitID: rd.Commit.ID, VersionSeq: rd.Commit.VersionSeq})
	if c2.versionSeq <= v1 {
		t.Fatalf("restored version counter %d must be above %d", c2.versionSeq, v1)
	}
}

// A cold type is probed by one address; the others wait for its states
// instead of each paying a negotiation round trip.
func TestColdTypeIsProbedOnce(t *testing.T) {
	h := newHarness(t, Config{})
	h.ingress(addr("a"), intVal(1))
	probe := h.oneInvocation()
	h.ingress(addr("b"), intVal(1))
	h.ingress(addr("c"), intVal(1))
	if rd := h.ready(); len(rd.Invocations) != 0 {
		t.Fatalf("others must wait for the probe: %d invocations", len(rd.Invocations))
	}
	h.respond(probe, incomplete(spec("count", intType, protocol.FromFunction_ExpirationSpec_NONE, 0)))
	rd := h.ready()
	if len(rd.Invocations) != 3 {
		t.Fatalf("after the probe learned the states, all three go out: %d", len(rd.Invocations))
	}
	for _, inv := range rd.Invocations {
		if st := batchOf(inv).State; len(st) != 1 || st[0].StateName != "count" {
			t.Fatalf("%s went out without the learned state: %v", inv.Addr, st)
		}
	}
}

func TestFailedProbeReleasesTheOthers(t *testing.T) {
	h := newHarness(t, Config{})
	h.ingress(addr("a"), intVal(1))
	probe := h.oneInvocation()
	h.ingress(addr("b"), intVal(1))
	h.step(ResultArrived{Addr: probe.Addr, Request: probe.Request, Err: errors.New("boom")})
	rd := h.ready()
	if len(rd.Invocations) != 1 || rd.Invocations[0].Addr != addr("b") {
		t.Fatalf("a failed probe must not hold the others: %+v", rd.Invocations)
	}
}

// Another partition may register a type's states while this one's first
// request is out: the function's IncompleteInvocationContext is then no
// protocol loop, just a reason to send again with the states attached.
func TestStatesRegisteredMeanwhileAreNoViolation(t *testing.T) {
	h := newHarness(t, Config{})
	h.ingress(addr("a"), intVal(1))
	probe := h.oneInvocation()
	h.step(SpecsKnown{Type: counterT, Specs: []Spec{{Name: "count", Typename: intType}}})
	h.respond(probe, incomplete(spec("count", intType, protocol.FromFunction_ExpirationSpec_NONE, 0)))
	rd := h.ready()
	if len(rd.Failures) != 0 || len(rd.Invocations) != 1 || len(batchOf(rd.Invocations[0]).State) != 1 {
		t.Fatalf("want a plain re-send with the state: %+v", rd)
	}
	// Reporting missing a state the request did carry is a loop.
	h.respond(rd.Invocations[0], incomplete(spec("count", intType, protocol.FromFunction_ExpirationSpec_NONE, 0)))
	if rd := h.ready(); len(rd.Failures) != 1 || !rd.Failures[0].Violation {
		t.Fatalf("want a violation: %+v", rd.Failures)
	}
}
