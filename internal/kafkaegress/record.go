package kafkaegress

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/statefun-go/statefun/internal/kafkatopic"
	"github.com/statefun-go/statefun/internal/protocol"
)

// RecordTypename is the typename StateFun requires of every value sent to a
// Kafka egress (the SDKs' KafkaEgressBuilder and kafkaEgressMessage).
const RecordTypename = "type.googleapis.com/io.statefun.sdk.egress.KafkaProducerRecord"

// Record is a decoded io.statefun.sdk.egress.KafkaProducerRecord:
//
//	message KafkaProducerRecord { string key = 1; bytes value_bytes = 2; string topic = 3; }
type Record struct {
	Key   string
	Value []byte
	Topic string
}

// DecodeRecord reads a KafkaProducerRecord's protobuf encoding as proto3
// does: unknown fields are skipped, a repeated scalar keeps its last value,
// and the string fields must be UTF-8. It is written against the wire format
// directly because the message is not part of the request-reply protocol.
func DecodeRecord(b []byte) (Record, error) {
	var r Record
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return r, fmt.Errorf("a field tag: %v", protowire.ParseError(n))
		}
		b = b[n:]
		if num < 1 || num > 3 {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return r, fmt.Errorf("unknown field %d: %v", num, protowire.ParseError(n))
			}
			b = b[n:]
			continue
		}
		name := [...]string{1: "key", 2: "value_bytes", 3: "topic"}[num]
		if typ != protowire.BytesType {
			return r, fmt.Errorf("field %d (%s) has wire type %d, want %d (length-delimited)", num, name, typ, protowire.BytesType)
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return r, fmt.Errorf("field %d (%s): %v", num, name, protowire.ParseError(n))
		}
		b = b[n:]
		switch num {
		case 1:
			if !utf8.Valid(v) {
				return r, errors.New("field 1 (key) is not UTF-8")
			}
			r.Key = string(v)
		case 2:
			r.Value = append([]byte(nil), v...)
		case 3:
			if !utf8.Valid(v) {
				return r, errors.New("field 3 (topic) is not UTF-8")
			}
			r.Topic = string(v)
		}
	}
	return r, nil
}

// EncodeRecord writes a KafkaProducerRecord (tests, examples).
func EncodeRecord(r Record) []byte {
	var b []byte
	if r.Key != "" {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, r.Key)
	}
	if len(r.Value) > 0 {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, r.Value)
	}
	if r.Topic != "" {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendString(b, r.Topic)
	}
	return b
}

// checkTopic refuses a topic name Kafka would refuse (INVALID_TOPIC_EXCEPTION
// on every attempt): such a record could never leave the outbox.
func checkTopic(t string) error {
	if t == "" {
		return errors.New("the KafkaProducerRecord has no topic")
	}
	if err := kafkatopic.Check(t); err != nil {
		return fmt.Errorf("topic %s is not a valid Kafka topic name: %v", kafkatopic.Quote(t), err)
	}
	return nil
}

// parse checks an egress record's value and decodes it: the typename, the
// encoding, the topic and the size. maxBytes bounds key plus value (the
// producer refuses a larger record on every attempt).
func parse(arg *protocol.TypedValue, maxBytes int) (Record, error) {
	if arg.GetTypename() != RecordTypename {
		return Record{}, fmt.Errorf("a Kafka egress record must have typename %s, got %q", RecordTypename, arg.GetTypename())
	}
	rec, err := DecodeRecord(arg.GetValue())
	if err != nil {
		return Record{}, fmt.Errorf("the KafkaProducerRecord does not decode: %v", err)
	}
	if err := checkTopic(rec.Topic); err != nil {
		return Record{}, err
	}
	if n := len(rec.Key) + len(rec.Value); n > maxBytes {
		return Record{}, fmt.Errorf("the record's key and value are %d bytes, over the producer's limit of %d", n, maxBytes)
	}
	return rec, nil
}

// kafkaRecord is what the producer sends for rec: an empty key becomes a
// null key (as StateFun does); the value is never null (an empty value is
// an empty byte array, as StateFun sends it, not a tombstone).
func kafkaRecord(rec Record) *kgo.Record {
	kr := &kgo.Record{Topic: rec.Topic, Value: rec.Value}
	if kr.Value == nil {
		kr.Value = []byte{}
	}
	if rec.Key != "" {
		kr.Key = []byte(rec.Key)
	}
	return kr
}

// ToRecord checks an egress record's value as Route does (typename,
// encoding, topic, key plus value within maxBytes) and returns the Kafka
// record to produce for it, as the relay produces it. Cluster mode uses it
// to produce Kafka egress records in the node's own transaction.
func ToRecord(arg *protocol.TypedValue, maxBytes int) (*kgo.Record, error) {
	rec, err := parse(arg, maxBytes)
	if err != nil {
		return nil, err
	}
	return kafkaRecord(rec), nil
}
