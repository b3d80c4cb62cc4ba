package engine

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/engine/committer"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// This file is the engine's seam for cluster mode (docs/explanation/engine.md,
// "The cluster seam"): who makes its work durable
// (Durability), where messages for other partitions and egress records go
// (Outbound), which partitions it runs (Assign, Revoke), and the messages
// polled from the messages topic (SubmitArrivals). The embedded engine
// uses none of it but Durability's shape, which its group committer has.

// Durability makes the engine's requests durable: the embedded group
// committer (committer.Committer), or in cluster mode the Kafka session.
//
// Every request the engine submits is a Request: the session asserts it
// to learn the partition whose overlay the request's Encode writes into.
// The contract is the committer's (committer.Request, committer.Answerer):
// Encode on one goroutine in submission order, then Durable in submission
// order once the writes are durable, then AfterGroup of the Answerers, or
// Fail instead of both. Besides, in cluster mode:
//
//   - a request whose Encode fails (including an encoding error the
//     overlay reports) may have handed records to Outbound already: the
//     session must not commit the transaction it was encoded into;
//   - Fail with an error wrapping ErrAborted (the transaction was aborted,
//     or will not be committed) is not fatal: the request's partition takes
//     no more work until Revoke and Assign rebuild it from the store;
//   - every request encoded into a transaction hears Durable or Fail
//     before any request is encoded into the next one, and before Assign
//     of its partition (Assign refuses while any is unsettled).
type Durability interface {
	// Submit queues a request; an error means it will never be made
	// durable (the request is then not called back).
	Submit(r committer.Request) error
	// Run makes requests durable until ctx ends; an error stops the engine.
	Run(ctx context.Context) error
	// Close fails the requests still waiting; Run is not running then.
	Close()
	// Pending returns the number of requests waiting to be encoded.
	Pending() int
}

// Request is one unit of the engine's durable work (a committer.Request
// that names its partition).
type Request interface {
	committer.Request
	// Partition is the partition whose data the request writes (its
	// overlay and changelog partition in cluster mode), or -1 for a
	// request that is no partition's: the playground egress's pops and
	// acknowledgements and IngestFrom's source batches, which cluster mode
	// refuses.
	Partition() int
}

// Outbound takes what a partition commit sends out of its partition, in
// cluster mode: the session produces it in the transaction the commit is
// encoded into. Both methods are called from the commit's Encode, on the
// Durability goroutine, after the commit's writes were made into the
// batch; an error fails the commit's Encode (see Durability).
type Outbound interface {
	// Message takes a message for another partition: key.Partition is the
	// target's partition (address.Partition of env's target), key.Source
	// the sending partition. The target's owner gets it back through
	// SubmitArrivals, under a key of its own.
	Message(key partition.InboxKey, env *protocol.Envelope) error
	// Egress takes a record for an egress (in cluster mode, a Kafka
	// egress: the playground egress is refused at start), sent by
	// partition from.
	Egress(from int, eg partition.Egress) error
}

// ErrMoved is returned by reads, mutations, inspections and ingress for a
// partition this process does not own (cluster mode): it was revoked, is
// not assigned yet, or is being rebuilt after an aborted transaction.
// Callers waiting on a partition when it is revoked get it too; the
// outcome of a mutation they were waiting for is then unknown (its receipt
// tells, once the partition's next owner runs). The state API answers 503
// with Retry-After. It is committer.ErrMoved, which the cluster session
// fails requests with.
var ErrMoved = committer.ErrMoved

// ErrAborted is wrapped by the error the cluster session fails requests
// with when their transaction was aborted (a revocation, a fence, a broker
// error). It is not fatal: see Durability. It is committer.ErrAborted.
var ErrAborted = committer.ErrAborted

// ErrPlaygroundEgress is returned by the playground egress's pops, reads
// and acknowledgements in cluster mode, where that egress is refused.
var ErrPlaygroundEgress = errors.New("engine: the playground egress is not available in cluster mode; use io.statefun.kafka.v1/egress")

// movedErr is ErrMoved for partition p.
func movedErr(p int) error { return &movedError{p: p} }

// movedError is ErrMoved naming its partition, so that an edge can say
// who owns it instead (MovedPartition).
type movedError struct{ p int }

func (e *movedError) Error() string { return fmt.Sprintf("%v (partition %d)", ErrMoved, e.p) }
func (e *movedError) Unwrap() error { return ErrMoved }

