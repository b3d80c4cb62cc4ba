package partition

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/protocol"
)

// A response whose messages could not be stored, reached or delivered is a
// protocol violation of that response: refused whole, named, retried.
func TestResponsesWithUnstorableOrUndeliverableMessagesAreViolations(t *testing.T) {
	long := strings.Repeat("x", address.MaxSegmentBytes+1)
	to := func(ns, typ, id string) *protocol.Address { return &protocol.Address{Namespace: ns, Type: typ, Id: id} }
	msg := func(a *protocol.Address, arg *protocol.TypedValue) *protocol.FromFunction_InvocationResponse {
		return &protocol.FromFunction_InvocationResponse{OutgoingMessages: []*protocol.FromFunction_Invocation{{Target: a, Argument: arg}}}
	}
	delayed := func(d *protocol.FromFunction_DelayedInvocation) *protocol.FromFunction_InvocationResponse {
		return &protocol.FromFunction_InvocationResponse{DelayedInvocations: []*protocol.FromFunction_DelayedInvocation{d}}
	}
	typed := func(tn string) *protocol.TypedValue { return &protocol.TypedValue{Typename: tn, HasValue: true} }
	big := &protocol.TypedValue{Typename: intType, HasValue: true, Value: make([]byte, 1000)}
	for _, tc := range []struct {
		name string
		resp *protocol.FromFunction
		want string
	}{
		{"message to a type no endpoint serves", result(msg(to("nobody", "serves", "x"), intVal(1))),
			"outgoing message 0: target: no endpoint serves function type nobody/serves"},
		{"delayed message to a type no endpoint serves", result(delayed(&protocol.FromFunction_DelayedInvocation{DelayInMs: 5, Target: to("nobody", "serves", "x"), Argument: intVal(1)})),
			"delayed invocation 0: target: no endpoint serves function type nobody/serves"},
		{"id over the shared limit", result(msg(to("test", "counter", long), intVal(1))),
			"outgoing message 0: target id is 4097 bytes, over the limit of 4096"},
		{"empty id", result(msg(to("test", "counter", ""), intVal(1))), "outgoing message 0: target id is empty"},
		{"id not UTF-8", result(msg(to("test", "counter", "\xff"), intVal(1))), "outgoing message 0: target id is not valid UTF-8"},
		{"function name with a slash", result(msg(to("test", "a/b", "x"), intVal(1))), `target function name "a/b" contains '/'`},
		{"argument without a typename", result(msg(to("test", "counter", "x"), typed(""))), "outgoing message 0: argument typename"},
		{"argument typename not UTF-8", result(msg(to("test", "counter", "x"), typed("a/\xff"))), "argument typename is not valid UTF-8"},
		{"delayed argument typename", result(delayed(&protocol.FromFunction_DelayedInvocation{Target: to("test", "counter", "x"), Argument: typed("nope")})),
			"delayed invocation 0: argument typename"},
		{"token over the limit", result(delayed(&protocol.FromFunction_DelayedInvocation{Target: to("test", "counter", "x"), Argument: intVal(1), CancellationToken: long})),
			"delayed invocation 0: cancellation token is 4097 bytes"},
		{"cancel a token not UTF-8", result(delayed(&protocol.FromFunction_DelayedInvocation{IsCancellationRequest: true, CancellationToken: "\xff"})),
			"cancellation token is not valid UTF-8"},
		{"state name over the limit", incomplete(spec(long, intType, protocol.FromFunction_ExpirationSpec_NONE, 0)),
			"a declared state name is 4097 bytes"},
		{"state typename not UTF-8", incomplete(spec("s", "a/\xff", protocol.FromFunction_ExpirationSpec_NONE, 0)),
			`state "s": typename is not valid UTF-8`},
		// Over what one record of the cluster's log takes (MaxRecordBytes
		// below): it could never be committed.
		{"message over one record", result(msg(to("test", "counter", "x"), big)),
			"outgoing message 0: 1211 bytes, over the 1000 bytes one record of the cluster's log takes"},
		{"delayed message over one record", result(delayed(&protocol.FromFunction_DelayedInvocation{DelayInMs: 5, Target: to("test", "counter", "x"), Argument: big})),
			"delayed invocation 0: 1211 bytes, over the 1000"},
		{"state value over one record", result(&protocol.FromFunction_InvocationResponse{StateMutations: []*protocol.FromFunction_PersistedValueMutation{{
			MutationType: protocol.FromFunction_PersistedValueMutation_MODIFY, StateName: "count", StateValue: &protocol.TypedValue{Typename: intType, HasValue: true, Value: big.Value}}}}),
			`state mutation 0: the value of "count": 1166 bytes, over the 1000`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Config{Routable: func(t address.TypeName) error {
				if t == counterT {
					return nil
				}
				return fmt.Errorf("no endpoint serves function type %s", t)
			}, MaxRecordBytes: 1000})
			h.registered(Spec{Name: "count", Typename: intType})
			k := h.ingress(addr("a"), intVal(1))
			inv := h.oneInvocation()
			if ir := tc.resp.GetInvocationResult(); ir != nil {
				// A valid effect in the same response must not leak out.
				ir.OutgoingMessages = append(ir.OutgoingMessages, &protocol.FromFunction_Invocation{Target: toProto(addr("b")), Argument: intVal(5)})
			}
			h.respond(inv, tc.resp)
			rd := h.ready()
			if rd.Commit != nil {
				t.Fatalf("a refused response must write nothing: %+v", rd.Commit)
			}
			if len(rd.Failures) != 1 || !rd.Failures[0].Violation || rd.Failures[0].Addr != addr("a") || !strings.Contains(rd.Failures[0].Err.Error(), tc.want) {
				t.Fatalf("failures %+v, want one violation of test/counter/a containing %q", rd.Failures, tc.want)
			}
			if h.core.Backlog() != 1 {
				t.Fatalf("backlog %d: the refused batch's message is still waiting", h.core.Backlog())
			}
			h.now = rd.Failures[0].RetryAt
			h.step(Tick{})
			retry := h.oneInvocation()
			h.respond(retry, result(nil)) // a corrected function
			if rd := h.ready(); rd.Commit == nil || len(rd.Commit.Consumed) != 1 || rd.Commit.Consumed[0] != k {
				t.Fatalf("the retried batch must then be consumed: %+v", rd.Commit)
			}
		})
	}
}

