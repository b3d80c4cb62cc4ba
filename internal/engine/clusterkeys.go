package engine

import (
	"bytes"
	"fmt"
	"strconv"

	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// firstOfKey decides, in cluster mode, whether an ingress message that
// carries an Idempotency-Key is delivered: the first message of its key
// (in its scope, the target address) is, and its key is written with it
// into the partition's batch — the changelog, so the key moves with the
// partition — as embedded mode writes it with the message. A repeat with
// the same fingerprint (a client's retry, whose first attempt Kafka had
// acknowledged) is dropped and counted as replayed. A repeat with another
// fingerprint is a key reused for a different request, which embedded
// mode refuses with 422 before anything is written; here the ingress had
// answered 200 already, so the message is not dropped but kept as a
// message dead letter, visible and re-sendable, and counted.
func (r *arrivalsReq) firstOfKey(b *store.Batch, ik *protocol.IngressKey, rec Arrival, now int64) (bool, error) {
	name := ik.GetScope() + "\x00" + ik.GetKey()
	prev, seen := r.p.ingressKeys[name]
	if !seen {
		stored, ok, err := r.e.db.Idempotency(ik.GetScope(), ik.GetKey())
		if err != nil {
			return false, err
		}
		prev, seen = stored.Fingerprint, ok
	}
	if !seen {
		b.PutIdempotency(ik.GetScope(), ik.GetKey(), store.IdempotencyRecord{At: now, Fingerprint: ik.GetFingerprint()})
		r.p.ingressKeys[name] = ik.GetFingerprint()
		r.ikeys = append(r.ikeys, name)
		return true, nil
	}
	if bytes.Equal(prev, ik.GetFingerprint()) {
		r.e.m.ingressReplayed.Inc()
		return false, nil
	}
	// The dead letter's id sorts by time, as skips' mutation ids do, and
	// is the same whenever this record is encoded.
	id := fmt.Sprintf("%s-ingress-%d-%d", strconv.FormatInt(max(now, 0), 36), r.p.id, rec.Offset)
	b.PutMessageDeadLetter(&protocol.MessageDeadLetter{
		Id: id, At: now, Envelope: rec.Env,
		InboxKey:  FormatInboxKey(partition.InboxKey{Partition: r.p.id, Source: SourceMessages, Seq: uint64(rec.Offset)}),
		Principal: "ingress",
		Reason: fmt.Sprintf("the Idempotency-Key %q was used before for %s by a different request (method, path, Content-Type or body); "+
			"not delivered, as embedded mode would have refused it with 422", ik.GetKey(), ik.GetScope()),
	})
	r.e.m.ingressKeyReuse.Inc()
	r.e.log.Warn("cluster: an ingress message reused an Idempotency-Key for a different request; kept as a message dead letter",
		"scope", ik.GetScope(), "key", ik.GetKey(), "deadLetter", id)
	return false, nil
}
