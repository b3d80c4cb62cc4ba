package engine

import (
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// This file holds the engine's requests to the group committer: what each
// writes, and what its durability releases.

// ingressReq is a message from an ingress, or an accepted operator mutation
// (receipt set): durable in the target's inbox, then delivered. A message
// sent with an idempotency key writes the key's record in the same batch.
type ingressReq struct {
	e       *Engine
	key     partition.InboxKey
	env     *protocol.Envelope
	receipt *protocol.Receipt
	once    *onceWrite
	done    chan error
}

func (r *ingressReq) Encode(b *store.Batch) error {
	b.PutInbox(r.e.arrivals.assign(r.key), r.env)
	if r.receipt != nil {
		b.PutReceipt(r.receipt)
	}
	if r.once != nil {
		b.PutIdempotency(r.once.k.scope, r.once.k.key, r.once.rec)
	}
	return nil
}

func (r *ingressReq) Durable() {
	r.e.deliver(r.key, r.env)
	if r.receipt != nil {
		r.e.waiters.receiptsChanged()
	}
	if r.once != nil {
		r.e.once.release(r.once.k) // after the record is in the store
	}
	r.done <- nil
}

func (r *ingressReq) Fail(err error) {
	r.e.arrivals.forget(r.key)
	if r.once != nil {
		r.e.once.release(r.once.k)
	}
	r.done <- r.e.stopErr(err)
}

// partCommit is one commit of a partition core.
type partCommit struct {
	e *Engine
	p *part
	c *partition.Commit
}

// Encode writes the commit in the order partition.Commit documents: puts
// first, deletions last.
func (r *partCommit) Encode(b *store.Batch) error {
	cm := r.c
	for _, p := range cm.Produced {
		b.PutInbox(r.e.arrivals.assign(p.Key), p.Env)
	}
	for _, t := range cm.TimersAdded {
		b.PutTimer(timerKey(t.Key), t.Env)
	}
	for _, w := range cm.State {
		if w.Delete {
			b.DeleteState(w.Addr, w.State)
		} else {
			b.PutState(w.Addr, w.State, store.Entry{Typename: w.Entry.Typename, Value: w.Entry.Value, Version: w.Entry.Version, ExpiresAt: w.Entry.ExpiresAt})
		}
		if w.Cause != nil {
			// The change's history record, in the same batch as the change.
			b.PutHistory(w.Addr, w.State, cm.ID, historyRecord(w))
		}
	}
	for t, s := range cm.Specs {
		b.PutSpecs(t, specsToProto(s))
	}
	encodePauses(b, cm.Pauses)
	if err := r.e.encodeRepairs(b, cm); err != nil {
		return err
	}
	for _, eg := range cm.Egress {
		r.e.egressSeq++
		b.PutEgress(eg.Egress, eg.Route, r.e.egressSeq, eg.Record)
	}
	if len(cm.Egress) > 0 {
		// Numbers are never given twice, even after every outbox emptied
		// and a restart: a consumer's position stays meaningful.
		b.PutEgressSeq(r.e.egressSeq)
	}
	for _, a := range cm.Audit {
		b.PutAudit(auditToProto(a))
	}
	for _, rc := range cm.Receipts {
		b.PutReceipt(receiptToProto(rc))
	}
	b.PutMeta(r.p.id, store.PartitionMeta{CommitID: cm.ID, VersionSeq: cm.VersionSeq})
	for _, k := range cm.Consumed {
		sk, err := r.e.arrivals.consume(k)
		if err != nil {
			return err
		}
		b.DeleteInbox(sk)
	}
	for _, k := range cm.TimersRemoved {
		b.DeleteTimer(timerKey(k))
	}
	return nil
}

// Durable delivers the commit's messages for other partitions, publishes
// the specs it learned and its position, and tells the partition; the
// callers of committed-ack mutations hear back in AfterGroup.
func (r *partCommit) Durable() {
	e, cm := r.e, r.c
	r.p.pending.durable(cm)
	for _, p := range cm.Produced {
		if p.Key.Partition != r.p.id {
			e.deliver(p.Key, p.Env)
		}
	}
	if len(cm.Receipts) > 0 {
		e.waiters.receiptsChanged()
	}
	if len(cm.Specs) > 0 {
		e.publishSpecs(r.p.id, cm.Specs)
	}
	e.positions.set(r.p.id, cm.ID)
	r.p.post(partition.CommitDurable{ID: cm.ID})
}

// Lane puts the commit in its partition's lane, urgent when a caller waits
// for one of its receipts to be durable (committer.Urgent).
func (r *partCommit) Lane() (int, bool) {
	for _, rc := range r.c.Receipts {
		if rc.Ack == partition.AckCommitted && rc.Request != 0 {
			return r.p.id, true
		}
	}
	return r.p.id, false
}

// AfterGroup answers the callers of the commit's committed-ack mutations,
// once every request of the group has been told it is durable: they are
// the latency an operator sees, the other wakes are throughput.
func (r *partCommit) AfterGroup() bool {
	answered := false
	for _, rc := range r.c.Receipts {
		if rc.Ack == partition.AckCommitted && rc.Request != 0 {
			rc := rc
			r.e.waiters.deliver(partition.Reply{Request: rc.Request, Receipt: &rc})
			answered = true
		}
	}
	return answered
}

// Fail stops the engine: the partition's core has moved on past a commit
// that will never be durable, so it cannot go on; after a restart it
// re-runs from its last durable commit.
func (r *partCommit) Fail(err error) { r.e.fatal(err) }

// popReq removes an egress record that is being handed out.
type popReq struct {
	e             *Engine
	egress, route string
	seq           uint64
	done          chan error
}

func (r *popReq) Encode(b *store.Batch) error {
	b.DeleteEgress(r.egress, r.route, r.seq)
	return nil
}
func (r *popReq) Durable()       { r.done <- nil }
func (r *popReq) Fail(err error) { r.done <- r.e.stopErr(err) }

// ackReq removes the egress records a consumer acknowledged.
type ackReq struct {
	e             *Engine
	egress, route string
	pos           uint64
	done          chan error
}

func (r *ackReq) Encode(b *store.Batch) error {
	b.DeleteEgressThrough(r.egress, r.route, r.pos)
	return nil
}
func (r *ackReq) Durable()       { r.done <- nil }
func (r *ackReq) Fail(err error) { r.done <- r.e.stopErr(err) }

func timerKey(k partition.TimerKey) store.TimerKey {
	return store.TimerKey{Partition: k.Partition, Due: k.Due, ID: k.ID}
}
