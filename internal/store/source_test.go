package store

import (
	"bytes"
	"fmt"
	"testing"
	"time"
)

// TestSourcePositionsRoundTrip: positions of one ingress are read back in
// topic, partition order; another ingress's are not mixed in; a later put
// overwrites.
func TestSourcePositionsRoundTrip(t *testing.T) {
	db, _ := openTest(t, 2)
	commit(t, db, func(b *Batch) {
		b.PutSourcePosition(SourcePosition{Ingress: "ns/in", Topic: "b", Partition: 0, Next: 5})
		b.PutSourcePosition(SourcePosition{Ingress: "ns/in", Topic: "a", Partition: 300, Next: 1})
		b.PutSourcePosition(SourcePosition{Ingress: "ns/in", Topic: "a", Partition: 2, Next: 7})
		b.PutSourcePosition(SourcePosition{Ingress: "ns/in2", Topic: "a", Partition: 2, Next: 9})
		b.PutSourcePosition(SourcePosition{Ingress: "ns/in", Topic: "a", Partition: 2, Next: 8})
	})
	got, err := db.SourcePositions("ns/in")
	if err != nil {
		t.Fatal(err)
	}
	want := []SourcePosition{{"ns/in", "a", 2, 8}, {"ns/in", "a", 300, 1}, {"ns/in", "b", 0, 5}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if got, err := db.SourcePositions("ns/i"); err != nil || len(got) != 0 {
		t.Fatalf("prefix of an ingress id: %v %v", got, err)
	}
}

// TestDeadLettersScanAndRetention: dead letters come back whole, oldest
// first, filtered by ingress and time; retention removes the oldest beyond
// the count and those older than the age.
func TestDeadLettersScanAndRetention(t *testing.T) {
	c := &clock{t0}
	db := openRetention(t, Retention{DeadLetterAge: time.Hour, DeadLetterCount: 6}, c, nil)
	commit(t, db, func(b *Batch) {
		for i := range 10 {
			ing := "ns/in"
			if i%2 == 1 {
				ing = "ns/other"
			}
			b.PutDeadLetter(&DeadLetter{At: t0.Add(time.Duration(i) * time.Minute).UnixMilli(), Ingress: ing, Topic: "t\x00", Partition: int32(i), Offset: int64(100 + i),
				Reason: "null-key", Timestamp: int64(-i), KeyNull: i == 0, Key: []byte{byte(i), 0xff}, Value: bytes.Repeat([]byte{byte(i)}, i),
				ValueOmitted: i == 6})
		}
	})
	var got []DeadLetter
	if err := db.ScanDeadLetters(DeadLetterFilter{Ingress: "ns/in"}, func(d DeadLetter) bool { got = append(got, d); return true }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 5 || got[0].Partition != 0 || got[4].Partition != 8 || !got[0].KeyNull || got[1].KeyNull ||
		got[2].ValueOmitted || !got[3].ValueOmitted ||
		got[2].Topic != "t\x00" || got[2].Offset != 104 || got[2].Timestamp != -4 || !bytes.Equal(got[2].Key, []byte{4, 0xff}) ||
		!bytes.Equal(got[2].Value, []byte{4, 4, 4, 4}) || got[2].Reason != "null-key" || got[2].At != t0.Add(4*time.Minute).UnixMilli() {
		t.Fatalf("scan: %+v", got)
	}
	n := 0
	if err := db.ScanDeadLetters(DeadLetterFilter{Since: t0.Add(7 * time.Minute).UnixMilli()}, func(DeadLetter) bool { n++; return n < 2 }); err != nil || n != 2 {
		t.Fatalf("since + stop: %d %v", n, err)
	}
	// Until bounds the stored time (inclusive); Match sees the key's fields
	// before the value is read; SkipPayload leaves the bodies out.
	var parts []int32
	f := DeadLetterFilter{Since: t0.Add(2 * time.Minute).UnixMilli(), Until: t0.Add(6 * time.Minute).UnixMilli(), SkipPayload: true,
		Match: func(d *DeadLetter) bool { return d.Partition != 4 && d.Reason == "" && d.Value == nil }}
	if err := db.ScanDeadLetters(f, func(d DeadLetter) bool {
		if d.Key != nil || d.Value != nil || d.Reason != "null-key" || d.Timestamp != -int64(d.Partition) {
			t.Errorf("skip payload: %+v", d)
		}
		parts = append(parts, d.Partition)
		return true
	}); err != nil || fmt.Sprint(parts) != "[2 3 5 6]" {
		t.Fatalf("until, match: %v %v", parts, err)
	}
	st, err := db.Sweep()
	if err != nil || st.DeadLetters != 6 || st.DeletedDeadLetters != 4 {
		t.Fatalf("count limit: %+v %v", st, err)
	}
	c.t = t0.Add(time.Hour + 7*time.Minute + time.Second)
	if st, err = db.Sweep(); err != nil || st.DeadLetters != 2 || st.DeletedDeadLetters != 4 {
		t.Fatalf("age limit: %+v %v", st, err)
	}
}
