// Package sessiontest is the test double of the cluster session: the
// engine's seam for cluster mode (engine.Durability and engine.Outbound,
// docs/explanation/engine.md, "The cluster seam") over an in-memory
// model of what Kafka keeps for it. The engine's cluster tests and the
// deterministic simulation (internal/sim) drive the engine through it.
//
// It is a second shell around the commit cycle's state machine
// (internal/cluster/cycle), the one the real session
// (internal/cluster/session) drives: which partitions serve, which records
// and requests a transaction takes, when it aborts, when the membership
// must be checked, how it ends and which partitions are rebuilt after an
// abort are the Machine's decisions here as there. What this package adds
// is the I/O those decisions call for, against the model instead of
// Kafka.
//
// The model (Kafka) holds, per partition, the messages topic (records at
// offsets) and the changelog, the consumed offsets committed for the
// group, the egress records, the producer epoch of each node's
// transactional id, and the consumer group's generation and members. A
// Session keeps what docs/explanation/cluster.md's commit protocol keeps: an overlay
// per partition that the requests encode into, the messages and egress
// records they hand to Outbound staged in the open transaction; a committed
// cycle appends the overlays to the changelogs and only then applies them
// to the store with the changelog position they reach, makes the staged
// records visible and commits the consumed offsets; an aborted one drops
// all of it, rewinds the consumer to the committed offsets, fails the
// requests and rebuilds the partitions the Machine names.
//
// What the real session does differently: it runs its own goroutine and
// cycles on a timer, where the double cycles when its caller says (Cycle,
// CommitGroup, Encode then Finish); the consumer group decides its
// assignments, where here the caller does (Assign, Revoke, Rejoin); its
// changelog records are Kafka records (one per key, compacted), here
// store operations in a slice; and its restores and membership checks are
// requests to brokers.
package sessiontest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/cluster/cycle"
	"github.com/statefun-go/statefun/internal/engine/committer"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// ErrFenced is the error of a commit by a Session whose producer epoch a
// newer Session of the same node has bumped: a zombie. Its transaction is
// aborted and Finish returns the error, which stops the engine as the
// real session's failed EndTxn does.
var ErrFenced = errors.New("sessiontest: the producer was fenced by a newer session of its transactional id")

// Kafka is the topics and the consumer group every node of a test shares.
// Its methods are safe for concurrent use.
type Kafka struct {
	mu        sync.Mutex
	messages  map[int][]*protocol.Envelope // by partition; the offset is the index
	changelog map[int][]store.Op           // by partition; the offset is the index
	committed map[int]int64                // consumed offsets of the messages topic
	egress    []partition.Egress
	epoch     map[string]int // the producer epoch of each node's transactional id
	// The consumer group: its generation, and each node's member id in
	// it. A node joins (NewSession, Rejoin) in a new generation.
	gen     int32
	members map[string]string
}

// NewKafka returns empty topics and an empty group.
func NewKafka() *Kafka {
	return &Kafka{messages: map[int][]*protocol.Envelope{}, changelog: map[int][]store.Op{}, committed: map[int]int64{},
		epoch: map[string]int{}, members: map[string]string{}}
}

// Produce appends a record to partition p of the messages topic outside
// any transaction, as the playground ingress or the state API does, and
// returns its offset.
func (k *Kafka) Produce(p int, env *protocol.Envelope) int64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.messages[p] = append(k.messages[p], env)
	return int64(len(k.messages[p]) - 1)
}

// Messages returns the committed records of partition p of the messages
// topic; a record's offset is its index.
func (k *Kafka) Messages(p int) []*protocol.Envelope {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]*protocol.Envelope(nil), k.messages[p]...)
}

// Changelog returns the committed changelog records of partition p; a
// record's offset is its index.
func (k *Kafka) Changelog(p int) []store.Op {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]store.Op(nil), k.changelog[p]...)
}

// Egress returns the committed egress records, in commit order.
func (k *Kafka) Egress() []partition.Egress {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]partition.Egress(nil), k.egress...)
}

