package invoker_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"testing"

	"github.com/apache/flink-statefun/statefun-sdk-go/v3/pkg/statefun"
	"google.golang.org/protobuf/proto"

	"github.com/statefun-go/statefun/internal/invoker"
	"github.com/statefun-go/statefun/internal/protocol"
)

func TestMain(m *testing.M) {
	// The official Go SDK logs every registration, missing state and failed
	// invocation through the log package.
	log.SetOutput(io.Discard)
	m.Run()
}

// fnType is a function typename, "<namespace>/<name>".
type fnType struct{ namespace, name string }

// The functions served by sdkHandler.
var (
	counterType = fnType{"example", "counter"}
	failingType = fnType{"example", "failing"}
)

// sdkHandler serves two functions written with the official StateFun Go
// SDK v3.3.0:
//
//   - example/counter declares the state "seen" (io.statefun.types/int, no
//     expiration). Each message adds 1 to it and sends the new count, as an
//     io.statefun.types/int, to the egress example/out.
//   - example/failing declares no state and returns the error
//     "failed to invoke example/failing: boom", so the SDK answers HTTP 500.
//
// It answers on every path: the SDK routes on the target address in the
// request, never on the URL.
func sdkHandler(tb testing.TB) http.Handler {
	tb.Helper()
	seen := statefun.ValueSpec{Name: "seen", ValueType: statefun.Int32Type}
	fns := statefun.StatefulFunctionsBuilder()
	for _, spec := range []statefun.StatefulFunctionSpec{{
		FunctionType: statefun.TypeNameFrom("example/counter"),
		States:       []statefun.ValueSpec{seen},
		Function: statefun.StatefulFunctionPointer(func(ctx statefun.Context, _ statefun.Message) error {
			var n int32
			ctx.Storage().Get(seen, &n)
			n++
			ctx.Storage().Set(seen, n)
			ctx.SendEgress(statefun.GenericEgressBuilder{
				Target:    statefun.TypeNameFrom("example/out"),
				Value:     n,
				ValueType: statefun.Int32Type,
			})
			return nil
		}),
	}, {
		FunctionType: statefun.TypeNameFrom("example/failing"),
		Function: statefun.StatefulFunctionPointer(func(ctx statefun.Context, _ statefun.Message) error {
			return fmt.Errorf("failed to invoke %s: boom", ctx.Self().FunctionType)
		}),
	}} {
		if err := fns.WithSpec(spec); err != nil {
			tb.Fatal(err)
		}
	}
	return fns.AsHandler()
}

// Helpers that build ToFunction requests the way the runtime does.

