package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/statefun-go/statefun/internal/address"
)

// Key spaces. The first byte of every key names the space it belongs to, so
// each space is one contiguous range of the store and is scanned on its own.
//
// These values are part of the file format. A number is never reused: a
// retired space stays here as a commented-out line. docs/reference/storage.md describes
// every space; a change here is a change there.
const (
	spaceMeta      byte = 0x00 // global meta: format version, partition count
	spaceState     byte = 0x01 // state entries
	spaceInbox     byte = 0x02 // partition inboxes
	spaceTimer     byte = 0x03 // delayed-message timers
	spaceToken     byte = 0x04 // the cancellation-token index of the timers
	spaceSpecs     byte = 0x05 // registered specs per function type
	spacePartition byte = 0x06 // partition meta
	spaceEgress    byte = 0x07 // egress outboxes
	spaceReceipt   byte = 0x08 // operator mutation receipts, by mutation id
	spaceAudit     byte = 0x09 // the audit log of operator mutations, by time
	spaceAuditAddr byte = 0x0A // audit index: by target address, then time
	spaceAuditWho  byte = 0x0B // audit index: by principal, then time
	// spaceIdempotency holds the idempotency keys of ingress requests.
	spaceIdempotency byte = 0x0C
	// spaceIdempotencyAge indexes them by age, for retention.
	spaceIdempotencyAge byte = 0x0D
	// spaceSourcePosition holds how far each ingress has consumed each
	// partition of its external source (Kafka topic partitions).
	spaceSourcePosition byte = 0x0E
	// spaceDeadLetter holds the records an ingress could not deliver, by
	// the time they were stored.
	spaceDeadLetter byte = 0x0F
	// spacePause holds the pauses in force, by address (pauses.go).
	spacePause byte = 0x13
	// spaceAuditMutation indexes the audit log by mutation id.
	spaceAuditMutation byte = 0x1A
	// spaceAuditType indexes the audit log by function type.
	spaceAuditType byte = 0x1B
	// 0x1C and 0x1D held indexes of the audit log by the target's id and
	// by its namespace; retired (auditscan.go serves those filters from
	// 0x0A and 0x1B). Open empties them in an older store, and a
	// changelog's records in them are skipped (skipRetired).
	spaceRetiredAuditID        byte = 0x1C
	spaceRetiredAuditNamespace byte = 0x1D
)

// Names of the global meta keys (space 0x00). Part of the file format.
const (
	metaFormat     = "format"     // value: FormatVersion, u32 BE
	metaPartitions = "partitions" // value: the partition count P, u32 BE
	// metaAuditIndexed marks a store whose audit records all have their
	// index entries in 0x0A and 0x0B; metaAuditIndexed2 one whose records
	// also have them in 0x1A and 0x1B; metaAuditRetired one whose retired
	// spaces 0x1C and 0x1D are empty. Open builds what an older store
	// lacks and empties what it no longer needs.
	metaAuditIndexed  = "audit-indexed"   // value: 1, u32 BE
	metaAuditIndexed2 = "audit-indexed-2" // value: 1, u32 BE
	metaAuditRetired  = "audit-retired-3" // value: 1, u32 BE
	// metaTokensIndexed marks a store whose timers with a cancellation
	// token all have their entry in 0x04. Open builds what an older store
	// lacks.
	metaTokensIndexed = "tokens-indexed" // value: 1, u32 BE
	// metaEgressSeq is the highest egress sequence number ever written, so
	// that numbers are never given twice, even once every outbox is empty
	// (a consumer's position must never point at a later record).
	metaEgressSeq = "egress-seq" // value: u64 BE
)

// MaxPartitions is the largest partition count a store can hold: partition
// numbers are written as u16 inside keys.
const MaxPartitions = 1 << 16

// SourceIngress is the InboxKey.Source of a message that came from an
// ingress rather than from another partition. Part of the file format.
const SourceIngress uint32 = 0xFFFFFFFF

// SourceMessages is the InboxKey.Source of a message or state mutation
// command that came through the cluster's messages topic; its Seq is the
// record's offset. Part of the file format.
const SourceMessages uint32 = 0xFFFFFFFE

// errBadKey is returned (wrapped as corruption) when a key of a known space
// does not have that space's layout.
var errBadKey = errors.New("bad key layout")

