package main

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/apache/flink-statefun/statefun-sdk-go/v3/pkg/statefun"
)

// Function types, message types and the egress, as in the StateFun
// playground's greeter.
var (
	PersonType  = statefun.TypeNameFrom("example/person")
	GreeterType = statefun.TypeNameFrom("example/greeter")

	// GreetRequestType is both the ingress message ({"name": ...}) and the
	// person's message to the greeter ({"name": ..., "visits": n}).
	GreetRequestType = statefun.MakeJsonType(statefun.TypeNameFrom("example/GreetRequest"))
	// EgressRecordType is what the playground egress accepts.
	EgressRecordType = statefun.MakeJsonType(statefun.TypeNameFrom("io.statefun.playground/EgressRecord"))
	PlaygroundEgress = statefun.TypeNameFrom("io.statefun.playground/egress")

	// Visits is the person's state: how many greet requests it has seen.
	Visits = statefun.ValueSpec{Name: "visits", ValueType: statefun.Int32Type}
)

// GreetingsTopic is the playground egress topic the greetings go to.
const GreetingsTopic = "greetings"

// GreetRequest is the JSON message of type example/GreetRequest.
type GreetRequest struct {
	Name   string `json:"name"`
	Visits int32  `json:"visits,omitempty"`
}

// EgressRecord is the JSON value of io.statefun.playground/EgressRecord.
type EgressRecord struct {
	Topic   string `json:"topic"`
	Payload string `json:"payload"`
}

// Handler serves both functions.
func Handler() http.Handler {
	fns := statefun.StatefulFunctionsBuilder()
	for _, spec := range []statefun.StatefulFunctionSpec{
		{FunctionType: PersonType, States: []statefun.ValueSpec{Visits}, Function: statefun.StatefulFunctionPointer(Person)},
		{FunctionType: GreeterType, Function: statefun.StatefulFunctionPointer(Greeter)},
	} {
		if err := fns.WithSpec(spec); err != nil {
			panic(err)
		}
	}
	return fns.AsHandler()
}

// Person counts the visits of one person (the function id is the name) and
// asks the greeter to greet them.
func Person(ctx statefun.Context, msg statefun.Message) error {
	req, err := greetRequest(msg)
	if err != nil {
		return err
	}
	if req.Name == "" {
		req.Name = ctx.Self().Id
	}
	var visits int32
	ctx.Storage().Get(Visits, &visits)
	visits++
	ctx.Storage().Set(Visits, visits)

	req.Visits = visits
	ctx.Send(statefun.MessageBuilder{
		Target:    statefun.Address{FunctionType: GreeterType, Id: req.Name},
		Value:     req,
		ValueType: GreetRequestType,
	})
	return nil
}

// Greeter turns a counted request into a greeting on the greetings topic.
func Greeter(ctx statefun.Context, msg statefun.Message) error {
	req, err := greetRequest(msg)
	if err != nil {
		return err
	}
	ctx.SendEgress(statefun.GenericEgressBuilder{
		Target:    PlaygroundEgress,
		Value:     EgressRecord{Topic: GreetingsTopic, Payload: Greeting(req.Name, req.Visits)},
		ValueType: EgressRecordType,
	})
	return nil
}

// Greeting is the text for a person's n-th visit.
func Greeting(name string, visits int32) string {
	switch visits {
	case 1:
		return fmt.Sprintf("Hello %s! Welcome, this is your first visit.", name)
	case 2:
		return fmt.Sprintf("Hello %s! Nice to see you again.", name)
	case 3:
		return fmt.Sprintf("Hello %s! Third time is a charm.", name)
	default:
		return fmt.Sprintf("Hello %s! Happy to see you once again: this is visit number %d.", name, visits)
	}
}

var errNotGreetRequest = errors.New("greeter: message is not an example/GreetRequest")

func greetRequest(msg statefun.Message) (GreetRequest, error) {
	var req GreetRequest
	if !msg.Is(GreetRequestType) {
		return req, fmt.Errorf("%w (got %s)", errNotGreetRequest, msg.ValueTypeName())
	}
	if err := msg.As(GreetRequestType, &req); err != nil {
		return req, fmt.Errorf("greeter: %w", err)
	}
	return req, nil
}
