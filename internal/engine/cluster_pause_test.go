package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/cluster/sessiontest"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// A type-level pause applied across processes with PauseIn: each
// partition keeps its own copy in its own changelog (so it holds on the
// partition's next owner, whose store never saw the type's owner), the
// type's owner alone writes the receipt and the audit record, a repeat of
// the mutation id writes no second one, and a resume applied the same way
// releases every queued message once.
func TestClusterPauseTypeInEveryPartition(t *testing.T) {
	const parts = 4
	ctx := context.Background()
	k := sessiontest.NewKafka()
	owner := partition.TypeOwner(counterType, parts)
	var others []int
	for p := range parts {
		if p != owner {
			others = append(others, p)
		}
	}
	x, y, z := others[0], others[1], others[2]
	fnA, fnB, fnC := &relay{}, &relay{}, &relay{}
	a := newClusterNodeOf(t, "a", k, openStore(t, vfs.NewMem(), parts), fnA)
	b := newClusterNodeOf(t, "b", k, openStore(t, vfs.NewMem(), parts), fnB)
	c := newClusterNodeOf(t, "c", k, openStore(t, vfs.NewMem(), parts), fnC)
	for _, p := range []int{owner, x} {
		if err := a.s.Assign(p); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []int{y, z} {
		if err := b.s.Assign(p); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []*clusterNode{a, b, c} {
		n.e.Start()
	}
	typ := address.Address{Type: counterType}
	pause := PauseRequest{Mutation: "m-pause", Addr: typ, Principal: "ops", Reason: "deploy"}

	apply := func(r PauseRequest) partition.Receipt {
		t.Helper()
		got, err := b.e.PauseIn(ctx, r, []int{y, z})
		if err != nil || !slices.Equal(got.Applied, []int{y, z}) || len(got.Moved) > 0 || got.Receipt != nil {
			t.Fatalf("PauseIn on b of %d and %d: %+v, %v; want both applied, no receipt", y, z, got, err)
		}
		// y is not a's: reported moved, the others applied.
		got, err = a.e.PauseIn(ctx, r, []int{x, y})
		if err != nil || !slices.Equal(got.Applied, []int{x}) || !slices.Equal(got.Moved, []int{y}) {
			t.Fatalf("PauseIn on a of %d and %d: %+v, %v; want %d applied, %d moved", x, y, got, err, x, y)
		}
		got, err = a.e.PauseIn(ctx, r, []int{owner})
		if err != nil || got.Receipt == nil || got.Receipt.Partition != owner {
			t.Fatalf("PauseIn of the type's owner %d: %+v, %v; want its receipt", owner, got, err)
		}
		return *got.Receipt
	}
	first := apply(pause)
	if first.Reject != partition.Applied || first.Mutation != "m-pause" {
		t.Fatalf("the pause's receipt: %+v", first)
	}
	// Its receipt is durable: the type's owner keeps no mutation id for
	// it (the store answers a repeat).
	takenBy := func(m string) bool {
		t.Helper()
		pt, err := a.e.owner(owner)
		if err != nil {
			t.Fatal(err)
		}
		pt.pauseMu.Lock()
		defer pt.pauseMu.Unlock()
		return pt.pauseIDs[m]
	}
	if takenBy("m-pause") {
		t.Fatal("the type's owner still holds m-pause, whose receipt is durable")
	}
	// The same mutation id again (a retry across nodes): the stored
	// receipt, and no second audit record anywhere.
	if again := apply(pause); again.Checkpoint != first.Checkpoint || again.Reject != partition.Applied {
		t.Fatalf("the repeat's receipt %+v; want the first one %+v", again, first)
	} else if want := first; func() bool { want.Request = 0; return again != want }() {
		t.Fatalf("the repeat's receipt %+v; want the first one (but its request) %+v", again, first)
	}
	if n := countAudit(t, a.e, "m-pause"); n != 1 {
		t.Fatalf("m-pause has %d audit records on the type's owner; want 1", n)
	}
	if n := countAudit(t, b.e, "m-pause"); n != 0 {
		t.Fatalf("m-pause has %d audit records on b; want none (only the type's owner audits)", n)
	}
	if rc, ok, err := b.e.Receipt("m-pause"); ok || err != nil {
		t.Fatalf("b stored a receipt of m-pause: %v, %v", rc, err)
	}

	// Every partition's changelog carries its own copy: a store restored
	// from the changelogs alone holds one per partition.
	fresh := openStore(t, vfs.NewMem(), parts)
	for p := range parts {
		restoreFrom(t, k, fresh, p)
	}
	var copies []int
	err := fresh.ScanPauses(func(ad address.Address, part int, p *protocol.Pause) error {
		if ad == typ && p.GetMutation() == "m-pause" {
			copies = append(copies, part)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(copies, []int{0, 1, 2, 3}) {
		t.Fatalf("the changelogs carry the type's pause of partitions %v; want every partition's", copies)
	}

	// A message for an address of every partition waits in its inbox.
	nodeOf := map[int]*clusterNode{owner: a, x: a, y: b, z: b}
	ids := map[int]string{}
	for p := range parts {
		ids[p] = idIn(p, parts, "held")
		k.Produce(p, msg(ids[p], "one"))
		nodeOf[p].poll(p)
	}
	held := func(n *clusterNode, p int) {
		t.Helper()
		waitFor(t, fmt.Sprintf("%s queued in partition %d", ids[p], p), func() bool {
			in, err := n.e.Inbox(ctx, addr(ids[p]))
			return err == nil && in.TypePause != nil && in.TypePause.Mutation == "m-pause" && len(in.Queued) == 1 && in.Inflight == nil
		})
	}
	for p := range parts {
		held(nodeOf[p], p)
	}

	// y moves to c, whose store never held the type's owner: its own copy
	// comes with its changelog, and the message stays held.
	b.s.Revoke(y)
	restoreFrom(t, k, c.db, y)
	if err := c.s.Assign(y); err != nil {
		t.Fatal(err)
	}
	nodeOf[y] = c
	held(c, y)
	for _, fn := range []*relay{fnA, fnB, fnC} {
		if got := fn.messages(); len(got) > 0 {
			t.Fatalf("invoked while the type is paused: %v", got)
		}
	}

	// The resume, applied the same way: every message once.
	resume := PauseRequest{Mutation: "m-resume", Addr: typ, Resume: true, Principal: "ops"}
	changed := false
	for n, ps := range map[*clusterNode][]int{b: {z}, c: {y}, a: {x}} {
		got, err := n.e.PauseIn(ctx, resume, ps)
		if err != nil || !slices.Equal(got.Applied, ps) {
			t.Fatalf("resume of %v: %+v, %v", ps, got, err)
		}
		changed = changed || got.Changed
	}
	if !changed {
		t.Fatal("the resume of the other partitions reports no pause lifted")
	}
	resume.ChangedElsewhere = true
	got, err := a.e.PauseIn(ctx, resume, []int{owner})
	if err != nil || got.Receipt == nil || got.Receipt.Reject != partition.Applied {
		t.Fatalf("resume of the type's owner: %+v, %v; want a committed receipt", got, err)
	}
	for p := range parts {
		waitFor(t, ids[p]+" counted once", func() bool { return storedCount(t, nodeOf[p].db, ids[p]) == "1" })
	}
	var seen []string
	for _, fn := range []*relay{fnA, fnB, fnC} {
		seen = append(seen, fn.messages()...)
	}
	if len(seen) != parts {
		t.Fatalf("invocations after the resume: %v; want one per partition", seen)
	}

	// A resume of a type paused nowhere is rejected, with no audit record.
	got, err = a.e.PauseIn(ctx, PauseRequest{Mutation: "m-nothing", Addr: typ, Resume: true}, []int{owner})
	if err != nil || got.Receipt == nil || got.Receipt.Reject != partition.RejectNotFound {
		t.Fatalf("resume of an unpaused type: %+v, %v; want rejected", got, err)
	}
	if n := countAudit(t, a.e, "m-nothing"); n != 0 {
		t.Fatalf("a rejected resume wrote %d audit records", n)
	}
	// Its id is not kept either, and a repeat of it once the type is
	// paused again answers the stored rejection: it lifts nothing.
	if takenBy("m-nothing") {
		t.Fatal("the type's owner still holds m-nothing, whose receipt is durable")
	}
	if got, err := a.e.PauseIn(ctx, PauseRequest{Mutation: "m-again", Addr: typ, Principal: "ops"}, []int{owner}); err != nil || got.Receipt == nil || got.Receipt.Reject != partition.Applied {
		t.Fatalf("a new pause of the type's owner: %+v, %v", got, err)
	}
	again, err := a.e.PauseIn(ctx, PauseRequest{Mutation: "m-nothing", Addr: typ, Resume: true}, []int{owner})
	if err != nil || again.Receipt == nil || *again.Receipt != func() partition.Receipt { rc := *got.Receipt; rc.Request = 0; return rc }() {
		t.Fatalf("a repeat of m-nothing: %+v, %v; want the stored rejection %+v", again, err, got.Receipt)
	}
	if ps, err := a.e.Pauses(ctx, counterType); err != nil || len(ps) != 1 || ps[0].Pause == nil || ps[0].Pause.Mutation != "m-again" {
		t.Fatalf("the pauses after a repeat of m-nothing: %+v, %v; want m-again in force", ps, err)
	}
	// A mutation id the type's owner took and has not made durable yet
	// is not taken again: a repeat waits for the first one's receipt (here
	// it stops waiting at once) instead of applying it a second time.
	pt, err := a.e.owner(owner)
	if err != nil {
		t.Fatal(err)
	}
	if _, done, err := a.e.typeReceipt(ctx, pt, "m-twice"); done || err != nil {
		t.Fatalf("the first take of m-twice: done %v, %v; want it taken", done, err)
	}
	stopped, cancel := context.WithCancel(ctx)
	cancel()
	if _, done, err := a.e.typeReceipt(stopped, pt, "m-twice"); done || err == nil {
		t.Fatalf("a repeat of m-twice before its receipt: done %v, %v; want it to wait, not take it again", done, err)
	}
	if _, err := a.e.PauseIn(ctx, PauseRequest{Mutation: "m", Addr: addr("one")}, []int{x}); err == nil {
		t.Fatal("PauseIn of an address was not refused")
	}
}

// newClusterNodeOf is newClusterNode (auto-committing) of the node named
// id, whose session runs beside the other nodes' on k.
func newClusterNodeOf(t *testing.T, id string, k *sessiontest.Kafka, db *store.DB, fn Functions) *clusterNode {
	t.Helper()
	s := sessiontest.NewSession(k, db, sessiontest.Options{Auto: true, Errorf: t.Errorf, Node: id})
	e := newEngine(t, db, fn, func(o *Options) {
		o.Owned, o.Durability, o.Outbound = true, s, s
	})
	s.Bind(e)
	return &clusterNode{t: t, e: e, s: s, db: db}
}

// Engine.Pause of a whole type in cluster mode (the engine's own entry,
// which the state API does not use there: it spreads the change itself)
// applies it in every partition, the type's owner last and alone with the
// receipt and the audit record; with a partition owned elsewhere it says
// the partition moved and stores nothing.
func TestClusterEnginePauseOfATypeOwnedHere(t *testing.T) {
	const parts = 4
	ctx := context.Background()
	k := sessiontest.NewKafka()
	a := newClusterNodeOf(t, "a", k, openStore(t, vfs.NewMem(), parts), &relay{})
	for p := range parts - 1 {
		if err := a.s.Assign(p); err != nil {
			t.Fatal(err)
		}
	}
	a.e.Start()
	typ := address.Address{Type: counterType}
	if _, err := a.e.Pause(ctx, PauseRequest{Mutation: "m-early", Addr: typ, Principal: "ops"}); !errors.Is(err, ErrMoved) {
		t.Fatalf("a type pause with partition %d owned elsewhere: %v; want ErrMoved", parts-1, err)
	}
	if n := countAudit(t, a.e, "m-early"); n != 0 {
		t.Fatalf("%d audit records of the refused pause; want none", n)
	}
	if err := a.s.Assign(parts - 1); err != nil {
		t.Fatal(err)
	}
	owner := partition.TypeOwner(counterType, parts)
	for _, r := range []PauseRequest{
		{Mutation: "m-pause", Addr: typ, Principal: "ops", Reason: "deploy"},
		{Mutation: "m-resume", Addr: typ, Principal: "ops", Resume: true},
	} {
		rc, err := a.e.Pause(ctx, r)
		if err != nil || rc.Reject != partition.Applied || rc.Partition != owner || rc.Mutation != r.Mutation {
			t.Fatalf("Pause %s of the type: %+v, %v; want applied by its owner, partition %d", r.Mutation, rc, err, owner)
		}
		if n := countAudit(t, a.e, r.Mutation); n != 1 {
			t.Fatalf("%d audit records of %s; want the owner's one", n, r.Mutation)
		}
	}
}
