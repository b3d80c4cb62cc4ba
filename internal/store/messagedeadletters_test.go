package store

import (
	"fmt"
	"testing"
	"time"

	"github.com/statefun-go/statefun/internal/protocol"
)

// TestMessageDeadLetters stores skipped messages, reads them back by id
// and in order (after a cursor), deletes one, and checks that retention
// by count and by age removes the oldest.
func TestMessageDeadLetters(t *testing.T) {
	c := &clock{t: t0}
	now := t0
	db := openRetention(t, Retention{MessageDeadLetterCount: 3, MessageDeadLetterAge: time.Hour}, c, nil)
	commit(t, db, func(b *Batch) {
		for i := range 5 {
			b.PutMessageDeadLetter(&protocol.MessageDeadLetter{Id: fmt.Sprintf("id-%d", i), At: now.Add(-time.Duration(5-i) * 20 * time.Minute).UnixMilli(),
				Envelope: &protocol.Envelope{Target: &protocol.Address{Namespace: "ns", Type: "t", Id: "a"}, Argument: &protocol.TypedValue{Typename: "t/s", HasValue: true, Value: []byte{byte(i)}}}})
		}
	})
	d, ok, err := db.MessageDeadLetter("id-2")
	if err != nil || !ok || d.GetEnvelope().GetArgument().GetValue()[0] != 2 {
		t.Fatalf("get id-2: %v %v %v", d, ok, err)
	}
	var ids []string
	if err := db.ScanMessageDeadLetters("id-1", func(d *protocol.MessageDeadLetter) bool { ids = append(ids, d.GetId()); return len(ids) < 2 }); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ids) != "[id-2 id-3]" {
		t.Fatalf("scan after id-1, 2 of them: %v", ids)
	}
	commit(t, db, func(b *Batch) { b.DeleteMessageDeadLetter("id-4") })
	if _, ok, _ := db.MessageDeadLetter("id-4"); ok {
		t.Fatal("id-4 is still there after its delete")
	}
	// Left: id-0 (100 min old), id-1 (80), id-2 (60), id-3 (40). The count
	// of 3 drops id-0; the hour drops id-1 (id-2, exactly an hour old, is
	// not older than the hour).
	st, err := db.Sweep()
	if err != nil {
		t.Fatal(err)
	}
	if st.MessageDeadLetters != 2 || st.DeletedMessageDeadLetters != 2 {
		t.Fatalf("sweep: %d left, %d deleted; want 2 and 2", st.MessageDeadLetters, st.DeletedMessageDeadLetters)
	}
	ids = nil
	db.ScanMessageDeadLetters("", func(d *protocol.MessageDeadLetter) bool { ids = append(ids, d.GetId()); return true })
	if fmt.Sprint(ids) != "[id-2 id-3]" {
		t.Fatalf("after the sweep: %v", ids)
	}
}