// MovedPartition returns the partition an ErrMoved of the engine names, so
// that the state API can name its owner; false when err names none (it is
// not ErrMoved, or came from the cluster session without a partition).
func MovedPartition(err error) (int, bool) {
	var m *movedError
	if errors.As(err, &m) {
		return m.p, true
	}
	return 0, false
}

// SourceMessages is the InboxKey.Source of a message or command that
// arrived through the cluster's messages topic; its Seq is the record's
// offset in the topic's partition, so the key is stable across retries and
// unique in the inbox (docs/reference/storage.md, the inbox).
const SourceMessages = partition.SourceMessages

// Owned returns the partitions this process runs now, in order: every
// partition without Options.Owned.
func (e *Engine) Owned() []int {
	var out []int
	for i := 0; i < e.n; i++ {
		if p := e.part(i); p != nil && !p.gone.Load() {
			out = append(out, i)
		}
	}
	return out
}

// Assign builds partition p's core from the store, as a restart would
// (its meta, timers, pauses and the messages in its inbox, which re-run),
// and runs it (after Start; before, Start does). Cluster mode only: the
// session calls it once the store holds p's changelog to its end. It
// refuses a partition assigned already, and one whose previous assignment
// still has requests encoded that have heard neither Durable nor Fail
// (their writes could land in the store after the rebuild read it).
func (e *Engine) Assign(p int) error {
	if !e.opts.Owned {
		return errors.New("engine: Assign needs Options.Owned (cluster mode)")
	}
	if p < 0 || p >= e.n {
		return fmt.Errorf("%w: %d (the application has %d)", ErrNoSuchPartition, p, e.n)
	}
	if e.closed.Load() {
		return ErrClosed
	}
	e.ownMu.Lock()
	defer e.ownMu.Unlock()
	if e.slots[p].Load() != nil {
		return fmt.Errorf("engine: partition %d is assigned already (Revoke it first)", p)
	}
	if prev := e.prev[p]; prev != nil {
		if n := prev.encoded.Load(); n > 0 {
			return fmt.Errorf("engine: partition %d: %d requests of its previous assignment were encoded and have heard neither Durable nor Fail; settle them before assigning it again", p, n)
		}
	}
	specs, err := loadSpecs(e.db)
	if err != nil {
		return err
	}
	for t, s := range specs.initial {
		// The listing learns types restored with p; a type it knows has
		// specs at least as new (published after a durable commit).
		if e.specs.get(t) == nil {
			e.specs.set(t, s)
		}
	}
	pt, err := e.restorePart(p, specs.initial)
	if err != nil {
		return err
	}
	e.slots[p].Store(pt)
	if e.started && e.drv == nil {
		e.runPart(pt)
	}
	return nil
}

// runPart starts the runner of an assigned part; Revoke stops it.
func (e *Engine) runPart(p *part) {
	ctx, stop := context.WithCancel(e.ctx)
	p.stop, p.done = stop, make(chan struct{})
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		defer close(p.done)
		if err := p.run(ctx); err != nil {
			e.fatal(err)
		}
	}()
}

// Revoke stops running partition p: its runner ends, its core, queue and
// held messages are dropped, the callers waiting on it (reads, mutations,
// inspections, pauses, repairs, WaitDurable) get ErrMoved, and the results
// of its invocations in flight are ignored. Requests of p still in
// Durability settle harmlessly: Encode refuses them (ErrMoved), a Durable
// releases nothing. Its store data stays (a warm cache, valid up to its
// changelog position). Revoking a partition not assigned does nothing.
// Do not call it from a Durability callback: it waits for the runner.
func (e *Engine) Revoke(p int) {
	if !e.opts.Owned || p < 0 || p >= e.n {
		return
	}
	e.ownMu.Lock()
	defer e.ownMu.Unlock()
	pt := e.slots[p].Load()
	if pt == nil {
		return
	}
	// gone first: a caller that registers a waiter after failPartition
	// sees it and answers itself (see ask).
	pt.gone.Store(true)
	e.slots[p].Store(nil)
	e.prev[p] = pt
	if pt.stop != nil {
		pt.stop()
		<-pt.done
	}
	e.waiters.failPartition(p, movedErr(p))
	e.positions.moved()
	if e.drv != nil {
		e.drv.drop(pt)
	}
	e.m.queueDepth.WithLabelValues(partLabel(p)).Set(0)
	e.m.repair.report(p, partition.Health{})
}

