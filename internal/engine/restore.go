package engine

import (
	"time"

	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
	"google.golang.org/protobuf/proto"
)

// restore rebuilds every partition core from the store: its meta, its
// timers, and the messages still waiting in its inbox, which re-run.
func (e *Engine) restore() error {
	n := e.db.Partitions()
	inboxes := make([][]store.InboxKey, n)
	envs := make([][]*protocol.Envelope, n)
	outSeq := make([]uint64, n)
	var maxIngress uint64
	e.arrivals = newArrivals(n)
	for p := 0; p < n; p++ {
		// In arrival order: the order the messages were delivered before.
		err := e.db.ScanInbox(p, func(k store.InboxKey, env *protocol.Envelope) error {
			e.arrivals.restored(k)
			inboxes[p] = append(inboxes[p], k)
			envs[p] = append(envs[p], env)
			switch {
			case k.Source == store.SourceIngress:
				maxIngress = max(maxIngress, k.Seq)
			case int(k.Source) < n:
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
	pauses, err := loadPauses(e.db, n)
	if err != nil {
		return err
	}
	pending := 0
	for p := 0; p < n; p++ {
		meta, err := e.db.Meta(p)
		if err != nil {
			return err
		}
		rs := partition.Restore{CommitID: meta.CommitID, VersionSeq: meta.VersionSeq, OutSeq: outSeq[p], Pauses: pauses[p]}
		e.positions.set(p, meta.CommitID)
		err = e.db.ScanTimers(p, func(k store.TimerKey, env *protocol.Envelope) error {
			rs.Timers = append(rs.Timers, partition.Timer{Key: partition.TimerKey{Partition: k.Partition, Due: k.Due, ID: k.ID}, Env: env})
			return nil
		})
		if err != nil {
			return err
		}
		core := partition.New(partition.Config{
			ID:            p,
			Partitions:    n,
			MaxBatch:      e.opts.MaxBatch,
			MaxBatchBytes: e.opts.MaxBatchBytes,
			Egress:        e.opts.Egress,
			Routable:      e.opts.Routable,
			RetryBase:     durOr(e.opts.RetryBase, 50*time.Millisecond).Milliseconds(),
			RetryMax:      durOr(e.opts.RetryMax, 10*time.Second).Milliseconds(),

			PauseAfter:       e.opts.PauseAfter,
			PauseOnViolation: e.opts.PauseOnViolation,
		}, storeReader{db: e.db, specs: e.specs.initial}, rs)
		pt := newPart(p, core, e, e.opts.Now)
		for i, k := range inboxes[p] {
			ev := partition.MessageArrived{Key: partition.InboxKey{Partition: k.Partition, Source: k.Source, Seq: k.Seq}, Env: envs[p][i]}
			if m := envs[p][i].GetMutation(); m != nil {
				ev.Mutation = mutationFromProto(m)
			}
			if err := core.Step(now, ev); err != nil {
				return err
			}
			pt.hold(ev.Key, proto.Size(envs[p][i]))
		}
		pending += len(inboxes[p])
		e.parts = append(e.parts, pt)
	}
	if pending > 0 {
		e.log.Info("restored pending messages", "messages", pending, "partitions", n)
	}
	return nil
}