// partitionU16 converts a partition number for a key. A partition outside
// [0, MaxPartitions) is a programmer error.
func partitionU16(p int) uint16 {
	if p < 0 || p >= MaxPartitions {
		panic(fmt.Sprintf("store: partition %d out of range [0, %d)", p, MaxPartitions))
	}
	return uint16(p)
}

// metaKey appends the key of a global meta record.
//
//	+------+-----------------------------+
//	| 0x00 | name (raw bytes, no escape) |
//	+------+-----------------------------+
//
// Names are the metaXxx constants.
func metaKey(dst []byte, name string) []byte {
	dst = append(dst, spaceMeta)
	return append(dst, name...)
}

// stateKey appends the key of one state entry: the state named state of the
// function instance a.
//
//	+------+----------------+-----------+---------+----------------+
//	| 0x01 | str(namespace) | str(type) | str(id) | str(statename) |
//	+------+----------------+-----------+---------+----------------+
//
// Namespace and type are the two halves of the function's typename. Sorting
// by type, then id keeps all state of one instance together
// (ScanAddressState) and all instances of one type together (ScanIDs).
// The value is an entry; see appendEntry.
func stateKey(dst []byte, a address.Address, state string) []byte {
	dst = stateAddressPrefix(dst, a)
	return appendString(dst, state)
}

// stateTypePrefix appends 0x01 | str(namespace) | str(type): the prefix of
// every state key of function type t.
func stateTypePrefix(dst []byte, t address.TypeName) []byte {
	dst = append(dst, spaceState)
	dst = appendString(dst, t.Namespace)
	return appendString(dst, t.Name)
}

// stateAddressPrefix appends the prefix of every state key of instance a.
func stateAddressPrefix(dst []byte, a address.Address) []byte {
	dst = stateTypePrefix(dst, a.Type)
	return appendString(dst, a.ID)
}

// decodeStateKey is the inverse of stateKey.
func decodeStateKey(key []byte) (a address.Address, state string, err error) {
	if len(key) == 0 || key[0] != spaceState {
		return a, "", errBadKey
	}
	b := key[1:]
	for _, p := range []*string{&a.Type.Namespace, &a.Type.Name, &a.ID, &state} {
		if *p, b, err = decodeString(b); err != nil {
			return address.Address{}, "", err
		}
	}
	if len(b) != 0 {
		return address.Address{}, "", errBadKey
	}
	return a, state, nil
}

// InboxKey names one message in a partition inbox. Within a partition, keys
// sort by Arrival, so a scan yields the inbox in the order its messages
// arrived, whatever their source.
type InboxKey struct {
	Partition int
	// Arrival orders the messages of one partition's inbox: the engine's
	// committer numbers them in the order it writes and delivers them.
	Arrival uint64
	// Source is the partition that produced the message, or SourceIngress.
	Source uint32
	// Seq orders the messages of one source; the source assigns it.
	// (Source, Seq) names the message for the partition core.
	Seq uint64
}

const inboxKeyLen = 1 + 2 + 8 + 4 + 8

// inboxKey appends the key of an inbox message.
//
//	+------+------------------+----------------+---------------+------------+
//	| 0x02 | partition u16 BE | arrival u64 BE | source u32 BE | seq u64 BE |
//	+------+------------------+----------------+---------------+------------+
//	  1 B         2 B                8 B              4 B           8 B       = 23 bytes
//
// arrival is the message's place in the partition's arrival order; source
// is the producing partition, or 0xffffffff (SourceIngress) for an ingress.
// The value is a protocol.Envelope.
func inboxKey(dst []byte, k InboxKey) []byte {
	dst = inboxPrefix(dst, k.Partition)
	dst = binary.BigEndian.AppendUint64(dst, k.Arrival)
	dst = binary.BigEndian.AppendUint32(dst, k.Source)
	return binary.BigEndian.AppendUint64(dst, k.Seq)
}

// inboxPrefix appends 0x02 | partition: the prefix of one partition's inbox.
func inboxPrefix(dst []byte, partition int) []byte {
	dst = append(dst, spaceInbox)
	return binary.BigEndian.AppendUint16(dst, partitionU16(partition))
}

