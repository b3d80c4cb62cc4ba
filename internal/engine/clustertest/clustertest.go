// Package clustertest is the test double of the cluster session: the
// engine's seam for cluster mode (engine.Durability and engine.Outbound,
// docs/cluster.md "How the engine runs in cluster mode") implemented over
// an in-memory model of the Kafka topics the session uses. The engine's
// cluster tests and the deterministic simulation (internal/sim) drive the
// engine through it; the real session (internal/cluster/session) is tested
// against Kafka.
//
// Kafka holds, per partition, the messages topic (records at offsets) and
// the changelog, the consumed offsets committed for the group, the egress
// records, and the producer epoch of the one transactional id. A Session
// keeps what docs/cluster.md's commit protocol keeps: an overlay per
// partition that the requests encode into, the messages and egress records
// they hand to Outbound staged in the open transaction; a committed cycle
// appends the overlays to the changelogs and only then applies them to the
// store with the changelog position they reach, makes the staged records
// visible and commits the consumed offsets; an aborted one drops all of it,
// rewinds the consumer to the committed offsets and fails the requests.
//
// What the real session does differently: it runs its own goroutine and
// cycles on a timer, where the double cycles when its caller says (Cycle,
// CommitGroup); it restores partitions and calls the engine's Assign and
// Revoke itself as the consumer group decides, where here the caller does
// (Kafka.Restore, then Assign); its changelog records are Kafka records
// (one per key, compacted), here store operations in a slice; and a
// transaction that commits without consumed offsets checks the group
// membership first, which the double leaves to the producer epoch alone.
package clustertest

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/engine/committer"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// ErrFenced is the error of a commit by a Session whose producer epoch a
// newer Session on the same Kafka has bumped: a zombie. Its transaction is
// aborted and CommitGroup returns the error, which stops the engine as the
// real session's failed EndTxn does.
var ErrFenced = errors.New("clustertest: the producer was fenced by a newer session of its transactional id")

// Kafka is the topics every node of a test shares. Its methods are safe
// for concurrent use.
type Kafka struct {
	mu        sync.Mutex
	messages  map[int][]*protocol.Envelope // by partition; the offset is the index
	changelog map[int][]store.Op           // by partition; the offset is the index
	committed map[int]int64                // consumed offsets of the messages topic
	egress    []partition.Egress
	epoch     map[string]int // the producer epoch of each node's transactional id
}

// NewKafka returns empty topics.
func NewKafka() *Kafka {
	return &Kafka{messages: map[int][]*protocol.Envelope{}, changelog: map[int][]store.Op{}, committed: map[int]int64{},
		epoch: map[string]int{}}
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
		return fmt.Errorf("clustertest: partition %d's store is at changelog offset %d, past the changelog's end %d", p, pos.Next, len(k.changelog[p]))
	}
	ops := append([]store.Op(nil), k.changelog[p][pos.Next:]...)
	end := int64(len(k.changelog[p]))
	k.mu.Unlock()
	return db.ApplyChangelog(p, ops, store.ChangelogPosition{Next: end})
}

// Record is one record polled from the messages topic; it converts to
// engine.Arrival.
type Record struct {
	Offset int64
	Env    *protocol.Envelope
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
	// Node names the node, whose transactional id the session fences:
	// sessions of different nodes on one Kafka (each owning partitions of
	// its own) run side by side. Empty is one node.
	Node string
}

// Session is one node's session: the Durability and Outbound of its
// engine. Submit, Pending and Close are safe for concurrent use; the rest
// runs on one goroutine (Run's, or the caller's when driven).
type Session struct {
	k     *Kafka
	db    *store.DB
	opts  Options
	epoch int

	mu      sync.Mutex
	queue   []committer.Request
	fetched map[int]int64 // the consumer's position, past the committed offsets (under k.mu)
	wake    chan struct{}

	// The open transaction.
	open     []committer.Request
	bad      map[int]bool // open requests whose Encode failed
	overlays map[int]*store.Batch
	msgs     []staged
	egress   []partition.Egress
	// rebuild lists the partitions the last aborted transaction touched.
	rebuild map[int]bool
}

type staged struct {
	p   int
	env *protocol.Envelope
}

// NewSession returns a session of db's node on k. It bumps k's producer
// epoch, as the real session's InitProducerID does: a session made before
// on the same Kafka is fenced from now on.
func NewSession(k *Kafka, db *store.DB, opts Options) *Session {
	if opts.Errorf == nil {
		opts.Errorf = func(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }
	}
	k.mu.Lock()
	k.epoch[opts.Node]++
	epoch := k.epoch[opts.Node]
	k.mu.Unlock()
	return &Session{k: k, db: db, opts: opts, epoch: epoch, fetched: map[int]int64{}, wake: make(chan struct{}, 1)}
}