// Committed returns the group's committed offset of partition p of the
// messages topic: the next record to consume.
func (k *Kafka) Committed(p int) int64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.committed[p]
}

// Rewind moves the group's committed offset of partition p back by n (not
// below 0), as an operator's offset reset does, or Kafka's offset expiry
// after every node was down (to 0): the next consumer of p polls records
// the partition applied before, which it must skip (its read position,
// engine readpos.go).
func (k *Kafka) Rewind(p int, n int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.committed[p] = max(k.committed[p]-n, 0)
}

// Restore applies partition p's changelog from the store's position to its
// end, as the session's restore does before it assigns p to the engine.
func (k *Kafka) Restore(db *store.DB, p int) error {
	pos, _, err := db.ChangelogPosition(p)
	if err != nil {
		return err
	}
	k.mu.Lock()
	if pos.Next > int64(len(k.changelog[p])) {
		k.mu.Unlock()
		return fmt.Errorf("sessiontest: partition %d's store is at changelog offset %d, past the changelog's end %d", p, pos.Next, len(k.changelog[p]))
	}
	ops := append([]store.Op(nil), k.changelog[p][pos.Next:]...)
	end := int64(len(k.changelog[p]))
	k.mu.Unlock()
	return db.ApplyChangelog(p, ops, store.ChangelogPosition{Next: end})
}

// join makes node a member of the group under a new member id, in a new
// generation; the member it was before is gone (a heartbeat with it
// fails). The other members carry on in the new generation, as after a
// rebalance that moved none of their partitions.
func (k *Kafka) join(node string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.gen++
	k.members[node] = fmt.Sprintf("%s-member-%d", node, k.gen)
}

// Rebalance moves the group to a new generation, as a rebalance does: a
// transaction that began in the one before cannot commit offsets
// (ILLEGAL_GENERATION), and one without them fails its membership check.
func (k *Kafka) Rebalance() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.gen++
}

// Expel removes node's member from the group, as the coordinator does when
// the member's session times out (a stalled node): its heartbeats, and
// offset commits, fail from then on, until it joins again.
func (k *Kafka) Expel(node string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.members, node)
	k.gen++
}

// member returns node's member id in the group (empty when it is not a
// member) and the group's generation.
func (k *Kafka) member(node string) (string, int32) {
	k.mu.Lock()
	defer k.mu.Unlock()
	m, ok := k.members[node]
	if !ok {
		return "", -1
	}
	return m, k.gen
}

// heartbeat answers as the group coordinator does to a heartbeat of
// member in generation gen: nil while it is the node's member in the
// group's generation.
func (k *Kafka) heartbeat(node, member string, gen int32) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case member == "" || k.members[node] != member:
		return fmt.Errorf("sessiontest: UNKNOWN_MEMBER_ID: %s is not a member of the group", member)
	case k.gen != gen:
		return fmt.Errorf("sessiontest: ILLEGAL_GENERATION: generation %d, the group is at %d", gen, k.gen)
	}
	return nil
}

// Record is one record polled from the messages topic; it converts to
// engine.Arrival.
type Record struct {
	Offset int64
	Env    *protocol.Envelope
}

// Engine is what the double calls on the engine it is the seam of, as the
// real session does (session.Engine): build a partition's core after its
// restore, drop it.
type Engine interface {
	Assign(p int) error
	Revoke(p int)
}

// Options configure a Session.
type Options struct {
	// Auto makes Run commit whatever is submitted (an engine that runs on
	// its own goroutines); without it the caller cycles (a driven engine).
	Auto bool
	// Errorf reports a broken contract of the engine (a request that does
	// not name its partition, a message handed out for the wrong
	// partition): testing.T.Errorf.
	Errorf func(format string, args ...any)
	// Node names the node, whose transactional id the session fences and
	// whose group membership it checks: sessions of different nodes on
	// one Kafka (each owning partitions of its own) run side by side.
	// Empty is one node.
	Node string
	// RebuildBackoff is cycle.Config.RebuildBackoff; the double does not
	// wait it out (Rebuilt reports it).
	RebuildBackoff time.Duration
}

