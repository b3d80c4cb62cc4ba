package session

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/statefun-go/statefun/internal/cluster/changelog"
	"github.com/statefun-go/statefun/internal/cluster/cycle"
)

// eventKind is what happened to partitions, told by a group callback or a
// restore to Run's goroutine.
type eventKind int

const (
	evAssigned eventKind = iota
	evRevoked
	evLost
	evRestored
)

// event is one thing for Run's goroutine to act on, in order.
type event struct {
	kind  eventKind
	parts []int32

	// evRestored:
	p    int32
	gen  uint64
	log  *changelog.Log
	res  changelog.Result
	at   cycle.Resume
	err  error
	took time.Duration
}

func (s *Session) post(ev event) {
	s.mu.Lock()
	s.events = append(s.events, ev)
	s.mu.Unlock()
	s.signal()
}

func (s *Session) ownParts(m map[string][]int32) []int32 {
	ps := slices.Clone(m[s.msgs])
	slices.Sort(ps)
	return ps
}

// onAssigned runs on the group's goroutine. The new partitions are paused
// at once, before their offsets are fetched, so that no record of theirs
// is polled before they are restored; Run's goroutine does the rest. The
// callback returns quickly: a restore inside it would hold up the group's
// next rebalance and could cost the node its membership.
func (s *Session) onAssigned(_ context.Context, cl *kgo.Client, m map[string][]int32) {
	s.joined.Store(true)
	ps := s.ownParts(m)
	if len(ps) == 0 {
		return
	}
	cl.PauseFetchPartitions(map[string][]int32{s.msgs: ps})
	s.restoring.Add(int64(len(ps)))
	s.post(event{kind: evAssigned, parts: ps})
}

// onRevoked runs on the group's goroutine, with the session's lock held:
// the open transaction, if it commits offsets, will abort (the
// GroupTransactSession saw a revocation; one without offsets commits, see
// endWithoutOffsets). Calling into the engine or ending the transaction here
// would race Run's goroutine or deadlock; Run drops the partitions before
// it encodes anything more.
//
// An event is posted for a revocation of ingress partitions alone too
// (with no partitions of its own): the group transact session hears no
// further revocation until its End runs, and a node whose transactions
// commit no offsets (endWithoutOffsets) would not run one, so Run must
// rearm it (rearmRevocations).
func (s *Session) onRevoked(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	s.forgetStarts(m)
	if anyPartition(m) {
		s.post(event{kind: evRevoked, parts: s.ownParts(m)})
	}
}

func anyPartition(m map[string][]int32) bool {
	for _, ps := range m {
		if len(ps) > 0 {
			return true
		}
	}
	return false
}

// onLost is onRevoked for partitions lost without a clean revocation (the
// session timed out, the member was fenced).
func (s *Session) onLost(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	s.forgetStarts(m)
	if anyPartition(m) {
		s.post(event{kind: evLost, parts: s.ownParts(m)})
	}
}

// handleEvents acts on the events posted since the last call, in order.
func (s *Session) handleEvents(rctx context.Context) error {
	s.mu.Lock()
	evs := s.events
	s.events = nil
	s.mu.Unlock()
	for _, ev := range evs {
		switch ev.kind {
		case evAssigned:
			s.m.rebalances.WithLabelValues("assigned").Inc()
			s.log.Info("cluster: partitions assigned; restoring", "partitions", ev.parts)
			drops, restores := s.cyc.Assigned(ev.parts)
			for _, d := range drops {
				// Assigned again before its revocation was seen:
				// start over.
				s.drop(d, "reassigned")
			}
			for _, r := range restores {
				s.parts[r.P] = &part{}
				s.owned.Add(1)
				s.m.owned.Inc()
				s.m.restoring.Inc() // s.restoring counted it in onAssigned
				s.startRestore(rctx, r)
			}
		case evRevoked, evLost:
			kind := "revoked"
			if ev.kind == evLost {
				kind = "lost"
			}
			drops := s.cyc.Revoked(ev.parts)
			if len(ev.parts) == 0 {
				continue // ingress partitions only: nothing of ours to drop
			}
			s.m.rebalances.WithLabelValues(kind).Inc()
			s.log.Info("cluster: partitions "+kind, "partitions", ev.parts)
			for _, d := range drops {
				s.drop(d, kind)
			}
		case evRestored:
			if err := s.restored(rctx, ev); err != nil {
				return err
			}
		}
	}
	s.m.full.Set(float64(len(s.cyc.Paused())))
	s.publishParts()
	return nil
}

