package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// SourceBatch is what an ingress reading an external, replayable source (a
// Kafka topic partition) makes durable at once: the messages made from a
// run of records of one source partition, the records among them it could
// not deliver, and the position after the last record.
type SourceBatch struct {
	// Position is the source partition and the offset of the first record
	// after the batch.
	Position store.SourcePosition
	// Messages go to their targets (they may be in several engine
	// partitions), delivered in this order.
	Messages []*protocol.Envelope
	// DeadLetters are stored beside the position (their At is set by the
	// engine).
	DeadLetters []store.DeadLetter
}

// IngestFrom makes a source batch durable in one synced group commit — the
// messages, the dead letters and the position together, so after a crash
// either all are in the store or none — and then delivers the messages in
// order. It returns once the batch is durable. It refuses the whole batch,
// writing nothing, with ErrBusy when any target partition is full (or a
// *BusyError when Options.Admit says no), so the caller retries the same
// batch later. A batch with neither messages nor dead letters only moves
// the position and is never refused as busy.
func (e *Engine) IngestFrom(ctx context.Context, b SourceBatch) error {
	req, err := e.ingestFrom(b)
	if err != nil {
		return err
	}
	select {
	case err := <-req.done:
		if err == nil {
			e.m.ingressed.Add(float64(len(b.Messages)))
		}
		return err
	case <-ctx.Done():
		// Durable or not, the batch is written or refused as a whole; the
		// caller only stops waiting (the stored position says which).
		return ctx.Err()
	}
}

// SourcePositions returns the stored positions of an ingress's source
// partitions (see IngestFrom).
func (e *Engine) SourcePositions(ingress string) ([]store.SourcePosition, error) {
	if e.closed.Load() {
		return nil, ErrClosed
	}
	return e.db.SourcePositions(ingress)
}

// ingestFrom admits a source batch and hands it to the committer.
func (e *Engine) ingestFrom(b SourceBatch) (*sourceReq, error) {
	if e.closed.Load() {
		return nil, ErrClosed
	}
	if e.opts.Owned {
		return nil, errors.New("engine: IngestFrom is not available in cluster mode: the cluster session consumes the Kafka ingress topics and routes their records through the messages topic")
	}
	if b.Position.Partition < 0 || b.Position.Next < 0 || b.Position.Ingress == "" {
		return nil, fmt.Errorf("engine: bad source position %+v", b.Position)
	}
	for i := range b.DeadLetters {
		if d := &b.DeadLetters[i]; d.Partition < 0 || d.Offset < 0 {
			return nil, fmt.Errorf("engine: bad dead letter at partition %d offset %d", d.Partition, d.Offset)
		}
	}
	if len(b.Messages) > 0 || len(b.DeadLetters) > 0 {
		if err := e.admit(); err != nil {
			e.m.ingressRejected.Add(float64(len(b.Messages)))
			return nil, err
		}
	}
	keys := make([]partition.InboxKey, len(b.Messages))
	parts := make([]*part, len(b.Messages))
	seen := map[int]bool{}
	for i, env := range b.Messages {
		if env.GetTarget() == nil {
			return nil, errors.New("engine: a source message without a target")
		}
		p := address.Partition(env.GetTarget().GetId(), e.n)
		parts[i] = e.parts[p]
		if !seen[p] {
			seen[p] = true
			if e.full(e.parts[p]) {
				e.m.ingressRejected.Add(float64(len(b.Messages)))
				return nil, ErrBusy
			}
		}
		keys[i] = partition.InboxKey{Partition: p}
	}
	for i := range keys {
		keys[i].Source = partition.SourceIngress
		keys[i].Seq = e.ingressSeq.Add(1)
	}
	at := e.opts.Now().UnixMilli()
	for i := range b.DeadLetters {
		b.DeadLetters[i].At = at
	}
	req := &sourceReq{halt: e.halt, b: b, keys: keys, parts: parts, done: make(chan error, 1)}
	if err := e.submit(req); err != nil {
		return nil, err
	}
	return req, nil
}

// sourceReq is a source batch: its messages, dead letters and position in
// one group commit (one request is encoded into one batch as a whole, or
// not at all).
type sourceReq struct {
	halt  *halt
	b     SourceBatch
	keys  []partition.InboxKey
	parts []*part // each message's
	done  chan error
}

// Partition is -1: a source batch writes to many partitions and to the
// source's position, which cluster mode does not log (it refuses
// IngestFrom).
func (r *sourceReq) Partition() int { return -1 }

func (r *sourceReq) Encode(b *store.Batch) error {
	for i, env := range r.b.Messages {
		b.PutInbox(r.parts[i].arr.assign(r.keys[i]), env)
	}
	for i := range r.b.DeadLetters {
		b.PutDeadLetter(&r.b.DeadLetters[i])
	}
	b.PutSourcePosition(r.b.Position)
	return nil
}

func (r *sourceReq) Durable() {
	for i, env := range r.b.Messages {
		deliverTo(r.parts[i], r.keys[i], env)
	}
	r.done <- nil
}

func (r *sourceReq) Fail(err error) {
	for i, k := range r.keys {
		r.parts[i].arr.forget(k)
	}
	r.done <- r.halt.errOf(err)
}

// IngestFrom starts Engine.IngestFrom: refusals (ErrBusy) are answered at
// once; otherwise the future is done once the batch is durable (after a
// Commit).
func (d *Driver) IngestFrom(b SourceBatch) (*Future, error) {
	req, err := d.e.ingestFrom(b)
	if err != nil {
		return nil, err
	}
	return &Future{poll: func() (partition.Receipt, bool, error) {
		select {
		case err := <-req.done:
			return partition.Receipt{}, true, err
		default:
			return partition.Receipt{}, false, nil
		}
	}}, nil
}
