package partition

import (
	"testing"

	"github.com/statefun-go/statefun/internal/protocol"
)

func (h *harness) mutate(m Mutation) {
	h.t.Helper()
	h.step(Mutate{Mutation: &m})
}

func replyFor(rd Ready, req uint64) *Reply {
	for i := range rd.Replies {
		if rd.Replies[i].Request == req {
			return &rd.Replies[i]
		}
	}
	return nil
}

func countMutation(req uint64, v int32) Mutation {
	return Mutation{ID: "m", Request: req, Addr: addr("a"), State: "count", Op: OpPut, Value: intVal(v).Value, Ack: AckApplied}
}

// The central promise: a mutation waits for the invocation in flight, is
// applied before any later message, and the next invocation sees it.
func TestMutationAppliesInMailboxOrder(t *testing.T) {
	h := newHarness(t, Config{})
	h.registered(Spec{Name: "count", Typename: intType})
	h.ingress(addr("a"), intVal(1))
	inflight := h.oneInvocation()

	h.mutate(countMutation(1, 100))
	h.ingress(addr("a"), intVal(2)) // arrives after the mutation
	rd := h.ready()
	if replyFor(rd, 1) != nil || len(rd.Invocations) != 0 {
		t.Fatalf("the mutation must wait for the invocation in flight: %+v", rd)
	}
	h.respond(inflight, result(&protocol.FromFunction_InvocationResponse{StateMutations: []*protocol.FromFunction_PersistedValueMutation{modify("count", intVal(1))}}))
	rd = h.ready()
	rep := replyFor(rd, 1)
	if rep == nil || rep.Receipt.Reject != Applied || rep.Receipt.PreviousVersion == 0 {
		t.Fatalf("receipt: %+v", rep)
	}
	// Both writes share the commit; the entry ends with the mutation's.
	if final := rd.Commit.State[0].Entry.Version; rep.Receipt.Version != final || rep.Receipt.PreviousVersion != final-1 {
		t.Fatalf("the mutation must overwrite the function's write: receipt %+v, entry version %d", rep.Receipt, final)
	}
	if len(rd.Invocations) != 1 {
		t.Fatalf("the later message must go out after the mutation: %+v", rd.Invocations)
	}
	st := batchOf(rd.Invocations[0]).State[0].StateValue
	if string(st.Value) != string(intVal(100).Value) {
		t.Fatalf("the next invocation must see the mutation's value, got %x", st.Value)
	}
	if len(rd.Commit.Receipts) != 1 || len(rd.Commit.Audit) != 1 || rd.Commit.Audit[0].Before == nil {
		t.Fatalf("receipt and audit with before-image must be in the commit: %+v", rd.Commit)
	}
}

