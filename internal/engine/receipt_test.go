package engine

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statefun-go/statefun/internal/partition"
)

// syncHold holds the syncs of the store's write-ahead log (logSyncFS)
// once hold is called, after letting a given number more through, until
// release: a crash (CrashClone of the file system below) then loses what
// they would have made durable.
type syncHold struct {
	mu      sync.Mutex
	pass    int           // syncs still let through while holding
	held    bool          // holding
	gate    chan struct{} // closed by release
	blocked chan struct{} // told once a sync is held
}

func newSyncHold() *syncHold {
	return &syncHold{gate: make(chan struct{}), blocked: make(chan struct{}, 1)}
}

// hold lets pass more syncs through, then holds every one after.
func (h *syncHold) hold(pass int) {
	h.mu.Lock()
	h.held, h.pass = true, pass
	h.mu.Unlock()
}

func (h *syncHold) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held {
		h.held = false
		close(h.gate)
	}
}

// wait is called before each sync.
func (h *syncHold) wait() {
	h.mu.Lock()
	if !h.held {
		h.mu.Unlock()
		return
	}
	if h.pass > 0 {
		h.pass--
		h.mu.Unlock()
		return
	}
	gate := h.gate
	h.mu.Unlock()
	select {
	case h.blocked <- struct{}{}:
	default:
	}
	<-gate
}

// A receipt says "committed" only once a crash cannot take it back. The
// committer writes a group (readable at once) before its sync ends, so a
// poll of an accepted mutation's receipt can find the committed receipt in
// the store while the commit that wrote it is not yet durable. A client
// told "committed" then, whose runtime crashed before the sync, would find
// the mutation applied again after the restart — or rejected, had its
// condition stopped holding.
func TestReceiptCommittedOnlyWhenDurable(t *testing.T) {
	mem := vfs.NewCrashableMem()
	h := newSyncHold()
	db := openStore(t, logSyncFS{FS: mem, before: h.wait}, 1)
	e := newEngine(t, db, &counter{}, nil)
	t.Cleanup(h.release) // first: the engine's Close waits for the syncs
	e.Start()
	ctx := context.Background()
	if err := e.Ingest(ctx, msg("x", "hi")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first message counted", func() bool {
		v, _, err := db.GetState(addr("x"), "n")
		return err == nil && string(v.Value) == "1"
	})
	// The accepted mutation's own sync passes; the commit that applies it
	// is written and waits for its sync.
	h.hold(1)
	if _, err := e.Mutate(ctx, partition.Mutation{ID: "m1", Addr: addr("x"), State: "n", Op: partition.OpPut,
		Typename: countTypename, Value: []byte("41"), Ack: AckAccepted}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.blocked:
	case <-time.After(10 * time.Second):
		t.Fatal("the commit applying the mutation never synced")
	}
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	rc, ok, err := e.WaitReceipt(wctx, "m1")
	if err != nil || !ok {
		t.Fatalf("receipt: %v %v", ok, err)
	}
	if rc.GetStatus() != "accepted" {
		t.Fatalf("while its commit's sync waits the receipt says %q, want accepted", rc.GetStatus())
	}
	// A read of the receipt without waiting (the API's GET without
	// ?wait=, an idempotent repeat) answers once the sync is done.
	read := make(chan string, 1)
	go func() {
		rc, _, err := e.Reads().Receipt("m1")
		read <- fmt.Sprint(rc.GetStatus(), err)
	}()
	select {
	case got := <-read:
		t.Fatalf("a read of the receipt answered %q while its commit's sync waits", got)
	case <-time.After(100 * time.Millisecond):
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	h.release()
	rc, ok, err = e.WaitReceipt(ctx, "m1")
	if err != nil || !ok || rc.GetStatus() != "committed" {
		t.Fatalf("once synced the receipt is %v (%v, %v), want committed", rc, ok, err)
	}
	if got := <-read; got != "committed<nil>" {
		t.Fatalf("the read answered %q once synced, want committed", got)
	}

	// The crash's copy: the mutation accepted, not applied.
	db2 := openStore(t, crashed, 1)
	r2, ok, err := db2.Receipt("m1")
	if err != nil || !ok || r2.GetStatus() != "accepted" {
		t.Fatalf("after a crash before the sync the stored receipt is %v (%v, %v), want accepted", r2, ok, err)
	}
}
