package engine

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// delayer is a remote function that schedules and cancels delayed
// messages as its messages say: "at:<token>:<ms>" schedules a message to
// delayer "sink" in ms with that token, "cancel:<token>" cancels, in the
// order given (";"-separated). The sink records what arrives.
type delayer struct {
	mu    sync.Mutex
	fired []string
	seen  int
}

func (f *delayer) Call(_ context.Context, _ address.TypeName, req *protocol.ToFunction) (*protocol.FromFunction, error) {
	b := req.GetInvocation()
	res := &protocol.FromFunction_InvocationResponse{}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, inv := range b.GetInvocations() {
		text := string(inv.GetArgument().GetValue())
		f.seen++
		if b.GetTarget().GetId() == "sink" {
			f.fired = append(f.fired, text)
			continue
		}
		for _, c := range strings.Split(text, ";") {
			p := strings.Split(c, ":")
			switch p[0] {
			case "at":
				ms, _ := strconv.ParseInt(p[2], 10, 64)
				res.DelayedInvocations = append(res.DelayedInvocations, &protocol.FromFunction_DelayedInvocation{
					Target:            &protocol.Address{Namespace: counterType.Namespace, Type: counterType.Name, Id: "sink"},
					Argument:          &protocol.TypedValue{Typename: "test/text", HasValue: true, Value: []byte(p[1] + "@" + p[2])},
					DelayInMs:         ms,
					CancellationToken: p[1],
				})
			case "cancel":
				res.DelayedInvocations = append(res.DelayedInvocations, &protocol.FromFunction_DelayedInvocation{
					IsCancellationRequest: true, CancellationToken: p[1]})
			}
		}
	}
	return &protocol.FromFunction{Response: &protocol.FromFunction_InvocationResult{InvocationResult: res}}, nil
}

func (f *delayer) state() (int, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seen, slices.Clone(f.fired)
}

// TestTimerWindowTokensThroughTheStore: with a window of one delayed
// message, the others wait in the store, and cancellations find them
// through the store's index by token — also a token cancelled and given
// to a new delayed message in one response, whose index entry must stand.
// The delayed messages not cancelled arrive once each, in due order.
func TestTimerWindowTokensThroughTheStore(t *testing.T) {
	db := openStore(t, vfs.NewMem(), 1)
	fn := &delayer{}
	e := newEngine(t, db, fn, func(o *Options) { o.TimerWindow = 1 })
	e.Start()
	send := func(text string) {
		t.Helper()
		seen, _ := fn.state()
		if err := e.Ingest(context.Background(), msg("s", text)); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the function's answer to "+text, func() bool { n, _ := fn.state(); return n > seen })
	}
	send("at:early:1500;at:x:2500;at:y:2600;at:z:2700")
	var first store.TimerKey
	waitFor(t, "x in the store's index", func() bool {
		k, ok, err := db.TimerByToken(0, "s", "x")
		if err != nil {
			t.Fatal(err)
		}
		first = k
		return ok
	})
	send("cancel:x;at:x:3000")
	waitFor(t, "the index to name the new x", func() bool {
		k, ok, err := db.TimerByToken(0, "s", "x")
		if err != nil {
			t.Fatal(err)
		}
		return ok && k != first
	})
	send("cancel:y")
	waitFor(t, "the delayed messages", func() bool { _, fired := fn.state(); return len(fired) >= 3 })
	time.Sleep(300 * time.Millisecond)
	if _, fired := fn.state(); !slices.Equal(fired, []string{"early@1500", "z@2700", "x@3000"}) {
		t.Fatalf("arrived %q, want early, z and the second x, in due order", fired)
	}
	for _, tok := range []string{"early", "x", "y", "z"} {
		waitFor(t, "token "+tok+" out of the index once its message fired or was cancelled", func() bool {
			_, ok, err := db.TimerByToken(0, "s", tok)
			return err == nil && !ok
		})
	}
}