// rearmRevocations ends the group transact session's "transaction" after
// a revocation or loss when no transaction ran since. The session reports
// a revocation (and a loss) to onRevoked (onLost) only once until its End
// runs: a node that commits nothing between two revocations — idle while
// nodes join one after the other — would not hear the second, and would
// go on serving partitions the group gave to another node. An End outside
// a transaction aborts nothing; it runs at the top of a cycle, when no
// polled record waits for its commit (the end resets the fetch positions
// to the committed offsets).
func (s *Session) rearmRevocations(ctx context.Context) error {
	if !s.cyc.Rearm() {
		return nil
	}
	if _, err := s.gts.End(ctx, kgo.TryAbort); err != nil && ctx.Err() == nil {
		return fmt.Errorf("cluster: session: ending the session's state after a revocation: %w", err)
	}
	s.reseek()
	return nil
}

// drop stops serving partition d.P, as the Machine decided: its restore
// is cancelled, or the engine revokes it; its waiting requests fail with
// ErrMoved. Its store data stays, a warm cache valid up to its recorded
// position. Its fetching stays paused or not as it is: the group no
// longer assigns it, and a later assignment pauses it again first.
func (s *Session) drop(d cycle.Drop, why string) {
	p := d.P
	pt := s.parts[p]
	if pt == nil {
		return
	}
	delete(s.parts, p)
	if pt.cancel != nil {
		pt.cancel()
	}
	if d.Serving {
		s.eng.Revoke(int(p))
	} else {
		s.restoring.Add(-1)
		s.m.restoring.Dec()
	}
	s.owned.Add(-1)
	s.m.owned.Dec()
	s.m.lag.DeleteLabelValues(label(p))
	s.m.restoreRem.DeleteLabelValues(label(p))
	s.purge(p, s.moved(p, why))
}

// rebuild makes the engine rebuild partition r.P from the store after an
// aborted transaction, as the Machine decided: its core moved past work
// that will never commit. The partition is revoked from the engine, its
// waiting requests fail with ErrAborted, its fetching pauses, and it is
// restored and assigned again as on an assignment (the restore reads only
// the aborted tail). A partition whose own work made the transaction abort
// (r.Strikes > 0) is restored after the Machine's back-off, and the abort
// is logged at ERROR.
func (s *Session) rebuild(rctx context.Context, r cycle.Restore, cause error) {
	p := r.P
	pt := s.parts[p]
	if pt == nil || pt.log == nil {
		return
	}
	s.gts.Client().PauseFetchPartitions(map[string][]int32{s.msgs: {p}})
	s.eng.Revoke(int(p))
	pt.log = nil
	s.restoring.Add(1)
	s.m.restoring.Inc()
	s.m.lag.DeleteLabelValues(label(p))
	s.purge(p, s.aborted(cause))
	if r.Strikes > 0 {
		s.m.culprits.Inc()
		s.log.Error("cluster: a transaction was aborted by this partition's own work (see the error before); the partition is rebuilt after a back-off, the others go on",
			"partition", p, "aborts_in_a_row", r.Strikes, "retry_in", r.After)
	}
	s.startRestore(rctx, r)
}

// startRestore starts the restore r in the background, after its wait; the
// result comes back as an evRestored event.
func (s *Session) startRestore(rctx context.Context, r cycle.Restore) {
	p := r.P
	pt := s.parts[p]
	if !r.Retry {
		pt.started = time.Now()
	}
	ctx, cancel := context.WithCancel(rctx)
	pt.cancel = cancel
	s.restoreWG.Add(1)
	go func() {
		defer s.restoreWG.Done()
		ev := event{kind: evRestored, p: p, gen: r.Gen}
		if r.After > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(r.After):
			}
		}
		select {
		case s.restoreSem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		ev.log, ev.res, ev.err = s.restore(ctx, p)
		if ev.err == nil {
			ev.at, ev.err = s.storedResume(ctx, p)
		}
		<-s.restoreSem
		if ctx.Err() != nil {
			return // dropped, or the session stops
		}
		s.post(ev)
	}()
}

