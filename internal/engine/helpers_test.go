package engine

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// The tests of this package run the engine on a real Pebble store on an
// in-memory filesystem, with a function implemented in Go (counter) behind
// the Functions interface.

type quietPebble struct{}

func (quietPebble) Infof(string, ...any)         {}
func (quietPebble) Errorf(string, ...any)        {}
func (quietPebble) Fatalf(f string, args ...any) { panic("pebble fatal: " + f) }

var counterType = address.TypeName{Namespace: "test", Name: "counter"}

const countTypename = "test/count"

// counter is a remote function: it registers state "n" and adds the
// number of messages of each batch to it. Messages whose text is
// "fwd:<id>" are also forwarded to counter <id>. It records the order in
// which it saw messages.
type counter struct {
	mu   sync.Mutex
	seen []string // "<id>:<text>"
}

func (f *counter) Call(_ context.Context, _ address.TypeName, req *protocol.ToFunction) (*protocol.FromFunction, error) {
	b := req.GetInvocation()
	var n int64
	have := false
	for _, pv := range b.GetState() {
		if pv.GetStateName() == "n" {
			have = true
			if v := pv.GetStateValue(); v.GetHasValue() {
				n, _ = strconv.ParseInt(string(v.GetValue()), 10, 64)
			}
		}
	}
	if !have {
		return &protocol.FromFunction{Response: &protocol.FromFunction_IncompleteInvocationContext_{
			IncompleteInvocationContext: &protocol.FromFunction_IncompleteInvocationContext{
				MissingValues: []*protocol.FromFunction_PersistedValueSpec{{StateName: "n", TypeTypename: countTypename}},
			}}}, nil
	}
	res := &protocol.FromFunction_InvocationResponse{}
	f.mu.Lock()
	for _, inv := range b.GetInvocations() {
		text := string(inv.GetArgument().GetValue())
		f.seen = append(f.seen, b.GetTarget().GetId()+":"+text)
		if len(text) > 4 && text[:4] == "fwd:" {
			res.OutgoingMessages = append(res.OutgoingMessages, &protocol.FromFunction_Invocation{
				Target:   &protocol.Address{Namespace: counterType.Namespace, Type: counterType.Name, Id: text[4:]},
				Argument: &protocol.TypedValue{Typename: "test/text", HasValue: true, Value: []byte("from " + b.GetTarget().GetId())},
			})
		}
	}
	f.mu.Unlock()
	n += int64(len(b.GetInvocations()))
	res.StateMutations = []*protocol.FromFunction_PersistedValueMutation{{
		MutationType: protocol.FromFunction_PersistedValueMutation_MODIFY, StateName: "n",
		StateValue: &protocol.TypedValue{Typename: countTypename, HasValue: true, Value: []byte(strconv.FormatInt(n, 10))},
	}}
	return &protocol.FromFunction{Response: &protocol.FromFunction_InvocationResult{InvocationResult: res}}, nil
}

func (f *counter) messages() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.seen...)
}

func msg(id, text string) *protocol.Envelope {
	return &protocol.Envelope{
		Target:   &protocol.Address{Namespace: counterType.Namespace, Type: counterType.Name, Id: id},
		Argument: &protocol.TypedValue{Typename: "test/text", HasValue: true, Value: []byte(text)},
	}
}

func openStore(t testing.TB, fs vfs.FS, partitions int) *store.DB {
	t.Helper()
	db, err := store.Open("data", store.Options{Partitions: partitions, FS: fs, Logger: quietPebble{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() }) // after the engine's Close: cleanups run last-in first-out
	return db
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newEngine returns an engine over db (not started), closed when t ends.
func newEngine(t testing.TB, db *store.DB, fns Functions, mod func(*Options)) *Engine {
	t.Helper()
	opts := Options{Store: db, Functions: fns, Logger: quietLog(), RetryBase: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond}
	if mod != nil {
		mod(&opts)
	}
	e, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

// count reads state n of counter id through the engine.
func count(t testing.TB, e *Engine, id string) string {
	t.Helper()
	rep, err := e.Read(context.Background(), address.Address{Type: counterType, ID: id}, "n")
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range rep.Entries {
		if en.State == "n" {
			return string(en.Entry.Value)
		}
	}
	return ""
}

// waitFor polls cond for up to 10 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// simClock is a clock the test moves by hand.
type simClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *simClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *simClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func addr(id string) address.Address { return address.Address{Type: counterType, ID: id} }
