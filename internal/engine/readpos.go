package engine

import (
	"slices"

	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// Read positions (cluster mode): how far a partition has applied each Kafka
// topic partition whose records it applies. They are the partition's own
// data, written in the batch of the records they cover and so carried by
// its changelog in the same transaction, which is what makes each record
// apply once whatever the consumer group's offsets say: offsets moved
// back by an operator, reset, or expired while every node was down bring
// records the partition has applied already, and those are skipped here.
// (Flink keeps its source positions inside its checkpoints for the same
// reason.) docs/explanation/cluster.md, "Read positions".

// readKey names a Kafka topic partition among a part's read positions.
type readKey struct {
	topic     string // store.MessagesTopic for the messages topic
	partition int32
}

// loadReadPositions reads p's stored read positions into the part.
func (pt *part) loadReadPositions(db *store.DB) error {
	rps, err := db.ReadPositions(pt.id)
	if err != nil {
		return err
	}
	for _, rp := range rps {
		pt.readPos[readKey{rp.Topic, rp.Partition}] = rp
	}
	return nil
}

// readMove is a read position an Encode moved, with what it was before,
// so that a failed Encode can put it back.
type readMove struct {
	key  readKey
	prev store.ReadPosition
	had  bool
}

// skipping collects what one request of arrivals skipped as applied
// before, for its metric and log line once the request is durable.
type skipping struct {
	messages, ingress int
	first, last       int64 // offsets of the messages topic skipped
	stored            int64 // the position they were at or before
}

func (s *skipping) message(offset, stored int64) {
	if s.messages == 0 {
		s.first = offset
	}
	s.messages++
	s.last = offset
	s.stored = stored
}

// advance moves the part's position of k to (offset, index) if that is
// past it, and records in *moves what k was before its first move by this
// request (writeMoves writes the positions once per key).
func (pt *part) advance(k readKey, offset int64, index uint32, moves *[]readMove) {
	prev, had := pt.readPos[k]
	if had && prev.Before(offset, index) {
		return
	}
	if !slices.ContainsFunc(*moves, func(m readMove) bool { return m.key == k }) {
		*moves = append(*moves, readMove{key: k, prev: prev, had: had})
	}
	pt.readPos[k] = store.ReadPosition{Topic: k.topic, Partition: k.partition, Offset: offset, Index: index}
}

// writeMoves writes into b the positions a request moved, each once.
func (pt *part) writeMoves(b *store.Batch, moves []readMove) {
	for _, m := range moves {
		b.PutReadPosition(pt.id, pt.readPos[m.key])
	}
}

// routedBefore reports whether env is a message (or dead letter) of a
// Kafka ingress record this partition applied before: the record was
// routed again because the group's offsets of its topic were behind. If
// not, the partition's position in the record's topic partition moves to
// it (Encode writes it once, writeMoves).
func (r *arrivalsReq) routedBefore(env *protocol.Envelope) bool {
	var k readKey
	var offset int64
	var index uint32
	if o := env.GetOrigin(); o != nil {
		k, offset, index = readKey{o.GetTopic(), o.GetPartition()}, o.GetOffset(), o.GetIndex()
	} else if dl := env.GetIngressDeadLetter(); dl != nil {
		k, offset = readKey{dl.GetTopic(), dl.GetPartition()}, dl.GetOffset()
	} else {
		return false
	}
	if k.topic == store.MessagesTopic || k.partition < 0 || offset < 0 {
		return false // not written by a statefun node; delivered as it is
	}
	if pos, ok := r.p.readPos[k]; ok && pos.Before(offset, index) {
		return true
	}
	r.p.advance(k, offset, index, &r.moves)
	return false
}

// undoMoves puts the positions an Encode moved back, newest first.
func (pt *part) undoMoves(moves []readMove) {
	for i := len(moves) - 1; i >= 0; i-- {
		m := moves[i]
		if m.had {
			pt.readPos[m.key] = m.prev
		} else {
			delete(pt.readPos, m.key)
		}
	}
}

// reportSkipped counts what a durable request of arrivals skipped, and
// says it in the log once per assignment of the partition.
func (e *Engine) reportSkipped(pt *part, s skipping) {
	if s.messages > 0 {
		e.m.replayed.WithLabelValues("messages").Add(float64(s.messages))
	}
	if s.ingress > 0 {
		e.m.replayed.WithLabelValues("ingress").Add(float64(s.ingress))
	}
	if s.messages+s.ingress == 0 || pt.replayLogged {
		return
	}
	pt.replayLogged = true
	e.log.Warn("cluster: skipped records this partition had applied before: the consumer group's offsets were behind the partition's own read position (moved back, reset, or expired); each record still applies once. Later skips are counted in statefun_cluster_replayed_records_total",
		"partition", pt.id, "messages_skipped", s.messages, "first_offset", s.first, "last_offset", s.last,
		"applied_through", s.stored, "ingress_messages_skipped", s.ingress)
}

// ForgetReadPosition drops partition p's position in the messages topic
// (cluster mode): the session found it past the topic's end (the topic
// was recreated, or lost records), so records now at offsets below it are
// new, not applied before. The next arrivals of p write a new position.
// Call it on the durability goroutine, after Assign and before p's first
// arrivals.
func (e *Engine) ForgetReadPosition(p int) {
	if pt := e.part(p); pt != nil {
		delete(pt.readPos, readKey{store.MessagesTopic, int32(p)})
	}
}