// Full reports whether partition p is at its limit of queued messages or
// bytes (Options.MaxBacklog, MaxBacklogBytes): the session pauses fetching
// its records until it is not. False for a partition not owned.
func (e *Engine) Full(p int) bool {
	if p < 0 || p >= e.n {
		return false
	}
	pt := e.part(p)
	return pt != nil && e.full(pt)
}

// Arrival is one record polled from the messages topic for a partition: a
// message (Env.Target set), a state mutation command (Env.Mutation set,
// with its target and mutation id), or a Kafka ingress dead letter this
// partition keeps (Env.IngressDeadLetter set; IngressDeadLetterPartition).
type Arrival struct {
	// Offset is the record's offset in the topic's partition.
	Offset int64
	Env    *protocol.Envelope
}

// SubmitArrivals makes the records polled from partition p of the messages
// topic one request for p: its Encode writes their inbox entries into p's
// batch (the transaction's overlay) under the key (SourceMessages,
// offset), with an accepted receipt for each mutation command, and the
// Kafka ingress dead letters among them (stored in key space 0x0F, not
// delivered), and its Durable delivers the messages and commands to p's
// core in offset order. A mutation command
// whose id has a receipt in the store, or was encoded already by this
// assignment of p, is skipped: a forwarded or retried write applies once.
// It is never refused for a full partition (the records are polled; see
// Full). It returns ErrMoved when p is not owned, and an error naming the
// record for one that is not p's or is out of order. The channel gets nil
// once the request is durable, or its Fail error.
func (e *Engine) SubmitArrivals(p int, recs []Arrival) (<-chan error, error) {
	if !e.opts.Owned {
		return nil, errors.New("engine: SubmitArrivals needs Options.Owned (cluster mode)")
	}
	if e.closed.Load() {
		return nil, ErrClosed
	}
	if p < 0 || p >= e.n {
		return nil, fmt.Errorf("%w: %d (the application has %d)", ErrNoSuchPartition, p, e.n)
	}
	pt, err := e.owner(p)
	if err != nil {
		return nil, err
	}
	last := int64(-1)
	for _, r := range recs {
		if r.Offset <= last {
			return nil, fmt.Errorf("engine: arrivals of partition %d: offset %d after %d (offsets must increase)", p, r.Offset, last)
		}
		last = r.Offset
		if dl := r.Env.GetIngressDeadLetter(); dl != nil {
			if err := checkIngressDeadLetter(dl, p, e.n, r.Offset); err != nil {
				return nil, err
			}
			continue
		}
		target := r.Env.GetTarget()
		if m := r.Env.GetMutation(); m != nil {
			if m.GetId() == "" {
				return nil, fmt.Errorf("engine: arrivals of partition %d: the command at offset %d has no mutation id", p, r.Offset)
			}
			target = m.GetTarget()
		}
		if target == nil {
			return nil, fmt.Errorf("engine: arrivals of partition %d: the record at offset %d has no target", p, r.Offset)
		}
		if tp := address.Partition(target.GetId(), e.n); tp != p {
			return nil, fmt.Errorf("engine: arrivals of partition %d: the record at offset %d is for partition %d", p, r.Offset, tp)
		}
	}
	req := &arrivalsReq{reqOf: reqOf{p: pt}, e: e, recs: recs, done: make(chan error, 1)}
	if err := e.submit(req); err != nil {
		return nil, err
	}
	return req.done, nil
}

// arrivalsReq is a run of records of the messages topic for one partition.
type arrivalsReq struct {
	reqOf
	e    *Engine
	recs []Arrival
	// keep is the index of each record Encode wrote into the inbox
	// (skipped commands and dead letters left out); keys their inbox keys.
	keep []int
	keys []partition.InboxKey
	// ids are the mutation ids this request added to the part's commands;
	// ikeys the ingress keys it added to the part's ingressKeys.
	ids   []string
	ikeys []string
	// moves are the read positions this request moved (undone if it
	// fails); skip what it skipped as applied before.
	moves []readMove
	skip  skipping
	done  chan error
}

