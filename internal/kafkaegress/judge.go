package kafkaegress

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Whose marker is it?
//
// At start the exactly-once relay reads back the last position marker of
// its transactional id and, if it is this store's, removes from the outbox
// what the marker says Kafka has (a crash may have come between Kafka's
// commit and the local removal). Removing records on the word of a marker
// that is not this store's would drop them unsent: a new data directory
// numbers its records from 1 again, and a restored one numbers anew from
// its backup's position. So judge accepts a marker only when it can prove
// it this store's, and otherwise refuses, the same way at every retry
// (nothing in the proof changes as the store writes more), until an
// operator resolves it:
//
//   - a marker with this store's identity: the records still in the outbox
//     at or below its position must be exactly the batch it records (count
//     and digest), which are then removed; with none left, the store must
//     have written that position (a restored copy of the store may not
//     have);
//   - a marker of a store this one was restored from (a backup of it:
//     store.DB.SharedWith): the two stores share their records up to the
//     egress position the backup held, so the marker proves delivery of
//     those up to the lesser of the two positions, which are removed;
//     delivery resumes after it, and every position above the shared ones
//     is this store's own, never skipped on the ancestor's word;
//   - a marker with another store's identity: refused;
//   - a marker without an identity (an older build wrote it): accepted only
//     up to the positions this store wrote before it had an identity, as
//     that build did; above them, refused.
//
// The operator's ways out: delete the marker (a tombstone), give the
// egress a new transactional id, or name the marker in
// Config.ResetMarker (--kafka-egress-reset-marker), which makes the relay
// write a marker of this store in its place and deliver the outbox from
// its oldest record.

// MarkerRefusedError is why an exactly-once relay does not deliver: the
// last position marker of its transactional id is not provably this
// store's.
type MarkerRefusedError struct {
	// Egress and TransactionalID say whose marker it is.
	Egress, TransactionalID string
	// MarkerTopic is where it is.
	MarkerTopic string
	// Marker names it, as --kafka-egress-reset-marker takes it.
	Marker MarkerRef
	// Why says what does not match.
	Why string
}

func (e *MarkerRefusedError) Error() string {
	return fmt.Sprintf("the position marker of transactional id %s (key %q in topic %s) is not this store's: %s. Delivering on its word could skip this store's records, so nothing is delivered. "+
		"To deliver this store's whole outbox and replace the marker, restart with --kafka-egress-reset-marker=%s=%s; or give the egress its own transactional.id; or delete the marker record if the store that wrote it is gone for good (docs/reference/kafka-egress.md)",
		e.TransactionalID, e.TransactionalID, e.MarkerTopic, e.Why, e.Egress, e.Marker)
}

// judge decides whether m is this store's marker (or its ancestor's); if
// it is, it removes from the outbox the records at or below m.Position
// that Kafka has, and returns the position delivery resumes after. It
// returns a *MarkerRefusedError when m is not provably this store's.
func (r *Relay) judge(ctx context.Context, out Outbox, m *marker) (uint64, error) {
	if err := r.judgeOwn(ctx, out, m); err != errAncestor {
		return m.Position, err
	}
	shared, _ := r.cfg.Store.SharedWith(m.Store)
	through := min(m.Position, shared)
	r.log.Warn("kafka egress: taking the position marker of the store this one was restored from (a backup) as proof of delivery of the records the two share; this store's own records after them are delivered",
		"marker", m.ref().String(), "transactional_id", r.cfg.TransactionalID, "store", r.cfg.Store.ID(),
		"shared_through", shared, "delivered_through", through)
	return through, r.ackThrough(ctx, out, through)
}

// errAncestor is judgeOwn's answer for a marker of an ancestor.
var errAncestor = errors.New("kafkaegress: an ancestor's marker")

