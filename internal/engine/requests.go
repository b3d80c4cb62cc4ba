package engine

import (
	"fmt"

	"google.golang.org/protobuf/proto"

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
	reqOf
	key     partition.InboxKey
	env     *protocol.Envelope
	receipt *protocol.Receipt
	once    *onceWrite
	done    chan error
	answer  *pacedAnswer // set (to &paced): the outcome goes through answers
	paced   pacedAnswer

	// What settling it reaches besides its part: the long-polls of
	// receipts, the idempotency keys in flight, the pacer of ingress
	// answers, and how the engine stopped.
	receipts *waiters
	keys     *inflight
	answers  *answerPacer
	halt     *halt
}

// newIngressReq is a request for env, in p's inbox at the next ingress
// key (set receipt or once for an accepted mutation or a keyed message).
func (e *Engine) newIngressReq(p *part, env *protocol.Envelope) *ingressReq {
	key := partition.InboxKey{Partition: p.id, Source: partition.SourceIngress, Seq: e.ingressSeq.Add(1)}
	return &ingressReq{reqOf: reqOf{p: p}, key: key, env: env, done: make(chan error, 1),
		receipts: e.waiters, keys: &e.once, answers: e.answers, halt: e.halt}
}

func (r *ingressReq) Encode(b *store.Batch) error {
	if err := r.p.encodable(); err != nil {
		return err
	}
	b.PutInbox(r.p.arr.assign(r.key), r.env)
	if r.receipt != nil {
		r.receipt.Partition = proto.Uint32(uint32(r.p.id))
		b.PutReceipt(r.receipt)
	}
	if r.once != nil {
		b.PutIdempotency(r.once.k.scope, r.once.k.key, r.once.rec)
	}
	r.encoded()
	return nil
}

func (r *ingressReq) Durable() {
	r.settled()
	deliverTo(r.p, r.key, r.env)
	if r.receipt != nil {
		r.receipts.receiptsChanged()
	}
	if r.once != nil {
		r.keys.release(r.once.k) // after the record is in the store
	}
	r.answer.settleOr(r.answers, r.done, nil)
}

func (r *ingressReq) Fail(err error) {
	r.settled()
	r.failed(err)
	r.p.arr.forget(r.key)
	if r.once != nil {
		r.keys.release(r.once.k)
	}
	r.answer.settleOr(r.answers, r.done, r.halt.errOf(err))
}

// partCommit is one commit of a partition core.
type partCommit struct {
	reqOf
	e *Engine
	c *partition.Commit
}

// Encode writes the commit in the order partition.Commit documents: puts
// first, deletions last. With Options.Outbound (cluster mode), messages for
// other partitions and egress records are handed to it instead, after
// every write of the batch was made: they are the transaction's records,
// and a key of another partition must not travel in this partition's
// changelog.
func (r *partCommit) Encode(b *store.Batch) error {
	if err := r.p.encodable(); err != nil {
		return err
	}
	cm, out := r.c, r.e.opts.Outbound
	for _, p := range cm.Produced {
		arr := r.p.arr
		if p.Key.Partition != r.p.id {
			if out != nil {
				continue
			}
			// Embedded: the target's inbox, numbered by the target.
			arr = r.e.parts[p.Key.Partition].arr
		}
		b.PutInbox(arr.assign(p.Key), p.Env)
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
			b.PutHistory(w.Addr, w.State, cm.ID, r.e.scratch.history(w))
		}
	}
	for t, s := range cm.Specs {
		b.PutSpecs(t, specsToProto(s))
	}
	own := -1
	if r.e.opts.Owned {
		own = r.p.id
	}
	encodePauses(b, cm.Pauses, own)
	if err := r.e.encodeRepairs(b, r.p, cm); err != nil {
		return err
	}
	if out == nil { // else they go to Outbound below
		for _, eg := range cm.Egress {
			r.e.egressSeq++
			b.PutEgress(eg.Egress, eg.Route, r.e.egressSeq, eg.Record)
		}
		if len(cm.Egress) > 0 {
			// Numbers are never given twice, even after every outbox emptied
			// and a restart: a consumer's position stays meaningful.
			b.PutEgressSeq(r.e.egressSeq)
		}
	}
	// Both name the partition that keeps them: a cancel of a delayed
	// message is kept by the sender's, not the target's.
	for _, a := range cm.Audit {
		b.PutAudit(r.e.scratch.auditRecord(a, r.p.id))
	}
	for _, rc := range cm.Receipts {
		if !rc.Unstored {
			b.PutReceipt(r.e.scratch.receiptRecord(rc, r.p.id))
		}
	}
	b.PutMeta(r.p.id, store.PartitionMeta{CommitID: cm.ID, VersionSeq: cm.VersionSeq})
	for _, k := range cm.Consumed {
		sk, err := r.p.arr.consume(k)
		if err != nil {
			return err
		}
		b.DeleteInbox(sk)
	}
	// A token's index entry goes with its timer, unless a timer this
	// commit adds (and does not remove) took the token again: PutTimer
	// wrote its entry above.
	var retaken map[[2]string]bool
	for _, rm := range cm.TimersRemoved {
		b.DeleteTimer(timerKey(rm.Key))
		if rm.Token == "" {
			continue
		}
		if retaken == nil {
			retaken = tokensKept(cm)
		}
		if !retaken[[2]string{rm.Sender, rm.Token}] {
			b.DeleteTimerToken(rm.Key.Partition, rm.Sender, rm.Token)
		}
	}
	if out != nil {
		for _, p := range cm.Produced {
			if p.Key.Partition != r.p.id {
				if err := out.Message(p.Key, p.Env); err != nil {
					return fmt.Errorf("engine: partition %d: a message for partition %d: %w", r.p.id, p.Key.Partition, err)
				}
			}
		}
		for _, eg := range cm.Egress {
			if err := out.Egress(r.p.id, eg); err != nil {
				return fmt.Errorf("engine: partition %d: a record for egress %s: %w", r.p.id, eg.Egress, err)
			}
		}
	}
	r.encoded()
	return nil
}