// statefun_queue_depth reads Backlog: a message stuck retrying, one in
// flight and ones parked behind a cold type's probe all count.
func TestBacklogCountsEveryUnsettledMessage(t *testing.T) {
	h := newHarness(t, Config{})
	h.ingress(addr("a"), intVal(1))
	probe := h.oneInvocation()
	if got := h.core.Backlog(); got != 1 {
		t.Fatalf("in flight: backlog %d, want 1", got)
	}
	h.ingress(addr("b"), intVal(1))
	h.ingress(addr("b"), intVal(2))
	if got := h.core.Backlog(); got != 3 {
		t.Fatalf("two parked behind the probe: backlog %d, want 3", got)
	}
	// The probe fails; b goes out (and fails too): nothing is settled.
	h.step(ResultArrived{Addr: probe.Addr, Request: probe.Request, Err: errors.New("no endpoint in module.yaml serves function type test/counter")})
	rd := h.ready()
	if len(rd.Invocations) != 1 {
		t.Fatalf("b must go out: %+v", rd.Invocations)
	}
	h.step(ResultArrived{Addr: rd.Invocations[0].Addr, Request: rd.Invocations[0].Request, Err: errors.New("again")})
	h.ready()
	if got := h.core.Backlog(); got != 3 {
		t.Fatalf("in backoff: backlog %d, want 3 (these messages are stuck, not gone)", got)
	}
	// A mutation queued behind a's backoff applies and leaves the count.
	h.step(Mutate{Mutation: &Mutation{ID: "m", Addr: addr("a"), State: "s", Op: OpPut, Typename: intType, Value: []byte{1}}})
	if got := h.core.Backlog(); got != 3 {
		t.Fatalf("after a mutation applied in the backoff: backlog %d, want 3", got)
	}
	for h.core.Backlog() > 0 {
		at, ok := h.core.NextDeadline()
		if !ok {
			t.Fatalf("backlog %d with nothing scheduled", h.core.Backlog())
		}
		h.now = at
		h.step(Tick{})
		for _, inv := range h.ready().Invocations {
			h.respond(inv, result(nil))
		}
	}
}

