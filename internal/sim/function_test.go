package sim

import (
	"context"
	"errors"
	"strings"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/protocol"
)

// The simulated function speaks the real request-reply protocol in process
// (the engine's Functions interface): it reads the ToFunction batch and its
// state, and answers a FromFunction with state mutations, outgoing
// messages, delayed messages (with and without cancellation tokens),
// cancellations and egress records — or, when the simulation says so, an
// error or a response that breaks the protocol. It is written here rather
// than wrapping the official Go SDK (as internal/sdktest does) because the
// simulation must choose each answer, including malformed ones the SDK
// cannot produce, and needs no HTTP round trip to stay on one goroutine.
//
// Its durable effect is the state "log": one entry "<id>@<op>" per message
// it applied, in order, where <op> is the value of the state "op" (which
// only operator mutations write) that the request carried. The log is how
// the checker sees the order and the count of every message's effects,
// and which mutation each message saw.

var fnType = address.TypeName{Namespace: "sim", Name: "fn"}

const (
	logType = "sim/log"
	opType  = "sim/op"
	msgType = "sim/msg"
	// egressID and egressRoute name the one egress: a playground topic.
	egressNS, egressName = "sim", "out"
	egressID             = egressNS + "/" + egressName
	egressRoute          = "out"
)

// callMode is how the function answers the next call.
type callMode int

const (
	answerOK callMode = iota
	answerError
	answerViolation
)

// function is the simulated remote function.
type function struct {
	mode      callMode
	violation int // which violation, for answerViolation
	// failed is called with the ids of a batch answered with an error or a
	// violation (its messages may then see mutations queued behind them).
	failed func(addr string, ids []string)
	// called is called with the ids of every batch the function answers.
	called func(addr string, ids []string)
}

// message is a parsed argument: "<id>|<instruction>|...". Instructions:
// "f:<to>" sends "<id>>f" to <to>; "e" writes an egress record "<id>>e";
// "d:<to>:<ms>" sends "<id>>d" to <to> after <ms>; "dt:<to>:<ms>" sends
// "<id>>dt" so, with the cancellation token <id>; "c:<token>" cancels
// that token.
type message struct {
	id     string
	instrs []string
}

func parseMessage(v []byte) message {
	parts := strings.Split(string(v), "|")
	return message{id: parts[0], instrs: parts[1:]}
}

func (m message) encode() []byte {
	return []byte(strings.Join(append([]string{m.id}, m.instrs...), "|"))
}

func target(id string) *protocol.Address {
	return &protocol.Address{Namespace: fnType.Namespace, Type: fnType.Name, Id: id}
}

func arg(v []byte) *protocol.TypedValue {
	return &protocol.TypedValue{Typename: msgType, HasValue: true, Value: v}
}

var errFunction = errors.New("sim: the function failed")