// decodeInboxKey is the inverse of inboxKey.
func decodeInboxKey(key []byte) (InboxKey, error) {
	if len(key) != inboxKeyLen || key[0] != spaceInbox {
		return InboxKey{}, errBadKey
	}
	return InboxKey{
		Partition: int(binary.BigEndian.Uint16(key[1:])),
		Arrival:   binary.BigEndian.Uint64(key[3:]),
		Source:    binary.BigEndian.Uint32(key[11:]),
		Seq:       binary.BigEndian.Uint64(key[15:]),
	}, nil
}

// inboxKeyV1Len is the length of an inbox key of format 1, which had no
// arrival: 0x02 | partition u16 | source u32 | seq u64.
const inboxKeyV1Len = 1 + 2 + 4 + 8

// TimerKey names one delayed message. Within a partition, keys sort by Due,
// then ID, so a scan yields timers in the order they fall due.
type TimerKey struct {
	Partition int
	// Due is when the message is to be delivered, in Unix milliseconds. It
	// may be zero or negative.
	Due int64
	// ID tells apart timers due at the same millisecond; the partition
	// assigns it.
	ID uint64
}

const timerKeyLen = 1 + 2 + 8 + 8

// timerKey appends the key of a delayed message.
//
//	+------+------------------+--------------------------+-----------------+
//	| 0x03 | partition u16 BE | due u64 BE, sign flipped | timer id u64 BE |
//	+------+------------------+--------------------------+-----------------+
//	  1 B         2 B                     8 B                    8 B         = 19 bytes
//
// due is Unix milliseconds, an int64 written as uint64(due) ^ 1<<63 so that
// byte order is numeric order for negative values too: math.MinInt64 is
// 00 00 00 00 00 00 00 00, -1 is 7f ff ff ff ff ff ff ff, 0 is
// 80 00 00 00 00 00 00 00. The value is a protocol.Envelope whose caller is
// the sender and whose cancellation token is set when one was given.
func timerKey(dst []byte, k TimerKey) []byte {
	dst = timerPrefix(dst, k.Partition)
	dst = binary.BigEndian.AppendUint64(dst, flipSign(k.Due))
	return binary.BigEndian.AppendUint64(dst, k.ID)
}

// timerPrefix appends 0x03 | partition: the prefix of one partition's timers.
func timerPrefix(dst []byte, partition int) []byte {
	dst = append(dst, spaceTimer)
	return binary.BigEndian.AppendUint16(dst, partitionU16(partition))
}

// flipSign maps int64 onto uint64 preserving order.
func flipSign(v int64) uint64 { return uint64(v) ^ (1 << 63) }

// unflipSign is the inverse of flipSign.
func unflipSign(u uint64) int64 { return int64(u ^ (1 << 63)) }

// decodeTimerKey is the inverse of timerKey.
func decodeTimerKey(key []byte) (TimerKey, error) {
	if len(key) != timerKeyLen || key[0] != spaceTimer {
		return TimerKey{}, errBadKey
	}
	return TimerKey{
		Partition: int(binary.BigEndian.Uint16(key[1:])),
		Due:       unflipSign(binary.BigEndian.Uint64(key[3:])),
		ID:        binary.BigEndian.Uint64(key[11:]),
	}, nil
}

// tokenKey appends the key of a cancellation token's entry in the index
// of the timers by token: the delayed message that sender (the id of the
// function that sent it) scheduled with token, held by partition.
//
//	+------+------------------+----------------+------------+
//	| 0x04 | partition u16 BE | str(sender id) | str(token) |
//	+------+------------------+----------------+------------+
//
// The value is the timer's key after its partition:
//
//	+--------------------------+-----------------+
//	| due u64 BE, sign flipped | timer id u64 BE |
//	+--------------------------+-----------------+
//	            8 B                    8 B         = 16 bytes
//
// so a cancellation finds a timer that is not in memory with one point
// read. A token names at most one pending timer of a sender (a response
// that schedules a second one is refused), so the entry is written with
// its timer and deleted with it, in the same batch.
func tokenKey(dst []byte, p int, sender, token string) []byte {
	dst = append(dst, spaceToken)
	dst = binary.BigEndian.AppendUint16(dst, partitionU16(p))
	dst = appendString(dst, sender)
	return appendString(dst, token)
}

const tokenValueLen = 8 + 8

// appendTokenValue appends the value of a token's entry: the due time and
// id of its timer.
func appendTokenValue(dst []byte, k TimerKey) []byte {
	dst = binary.BigEndian.AppendUint64(dst, flipSign(k.Due))
	return binary.BigEndian.AppendUint64(dst, k.ID)
}

