package sdktest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/statefun-go/statefun/internal/protocol"
)

// Address builds an address from a function typename ("namespace/name",
// split at the last slash as the SDKs do) and an id.
func Address(fnType, id string) *protocol.Address {
	i := strings.LastIndexByte(fnType, '/')
	if i < 0 {
		return &protocol.Address{Type: fnType, Id: id}
	}
	return &protocol.Address{Namespace: fnType[:i], Type: fnType[i+1:], Id: id}
}

// AddressKey formats an address as "namespace/type/id", the key used by
// FeatureServer and by Report.Self and Report.Caller.
func AddressKey(a *protocol.Address) string {
	return a.GetNamespace() + "/" + a.GetType() + "/" + a.GetId()
}

// Invocation is one message of a batch; caller is nil for an ingress message.
func Invocation(caller *protocol.Address, arg *protocol.TypedValue) *protocol.ToFunction_Invocation {
	return &protocol.ToFunction_Invocation{Caller: caller, Argument: arg}
}

// State is one state entry of a batch; v nil sends the entry with no value,
// as the runtime does for a registered state that holds nothing.
func State(name string, v *protocol.TypedValue) *protocol.ToFunction_PersistedValue {
	return &protocol.ToFunction_PersistedValue{StateName: name, StateValue: v}
}

// EmptyStates is one valueless state entry per name.
func EmptyStates(names ...string) []*protocol.ToFunction_PersistedValue {
	out := make([]*protocol.ToFunction_PersistedValue, len(names))
	for i, n := range names {
		out[i] = State(n, nil)
	}
	return out
}

// Request builds a ToFunction carrying one invocation batch.
func Request(target *protocol.Address, state []*protocol.ToFunction_PersistedValue, invs ...*protocol.ToFunction_Invocation) *protocol.ToFunction {
	return &protocol.ToFunction{Request: &protocol.ToFunction_Invocation_{
		Invocation: &protocol.ToFunction_InvocationBatchRequest{Target: target, State: state, Invocations: invs},
	}}
}

// httpClient is shared by the helpers; a function server is one host called
// hard, so it keeps many idle connections.
var httpClient = &http.Client{
	Timeout:   30 * time.Second,
	Transport: &http.Transport{MaxIdleConnsPerHost: 64},
}

