package engine

import (
	"time"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
	"google.golang.org/protobuf/proto"
)

// inboxScan is one partition's inbox as the store holds it, in arrival
// order: the order the messages were delivered before.
type inboxScan struct {
	keys []store.InboxKey
	envs []*protocol.Envelope
}

func (s *inboxScan) add(k store.InboxKey, env *protocol.Envelope) {
	s.keys = append(s.keys, k)
	s.envs = append(s.envs, env)
}

// restore rebuilds every partition core from the store: its meta, its
// timers, and the messages still waiting in its inbox, which re-run.
func (e *Engine) restore() error {
	n := e.n
	inboxes := make([]inboxScan, n)
	outSeq := make([]uint64, n)
	var maxIngress uint64
	for p := 0; p < n; p++ {
		err := e.db.ScanInbox(p, func(k store.InboxKey, env *protocol.Envelope) error {
			inboxes[p].add(k, env)
			switch {
			case k.Source == store.SourceIngress:
				maxIngress = max(maxIngress, k.Seq)
			case int(k.Source) < n:
				// A partition's messages in any inbox: its next one must
				// not take the key of one still waiting.
				outSeq[k.Source] = max(outSeq[k.Source], k.Seq+1)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	e.ingressSeq.Store(maxIngress)
	seq, err := e.db.MaxEgressSeq()
	if err != nil {
		return err
	}
	e.egressSeq = seq
	now := e.opts.Now().UnixMilli()
	pauses, err := loadPauses(e.db, n, e.opts.Owned)
	if err != nil {
		return err
	}
	pending := 0
	for p := 0; p < n; p++ {
		pt, err := e.buildPart(p, &inboxes[p], outSeq[p], pauses[p], e.specs.initial, now)
		if err != nil {
			return err
		}
		pending += len(inboxes[p].keys)
		e.parts = append(e.parts, pt)
	}
	if pending > 0 {
		e.log.Info("restored pending messages", "messages", pending, "partitions", n)
	}
	return nil
}

// buildPart builds partition p's core from the store's meta and timers of
// p, the pauses in force for it, and its inbox, whose messages it steps
// in arrival order (they re-run); outSeq is the first sequence number its
// own messages may take. specs are the durable specs the core reads.
func (e *Engine) buildPart(p int, in *inboxScan, outSeq uint64, pauses []partition.PauseWrite,
	specs map[address.TypeName][]partition.Spec, now int64) (*part, error) {
	meta, err := e.db.Meta(p)
	if err != nil {
		return nil, err
	}
	rs := partition.Restore{CommitID: meta.CommitID, VersionSeq: meta.VersionSeq, OutSeq: outSeq, Pauses: pauses}
	e.positions.set(p, meta.CommitID)
	err = e.db.ScanTimers(p, func(k store.TimerKey, env *protocol.Envelope) error {
		rs.Timers = append(rs.Timers, partition.Timer{Key: partition.TimerKey{Partition: k.Partition, Due: k.Due, ID: k.ID}, Env: env})
		return nil
	})
	if err != nil {
		return nil, err
	}
	core := partition.New(partition.Config{
		ID:            p,
		Partitions:    e.n,
		MaxBatch:      e.opts.MaxBatch,
		MaxBatchBytes: e.opts.MaxBatchBytes,
		Egress:        e.opts.Egress,
		Routable:      e.opts.Routable,
		RetryBase:     durOr(e.opts.RetryBase, 50*time.Millisecond).Milliseconds(),
		RetryMax:      durOr(e.opts.RetryMax, 10*time.Second).Milliseconds(),

		PauseAfter:       e.opts.PauseAfter,
		PauseOnViolation: e.opts.PauseOnViolation,
		OwnTypePauses:    e.opts.Owned,
		MaxRecordBytes:   e.opts.MaxRecordBytes,
	}, storeReader{db: e.db, specs: specs}, rs)
	pt := newPart(p, core, e, e.opts.Now)
	for i, k := range in.keys {
		pt.arr.restored(k)
		ev := partition.MessageArrived{Key: partition.InboxKey{Partition: k.Partition, Source: k.Source, Seq: k.Seq}, Env: in.envs[i]}
		if m := in.envs[i].GetMutation(); m != nil {
			ev.Mutation = mutationFromProto(m)
		}
		if err := core.Step(now, ev); err != nil {
			return nil, err
		}
		pt.hold(ev.Key, proto.Size(in.envs[i]))
	}
	return pt, nil
}