// decodeTokenKey is the inverse of tokenKey.
func decodeTokenKey(key []byte) (p int, sender, token string, err error) {
	if len(key) < 3 || key[0] != spaceToken {
		return 0, "", "", errBadKey
	}
	p = int(binary.BigEndian.Uint16(key[1:]))
	b := key[3:]
	if sender, b, err = decodeString(b); err != nil {
		return 0, "", "", err
	}
	if token, b, err = decodeString(b); err != nil {
		return 0, "", "", err
	}
	if len(b) != 0 {
		return 0, "", "", errBadKey
	}
	return p, sender, token, nil
}

// specsKey appends the key of the registered specs of function type t.
//
//	+------+----------------+-----------+
//	| 0x05 | str(namespace) | str(type) |
//	+------+----------------+-----------+
//
// The value is a protocol.Specs.
func specsKey(dst []byte, t address.TypeName) []byte {
	dst = append(dst, spaceSpecs)
	dst = appendString(dst, t.Namespace)
	return appendString(dst, t.Name)
}

// decodeSpecsKey is the inverse of specsKey.
func decodeSpecsKey(key []byte) (t address.TypeName, err error) {
	if len(key) == 0 || key[0] != spaceSpecs {
		return t, errBadKey
	}
	b := key[1:]
	if t.Namespace, b, err = decodeString(b); err != nil {
		return address.TypeName{}, err
	}
	if t.Name, b, err = decodeString(b); err != nil {
		return address.TypeName{}, err
	}
	if len(b) != 0 {
		return address.TypeName{}, errBadKey
	}
	return t, nil
}

const partitionKeyLen = 1 + 2

// partitionKey appends the key of a partition's meta record.
//
//	+------+------------------+
//	| 0x06 | partition u16 BE |
//	+------+------------------+
//
// The value is a protocol.PartitionMeta.
func partitionKey(dst []byte, partition int) []byte {
	dst = append(dst, spacePartition)
	return binary.BigEndian.AppendUint16(dst, partitionU16(partition))
}

// egressKey appends the key of one record waiting in an egress outbox.
//
//	+------+-------------+------------+------------+
//	| 0x07 | str(egress) | str(route) | seq u64 BE |
//	+------+-------------+------------+------------+
//
// egress is the egress's typename as one string, "namespace/type"; route
// picks a queue within it (the playground egress's topic). seq orders the
// records of one route. The value is a protocol.EgressRecord.
func egressKey(dst []byte, egress, route string, seq uint64) []byte {
	dst = egressPrefix(dst, egress, route)
	return binary.BigEndian.AppendUint64(dst, seq)
}

// egressPrefix appends 0x07 | str(egress) | str(route): the prefix of one
// outbox.
func egressPrefix(dst []byte, egress, route string) []byte {
	dst = append(dst, spaceEgress)
	dst = appendString(dst, egress)
	return appendString(dst, route)
}

// decodeEgressKey is the inverse of egressKey.
func decodeEgressKey(key []byte) (egress, route string, seq uint64, err error) {
	if len(key) == 0 || key[0] != spaceEgress {
		return "", "", 0, errBadKey
	}
	b := key[1:]
	if egress, b, err = decodeString(b); err != nil {
		return "", "", 0, err
	}
	if route, b, err = decodeString(b); err != nil {
		return "", "", 0, err
	}
	if len(b) != 8 {
		return "", "", 0, errBadKey
	}
	return egress, route, binary.BigEndian.Uint64(b), nil
}

// receiptKey appends the key of one mutation's receipt.
//
//	+------+------------------+
//	| 0x08 | str(mutation id) |
//	+------+------------------+
//
// The value is a protocol.Receipt.
func receiptKey(dst []byte, id string) []byte {
	dst = append(dst, spaceReceipt)
	return appendString(dst, id)
}

// auditKey appends the key of one audit record: one entry changed by one
// mutation.
//
//	+------+--------------------------------+------------------+----------------+
//	| 0x09 | at i64 (unix ms, sign flipped) | str(mutation id) | str(statename) |
//	+------+--------------------------------+------------------+----------------+
//
// Records sort by time, so a time window is one range scan. The value is a
// protocol.AuditRecord.
func auditKey(dst []byte, at int64, id, state string) []byte {
	dst = append(dst, spaceAudit)
	dst = binary.BigEndian.AppendUint64(dst, flipSign(at))
	dst = appendString(dst, id)
	return appendString(dst, state)
}