// A delay, TTL or backoff near MaxInt64 lies forever in the future: it
// used to wrap around and fire (or expire) at once.
func TestFarFutureTimesSaturate(t *testing.T) {
	t.Run("delayed message", func(t *testing.T) {
		h := newHarness(t, Config{})
		h.registered(Spec{Name: "count", Typename: intType})
		h.now = 1_000
		h.ingress(addr("a"), intVal(1))
		h.respond(h.oneInvocation(), result(&protocol.FromFunction_InvocationResponse{DelayedInvocations: []*protocol.FromFunction_DelayedInvocation{
			{DelayInMs: math.MaxInt64, Target: toProto(addr("b")), Argument: intVal(1)},
			{DelayInMs: math.MaxInt64 - 500, Target: toProto(addr("c")), Argument: intVal(1)},
		}}))
		rd := h.ready()
		for _, tm := range rd.Commit.TimersAdded {
			if tm.Key.Due != math.MaxInt64 {
				t.Fatalf("due %d, want MaxInt64", tm.Key.Due)
			}
		}
		h.now = 2_000
		h.step(Tick{})
		if rd := h.ready(); len(rd.Invocations) != 0 || rd.Commit != nil {
			t.Fatalf("a message delayed by ~MaxInt64 ms fired: %+v", rd)
		}
		if at, ok := h.core.NextDeadline(); !ok || at != math.MaxInt64 {
			t.Fatalf("deadline %d %v", at, ok)
		}
	})
	t.Run("TTL", func(t *testing.T) {
		h := newHarness(t, Config{})
		h.registered(Spec{Name: "w", Typename: intType, Mode: ExpireAfterWrite, TTL: math.MaxInt64},
			Spec{Name: "i", Typename: intType, Mode: ExpireAfterInvoke, TTL: math.MaxInt64 - 1})
		h.now = 1_000
		h.ingress(addr("a"), intVal(1))
		h.respond(h.oneInvocation(), result(&protocol.FromFunction_InvocationResponse{StateMutations: []*protocol.FromFunction_PersistedValueMutation{
			modify("w", intVal(1)), modify("i", intVal(2))}}))
		h.ready()
		h.step(Mutate{Mutation: &Mutation{ID: "m", Addr: addr("b"), State: "w", Op: OpPut, Value: []byte{1}}})
		h.ready()
		h.now = 2_000
		h.ingress(addr("a"), intVal(1))
		st := batchOf(h.oneInvocation()).State
		if st[0].StateValue == nil || st[1].StateValue == nil {
			t.Fatalf("values with a TTL of ~MaxInt64 ms expired at once: %v", st)
		}
		for _, k := range []stateKey{{addr("a"), "w"}, {addr("a"), "i"}, {addr("b"), "w"}} {
			e, ok, _ := h.core.get(k.addr, k.state)
			if !ok || e.ExpiresAt != math.MaxInt64 {
				t.Fatalf("%v: expires at %d (%v), want MaxInt64", k, e.ExpiresAt, ok)
			}
		}
	})
	t.Run("retry backoff", func(t *testing.T) {
		h := newHarness(t, Config{RetryBase: math.MaxInt64 / 4, RetryMax: math.MaxInt64})
		h.now = 1_000
		h.ingress(addr("a"), intVal(1))
		inv := h.oneInvocation()
		for attempt := 1; attempt <= 3; attempt++ {
			h.step(ResultArrived{Addr: inv.Addr, Request: inv.Request, Err: errors.New("down")})
			rd := h.ready()
			if len(rd.Failures) != 1 || rd.Failures[0].RetryAt < h.now {
				t.Fatalf("attempt %d: retry at %+v, before now %d", attempt, rd.Failures, h.now)
			}
			if len(rd.Invocations) != 0 {
				t.Fatal("retried at once")
			}
			h.now = rd.Failures[0].RetryAt
			h.step(Tick{})
			inv = h.oneInvocation()
		}
		if h.now != math.MaxInt64 {
			t.Fatalf("the backoff must saturate at MaxInt64, got to %d", h.now)
		}
	})
}