// Durable delivers the commit's messages for other partitions, publishes
// the specs it learned and its position, and tells the partition; the
// callers of committed-ack mutations hear back in AfterGroup.
//
// A commit of a revoked part releases nothing: its partition's next owner
// (or next assignment here) is built from the store and takes it from
// there, and its waiting callers were answered ErrMoved.
func (r *partCommit) Durable() {
	r.settled()
	if r.p.gone.Load() {
		return
	}
	e, cm := r.e, r.c
	r.p.pending.durable(cm)
	for _, p := range cm.Produced {
		switch {
		case p.Key.Partition == r.p.id:
			if p.Deliver { // handed over by the core: it had no room
				deliverTo(r.p, p.Key, p.Env)
			}
		case e.opts.Outbound == nil:
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
func (r *partCommit) AfterGroup() {
	if r.p.gone.Load() {
		return
	}
	for _, rc := range r.c.Receipts {
		if rc.Ack == partition.AckCommitted && rc.Request != 0 {
			rc := rc
			r.e.waiters.deliver(partition.Reply{Request: rc.Request, Receipt: &rc})
		}
	}
}

// Fail stops the engine: the partition's core has moved on past a commit
// that will never be durable, so it cannot go on; after a restart it
// re-runs from its last durable commit. An abort (ErrAborted) or a revoked
// part (ErrMoved) stops only the part: its later requests are refused, and
// the cluster session assigns the partition again, which rebuilds it from
// the store.
func (r *partCommit) Fail(err error) {
	r.settled()
	if r.failed(err) {
		return
	}
	r.e.fatal(err)
}

// popReq removes an egress record that is being handed out.
type popReq struct {
	halt          *halt
	egress, route string
	seq           uint64
	done          chan error
}

// Partition is -1: the outbox is not any partition's (cluster mode refuses
// the playground egress).
func (r *popReq) Partition() int { return -1 }

func (r *popReq) Encode(b *store.Batch) error {
	b.DeleteEgress(r.egress, r.route, r.seq)
	return nil
}
func (r *popReq) Durable()       { r.done <- nil }
func (r *popReq) Fail(err error) { r.done <- r.halt.errOf(err) }

// ackReq removes the egress records a consumer acknowledged.
type ackReq struct {
	halt          *halt
	egress, route string
	pos           uint64
	done          chan error
}

// Partition is -1, as for popReq.
func (r *ackReq) Partition() int { return -1 }

func (r *ackReq) Encode(b *store.Batch) error {
	b.DeleteEgressThrough(r.egress, r.route, r.pos)
	return nil
}
func (r *ackReq) Durable()       { r.done <- nil }
func (r *ackReq) Fail(err error) { r.done <- r.halt.errOf(err) }

// tokensKept returns the (sender id, token) pairs of the timers a commit
// adds and does not remove: their index entries stand.
func tokensKept(cm *partition.Commit) map[[2]string]bool {
	removed := make(map[partition.TimerKey]bool, len(cm.TimersRemoved))
	for _, rm := range cm.TimersRemoved {
		removed[rm.Key] = true
	}
	kept := map[[2]string]bool{}
	for _, t := range cm.TimersAdded {
		if tok := t.Env.GetCancellationToken(); tok != "" && !removed[t.Key] {
			kept[[2]string{t.Env.GetCaller().GetId(), tok}] = true
		}
	}
	return kept
}

func timerKey(k partition.TimerKey) store.TimerKey {
	return store.TimerKey{Partition: k.Partition, Due: k.Due, ID: k.ID}
}
