package partition

import (
	"errors"
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/protocol"
)

// FuzzFromFunction feeds arbitrary bytes, decoded as a FromFunction, as the
// result of an invocation — plus one outgoing message built from arbitrary
// strings, which need not be UTF-8 (a function's response decoded by a
// laxer codec, or built in Go). The core must never panic; the response is
// applied, re-sent with learned states, or refused as a violation that
// writes nothing; and every commit it produces, also when its timers fire,
// can be encoded and holds only addresses the shared validators accept.
// The seeds run as a normal test; to search further:
//
//	go test -run '^$' -fuzz '^FuzzFromFunction$' -fuzztime 20s ./internal/partition
func FuzzFromFunction(f *testing.F) {
	to := func(ns, typ, id string) *protocol.Address { return &protocol.Address{Namespace: ns, Type: typ, Id: id} }
	for _, ff := range []*protocol.FromFunction{
		result(nil),
		result(&protocol.FromFunction_InvocationResponse{
			StateMutations: []*protocol.FromFunction_PersistedValueMutation{modify("count", intVal(1)),
				{MutationType: protocol.FromFunction_PersistedValueMutation_DELETE, StateName: "seen"}},
			OutgoingMessages: []*protocol.FromFunction_Invocation{{Target: to("test", "counter", "b"), Argument: intVal(2)}},
			DelayedInvocations: []*protocol.FromFunction_DelayedInvocation{
				{DelayInMs: 5, Target: to("test", "counter", "c"), Argument: intVal(3), CancellationToken: "t"},
				{DelayInMs: math.MaxInt64, Target: to("test", "counter", "c"), Argument: intVal(3)},
				{IsCancellationRequest: true, CancellationToken: "t"}},
			OutgoingEgresses: []*protocol.FromFunction_EgressMessage{{EgressNamespace: "io.statefun.playground", EgressType: "egress", Argument: intVal(4)}},
		}),
		result(&protocol.FromFunction_InvocationResponse{OutgoingMessages: []*protocol.FromFunction_Invocation{{Target: to("other", "fn", "b"), Argument: intVal(2)}}}),
		result(&protocol.FromFunction_InvocationResponse{OutgoingMessages: []*protocol.FromFunction_Invocation{{Target: to("test", "counter", ""), Argument: intVal(2)}}}),
		result(&protocol.FromFunction_InvocationResponse{StateMutations: []*protocol.FromFunction_PersistedValueMutation{modify("nope", intVal(1))}}),
		incomplete(spec("count", intType, protocol.FromFunction_ExpirationSpec_NONE, 0), spec("new", "x/y", protocol.FromFunction_ExpirationSpec_AFTER_WRITE, math.MaxInt64)),
		incomplete(spec("count", "other/type", protocol.FromFunction_ExpirationSpec_NONE, 0)),
		{},
	} {
		f.Add(mustMarshal(ff), "", "", "", "")
	}
	f.Add(mustMarshal(result(nil)), "test", "counter", "b", intType)
	f.Add(mustMarshal(result(nil)), "test", "counter", "\xff", intType)
	f.Add(mustMarshal(result(nil)), "test", "counter", strings.Repeat("x", address.MaxSegmentBytes+1), intType)
	f.Add(mustMarshal(result(nil)), "test", "counter", "b", "a/\xc3")
	f.Add(mustMarshal(result(nil)), "other", "fn", "b", intType)
	f.Add([]byte{0xff, 0x01}, "", "", "", "")
	f.Fuzz(func(t *testing.T, data []byte, ns, name, id, typename string) {
		var ff protocol.FromFunction
		if err := proto.Unmarshal(data, &ff); err != nil {
			return
		}
		if ns+name+id+typename != "" {
			if ff.GetResponse() == nil {
				ff.Response = &protocol.FromFunction_InvocationResult{InvocationResult: &protocol.FromFunction_InvocationResponse{}}
			}
			if r := ff.GetInvocationResult(); r != nil {
				r.OutgoingMessages = append(r.OutgoingMessages, &protocol.FromFunction_Invocation{
					Target: to(ns, name, id), Argument: &protocol.TypedValue{Typename: typename, HasValue: true}})
			}
		}
		h := newHarness(t, Config{Routable: func(t address.TypeName) error {
			if t.Namespace == "test" {
				return nil
			}
			return errors.New("no endpoint serves it")
		}})
		h.registered(Spec{Name: "count", Typename: intType}, Spec{Name: "seen", Typename: intType, Mode: ExpireAfterInvoke, TTL: 10})
		h.now = 1000
		h.ingress(addr("a"), intVal(1))
		inv := h.oneInvocation()
		h.respond(inv, &ff)
		rd := h.core.Ready()
		checkFuzzReady(t, rd)
		for _, fl := range rd.Failures {
			if !fl.Violation {
				t.Fatalf("a response must be applied or refused as a violation, not %v", fl.Err)
			}
			if rd.Commit != nil {
				t.Fatalf("a refused response wrote %s", DescribeCommit(rd.Commit))
			}
		}
		if rd.Commit != nil {
			h.store.apply(rd.Commit)
			h.step(CommitDurable{ID: rd.Commit.ID})
		}
		// Let every timer that can fire fire, and check what it produces.
		for i := 0; i < 10; i++ {
			at, ok := h.core.NextDeadline()
			if !ok || at == math.MaxInt64 {
				break
			}
			h.now = at
			h.step(Tick{})
			checkFuzzReady(t, h.core.Ready())
		}
	})
}

// checkFuzzReady checks that everything a Ready hands to the committer and
// the invoker can be encoded and addressed later.
func checkFuzzReady(t *testing.T, rd Ready) {
	t.Helper()
	for _, inv := range rd.Invocations {
		if _, err := proto.Marshal(inv.Body); err != nil {
			t.Fatalf("invocation does not encode: %v", err)
		}
	}
	c := rd.Commit
	if c == nil {
		return
	}
	envs := func(what string, env *protocol.Envelope) {
		if _, err := proto.Marshal(env); err != nil {
			t.Fatalf("%s does not encode: %v", what, err)
		}
		if err := address.CheckAddress(toAddress(env.GetTarget())); err != nil {
			t.Fatalf("%s to an address the validators refuse: %v", what, err)
		}
	}
	for _, p := range c.Produced {
		envs("produced message", p.Env)
	}
	for _, tm := range c.TimersAdded {
		envs("timer", tm.Env)
		if tm.Key.Due < 1000 {
			t.Fatalf("timer due at %d, before the response", tm.Key.Due)
		}
	}
	for _, e := range c.Egress {
		if _, err := proto.Marshal(e.Record); err != nil {
			t.Fatalf("egress record does not encode: %v", err)
		}
	}
	for _, w := range c.State {
		if err := address.CheckStateName(w.State); err != nil {
			t.Fatal(err)
		}
		if !w.Delete {
			if err := address.CheckTypename(w.Entry.Typename); err != nil {
				t.Fatal(err)
			}
			if w.Entry.ExpiresAt != 0 && w.Entry.ExpiresAt < 1000 {
				t.Fatalf("entry expires at %d, before it was written", w.Entry.ExpiresAt)
			}
		}
	}
	for typ, specs := range c.Specs {
		for _, s := range specs {
			ps := &protocol.FromFunction_PersistedValueSpec{StateName: s.Name, TypeTypename: s.Typename}
			if _, err := proto.Marshal(ps); err != nil {
				t.Fatalf("spec of %s does not encode: %v", typ, err)
			}
			if err := address.CheckStateName(s.Name); err != nil {
				t.Fatal(err)
			}
		}
	}
}