// Session is one node's session: the Durability and Outbound of its
// engine. Submit, Pending and Close are safe for concurrent use; the rest
// runs on one goroutine (Run's, or the caller's when driven).
type Session struct {
	k     *Kafka
	db    *store.DB
	opts  Options
	epoch int
	eng   Engine

	// step serializes what touches the Machine, which is used from one
	// goroutine at a time: Run's cycles and the test's Assign and Revoke.
	step sync.Mutex
	cyc  *cycle.Machine

	mu      sync.Mutex
	queue   []committer.Request
	fetched map[int]int64 // the consumer's position, past the committed offsets (under k.mu)
	wake    chan struct{}

	// The open transaction, and the member the node was when it began.
	txn   *cycle.Txn
	began struct {
		member string
		gen    int32
	}
	open     []committer.Request
	bad      map[int]bool // open requests whose Encode failed
	overlays map[int]*store.Batch
	msgs     []staged
	egress   []partition.Egress
	// rebuilds are the restores aborted transactions call for, not run
	// yet (Rebuild).
	rebuilds []cycle.Restore
}

type staged struct {
	p   int
	env *protocol.Envelope
}

// NewSession returns a session of db's node on k, a member of the group.
// It bumps k's producer epoch of the node, as the real session's
// InitProducerID does: a session made before for the same node is fenced
// from now on.
func NewSession(k *Kafka, db *store.DB, opts Options) *Session {
	if opts.Errorf == nil {
		opts.Errorf = func(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }
	}
	k.mu.Lock()
	k.epoch[opts.Node]++
	epoch := k.epoch[opts.Node]
	k.mu.Unlock()
	s := &Session{k: k, db: db, opts: opts, epoch: epoch, fetched: map[int]int64{}, wake: make(chan struct{}, 1),
		cyc: cycle.New(cycle.Config{RebuildBackoff: opts.RebuildBackoff, GiveUpAfter: -1})}
	k.join(opts.Node)
	return s
}

// Bind attaches the engine; call it before Assign.
func (s *Session) Bind(e Engine) { s.eng = e }

// Machine returns the session's commit-cycle machine (for a test's
// failure message: Describe).
func (s *Session) Machine() *cycle.Machine { return s.cyc }

// Assign gives partition p to the node, as the group does: the Machine
// starts its restore, which brings the store's data of p to the end of
// its changelog, and, restored, the engine builds its core. An error of
// the restore or the engine leaves p restoring.
func (s *Session) Assign(p int) error {
	s.step.Lock()
	defer s.step.Unlock()
	drops, restores := s.cyc.Assigned([]int32{int32(p)})
	for _, d := range drops {
		s.drop(d)
	}
	for _, r := range restores {
		if err := s.restore(r); err != nil {
			return err
		}
	}
	return nil
}

// restore runs the restore r now (its back-off is not waited out), and
// hands the partition to the engine as the Machine decides.
func (s *Session) restore(r cycle.Restore) error {
	p := int(r.P)
	err := s.k.Restore(s.db, p)
	what, _ := s.cyc.Restored(r.P, r.Gen, err != nil)
	switch {
	case err != nil:
		return fmt.Errorf("restore partition %d: %w", p, err)
	case what != cycle.Serve:
		return fmt.Errorf("sessiontest: the Machine answered %d to partition %d's restore, want Serve", what, p)
	}
	if s.eng == nil {
		return errors.New("sessiontest: Assign before Bind")
	}
	if err := s.eng.Assign(p); err != nil {
		return err
	}
	s.cyc.Serving(r.P, false)
	return nil
}

// Revoke takes partition p from the node, as a rebalance does: the
// Machine drops it, the engine revokes its core, its queued requests fail
// with ErrMoved, and its consumer position goes back to the committed
// offset (the next owner fetches from there). Called while a transaction
// is open, the transaction hears of it (cycle.Txn.MovesHeard).
func (s *Session) Revoke(p int) {
	s.step.Lock()
	defer s.step.Unlock()
	for _, d := range s.cyc.Revoked([]int32{int32(p)}) {
		s.drop(d)
	}
}

