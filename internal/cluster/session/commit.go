package session

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/statefun-go/statefun/internal/cluster/changelog"
	"github.com/statefun-go/statefun/internal/cluster/cycle"
	"github.com/statefun-go/statefun/internal/engine/committer"
	"github.com/statefun-go/statefun/internal/kafkatxn"
	"github.com/statefun-go/statefun/internal/store"
)

// polled is what one cycle polled.
type polled struct {
	ingress []*kgo.Record // records of the ingress topics, in poll order
}

// poll polls records of the messages topic and the ingress topics until
// the transaction is due (the Machine's PollFor: at once when work waits
// and the previous transaction is a gap behind; after the commit interval
// when nothing waits), enough records were polled or requests are
// waiting, or an event needs Run's goroutine. It hands each messages
// partition's records to the engine (SubmitArrivals), which submits their
// requests before it returns, and pauses a partition the engine reports
// full. Ingress records are kept for the transaction, which produces their
// messages. The transaction t learns what was polled, and decides (records
// for a partition that is not serving, records the engine refused) that it
// must abort: their offsets must not commit; the abort rewinds them.
//
// Ingress records count against MaxPollRecords like any other: their
// messages are produced, and flushed, in the cycle's transaction, so a
// slow producer slows the cycles and polling with them.
func (s *Session) poll(ctx context.Context, t *cycle.Txn) (pl polled, err error) {
	polling := time.Now()
	n := 0
	for n < s.cfg.MaxPollRecords && !s.hasEvents() {
		pending := s.Pending()
		if pending >= s.cfg.MaxQueued {
			break
		}
		wait := s.cyc.PollFor(time.Now(), polling, pending > 0 || !t.Idle() || len(pl.ingress) > 0)
		if wait <= 0 {
			break
		}
		pctx, cancel := context.WithTimeout(ctx, wait)
		stop := make(chan struct{})
		go func() {
			select {
			case <-s.wake:
				cancel()
			case <-stop:
			}
		}()
		fs := s.gts.PollRecords(pctx, s.cfg.MaxPollRecords-n)
		close(stop)
		cancel()
		var fatal error
		fs.EachError(func(topic string, p int32, err error) {
			switch {
			case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
			case errors.Is(err, kgo.ErrClientClosed):
				fatal = fmt.Errorf("cluster: session: the Kafka client closed: %w", err)
			case errors.Is(err, kerr.FencedInstanceID):
				fatal = fmt.Errorf("cluster: session: another process joined the group as node %q (its instance id); two running nodes must not share a node id: %w",
					s.cfg.Cluster.NodeID, err)
			default:
				s.log.Warn("cluster: fetch error (retried)", "topic", topic, "partition", p, "err", err)
			}
		})
		if fatal != nil {
			return pl, fatal
		}
		fs.EachPartition(func(fp kgo.FetchTopicPartition) {
			if len(fp.Records) == 0 {
				return
			}
			if s.ingress[fp.Topic] {
				pl.ingress = append(pl.ingress, fp.Records...)
				n += len(fp.Records)
				t.PolledIngress()
				return
			}
			if fp.Topic != s.msgs {
				return
			}
			p := fp.Partition
			last := fp.Records[len(fp.Records)-1].Offset
			lag := max(fp.LastStableOffset-(last+1), 0)
			s.m.lag.WithLabelValues(label(p)).Set(float64(lag))
			s.st.setLag(p, lag)
			n += len(fp.Records)
			aborting := !t.MayEncode()
			if !t.Polled(p) {
				if !aborting {
					s.log.Warn("cluster: records polled for a partition that is not serving; aborting the transaction to poll them again", "partition", p)
				}
				return
			}
			if err := s.eng.SubmitArrivals(int(p), fp.Records); err != nil {
				t.EngineRefused(p)
				s.log.Warn("cluster: the engine refused polled records; aborting the transaction to poll them again", "partition", p, "err", err)
				return
			}
			s.pauseIfFull(p)
		})
		if ctx.Err() != nil {
			break
		}
	}
	return pl, nil
}

// movesPending reports whether a revocation or loss of this node's
// partitions is posted and not yet acted on.
func (s *Session) movesPending() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ev := range s.events {
		if (ev.kind == evRevoked || ev.kind == evLost) && len(ev.parts) > 0 {
			return true
		}
	}
	return false
}

func (s *Session) hasEvents() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.events) > 0
}