func (r *Relay) judgeOwn(ctx context.Context, out Outbox, m *marker) error {
	st := r.cfg.Store
	refuse := func(format string, args ...any) error {
		return &MarkerRefusedError{Egress: r.cfg.ID, TransactionalID: r.cfg.TransactionalID, MarkerTopic: r.cfg.MarkerTopic,
			Marker: m.ref(), Why: fmt.Sprintf(format, args...)}
	}
	switch m.Store {
	case st.ID():
	case "":
		if pre := st.PreIDEgressSeq(); m.Position > pre {
			return refuse("it carries no store identity (an older build wrote it) and its position %d is above the %d positions this store wrote before it had an identity",
				m.Position, pre)
		}
		r.log.Warn("kafka egress: taking a position marker without a store identity (written by an older build) as this store's, as that build did: its position is within what this store wrote before it had an identity",
			"marker", m.ref().String(), "transactional_id", r.cfg.TransactionalID)
		return r.ackThrough(ctx, out, m.Position)
	default:
		if _, ok := st.SharedWith(m.Store); ok {
			return errAncestor
		}
		return refuse("store %s wrote it, and this is store %s (a new or another data directory, or another runtime with the same transactional id)", m.Store, st.ID())
	}
	// This store's identity: check what is left at or below the marker.
	dg := newDigest()
	var after uint64
	for {
		items, err := out.ReadEgressBatch(ctx, r.cfg.ID, r.cfg.ID, after, r.cfg.BatchRecords)
		if err != nil {
			return fmt.Errorf("reading the outbox: %w", err)
		}
		done := len(items) == 0
		for _, it := range items {
			if it.Pos > m.Position || dg.n > m.Records {
				done = true
				break
			}
			dg.add(it.Pos, it.Record)
			after = it.Pos
		}
		if done {
			break
		}
	}
	if dg.n == 0 {
		written, err := st.MaxEgressSeq()
		if err != nil {
			return err
		}
		if m.Position > written {
			return refuse("this store wrote positions up to %d only, below the marker's %d: it is an older copy of the store that wrote the marker (a copy of its data directory, not restored from a statefun backup)", written, m.Position)
		}
		return nil // Kafka has everything at or below it, and so does the outbox's removal
	}
	if dg.n != m.Records || dg.sum() != m.Digest {
		return refuse("the %d records at or below position %d in this store's outbox are not the %d records of the batch the marker ends (positions %d to %d): this is a copy of the store that wrote the marker (a copy of its data directory, not restored from a statefun backup) holding other records",
			dg.n, m.Position, m.Records, m.After+1, m.Position)
	}
	// The batch whose local removal a crash lost: Kafka has it.
	if err := out.AckEgress(ctx, r.cfg.ID, r.cfg.ID, m.Position); err != nil {
		return fmt.Errorf("removing the records up to position %d, which Kafka has: %w", m.Position, err)
	}
	return nil
}

// reset replaces m, a marker the operator named in Config.ResetMarker, by
// a marker of this store at position 0, in a transaction of its own; the
// relay then delivers the outbox from its oldest record.
func (r *Relay) reset(ctx context.Context, cl *kgo.Client, out Outbox, m *marker) error {
	pending := 0
	var after uint64
	for {
		items, err := out.ReadEgressBatch(ctx, r.cfg.ID, r.cfg.ID, after, r.cfg.BatchRecords)
		if err != nil {
			return fmt.Errorf("reading the outbox: %w", err)
		}
		if len(items) == 0 {
			break
		}
		pending += len(items)
		after = items[len(items)-1].Pos
	}
	at := time.Now().UTC()
	note := &resetNote{Replaced: m.ref().String(), At: at, By: r.cfg.Operator}
	if err := r.deliverTxn(ctx, cl, nil, marker{Reset: note}); err != nil {
		return fmt.Errorf("replacing the marker %s: %w", m.ref(), err)
	}
	r.log.Warn("kafka egress: replaced another store's position marker on the operator's word (--kafka-egress-reset-marker); delivering this store's outbox from its oldest record",
		"replaced_marker", m.ref().String(), "transactional_id", r.cfg.TransactionalID, "store", r.cfg.Store.ID(),
		"outbox_records", pending, "at", at.Format(time.RFC3339), "by", r.cfg.Operator)
	return nil
}