func auditTimeKey(at int64) []byte {
	return binary.BigEndian.AppendUint64([]byte{spaceAudit}, flipSign(at))
}

// auditSuffix appends what follows the space byte in an audit key: the time,
// mutation id and state name. The index keys end with it too.
func auditSuffix(dst []byte, at int64, id, state string) []byte {
	dst = binary.BigEndian.AppendUint64(dst, flipSign(at))
	dst = appendString(dst, id)
	return appendString(dst, state)
}

// auditAddrKey appends the key of an audit record's entry in the index by
// target address.
//
//	+------+----------------+-----------+---------+--------------------------------+------------------+----------------+
//	| 0x0A | str(namespace) | str(type) | str(id) | at i64 (unix ms, sign flipped) | str(mutation id) | str(statename) |
//	+------+----------------+-----------+---------+--------------------------------+------------------+----------------+
//
// The value is empty: the key after the address is the audit key after its
// space byte, so the record is one point read away. The records of one
// address are one range scan, in time order.
func auditAddrKey(dst []byte, a address.Address, at int64, id, state string) []byte {
	dst = auditAddrPrefix(dst, a)
	return auditSuffix(dst, at, id, state)
}

// auditAddrPrefix appends 0x0A | str(namespace) | str(type) | str(id).
func auditAddrPrefix(dst []byte, a address.Address) []byte {
	dst = append(dst, spaceAuditAddr)
	dst = appendString(dst, a.Type.Namespace)
	dst = appendString(dst, a.Type.Name)
	return appendString(dst, a.ID)
}

// auditWhoKey appends the key of an audit record's entry in the index by
// principal (the token name that made the mutation).
//
//	+------+----------------+--------------------------------+------------------+----------------+
//	| 0x0B | str(principal) | at i64 (unix ms, sign flipped) | str(mutation id) | str(statename) |
//	+------+----------------+--------------------------------+------------------+----------------+
//
// The value is empty, as in auditAddrKey.
func auditWhoKey(dst []byte, principal string, at int64, id, state string) []byte {
	dst = auditWhoPrefix(dst, principal)
	return auditSuffix(dst, at, id, state)
}

// auditWhoPrefix appends 0x0B | str(principal).
func auditWhoPrefix(dst []byte, principal string) []byte {
	dst = append(dst, spaceAuditWho)
	return appendString(dst, principal)
}

// auditMutationKey appends the key of an audit record's entry in the index
// by mutation id.
//
//	+------+------------------+--------------------------------+------------------+----------------+
//	| 0x1A | str(mutation id) | at i64 (unix ms, sign flipped) | str(mutation id) | str(statename) |
//	+------+------------------+--------------------------------+------------------+----------------+
//
// The value is empty, as in auditAddrKey. The console links every receipt
// to its records, so finding a mutation's records must not read the log.
func auditMutationKey(dst []byte, at int64, id, state string) []byte {
	dst = auditMutationPrefix(dst, id)
	return auditSuffix(dst, at, id, state)
}

// auditMutationPrefix appends 0x1A | str(mutation id).
func auditMutationPrefix(dst []byte, id string) []byte {
	dst = append(dst, spaceAuditMutation)
	return appendString(dst, id)
}

// auditTypeKey appends the key of an audit record's entry in the index by
// function type.
//
//	+------+----------------+-----------+--------------------------------+------------------+----------------+
//	| 0x1B | str(namespace) | str(type) | at i64 (unix ms, sign flipped) | str(mutation id) | str(statename) |
//	+------+----------------+-----------+--------------------------------+------------------+----------------+
//
// The value is empty, as in auditAddrKey. The records of one type are one
// range scan in time order, across its ids.
func auditTypeKey(dst []byte, t address.TypeName, at int64, id, state string) []byte {
	dst = auditTypePrefix(dst, t)
	return auditSuffix(dst, at, id, state)
}

// auditTypePrefix appends 0x1B | str(namespace) | str(type).
func auditTypePrefix(dst []byte, t address.TypeName) []byte {
	dst = append(dst, spaceAuditType)
	dst = appendString(dst, t.Namespace)
	return appendString(dst, t.Name)
}

