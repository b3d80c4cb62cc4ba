package engine

import (
	"fmt"

	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// Kafka ingress dead letters in cluster mode (docs/explanation/cluster.md, "Edges"):
// the node that consumes an ingress partition may own no runtime
// partition, so a record it cannot turn into a message travels, in the
// transaction that commits its offset, as a command of the messages topic
// to the runtime partition that keeps it; that partition's owner stores it
// (key space 0x0F, as embedded mode does) in its own transaction, so it
// reaches the partition's changelog and moves with the partition, and its
// retention deletions go through that changelog like every other key the
// partition wrote.

// IngressDeadLetterPartition is the runtime partition, among n, that
// keeps the dead letters of Kafka partition kafkaPartition of any ingress
// topic in cluster mode: kafkaPartition mod n. One Kafka partition's dead
// letters thus stay in one runtime partition, in offset order.
func IngressDeadLetterPartition(kafkaPartition int32, n int) int {
	if kafkaPartition < 0 || n <= 0 {
		return 0
	}
	return int(kafkaPartition) % n
}

// IngressDeadLetterCommand is the messages-topic form of a Kafka ingress
// dead letter (cluster mode): the envelope whose IngressDeadLetter carries
// every field of d, its stored time included, so that it is stored as the
// sender made it however often it is encoded.
func IngressDeadLetterCommand(d *store.DeadLetter) *protocol.Envelope {
	return &protocol.Envelope{IngressDeadLetter: &protocol.IngressDeadLetter{
		At: d.At, Ingress: d.Ingress, Topic: d.Topic, Partition: d.Partition, Offset: d.Offset,
		Reason: d.Reason, Timestamp: d.Timestamp, KeyNull: d.KeyNull, Key: d.Key, Value: d.Value,
		ValueOmitted: d.ValueOmitted,
	}}
}

// IngressDeadLetterOf is the dead letter an IngressDeadLetterCommand
// carries.
func IngressDeadLetterOf(m *protocol.IngressDeadLetter) store.DeadLetter {
	return store.DeadLetter{
		At: m.GetAt(), Ingress: m.GetIngress(), Topic: m.GetTopic(), Partition: m.GetPartition(), Offset: m.GetOffset(),
		Reason: m.GetReason(), Timestamp: m.GetTimestamp(), KeyNull: m.GetKeyNull(), Key: m.GetKey(), Value: m.GetValue(),
		ValueOmitted: m.GetValueOmitted(),
	}
}

// IngressDeadLetterFault says why partition p (of n) must not store the
// ingress dead letter m: "no-target" when it names no ingress or topic, or a
// negative Kafka partition or offset; "wrong-partition" when another
// partition keeps it; "" when p may store it. The engine refuses such a
// record (checkIngressDeadLetter), and a cluster node skips it before it
// reaches the engine, with the reason as its metric label.
func IngressDeadLetterFault(m *protocol.IngressDeadLetter, p, n int) string {
	switch {
	case m.GetIngress() == "" || m.GetTopic() == "" || m.GetPartition() < 0 || m.GetOffset() < 0:
		return "no-target"
	case IngressDeadLetterPartition(m.GetPartition(), n) != p:
		return "wrong-partition"
	}
	return ""
}

// checkIngressDeadLetter refuses a dead-letter command that partition p
// must not store (IngressDeadLetterFault).
func checkIngressDeadLetter(m *protocol.IngressDeadLetter, p, n int, offset int64) error {
	switch IngressDeadLetterFault(m, p, n) {
	case "no-target":
		return fmt.Errorf("engine: arrivals of partition %d: the ingress dead letter at offset %d names ingress %q, topic %q, Kafka partition %d, offset %d: no place it came from", p, offset, m.GetIngress(), m.GetTopic(), m.GetPartition(), m.GetOffset())
	case "wrong-partition":
		return fmt.Errorf("engine: arrivals of partition %d: the ingress dead letter at offset %d is kept by partition %d", p, offset, IngressDeadLetterPartition(m.GetPartition(), n))
	}
	return nil
}
