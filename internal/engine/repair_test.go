package engine

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// poisoned is the counter, except that a batch holding the message
// "poison" fails.
type poisoned struct{ counter }

func (f *poisoned) Call(ctx context.Context, t address.TypeName, req *protocol.ToFunction) (*protocol.FromFunction, error) {
	for _, inv := range req.GetInvocation().GetInvocations() {
		if string(inv.GetArgument().GetValue()) == "poison" {
			return nil, errors.New("poisoned message")
		}
	}
	return f.counter.Call(ctx, t, req)
}

// A skip and a delete of an address are each one store batch: a crash
// at any moment leaves all of either or none of it. The test takes crash
// clones of the store's filesystem (unsynced writes partly lost) over and
// over while both run, and checks every clone: the skipped message is in
// the inbox and not a dead letter, or a dead letter and not in the inbox,
// with its receipt and audit record; the deleted address has its state
// and messages, or none of them and a receipt. After the last clone, a
// restart goes on from there: the skipped message is never invoked, the
// others once each, in order, and the dead letter re-sent after a fix
// runs once.
func TestSkipAndDeleteAddressAtomicAcrossCrash(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewCrashableMem()
	db := openStore(t, fs, 2)
	fn := &poisoned{}
	e := newEngine(t, db, fn, func(o *Options) { o.PauseAfter = func(address.TypeName) int { return 1 } })
	e.Start()
	for _, m := range []*protocol.Envelope{msg("a", "poison"), msg("a", "1"), msg("a", "2"), msg("b", "x")} {
		if err := e.Ingest(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "b's message", func() bool { return count(t, e, "b") == "1" })
	waitFor(t, "a paused by the poison policy", func() bool {
		in, err := e.Inbox(ctx, addr("a"))
		return err == nil && in.Pause != nil && in.Inflight != nil && in.Inflight.Waiting
	})
	if _, err := e.Pause(ctx, PauseRequest{Mutation: "p-b", Addr: addr("b"), Principal: "op"}); err != nil {
		t.Fatal(err)
	}
	if err := e.Ingest(ctx, msg("b", "y")); err != nil {
		t.Fatal(err)
	}

	var (
		clones []vfs.FS
		mu     sync.Mutex
		stop   = make(chan struct{})
		done   = make(chan struct{})
	)
	go func() {
		defer close(done)
		for i := 0; i < 500; i++ { // bounded: each clone is a copy of the store
			select {
			case <-stop:
				return
			default:
			}
			c := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rand.New(rand.NewPCG(uint64(i), 1))})
			mu.Lock()
			clones = append(clones, c)
			mu.Unlock()
		}
	}()
	skip, err := e.Repair(ctx, partition.Mutation{ID: "s1", Addr: addr("a"), Op: partition.OpSkipMessage, Principal: "op",
		Reason: "poisoned", Repair: &partition.MessageRepair{}})
	if err != nil || skip.Reject != partition.Applied {
		t.Fatalf("skip: %+v, %v", skip, err)
	}
	del, err := e.Repair(ctx, partition.Mutation{ID: "d1", Addr: addr("b"), Op: partition.OpDeleteAddress, Principal: "op",
		Reason: "gone", Repair: &partition.MessageRepair{}})
	if err != nil || del.Reject != partition.Applied {
		t.Fatalf("delete-address: %+v, %v", del, err)
	}
	close(stop)
	<-done
	clones = append(clones, fs.CrashClone(vfs.CrashCloneCfg{}))
	e.Close()

	var skipped, deleted int
	for i, c := range clones {
		s, d := checkRepairClone(t, i, c)
		skipped += s
		deleted += d
	}
	t.Logf("%d clones: the skip in %d, the delete in %d", len(clones), skipped, deleted)

	// The last clone has both; the runtime goes on from it.
	db2 := openStore(t, clones[len(clones)-1], 2)
	fn2 := &poisoned{}
	e2 := newEngine(t, db2, fn2, nil)
	e2.Start()
	if _, err := e2.Pause(ctx, PauseRequest{Mutation: "r-a", Addr: addr("a"), Resume: true, Principal: "op"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a's other messages", func() bool { return count(t, e2, "a") == "2" })
	rc, _, err := e2.Resend(ctx, ResendRequest{Mutation: "rs1", DeadLetter: "s1", Target: &address.Address{Type: counterType, ID: "c"}, Principal: "op"})
	if err != nil || rc.Reject != partition.Applied {
		t.Fatalf("resend: %+v, %v", rc, err)
	}
	if _, _, err := e2.Resend(ctx, ResendRequest{Mutation: "rs2", DeadLetter: "s1", Principal: "op"}); !errors.Is(err, ErrNoDeadLetter) {
		t.Fatalf("a second resend: %v, want ErrNoDeadLetter", err)
	}
	if got := fn2.messages(); !slices.Equal(got, []string{"a:1", "a:2"}) {
		t.Fatalf("after the restart the function saw %v, want a:1 a:2", got)
	}
	// c got the poison (it fails there too: the fix is for the reader).
	waitFor(t, "the re-sent message at c", func() bool {
		in, err := e2.Inbox(ctx, address.Address{Type: counterType, ID: "c"})
		return err == nil && in.Inflight != nil && in.Inflight.Attempt > 0
	})
}

// checkRepairClone opens one crash clone and checks that the skip and the
// delete are each all there or not at all; it reports which are there.
func checkRepairClone(t *testing.T, i int, fs vfs.FS) (skipped, deleted int) {
	t.Helper()
	db, err := store.Open("data", store.Options{Partitions: 2, FS: fs, Logger: quietPebble{}})
	if err != nil {
		t.Fatalf("clone %d: %v", i, err)
	}
	defer db.Close()
	inbox := map[string][]string{}
	for p := range 2 {
		if err := db.ScanInbox(p, func(_ store.InboxKey, env *protocol.Envelope) error {
			id := env.GetTarget().GetId()
			inbox[id] = append(inbox[id], string(env.GetArgument().GetValue()))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	_, dl, err := db.MessageDeadLetter("s1")
	if err != nil {
		t.Fatal(err)
	}
	_, srec, _ := db.Receipt("s1")
	poisonQueued := slices.Contains(inbox["a"], "poison")
	if dl == poisonQueued || dl != srec {
		t.Fatalf("clone %d: skip half done: dead letter %t, receipt %t, poison in the inbox %t", i, dl, srec, poisonQueued)
	}
	if !slices.Equal(slices.DeleteFunc(slices.Clone(inbox["a"]), func(s string) bool { return s == "poison" }), []string{"1", "2"}) {
		t.Fatalf("clone %d: a's inbox %v", i, inbox["a"])
	}
	_, state, err := db.GetState(addr("b"), "n")
	if err != nil {
		t.Fatal(err)
	}
	_, drec, _ := db.Receipt("d1")
	if drec == state || drec == (len(inbox["b"]) == 1) {
		t.Fatalf("clone %d: delete half done: receipt %t, state %t, inbox of b %v", i, drec, state, inbox["b"])
	}
	if dl {
		skipped = 1
	}
	if drec {
		deleted = 1
	}
	return skipped, deleted
}
