package session

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/statefun-go/statefun/internal/store"
)

// A partition's read position in the messages topic is part of its state
// (docs/cluster.md, "Read positions"): the engine writes the offset of the
// last record it applied into the partition's batch, so the changelog
// carries it in the transaction that carries the record's effects. The
// group's committed offsets are only a hint (for lag tools): a restored
// partition resumes from its own position, and the engine skips a record
// at or before it, so offsets moved back, reset or expired never apply a
// record twice, and offsets moved forward never skip one.

// resume is where fetching of a restored partition's messages resumes.
type resume struct {
	// at is the offset to fetch from; -1 leaves it to the group's offset
	// (a partition that never applied a record, or whose position was
	// forgotten).
	at int64
	// forget is set when the stored position cannot be trusted: the
	// engine must drop it, or it would skip new records as applied.
	forget bool
	// fault says what is wrong, for an ERROR line; kind is its label in
	// statefun_cluster_read_position_faults_total.
	fault, kind string
}

// resumeAt decides where partition p of the messages topic resumes,
// given the offset after its stored read position (has false: it has
// none) and the partition's start (the first offset Kafka keeps) and end
// (the next offset to be written).
func resumeAt(p int32, next int64, has bool, start, end int64) resume {
	if !has {
		return resume{at: -1}
	}
	applied := next - 1
	switch {
	case next > end:
		// Kafka no longer has offsets the partition applied: the topic
		// was deleted and created again, or an unclean leader election
		// truncated it. Records at offsets below the position now are
		// new ones; skipping them would lose them.
		return resume{at: -1, forget: true, kind: "past-end",
			fault: fmt.Sprintf("partition %d applied the messages topic through offset %d, but the topic's partition ends at %d: it was recreated or truncated (an unclean leader election?); records from here on are taken as new, from the group's offset or the start", p, applied, end)}
	case next < start:
		// Retention deleted records this partition never applied.
		return resume{at: start, kind: "below-start",
			fault: fmt.Sprintf("partition %d applied the messages topic through offset %d, but the topic's partition now starts at %d: %d records were deleted by retention before they were applied and are lost (was every node down for longer than --cluster-messages-retention?); resuming at %d", p, applied, start, start-next, start)}
	}
	return resume{at: next}
}

// storedNext returns the offset after partition p's stored read position
// in the messages topic, if it has one.
func (s *Session) storedNext(p int32) (int64, bool, error) {
	rps, err := s.cfg.DB.ReadPositions(int(p))
	if err != nil {
		return 0, false, err
	}
	for _, rp := range rps {
		if rp.Topic == store.MessagesTopic && rp.Partition == p {
			return rp.Offset + 1, true, nil
		}
	}
	return 0, false, nil
}

// reseek puts the fetch position of every serving partition back after
// its own read position where the group's committed offset is elsewhere.
// Call it after an End that did not commit (an abort, or
// rearmRevocations): the client then resets every partition to the
// group's committed offset, which, from a restore's seek until the
// partition's first commit (which commits the seek), is not the
// partition's position. Back would only fetch records to skip; forward
// would skip records never applied.
func (s *Session) reseek() {
	committed := s.gts.Client().CommittedOffsets()[s.msgs]
	set := map[int32]kgo.EpochOffset{}
	for p, pt := range s.parts {
		if pt.log == nil {
			continue // restoring: its restore seeks
		}
		next, ok, err := s.storedNext(p)
		if err != nil {
			s.log.Warn("cluster: reading a partition's read position to seek back to it", "partition", p, "err", err)
			continue
		}
		if c, has := committed[p]; !ok || has && c.Offset == next {
			continue
		}
		set[p] = kgo.EpochOffset{Epoch: -1, Offset: next}
	}
	if len(set) > 0 {
		s.gts.Client().SetOffsets(map[string]map[int32]kgo.EpochOffset{s.msgs: set})
	}
}

// storedResume reads partition p's stored read position in the messages
// topic (restored from its changelog) and the topic partition's offsets,
// and decides where its fetching resumes.
func (s *Session) storedResume(ctx context.Context, p int32) (resume, error) {
	next, ok, err := s.storedNext(p)
	if err != nil {
		return resume{}, err
	}
	if !ok {
		return resume{at: -1}, nil
	}
	adm := kadm.NewClient(s.gts.Client())
	starts, err := adm.ListStartOffsets(ctx, s.msgs)
	if err != nil {
		return resume{}, fmt.Errorf("listing the start offsets of %s: %w", s.msgs, err)
	}
	ends, err := adm.ListEndOffsets(ctx, s.msgs)
	if err != nil {
		return resume{}, fmt.Errorf("listing the end offsets of %s: %w", s.msgs, err)
	}
	st, sok := starts.Lookup(s.msgs, p)
	en, eok := ends.Lookup(s.msgs, p)
	switch {
	case !sok || !eok:
		return resume{}, fmt.Errorf("no offsets listed for partition %d of %s", p, s.msgs)
	case st.Err != nil:
		return resume{}, fmt.Errorf("the start offset of partition %d of %s: %w", p, s.msgs, st.Err)
	case en.Err != nil:
		return resume{}, fmt.Errorf("the end offset of partition %d of %s: %w", p, s.msgs, en.Err)
	}
	return resumeAt(p, next, true, st.Offset, en.Offset), nil
}

// applyResume places partition p's fetching where r says, once the engine
// took the partition: a seek to the stored position, or the engine told
// to forget it. A seek made while the group still fetches p's committed
// offset wins over that offset (the client records it against the fetch).
func (s *Session) applyResume(p int32, r resume) {
	if r.fault != "" {
		s.m.posFaults.WithLabelValues(r.kind).Inc()
		s.log.Error("cluster: "+r.fault, "partition", p)
	}
	if r.forget {
		s.eng.ForgetReadPosition(int(p))
	}
	if r.at >= 0 {
		s.gts.Client().SetOffsets(map[string]map[int32]kgo.EpochOffset{s.msgs: {p: {Epoch: -1, Offset: r.at}}})
	}
}
