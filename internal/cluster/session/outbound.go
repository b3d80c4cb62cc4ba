package session

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/statefun-go/statefun/internal/cluster/refusals"
	"github.com/statefun-go/statefun/internal/kafkatxn"
)

// producing is what the session produces in the open transaction while a
// cycle's requests encode: what it counts, and what Kafka refuses.
type producing struct {
	ctx     context.Context
	records int // produced: changelog, messages, egress
	bytes   int // their keys and values
	// from is the partition whose request (or changelog) is producing
	// now, -1 for none (ingress routing): a refused record is that
	// partition's.
	from   int32
	topics kafkatxn.Topics // the topics produced to

	mu      sync.Mutex
	err     error     // the first produce that failed
	refused []refused // the refused records, up to maxRefused
}

// refused is a record Kafka refused, and the partition that made it.
type refused struct {
	topic string
	size  int // key and value
	from  int32
	err   error
}

// maxRefused bounds the refused records a transaction keeps: each is a
// reason to abort it already, the first ones say which partitions and
// topics.
const maxRefused = 64

func (t *producing) promise(r *kgo.Record, from int32, err error) {
	if err == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err == nil {
		t.err = fmt.Errorf("produce to partition %d of %s: %w", r.Partition, r.Topic, err)
	}
	if len(t.refused) < maxRefused {
		t.refused = append(t.refused, refused{topic: r.Topic, size: len(r.Key) + len(r.Value), from: from, err: err})
	}
}

func (t *producing) produceErr() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// refusals returns the refused records, once the produces are flushed.
func (t *producing) refusals() []refused {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.refused
}

// errNoTxn is returned by the Outbound methods outside a request's Encode.
var errNoTxn = errors.New("cluster: session: Outbound used outside a request's Encode (no transaction is open)")

// Message produces a command (a message envelope, a state mutation, a
// repair command) for partition p to the messages topic, keyed by the
// target address, in the open transaction. The engine calls it during a
// request's Encode, on the session's goroutine, for everything its commit
// sends to another partition: the command reaches p's owner only if the
// transaction commits. It is the engine's Outbound.
func (s *Session) Message(p int, key, value []byte) error {
	t := s.txn.Load()
	if t == nil {
		return errNoTxn
	}
	if p < 0 || p >= int(s.p) {
		return fmt.Errorf("cluster: session: a message for partition %d, want 0..%d", p, s.p-1)
	}
	s.produce(t, &kgo.Record{Topic: s.msgs, Partition: int32(p), Key: key, Value: value})
	return nil
}

// Egress produces a Kafka egress record in the open transaction: a
// read_committed reader sees it once, when the transaction commits. r's
// Topic, Key, Value and Headers are used; it is partitioned by its key as
// Kafka's default partitioner does (the Java client's murmur2 hash). The
// engine calls it during a request's Encode, on the session's goroutine.
func (s *Session) Egress(r *kgo.Record) error {
	t := s.txn.Load()
	if t == nil {
		return errNoTxn
	}
	switch r.Topic {
	case "":
		return errors.New("cluster: session: an egress record without a topic")
	case s.msgs, s.clog, s.cfg.Cluster.MetaTopic():
		return fmt.Errorf("cluster: session: an egress record for %s, one of the application's internal topics", r.Topic)
	}
	s.produce(t, r)
	return nil
}

func (s *Session) produce(t *producing, r *kgo.Record) {
	t.records++
	t.bytes += len(r.Key) + len(r.Value)
	t.topics.Add(r.Topic)
	from := t.from
	s.gts.Produce(t.ctx, r, func(r *kgo.Record, err error) { t.promise(r, from, err) })
}

// partitioner places records on the application's internal topics at the
// partition they name (a changelog record in its writer's partition, a
// message in its address's partition, which is not Kafka's key hash), and
// records of other topics (Kafka egress) by Kafka's default rule.
type partitioner struct {
	internal map[string]bool
	manual   kgo.Partitioner
	keyed    kgo.Partitioner
}

func newPartitioner(internal ...string) kgo.Partitioner {
	p := partitioner{internal: map[string]bool{}, manual: kgo.ManualPartitioner(), keyed: kgo.UniformBytesPartitioner(64<<10, true, true, nil)}
	for _, t := range internal {
		p.internal[t] = true
	}
	return p
}

// ForTopic implements kgo.Partitioner.
func (p partitioner) ForTopic(topic string) kgo.TopicPartitioner {
	if p.internal[topic] {
		return p.manual.ForTopic(topic)
	}
	return p.keyed.ForTopic(topic)
}

// refusedRecords reports the records Kafka refused in a transaction that
// aborts for them (the partitions that made them are its culprits, whose
// rebuild backs off): a refusal that holds for every record like it is taught
// to the Refusals guard, so the egress's route refuses the next one where
// a function makes it. Each topic's refusal is logged at ERROR when it is
// new, and counted.
func (s *Session) refusedRecords(rs []refused) {
	logged := map[string]bool{}
	for _, r := range rs {
		kind := "other"
		switch whole, size := refusals.Deterministic(r.err); {
		case whole:
			kind = "topic"
		case size:
			kind = "size"
		}
		s.m.refused.WithLabelValues(kind).Inc()
		isNew := true
		if s.cfg.Refusals != nil && kind != "other" {
			_, isNew = s.cfg.Refusals.Refused(r.topic, r.size, r.err)
		}
		if !isNew || logged[r.topic] {
			continue
		}
		logged[r.topic] = true
		what := "the transaction is aborted; its partition is rebuilt after a back-off"
		if s.cfg.Refusals != nil && kind != "other" && r.topic != s.msgs && r.topic != s.clog {
			what = "the transaction is aborted; from now on a function's record like it is refused where it is made, as a protocol violation of its response (the poison policy sees it)"
		}
		s.log.Error("cluster: Kafka refused a record of the transaction: "+what,
			"topic", r.topic, "bytes", r.size, "partition", r.from, "err", r.err)
	}
}
