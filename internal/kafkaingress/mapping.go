package kafkaingress

import (
	"context"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// Mapping is how one Kafka ingress turns records into messages: its routes,
// the checks that make a record bad, and where a partition without a
// position starts. The embedded consumer and a cluster-mode node
// (docs/explanation/cluster.md, "Edges") share it, so a record means the same message
// in both modes.
type Mapping struct {
	cfg    Config
	routes map[string]Route
	badLog *limiter
}

// NewMapping checks cfg as New does (ErrConfig) and returns its mapping.
func NewMapping(cfg Config) (*Mapping, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	return newMapping(cfg), nil
}

func newMapping(cfg Config) *Mapping {
	m := &Mapping{cfg: cfg, routes: map[string]Route{}, badLog: newLimiter(cfg.Now, 10*time.Second)}
	for _, r := range cfg.Routes {
		m.routes[r.Topic] = r
	}
	return m
}

// ID is the ingress's id.
func (m *Mapping) ID() string { return m.cfg.ID }

// Topics are the ingress's topics, in the module's order.
func (m *Mapping) Topics() []string {
	ts := make([]string, 0, len(m.cfg.Routes))
	for _, r := range m.cfg.Routes {
		ts = append(ts, r.Topic)
	}
	return ts
}

// Messages returns the messages record r becomes — one per target of its
// topic's route: the key, as UTF-8, is the function id; the value, as is,
// the argument typed valueType (a null value is delivered empty) — or, for
// a record that cannot become a message, the reason (Reason*).
func (m *Mapping) Messages(r *kgo.Record) ([]*protocol.Envelope, string) {
	route, ok := m.routes[r.Topic]
	switch {
	case !ok:
		return nil, ReasonNoRoute
	case r.Key == nil:
		return nil, ReasonNullKey
	case len(r.Key) == 0:
		return nil, ReasonEmptyKey
	case !utf8.Valid(r.Key):
		return nil, ReasonInvalidKey
	case address.IsDotSegment(string(r.Key)):
		// An id no URL can carry: it could never be read or repaired.
		return nil, ReasonDotKey
	case len(r.Key) > address.MaxSegmentBytes:
		return nil, ReasonKeyTooLong
	case m.cfg.MaxValueBytes > 0 && len(r.Value) > m.cfg.MaxValueBytes:
		return nil, ReasonValueTooLarge
	}
	id := string(r.Key)
	value := r.Value
	if value == nil {
		value = []byte{} // a tombstone is delivered as an empty value
	}
	msgs := make([]*protocol.Envelope, 0, len(route.Targets))
	for _, t := range route.Targets {
		msgs = append(msgs, &protocol.Envelope{
			Target:   &protocol.Address{Namespace: t.Namespace, Type: t.Name, Id: id},
			Argument: &protocol.TypedValue{Typename: route.ValueType, HasValue: true, Value: value},
		})
	}
	return msgs, ""
}

// DeadLetter is what is kept of a bad record r, for reason: the same in
// embedded mode (stored beside the position past it) and in cluster mode
// (sent to the runtime partition that keeps it). At is left to the writer.
func (m *Mapping) DeadLetter(r *kgo.Record, reason string) store.DeadLetter {
	return store.DeadLetter{Ingress: m.cfg.ID, Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
		Reason: reason, Timestamp: r.Timestamp.UnixMilli(), KeyNull: r.Key == nil, Key: r.Key, Value: r.Value}
}

// Bad counts a bad record in statefun_kafka_ingress_bad_records_total and
// logs it (at most one line per topic and reason every 10 s; the line says
// how many were suppressed), saying what became of it.
func (m *Mapping) Bad(r *kgo.Record, reason, what string) {
	m.cfg.Metrics.bad.WithLabelValues(m.cfg.ID, r.Topic, reason).Inc()
	if n, ok := m.badLog.allow(r.Topic + "\x00" + reason); ok {
		m.cfg.Logger.Warn("kafka record "+what, "ingress", m.cfg.ID, "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "reason", reason, "suppressed", n)
	}
}

// Delivered counts n records of topic delivered as messages
// (statefun_kafka_ingress_records_total).
func (m *Mapping) Delivered(topic string, n int) {
	m.cfg.Metrics.records.WithLabelValues(m.cfg.ID, topic).Add(float64(n))
}

// Start is where the listed partitions, which have no stored position,
// start: by the startup position (startupPosition), the group's committed
// offset in offsets standing for "group-offsets". It returns each
// partition's offset, and which of them were resolved by listing the log
// (their offset would move if resolved again later: the caller stores them).
func (m *Mapping) Start(ctx context.Context, adm *kadm.Client, offsets map[string]map[int32]kgo.Offset) (start map[string]map[int32]int64, listed map[string]map[int32]bool, err error) {
	start, listed = map[string]map[int32]int64{}, map[string]map[int32]bool{}
	set := func(topic string, p int32, o int64) {
		if start[topic] == nil {
			start[topic] = map[int32]int64{}
		}
		start[topic][p] = o
	}
	type need struct {
		topic string
		p     int32
		how   StartupKind
	}
	var resolve []need
	for topic, ps := range offsets {
		for p, off := range ps {
			kind := m.cfg.Startup.Kind
			if kind == StartSpecificOffsets {
				if o, ok := m.cfg.Startup.SpecificOffsets[topic][p]; ok {
					set(topic, p, o)
					continue
				}
				kind = StartGroupOffsets
			}
			if kind == StartGroupOffsets {
				if o := off.EpochOffset().Offset; o >= 0 {
					set(topic, p, o) // the group's committed offset
					continue
				}
				kind = StartupKind(m.cfg.AutoOffsetReset)
			}
			resolve = append(resolve, need{topic, p, kind})
		}
	}
	if len(resolve) == 0 {
		return start, listed, nil
	}
	topics := make([]string, 0, len(offsets))
	for t := range offsets {
		topics = append(topics, t)
	}
	lists := map[StartupKind]kadm.ListedOffsets{}
	for _, n := range resolve {
		if _, ok := lists[n.how]; ok {
			continue
		}
		var l kadm.ListedOffsets
		switch n.how {
		case StartEarliest:
			l, err = adm.ListStartOffsets(ctx, topics...)
		case StartLatest:
			l, err = adm.ListCommittedOffsets(ctx, topics...) // read_committed: the last stable offset
		case StartDate:
			l, err = adm.ListOffsetsAfterMilli(ctx, m.cfg.Startup.Date.UnixMilli(), topics...)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("kafkaingress: ingress %s: resolving the %s startup position: %w", m.cfg.ID, n.how, err)
		}
		lists[n.how] = l
	}
	for _, n := range resolve {
		o, ok := lists[n.how].Lookup(n.topic, n.p)
		if !ok || o.Err != nil || o.Offset < 0 {
			return nil, nil, fmt.Errorf("kafkaingress: ingress %s: resolving the %s startup position of %s/%d: %v", m.cfg.ID, n.how, n.topic, n.p, o.Err)
		}
		set(n.topic, n.p, o.Offset)
		if listed[n.topic] == nil {
			listed[n.topic] = map[int32]bool{}
		}
		listed[n.topic][n.p] = true
	}
	return start, listed, nil
}