// Post sends req to a function endpoint as the runtime's async transport
// does and decodes the reply. It returns an error for a transport failure,
// a non-200 status, a Content-Type other than application/octet-stream or a
// body that is not a FromFunction.
func Post(ctx context.Context, url string, req *protocol.ToFunction) (*protocol.FromFunction, error) {
	body, err := proto.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("sdktest: marshal ToFunction: %w", err)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("sdktest: %w", err)
	}
	hreq.Header.Set("Content-Type", "application/octet-stream")
	hreq.Header.Set("Accept", "application/octet-stream")
	hreq.Header.Set("User-Agent", "statefun")
	resp, err := httpClient.Do(hreq)
	if err != nil {
		return nil, fmt.Errorf("sdktest: POST %s: %w", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("sdktest: POST %s: reading reply: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("sdktest: POST %s: status %s: %q", url, resp.Status, b)
	}
	if mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err != nil || mt != "application/octet-stream" {
		return nil, fmt.Errorf("sdktest: POST %s: Content-Type %q", url, resp.Header.Get("Content-Type"))
	}
	var from protocol.FromFunction
	if err := proto.Unmarshal(b, &from); err != nil {
		return nil, fmt.Errorf("sdktest: POST %s: reply is not a FromFunction: %w", url, err)
	}
	return &from, nil
}

// Invoke is Post that fails t on error.
func Invoke(t testing.TB, url string, req *protocol.ToFunction) *protocol.FromFunction {
	t.Helper()
	from, err := Post(context.Background(), url, req)
	if err != nil {
		t.Fatal(err)
	}
	return from
}

// Session plays the runtime for one address against a function endpoint:
// it registers the states the function asks for, re-sends a batch after an
// IncompleteInvocationContext, attaches every registered state to each
// batch and applies the returned mutations. Side effects other than state
// are returned to the caller and not acted upon. It is not safe for
// concurrent use.
type Session struct {
	url    string
	target *protocol.Address
	specs  []*protocol.FromFunction_PersistedValueSpec // registration order
	values map[string]*protocol.TypedValue
}

// NewSession starts a session with no registered state.
func NewSession(url string, target *protocol.Address) *Session {
	return &Session{url: url, target: target, values: map[string]*protocol.TypedValue{}}
}

// maxIncomplete bounds the IncompleteInvocationContext round trips of one
// Session.Call.
const maxIncomplete = 3

// Call delivers invs as one batch and returns the function's result, after
// applying its state mutations. It fails t on a transport error, a repeated
// IncompleteInvocationContext or a mutation the runtime would reject.
func (s *Session) Call(t testing.TB, invs ...*protocol.ToFunction_Invocation) *protocol.FromFunction_InvocationResponse {
	t.Helper()
	for range maxIncomplete {
		state := make([]*protocol.ToFunction_PersistedValue, len(s.specs))
		for i, spec := range s.specs {
			state[i] = State(spec.GetStateName(), s.values[spec.GetStateName()])
		}
		from := Invoke(t, s.url, Request(s.target, state, invs...))
		if inc := from.GetIncompleteInvocationContext(); inc != nil {
			s.register(t, inc.GetMissingValues())
			continue
		}
		res := from.GetInvocationResult()
		if res == nil {
			res = &protocol.FromFunction_InvocationResponse{}
		}
		s.apply(t, res.GetStateMutations())
		return res
	}
	t.Fatalf("sdktest: %s still incomplete after %d registrations", AddressKey(s.target), maxIncomplete)
	return nil
}

// Value is the current value of a state, nil when it has none.
func (s *Session) Value(name string) *protocol.TypedValue { return s.values[name] }

// Specs is every registered state spec, in registration order.
func (s *Session) Specs() []*protocol.FromFunction_PersistedValueSpec { return s.specs }

func (s *Session) spec(name string) *protocol.FromFunction_PersistedValueSpec {
	for _, spec := range s.specs {
		if spec.GetStateName() == name {
			return spec
		}
	}
	return nil
}

func (s *Session) register(t testing.TB, missing []*protocol.FromFunction_PersistedValueSpec) {
	t.Helper()
	for _, m := range missing {
		if old := s.spec(m.GetStateName()); old != nil {
			if old.GetTypeTypename() != m.GetTypeTypename() {
				t.Fatalf("sdktest: state %q re-registered as %q, was %q", m.GetStateName(), m.GetTypeTypename(), old.GetTypeTypename())
			}
			continue
		}
		s.specs = append(s.specs, m)
	}
}

func (s *Session) apply(t testing.TB, muts []*protocol.FromFunction_PersistedValueMutation) {
	t.Helper()
	for _, m := range muts {
		spec := s.spec(m.GetStateName())
		if spec == nil {
			t.Fatalf("sdktest: mutation of unregistered state %q", m.GetStateName())
		}
		switch m.GetMutationType() {
		case protocol.FromFunction_PersistedValueMutation_DELETE:
			delete(s.values, m.GetStateName())
		case protocol.FromFunction_PersistedValueMutation_MODIFY:
			if got, want := m.GetStateValue().GetTypename(), spec.GetTypeTypename(); got != want {
				t.Fatalf("sdktest: state %q modified as %q, registered as %q", m.GetStateName(), got, want)
			}
			s.values[m.GetStateName()] = RawValue(spec.GetTypeTypename(), m.GetStateValue().GetValue())
		default:
			t.Fatalf("sdktest: state %q: unknown mutation type %v", m.GetStateName(), m.GetMutationType())
		}
	}
}
