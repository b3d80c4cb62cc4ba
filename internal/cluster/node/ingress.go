package node

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/statefun-go/statefun/internal/cluster/session"
	"github.com/statefun-go/statefun/internal/engine"
	"github.com/statefun-go/statefun/internal/kafkaingress"
	"github.com/statefun-go/statefun/internal/protocol"
)

// ingresses is the session's Ingress over the module's Kafka ingresses:
// each record is mapped to messages exactly as the embedded consumer maps
// it (kafkaingress.Mapping), and each message becomes a record of the
// messages topic as the playground ingress writes one.
type ingresses struct {
	n       *Node
	byTopic map[string]*kafkaingress.Mapping
	topics  []string
}

func newIngresses(n *Node, ms []*kafkaingress.Mapping) (*ingresses, error) {
	in := &ingresses{n: n, byTopic: map[string]*kafkaingress.Mapping{}}
	for _, m := range ms {
		for _, t := range m.Topics() {
			if other := in.byTopic[t]; other != nil {
				return nil, fmt.Errorf("cluster: topic %s is consumed by the Kafka ingresses %s and %s; in cluster mode the application's group consumes each topic once, so give it to one ingress", t, other.ID(), m.ID())
			}
			in.byTopic[t] = m
			in.topics = append(in.topics, t)
		}
	}
	return in, nil
}

func (in *ingresses) Topics() []string { return in.topics }

// Start places partitions without a committed offset at their ingress's
// startup position.
func (in *ingresses) Start(ctx context.Context, adm *kadm.Client, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]int64, error) {
	per := map[*kafkaingress.Mapping]map[string]map[int32]kgo.Offset{}
	for topic, ps := range offsets {
		m := in.byTopic[topic]
		if m == nil {
			return nil, fmt.Errorf("cluster: partitions of %s assigned, which no Kafka ingress consumes", topic)
		}
		if per[m] == nil {
			per[m] = map[string]map[int32]kgo.Offset{}
		}
		per[m][topic] = ps
	}
	out := map[string]map[int32]int64{}
	for m, offs := range per {
		start, _, err := m.Start(ctx, adm, offs)
		if err != nil {
			return nil, err
		}
		for t, ps := range start {
			out[t] = ps
		}
	}
	return out, nil
}

// Route maps r to its messages-topic records. A bad record becomes one
// record too: its dead letter (engine.IngressDeadLetterCommand), sent to
// the runtime partition that keeps it, whose owner stores it
// (docs/explanation/cluster.md, "Edges"). Its value is left out (ValueOmitted) when
// the command would not fit in a record of the messages topic, which
// would otherwise abort every transaction routing it.
func (in *ingresses) Route(r *kgo.Record) ([]session.Message, string, error) {
	m := in.byTopic[r.Topic]
	if m == nil {
		// Guarded: the session consumes the ingresses' topics alone.
		return nil, kafkaingress.ReasonNoRoute, nil
	}
	envs, reason := m.Messages(r)
	if reason != "" {
		d := m.DeadLetter(r, reason)
		d.At = in.n.now().UnixMilli()
		rec, err := in.n.record(engine.IngressDeadLetterCommand(&d))
		if err != nil {
			return nil, "", err
		}
		if len(rec.Key)+len(rec.Value)+deadLetterSlack > in.n.maxRecord {
			d.Value, d.ValueOmitted = nil, true
			if rec, err = in.n.record(engine.IngressDeadLetterCommand(&d)); err != nil {
				return nil, "", err
			}
		}
		return []session.Message{{Partition: int(rec.Partition), Key: rec.Key, Value: rec.Value}}, reason, nil
	}
	out := make([]session.Message, 0, len(envs))
	for i, env := range envs {
		// Its owner applies each origin once, however often the record
		// is routed (the group's offsets of the topic moved back).
		env.Origin = &protocol.IngressOrigin{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Index: uint32(i)}
		rec, err := in.n.record(env)
		if err != nil {
			return nil, "", err
		}
		out = append(out, session.Message{Partition: int(rec.Partition), Key: rec.Key, Value: rec.Value})
	}
	return out, "", nil
}

// deadLetterSlack is the room a dead-letter command leaves in a record
// beyond its own key and value: its owner's changelog record of it has a
// longer key (the store's dead-letter key) and the command's framing.
const deadLetterSlack = 1024

// Committed counts a record of a committed transaction: delivered, or
// bad, in which case its dead letter went out in the same transaction.
func (in *ingresses) Committed(r *kgo.Record, bad string) {
	m := in.byTopic[r.Topic]
	if m == nil {
		return
	}
	if bad != "" {
		m.Bad(r, bad, fmt.Sprintf("kept as a dead letter by runtime partition %d", engine.IngressDeadLetterPartition(r.Partition, in.n.p)))
		return
	}
	m.Delivered(r.Topic, 1)
}
