package partition

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"github.com/statefun-go/statefun/internal/protocol"
)

// TestTimerWindowMatchesUnbounded drives a core whose window holds a few
// delayed messages and one whose window holds them all through the same
// random schedule — a function that schedules and cancels delayed messages
// with a few tokens (a duplicate one is a violation, retried), commits made
// durable at random points, time moving on, crashes that lose what is not
// durable — and requires the same effects at every step: the same delayed
// messages scheduled, removed and fired, the same invocations and
// failures. Only the window differs, so any difference is the paging's.
func TestTimerWindowMatchesUnbounded(t *testing.T) {
	for seed := range uint64(40) {
		for _, window := range []int{1, 2, 3, 5} {
			t.Run(fmt.Sprintf("seed=%d/window=%d", seed, window), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 99))
				small, all := newTwin(window), newTwin(1_000_000)
				var now int64 = 1000
				msgs := 0
				for step := range 400 {
					var action string
					switch r := rng.IntN(100); {
					case r < 15:
						msgs++
						action = "ingress"
						k, env := small.ingressKey(), &protocol.Envelope{Target: toProto(addr("s")), Argument: value(fmt.Sprint("m", msgs))}
						small.step(t, now, MessageArrived{Key: k, Env: env})
						all.step(t, now, MessageArrived{Key: all.ingressKey(), Env: env})
					case r < 50:
						action = "respond"
						resp := randomResponse(rng)
						small.respond(t, now, resp)
						all.respond(t, now, resp)
					case r < 70:
						action = "durable"
						small.durable(t, now)
						all.durable(t, now)
					case r < 95:
						now += rng.Int64N(120)
						action = fmt.Sprint("tick to ", now)
						small.step(t, now, Tick{})
						all.step(t, now, Tick{})
					default:
						action = "crash"
						small.restore(t, now)
						all.restore(t, now)
					}
					a, b := small.take(), all.take()
					if a != b {
						t.Fatalf("step %d (%s): with a window of %d:\n%s\nwith every delayed message in memory:\n%s", step, action, window, a, b)
					}
					if small.core.TimersHeld() > window+len(small.core.past) {
						t.Fatalf("step %d: %d delayed messages in the window of %d", step, len(small.core.pendingT), window)
					}
				}
			})
		}
	}
}

// randomResponse is a function's response that schedules and cancels
// delayed messages to "t" with tokens from a small set.
func randomResponse(rng *rand.Rand) *protocol.FromFunction_InvocationResponse {
	r := &protocol.FromFunction_InvocationResponse{}
	for range rng.IntN(4) {
		tok := ""
		if rng.IntN(2) == 0 {
			tok = string(rune('a' + rng.IntN(4)))
		}
		if tok != "" && rng.IntN(3) == 0 {
			r.DelayedInvocations = append(r.DelayedInvocations, &protocol.FromFunction_DelayedInvocation{IsCancellationRequest: true, CancellationToken: tok})
			continue
		}
		r.DelayedInvocations = append(r.DelayedInvocations, &protocol.FromFunction_DelayedInvocation{
			Target: toProto(addr("t")), Argument: value(fmt.Sprint("d", rng.IntN(1000))), DelayInMs: rng.Int64N(300), CancellationToken: tok})
	}
	return r
}

// twin is one core of TestTimerWindowMatchesUnbounded with its store.
type twin struct {
	cfg      Config
	core     *Core
	store    *memStore
	unsynced []*Commit
	pending  []Invocation
	seq      uint64
	commitID uint64
	version  uint64
	out      []string
}

func newTwin(window int) *twin {
	w := &twin{cfg: Config{Partitions: 1, TimerWindow: window, RetryBase: 10, RetryMax: 40}, store: newMemStore()}
	w.core = New(w.cfg, w.store, Restore{})
	return w
}

func (w *twin) ingressKey() InboxKey {
	w.seq++
	return InboxKey{Source: SourceIngress, Seq: w.seq}
}

