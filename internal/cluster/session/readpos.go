package session

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/statefun-go/statefun/internal/cluster/cycle"
	"github.com/statefun-go/statefun/internal/store"
)

// A partition's read position in the messages topic is part of its state
// (docs/explanation/cluster.md, "Read positions"): the engine writes the offset of the
// last record it applied into the partition's batch, so the changelog
// carries it in the transaction that carries the record's effects. The
// group's committed offsets are only a hint (for lag tools): a restored
// partition resumes from its own position, and the engine skips a record
// at or before it, so offsets moved back, reset or expired never apply a
// record twice, and offsets moved forward never skip one.

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
func (s *Session) storedResume(ctx context.Context, p int32) (cycle.Resume, error) {
	next, ok, err := s.storedNext(p)
	if err != nil {
		return cycle.Resume{}, err
	}
	if !ok {
		return cycle.Resume{At: -1}, nil
	}
	adm := kadm.NewClient(s.gts.Client())
	starts, err := adm.ListStartOffsets(ctx, s.msgs)
	if err != nil {
		return cycle.Resume{}, fmt.Errorf("listing the start offsets of %s: %w", s.msgs, err)
	}
	ends, err := adm.ListEndOffsets(ctx, s.msgs)
	if err != nil {
		return cycle.Resume{}, fmt.Errorf("listing the end offsets of %s: %w", s.msgs, err)
	}
	st, sok := starts.Lookup(s.msgs, p)
	en, eok := ends.Lookup(s.msgs, p)
	switch {
	case !sok || !eok:
		return cycle.Resume{}, fmt.Errorf("no offsets listed for partition %d of %s", p, s.msgs)
	case st.Err != nil:
		return cycle.Resume{}, fmt.Errorf("the start offset of partition %d of %s: %w", p, s.msgs, st.Err)
	case en.Err != nil:
		return cycle.Resume{}, fmt.Errorf("the end offset of partition %d of %s: %w", p, s.msgs, en.Err)
	}
	return cycle.ResumeAt(p, next, true, st.Offset, en.Offset), nil
}

// applyResume places partition p's fetching where r says, once the engine
// took the partition: a seek to the stored position, or the engine told
// to forget it. A seek made while the group still fetches p's committed
// offset wins over that offset (the client records it against the fetch).
func (s *Session) applyResume(p int32, r cycle.Resume) {
	if r.Fault != "" {
		s.m.posFaults.WithLabelValues(r.Kind).Inc()
		s.log.Error("cluster: "+r.Fault, "partition", p)
	}
	if r.Forget {
		s.eng.ForgetReadPosition(int(p))
	}
	if r.At >= 0 {
		s.gts.Client().SetOffsets(map[string]map[int32]kgo.EpochOffset{s.msgs: {p: {Epoch: -1, Offset: r.At}}})
	}
}