// commit runs one transaction, t deciding how it goes: the requests
// encode into their partitions' overlays (their Outbound records are
// produced as they go), the overlays become changelog records, and the
// transaction ends with the offsets of the polled records. Committed: the
// overlays reach the store with their changelog positions, then the
// requests are durable. Aborted: nothing reaches the store, the requests
// fail with ErrAborted and the partitions they touched are rebuilt. A
// returned error is fatal.
func (s *Session) commit(ctx, rctx context.Context, t *cycle.Txn, reqs []Request, pl polled) error {
	start := time.Now()
	t.Committing(start)
	if err := s.gts.Begin(); err != nil {
		t.Discard()
		err = fmt.Errorf("cluster: session: begin a transaction: %w", err)
		s.failAll(reqs, nil, err)
		return err
	}
	pr := &producing{ctx: ctx, from: -1}
	t.Began(s.gts.Client().GroupMetadata())
	s.txn.Store(pr)
	defer s.txn.Store(nil)

	// Requests of a partition that is not serving are not encoded (Take).
	live := make([]bool, len(reqs))
	for i, r := range reqs {
		p := int32(r.Partition())
		encode, why := t.Take(p)
		if !encode {
			r.Fail(s.moved(p, why))
			continue
		}
		live[i] = true
	}

	var skipped []string
	if t.MayEncode() && len(pl.ingress) > 0 {
		var err error
		if skipped, err = s.routeIngress(pr, pl.ingress); err != nil {
			t.RouteFailed()
			s.log.Error("cluster: an ingress record cannot be routed; aborting the transaction", "err", err)
		}
	}

	overlays := map[int32]*store.Batch{}
	defer func() {
		for _, ov := range overlays {
			ov.Close() // after Apply, a no-op
		}
	}()
	bad, badErr := -1, error(nil)
	for i, r := range reqs {
		if !t.MayEncode() {
			break
		}
		if !live[i] {
			continue
		}
		p := int32(r.Partition())
		ov := overlays[p]
		if ov == nil {
			ov = s.cfg.DB.NewBatch()
			overlays[p] = ov
		}
		pr.from = p
		if err := ov.Stage(r.Encode); err != nil {
			bad, badErr = i, err
			t.EncodeFailed(p)
			s.log.Error("cluster: a request failed to encode; aborting the transaction", "partition", p, "request", fmt.Sprintf("%T", r), "err", err)
		}
	}
	recs := map[int32][]*kgo.Record{}
	for _, p := range sortedKeys(overlays) {
		if !t.MayEncode() {
			break
		}
		rs, err := changelog.Records(overlays[p], s.clog, p)
		if err != nil {
			t.LogFailed(p)
			s.log.Error("cluster: an overlay cannot be logged; aborting the transaction", "partition", p, "err", err)
			break
		}
		recs[p] = rs
		pr.from = p
		for _, r := range rs {
			s.produce(pr, r)
		}
	}
	if err := s.gts.Client().Flush(ctx); err != nil {
		// Only a closing context stops a flush: the node is stopping. The
		// open transaction is aborted by the coordinator (its timeout, or
		// the next start of this node id).
		t.Discard()
		s.failAll(reqs, live, fmt.Errorf("%w: %w", committer.ErrStopped, err))
		return nil
	}
	pr.from = -1
	t.Produced(pr.records)
	if err := pr.produceErr(); err != nil && t.MayEncode() {
		refused := pr.refusals()
		for _, r := range refused {
			t.Refused(r.from)
		}
		s.refusedRecords(refused)
	}
	if t.MayEncode() {
		// A commit ended before the client settled its partitions could
		// be ended as an abort and reported committed (package kafkatxn).
		cl := s.gts.Client()
		err := kafkatxn.Await(ctx, pr.topics.List(), settleWait, func(topic string) bool { return s.topicSettled(cl, topic) })
		if err != nil {
			t.Unsettled()
			if ctx.Err() == nil {
				s.log.Warn("cluster: aborting a transaction rather than trusting its commit", "err", err)
			}
		}
	}
	if s.movesPending() {
		t.MovesHeard()
	}
	if check, member, gen := t.MustCheckMember(s.gts.Client().GroupMetadata()); check {
		t.MemberChecked(s.checkMember(ctx, member, gen))
	}
	if err := t.FenceErr(); err != nil {
		s.log.Warn("cluster: this node is no longer the group member it was; aborting the transaction", "err", err)
	}
	starts := s.pendingStarts()
	endCtx, named := withStarts(ctx, starts)
	var committed bool
	var err error
	switch t.HowToEnd(len(starts) > 0) {
	case cycle.EndWithoutOffsets:
		committed, err = s.endWithoutOffsets(endCtx)
	case cycle.EndCommit:
		committed, err = s.gts.End(endCtx, kgo.TryCommit)
	case cycle.EndAbort:
		committed, err = s.gts.End(endCtx, kgo.TryAbort)
	}
	outcome := cycle.NotCommitted
	if err != nil && ctx.Err() == nil && unconfirmed(err) {
		// The brokers could not be reached, or answered without saying
		// what they did: the transaction may have committed or not.
		// Abort what may still be open, and rebuild the partitions from
		// their changelogs, which hold the transaction if it committed;
		// the partitions' read positions then skip what it applied.
		s.log.Warn("cluster: ending a transaction failed with its outcome unknown (are the brokers reachable?); aborting it and rebuilding its partitions from their changelogs, which hold it if it committed",
			"err", err)
		if err = s.abortUnconfirmed(ctx); err == nil {
			committed, outcome = false, cycle.OutcomeUnknown
		}
	}
	if err != nil {
		t.Discard()
		if ctx.Err() != nil {
			s.failAll(reqs, live, fmt.Errorf("%w: %w", committer.ErrStopped, err))
			return nil
		}
		err = fmt.Errorf("cluster: session: ending a transaction of %s failed, so this node stops (a newer process with node id %q fenced it; or this node stalled past transaction.timeout.ms, or long enough for the other nodes to remove it from the group, so its transaction was aborted and its partitions moved; or the brokers refused the transaction): %w",
			s.cfg.Cluster.TransactionalID(), s.cfg.Cluster.NodeID, err)
		s.failAll(reqs, live, fmt.Errorf("%w: %w", committer.ErrStopped, err))
		return err
	}
	if committed {
		outcome = cycle.Committed
	}
	res := t.Finish(outcome, time.Now())
	defer func() {
		s.m.full.Set(float64(len(s.cyc.Paused())))
		s.publishParts()
	}()
	if !res.Committed {
		cause := errors.New(res.Reason.Explain())
		for i, r := range reqs {
			switch {
			case !live[i]:
			case i == bad:
				// An abort for the engine too: the partition is
				// rebuilt (after a back-off) rather than the node
				// stopped, so that an encoding error that holds on
				// every node does not follow the partition around.
				r.Fail(s.aborted(fmt.Errorf("its encoding failed: %w", badErr)))
			default:
				r.Fail(s.aborted(cause))
			}
		}
		s.m.aborts.WithLabelValues(string(res.Reason)).Inc()
		s.st.aborted()
		if res.Reason == cycle.Group {
			// The other causes were logged where they arose.
			s.log.Info("cluster: the transaction was not committed (a rebalance revoked partitions, or Kafka refused its offset commit or EndTxn); its work is redone", "partitions", res.Touched)
		}
		for _, r := range res.Rebuild {
			s.rebuild(rctx, r, cause)
		}
		s.reseek()
		if res.Warn != "" {
			s.log.Warn(res.Warn)
		}
		return res.GiveUp
	}
	if err := s.apply(overlays, recs); err != nil {
		s.failAll(reqs, live, fmt.Errorf("%w: %w", committer.ErrStopped, err))
		return err
	}
	s.startsCommitted(named)
	for i, r := range pl.ingress {
		s.cfg.Ingress.Committed(r, skipped[i])
	}
	s.m.commits.Inc()
	s.st.committed(time.Now())
	s.m.txnDur.Observe(time.Since(start).Seconds())
	s.m.txnRecords.Observe(float64(pr.records))
	s.m.txnBytes.Observe(float64(pr.bytes))
	for i, r := range reqs {
		if live[i] {
			r.Durable()
		}
	}
	for i, r := range reqs {
		if a, ok := r.(committer.Answerer); ok && live[i] {
			a.AfterGroup()
		}
	}
	return nil
}

