package engine

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statefun-go/statefun/internal/partition"
)

// holdFS holds the syncs of the store's write-ahead log once hold is
// called, after letting a given number more through, until release: a
// crash (CrashClone of the file system below) then loses what they would
// have made durable.
type holdFS struct {
	vfs.FS
	mu      sync.Mutex
	pass    int           // syncs still let through while holding
	held    bool          // holding
	gate    chan struct{} // closed by release
	blocked chan struct{} // told once a sync is held
}

func newHoldFS(fs vfs.FS) *holdFS {
	return &holdFS{FS: fs, gate: make(chan struct{}), blocked: make(chan struct{}, 1)}
}

// hold lets pass more syncs through, then holds every one after.
func (fs *holdFS) hold(pass int) {
	fs.mu.Lock()
	fs.held, fs.pass = true, pass
	fs.mu.Unlock()
}

func (fs *holdFS) release() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.held {
		fs.held = false
		close(fs.gate)
	}
}

func (fs *holdFS) wait() {
	fs.mu.Lock()
	if !fs.held {
		fs.mu.Unlock()
		return
	}
	if fs.pass > 0 {
		fs.pass--
		fs.mu.Unlock()
		return
	}
	gate := fs.gate
	fs.mu.Unlock()
	select {
	case fs.blocked <- struct{}{}:
	default:
	}
	<-gate
}

func (fs *holdFS) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, cat)
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return holdFile{File: f, fs: fs}, nil
}

type holdFile struct {
	vfs.File
	fs *holdFS
}

func (f holdFile) Sync() error     { f.fs.wait(); return f.File.Sync() }
func (f holdFile) SyncData() error { f.fs.wait(); return f.File.SyncData() }

// A receipt says "committed" only once a crash cannot take it back. The
// committer writes a group (readable at once) before its sync ends, so a
// poll of an accepted mutation's receipt can find the committed receipt in
// the store while the commit that wrote it is not yet durable. A client
// told "committed" then, whose runtime crashed before the sync, would find
// the mutation applied again after the restart — or rejected, had its
// condition stopped holding.
func TestReceiptCommittedOnlyWhenDurable(t *testing.T) {
	mem := vfs.NewCrashableMem()
	fs := newHoldFS(mem)
	db := openStore(t, fs, 1)
	e := newEngine(t, db, &counter{}, nil)
	t.Cleanup(fs.release) // first: the engine's Close waits for the syncs
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
	fs.hold(1)
	if _, err := e.Mutate(ctx, partition.Mutation{ID: "m1", Addr: addr("x"), State: "n", Op: partition.OpPut,
		Typename: countTypename, Value: []byte("41"), Ack: AckAccepted}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-fs.blocked:
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
	fs.release()
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
