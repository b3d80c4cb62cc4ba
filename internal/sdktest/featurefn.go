package sdktest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/flink-statefun/statefun-sdk-go/v3/pkg/statefun"
)

// The SDK types of the values exchanged with the functions.
var (
	commandType      = statefun.MakeJsonType(statefun.TypeNameFrom(CommandType))
	docType          = statefun.MakeJsonType(statefun.TypeNameFrom(DocType))
	egressRecordType = statefun.MakeJsonType(statefun.TypeNameFrom(EgressRecordType))
	playgroundEgress = statefun.TypeNameFrom(PlaygroundEgress)
)

// The states of FeaturesFn: every built-in type, a JSON type and both
// expiration modes.
var (
	boolSpec     = statefun.ValueSpec{Name: StateBool, ValueType: statefun.BoolType}
	int32Spec    = statefun.ValueSpec{Name: StateInt32, ValueType: statefun.Int32Type}
	int64Spec    = statefun.ValueSpec{Name: StateInt64, ValueType: statefun.Int64Type}
	float32Spec  = statefun.ValueSpec{Name: StateFloat32, ValueType: statefun.Float32Type}
	float64Spec  = statefun.ValueSpec{Name: StateFloat64, ValueType: statefun.Float64Type}
	stringSpec   = statefun.ValueSpec{Name: StateString, ValueType: statefun.StringType}
	docSpec      = statefun.ValueSpec{Name: StateDoc, ValueType: docType}
	ttlWriteSpec = statefun.ValueSpec{
		Name:       StateTTLWrite,
		ValueType:  statefun.StringType,
		Expiration: statefun.ExpireAfterWrite(TTLWrite),
	}
	ttlCallSpec = statefun.ValueSpec{
		Name:       StateTTLCall,
		ValueType:  statefun.StringType,
		Expiration: statefun.ExpireAfterCall(TTLCall),
	}

	featureSpecs = []statefun.ValueSpec{
		boolSpec, int32Spec, int64Spec, float32Spec, float64Spec,
		stringSpec, docSpec, ttlWriteSpec, ttlCallSpec,
	}
)

// maxSeqDepth bounds the nesting of OpSeq commands run in one call.
const maxSeqDepth = 32

// FeatureHandler returns the official Go SDK's request-reply handler
// serving FeaturesFn and StatelessFn, which run the command language of the
// package documentation. Each call returns a handler with its own
// per-address call counts (Report.Calls). StartFeatureServer serves one on
// a loopback port; a test that needs a listener of its own serves it
// directly.
func FeatureHandler() http.Handler { return featureHandler(&EgressSender{}) }

func featureHandler(out *EgressSender) http.Handler {
	fns := statefun.StatefulFunctionsBuilder()
	must(fns.WithSpec(statefun.StatefulFunctionSpec{
		FunctionType: statefun.TypeNameFrom(FeaturesFn),
		States:       featureSpecs,
		Function:     &features{stateful: true, calls: map[string]int64{}, out: out},
	}))
	must(fns.WithSpec(statefun.StatefulFunctionSpec{
		FunctionType: statefun.TypeNameFrom(StatelessFn),
		Function:     &features{calls: map[string]int64{}, out: out},
	}))
	return fns.AsHandler()
}

// EgressRoute says where the functions send their records. The zero value
// is the playground egress: each record an EgressRecord for
// PlaygroundEgress. With Kafka set, each record goes to that
// io.statefun.kafka.v1/egress instead, built with the SDK's
// KafkaEgressBuilder: the topic TopicPrefix+topic, the sender's id as the
// key, the payload as the value. Cluster mode refuses the playground
// egress, so a test running there reads its results from Kafka.
type EgressRoute struct {
	// Kafka is the typename of the Kafka egress; empty for the playground
	// egress.
	Kafka string
	// TopicPrefix goes before each topic name, so that tests sharing one
	// Kafka do not share topics.
	TopicPrefix string
}

// EgressSender sends the records of a function by an EgressRoute that may
// change while the function serves. Its zero value sends to the playground
// egress until SendEgressTo sets a route. FeatureServer and CounterServer
// use one; a function written in a test can use one of its own.
type EgressSender struct{ p atomic.Pointer[EgressRoute] }

// SendEgressTo makes the following records go by r. It may be called while
// the function serves.
func (s *EgressSender) SendEgressTo(r EgressRoute) { s.p.Store(&r) }