// Rejoin makes the node a member of the group again under a new member id
// and generation, as after it lost its partitions (its session timed out)
// and its client joined again; it keeps none of them (the caller assigns
// them again). An open transaction began as the member before.
func (s *Session) Rejoin() {
	s.step.Lock()
	defer s.step.Unlock()
	for _, d := range s.cyc.Revoked(s.cyc.Owned()) {
		s.drop(d)
	}
	s.k.join(s.opts.Node)
}

func (s *Session) drop(d cycle.Drop) {
	p := int(d.P)
	if d.Serving && s.eng != nil {
		s.eng.Revoke(p)
	}
	s.k.mu.Lock()
	delete(s.fetched, p)
	s.k.mu.Unlock()
	s.purge(p, fmt.Errorf("%w: partition %d was revoked", committer.ErrMoved, p))
}

// purge fails the queued requests of partition p with err.
func (s *Session) purge(p int, err error) {
	s.mu.Lock()
	var gone []committer.Request
	kept := s.queue[:0]
	for _, r := range s.queue {
		if partitionOf(r) == p {
			gone = append(gone, r)
		} else {
			kept = append(kept, r)
		}
	}
	clear(s.queue[len(kept):])
	s.queue = kept
	s.mu.Unlock()
	for _, r := range gone {
		r.Fail(err)
	}
}

func partitionOf(r committer.Request) int {
	if pr, ok := r.(interface{ Partition() int }); ok {
		return pr.Partition()
	}
	return -1
}

// Submit queues a request (engine.Durability).
func (s *Session) Submit(r committer.Request) error {
	if partitionOf(r) < 0 {
		s.opts.Errorf("the engine submitted a %T, which does not name its partition", r)
	}
	s.mu.Lock()
	s.queue = append(s.queue, r)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return nil
}

// Run commits what is submitted with Options.Auto, until ctx ends
// (engine.Durability).
func (s *Session) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.wake:
			if s.opts.Auto {
				if _, err := s.Cycle(true); err != nil {
					return err
				}
				if _, err := s.Rebuild(); err != nil {
					return err
				}
			}
		}
	}
}

// Close fails the requests still queued (engine.Durability).
func (s *Session) Close() {
	s.mu.Lock()
	q := s.queue
	s.queue = nil
	s.mu.Unlock()
	for _, r := range q {
		r.Fail(committer.ErrStopped)
	}
}

// Pending returns the number of queued requests (engine.Durability).
func (s *Session) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

// CommitGroup is one committed cycle, for engine.Driver.Commit.
func (s *Session) CommitGroup() (int, error) { return s.Cycle(true) }

// Message stages a message (or a command) for another partition in the
// open transaction (engine.Outbound).
func (s *Session) Message(key partition.InboxKey, env *protocol.Envelope) error {
	target := env.GetTarget()
	if m := env.GetMutation(); m != nil {
		target = m.GetTarget()
	}
	if want := address.Partition(target.GetId(), s.db.Partitions()); key.Partition != want {
		s.opts.Errorf("Outbound.Message for partition %d of a message to %s (partition %d)", key.Partition, target.GetId(), want)
	}
	s.msgs = append(s.msgs, staged{key.Partition, env})
	return nil
}

// Egress stages an egress record in the open transaction (engine.Outbound).
func (s *Session) Egress(from int, eg partition.Egress) error {
	s.egress = append(s.egress, eg)
	return nil
}

// begin opens the Machine's transaction if none is open.
func (s *Session) begin() *cycle.Txn {
	if s.txn == nil {
		s.txn = s.cyc.Begin()
		s.began.member, s.began.gen = s.k.member(s.opts.Node)
		s.txn.Began(s.began.member, s.began.gen)
		s.overlays, s.bad = map[int]*store.Batch{}, map[int]bool{}
	}
	return s.txn
}

// Encode takes the queued requests into the open transaction, each into
// its partition's overlay, and returns how many it took. A request of a
// partition the node does not serve fails with ErrMoved; one whose Encode
// fails hears Fail with its error, and the transaction then cannot commit
// (the Machine aborts it), as the engine's contract says.
func (s *Session) Encode() int {
	s.step.Lock()
	defer s.step.Unlock()
	return s.encode()
}

