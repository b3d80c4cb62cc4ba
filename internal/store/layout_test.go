package store

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/protocol"
	"google.golang.org/protobuf/proto"
)

var rewrite = flag.Bool("rewrite", false, "rewrite testdata/layout.txt from the current encoders")

// record is one annotated key or value for the layout golden: the parts
// that the layout diagrams name, each with its bytes.
type record struct {
	title string
	parts []part
}

type part struct {
	b    []byte
	note string
}

func (r *record) add(b []byte, note string, args ...any) *record {
	r.parts = append(r.parts, part{b, fmt.Sprintf(note, args...)})
	return r
}

func (r *record) str(s, what string) *record {
	return r.add(appendString(nil, s), "str(%q) %s", s, what)
}

func (r *record) bytes() []byte {
	var all []byte
	for _, p := range r.parts {
		all = append(all, p.b...)
	}
	return all
}

// render writes the record as annotated hex, 16 bytes a line.
func (r *record) render(sb *strings.Builder) {
	fmt.Fprintf(sb, "%s\n", r.title)
	for _, p := range r.parts {
		b := p.b
		note := p.note
		for first := true; first || len(b) > 0; first = false {
			n := min(len(b), 16)
			fmt.Fprintf(sb, "  %-47s  %s\n", hexSpaced(b[:n]), note)
			b, note = b[n:], "…"
		}
	}
}

func u16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }
func u32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
func u64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