func (w *twin) step(t *testing.T, now int64, ev Event) {
	t.Helper()
	if k, ok := ev.(MessageArrived); ok {
		w.store.inbox[k.Key] = k.Env
	}
	if err := w.core.Step(now, ev); err != nil {
		t.Fatal(err)
	}
	w.collect()
}

// collect takes the core's Ready into the twin's record.
func (w *twin) collect() {
	rd := w.core.Ready()
	w.pending = append(w.pending, rd.Invocations...)
	for _, inv := range rd.Invocations {
		var args []string
		for _, i := range inv.Body.GetInvocation().GetInvocations() {
			args = append(args, string(i.GetArgument().GetValue()))
		}
		w.out = append(w.out, fmt.Sprintf("invoke %s attempt=%d %v", inv.Addr.ID, inv.Attempt, args))
	}
	for _, f := range rd.Failures {
		w.out = append(w.out, fmt.Sprintf("failure %s violation=%v %v", f.Addr.ID, f.Violation, f.Err))
	}
	if c := rd.Commit; c != nil {
		w.unsynced = append(w.unsynced, c)
		for _, p := range c.Produced {
			w.out = append(w.out, fmt.Sprintf("fire -> %s %s", p.Env.GetTarget().GetId(), p.Env.GetArgument().GetValue()))
		}
		for _, tm := range c.TimersAdded {
			w.out = append(w.out, fmt.Sprintf("timer+ %d/%d %s token=%s", tm.Key.Due, tm.Key.ID, tm.Env.GetArgument().GetValue(), tm.Env.GetCancellationToken()))
		}
		for _, r := range c.TimersRemoved {
			w.out = append(w.out, fmt.Sprintf("timer- %d/%d %s %s", r.Key.Due, r.Key.ID, r.Sender, r.Token))
		}
	}
}

// respond answers every invocation sent: those of "s" with r, the others
// with nothing.
func (w *twin) respond(t *testing.T, now int64, r *protocol.FromFunction_InvocationResponse) {
	invs := w.pending
	w.pending = nil
	for _, inv := range invs {
		res := &protocol.FromFunction_InvocationResponse{}
		if inv.Addr.ID == "s" {
			res = r
		}
		w.step(t, now, ResultArrived{Addr: inv.Addr, Request: inv.Request, Response: result(res)})
	}
}

func (w *twin) durable(t *testing.T, now int64) {
	for _, c := range w.unsynced {
		w.store.apply(c)
		w.commitID, w.version = c.ID, c.VersionSeq
		if err := w.core.Step(now, CommitDurable{ID: c.ID}); err != nil {
			t.Fatal(err)
		}
		w.collect()
	}
	w.unsynced = nil
}

// restore loses what is not durable and starts a new core from the store,
// as the engine does: the first window's worth of timers, the highest id.
func (w *twin) restore(t *testing.T, now int64) {
	w.unsynced, w.pending = nil, nil
	rs := Restore{CommitID: w.commitID, VersionSeq: w.version}
	timers := w.store.sortedTimers()
	for _, tm := range timers {
		rs.TimerSeq = max(rs.TimerSeq, tm.Key.ID)
	}
	if len(timers) > w.cfg.TimerWindow {
		timers, rs.MoreTimers = timers[:w.cfg.TimerWindow], true
	}
	rs.Timers = timers
	var keys []InboxKey
	for k := range w.store.inbox {
		keys = append(keys, k)
		if k.Source == 0 {
			rs.OutSeq = max(rs.OutSeq, k.Seq+1)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].Source != keys[j].Source {
			return keys[i].Source < keys[j].Source
		}
		return keys[i].Seq < keys[j].Seq
	})
	w.core = New(w.cfg, w.store, rs)
	for _, k := range keys {
		w.step(t, now, MessageArrived{Key: k, Env: w.store.inbox[k]})
	}
}

// take returns what happened since the last take, in an order that does
// not depend on ties between wake-ups due at the same time.
func (w *twin) take() string {
	out := w.out
	w.out = nil
	sort.Strings(out)
	return strings.Join(out, "\n")
}