// Call answers one batch.
func (f *function) Call(_ context.Context, _ address.TypeName, req *protocol.ToFunction) (*protocol.FromFunction, error) {
	b := req.GetInvocation()
	msgs := make([]message, len(b.GetInvocations()))
	ids := make([]string, len(msgs))
	for i, inv := range b.GetInvocations() {
		msgs[i] = parseMessage(inv.GetArgument().GetValue())
		ids[i] = msgs[i].id
	}
	addr := b.GetTarget().GetId()
	f.called(addr, ids)
	if f.mode == answerError {
		f.failed(addr, ids)
		return nil, errFunction
	}
	var logV, opV *protocol.TypedValue
	haveLog, haveOp := false, false
	for _, pv := range b.GetState() {
		switch pv.GetStateName() {
		case "log":
			haveLog, logV = true, pv.GetStateValue()
		case "op":
			haveOp, opV = true, pv.GetStateValue()
		}
	}
	if !haveLog || !haveOp {
		var missing []*protocol.FromFunction_PersistedValueSpec
		if !haveLog {
			missing = append(missing, &protocol.FromFunction_PersistedValueSpec{StateName: "log", TypeTypename: logType})
		}
		if !haveOp {
			missing = append(missing, &protocol.FromFunction_PersistedValueSpec{StateName: "op", TypeTypename: opType})
		}
		return &protocol.FromFunction{Response: &protocol.FromFunction_IncompleteInvocationContext_{
			IncompleteInvocationContext: &protocol.FromFunction_IncompleteInvocationContext{MissingValues: missing}}}, nil
	}
	var log []string
	if logV.GetHasValue() && len(logV.GetValue()) > 0 {
		log = strings.Split(string(logV.GetValue()), ";")
	}
	op := ""
	if opV.GetHasValue() {
		op = string(opV.GetValue())
	}
	res := &protocol.FromFunction_InvocationResponse{}
	for _, m := range msgs {
		log = append(log, m.id+"@"+op)
		for _, in := range m.instrs {
			f.instruct(res, m.id, in)
		}
	}
	res.StateMutations = append(res.StateMutations, &protocol.FromFunction_PersistedValueMutation{
		MutationType: protocol.FromFunction_PersistedValueMutation_MODIFY, StateName: "log",
		StateValue: &protocol.TypedValue{Typename: logType, HasValue: true, Value: []byte(strings.Join(log, ";"))},
	})
	if f.mode == answerViolation {
		f.failed(addr, ids)
		violate(res, f.violation)
	}
	return &protocol.FromFunction{Response: &protocol.FromFunction_InvocationResult{InvocationResult: res}}, nil
}

// instruct adds the effects of one instruction of message id.
func (f *function) instruct(res *protocol.FromFunction_InvocationResponse, id, in string) {
	p := strings.Split(in, ":")
	switch p[0] {
	case "f":
		res.OutgoingMessages = append(res.OutgoingMessages, &protocol.FromFunction_Invocation{
			Target: target(p[1]), Argument: arg([]byte(id + ">f"))})
	case "e":
		res.OutgoingEgresses = append(res.OutgoingEgresses, &protocol.FromFunction_EgressMessage{
			EgressNamespace: egressNS, EgressType: egressName, Argument: arg([]byte(id + ">e"))})
	case "d", "dt":
		d := &protocol.FromFunction_DelayedInvocation{Target: target(p[1]), Argument: arg([]byte(id + ">" + p[0])), DelayInMs: atoi(p[2])}
		if p[0] == "dt" {
			d.CancellationToken = id
		}
		res.DelayedInvocations = append(res.DelayedInvocations, d)
	case "c":
		res.DelayedInvocations = append(res.DelayedInvocations, &protocol.FromFunction_DelayedInvocation{
			IsCancellationRequest: true, CancellationToken: p[1]})
	}
}

// violate breaks the protocol in one of a few ways the core must refuse
// whole (and retry), leaving no effect of the response behind.
func violate(res *protocol.FromFunction_InvocationResponse, which int) {
	switch which % 4 {
	case 0: // a state that was never registered
		res.StateMutations = append(res.StateMutations, &protocol.FromFunction_PersistedValueMutation{
			MutationType: protocol.FromFunction_PersistedValueMutation_MODIFY, StateName: "nope",
			StateValue: &protocol.TypedValue{Typename: logType, HasValue: true, Value: []byte("x")}})
	case 1: // a message to an empty id
		res.OutgoingMessages = append(res.OutgoingMessages, &protocol.FromFunction_Invocation{Target: target(""), Argument: arg([]byte("x"))})
	case 2: // a negative delay
		res.DelayedInvocations = append(res.DelayedInvocations, &protocol.FromFunction_DelayedInvocation{
			Target: target("a0"), Argument: arg([]byte("x")), DelayInMs: -1})
	case 3: // a value of another type than the registered one
		res.StateMutations = append(res.StateMutations, &protocol.FromFunction_PersistedValueMutation{
			MutationType: protocol.FromFunction_PersistedValueMutation_MODIFY, StateName: "op",
			StateValue: &protocol.TypedValue{Typename: logType, HasValue: true, Value: []byte("x")}})
	}
}

func atoi(s string) int64 {
	var n int64
	for _, c := range s {
		n = n*10 + int64(c-'0')
	}
	return n
}