func mustMarshal(m proto.Message) []byte {
	b, err := marshalOpts.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

// TestLayoutGolden pins every key and value layout to annotated hex in
// testdata/layout.txt. Each record is built from its named parts, checked
// against the real encoder, and rendered. A difference from the golden file
// is a change of the file format: bump FormatVersion or undo it. Regenerate
// with go test -run TestLayoutGolden -rewrite.
func TestLayoutGolden(t *testing.T) {
	greeter := address.Address{Type: address.TypeName{Namespace: "example", Name: "greeter"}, ID: "a/b\x00c"}
	env := envelope(greeter, "hi")
	env.Caller = pbAddr(addr("example", "sender", "bob"))
	env.CancellationToken = "tok"
	specs := []*protocol.FromFunction_PersistedValueSpec{{StateName: "seen", TypeTypename: "io.statefun.types/int"}}
	egressRec := &protocol.EgressRecord{EgressNamespace: "example", EgressType: "out",
		Argument: &protocol.TypedValue{Typename: "io.statefun.types/string", HasValue: true, Value: []byte("hi")}}
	entry := Entry{Typename: "io.statefun.types/int", Value: []byte{0, 0, 0, 42}, Version: 7, ExpiresAt: 1_700_000_000_000}

	type golden struct {
		r    *record
		want []byte // what the package's encoder writes
	}
	rec := func(title string) *record { return &record{title: title} }
	cases := []golden{
		{rec("key: global meta, format version").add([]byte{0x00}, "space 0x00: global meta").add([]byte("format"), "name \"format\""),
			metaKey(nil, metaFormat)},
		{rec("value: format version").add(u32(2), "u32 BE: format 2"), appendU32(nil, FormatVersion)},
		{rec("key: global meta, partition count").add([]byte{0x00}, "space 0x00: global meta").add([]byte("partitions"), "name \"partitions\""),
			metaKey(nil, metaPartitions)},
		{rec("value: partition count").add(u32(16), "u32 BE: 16 partitions"), appendU32(nil, 16)},

		{rec("key: state entry of example/greeter id \"a/b\\x00c\", state \"seen_count\"").
			add([]byte{0x01}, "space 0x01: state").
			str("example", "namespace").str("greeter", "type").str("a/b\x00c", "id (0x00 escaped as 00 ff)").str("seen_count", "state name"),
			stateKey(nil, greeter, "seen_count")},
		{rec("value: state entry").
			add(u64(7), "version 7").
			add(u64(1_700_000_000_000), "expiresAt 1700000000000 (unix ms)").
			add([]byte{21}, "uvarint len(typename) = 21").
			add([]byte("io.statefun.types/int"), "typename").
			add([]byte{0, 0, 0, 42}, "value bytes (to the end)"),
			appendEntry(nil, entry)},
		{rec("value: state entry, never expires, zero-length value, no typename").
			add(u64(1), "version 1").add(u64(0), "expiresAt 0: never").add([]byte{0}, "uvarint len(typename) = 0"),
			appendEntry(nil, Entry{Version: 1})},

		{rec("key: inbox of partition 3, arrival 4, from an ingress, seq 7").
			add([]byte{0x02}, "space 0x02: inbox").add(u16(3), "partition 3").add(u64(4), "arrival 4").
			add(u32(0xffffffff), "source: SourceIngress").add(u64(7), "seq 7"),
			inboxKey(nil, InboxKey{Partition: 3, Arrival: 4, Source: SourceIngress, Seq: 7})},
		{rec("key: inbox of partition 3, arrival 5, from partition 2, seq 1").
			add([]byte{0x02}, "space 0x02: inbox").add(u16(3), "partition 3").add(u64(5), "arrival 5").
			add(u32(2), "source: partition 2").add(u64(1), "seq 1"),
			inboxKey(nil, InboxKey{Partition: 3, Arrival: 5, Source: 2, Seq: 1})},
		{rec("value: envelope (inbox and timer values)").add(mustMarshal(env), "protocol.Envelope, protobuf"),
			mustMarshal(env)},

		{rec("key: timer of partition 3, due -1, id 9").
			add([]byte{0x03}, "space 0x03: timer").add(u16(3), "partition 3").
			add(u64(0x7fffffffffffffff), "due -1, sign bit flipped").add(u64(9), "timer id 9"),
			timerKey(nil, TimerKey{Partition: 3, Due: -1, ID: 9})},
		{rec("key: timer of partition 3, due 0, id 1").
			add([]byte{0x03}, "space 0x03: timer").add(u16(3), "partition 3").
			add(u64(0x8000000000000000), "due 0, sign bit flipped").add(u64(1), "timer id 1"),
			timerKey(nil, TimerKey{Partition: 3, Due: 0, ID: 1})},
		{rec("key: timer of partition 3, due 1700000000000, id 2").
			add([]byte{0x03}, "space 0x03: timer").add(u16(3), "partition 3").
			add(u64(1_700_000_000_000|1<<63), "due 1700000000000, sign bit flipped").add(u64(2), "timer id 2"),
			timerKey(nil, TimerKey{Partition: 3, Due: 1_700_000_000_000, ID: 2})},

		{rec("key: cancellation token \"tok\" of sender id \"bob\", partition 3").
			add([]byte{0x04}, "space 0x04: timer by token").add(u16(3), "partition 3").
			str("bob", "sender id").str("tok", "token"),
			tokenKey(nil, 3, "bob", "tok")},
		{rec("value: the timer a token names, due 1700000000000, id 2").
			add(u64(1_700_000_000_000|1<<63), "due 1700000000000, sign bit flipped").add(u64(2), "timer id 2"),
			appendTokenValue(nil, TimerKey{Partition: 3, Due: 1_700_000_000_000, ID: 2})},

		{rec("key: specs of example/greeter").
			add([]byte{0x05}, "space 0x05: specs").str("example", "namespace").str("greeter", "type"),
			specsKey(nil, greeter.Type)},
		{rec("value: specs").add(mustMarshal(&protocol.Specs{Specs: specs}), "protocol.Specs, protobuf"),
			mustMarshal(&protocol.Specs{Specs: specs})},

		{rec("key: meta of partition 3").add([]byte{0x06}, "space 0x06: partition meta").add(u16(3), "partition 3"),
			partitionKey(nil, 3)},
		{rec("value: partition meta, commit 5, version seq 300").
			add([]byte{0x08, 0x05}, "field 1 commit_id: 5").add([]byte{0x10, 0xac, 0x02}, "field 2 version_seq: 300"),
			mustMarshal(&protocol.PartitionMeta{CommitId: 5, VersionSeq: 300})},

		{rec("key: egress outbox example/out, route \"greetings\", seq 12").
			add([]byte{0x07}, "space 0x07: egress").str("example/out", "egress").str("greetings", "route").add(u64(12), "seq 12"),
			egressKey(nil, "example/out", "greetings", 12)},
		{rec("value: egress record").add(mustMarshal(egressRec), "protocol.EgressRecord, protobuf"),
			mustMarshal(egressRec)},
		{rec("key: global meta, highest egress sequence number").add([]byte{0x00}, "space 0x00: global meta").add([]byte("egress-seq"), "name \"egress-seq\""),
			metaKey(nil, metaEgressSeq)},
		{rec("value: highest egress sequence number").add(u64(12), "u64 BE: 12"), binary.BigEndian.AppendUint64(nil, 12)},

		{rec("key: idempotency key \"k-1\" of example/greeter").
			add([]byte{0x0C}, "space 0x0C: idempotency").str("example/greeter", "scope").str("k-1", "key"),
			idempotencyKey(nil, "example/greeter", "k-1")},
		{rec("value: idempotency record").
			add(u64(1_700_000_000_000), "at 1700000000000 (unix ms)").add([]byte{0xab, 0xcd}, "fingerprint (to the end)"),
			appendIdempotency(nil, IdempotencyRecord{At: 1_700_000_000_000, Fingerprint: []byte{0xab, 0xcd}})},
		{rec("key: idempotency index by age").
			add([]byte{0x0D}, "space 0x0D: idempotency by age").add(u64(1_700_000_000_000|1<<63), "at 1700000000000, sign bit flipped").
			str("example/greeter", "scope").str("k-1", "key"),
			idempotencyAgeKey(nil, 1_700_000_000_000, "example/greeter", "k-1")},

		{rec("key: source position of ingress example/logins, topic \"logins\", partition 2").
			add([]byte{0x0E}, "space 0x0E: source position").str("example/logins", "ingress").str("logins", "topic").add(u32(2), "partition 2"),
			sourcePositionKey(nil, "example/logins", "logins", 2)},
		{rec("value: source position").add(u64(42), "next i64 BE: 42"), binary.BigEndian.AppendUint64(nil, 42)},
		{rec("key: dead letter of ingress example/logins, topic \"logins\", partition 2, offset 41").
			add([]byte{0x0F}, "space 0x0F: dead letter").add(u64(1_700_000_000_000|1<<63), "at 1700000000000, sign bit flipped").
			str("example/logins", "ingress").str("logins", "topic").add(u32(2), "partition 2").add(u64(41), "offset 41"),
			deadLetterKey(nil, &DeadLetter{At: 1_700_000_000_000, Ingress: "example/logins", Topic: "logins", Partition: 2, Offset: 41})},
		{rec("value: dead letter, null key").
			add(u64(1_699_999_999_000), "record timestamp 1699999999000 (unix ms)").add([]byte{0x01}, "flags: bit 0 = null key").
			add([]byte{8}, "uvarint len(reason) = 8").add([]byte("null-key"), "reason").
			add([]byte{0}, "uvarint len(key) = 0").add([]byte("v"), "value bytes (to the end)"),
			appendDeadLetter(nil, &DeadLetter{Timestamp: 1_699_999_999_000, KeyNull: true, Reason: "null-key", Value: []byte("v")})},

		{rec("key: read position of partition 3 in the messages topic (cluster mode)").
			add([]byte{0x19}, "space 0x19: read position").add(u16(3), "runtime partition 3").
			str("", "topic: empty, the messages topic").add(u32(3), "Kafka partition 3"),
			readPositionKey(nil, 3, MessagesTopic, 3)},
		{rec("key: read position of partition 3 in ingress topic \"logins\", partition 7").
			add([]byte{0x19}, "space 0x19: read position").add(u16(3), "runtime partition 3").
			str("logins", "topic").add(u32(7), "Kafka partition 7"),
			readPositionKey(nil, 3, "logins", 7)},
		{rec("value: read position, offset 41, index 1").add(u64(41), "offset i64 BE: 41").add(u32(1), "index u32 BE: 1"),
			binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(nil, 41), 1)},
		{rec("key: changelog position of partition 3 (cluster mode)").
			add([]byte{0x17}, "space 0x17: changelog position").add(u16(3), "partition 3"),
			changelogPositionKey(nil, 3)},
		{rec("value: changelog position, next 42, at 1700000000000").
			add(u64(42), "next i64 BE: 42").add(u64(1_700_000_000_000), "at i64 BE: 1700000000000 (unix ms)").
			add([]byte("0123456789abcdef"), "topic id (16 bytes)"),
			appendChangelogPosition(nil, ChangelogPosition{Next: 42, At: 1_700_000_000_000, TopicID: [16]byte([]byte("0123456789abcdef"))})},
		{rec("key: changelog key index of partition 3, for the specs of example/greeter").
			add([]byte{0x18}, "space 0x18: changelog keys").add(u16(3), "partition 3").
			add(specsKey(nil, greeter.Type), "the store key, to the end"),
			changelogKeysKey(nil, 3, specsKey(nil, greeter.Type))},

		{rec("key: bulk job \"j-7f3a\"").add([]byte{0x20}, "space 0x20: job").str("j-7f3a", "job id"),
			jobKey(nil, "j-7f3a")},
	}

	var sb strings.Builder
	sb.WriteString("# The store's key and value layouts as annotated hex (docs/reference/storage.md).\n")
	sb.WriteString("# Generated by TestLayoutGolden; a change here is a change of the file format.\n")
	for _, c := range cases {
		if got := c.r.bytes(); !bytes.Equal(got, c.want) {
			t.Errorf("%s: parts give\n  %s\nencoder writes\n  %s", c.r.title, hexSpaced(got), hexSpaced(c.want))
		}
		sb.WriteString("\n")
		c.r.render(&sb)
	}
	path := filepath.Join("testdata", "layout.txt")
	if *rewrite {
		if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (create it with -rewrite)", err)
	}
	if string(want) != sb.String() {
		t.Errorf("layouts differ from %s; a change of the file format? (-rewrite to accept)\ngot:\n%s", path, sb.String())
	}
}