// settleWait bounds how long a commit waits for the Kafka client to settle
// the partitions of the topics the transaction produced to
// (kafkatxn.Await). The wait it covers is a few instructions on the
// client's metadata goroutine; a second passes only when that goroutine
// is starved.
const settleWait = 2 * time.Second

// topicSettled is kafkatxn.Settled, or the test's stand-in for it.
func (s *Session) topicSettled(cl *kgo.Client, topic string) bool {
	if s.testHookSettled != nil {
		return s.testHookSettled(cl, topic)
	}
	return kafkatxn.Settled(cl, topic)
}

// endWithoutOffsets commits a transaction that commits no offsets (it
// polled nothing and places no ingress partition; its records are
// function effects, timers, state API writes) with the
// client's EndTransaction rather than the group transact session's End.
//
// Why: End learns whether the brokers support KIP-447 only from the
// response to the TxnOffsetCommit it sends, and it sends none when no
// offsets were polled; it then takes its pre-KIP-447 path and holds its
// lock for 500 ms after the commit, and End itself waits for that lock
// on the way out. A node whose cycles alternate between arrivals (with
// offsets) and their effects (without) thus spent half a second in every
// other cycle (BenchmarkCluster, one node, window 100: 140 records/s at
// p50 712 ms with the pause, 474 records/s at 209 ms without).
//
// What End would add here is not needed: with no offsets there is no
// TxnOffsetCommit to fence and no heartbeat to force; the membership check
// that fences a zombie has already run (checkMember, after the records
// were flushed, so a new owner's restore waits for this transaction); and
// a revocation heard meanwhile stays pending in the session, so s.rearm
// is left as it is and the next End resets it. The retries are End's: a
// commit the brokers did not attempt, called abortable, or answered with
// an unknown server error is ended again as an abort and reported as not
// committed, so the touched partitions are rebuilt from their changelogs
// (which hold the records if the brokers did commit them).
func (s *Session) endWithoutOffsets(ctx context.Context) (committed bool, err error) {
	cl := s.gts.Client()
	try := kgo.TryCommit
	for tries := 1; ; tries++ {
		err = cl.EndTransaction(ctx, try)
		if err == nil || tries >= 10 {
			return err == nil && try == kgo.TryCommit, err
		}
		switch {
		case errors.Is(err, kerr.OperationNotAttempted),
			errors.Is(err, kerr.TransactionAbortable),
			unconfirmed(err):
			s.log.Info("cluster: ending a transaction without offsets failed; ending it again as an abort", "err", err)
			try = kgo.TryAbort
		default:
			return false, err
		}
	}
}

