package jobs

import (
	"fmt"
	"math"
	"strings"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// revert undoes the writes of the job it names, a page of audit records
// at a time, in the audit log's order; the cursor is the last record
// undone. Each entry is set back to its before-image on the condition
// that it still holds the version the job wrote (no value, for a
// deletion): an entry changed since is a conflict, listed and left alone.
func (rn *run) revert() error {
	m := rn.m
	principal, created := rn.rec.RevertsPrincipal, rn.rec.RevertsCreatedAt
	if created == nil {
		// A revert of an earlier build names only the job it reverts.
		m.mu.Lock()
		target, ok := m.jobs[rn.rec.Reverts]
		if ok {
			principal, created = target.Principal, &target.CreatedAt
		}
		m.mu.Unlock()
		if !ok {
			return fmt.Errorf("jobs: job %s, which this one reverts, is no longer kept", rn.rec.Reverts)
		}
	}
	from := created.UnixMilli() - replaySlack.Milliseconds()
	replay := true
	for {
		items, more, err := rn.nextWrites(principal, from)
		if err != nil {
			return err
		}
		if len(items) == 0 {
			return nil
		}
		if !rn.runPage(items, replay, rn.undo) {
			return nil
		}
		replay = false
		a := items[len(items)-1].audit
		if err := rn.advance(Cursor{At: a.GetAt(), Mutation: a.GetMutation(), State: a.GetState()}); err != nil {
			return err
		}
		if !more {
			return nil
		}
	}
}

// nextWrites reads the next page of the reverted job's audit records
// after the cursor.
func (rn *run) nextWrites(principal string, from int64) (items []item, more bool, err error) {
	cur := rn.rec.Cursor
	if cur.Mutation != "" {
		from = max(from, cur.At)
	}
	marker := Marker(rn.rec.Reverts)
	err = rn.store().ScanAuditFiltered(store.AuditFilter{From: from, To: math.MaxInt64, Principal: principal},
		func(a *protocol.AuditRecord) bool {
			if !strings.Contains(a.GetMutation(), marker) || !afterCursor(a, cur) {
				return true
			}
			if len(items) == pageSize {
				more = true
				return false
			}
			t := a.GetTarget()
			items = append(items, item{addr: address.Address{Type: address.TypeName{Namespace: t.GetNamespace(), Name: t.GetType()}, ID: t.GetId()},
				state: a.GetState(), audit: a})
			return true
		})
	return items, more, err
}

// afterCursor reports whether a comes after the cursor in the audit log's
// order (time, mutation id, state).
func afterCursor(a *protocol.AuditRecord, c Cursor) bool {
	if c.Mutation == "" {
		return true
	}
	if a.GetAt() != c.At {
		return a.GetAt() > c.At
	}
	if a.GetMutation() != c.Mutation {
		return a.GetMutation() > c.Mutation
	}
	return a.GetState() > c.State
}

// undo sets one entry back to the before-image of the job's write.
func (rn *run) undo(it item, replay bool) error {
	rn.count(func(p *pageState) { p.counts.Scanned++; p.counts.Matched++ })
	if replay && !rn.m.cfg.IdempotentWrites {
		done, err := rn.wroteBefore(it)
		if err != nil {
			return err
		}
		if done {
			rn.count(func(p *pageState) { p.counts.Changed++ })
			return nil
		}
	}
	a := it.audit
	mu := partition.Mutation{ID: rn.mutationID(it, 0), Addr: it.addr, State: it.state, Principal: rn.rec.Principal,
		Reason: rn.reason(), Reverts: a.GetMutation(), Ack: partition.AckApplied}
	if a.GetHadBefore() {
		mu.Op, mu.Typename, mu.Value = partition.OpPut, a.GetBeforeTypename(), a.GetBeforeValue()
	} else {
		mu.Op = partition.OpDelete
	}
	if a.GetVersion() != 0 {
		mu.IfMatch = a.GetVersion()
	} else {
		mu.IfNoneMatch = true
	}
	rc, err := rn.mutate(mu, true)
	if err != nil {
		return err
	}
	switch rc.Reject {
	case partition.Applied:
		rn.applied(it.addr, rc)
		rn.count(func(p *pageState) { p.counts.Changed++ })
	case partition.RejectPrecondition, partition.RejectNotFound:
		rn.count(func(p *pageState) {
			p.counts.Conflicts++
			p.conflicts = appendListed(p.conflicts, problem(it, rc.Version, "changed since the job wrote it: left as it is", mu.ID))
		})
	default:
		rn.count(func(p *pageState) {
			p.counts.Failed++
			p.failures = appendListed(p.failures, problem(it, rc.Version, rejectDetail(rc, mu.Typename), mu.ID))
		})
	}
	return nil
}