func (s *Session) encode() int {
	s.mu.Lock()
	q := s.queue
	s.queue = nil
	s.mu.Unlock()
	if len(q) == 0 {
		return 0
	}
	t := s.begin()
	for _, r := range q {
		p := partitionOf(r)
		if p < 0 {
			s.opts.Errorf("a %T reached the cluster session", r)
			continue
		}
		if ok, why := t.Take(int32(p)); !ok {
			r.Fail(fmt.Errorf("%w: partition %d %s", committer.ErrMoved, p, why))
			continue
		}
		b := s.overlays[p]
		if b == nil {
			b = s.db.NewBatch()
			s.overlays[p] = b
		}
		if err := b.Stage(r.Encode); err != nil {
			s.bad[len(s.open)] = true
			t.EncodeFailed(int32(p))
			r.Fail(err)
		}
		s.open = append(s.open, r)
	}
	return len(q)
}

// Finish ends the open transaction, as the Machine decides; commit false
// is Kafka refusing to commit it (a rebalance, a refused EndTxn).
// Committed: every overlay goes to its changelog and then to the store
// with the position it reaches, staged messages and egress records become
// visible, the consumed offsets are committed, and the requests hear
// Durable and AfterGroup. Otherwise all of it is dropped, the consumer
// rewinds to the committed offsets, the requests hear Fail (wrapping
// committer.ErrAborted) and the partitions the Machine names are rebuilt:
// revoked from the engine at once, restored and assigned again by Rebuild.
// Finish returns ErrFenced, the requests failing with ErrStopped, when a
// newer session of the node fenced this one.
func (s *Session) Finish(commit bool) error {
	s.step.Lock()
	defer s.step.Unlock()
	return s.finish(commit)
}

func (s *Session) finish(commit bool) error {
	t := s.txn
	if t == nil {
		return nil
	}
	began := s.began
	open, bad, overlays := s.open, s.bad, s.overlays
	msgs, egress := s.msgs, s.egress
	s.txn, s.open, s.bad, s.overlays, s.msgs, s.egress = nil, nil, nil, nil, nil, nil
	closeAll := func() {
		for _, b := range overlays {
			b.Close()
		}
	}
	s.k.mu.Lock()
	fenced := s.epoch != s.k.epoch[s.opts.Node]
	s.k.mu.Unlock()
	if fenced {
		// The producer epoch is refused at the first produce, or at End:
		// the real session's End fails and the node stops.
		t.Discard()
		closeAll()
		for i, r := range open {
			if !bad[i] {
				r.Fail(fmt.Errorf("%w: %w", committer.ErrStopped, ErrFenced))
			}
		}
		return ErrFenced
	}
	t.Produced(len(msgs) + len(egress) + len(overlays))
	if check, member, gen := t.MustCheckMember(s.k.member(s.opts.Node)); check {
		t.MemberChecked(s.k.heartbeat(s.opts.Node, member, gen))
	}
	outcome := cycle.NotCommitted
	switch t.HowToEnd(false) {
	case cycle.EndWithoutOffsets:
		if commit {
			outcome = cycle.Committed
		}
	case cycle.EndCommit:
		// The offset commit carries the generation Began saw: the group
		// refuses it once that is over (ILLEGAL_GENERATION), and the
		// transaction aborts.
		if commit && s.k.heartbeat(s.opts.Node, began.member, began.gen) == nil {
			outcome = cycle.Committed
		}
	}
	res := t.Finish(outcome, time.Time{})
	if !res.Committed {
		closeAll()
		s.k.mu.Lock()
		for p := range s.fetched {
			s.fetched[p] = s.k.committed[p]
		}
		s.k.mu.Unlock()
		cause := fmt.Errorf("%w: %s", committer.ErrAborted, res.Reason.Explain())
		for i, r := range open {
			if !bad[i] {
				r.Fail(cause)
			}
		}
		for _, r := range res.Rebuild {
			// As the real session does at once: the core goes, its
			// queued requests fail; the restore follows (Rebuild).
			s.eng.Revoke(int(r.P))
			s.purge(int(r.P), cause)
			s.rebuilds = append(s.rebuilds, r)
		}
		return nil
	}
	var logErr error
	s.k.mu.Lock()
	for p, b := range overlays {
		var ops []store.Op
		err := b.Ops(func(op store.Op) error {
			ops = append(ops, store.Op{Key: append([]byte(nil), op.Key...), Value: append([]byte(nil), op.Value...), Delete: op.Delete})
			return nil
		})
		b.Close()
		if err != nil {
			logErr = fmt.Errorf("partition %d's overlay cannot be logged: %w", p, err)
			continue
		}
		s.k.changelog[p] = append(s.k.changelog[p], ops...)
		if err := s.db.ApplyChangelog(p, ops, store.ChangelogPosition{Next: int64(len(s.k.changelog[p]))}); err != nil {
			logErr = fmt.Errorf("apply partition %d: %w", p, err)
		}
	}
	for _, m := range msgs {
		s.k.messages[m.p] = append(s.k.messages[m.p], m.env)
	}
	s.k.egress = append(s.k.egress, egress...)
	for p, off := range s.fetched {
		s.k.committed[p] = off
	}
	s.k.mu.Unlock()
	if logErr != nil {
		s.opts.Errorf("%v", logErr)
	}
	for i, r := range open {
		if !bad[i] {
			r.Durable()
		}
	}
	for i, r := range open {
		if a, ok := r.(committer.Answerer); ok && !bad[i] {
			a.AfterGroup()
		}
	}
	return nil
}

