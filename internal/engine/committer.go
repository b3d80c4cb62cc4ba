package engine

import (
	"context"
	"sync"
	"time"

	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// commitReq is one unit of durable work: a partition's commit, a message
// from an ingress, or the removal of an egress record that was handed out.
type commitReq struct {
	part   *part
	commit *partition.Commit

	ingress *ingressWrite
	egress  *egressPop

	done chan error // nil for partition commits
}

type ingressWrite struct {
	key store.InboxKey
	env *protocol.Envelope
	// receipt is set for an accepted operator mutation.
	receipt *protocol.Receipt
}

type egressPop struct {
	egress, route string
	seq           uint64
}

// maxGroupOps bounds one group commit, so one sync never grows without end
// while requests keep arriving.
const maxGroupOps = 50_000

// committer is the group committer: everything waiting when a sync ends goes
// into the next batch, so a synced write is paid per batch, not per commit.
type committer struct {
	e    *Engine
	mu   sync.Mutex
	reqs []*commitReq
	wake chan struct{}
}

func newCommitter(e *Engine) *committer {
	return &committer{e: e, wake: make(chan struct{}, 1)}
}

func (c *committer) enqueue(r *commitReq) {
	c.mu.Lock()
	c.reqs = append(c.reqs, r)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// submit enqueues a request whose caller waits on r.done, or returns
// ErrClosed when the engine has stopped.
func (c *committer) submit(r *commitReq) error {
	if err := c.e.ctx.Err(); err != nil {
		return ErrClosed
	}
	c.enqueue(r)
	return nil
}

func (c *committer) loop(ctx context.Context) {
	for {
		c.mu.Lock()
		reqs := c.reqs
		c.reqs = nil
		c.mu.Unlock()
		if len(reqs) > 0 {
			if err := c.commit(reqs); err != nil {
				c.e.fatal(err)
				for _, r := range reqs {
					if r.done != nil {
						r.done <- err
					}
				}
				return
			}
			continue
		}
		select {
		case <-ctx.Done():
			c.failWaiting()
			return
		case <-c.wake:
		}
	}
}

// failWaiting answers callers still waiting at shutdown; their work was not
// made durable (a partition's commit re-runs after a restart).
func (c *committer) failWaiting() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.reqs {
		if r.done != nil {
			r.done <- ErrClosed
		}
	}
	c.reqs = nil
}

// commit writes reqs in one synced batch, then acts on their durability.
// Requests beyond maxGroupOps go back to the front of the queue.
func (c *committer) commit(reqs []*commitReq) error {
	start := time.Now()
	b := c.e.db.NewBatch()
	defer b.Close()
	n := 0
	for n < len(reqs) && (n == 0 || b.Len() < maxGroupOps) {
		c.write(b, reqs[n])
		n++
	}
	if n < len(reqs) {
		c.mu.Lock()
		c.reqs = append(reqs[n:len(reqs):len(reqs)], c.reqs...)
		c.mu.Unlock()
		reqs = reqs[:n]
	}
	ops, size := b.Len(), b.Size()
	if err := b.Commit(true); err != nil {
		return err
	}
	c.e.m.observeCommit(time.Since(start), len(reqs), ops, size)
	receipts := false
	for _, r := range reqs {
		c.durable(r)
		receipts = receipts || (r.commit != nil && len(r.commit.Receipts) > 0) || (r.ingress != nil && r.ingress.receipt != nil)
	}
	if receipts {
		c.e.waiters.receiptsChanged()
	}
	return nil
}

// write adds one request to the batch, in the order partition.Commit
// documents: puts first, deletions last.
func (c *committer) write(b *store.Batch, r *commitReq) {
	switch {
	case r.ingress != nil:
		b.PutInbox(r.ingress.key, r.ingress.env)
		if r.ingress.receipt != nil {
			b.PutReceipt(r.ingress.receipt)
		}
	case r.egress != nil:
		b.DeleteEgress(r.egress.egress, r.egress.route, r.egress.seq)
	default:
		cm := r.commit
		for _, p := range cm.Produced {
			b.PutInbox(inboxKey(p.Key), p.Env)
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
		}
		for t, s := range cm.Specs {
			b.PutSpecs(t, specsToProto(s))
		}
		for _, eg := range cm.Egress {
			c.e.egressSeq++
			b.PutEgress(eg.Egress, eg.Route, c.e.egressSeq, eg.Record)
		}
		for _, a := range cm.Audit {
			b.PutAudit(auditToProto(a))
		}
		for _, rc := range cm.Receipts {
			b.PutReceipt(receiptToProto(rc))
		}
		b.PutMeta(r.part.id, store.PartitionMeta{CommitID: cm.ID, VersionSeq: cm.VersionSeq})
		for _, k := range cm.Consumed {
			b.DeleteInbox(inboxKey(k))
		}
		for _, k := range cm.TimersRemoved {
			b.DeleteTimer(timerKey(k))
		}
	}
}

// durable releases what waited for r's durability.
func (c *committer) durable(r *commitReq) {
	switch {
	case r.ingress != nil:
		c.e.deliver(r.ingress.key, r.ingress.env)
		r.done <- nil
	case r.egress != nil:
		r.done <- nil
	default:
		for _, p := range r.commit.Produced {
			if p.Key.Partition != r.part.id {
				c.e.deliver(inboxKey(p.Key), p.Env)
			}
		}
		for _, rc := range r.commit.Receipts {
			if rc.Ack == partition.AckCommitted && rc.Request != 0 {
				rc := rc
				c.e.waiters.deliver(partition.Reply{Request: rc.Request, Receipt: &rc})
			}
		}
		r.part.post(partition.CommitDurable{ID: r.commit.ID})
	}
}

func inboxKey(k partition.InboxKey) store.InboxKey {
	return store.InboxKey{Partition: k.Partition, Source: k.Source, Seq: k.Seq}
}

func timerKey(k partition.TimerKey) store.TimerKey {
	return store.TimerKey{Partition: k.Partition, Due: k.Due, ID: k.ID}
}