func (r *arrivalsReq) Encode(b *store.Batch) error {
	if err := r.p.encodable(); err != nil {
		return err
	}
	r.keep, r.keys, r.ids, r.ikeys, r.moves, r.skip = r.keep[:0], r.keys[:0], r.ids[:0], r.ikeys[:0], r.moves[:0], skipping{}
	now := r.e.opts.Now().UnixMilli()
	msgs := readKey{store.MessagesTopic, int32(r.p.id)}
	for i, rec := range r.recs {
		if pos, ok := r.p.readPos[msgs]; ok && pos.Before(rec.Offset, 0) {
			// Applied before: the group's offsets were behind the
			// partition's own position (see readpos.go).
			r.skip.message(rec.Offset, pos.Offset)
			continue
		}
		r.p.advance(msgs, rec.Offset, 0, &r.moves)
		if r.routedBefore(rec.Env) {
			r.skip.ingress++
			continue
		}
		if dl := rec.Env.GetIngressDeadLetter(); dl != nil {
			// Stored, not delivered: its key is the same however often
			// it is encoded (its time came with it).
			d := IngressDeadLetterOf(dl)
			b.PutDeadLetter(&d)
			continue
		}
		k := partition.InboxKey{Partition: r.p.id, Source: SourceMessages, Seq: uint64(rec.Offset)}
		if m := rec.Env.GetMutation(); m != nil {
			seen, err := r.seen(m.GetId())
			if err != nil {
				r.undo()
				return err
			}
			if seen {
				continue
			}
			r.p.commands[m.GetId()] = true
			r.ids = append(r.ids, m.GetId())
			b.PutReceipt(&protocol.Receipt{Mutation: m.GetId(), Status: "accepted", At: now, Target: m.GetTarget(), State: m.GetState(), Partition: proto.Uint32(uint32(r.p.id))})
		}
		if ik := rec.Env.GetIngressKey(); ik != nil {
			deliver, err := r.firstOfKey(b, ik, rec, now)
			if err != nil {
				r.undo()
				return err
			}
			if !deliver {
				continue
			}
		}
		b.PutInbox(r.p.arr.assign(k), rec.Env)
		r.keep = append(r.keep, i)
		r.keys = append(r.keys, k)
	}
	r.p.writeMoves(b, r.moves)
	r.encoded()
	return nil
}

// seen reports whether a command's mutation id was taken before: by this
// assignment (encoded, maybe not durable yet) or by anyone (a receipt in
// the store: accepted, applied or rejected).
func (r *arrivalsReq) seen(id string) (bool, error) {
	if r.p.commands[id] {
		return true, nil
	}
	_, ok, err := r.e.db.Receipt(id)
	return ok, err
}

// undo forgets what an Encode that fails took.
func (r *arrivalsReq) undo() {
	for _, k := range r.keys {
		r.p.arr.forget(k)
	}
	for _, id := range r.ids {
		delete(r.p.commands, id)
	}
	for _, k := range r.ikeys {
		delete(r.p.ingressKeys, k)
	}
	r.p.undoMoves(r.moves)
	r.ikeys, r.moves, r.skip = r.ikeys[:0], r.moves[:0], skipping{}
	r.keep, r.keys, r.ids = r.keep[:0], r.keys[:0], r.ids[:0]
}

func (r *arrivalsReq) Durable() {
	r.settled()
	// The store has the keys and the commands' receipts now; the part's
	// maps hold only those of requests not yet durable, so they do not
	// grow with every key or command (seen finds the receipt).
	for _, k := range r.ikeys {
		delete(r.p.ingressKeys, k)
	}
	for _, id := range r.ids {
		delete(r.p.commands, id)
	}
	commands := false
	for j, i := range r.keep {
		env := r.recs[i].Env
		commands = commands || env.GetMutation() != nil
		r.e.deliverTo(r.p, r.keys[j], env)
	}
	if commands {
		r.e.waiters.receiptsChanged()
	}
	r.e.reportSkipped(r.p, r.skip)
	r.done <- nil
}

func (r *arrivalsReq) Fail(err error) {
	r.settled()
	r.failed(err)
	r.undo()
	r.done <- r.e.stopErr(err)
}

// sweepThroughChangelog is the store's ChangelogSweep in cluster mode:
// the retention deletions of keys partition p's changelog wrote go into
// p's next transaction as tombstones (and reach the store once it
// commits), so that a restore elsewhere does not bring the keys back and
// compaction can drop them. Keys of a partition this node does not own
// now are its owner's to delete: they stay in this node's store, a cache
// of the changelog, until a restore drops or updates them. A sweep whose
// request fails is redone by the next sweep.
func (e *Engine) sweepThroughChangelog(p int, keys [][]byte) {
	if e.closed.Load() {
		return
	}
	pt, err := e.owner(p)
	if err != nil {
		return
	}
	if err := e.submit(&sweepReq{reqOf: reqOf{p: pt}, keys: keys}); err != nil {
		e.log.Debug("retention sweep through the changelog not submitted", "partition", p, "error", err)
	}
}

