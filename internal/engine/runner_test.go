package engine

import (
	"context"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statefun-go/statefun/internal/partition"
)

// recorder is a runner's effects, recorded.
type recorder struct {
	invocations []partition.Invocation
	commits     []*partition.Commit
	replies     []partition.Reply
	queued      int
}

func (r *recorder) callFailed(int, partition.Failure) {}
func (r *recorder) reply(rp partition.Reply)          { r.replies = append(r.replies, rp) }
func (r *recorder) invoke(_ *part, inv partition.Invocation) {
	r.invocations = append(r.invocations, inv)
}
func (r *recorder) commit(_ *part, c *partition.Commit) { r.commits = append(r.commits, c) }
func (r *recorder) backlog(_ int, n, _, _ int)          { r.queued = n }
func (r *recorder) health(int, partition.Health)        {}

// The runner steps what was posted, in order, and hands the core's effects
// on: the invocation out, the commit to the committer, replies to waiters.
func TestRunnerHandsOnEffects(t *testing.T) {
	db := openStore(t, vfs.NewMem(), 1)
	core := partition.New(partition.Config{ID: 0, Partitions: 1}, storeReader{db: db}, partition.Restore{})
	rec := &recorder{}
	clock := &simClock{}
	p := newPart(0, core, rec, clock.Now)

	k1 := partition.InboxKey{Source: partition.SourceIngress, Seq: 1}
	k2 := partition.InboxKey{Source: partition.SourceIngress, Seq: 2}
	p.post(partition.MessageArrived{Key: k1, Env: msg("a", "one")})
	p.post(partition.MessageArrived{Key: k2, Env: msg("a", "two")})
	p.post(partition.ReadState{Request: 7, Addr: addr("a")})
	full := func(limit int) bool {
		p.limit, p.limitBytes = limit, 1<<20
		return p.full()
	}
	if p.mb.Len() != 3 || !full(3) || full(4) {
		t.Fatalf("mailbox %d events; full(3) %v, full(4) %v", p.mb.Len(), full(3), full(4))
	}
	if stepped, err := p.process(); err != nil || !stepped {
		t.Fatalf("process = %v, %v", stepped, err)
	}
	if len(rec.invocations) != 1 || len(rec.invocations[0].Body.GetInvocation().GetInvocations()) != 1 {
		t.Fatalf("invocations %+v: want the first message alone (the type's probe)", rec.invocations)
	}
	// The core's backlog counts every unsettled message: the one in flight
	// and the one waiting behind it.
	if rec.queued != 2 || p.mb.Len() != 0 || !full(2) || full(3) {
		t.Fatalf("queued %d, mailbox %d: want the first message in flight and the second waiting in the core", rec.queued, p.mb.Len())
	}
	if len(rec.replies) != 1 || rec.replies[0].Request != 7 {
		t.Fatalf("replies %+v: the read is answered at once", rec.replies)
	}

	// The function answers; the runner hands on the commit that consumes
	// the first message, and the second goes out.
	inv := rec.invocations[0]
	resp, err := (&counter{}).Call(context.Background(), inv.Addr.Type, inv.Body)
	if err != nil {
		t.Fatal(err)
	}
	p.post(partition.ResultArrived{Addr: inv.Addr, Request: inv.Request, Response: resp})
	if _, err := p.process(); err != nil {
		t.Fatal(err)
	}
	// The probe learned the state "n" and re-sends with it.
	if len(rec.invocations) != 2 {
		t.Fatalf("%d invocations, want the re-sent probe", len(rec.invocations))
	}
	inv = rec.invocations[1]
	resp, _ = (&counter{}).Call(context.Background(), inv.Addr.Type, inv.Body)
	p.post(partition.ResultArrived{Addr: inv.Addr, Request: inv.Request, Response: resp})
	if _, err := p.process(); err != nil {
		t.Fatal(err)
	}
	if len(rec.commits) != 2 || len(rec.commits[1].Consumed) != 1 || rec.commits[1].Consumed[0] != k1 {
		t.Fatalf("commits %+v: want the specs, then one consuming the first message", rec.commits)
	}
	if len(rec.invocations) != 3 {
		t.Fatalf("%d invocations, want the second message sent", len(rec.invocations))
	}

	// With nothing posted, process ticks: nothing to do, nothing stepped.
	if stepped, err := p.process(); err != nil || stepped {
		t.Fatalf("idle process = %v, %v", stepped, err)
	}
}

// orderRec records the order in which a runner hands on its effects.
type orderRec struct{ log []string }

func (r *orderRec) callFailed(int, partition.Failure)  {}
func (r *orderRec) reply(partition.Reply)              { r.log = append(r.log, "reply") }
func (r *orderRec) invoke(*part, partition.Invocation) { r.log = append(r.log, "invoke") }
func (r *orderRec) commit(*part, *partition.Commit)    { r.log = append(r.log, "commit") }
func (r *orderRec) backlog(int, int, int, int)         {}
func (r *orderRec) health(int, partition.Health)       {}

// A read and an applied mutation posted with function traffic are answered
// after the runner handed on the invocation and the commit: the waiting
// caller is the last goroutine it wakes, which Go runs next, instead of
// being pushed behind the call workers and the committer it wakes after.
func TestRunnerAnswersLast(t *testing.T) {
	db := openStore(t, vfs.NewMem(), 1)
	core := partition.New(partition.Config{ID: 0, Partitions: 1}, storeReader{db: db}, partition.Restore{})
	rec := &orderRec{}
	p := newPart(0, core, rec, (&simClock{}).Now)
	p.post(partition.ReadState{Request: 7, Addr: addr("a")})
	p.post(partition.Mutate{Mutation: &partition.Mutation{ID: "m1", Request: 8, Addr: addr("b"), State: "n", Op: partition.OpPut,
		Typename: countTypename, Value: []byte("5"), Ack: partition.AckApplied}})
	p.post(partition.MessageArrived{Key: partition.InboxKey{Source: partition.SourceIngress, Seq: 1}, Env: msg("a", "one")})
	if _, err := p.process(); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(rec.log, " "), "invoke commit reply reply"; got != want {
		t.Fatalf("effects handed on as %q, want %q", got, want)
	}
}
