package engine

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statefun-go/statefun/internal/engine/clustertest"
	"github.com/statefun-go/statefun/internal/partition"
)

// In cluster mode a message dead letter is re-sent within its partition:
// the commit that sends the message removes the dead letter from the
// changelog that wrote it. A target in another partition is refused with
// ErrResendAcross, and the dead letter stays; a target of its own
// partition gets the message once, and the dead letter's removal is in
// that partition's changelog alone.
func TestClusterResendStaysInItsPartition(t *testing.T) {
	const parts = 2
	ctx := context.Background()
	k := clustertest.NewKafka()
	fn := &relay{}
	n := newClusterNode(t, k, openStore(t, vfs.NewMem(), parts), fn, false, nil)
	for p := range parts {
		if err := n.e.Assign(p); err != nil {
			t.Fatal(err)
		}
	}
	n.e.Start()
	a, a2, b := idIn(0, parts, "a"), idIn(0, parts, "a2-"), idIn(1, parts, "b")

	if _, err := n.e.Pause(ctx, PauseRequest{Mutation: "pause-a", Addr: addr(a), Principal: "op"}); err != nil {
		t.Fatal(err)
	}
	k.Produce(0, msg(a, "skip me"))
	n.poll(0)
	waitFor(t, "the message queued behind the pause", func() bool { return len(viewInbox(t, n.e, a).queued) == 1 })
	skip, err := n.e.Repair(ctx, partition.Mutation{ID: "s1", Addr: addr(a), Op: partition.OpSkipMessage, Principal: "op", Repair: &partition.MessageRepair{}})
	if err != nil || skip.Reject != partition.Applied {
		t.Fatalf("skip: %+v %v", skip, err)
	}

	to := addr(b)
	if _, _, err := n.e.Resend(ctx, ResendRequest{Mutation: "r1", DeadLetter: "s1", Target: &to, Principal: "op"}); !errors.Is(err, ErrResendAcross) {
		t.Fatalf("a re-send to partition 1 of a dead letter of partition 0: %v; want ErrResendAcross", err)
	}
	if _, ok, err := n.e.MessageDeadLetter("s1"); !ok || err != nil {
		t.Fatalf("the dead letter after a refused re-send: %v %v; want it kept", ok, err)
	}
	to = addr(a2)
	if _, _, err := n.e.Resend(ctx, ResendRequest{Mutation: "r2", DeadLetter: "s1", Target: &to, Principal: "op"}); err != nil {
		t.Fatalf("a re-send within partition 0: %v", err)
	}
	waitFor(t, a2+" got the message", func() bool { return slices.Contains(fn.messages(), a2+":skip me") })
	deletes := func(p int) int {
		c := 0
		for _, op := range k.Changelog(p) {
			if op.Key[0] == 0x16 && op.Delete {
				c++
			}
		}
		return c
	}
	if deletes(0) != 1 || deletes(1) != 0 {
		t.Errorf("dead-letter deletions in the changelogs: partition 0 %d, partition 1 %d; want one, in partition 0", deletes(0), deletes(1))
	}
	if got := fn.messages(); slices.Contains(got, b+":skip me") {
		t.Errorf("the refused re-send reached %s: %v", b, got)
	}
}
