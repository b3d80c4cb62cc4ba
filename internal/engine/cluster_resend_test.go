package engine

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statefun-go/statefun/internal/cluster/sessiontest"
	"github.com/statefun-go/statefun/internal/partition"
)

// In cluster mode a message dead letter re-sent to an address of another
// partition travels the messages topic as a command: the commit of the
// dead letter's partition removes it and produces the command, and the
// target's partition applies it once — the message at the end of the
// target's inbox, its receipt and audit record in the target's changelog.
// The dead letter's removal is in its own partition's changelog alone, so
// a restore of that partition elsewhere does not bring it back; the same
// command produced again (a duplicate) is skipped by its mutation id; a
// second re-send finds no dead letter. A re-send within the partition
// still goes in one commit of that partition.
func TestClusterResendToAnotherPartition(t *testing.T) {
	const parts = 2
	ctx := context.Background()
	k := sessiontest.NewKafka()
	fn := &relay{}
	n := newClusterNode(t, k, openStore(t, vfs.NewMem(), parts), fn, false, nil)
	for p := range parts {
		if err := n.s.Assign(p); err != nil {
			t.Fatal(err)
		}
	}
	n.e.Start()
	a, a2, b := idIn(0, parts, "a"), idIn(0, parts, "a2-"), idIn(1, parts, "b")
	skipped := func(id string) {
		t.Helper()
		k.Produce(0, msg(a, "skip me"))
		n.poll(0)
		waitFor(t, "the message queued behind the pause", func() bool { return len(viewInbox(t, n.e, a).queued) == 1 })
		rc, err := n.e.Repair(ctx, partition.Mutation{ID: id, Addr: addr(a), Op: partition.OpSkipMessage, Principal: "op", Repair: &partition.MessageRepair{}})
		if err != nil || rc.Reject != partition.Applied {
			t.Fatalf("skip: %+v %v", rc, err)
		}
	}
	if _, err := n.e.Pause(ctx, PauseRequest{Mutation: "pause-a", Addr: addr(a), Principal: "op"}); err != nil {
		t.Fatal(err)
	}
	skipped("s1")

	to := addr(b)
	rc, key, err := n.e.Resend(ctx, ResendRequest{Mutation: "r1", DeadLetter: "s1", Target: &to, Principal: "op", Reason: "fixed"})
	if err != nil {
		t.Fatalf("a re-send to partition 1 of a dead letter of partition 0: %v", err)
	}
	if rc.Ack != AckAccepted || rc.Mutation != "r1" || rc.Addr != to || key != (partition.InboxKey{}) {
		t.Errorf("the re-send's answer: %+v %v; want the accepted receipt of r1 for %s and no inbox key", rc, key, b)
	}
	if _, ok, err := n.e.MessageDeadLetter("s1"); ok || err != nil {
		t.Errorf("the dead letter after the re-send: %v %v; want it gone", ok, err)
	}
	cmds := k.Messages(1)
	if len(cmds) != 1 || cmds[0].GetMutation().GetId() != "r1" || partition.MutationOp(cmds[0].GetMutation().GetOp()) != partition.OpResendMessage {
		t.Fatalf("partition 1 of the messages topic: %v; want the command r1", cmds)
	}
	n.poll(1)
	waitFor(t, b+" got the message", func() bool { return slices.Contains(fn.messages(), b+":skip me") })
	waitFor(t, "the receipt of r1 committed", func() bool {
		rc, ok, _ := n.db.Receipt("r1")
		return ok && rc.GetStatus() == "committed"
	})
	stored, _, _ := n.db.Receipt("r1")
	if stored.GetPartition() != 1 {
		t.Errorf("the receipt of r1 names partition %d, want 1 (the target's)", stored.GetPartition())
	}
	audit, err := n.e.AuditOf("r1", stored.GetAt())
	if err != nil || len(audit) != 1 || partition.MutationOp(audit[0].GetOp()) != partition.OpResendMessage ||
		audit[0].GetReverts() != "s1" || audit[0].GetTarget().GetId() != b || audit[0].GetPartition() != 1 {
		t.Errorf("the audit of r1: %v %v; want one resend record reverting s1, for %s in partition 1", audit, err, b)
	}

	// The same command again, as a duplicate in the topic: skipped.
	k.Produce(1, cmds[0])
	n.poll(1)
	if err := <-n.arrivalsDone; err != nil {
		t.Fatalf("the duplicate's arrival: %v", err)
	}
	if _, _, err := n.e.Resend(ctx, ResendRequest{Mutation: "r2", DeadLetter: "s1", Target: &to, Principal: "op"}); !errors.Is(err, ErrNoDeadLetter) {
		t.Errorf("a second re-send of s1: %v; want ErrNoDeadLetter", err)
	}

	// A re-send within partition 0: one commit of partition 0, as before.
	skipped("s2")
	to = addr(a2)
	if _, key, err := n.e.Resend(ctx, ResendRequest{Mutation: "r3", DeadLetter: "s2", Target: &to, Principal: "op"}); err != nil || key.Partition != 0 {
		t.Fatalf("a re-send within partition 0: %v %v", key, err)
	}
	waitFor(t, a2+" got the message", func() bool { return slices.Contains(fn.messages(), a2+":skip me") })
	if got := len(k.Messages(1)); got != 2 {
		t.Errorf("partition 1 of the messages topic holds %d records, want the command and its duplicate only", got)
	}
	got := fn.messages()
	if c := len(got) - len(slices.DeleteFunc(slices.Clone(got), func(m string) bool { return m == b+":skip me" })); c != 1 {
		t.Errorf("%s got the message %d times, want once", b, c)
	}

	// Each changelog carries what its partition wrote: the removals of
	// both dead letters in partition 0's, the receipt and audit of r1 in
	// partition 1's. Restored apart, each store shows it.
	for p, want := range map[int]struct{ deadLetters, r1 bool }{0: {false, false}, 1: {false, true}} {
		db := openStore(t, vfs.NewMem(), parts)
		if err := k.Restore(db, p); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"s1", "s2"} {
			if _, ok, _ := db.MessageDeadLetter(id); ok != want.deadLetters {
				t.Errorf("partition %d restored alone: dead letter %s there: %v", p, id, ok)
			}
		}
		if rc, ok, _ := db.Receipt("r1"); ok != want.r1 || ok && rc.GetStatus() != "committed" {
			t.Errorf("partition %d restored alone: receipt of r1 %v (there: %v), want there: %v", p, rc, ok, want.r1)
		}
	}
}