func TestMutationConditionsAndTypes(t *testing.T) {
	h := newHarness(t, Config{})
	h.registered(Spec{Name: "count", Typename: intType})
	h.mutate(countMutation(1, 5))
	rep := replyFor(h.ready(), 1)
	if rep.Receipt.Reject != Applied {
		t.Fatalf("%+v", rep.Receipt)
	}
	v := rep.Receipt.Version
	for _, tc := range []struct {
		name string
		m    Mutation
		want RejectCode
	}{
		{"stale If-Match", Mutation{State: "count", IfMatch: v + 1}, RejectPrecondition},
		{"If-None-Match on a value", Mutation{State: "count", IfNoneMatch: true}, RejectPrecondition},
		{"type conflict", Mutation{State: "count", Typename: "io.statefun.types/long"}, RejectTypeConflict},
		{"unregistered, no typename", Mutation{State: "other"}, RejectNoTypename},
		{"delete of nothing", Mutation{State: "other", Op: OpDelete}, RejectNotFound},
		{"If-Match list without the version", Mutation{State: "count", IfMatchTags: &Condition{Versions: []uint64{v + 1, v + 2}}}, RejectPrecondition},
		{"If-Match with no tag that can match", Mutation{State: "count", IfMatchTags: &Condition{}}, RejectPrecondition},
		{"If-None-Match list with the version", Mutation{State: "count", IfNoneMatchTags: &Condition{Versions: []uint64{v + 1, v}}}, RejectPrecondition},
		{"If-None-Match * on a value", Mutation{State: "count", IfNoneMatchTags: &Condition{Any: true}}, RejectPrecondition},
		// RFC 9110 §13.2.1: conditions are ignored when the request fails
		// without them.
		{"conditional delete of nothing", Mutation{State: "other", Op: OpDelete, IfMatchTags: &Condition{Any: true}}, RejectNotFound},
		{"If-Match list with the version", Mutation{State: "count", IfMatchTags: &Condition{Versions: []uint64{v + 7, v}}}, Applied},
		{"If-None-Match list without the version", Mutation{State: "count", IfNoneMatchTags: &Condition{Versions: []uint64{v}}}, Applied},
		{"If-Match *", Mutation{State: "count", IfMatchTags: &Condition{Any: true}}, Applied},
		{"If-Match * on no value", Mutation{State: "other", Typename: "x/y", IfMatchTags: &Condition{Any: true}}, RejectPrecondition},
		{"matching If-Match", Mutation{State: "count", IfMatch: v + 3}, Applied},
		{"unregistered with typename", Mutation{State: "other", Typename: "x/y"}, Applied},
		{"unregistered keeps stored type", Mutation{State: "other"}, Applied},
	} {
		tc.m.ID, tc.m.Request, tc.m.Addr, tc.m.Ack = tc.name, 9, addr("a"), AckApplied
		h.mutate(tc.m)
		rd := h.ready()
		rep := replyFor(rd, 9)
		if rep == nil || rep.Receipt.Reject != tc.want {
			t.Errorf("%s: %+v, want code %d", tc.name, rep, tc.want)
		}
		if tc.want == RejectPrecondition && tc.m.State == "count" && rep.Receipt.Version != v {
			t.Errorf("%s: a rejection must carry the current version %d, got %d", tc.name, v, rep.Receipt.Version)
		}
		if tc.want != Applied && rd.Commit != nil && len(rd.Commit.State) > 0 {
			t.Errorf("%s: a rejected mutation wrote state", tc.name)
		}
	}
	if e, _, _ := h.store.State(addr("a"), "other"); e.Typename != "x/y" {
		t.Fatalf("typename of an unregistered state comes from the existing value: %q", e.Typename)
	}
	h.mutate(Mutation{ID: "all", Request: 3, Addr: addr("a"), Op: OpDeleteAll, Ack: AckApplied})
	rd := h.ready()
	if rep := replyFor(rd, 3); rep.Receipt.Reject != Applied || len(rd.Commit.Audit) != 2 {
		t.Fatalf("delete all: %+v %+v", rep, rd.Commit.Audit)
	}
	if _, ok, _ := h.store.State(addr("a"), "count"); ok {
		t.Fatal("delete all left a value")
	}
}

func TestMutationRepairsAFailingAddressBeforeItsRetry(t *testing.T) {
	h := newHarness(t, Config{})
	h.registered(Spec{Name: "count", Typename: intType})
	h.ingress(addr("a"), intVal(1))
	inv := h.oneInvocation()
	h.step(ResultArrived{Addr: inv.Addr, Request: inv.Request, Response: result(&protocol.FromFunction_InvocationResponse{
		StateMutations: []*protocol.FromFunction_PersistedValueMutation{modify("nope", intVal(1))}})})
	rd := h.ready()
	if len(rd.Failures) != 1 {
		t.Fatal("want a failure")
	}
	h.mutate(countMutation(4, 42))
	if rep := replyFor(h.ready(), 4); rep == nil || rep.Receipt.Reject != Applied {
		t.Fatal("a mutation must not wait behind a batch that sits out a backoff")
	}
	h.now = rd.Failures[0].RetryAt
	h.step(Tick{})
	retry := h.oneInvocation()
	if v := batchOf(retry).State[0].StateValue; v == nil || string(v.Value) != string(intVal(42).Value) {
		t.Fatalf("the retry must carry the repaired state: %v", v)
	}
}

func TestReadSeesAppliedStateNotYetDurable(t *testing.T) {
	h := newHarness(t, Config{})
	h.registered(Spec{Name: "count", Typename: intType})
	h.mutate(countMutation(1, 7))
	rd := h.core.Ready() // not made durable
	if rd.Commit == nil {
		t.Fatal("no commit")
	}
	h.step(ReadState{Request: 2, Addr: addr("a"), State: "count"})
	rep := replyFor(h.core.Ready(), 2)
	if rep == nil || len(rep.Entries) != 1 || string(rep.Entries[0].Entry.Value) != string(intVal(7).Value) || rep.Entries[0].Spec == nil {
		t.Fatalf("read: %+v", rep)
	}
	h.step(ReadState{Request: 3, Addr: addr("a")})
	if rep := replyFor(h.core.Ready(), 3); len(rep.Entries) != 1 {
		t.Fatalf("read all: %+v", rep)
	}
}