// unconfirmed reports whether err, from ending a transaction, leaves its
// outcome unknown without fencing this node: the brokers could not be
// reached (no Kafka error code at all), answered with a retriable error,
// or with UNKNOWN_SERVER_ERROR. A fence (PRODUCER_FENCED, an invalid
// epoch) or a refusal is not: the transactional id is done.
func unconfirmed(err error) bool {
	if errors.Is(err, kgo.ErrClientClosed) || errors.Is(err, context.Canceled) {
		return false
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Retriable || ke == kerr.UnknownServerError
	}
	return true
}

// abortUnconfirmed ends a transaction whose commit's outcome is unknown
// with an abort, as the client documents: the abort reloads the producer
// id, which bumps the epoch and aborts whatever is still open on the
// brokers. While the brokers stay unreachable it retries, backing off up
// to 5 s; it returns nil once done, ctx's error when the node stops, or an
// error that fences this node.
func (s *Session) abortUnconfirmed(ctx context.Context) error {
	backoff := 100 * time.Millisecond
	since := time.Now()
	logged := since
	for {
		err := s.gts.Client().EndTransaction(ctx, kgo.TryAbort)
		if err == nil || ctx.Err() != nil || !unconfirmed(err) {
			if err == nil && time.Since(since) > time.Second {
				s.log.Info("cluster: the transaction with an unknown outcome is aborted; going on", "waited", time.Since(since).Round(time.Millisecond))
			}
			return err
		}
		if time.Since(logged) > 10*time.Second {
			logged = time.Now()
			s.log.Warn("cluster: still cannot end a transaction with an unknown outcome; retrying (are the brokers reachable?)", "waiting", time.Since(since).Round(time.Second), "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// apply writes the overlays of a committed transaction into the store,
// each with the changelog position its records reach.
func (s *Session) apply(overlays map[int32]*store.Batch, recs map[int32][]*kgo.Record) error {
	for _, p := range sortedKeys(overlays) {
		if err := s.parts[p].log.Apply(overlays[p], recs[p]); err != nil {
			return fmt.Errorf("cluster: session: the store refused a committed transaction's writes of partition %d: %w", p, err)
		}
	}
	return nil
}

// failAll fails the live requests (all if live is nil) with err.
func (s *Session) failAll(reqs []Request, live []bool, err error) {
	for i, r := range reqs {
		if live == nil || live[i] {
			r.Fail(err)
		}
	}
}

// checkMember asks the group coordinator whether this node is still the
// member, in the generation, it was when the transaction began (the
// Machine asks for it, cycle.Txn.MustCheckMember): a heartbeat with that
// member id and generation. A zombie (a node that stalled past its session
// timeout, its partitions given to others) hears UNKNOWN_MEMBER_ID,
// ILLEGAL_GENERATION or FENCED_INSTANCE_ID; a group in a rebalance answers
// REBALANCE_IN_PROGRESS, which aborts too (the partitions may be moving).
func (s *Session) checkMember(ctx context.Context, member string, gen int32) error {
	req := kmsg.NewPtrHeartbeatRequest()
	req.Group = s.cfg.Cluster.Group()
	req.MemberID = member
	req.Generation = gen
	req.InstanceID = kmsg.StringPtr(s.cfg.Cluster.NodeID)
	resp, err := req.RequestWith(ctx, s.gts.Client())
	if err != nil {
		return err
	}
	return kerr.ErrorForCode(resp.ErrorCode)
}

func sortedKeys[V any](m map[int32]V) []int32 {
	ks := make([]int32, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
