package engine

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// A pause is durable: after a crash (a crash-clone of the store's
// filesystem, only what was synced survives) the address and the type
// are still paused, their messages wait in the inbox uninvoked, and a
// resume releases them in arrival order, each once.
func TestPauseSurvivesCrash(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewCrashableMem()
	db := openStore(t, fs, 4)
	fn := &counter{}
	e := newEngine(t, db, fn, nil)
	e.Start()
	ingest := func(e *Engine, id, text string) {
		t.Helper()
		if err := e.Ingest(ctx, msg(id, text)); err != nil {
			t.Fatal(err)
		}
	}
	ingest(e, "a", "0")
	waitFor(t, "a's first message", func() bool { return count(t, e, "a") == "1" })

	pause := func(e *Engine, r PauseRequest) partition.Receipt {
		t.Helper()
		rc, err := e.Pause(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		return rc
	}
	if rc := pause(e, PauseRequest{Mutation: "p1", Addr: addr("a"), Principal: "op", Reason: "investigate"}); rc.Reject != partition.Applied {
		t.Fatalf("pause: %+v", rc)
	}
	other := address.TypeName{Namespace: "test", Name: "other"}
	if rc := pause(e, PauseRequest{Mutation: "p2", Addr: address.Address{Type: other}, Principal: "op", Reason: "deploy"}); rc.Reject != partition.Applied {
		t.Fatalf("type pause: %+v", rc)
	}
	for _, text := range []string{"1", "2", "3"} {
		ingest(e, "a", text)
	}
	in, err := e.Inbox(ctx, addr("a"))
	if err != nil {
		t.Fatal(err)
	}
	if in.Pause == nil || in.Pause.Reason != "investigate" || in.Inflight != nil || len(in.Queued) != 3 {
		t.Fatalf("inbox before the crash: %+v", in)
	}

	// The process dies here.
	crashed := fs.CrashClone(vfs.CrashCloneCfg{})
	e.Close()

	db2 := openStore(t, crashed, 4)
	fn2 := &counter{}
	e2 := newEngine(t, db2, fn2, nil)
	e2.Start()
	pauses, err := e2.Pauses(ctx, address.TypeName{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range pauses {
		got = append(got, p.Addr.String()+" "+p.Pause.Mutation+" "+p.Pause.Principal+" "+p.Pause.Reason)
	}
	want := []string{"test/counter/a p1 op investigate", "test/other/ p2 op deploy"}
	if !slices.Equal(got, want) {
		t.Fatalf("pauses after the restart: %q, want %q", got, want)
	}
	in, err = e2.Inbox(ctx, addr("a"))
	if err != nil {
		t.Fatal(err)
	}
	if in.Pause == nil || in.Inflight != nil || len(in.Queued) != 3 {
		t.Fatalf("inbox after the restart: %+v", in)
	}

	// Mutations apply at once while paused.
	rc, err := e2.Mutate(ctx, partition.Mutation{ID: "m1", Addr: addr("a"), State: "n", Op: partition.OpPut,
		Typename: countTypename, Value: []byte("10"), Ack: AckCommitted})
	if err != nil || rc.Reject != partition.Applied {
		t.Fatalf("mutation while paused: %+v, %v", rc, err)
	}
	if rc := pause(e2, PauseRequest{Mutation: "r1", Addr: addr("a"), Resume: true, Principal: "op", Reason: "fixed"}); rc.Reject != partition.Applied {
		t.Fatalf("resume: %+v", rc)
	}
	waitFor(t, "a's queued messages", func() bool { return count(t, e2, "a") == "13" })
	var seen []string
	for _, m := range fn2.messages() {
		if strings.HasPrefix(m, "a:") {
			seen = append(seen, m)
		}
	}
	if !slices.Equal(seen, []string{"a:1", "a:2", "a:3"}) {
		t.Fatalf("after the resume the function saw %v, want a:1 a:2 a:3 once each", seen)
	}
	if rc := pause(e2, PauseRequest{Mutation: "r2", Addr: addr("a"), Resume: true, Principal: "op"}); rc.Reject != partition.RejectNotFound {
		t.Fatalf("a second resume: %+v, want rejected", rc)
	}

	var ops []string
	err = e2.ScanAudit(store.AuditFilter{Principal: "op", From: math.MinInt64, To: math.MaxInt64}, func(a *protocol.AuditRecord) bool {
		ops = append(ops, a.GetMutation()+":"+a.GetTarget().GetId())
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ops, []string{"p1:a", "p2:", "r1:a"}) {
		t.Fatalf("audit records by op: %v", ops)
	}
}
