package store

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statefun-go/statefun/internal/protocol"
)

// TestIdempotencyRecordRoundTrip: a record put in a batch is read back by
// (scope, key); another scope or key is not found.
func TestIdempotencyRecordRoundTrip(t *testing.T) {
	db, _ := openTest(t, 2)
	fp := []byte("0123456789abcdef0123456789abcdef")
	at := time.Now().UnixMilli() // recent: the background sweeper keeps it
	commit(t, db, func(b *Batch) {
		b.PutIdempotency("ns/fn", "k\x00/é", IdempotencyRecord{At: at, Fingerprint: fp})
	})
	r, ok, err := db.Idempotency("ns/fn", "k\x00/é")
	if err != nil || !ok || r.At != at || !bytes.Equal(r.Fingerprint, fp) {
		t.Fatalf("got %+v %v %v", r, ok, err)
	}
	for _, sk := range [][2]string{{"ns/other", "k\x00/é"}, {"ns/fn", "k"}, {"ns/fn", "k\x00/é2"}} {
		if _, ok, err := db.Idempotency(sk[0], sk[1]); ok || err != nil {
			t.Fatalf("%q: found %v %v", sk, ok, err)
		}
	}
}

// TestRetentionIdempotency: keys older than the age, and the oldest beyond
// the count, are deleted with their index entries; a key accepted again
// after its first record expired keeps its new record.
func TestRetentionIdempotency(t *testing.T) {
	c := &clock{t0}
	db := openRetention(t, Retention{IdempotencyAge: time.Hour, IdempotencyCount: 5}, c, nil)
	commit(t, db, func(b *Batch) {
		for i := range 10 {
			at := t0.Add(time.Duration(i) * time.Minute)
			b.PutIdempotency("ns/fn", fmt.Sprintf("key-%d", 9-i), IdempotencyRecord{At: at.UnixMilli(), Fingerprint: []byte{byte(i)}})
		}
	})
	st, err := db.Sweep()
	if err != nil {
		t.Fatal(err)
	}
	if st.Idempotency != 5 || st.DeletedIdempotency != 5 {
		t.Fatalf("count limit: %+v", st)
	}
	// The oldest five (written at minutes 0..4: key-9..key-5) are gone.
	for i := range 10 {
		_, ok, err := db.Idempotency("ns/fn", fmt.Sprintf("key-%d", i))
		if err != nil || ok != (i <= 4) {
			t.Fatalf("key-%d: found %v %v", i, ok, err)
		}
	}
	if n, m := countSpace(t, db, spaceIdempotency), countSpace(t, db, spaceIdempotencyAge); n != 5 || m != 5 {
		t.Fatalf("records %d, index entries %d; want 5 and 5", n, m)
	}

	// key-4 (written at minute 5) comes back at 0:59 with a new record; at
	// 1:10 the old index entry of key-4 and the others (minutes 6..9)
	// expire, its new record stays.
	c.t = t0.Add(59 * time.Minute)
	commit(t, db, func(b *Batch) {
		b.PutIdempotency("ns/fn", "key-4", IdempotencyRecord{At: c.t.UnixMilli(), Fingerprint: []byte("new")})
	})
	c.t = t0.Add(70 * time.Minute)
	if _, err := db.Sweep(); err != nil {
		t.Fatal(err)
	}
	r, ok, err := db.Idempotency("ns/fn", "key-4")
	if err != nil || !ok || string(r.Fingerprint) != "new" {
		t.Fatalf("key-4 after the sweep: %+v %v %v", r, ok, err)
	}
	for i := range 4 {
		if _, ok, _ := db.Idempotency("ns/fn", fmt.Sprintf("key-%d", i)); ok {
			t.Fatalf("key-%d outlived its age", i)
		}
	}
	if n, m := countSpace(t, db, spaceIdempotency), countSpace(t, db, spaceIdempotencyAge); n != 1 || m != 1 {
		t.Fatalf("records %d, index entries %d; want 1 and 1", n, m)
	}
	// Past its own age it goes too.
	c.t = t0.Add(3 * time.Hour)
	if _, err := db.Sweep(); err != nil {
		t.Fatal(err)
	}
	if n, m := countSpace(t, db, spaceIdempotency), countSpace(t, db, spaceIdempotencyAge); n != 0 || m != 0 {
		t.Fatalf("records %d, index entries %d; want none", n, m)
	}
}

// TestDeleteEgressThrough: an acknowledgement removes the records of one
// outbox up to a sequence number, and nothing of other outboxes.
func TestDeleteEgressThrough(t *testing.T) {
	db, _ := openTest(t, 2)
	rec := egressRec("x")
	commit(t, db, func(b *Batch) {
		for seq := uint64(1); seq <= 6; seq++ {
			b.PutEgress("e/g", "a", seq, rec)
			b.PutEgress("e/g", "b", seq+10, rec)
		}
		b.PutEgress("e/g", "a\x00", 3, rec) // an outbox whose name extends "a"
	})
	commit(t, db, func(b *Batch) { b.DeleteEgressThrough("e/g", "a", 4) })
	seq, _, ok, err := db.NextEgress("e/g", "a", 0)
	if err != nil || !ok || seq != 5 {
		t.Fatalf("after ack 4 the head is %d %v %v, want 5", seq, ok, err)
	}
	for _, r := range []struct {
		route string
		head  uint64
	}{{"b", 11}, {"a\x00", 3}} {
		if seq, _, ok, err := db.NextEgress("e/g", r.route, 0); err != nil || !ok || seq != r.head {
			t.Fatalf("outbox %q: head %d %v %v, want %d", r.route, seq, ok, err, r.head)
		}
	}
	commit(t, db, func(b *Batch) { b.DeleteEgressThrough("e/g", "a", ^uint64(0)) })
	if _, _, ok, err := db.NextEgress("e/g", "a", 0); ok || err != nil {
		t.Fatalf("after ack max the outbox is not empty: %v %v", ok, err)
	}
	if _, _, ok, _ := db.NextEgress("e/g", "a\x00", 0); !ok {
		t.Fatal("ack of outbox \"a\" removed outbox \"a\\x00\"")
	}
}

// TestMaxEgressSeqSurvivesEmptyOutboxes: once every outbox is empty the
// highest sequence number written is still known, so numbers are never
// given twice (a consumer's position must not point at a later record).
func TestMaxEgressSeqSurvivesEmptyOutboxes(t *testing.T) {
	fs := vfs.NewMem()
	db, err := Open("db", Options{FS: fs, Logger: quietLogger{}, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	commit(t, db, func(b *Batch) {
		b.PutEgress("e/g", "a", 7, egressRec("x"))
		b.PutEgressSeq(7)
	})
	commit(t, db, func(b *Batch) { b.DeleteEgressThrough("e/g", "a", 7) })
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open("db", Options{FS: fs, Logger: quietLogger{}, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if seq, err := db.MaxEgressSeq(); err != nil || seq != 7 {
		t.Fatalf("MaxEgressSeq = %d %v, want 7", seq, err)
	}
}

// egressRec is a playground egress record carrying payload.
func egressRec(payload string) *protocol.EgressRecord {
	return &protocol.EgressRecord{EgressNamespace: "e", EgressType: "g",
		Argument: &protocol.TypedValue{Typename: "io.statefun.types/string", HasValue: true, Value: []byte(payload)}}
}