// TestKeyRoundTrip decodes what each key encoder writes.
func TestKeyRoundTrip(t *testing.T) {
	rng := testRand(t)
	for range 2000 {
		a := addr(randString(rng), randString(rng), randString(rng))
		s := randString(rng)
		if ga, gs, err := decodeStateKey(stateKey(nil, a, s)); err != nil || ga != a || gs != s {
			t.Fatalf("state key %v %q: got %v %q %v", a, s, ga, gs, err)
		}
		if gt, err := decodeSpecsKey(specsKey(nil, a.Type)); err != nil || gt != a.Type {
			t.Fatalf("specs key %v: got %v %v", a.Type, gt, err)
		}
		ik := InboxKey{Partition: rng.IntN(MaxPartitions), Arrival: rng.Uint64(), Source: rng.Uint32(), Seq: rng.Uint64()}
		if got, err := decodeInboxKey(inboxKey(nil, ik)); err != nil || got != ik {
			t.Fatalf("inbox key %v: got %v %v", ik, got, err)
		}
		tk := TimerKey{Partition: rng.IntN(MaxPartitions), Due: int64(rng.Uint64()), ID: rng.Uint64()}
		if got, err := decodeTimerKey(timerKey(nil, tk)); err != nil || got != tk {
			t.Fatalf("timer key %v: got %v %v", tk, got, err)
		}
		tk2 := TimerKey{Partition: tk.Partition, Due: int64(rng.Uint64()), ID: rng.Uint64()}
		if (bytes.Compare(timerKey(nil, tk), timerKey(nil, tk2)) < 0) != (tk.Due < tk2.Due || tk.Due == tk2.Due && tk.ID < tk2.ID) {
			t.Fatalf("timer keys %v and %v out of order", tk, tk2)
		}
		e, r, seq := randString(rng), randString(rng), rng.Uint64()
		if ge, gr, gs, err := decodeEgressKey(egressKey(nil, e, r, seq)); err != nil || ge != e || gr != r || gs != seq {
			t.Fatalf("egress key %q %q %d: got %q %q %d %v", e, r, seq, ge, gr, gs, err)
		}
		entry := Entry{Typename: randString(rng), Value: []byte(randString(rng)), Version: rng.Uint64(), ExpiresAt: int64(rng.Uint64())}
		if got, err := decodeEntry(appendEntry(nil, entry)); err != nil || got.Typename != entry.Typename ||
			!bytes.Equal(got.Value, entry.Value) || got.Version != entry.Version || got.ExpiresAt != entry.ExpiresAt {
			t.Fatalf("entry %+v: got %+v %v", entry, got, err)
		}
	}
}
