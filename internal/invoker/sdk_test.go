package invoker_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/statefun-go/statefun/internal/invoker"
	"github.com/statefun-go/statefun/internal/protocol"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if sdk.stop != nil {
		sdk.stop()
	}
	os.Exit(code)
}

// fnType is a function typename, "<namespace>/<name>".
type fnType struct{ namespace, name string }

// The functions served by the official Go SDK in these tests (see
// internal/sdkserver). The test binary cannot import the SDK; see sdk.
var (
	counterType = fnType{"example", "counter"}
	failingType = fnType{"example", "failing"}
)

// sdk is the child process that serves the Go SDK functions, started on
// first use and shared by every test and benchmark of this binary. It runs
// in its own process because the SDK's generated protobuf code and
// internal/protocol register the same proto names, and linking both into
// one binary panics at init.
var sdk struct {
	once sync.Once
	url  string // http://127.0.0.1:<port>
	err  error
	stop func()
}

// sdkURL returns the base URL of the SDK child process, building and
// starting it on first use. Append any path: the SDK routes on the target
// address in the request, never on the URL.
func sdkURL(tb testing.TB) string {
	tb.Helper()
	sdk.once.Do(func() { sdk.url, sdk.stop, sdk.err = startSDKServer() })
	if sdk.err != nil {
		tb.Fatal(sdk.err)
	}
	return sdk.url
}

func startSDKServer() (url string, stop func(), err error) {
	dir, err := os.MkdirTemp("", "invoker-sdkserver-")
	if err != nil {
		return "", nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	bin := filepath.Join(dir, "sdkserver")
	// go test runs in the package directory.
	if out, err := exec.Command("go", "build", "-o", bin, "./internal/sdkserver").CombinedOutput(); err != nil {
		return "", nil, fmt.Errorf("building internal/sdkserver: %v\n%s", err, out)
	}
	cmd := exec.Command(bin)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe() // the child exits when this closes
	if err != nil {
		return "", nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop = func() {
		stdin.Close()
		cmd.Wait()
		os.RemoveAll(dir)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if err != nil || !ok {
		stop()
		return "", nil, fmt.Errorf("sdkserver printed %q, %v; want listening on <addr>", line, err)
	}
	return "http://" + addr, stop, nil
}

// sdkForward returns a handler that passes each request to the SDK child
// process and its answer back unchanged, so that an in-process server (one
// with hooks, TLS or a UNIX socket) can front the real SDK.
func sdkForward(tb testing.TB) http.Handler {
	target := sdkURL(tb)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}}
	tb.Cleanup(client.CloseIdleConnections)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		req, err := http.NewRequestWithContext(r.Context(), r.Method, target+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		if ct := r.Header.Values("Content-Type"); ct != nil {
			req.Header["Content-Type"] = ct
		}
		resp, err := client.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		maps.Copy(w.Header(), resp.Header)
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, resp.Body)
	})
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
	url := sdkURL(t) + "/statefun"
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
	url := sdkURL(b) + "/statefun"
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
