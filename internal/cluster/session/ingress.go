package session

import (
	"context"
	"fmt"
	"maps"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ingressOffsets is the group's AdjustFetchOffsetsFn: an ingress partition
// the application's group has a committed offset for resumes there (the
// offset committed in the transaction that produced the messages of the
// records before it); one without starts where its ingress's startup
// position says. Partitions of the messages topic are left as they are.
func (s *Session) ingressOffsets(ctx context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	select {
	case <-s.built:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	fresh := map[string]map[int32]kgo.Offset{}
	for topic, ps := range offsets {
		if !s.ingress[topic] {
			continue
		}
		for p, off := range ps {
			if off.EpochOffset().Offset >= 0 {
				continue // committed
			}
			if fresh[topic] == nil {
				fresh[topic] = map[int32]kgo.Offset{}
			}
			fresh[topic][p] = off
		}
	}
	if len(fresh) == 0 {
		return offsets, nil
	}
	start, err := s.cfg.Ingress.Start(ctx, kadm.NewClient(s.gts.Client()), fresh)
	if err != nil {
		s.log.Warn("cluster: resolving where ingress partitions start failed; the group session retries", "err", err)
		return nil, err
	}
	s.mu.Lock()
	if s.starts == nil {
		s.starts = map[string]map[int32]int64{}
	}
	for topic, ps := range start {
		for p, o := range ps {
			offsets[topic][p] = kgo.NewOffset().At(o).WithEpoch(-1)
			if s.starts[topic] == nil {
				s.starts[topic] = map[int32]int64{}
			}
			s.starts[topic][p] = o
			s.log.Info("cluster: ingress partition starts at its startup position", "topic", topic, "partition", p, "offset", o)
		}
	}
	s.mu.Unlock()
	s.signal()
	return offsets, nil
}

// An ingress partition placed at its startup position has no committed
// offset until a record of it commits; were it moved before, its next
// owner would resolve the position again ("latest" later, skipping what
// arrived meanwhile). So the next transaction commits the placed offset
// with the others (a partition whose records it commits anyway keeps
// those), as embedded mode stores a resolved startup position at once.

func (s *Session) hasStarts() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.starts) > 0
}

// pendingStarts returns a copy of the placed offsets not committed yet.
func (s *Session) pendingStarts() map[string]map[int32]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]map[int32]int64, len(s.starts))
	for t, ps := range s.starts {
		out[t] = maps.Clone(ps)
	}
	return out
}

// withStarts returns ctx for End carrying a hook that adds the pending
// placed offsets to the transaction's offset commit, for partitions it
// does not commit already, and the record of which partitions the commit
// named (to forget them once it committed).
func withStarts(ctx context.Context, starts map[string]map[int32]int64) (context.Context, map[string]map[int32]bool) {
	named := map[string]map[int32]bool{}
	if len(starts) == 0 {
		return ctx, named
	}
	return kgo.PreTxnCommitFnContext(ctx, func(req *kmsg.TxnOffsetCommitRequest) error {
		clear(named)
		have := map[string]int{}
		for i, t := range req.Topics {
			have[t.Topic] = i
			for _, p := range t.Partitions {
				if named[t.Topic] == nil {
					named[t.Topic] = map[int32]bool{}
				}
				named[t.Topic][p.Partition] = true
			}
		}
		for topic, ps := range starts {
			for p, o := range ps {
				if named[topic][p] {
					continue
				}
				i, ok := have[topic]
				if !ok {
					rt := kmsg.NewTxnOffsetCommitRequestTopic()
					rt.Topic = topic
					req.Topics = append(req.Topics, rt)
					i = len(req.Topics) - 1
					have[topic] = i
				}
				rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
				rp.Partition = p
				rp.Offset = o
				rp.LeaderEpoch = -1
				rp.Metadata = kmsg.StringPtr(req.MemberID)
				req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
				if named[topic] == nil {
					named[topic] = map[int32]bool{}
				}
				named[topic][p] = true
			}
		}
		return nil
	}), named
}

// startsCommitted forgets the placed offsets a committed transaction's
// offset commit named.
func (s *Session) startsCommitted(named map[string]map[int32]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for topic, ps := range named {
		for p := range ps {
			delete(s.starts[topic], p)
		}
		if len(s.starts[topic]) == 0 {
			delete(s.starts, topic)
		}
	}
}

// forgetStarts drops the placed offsets of ingress partitions taken away:
// their new owner places them itself, and committing one here would move
// its offset.
func (s *Session) forgetStarts(m map[string][]int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for topic, ps := range m {
		for _, p := range ps {
			delete(s.starts[topic], p)
		}
		if len(s.starts[topic]) == 0 {
			delete(s.starts, topic)
		}
	}
}

// routeIngress produces the messages the polled ingress records become
// (a bad one's dead letter among them), in the open transaction, and
// returns the reason each bad one was not delivered (empty for one
// delivered). An error (a record Route cannot encode) aborts the
// transaction.
func (s *Session) routeIngress(t *producing, recs []*kgo.Record) ([]string, error) {
	bad := make([]string, len(recs))
	for i, r := range recs {
		msgs, reason, err := s.cfg.Ingress.Route(r)
		if err != nil {
			return nil, fmt.Errorf("routing %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)
		}
		for _, m := range msgs {
			if m.Partition < 0 || m.Partition >= int(s.p) {
				return nil, fmt.Errorf("routing %s/%d@%d: a message for partition %d, want 0..%d", r.Topic, r.Partition, r.Offset, m.Partition, s.p-1)
			}
			s.produce(t, &kgo.Record{Topic: s.msgs, Partition: int32(m.Partition), Key: m.Key, Value: m.Value})
		}
		bad[i] = reason
	}
	return bad, nil
}

// pauseIfFull stops fetching partition p of the messages topic while the
// engine's partition is full; resumeDrained resumes it once it is not.
// Records already handed to the engine stay handed: the pause only keeps
// more from being polled.
func (s *Session) pauseIfFull(p int32) {
	if s.eng.Full(int(p)) && s.cyc.Filled(p) {
		s.m.full.Inc()
		s.gts.Client().PauseFetchPartitions(map[string][]int32{s.msgs: {p}})
	}
}

// resumeDrained resumes fetching of the partitions paused because they
// were full and now are not. A partition that is not serving (restoring,
// rebuilt) stays paused: its restore resumes it.
func (s *Session) resumeDrained() {
	var ps []int32
	for _, p := range s.cyc.Paused() {
		if s.eng.Full(int(p)) {
			continue
		}
		s.m.full.Dec()
		if s.cyc.Drained(p) {
			ps = append(ps, p)
		}
	}
	if len(ps) > 0 {
		s.gts.Client().ResumeFetchPartitions(map[string][]int32{s.msgs: ps})
	}
}