// Send sends one record with payload on topic by the current route: to the
// route's Kafka egress, on topic TopicPrefix+topic keyed by the sender's
// id, or, without a Kafka egress, as an EgressRecord to PlaygroundEgress.
func (s *EgressSender) Send(ctx statefun.Context, topic, payload string) {
	if to := s.p.Load(); to != nil && to.Kafka != "" {
		ctx.SendEgress(statefun.KafkaEgressBuilder{
			Target: statefun.TypeNameFrom(to.Kafka),
			Topic:  to.TopicPrefix + topic,
			Key:    ctx.Self().Id,
			Value:  []byte(payload),
		})
		return
	}
	egress(ctx, topic, payload)
}

func must(err error) {
	if err != nil {
		panic(fmt.Sprintf("sdktest: %v", err))
	}
}

// features runs Commands. The stateless variant declares no state and
// rejects the commands that need one.
type features struct {
	stateful bool
	out      *EgressSender

	mu    sync.Mutex
	calls map[string]int64 // "namespace/type/id" -> messages handled
}

func (f *features) Invoke(ctx statefun.Context, msg statefun.Message) error {
	f.mu.Lock()
	self := addressString(ctx.Self())
	f.calls[self]++
	calls := f.calls[self]
	f.mu.Unlock()

	inv := invocation{ctx: ctx, msg: &msg, calls: calls, stateful: f.stateful, out: f.out}
	if !msg.Is(commandType) {
		return inv.report(Command{Op: OpReport})
	}
	var cmd Command
	if err := msg.As(commandType, &cmd); err != nil {
		return fmt.Errorf("sdktest: bad command: %w", err)
	}
	return inv.run(cmd, 0)
}

// invocation is one message being handled.
type invocation struct {
	ctx      statefun.Context
	msg      *statefun.Message
	calls    int64
	stateful bool
	out      *EgressSender
}

var errNoState = errors.New("sdktest: " + StatelessFn + " has no state")

func (in invocation) run(cmd Command, depth int) error {
	if depth > maxSeqDepth {
		return fmt.Errorf("sdktest: commands nested deeper than %d", maxSeqDepth)
	}
	switch cmd.Op {
	case OpSet:
		if !in.stateful {
			return errNoState
		}
		if cmd.Values != nil {
			in.set(*cmd.Values)
		}
	case OpClear:
		if !in.stateful {
			return errNoState
		}
		return in.clear(cmd.States)
	case OpIncr:
		if !in.stateful {
			return errNoState
		}
		var n int64
		in.ctx.Storage().Get(int64Spec, &n)
		in.ctx.Storage().Set(int64Spec, n+1)
	case OpReport:
		return in.report(cmd)
	case OpEgress:
		in.out.Send(in.ctx, topicOr(cmd.Topic), cmd.Payload)
	case OpSend, OpSendAfter:
		return in.send(cmd)
	case OpCancel:
		token, err := statefun.NewCancellationToken(cmd.Token)
		if err != nil {
			return fmt.Errorf("sdktest: cancel: %w", err)
		}
		in.ctx.CancelDelayedMessage(token)
	case OpSeq:
		for _, c := range cmd.Commands {
			if err := in.run(c, depth+1); err != nil {
				return err
			}
		}
	case OpFail:
		return fmt.Errorf("sdktest: failing as told (tag %q)", cmd.Tag)
	case OpFailUnlessFixed:
		if _, ok := fixed.Load(cmd.Tag); !ok {
			return fmt.Errorf("sdktest: poisoned message (tag %q), not fixed yet", cmd.Tag)
		}
	default:
		return fmt.Errorf("sdktest: unknown op %q", cmd.Op)
	}
	return nil
}

func (in invocation) set(v States) {
	s := in.ctx.Storage()
	if v.Bool != nil {
		s.Set(boolSpec, *v.Bool)
	}
	if v.Int32 != nil {
		s.Set(int32Spec, *v.Int32)
	}
	if v.Int64 != nil {
		s.Set(int64Spec, *v.Int64)
	}
	if v.Float32 != nil {
		s.Set(float32Spec, *v.Float32)
	}
	if v.Float64 != nil {
		s.Set(float64Spec, *v.Float64)
	}
	if v.String != nil {
		s.Set(stringSpec, *v.String)
	}
	if v.Doc != nil {
		s.Set(docSpec, *v.Doc)
	}
	if v.TTLWrite != nil {
		s.Set(ttlWriteSpec, *v.TTLWrite)
	}
	if v.TTLCall != nil {
		s.Set(ttlCallSpec, *v.TTLCall)
	}
}