// Submit queues a request (engine.Durability).
func (s *Session) Submit(r committer.Request) error {
	if _, ok := r.(interface{ Partition() int }); !ok {
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

// Encode takes the queued requests into the open transaction, each into
// its partition's overlay, and returns how many it took. A request whose
// Encode fails hears Fail with its error; the transaction then cannot
// commit (Finish aborts it), as the engine's contract says.
func (s *Session) Encode() int {
	s.mu.Lock()
	q := s.queue
	s.queue = nil
	s.mu.Unlock()
	if s.overlays == nil {
		s.overlays, s.bad = map[int]*store.Batch{}, map[int]bool{}
	}
	for _, r := range q {
		p := -1
		if pr, ok := r.(interface{ Partition() int }); ok {
			p = pr.Partition()
		}
		if p < 0 {
			s.opts.Errorf("a %T reached the cluster session", r)
			continue
		}
		b := s.overlays[p]
		if b == nil {
			b = s.db.NewBatch()
			s.overlays[p] = b
		}
		if err := b.Stage(r.Encode); err != nil {
			s.bad[len(s.open)] = true
			r.Fail(err)
		}
		s.open = append(s.open, r)
	}
	return len(q)
}

// Finish ends the open transaction. Committed (commit, no Encode failed,
// the session not fenced): every overlay goes to its changelog and then to
// the store with the position it reaches, staged messages and egress
// records become visible, the consumed offsets are committed, and the
// requests hear Durable and AfterGroup. Otherwise all of it is dropped,
// the consumer rewinds to the committed offsets, the requests hear Fail
// (wrapping committer.ErrAborted, or committer.ErrStopped when fenced) and the
// partitions the transaction touched are listed for Rebuild. Finish
// returns ErrFenced when a newer session fenced this one.
func (s *Session) Finish(commit bool) error {
	open, bad, overlays := s.open, s.bad, s.overlays
	s.open, s.bad, s.overlays = nil, nil, nil
	msgs, egress := s.msgs, s.egress
	s.msgs, s.egress = nil, nil
	s.k.mu.Lock()
	fenced := s.epoch != s.k.epoch[s.opts.Node]
	s.k.mu.Unlock()
	if !commit || len(bad) > 0 || fenced {
		for _, b := range overlays {
			b.Close()
		}
		s.k.mu.Lock()
		for p := range s.fetched {
			s.fetched[p] = s.k.committed[p]
		}
		s.k.mu.Unlock()
		if s.rebuild == nil {
			s.rebuild = map[int]bool{}
		}
		for p := range overlays {
			s.rebuild[p] = true
		}
		cause := fmt.Errorf("%w: the test aborted it", committer.ErrAborted)
		switch {
		case fenced:
			cause = fmt.Errorf("%w: %w", committer.ErrStopped, ErrFenced)
		case commit:
			cause = fmt.Errorf("%w: a request of the transaction failed to encode", committer.ErrAborted)
		}
		for i, r := range open {
			if !bad[i] {
				r.Fail(cause)
			}
		}
		if fenced {
			return ErrFenced
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
	n := s.Encode()
	if n > 0 || len(s.open) > 0 {
		return n, s.Finish(commit)
	}
	return n, nil
}

// Rebuild returns, in order, the partitions the aborted transactions since
// the last call touched, and forgets them: the real session revokes each,
// restores it (the tail) and assigns it again.
func (s *Session) Rebuild() []int {
	var out []int
	for p := range s.db.Partitions() {
		if s.rebuild[p] {
			out = append(out, p)
		}
	}
	s.rebuild = nil
	return out
}

// Poll returns the records of partition p past the consumer's position
// (the committed offset, or the records polled since) and moves the
// position past them, as the session's fetch does for an owned partition.
func (s *Session) Poll(p int) []Record {
	s.k.mu.Lock()
	defer s.k.mu.Unlock()
	from := max(s.fetched[p], s.k.committed[p])
	var recs []Record
	for off := from; off < int64(len(s.k.messages[p])); off++ {
		recs = append(recs, Record{Offset: off, Env: s.k.messages[p][off]})
	}
	if len(recs) > 0 {
		s.fetched[p] = recs[len(recs)-1].Offset + 1
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

// Forget rewinds the consumer of partition p to its committed offset, as a
// revocation does (the next owner fetches from there).
func (s *Session) Forget(p int) {
	s.k.mu.Lock()
	defer s.k.mu.Unlock()
	delete(s.fetched, p)
}