// Cycle encodes what is queued and ends the transaction (Finish); it
// returns the number of requests it encoded.
func (s *Session) Cycle(commit bool) (int, error) {
	s.step.Lock()
	defer s.step.Unlock()
	n := s.encode()
	if s.txn != nil {
		return n, s.finish(commit)
	}
	return n, nil
}

// Rebuild runs the restores of partitions that aborted transactions left
// behind since the last call (their cores were revoked at the abort), in
// order, assigning each to the engine again, and returns the ones that
// ran: not those dropped or assigned anew since. Auto sessions rebuild
// after every cycle.
func (s *Session) Rebuild() ([]int, error) {
	s.step.Lock()
	defer s.step.Unlock()
	return s.rebuild()
}

func (s *Session) rebuild() ([]int, error) {
	rs := s.rebuilds
	s.rebuilds = nil
	var done []int
	for _, r := range rs {
		if !s.cyc.Restoring(r.P, r.Gen) {
			continue
		}
		if err := s.restore(r); err != nil {
			return done, fmt.Errorf("sessiontest: rebuild partition %d: %w", r.P, err)
		}
		done = append(done, int(r.P))
	}
	return done, nil
}

// Poll returns the records of partition p past the consumer's position
// (the committed offset, or the records polled since) and moves the
// position past them, as the session's fetch does, for the caller to hand
// to the engine. The records join the open transaction (their offsets
// commit with it); for a partition the node does not serve the Machine
// aborts it, and Poll returns none.
func (s *Session) Poll(p int) []Record {
	s.k.mu.Lock()
	from := max(s.fetched[p], s.k.committed[p])
	var recs []Record
	for off := from; off < int64(len(s.k.messages[p])); off++ {
		recs = append(recs, Record{Offset: off, Env: s.k.messages[p][off]})
	}
	if len(recs) > 0 {
		s.fetched[p] = recs[len(recs)-1].Offset + 1
	}
	s.k.mu.Unlock()
	if len(recs) == 0 {
		return nil
	}
	s.step.Lock()
	defer s.step.Unlock()
	if !s.begin().Polled(int32(p)) {
		return nil
	}
	return recs
}

// Unpolled reports whether partition p has records past the consumer's
// position.
func (s *Session) Unpolled(p int) bool {
	s.k.mu.Lock()
	defer s.k.mu.Unlock()
	return max(s.fetched[p], s.k.committed[p]) < int64(len(s.k.messages[p]))
}
