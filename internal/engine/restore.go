package engine

import (
	"time"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
	"google.golang.org/protobuf/proto"
)

// restore rebuilds every partition core from the store: its meta, its
// timers, and the messages still waiting in its inbox, which re-run.
//
// It streams, and holds no more of an inbox than its partition's bound: the
// rest stays in the store and is paged in as the backlog drains
// (paging.go). A first pass reads the inboxes' keys only, for the numbers
// every partition needs before its core is built: the highest ingress
// sequence, and each partition's next sequence, which must stay above
// every message of its own still waiting in any inbox. Then each
// partition is built from its own inbox, read as its core steps it, so no
// partition's messages are held beyond what its core keeps. The numbers
// are read rather than stored because keeping them in the store would
// cost a write per commit of every partition for a value a restart alone
// needs, and reading keys is cheap next to the messages the second pass
// reads anyway.
func (e *Engine) restore() error {
	n := e.n
	outSeq := make([]uint64, n)
	var maxIngress uint64
	for p := 0; p < n; p++ {
		err := e.db.ScanInboxKeys(p, func(k store.InboxKey) error {
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
	pending, timers := 0, 0
	for p := 0; p < n; p++ {
		pt, stats, err := e.buildPart(p, outSeq[p], pauses[p], e.specs.initial, now)
		if err != nil {
			return err
		}
		pending += stats.messages
		timers += stats.timers
		e.parts = append(e.parts, pt)
	}
	if pending > 0 || timers > 0 {
		e.log.Info("restored pending messages", "messages", pending, "delayed", timers, "partitions", n)
	}
	return nil
}

// restoreStats counts what a partition's restore found in the store: the
// messages of its inbox and its delayed messages.
type restoreStats struct{ messages, timers int }

// buildPart builds partition p's core from the store's meta and timers of
// p (the first Options.TimerWindow of them; the core reads the rest as
// they come due), the pauses in force for it, and its inbox, whose
// messages it steps in arrival order as they are read (they re-run);
// outSeq is the first sequence number its own messages may take. specs
// are the durable specs the core reads.
func (e *Engine) buildPart(p int, outSeq uint64, pauses []partition.PauseWrite,
	specs map[address.TypeName][]partition.Spec, now int64) (*part, restoreStats, error) {
	var stats restoreStats
	meta, err := e.db.Meta(p)
	if err != nil {
		return nil, stats, err
	}
	rs := partition.Restore{CommitID: meta.CommitID, VersionSeq: meta.VersionSeq, OutSeq: outSeq, Pauses: pauses}
	e.positions.set(p, meta.CommitID)
	// Timer ids go on above the highest pending one, which only a scan of
	// every key finds (ids are not in due order).
	if stats.timers, rs.TimerSeq, err = e.db.TimerStats(p); err != nil {
		return nil, stats, err
	}
	window := e.opts.TimerWindow
	err = e.db.ScanTimersAfter(p, nil, func(k store.TimerKey, env *protocol.Envelope) bool {
		if len(rs.Timers) == window {
			rs.MoreTimers = true
			return false
		}
		rs.Timers = append(rs.Timers, partition.Timer{Key: partition.TimerKey{Partition: k.Partition, Due: k.Due, ID: k.ID}, Env: env})
		return true
	})
	if err != nil {
		return nil, stats, err
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
		MaxQueued:        e.opts.MaxBacklog,
		TimerWindow:      window,
	}, storeReader{db: e.db, specs: specs, p: p}, rs)
	pt := newPart(p, core, e, e.opts.Now)
	pt.lane = e.opts.Lane
	pt.callDone = e.callDone(pt)
	pt.limit, pt.limitBytes, pt.inbox = e.opts.MaxBacklog, e.opts.MaxBacklogBytes, e.db
	// The inbox's end first: messages past the partition's bound stay in
	// the store, and new ones are numbered above them (paging.go).
	var end uint64
	err = e.db.ScanInboxKeys(p, func(k store.InboxKey) error {
		end = k.Arrival + 1
		stats.messages++
		return nil
	})
	if err != nil {
		return nil, stats, err
	}
	pt.arr.skipTo(end)
	pt.pg.restoredEnd = end
	stepped := 0
	err = e.db.ScanInbox(p, func(k store.InboxKey, env *protocol.Envelope) error {
		if stepped > 0 && (core.Backlog() >= pt.limit || pt.heldBytes.Load() >= pt.limitBytes) {
			pt.pg.next.Store(k.Arrival)
			pt.pg.waiting.Store(int64(stats.messages - stepped))
			pt.pg.on.Store(true)
			return errPageStop
		}
		pt.arr.restored(k)
		ev := partition.MessageArrived{Key: partition.InboxKey{Partition: k.Partition, Source: k.Source, Seq: k.Seq}, Env: env}
		if m := env.GetMutation(); m != nil {
			ev.Mutation = mutationFromProto(m)
		}
		if err := core.Step(now, ev); err != nil {
			return err
		}
		pt.hold(ev.Key, proto.Size(env))
		stepped++
		return nil
	})
	if err != nil && err != errPageStop {
		return nil, stats, err
	}
	e.m.delayedHeld.WithLabelValues(partLabel(p)).Set(float64(core.TimersHeld()))
	return pt, stats, nil
}
