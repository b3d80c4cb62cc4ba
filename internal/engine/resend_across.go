package engine

import (
	"context"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// A re-send of a message dead letter to an address of another partition,
// in cluster mode (docs/explanation/cluster.md, "A re-send to another partition").
//
// The dead letter is a key its address's partition (the source) wrote, so
// the source's changelog must carry its removal; the message, its receipt
// and its audit record name the target, so they belong in the target's
// partition, where reads of the target look. One transaction cannot write
// into another partition's changelog, but it can produce to the messages
// topic: the source's commit removes the dead letter and produces, in the
// same transaction, the re-send as a command for the target
// (partition.OpResendMessage, with the message and the dead letter's id).
// The target's owner takes the command like any other (SubmitArrivals:
// once per mutation id) and its core queues the message at the end of the
// target's inbox and writes the receipt and the audit record. Both halves
// are in committed transactions or neither is, so the message is sent once
// and the dead letter cannot come back with a restore of the source.

// resendAcross sends env, the message of dead letter r.DeadLetter (whose
// address is from), to its target in another partition, as above. It
// returns once the source's commit is durable.
func (e *Engine) resendAcross(ctx context.Context, r ResendRequest, from address.Address, env *protocol.Envelope) (partition.Receipt, partition.InboxKey, error) {
	p, err := e.partOf(from)
	if err != nil {
		return partition.Receipt{}, partition.InboxKey{}, err
	}
	target := fromProtoAddr(env.GetTarget())
	m := partition.Mutation{ID: r.Mutation, Addr: target, Op: partition.OpResendMessage, Principal: r.Principal, Reason: r.Reason,
		Reverts: r.DeadLetter, Repair: &partition.MessageRepair{Messages: []*protocol.Envelope{env}}}
	req := &resendAcrossReq{reqOf: reqOf{p: p}, out: e.opts.Outbound, halt: e.halt, deadLetter: r.DeadLetter, to: address.Partition(target.ID, e.n),
		cmd: Command(m), done: make(chan error, 1)}
	if err := e.submitAndWait(ctx, req, req.done); err != nil {
		return partition.Receipt{}, partition.InboxKey{}, err
	}
	return partition.Receipt{Mutation: r.Mutation, Addr: target, Ack: AckAccepted, At: e.opts.Now().UnixMilli()}, partition.InboxKey{}, nil
}

// resendAcrossReq is the source partition's half of a re-send to another
// partition: the dead letter's removal, and the command to the target's
// partition in the same transaction.
type resendAcrossReq struct {
	reqOf
	out        Outbound
	halt       *halt
	deadLetter string
	to         int
	cmd        *protocol.Envelope
	done       chan error
}

func (r *resendAcrossReq) Encode(b *store.Batch) error {
	if err := r.p.encodable(); err != nil {
		return err
	}
	b.DeleteMessageDeadLetter(r.deadLetter)
	// After the batch's writes, as a partition commit hands its messages
	// over: an error fails this Encode, and the transaction must not
	// commit.
	if err := r.out.Message(partition.InboxKey{Partition: r.to, Source: uint32(r.p.id)}, r.cmd); err != nil {
		return err
	}
	r.encoded()
	return nil
}

func (r *resendAcrossReq) Durable() {
	r.settled()
	r.done <- nil
}

func (r *resendAcrossReq) Fail(err error) {
	r.settled()
	r.failed(err)
	r.done <- r.halt.errOf(err)
}

var _ Request = (*resendAcrossReq)(nil)
