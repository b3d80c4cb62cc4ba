package store

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/statefun-go/statefun/internal/protocol"
)

// TestBatchOps reads back the writes of an unapplied batch as operations,
// in order, a zero-length put told apart from a deletion.
func TestBatchOps(t *testing.T) {
	db, _ := openTest(t, 4)
	b := db.NewBatch()
	defer b.Close()
	a := addr("ns", "fn", "x")
	b.PutState(a, "s", Entry{Version: 1, Value: []byte("v")})
	b.DeleteState(a, "s")
	b.PutAudit(&protocol.AuditRecord{At: 5, Mutation: "m", State: "s", Target: pbAddr(a), Principal: "op"})
	var got []string
	err := b.Ops(func(op Op) error {
		switch {
		case op.Delete:
			got = append(got, "del "+formatKey(op.Key))
		case op.Value == nil:
			t.Errorf("put %s has a nil value", formatKey(op.Key))
		default:
			got = append(got, fmt.Sprintf("put %s len=%d", formatKey(op.Key), len(op.Value)))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`put state("ns", "fn", "x", "s") len=18`,
		`del state("ns", "fn", "x", "s")`,
	}
	indexes := got[min(3, len(got)):]
	if len(got) != 7 || !equalStrings(got[:2], want) || slices.ContainsFunc(indexes, func(s string) bool { return !strings.HasSuffix(s, "len=0") }) {
		t.Fatalf("ops = %q", got)
	}
	// Nothing reached the store.
	if _, ok, _ := db.GetState(a, "s"); ok {
		t.Fatal("an unapplied batch is visible")
	}
}

func equalStrings(a, b []string) bool { return strings.Join(a, "\n") == strings.Join(b, "\n") }

// TestBatchOpsRefuses: a range deletion and process-local keys cannot be
// logged, and the error says which write and why.
func TestBatchOpsRefuses(t *testing.T) {
	db, _ := openTest(t, 4)
	b := db.NewBatch()
	defer b.Close()
	b.DeleteEgressThrough("ex/out", "r", 9)
	err := b.Ops(func(Op) error { return nil })
	if !errors.Is(err, ErrNotLoggable) || !strings.Contains(err.Error(), "range deletion") || !strings.Contains(err.Error(), `egress("ex/out", "r", seq=0)`) {
		t.Fatalf("range deletion: %v", err)
	}
	b2 := db.NewBatch()
	defer b2.Close()
	b2.PutEgressSeq(3)
	if err := b2.Ops(func(Op) error { return nil }); !errors.Is(err, ErrNotLoggable) || !strings.Contains(err.Error(), `meta("egress-seq") is local`) {
		t.Fatalf("global meta: %v", err)
	}
	pos := ChangelogPosition{Next: 1}
	err = db.ApplyChangelog(1, []Op{{Key: changelogPositionKey(nil, 0), Value: []byte("x")}}, pos)
	if !errors.Is(err, ErrNotLoggable) || !strings.Contains(err.Error(), "changelog-position(0)") {
		t.Fatalf("a changelog record for the position space: %v", err)
	}
	if _, ok, _ := db.ChangelogPosition(1); ok {
		t.Fatal("a refused apply wrote its position")
	}
}

// TestApplyAndDropChangelog: an apply writes the operations, the position
// and the key index in one go; a drop removes exactly one partition's
// keys and its position, in several batches, and leaves specs alone.
func TestApplyAndDropChangelog(t *testing.T) {
	db, _ := openTest(t, 4)
	id := [16]byte{1, 2, 3}
	ops := func(p, n int) []Op {
		var out []Op
		for i := range n {
			out = append(out, Op{Key: stateKey(nil, addr("ns", "fn", fmt.Sprint(p, "/", i)), "s"), Value: appendEntry(nil, Entry{Version: 1, Value: []byte("v")})})
		}
		return out
	}
	// Partition 1 gets 2,500 keys in three applies, partition 2 ten.
	for i, chunk := range [][]Op{ops(1, 1000), ops(1, 2500)[1000:2000], ops(1, 2500)[2000:]} {
		if err := db.ApplyChangelog(1, chunk, ChangelogPosition{Next: int64(1000 * (i + 1)), At: 7, TopicID: id}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.ApplyChangelog(2, ops(2, 10), ChangelogPosition{Next: 10, TopicID: id}); err != nil {
		t.Fatal(err)
	}
	specs := Op{Key: specsKey(nil, addr("ns", "fn", "").Type), Value: mustMarshal(&protocol.Specs{})}
	del := Op{Key: stateKey(nil, addr("ns", "fn", "1/5"), "s"), Delete: true}
	if err := db.ApplyChangelog(1, []Op{specs, del}, ChangelogPosition{Next: 3001, At: 8, TopicID: id}); err != nil {
		t.Fatal(err)
	}
	if pos, ok, err := db.ChangelogPosition(1); err != nil || !ok || pos != (ChangelogPosition{Next: 3001, At: 8, TopicID: id}) {
		t.Fatalf("position = %+v %v %v", pos, ok, err)
	}
	n := 0
	if err := db.ChangelogKeys(1, func(k []byte) error { n++; return nil }); err != nil || n != 2500 {
		t.Fatalf("index of partition 1 holds %d keys (%v), want 2500: 2,500 puts + specs - 1 deletion", n, err)
	}
	if _, ok, _ := db.GetState(addr("ns", "fn", "1/5"), "s"); ok {
		t.Fatal("a deleted key is there")
	}

	removed, err := db.DropChangelogPartition(1)
	if err != nil || removed != 2500 {
		t.Fatalf("drop = %d, %v", removed, err)
	}
	if _, ok, _ := db.ChangelogPosition(1); ok {
		t.Fatal("the position survived the drop")
	}
	if has, err := db.HasChangelogKeys(1); err != nil || has {
		t.Fatalf("index after drop: %v %v", has, err)
	}
	if _, ok, _ := db.GetState(addr("ns", "fn", "1/7"), "s"); ok {
		t.Fatal("a key of the dropped partition is there")
	}
	if _, err := db.Specs(addr("ns", "fn", "").Type); err != nil {
		t.Fatal(err)
	}
	if v, ok, _ := db.get(specs.Key); !ok || !bytes.Equal(v, specs.Value) {
		t.Fatal("the drop removed the specs, a cache shared with other partitions")
	}
	for i := range 10 {
		if _, ok, err := db.GetState(addr("ns", "fn", fmt.Sprint(2, "/", i)), "s"); !ok || err != nil {
			t.Fatalf("the drop of partition 1 removed key %d of partition 2", i)
		}
	}
	if pos, ok, _ := db.ChangelogPosition(2); !ok || pos.Next != 10 {
		t.Fatal("the drop of partition 1 touched partition 2's position")
	}
}

// TestInterruptedDropIsVisible: index entries without a position — what a
// crash part way through a drop leaves, since the first batch removes the
// position — are reported, so a restore drops them before reading.
func TestInterruptedDropIsVisible(t *testing.T) {
	db, _ := openTest(t, 4)
	key := stateKey(nil, addr("ns", "fn", "x"), "s")
	if err := db.ApplyChangelog(2, []Op{{Key: key, Value: appendEntry(nil, Entry{Version: 1})}}, ChangelogPosition{Next: 5}); err != nil {
		t.Fatal(err)
	}
	if has, err := db.HasChangelogKeys(2); err != nil || !has {
		t.Fatalf("HasChangelogKeys = %v, %v", has, err)
	}
	// The first batch of a drop, and then a crash.
	if err := db.pdb.Delete(changelogPositionKey(nil, 2), nil); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := db.ChangelogPosition(2); ok {
		t.Fatal("position still there")
	}
	if has, err := db.HasChangelogKeys(2); err != nil || !has {
		t.Fatalf("after the interrupted drop, HasChangelogKeys = %v, %v", has, err)
	}
	if n, err := db.DropChangelogPartition(2); err != nil || n != 1 {
		t.Fatalf("drop = %d, %v", n, err)
	}
	if has, _ := db.HasChangelogKeys(2); has {
		t.Fatal("index entries after the drop")
	}
}

// TestChangelogOwnRanges: keys in a partition's own ranges (its inbox,
// timers, partition meta) get no index entry, yet ChangelogKeys lists
// them among the indexed keys in key order and a drop removes them; an
// index entry an older build wrote for such a key is neither listed twice
// nor left behind.
func TestChangelogOwnRanges(t *testing.T) {
	db, _ := openTest(t, 4)
	state := stateKey(nil, addr("ns", "fn", "a"), "s")
	specs := specsKey(nil, addr("ns", "fn", "").Type)
	inbox1 := inboxKey(nil, InboxKey{Partition: 1, Arrival: 1, Source: SourceIngress, Seq: 1})
	inbox2 := inboxKey(nil, InboxKey{Partition: 1, Arrival: 2, Source: SourceIngress, Seq: 2})
	timer := timerKey(nil, TimerKey{Partition: 1, Due: 5, ID: 1})
	meta := partitionKey(nil, 1)
	other := inboxKey(nil, InboxKey{Partition: 2, Arrival: 1, Source: SourceIngress, Seq: 1})
	put := func(k []byte) Op { return Op{Key: k, Value: []byte("v")} }
	if err := db.ApplyChangelog(1, []Op{put(state), put(inbox1), put(inbox2), put(timer), put(meta), put(specs)}, ChangelogPosition{Next: 6}); err != nil {
		t.Fatal(err)
	}
	if err := db.ApplyChangelog(2, []Op{put(other)}, ChangelogPosition{Next: 1}); err != nil {
		t.Fatal(err)
	}
	if err := db.ApplyChangelog(1, []Op{{Key: inbox1, Delete: true}}, ChangelogPosition{Next: 7}); err != nil {
		t.Fatal(err)
	}
	// What an older build wrote for inbox2: an index entry.
	if err := db.pdb.Set(changelogKeysKey(nil, 1, inbox2), nil, nil); err != nil {
		t.Fatal(err)
	}
	for _, k := range [][]byte{inbox2, timer, meta} {
		if _, ok, _ := db.get(changelogKeysKey(nil, 1, k)); ok && !bytes.Equal(k, inbox2) {
			t.Errorf("%s has an index entry", formatKey(k))
		}
	}
	var got [][]byte
	if err := db.ChangelogKeys(1, func(k []byte) error { got = append(got, bytes.Clone(k)); return nil }); err != nil {
		t.Fatal(err)
	}
	want := [][]byte{state, inbox2, timer, specs, meta}
	if len(got) != len(want) {
		t.Fatalf("ChangelogKeys(1) = %d keys, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Errorf("key %d: %s, want %s", i, formatKey(got[i]), formatKey(want[i]))
		}
	}
	if _, err := db.DropChangelogPartition(1); err != nil {
		t.Fatal(err)
	}
	if has, err := db.HasChangelogKeys(1); err != nil || has {
		t.Fatalf("after the drop, HasChangelogKeys = %v, %v", has, err)
	}
	for _, k := range [][]byte{state, inbox2, timer, meta, changelogKeysKey(nil, 1, inbox2)} {
		if _, ok, _ := db.get(k); ok {
			t.Errorf("%s survived the drop", formatKey(k))
		}
	}
	if _, ok, _ := db.get(other); !ok {
		t.Error("the drop of partition 1 removed partition 2's inbox")
	}
}