// sweepReq is a batch of retention deletions of one partition's keys.
type sweepReq struct {
	reqOf
	keys [][]byte
}

func (r *sweepReq) Encode(b *store.Batch) error {
	if r.p.encodable() != nil {
		// Unlike the partition's own work, a sweep is no reason to abort
		// a transaction: skip it, and the next sweep finds the keys again.
		return nil
	}
	for _, k := range r.keys {
		b.DeleteKey(k)
	}
	r.encoded()
	return nil
}

func (r *sweepReq) Durable() { r.settled() }

func (r *sweepReq) Fail(err error) {
	r.settled()
	r.failed(err)
}

// restorePart builds partition p's part from the store, for Assign: as
// restore does for every partition at New, with p's inbox alone (in
// cluster mode a message from another partition arrives through the
// messages topic under a key of its own, so only p's own messages name p
// as their source).
func (e *Engine) restorePart(p int, specs map[address.TypeName][]partition.Spec) (*part, error) {
	var outSeq, maxIngress uint64
	err := e.db.ScanInboxKeys(p, func(k store.InboxKey) error {
		switch {
		case k.Source == store.SourceIngress:
			maxIngress = max(maxIngress, k.Seq)
		case int(k.Source) == p:
			outSeq = max(outSeq, k.Seq+1)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for {
		cur := e.ingressSeq.Load()
		if cur >= maxIngress || e.ingressSeq.CompareAndSwap(cur, maxIngress) {
			break
		}
	}
	pauses, err := loadPauses(e.db, e.n, true)
	if err != nil {
		return nil, err
	}
	pt, stats, err := e.buildPart(p, outSeq, pauses[p], specs, e.opts.Now().UnixMilli())
	if err != nil {
		return nil, err
	}
	if err := pt.loadReadPositions(e.db); err != nil {
		return nil, err
	}
	if stats.messages > 0 || stats.timers > 0 {
		e.log.Info("restored pending messages", "messages", stats.messages, "delayed", stats.timers, "partition", p)
	}
	return pt, nil
}

// ask registers a waiter for a request to part p, posts the event mk
// makes with its id, and returns the waiter, or ErrMoved when p was
// revoked meanwhile (Revoke marks p gone before it answers p's waiters, so
// a waiter registered after that is answered here).
func (e *Engine) ask(p *part, size int, mk func(id uint64) partition.Event) (uint64, chan partition.Reply, error) {
	id, ch := e.waiters.add(p.id)
	p.postSized(mk(id), size)
	if p.gone.Load() {
		e.waiters.drop(id)
		return 0, nil, movedErr(p.id)
	}
	return id, ch, nil
}

// ownedParts lists the parts to ask for an inspection of every
// partition, in partition order: all of them, or with Options.Owned the
// ones owned and taking work now.
func (e *Engine) ownedParts() []*part {
	if e.slots == nil {
		return e.parts
	}
	var out []*part
	for i := range e.slots {
		if p := e.slots[i].Load(); p != nil && p.usable() == nil {
			out = append(out, p)
		}
	}
	return out
}

// Every request the engine submits names its partition.
var (
	_ Request            = (*ingressReq)(nil)
	_ Request            = (*resendReq)(nil)
	_ committer.Answerer = (*partCommit)(nil)
	_ Request            = (*partCommit)(nil)
	_ Request            = (*arrivalsReq)(nil)
	_ Request            = (*sweepReq)(nil)
	_ Request            = (*sourceReq)(nil)
	_ Request            = (*popReq)(nil)
	_ Request            = (*ackReq)(nil)
	_ Durability         = (*committer.Committer)(nil)
)

// Command is the messages-topic form of an operator mutation (cluster
// mode): the envelope whose Mutation carries everything the owner's core
// needs to apply it at its turn, with its id, so that SubmitArrivals
// applies it once however often it is produced. m.Request and m.Ack belong
// to the caller waiting on this node and do not travel.
func Command(m partition.Mutation) *protocol.Envelope {
	return &protocol.Envelope{Mutation: mutationToProto(m)}
}