func (in invocation) clear(names []string) error {
	if len(names) == 0 {
		for _, spec := range featureSpecs {
			in.ctx.Storage().Remove(spec)
		}
		return nil
	}
	for _, name := range names {
		spec, ok := specByName(name)
		if !ok {
			return fmt.Errorf("sdktest: clear: unknown state %q", name)
		}
		in.ctx.Storage().Remove(spec)
	}
	return nil
}

func specByName(name string) (statefun.ValueSpec, bool) {
	for _, spec := range featureSpecs {
		if spec.Name == name {
			return spec, true
		}
	}
	return statefun.ValueSpec{}, false
}

func (in invocation) report(cmd Command) error {
	r := Report{
		Tag:     cmd.Tag,
		Self:    addressString(in.ctx.Self()),
		ArgType: in.msg.ValueTypeName().String(),
		Calls:   in.calls,
	}
	if c := in.ctx.Caller(); c != nil {
		r.Caller = new(addressString(*c))
	}
	if in.msg.IsString() {
		r.ArgText = in.msg.AsString()
	}
	if in.stateful {
		r.States = in.readStates()
	}
	payload, err := jsonString(r)
	if err != nil {
		return err
	}
	in.out.Send(in.ctx, topicOr(cmd.Topic), payload)
	return nil
}

func (in invocation) readStates() States {
	var out States
	out.Bool = get[bool](in.ctx, boolSpec)
	out.Int32 = get[int32](in.ctx, int32Spec)
	out.Int64 = get[int64](in.ctx, int64Spec)
	out.Float32 = get[float32](in.ctx, float32Spec)
	out.Float64 = get[float64](in.ctx, float64Spec)
	out.String = get[string](in.ctx, stringSpec)
	out.Doc = get[Doc](in.ctx, docSpec)
	out.TTLWrite = get[string](in.ctx, ttlWriteSpec)
	out.TTLCall = get[string](in.ctx, ttlCallSpec)
	return out
}

// get reads one state, nil when it has no value.
func get[T any](ctx statefun.Context, spec statefun.ValueSpec) *T {
	var v T
	if !ctx.Storage().Get(spec, &v) {
		return nil
	}
	return &v
}

func (in invocation) send(cmd Command) error {
	self := in.ctx.Self()
	target := self
	if cmd.To != nil {
		if cmd.To.Fn != "" {
			tn, err := statefun.ParseTypeName(cmd.To.Fn)
			if err != nil {
				return fmt.Errorf("sdktest: %s: %w", cmd.Op, err)
			}
			target.FunctionType = tn
		}
		if cmd.To.ID != "" {
			target.Id = cmd.To.ID
		}
	}
	mb := statefun.MessageBuilder{Target: target, Value: cmd.Text}
	if cmd.Command != nil {
		mb = statefun.MessageBuilder{Target: target, Value: *cmd.Command, ValueType: commandType}
	}
	if cmd.Op == OpSend {
		in.ctx.Send(mb)
		return nil
	}
	if cmd.DelayMs < 0 {
		return fmt.Errorf("sdktest: send_after: negative delay %d", cmd.DelayMs)
	}
	delay := time.Duration(cmd.DelayMs) * time.Millisecond
	if cmd.Token == "" {
		in.ctx.SendAfter(delay, mb)
		return nil
	}
	token, err := statefun.NewCancellationToken(cmd.Token)
	if err != nil {
		return fmt.Errorf("sdktest: send_after: %w", err)
	}
	in.ctx.SendAfterWithCancellationToken(delay, token, mb)
	return nil
}

// egress sends one playground egress record.
func egress(ctx statefun.Context, topic, payload string) {
	ctx.SendEgress(statefun.GenericEgressBuilder{
		Target:    playgroundEgress,
		Value:     EgressRecord{Topic: topic, Payload: payload},
		ValueType: egressRecordType,
	})
}

func jsonString(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("sdktest: %w", err)
	}
	return string(b), nil
}

func topicOr(topic string) string {
	if topic == "" {
		return DefaultTopic
	}
	return topic
}

func addressString(a statefun.Address) string {
	return a.FunctionType.String() + "/" + a.Id
}