// formatKey renders a key for error messages and test output, decoding the
// spaces it knows, for example
//
//	state("example", "greeter", "alice", "seen_count")
//	inbox(p=3, source=ingress, seq=7)
//
// and falling back to hex (key(01 02 …)) for anything it cannot decode.
func formatKey(key []byte) string {
	q := strconv.Quote
	if len(key) > 0 {
		switch key[0] {
		case spaceMeta:
			return "meta(" + q(string(key[1:])) + ")"
		case spaceState:
			if a, s, err := decodeStateKey(key); err == nil {
				return fmt.Sprintf("state(%s, %s, %s, %s)", q(a.Type.Namespace), q(a.Type.Name), q(a.ID), q(s))
			}
		case spaceInbox:
			if k, err := decodeInboxKey(key); err == nil {
				src := strconv.FormatUint(uint64(k.Source), 10)
				switch k.Source {
				case SourceIngress:
					src = "ingress"
				case SourceMessages:
					src = "messages"
				}
				return fmt.Sprintf("inbox(p=%d, arrival=%d, source=%s, seq=%d)", k.Partition, k.Arrival, src, k.Seq)
			}
		case spaceTimer:
			if k, err := decodeTimerKey(key); err == nil {
				return fmt.Sprintf("timer(p=%d, due=%d, id=%d)", k.Partition, k.Due, k.ID)
			}
		case spaceToken:
			if p, sender, token, err := decodeTokenKey(key); err == nil {
				return fmt.Sprintf("token(p=%d, %s, %s)", p, q(sender), q(token))
			}
		case spaceSpecs:
			if t, err := decodeSpecsKey(key); err == nil {
				return fmt.Sprintf("specs(%s, %s)", q(t.Namespace), q(t.Name))
			}
		case spacePartition:
			if len(key) == partitionKeyLen {
				return fmt.Sprintf("partition(%d)", binary.BigEndian.Uint16(key[1:]))
			}
		case spaceEgress:
			if e, r, seq, err := decodeEgressKey(key); err == nil {
				return fmt.Sprintf("egress(%s, %s, seq=%d)", q(e), q(r), seq)
			}
		case spaceSourcePosition:
			if p, err := decodeSourcePositionKey(key); err == nil {
				return fmt.Sprintf("source-position(%s, %s, %d)", q(p.Ingress), q(p.Topic), p.Partition)
			}
		case spaceDeadLetter:
			var d DeadLetter
			if err := decodeDeadLetterKey(key, &d); err == nil {
				return fmt.Sprintf("dead-letter(at=%d, %s, %s, %d, offset=%d)", d.At, q(d.Ingress), q(d.Topic), d.Partition, d.Offset)
			}
		case spaceReadPosition:
			if p, rp, err := decodeReadPositionKey(key); err == nil {
				topic := q(rp.Topic)
				if rp.Topic == MessagesTopic {
					topic = "messages"
				}
				return fmt.Sprintf("read-position(p=%d, %s, %d)", p, topic, rp.Partition)
			}
		case spaceChangelogPosition:
			if len(key) == 3 {
				return fmt.Sprintf("changelog-position(%d)", binary.BigEndian.Uint16(key[1:]))
			}
		case spaceChangelogKeys:
			if len(key) > 3 {
				return fmt.Sprintf("changelog-key(p=%d, %s)", binary.BigEndian.Uint16(key[1:]), formatKey(key[3:]))
			}
		case spaceJob:
			if id, rest, err := decodeString(key[1:]); err == nil && len(rest) == 0 {
				return fmt.Sprintf("job(%s)", q(id))
			}
		case spaceIdempotency:
			if scope, rest, err := decodeString(key[1:]); err == nil {
				if k, rest, err := decodeString(rest); err == nil && len(rest) == 0 {
					return fmt.Sprintf("idempotency(%s, %s)", q(scope), q(k))
				}
			}
		}
	}
	return "key(" + hexSpaced(key) + ")"
}

// hexSpaced renders b as lower-case hex bytes separated by spaces.
func hexSpaced(b []byte) string {
	var sb strings.Builder
	for i, c := range b {
		if i > 0 {
			sb.WriteByte(' ')
		}
		fmt.Fprintf(&sb, "%02x", c)
	}
	return sb.String()
}
