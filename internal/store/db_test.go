package store

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/protocol"
	"google.golang.org/protobuf/proto"
)

// trickyIDs are ids that a naive "/"-joined or NUL-joined layout would mix
// up with each other.
var trickyIDs = []string{"a", "a/b", "a\x00b", "a\x00", "a\xff", "\x00", "\xff", "", "🙂/🙂"}

func TestStateRoundTrip(t *testing.T) {
	db, dir := openTest(t, 4)
	greeter := addr("example", "greeter", "")
	entry := func(id, state string) Entry {
		return Entry{Typename: "io.statefun.types/string", Value: []byte(id + "|" + state), Version: 7, ExpiresAt: 1_700_000_000_000}
	}
	states := []string{"seen", "seen/count", "seen\x00x", ""}
	commit(t, db, func(b *Batch) {
		for _, id := range trickyIDs {
			greeter.ID = id
			for _, s := range states {
				b.PutState(greeter, s, entry(id, s))
			}
		}
		// An entry with a zero-length value and no typename still exists.
		b.PutState(addr("example", "empty", "x"), "v", Entry{Version: 1})
		// A negative expiry is stored as given.
		b.PutState(addr("example", "neg", "x"), "v", Entry{Value: []byte("v"), ExpiresAt: -5})
		// Deleted in the same batch after being written: gone.
		b.PutState(addr("example", "greeter", "a"), "temp", entry("a", "temp"))
		b.DeleteState(addr("example", "greeter", "a"), "temp")
	})
	check := func(db *DB) {
		t.Helper()
		for _, id := range trickyIDs {
			greeter.ID = id
			for _, s := range states {
				got, ok, err := db.GetState(greeter, s)
				if err != nil || !ok || !reflect.DeepEqual(got, entry(id, s)) {
					t.Errorf("GetState(%q, %q) = %+v, %v, %v", id, s, got, ok, err)
				}
			}
			// ScanAddressState lists exactly this instance's states, in
			// state name order, and no state of an id that extends this one.
			var names []string
			err := db.ScanAddressState(greeter, func(s string, e Entry) error {
				names = append(names, s)
				if !reflect.DeepEqual(e, entry(id, s)) {
					t.Errorf("ScanAddressState(%q): %q = %+v", id, s, e)
				}
				return nil
			})
			if want := []string{"", "seen", "seen\x00x", "seen/count"}; err != nil || !reflect.DeepEqual(names, want) {
				t.Errorf("ScanAddressState(%q) = %q, %v; want %q", id, names, err, want)
			}
		}
		if e, ok, err := db.GetState(addr("example", "empty", "x"), "v"); err != nil || !ok || e.Value == nil || len(e.Value) != 0 || e.Typename != "" || e.Version != 1 {
			t.Errorf("empty entry = %+v, %v, %v; want an existing zero-length value", e, ok, err)
		}
		if e, _, _ := db.GetState(addr("example", "neg", "x"), "v"); e.ExpiresAt != -5 {
			t.Errorf("negative expiry read back as %d", e.ExpiresAt)
		}
		if _, ok, err := db.GetState(addr("example", "greeter", "a"), "temp"); ok || err != nil {
			t.Errorf("deleted state: ok=%v err=%v", ok, err)
		}
		if _, ok, err := db.GetState(addr("example", "greeter", "nobody"), "seen"); ok || err != nil {
			t.Errorf("missing state: ok=%v err=%v", ok, err)
		}
	}
	check(db)

	// Deleting removes the key; other states stay.
	commit(t, db, func(b *Batch) { b.DeleteState(addr("example", "greeter", "a/b"), "seen") })
	if _, ok, _ := db.GetState(addr("example", "greeter", "a/b"), "seen"); ok {
		t.Error("DeleteState left the entry")
	}
	commit(t, db, func(b *Batch) { b.PutState(addr("example", "greeter", "a/b"), "seen", entry("a/b", "seen")) })

	// Everything survives a reopen.
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db2, err := Open(dir, Options{Partitions: 4, Logger: quietLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	check(db2)
}

func TestInboxRoundTrip(t *testing.T) {
	db, _ := openTest(t, 4)
	target := addr("example", "greeter", "alice")
	keys := []InboxKey{
		{Partition: 2, Arrival: 1, Source: SourceIngress, Seq: 1},
		{Partition: 2, Arrival: 5, Source: 0, Seq: 10},
		{Partition: 2, Arrival: 4, Source: 0, Seq: 2},
		{Partition: 2, Arrival: 3, Source: 3, Seq: 0},
		{Partition: 2, Arrival: 2, Source: 1, Seq: 1 << 40},
		{Partition: 1, Arrival: 1, Source: 0, Seq: 1},
		{Partition: 3, Arrival: 1, Source: 0, Seq: 1},
	}
	commit(t, db, func(b *Batch) {
		for _, k := range keys {
			env := envelope(target, fmt.Sprint(k))
			if k.Source != SourceIngress {
				env.Caller = pbAddr(addr("example", "caller", fmt.Sprint(k.Source)))
			}
			b.PutInbox(k, env)
		}
		b.DeleteInbox(InboxKey{Partition: 2, Arrival: 3, Source: 3, Seq: 0})
	})
	var got []InboxKey
	err := db.ScanInbox(2, func(k InboxKey, env *protocol.Envelope) error {
		got = append(got, k)
		if string(env.GetArgument().GetValue()) != fmt.Sprint(k) || env.GetTarget().GetId() != "alice" {
			t.Errorf("inbox %v holds %v", k, env)
		}
		if (env.GetCaller() == nil) != (k.Source == SourceIngress) {
			t.Errorf("inbox %v caller %v", k, env.GetCaller())
		}
		return nil
	})
	// Arrival order, whatever the source.
	want := []InboxKey{
		{Partition: 2, Arrival: 1, Source: SourceIngress, Seq: 1},
		{Partition: 2, Arrival: 2, Source: 1, Seq: 1 << 40},
		{Partition: 2, Arrival: 4, Source: 0, Seq: 2},
		{Partition: 2, Arrival: 5, Source: 0, Seq: 10},
	}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("ScanInbox(2) = %v, %v; want %v", got, err, want)
	}
	// A callback's error stops the scan and comes back as it is.
	stop := errors.New("stop")
	n := 0
	if err := db.ScanInbox(2, func(InboxKey, *protocol.Envelope) error { n++; return stop }); err != stop || n != 1 {
		t.Errorf("ScanInbox with a failing callback = %v after %d calls", err, n)
	}
	if err := db.ScanInbox(4, func(InboxKey, *protocol.Envelope) error { return nil }); err == nil {
		t.Error("ScanInbox(4) of a 4-partition store succeeded")
	}
}

func TestTimersOrderedByDue(t *testing.T) {
	db, _ := openTest(t, 4)
	target := addr("example", "greeter", "alice")
	dues := []int64{5, -1, 0, -1 << 62, 1 << 62, 1, -5, 0, -9223372036854775808, 9223372036854775807}
	commit(t, db, func(b *Batch) {
		for i, due := range dues {
			env := envelope(target, fmt.Sprint(due))
			env.Caller = pbAddr(addr("example", "sender", "bob"))
			if i%2 == 0 {
				env.CancellationToken = fmt.Sprint("tok-", i)
			}
			b.PutTimer(TimerKey{Partition: 1, Due: due, ID: uint64(len(dues) - i)}, env)
		}
		b.PutTimer(TimerKey{Partition: 0, Due: 3, ID: 1}, envelope(target, "other partition"))
		b.PutTimer(TimerKey{Partition: 1, Due: 77, ID: 1}, envelope(target, "deleted"))
		b.DeleteTimer(TimerKey{Partition: 1, Due: 77, ID: 1})
	})
	var got []TimerKey
	err := db.ScanTimers(1, func(k TimerKey, env *protocol.Envelope) error {
		got = append(got, k)
		if string(env.GetArgument().GetValue()) != fmt.Sprint(k.Due) || env.GetCaller().GetId() != "bob" {
			t.Errorf("timer %v holds %v", k, env)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(dues) {
		t.Fatalf("ScanTimers = %v, want %d timers", got, len(dues))
	}
	for i := 1; i < len(got); i++ {
		a, b := got[i-1], got[i]
		if a.Due > b.Due || (a.Due == b.Due && a.ID >= b.ID) {
			t.Errorf("timers out of order: %v before %v", a, b)
		}
	}
	if got[0].Due != -9223372036854775808 || got[len(got)-1].Due != 9223372036854775807 {
		t.Errorf("ScanTimers = %v", got)
	}
	// Cancellation tokens come back.
	tokens := 0
	_ = db.ScanTimers(1, func(k TimerKey, env *protocol.Envelope) error {
		if strings.HasPrefix(env.CancellationToken, "tok-") {
			tokens++
		}
		return nil
	})
	if tokens != 5 {
		t.Errorf("%d timers kept their cancellation token, want 5", tokens)
	}
}

func TestSpecsRoundTrip(t *testing.T) {
	db, _ := openTest(t, 4)
	greeter := address.TypeName{Namespace: "example", Name: "greeter"}
	cart := address.TypeName{Namespace: "com.shop", Name: "cart"}
	specs := []*protocol.FromFunction_PersistedValueSpec{
		{StateName: "seen", TypeTypename: "io.statefun.types/int"},
		{StateName: "items", TypeTypename: "com.shop/items", ExpirationSpec: &protocol.FromFunction_ExpirationSpec{
			Mode: protocol.FromFunction_ExpirationSpec_AFTER_WRITE, ExpireAfterMillis: 60_000,
		}},
	}
	if s, err := db.Specs(greeter); s != nil || err != nil {
		t.Errorf("Specs before any = %v, %v", s, err)
	}
	commit(t, db, func(b *Batch) {
		b.PutSpecs(greeter, specs[:1])
		b.PutSpecs(cart, specs)
	})
	commit(t, db, func(b *Batch) { b.PutSpecs(greeter, specs[1:]) }) // replaces
	check := func(t address.TypeName, got, want []*protocol.FromFunction_PersistedValueSpec) error {
		if !proto.Equal(&protocol.Specs{Specs: got}, &protocol.Specs{Specs: want}) {
			return fmt.Errorf("specs of %v = %v, want %v", t, got, want)
		}
		return nil
	}
	if s, err := db.Specs(greeter); err != nil || check(greeter, s, specs[1:]) != nil {
		t.Errorf("Specs(greeter) = %v, %v", s, err)
	}
	var types []address.TypeName
	err := db.AllSpecs(func(tn address.TypeName, s []*protocol.FromFunction_PersistedValueSpec) error {
		types = append(types, tn)
		want := specs
		if tn == greeter {
			want = specs[1:]
		}
		return check(tn, s, want)
	})
	if err != nil || !reflect.DeepEqual(types, []address.TypeName{cart, greeter}) {
		t.Errorf("AllSpecs visited %v, %v", types, err)
	}
}

func TestMetaRoundTrip(t *testing.T) {
	db, _ := openTest(t, 4)
	if m, err := db.Meta(3); err != nil || m != (PartitionMeta{}) {
		t.Errorf("Meta before any commit = %+v, %v", m, err)
	}
	commit(t, db, func(b *Batch) {
		b.PutMeta(0, PartitionMeta{CommitID: 1, VersionSeq: 5})
		b.PutMeta(3, PartitionMeta{CommitID: 1 << 60, VersionSeq: 1<<64 - 1})
	})
	if m, err := db.Meta(3); err != nil || m != (PartitionMeta{CommitID: 1 << 60, VersionSeq: 1<<64 - 1}) {
		t.Errorf("Meta(3) = %+v, %v", m, err)
	}
	if m, err := db.Meta(0); err != nil || m != (PartitionMeta{CommitID: 1, VersionSeq: 5}) {
		t.Errorf("Meta(0) = %+v, %v", m, err)
	}
	if _, err := db.Meta(4); err == nil {
		t.Error("Meta(4) of a 4-partition store succeeded")
	}
}

func TestEgressRoundTrip(t *testing.T) {
	db, _ := openTest(t, 4)
	if seq, err := db.MaxEgressSeq(); seq != 0 || err != nil {
		t.Errorf("MaxEgressSeq of an empty store = %d, %v", seq, err)
	}
	rec := func(s string) *protocol.EgressRecord {
		return &protocol.EgressRecord{EgressNamespace: "example", EgressType: "out",
			Argument: &protocol.TypedValue{Typename: "io.statefun.types/string", HasValue: true, Value: []byte(s)}}
	}
	const eg = "example/out"
	commit(t, db, func(b *Batch) {
		for _, seq := range []uint64{3, 1, 7} {
			b.PutEgress(eg, "greetings", seq, rec(fmt.Sprint("greetings ", seq)))
		}
		// Routes that extend "greetings" must not mix into it.
		b.PutEgress(eg, "greetings\x00x", 2, rec("x"))
		b.PutEgress(eg, "greetings/x", 50, rec("slash"))
		b.PutEgress("example/other", "", 40, rec("other"))
		b.PutEgress(eg, "a", 9, rec("a"))
		b.PutEgress(eg, "greetings", 8, rec("deleted"))
		b.DeleteEgress(eg, "greetings", 8)
	})
	var seqs []uint64
	for after := uint64(0); ; {
		seq, r, ok, err := db.NextEgress(eg, "greetings", after)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if string(r.GetArgument().GetValue()) != fmt.Sprint("greetings ", seq) {
			t.Errorf("record %d = %v", seq, r)
		}
		seqs = append(seqs, seq)
		after = seq
	}
	if !reflect.DeepEqual(seqs, []uint64{1, 3, 7}) {
		t.Errorf("outbox greetings = %v, want [1 3 7]", seqs)
	}
	if _, _, ok, err := db.NextEgress(eg, "greetings", 1<<64-1); ok || err != nil {
		t.Errorf("NextEgress after the last seq = %v, %v", ok, err)
	}
	if _, _, ok, _ := db.NextEgress(eg, "nothing", 0); ok {
		t.Error("NextEgress of an empty outbox found a record")
	}
	if seq, err := db.MaxEgressSeq(); seq != 50 || err != nil {
		t.Errorf("MaxEgressSeq = %d, %v; want 50", seq, err)
	}
	commit(t, db, func(b *Batch) { b.DeleteEgress(eg, "greetings/x", 50) })
	if seq, err := db.MaxEgressSeq(); seq != 40 || err != nil {
		t.Errorf("MaxEgressSeq = %d, %v; want 40", seq, err)
	}
}

func TestBatch(t *testing.T) {
	db, _ := openTest(t, 4)
	b := db.NewBatch()
	if b.Len() != 0 {
		t.Errorf("empty batch Len = %d", b.Len())
	}
	b.PutState(addr("a", "b", "c"), "s", Entry{Value: []byte("v")})
	b.DeleteInbox(InboxKey{Partition: 1, Source: 2, Seq: 3})
	if b.Len() != 2 || b.Size() < 20 {
		t.Errorf("Len = %d, Size = %d", b.Len(), b.Size())
	}
	// Uncommitted writes are invisible.
	if _, ok, _ := db.GetState(addr("a", "b", "c"), "s"); ok {
		t.Error("uncommitted write visible")
	}
	b.Close()
	b.Close()
	if _, ok, _ := db.GetState(addr("a", "b", "c"), "s"); ok {
		t.Error("closed batch was written")
	}

	// An empty batch commits.
	if err := db.NewBatch().Commit(true); err != nil {
		t.Errorf("empty commit: %v", err)
	}

	// A record protobuf cannot marshal fails the commit, which writes
	// nothing.
	b = db.NewBatch()
	b.PutState(addr("a", "b", "c"), "s", Entry{Value: []byte("v")})
	b.PutInbox(InboxKey{Partition: 0, Seq: 1}, envelope(addr("a", "b", "bad\xffutf8"), "x"))
	if err := b.Commit(true); err == nil || !strings.HasPrefix(err.Error(), "store: encode inbox(") {
		t.Errorf("Commit with an unencodable envelope = %v", err)
	}
	if _, ok, _ := db.GetState(addr("a", "b", "c"), "s"); ok {
		t.Error("a failed commit wrote")
	}

	// Programmer errors panic.
	for name, f := range map[string]func(b *Batch){
		"partition out of range": func(b *Batch) { b.PutMeta(4, PartitionMeta{}) },
		"negative partition":     func(b *Batch) { b.DeleteTimer(TimerKey{Partition: -1}) },
		"nil envelope":           func(b *Batch) { b.PutInbox(InboxKey{}, nil) },
		"use after commit": func(b *Batch) {
			_ = b.Commit(false)
			b.PutState(addr("a", "b", "c"), "s", Entry{})
		},
	} {
		func() {
			b := db.NewBatch()
			defer b.Close()
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f(b)
		}()
	}
}

func TestCorruptValues(t *testing.T) {
	db, _ := openTest(t, 4)
	a := addr("example", "greeter", "a/b")
	// Write bad values under well-formed keys, behind the package's back.
	for key, val := range map[string]string{
		string(stateKey(nil, a, "short")):                                       "\x00\x01",
		string(stateKey(nil, a, "typelen")):                                     strings.Repeat("\x00", 16) + "\x05ab",
		string(inboxKey(nil, InboxKey{Partition: 1, Seq: 1})):                   "\xff\xff\xff",
		string(partitionKey(nil, 2)):                                            "\x0a\x05",
		string(specsKey(nil, address.TypeName{Namespace: "x", Name: "y"})):      "\x0a",
		string([]byte{spaceState, 'a', 0, 1, 'b', 0, 2}):                        "",
		string(egressKey(nil, "e/x", "r", 1)):                                   "\x07",
		string(timerKey(nil, TimerKey{Partition: 1, Due: -3, ID: 9})):           "\x0a\x09",
		string(append(timerKey(nil, TimerKey{Partition: 2, Due: 1, ID: 1}), 0)): "",
	} {
		if err := db.pdb.Set([]byte(key), []byte(val), nil); err != nil {
			t.Fatal(err)
		}
	}
	isCorrupt := func(what string, err error, key string) {
		t.Helper()
		var ce *CorruptionError
		if !errors.Is(err, ErrCorrupt) || !errors.As(err, &ce) || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: err = %v; want corruption at %s", what, err, key)
		}
	}
	_, _, err := db.GetState(a, "short")
	isCorrupt("GetState short", err, `state("example", "greeter", "a/b", "short")`)
	_, _, err = db.GetState(a, "typelen")
	isCorrupt("GetState typelen", err, `"typelen"`)
	err = db.ScanAddressState(a, func(string, Entry) error { return nil })
	isCorrupt("ScanAddressState", err, `"short"`)
	err = db.ScanInbox(1, func(InboxKey, *protocol.Envelope) error { return nil })
	isCorrupt("ScanInbox", err, "inbox(p=1, arrival=0, source=0, seq=1)")
	_, err = db.Meta(2)
	isCorrupt("Meta", err, "partition(2)")
	_, err = db.Specs(address.TypeName{Namespace: "x", Name: "y"})
	isCorrupt("Specs", err, `specs("x", "y")`)
	err = db.ScanTypes(func(address.TypeName) bool { return true })
	isCorrupt("ScanTypes", err, "key(01 61 00 01 62 00 02)")
	_, _, _, err = db.NextEgress("e/x", "r", 0)
	isCorrupt("NextEgress", err, `egress("e/x", "r", seq=1)`)
	err = db.ScanTimers(1, func(TimerKey, *protocol.Envelope) error { return nil })
	isCorrupt("ScanTimers", err, "timer(p=1, due=-3, id=9)")
	err = db.ScanTimers(2, func(TimerKey, *protocol.Envelope) error { return nil })
	isCorrupt("ScanTimers bad key", err, "key(03 00 02 80")
}