func marshal(tb testing.TB, m proto.Message) []byte {
	tb.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// noState is the state list of a first request, before any registration.
var noState []*protocol.ToFunction_PersistedValue

// seenEntry is the "seen" state entry: registered with no value when value
// is nil, else holding *value.
func seenEntry(tb testing.TB, value *int32) []*protocol.ToFunction_PersistedValue {
	entry := &protocol.ToFunction_PersistedValue{StateName: "seen"}
	if value != nil {
		entry.StateValue = &protocol.TypedValue{
			Typename: "io.statefun.types/int",
			HasValue: true,
			Value:    marshal(tb, &protocol.IntWrapper{Value: *value}),
		}
	}
	return []*protocol.ToFunction_PersistedValue{entry}
}

// invocation returns a one-message batch for fn/alice carrying state.
func invocation(tb testing.TB, fn fnType, state []*protocol.ToFunction_PersistedValue) *protocol.ToFunction {
	return &protocol.ToFunction{Request: &protocol.ToFunction_Invocation_{
		Invocation: &protocol.ToFunction_InvocationBatchRequest{
			Target: &protocol.Address{Namespace: fn.namespace, Type: fn.name, Id: "alice"},
			State:  state,
			Invocations: []*protocol.ToFunction_Invocation{{
				Argument: &protocol.TypedValue{
					Typename: "io.statefun.types/string",
					HasValue: true,
					Value:    marshal(tb, &protocol.StringWrapper{Value: "hi"}),
				},
			}},
		},
	}}
}

func newClient(tb testing.TB, opts invoker.Options) *invoker.Client {
	tb.Helper()
	c, err := invoker.New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}

// intValue decodes an io.statefun.types/int value.
func intValue(t *testing.T, v *protocol.TypedValue) int32 {
	t.Helper()
	if v.GetTypename() != "io.statefun.types/int" || !v.GetHasValue() {
		t.Fatalf("value %v is not a present io.statefun.types/int", v)
	}
	var w protocol.IntWrapper
	if err := proto.Unmarshal(v.GetValue(), &w); err != nil {
		t.Fatal(err)
	}
	return w.Value
}

// TestGoSDKStateRoundTrip walks the state registration dance against the
// real Go SDK: unknown state, registered but empty, then holding a value.
func TestGoSDKStateRoundTrip(t *testing.T) {
	c := newClient(t, invoker.Options{})
	url := serve(t, sdkHandler(t))
	ctx := context.Background()

	t.Run("no state asks for the spec", func(t *testing.T) {
		from, err := c.Invoke(ctx, url, invocation(t, counterType, noState))
		if err != nil {
			t.Fatal(err)
		}
		missing := from.GetIncompleteInvocationContext().GetMissingValues()
		if len(missing) != 1 {
			t.Fatalf("got %v, want one missing value", from)
		}
		spec := missing[0]
		if spec.GetStateName() != "seen" || spec.GetTypeTypename() != "io.statefun.types/int" {
			t.Errorf("missing spec %v, want seen of io.statefun.types/int", spec)
		}
		// The Go SDK always sets the expiration spec, NONE without a TTL.
		if spec.GetExpirationSpec() == nil || spec.GetExpirationSpec().GetMode() != protocol.FromFunction_ExpirationSpec_NONE {
			t.Errorf("expiration %v, want mode NONE", spec.GetExpirationSpec())
		}
	})

	check := func(t *testing.T, from *protocol.FromFunction, want int32) {
		t.Helper()
		result := from.GetInvocationResult()
		if result == nil {
			t.Fatalf("got %v, want an invocation result", from)
		}
		muts := result.GetStateMutations()
		if len(muts) != 1 || muts[0].GetMutationType() != protocol.FromFunction_PersistedValueMutation_MODIFY || muts[0].GetStateName() != "seen" {
			t.Fatalf("mutations %v, want one MODIFY of seen", muts)
		}
		if got := intValue(t, muts[0].GetStateValue()); got != want {
			t.Errorf("seen = %d, want %d", got, want)
		}
		egresses := result.GetOutgoingEgresses()
		if len(egresses) != 1 || egresses[0].GetEgressNamespace() != "example" || egresses[0].GetEgressType() != "out" {
			t.Fatalf("egresses %v, want one to example/out", egresses)
		}
		if got := intValue(t, egresses[0].GetArgument()); got != want {
			t.Errorf("egress value = %d, want %d", got, want)
		}
	}

	t.Run("registered empty state starts at one", func(t *testing.T) {
		from, err := c.Invoke(ctx, url, invocation(t, counterType, seenEntry(t, nil)))
		if err != nil {
			t.Fatal(err)
		}
		check(t, from, 1)
	})

	t.Run("state value is incremented", func(t *testing.T) {
		v := int32(41)
		from, err := c.Invoke(ctx, url, invocation(t, counterType, seenEntry(t, &v)))
		if err != nil {
			t.Fatal(err)
		}
		check(t, from, 42)
	})
}

func BenchmarkInvokeLoopback(b *testing.B) {
	c := newClient(b, invoker.Options{})
	url := serve(b, sdkHandler(b))
	v := int32(7)
	req := invocation(b, counterType, seenEntry(b, &v))
	ctx := context.Background()

	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.Invoke(ctx, url, req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := c.Invoke(ctx, url, req); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