// restored acts on a finished restore, as the Machine decides: a stale one
// is ignored, a failed one retried; otherwise the engine builds the core,
// and fetching resumes unless its queue is full.
func (s *Session) restored(rctx context.Context, ev event) error {
	what, again := s.cyc.Restored(ev.p, ev.gen, ev.err != nil)
	if what == cycle.Stale {
		return nil
	}
	pt := s.parts[ev.p]
	pt.cancel()
	pt.cancel = nil
	if what == cycle.RestoreAgain {
		s.m.restoreErr.Inc()
		s.log.Warn("cluster: restore failed; retrying", "partition", ev.p, "in", again.After, "err", ev.err)
		s.startRestore(rctx, again)
		return nil
	}
	if err := s.eng.Assign(int(ev.p)); err != nil {
		return fmt.Errorf("cluster: session: the engine could not take partition %d after its restore: %w", ev.p, err)
	}
	s.applyResume(ev.p, ev.at)
	pt.log = ev.log
	s.restoring.Add(-1)
	s.m.restoring.Dec()
	s.m.restoreRem.DeleteLabelValues(label(ev.p))
	took := time.Since(pt.started)
	s.m.restoreDur.Observe(took.Seconds())
	attrs := []any{"partition", ev.p, "from", ev.res.From, "to", ev.res.To, "records", ev.res.Records, "took", took}
	if ev.res.Dropped != "" {
		attrs = append(attrs, "dropped", ev.res.Dropped, "dropped_keys", ev.res.DroppedKeys)
	}
	s.log.Info("cluster: partition restored; serving", attrs...)
	// Restored with a full queue: fetching stays paused until it drains
	// (resumeDrained).
	if s.cyc.Serving(ev.p, s.eng.Full(int(ev.p))) {
		s.gts.Client().ResumeFetchPartitions(map[string][]int32{s.msgs: {ev.p}})
	}
	return nil
}

// restore brings partition p's store data to the end of its changelog.
//
// It first waits until no transaction is open on the changelog partition
// (its last stable offset reached its end). The node does not write p's
// changelog before p serves, so an open transaction there is another
// node's: the former owner's last commit, whose offset commit passed
// the group's fence before the group moved on. Restoring only up to the
// last stable offset would miss that transaction when it commits a moment
// later. A transaction that has not passed the fence by then cannot commit
// (see commit), so once the changelog is stable nobody but this node adds
// to it.
func (s *Session) restore(ctx context.Context, p int32) (*changelog.Log, changelog.Result, error) {
	if err := s.awaitStable(ctx, p); err != nil {
		return nil, changelog.Result{}, err
	}
	var applied int64
	return changelog.Restore(ctx, changelog.Config{
		DB:           s.cfg.DB,
		Brokers:      s.cfg.Cluster.Brokers,
		ClientOpts:   append(append([]kgo.Opt(nil), s.cl.Opts...), s.cfg.ClientOpts...),
		Topic:        s.clog,
		Partition:    p,
		BatchRecords: s.cfg.RestoreBatchRecords,
		Progress: func(pr changelog.Progress) {
			s.m.restoreRec.Add(float64(pr.Applied - applied))
			applied = pr.Applied
			s.m.restoreRem.WithLabelValues(label(p)).Set(float64(max(pr.Target-(pr.Offset-pr.From), 0)))
		},
	})
}

// awaitStable waits until the changelog partition p has no open
// transaction: its last stable offset equals its end offset.
func (s *Session) awaitStable(ctx context.Context, p int32) error {
	adm := kadm.NewClient(s.gts.Client())
	backoff := 10 * time.Millisecond
	for {
		end, err := adm.ListEndOffsets(ctx, s.clog)
		var stable kadm.ListedOffsets
		if err == nil {
			stable, err = adm.ListCommittedOffsets(ctx, s.clog)
		}
		if err == nil {
			e, eok := end.Lookup(s.clog, p)
			st, sok := stable.Lookup(s.clog, p)
			switch {
			case !eok || !sok:
				err = fmt.Errorf("no offsets listed for partition %d of %s", p, s.clog)
			case e.Err != nil:
				err = e.Err
			case st.Err != nil:
				err = st.Err
			case st.Offset >= e.Offset:
				return nil
			}
		}
		if err != nil && ctx.Err() == nil {
			s.log.Debug("cluster: listing changelog offsets before a restore", "partition", p, "err", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: restore of partition %d: waiting for open transactions on %s to end: %w", p, s.clog, errors.Join(ctx.Err(), err))
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}
