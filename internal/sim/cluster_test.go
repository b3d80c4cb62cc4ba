package sim

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/cluster/sessiontest"
	"github.com/statefun-go/statefun/internal/engine"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// The cluster variant (TestSimulationCluster) runs the same engine with
// Options.Owned, its Durability and Outbound the cluster session's test
// double (package sessiontest) over an in-memory Kafka, all on the
// simulation's goroutine. The double is a shell around the commit cycle's
// state machine (package cycle), the one the real session drives: every
// decision of a cycle here — what a transaction takes, when it aborts,
// when the membership is checked, what is rebuilt — is production's. Kafka outlives every crash; the process's store
// is a cache of it. docs/explanation/testing.md, "The cluster variant", says what it
// models and what it does not.

// clusterSim is the part of a world that only cluster mode has.
type clusterSim struct {
	k    *sessiontest.Kafka
	s    *sessiontest.Session // the current process's session
	node string               // the current process's node id
	// zombie is a process a successor replaced while its transaction was
	// open: its commit must be fenced.
	zombie *zombie

	aborts, moves, wipes, zombies, rewinds, stalls, revokes, losses int
}

type zombie struct {
	eng     *engine.Engine
	db      *store.DB
	s       *sessiontest.Session
	stalled bool // replaced by another node id: fenced by the group, not the epoch
}

// clusterOptions makes the engine of a new process a cluster node on a new
// session, which fences the sessions before it (a successor's
// InitProducerID); assignAll then gives it every partition.
func (w *world) clusterOptions(o *engine.Options, db *store.DB) {
	s := sessiontest.NewSession(w.cl.k, db, sessiontest.Options{
		Node:   w.cl.node,
		Errorf: func(f string, args ...any) { w.fail("the cluster session: "+f, args...) },
	})
	w.cl.s = s
	o.Owned, o.Durability, o.Outbound = true, s, s
}

// assignAll restores every partition from the changelog and assigns it, as
// the session does for a process the group gives every partition.
func (w *world) assignAll() {
	for p := range partitions {
		w.restorePart(p)
	}
}

// restorePart assigns partition p to the process, as the group does: the
// session restores its store data to the end of its changelog and hands it
// to the engine. The store then says what the changelog says.
func (w *world) restorePart(p int) {
	w.must(w.cl.s.Assign(p), fmt.Sprintf("assign partition %d", p))
	w.checkStoreIsChangelog(p)
}

// checkStoreIsChangelog holds after every restore: the store's data of
// partition p is the committed changelog replayed (the last record of each
// key, none deleted), at the changelog's end — nothing of an aborted
// transaction, nothing lost. Specs are left out: several partitions write
// the specs of one function type (a cache, docs/reference/storage.md).
func (w *world) checkStoreIsChangelog(p int) {
	ops := w.cl.k.Changelog(p)
	want := map[string][]byte{}
	for _, op := range ops {
		if op.Delete {
			delete(want, string(op.Key))
		} else {
			want[string(op.Key)] = op.Value
		}
	}
	pos, _, err := w.db.ChangelogPosition(p)
	w.must(err, "changelog position")
	if pos.Next != int64(len(ops)) {
		w.fail("partition %d restored to changelog offset %d; the changelog ends at %d", p, pos.Next, len(ops))
	}
	for k, v := range want {
		if k[0] == specsSpace {
			continue
		}
		got, ok, err := w.db.RawGet([]byte(k))
		w.must(err, "read the store")
		if !ok || !bytes.Equal(got, v) {
			w.fail("partition %d: the store holds %x = %x (present %v); the committed changelog says %x", p, k, got, ok, v)
		}
	}
	err = w.db.ChangelogKeys(p, func(key []byte) error {
		if _, ok := want[string(key)]; !ok && key[0] != specsSpace {
			w.fail("partition %d: the store holds %x, which the committed changelog does not (an aborted or lost write)", p, key)
		}
		return nil
	})
	w.must(err, "list the changelog's keys")
}

// specsSpace is the store's key space of registered specs (0x05).
const specsSpace = 0x05

// produce appends a record to the messages topic of its address's
// partition, as the playground ingress and the state API do in cluster
// mode; Kafka has it once this returns.
func (w *world) produce(to string, env *protocol.Envelope) {
	w.cl.k.Produce(address.Partition(to, partitions), env)
}

// fetch hands the records of partition p past the consumer's position to
// the engine, as the session does for a partition it serves.
func (w *world) fetch(p int) {
	recs := w.cl.s.Poll(p)
	w.logf("fetch %d: %d records", p, len(recs))
	if len(recs) == 0 {
		return
	}
	arr := make([]engine.Arrival, len(recs))
	for i, r := range recs {
		arr[i] = engine.Arrival(r)
	}
	_, err := w.eng.SubmitArrivals(p, arr)
	w.must(err, fmt.Sprintf("submit arrivals of partition %d", p))
}

// fetchSome fetches a partition with records waiting, if any.
func (w *world) fetchSome() {
	var ready []int
	for p := range partitions {
		if w.cl.s.Unpolled(p) {
			ready = append(ready, p)
		}
	}
	if len(ready) > 0 {
		w.fetch(ready[w.rng.IntN(len(ready))])
	}
}

// rebuild restores and assigns again the partitions an aborted
// transaction left behind, as the session's Machine decided: their cores
// moved past work that will never commit and were revoked at the abort.
// What was applied in it and answered is lost, as in a crash.
func (w *world) rebuild() {
	ps, err := w.cl.s.Rebuild()
	w.must(err, "rebuild")
	if len(ps) == 0 {
		return
	}
	w.logf("rebuild %v", ps)
	w.m.crashed(false, 0)
	for _, p := range ps {
		w.checkStoreIsChangelog(p)
	}
	w.poll()
	w.scanInboxes()
}

// abort ends the open transaction with an abort, as a rebalance or a
// failed EndTxn does.
func (w *world) abort() {
	if w.d.Commits() == 0 {
		return
	}
	w.cl.aborts++
	w.logf("abort a cycle")
	_, err := w.cl.s.Cycle(false)
	w.must(err, "abort")
	w.rebuild()
}

// move gives partition p to another process and back, as a rebalance
// does: the session ends its transaction (committed, or aborted), the
// engine revokes p, and p restores — the tail of the changelog onto the
// warm store, or, as on a fresh node, all of it after its data is dropped
// — and is assigned again.
func (w *world) move() {
	p := w.rng.IntN(partitions)
	fresh := w.rng.IntN(3) == 0
	if w.rng.IntN(3) == 0 {
		w.abort()
	} else {
		w.commit()
	}
	w.cl.moves++
	w.logf("move partition %d (fresh store %v)", p, fresh)
	if w.rng.IntN(3) == 0 {
		// The group's offsets were moved back meanwhile: the next owner
		// polls records the partition applied before.
		n := int64(w.rng.IntN(20) + 1)
		w.cl.rewinds++
		w.logf("rewind the group's offset of partition %d by %d", p, n)
		w.cl.k.Rewind(p, n)
	}
	w.cl.s.Revoke(p)
	if fresh {
		_, err := w.db.DropChangelogPartition(p)
		w.must(err, "drop a partition's data")
	}
	w.restorePart(p)
	w.poll()
	w.scanInboxes()
}

// revokeMidCycle revokes a partition while a transaction is open, as a
// rebalance does that moves it away and back: the group's generation moves
// on, so the transaction cannot commit (with polled offsets the group
// refuses their commit; without, the Machine's membership check aborts
// it), and the partition is assigned again.
func (w *world) revokeMidCycle() {
	if w.d.Commits() == 0 {
		return
	}
	p := w.rng.IntN(partitions)
	w.cl.revokes++
	w.logf("revoke partition %d with the transaction open", p)
	w.cl.s.Encode()
	w.cl.k.Rebalance()
	w.cl.s.Revoke(p)
	w.must(w.cl.s.Finish(true), "end the transaction after a revocation")
	w.m.crashed(false, 0)
	w.restorePart(p)
	w.rebuild()
	w.poll()
	w.scanInboxes()
}

// loseMidCycle makes the process lose every partition while a transaction
// is open, as when its session timed out and its client joined the group
// again under a new member id: the transaction cannot commit, and every
// partition is assigned again.
func (w *world) loseMidCycle() {
	if w.d.Commits() == 0 {
		return
	}
	w.cl.losses++
	w.logf("lose every partition with the transaction open")
	w.cl.s.Encode()
	w.cl.s.Rejoin()
	w.must(w.cl.s.Finish(true), "end the transaction after the partitions were lost")
	w.m.crashed(false, 0)
	w.assignAll()
	w.rebuild()
	w.poll()
	w.scanInboxes()
}

// crashCluster ends the process: Kafka keeps what was committed, the
// process loses its uncommitted overlays, and its disk keeps what Pebble
// synced and a random share of the rest — or, as when the node is replaced
// by a fresh one, nothing. The next process restores every partition.
func (w *world) crashCluster() {
	pct := w.rng.IntN(101)
	wipe := w.rng.IntN(3) == 0
	w.logf("crash (unsynced data kept: %d%%, store wiped %v)", pct, wipe)
	if w.rng.IntN(4) == 0 {
		// Down long enough for Kafka to expire the group's offsets: the
		// next process polls every partition from the start.
		w.cl.rewinds++
		w.logf("the group's offsets expired")
		for p := range partitions {
			w.cl.k.Rewind(p, 1<<62)
		}
	}
	next := w.nextDisk(pct, wipe)
	w.eng.Close()
	_ = w.db.Close()
	w.restart(next)
}

// nextDisk is the disk of the next process: a crash clone of this one, or
// a new one.
func (w *world) nextDisk(pct int, wipe bool) *vfs.MemFS {
	clone := w.mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: pct, RNG: rand.New(rand.NewPCG(w.rng.Uint64(), 1))})
	if wipe {
		w.cl.wipes++
		return vfs.NewCrashableMem()
	}
	return clone
}

// restart opens the next process on disk, forgetting what the callers of
// the last one were waiting for.
func (w *world) restart(disk *vfs.MemFS) {
	w.m.crashed(false, 0)
	w.ingresses, w.mutations, w.reads, w.pops = nil, nil, nil, nil
	w.mem = disk
	w.epoch++
	w.open()
}

// startZombie replaces the process while its transaction is open, as when
// it stalled past its session timeout and a successor with its node id
// took over: the successor's session fences it, and its commit, tried
// later (fenceZombie), must leave no trace.
func (w *world) startZombie() {
	if w.d.Commits() == 0 || w.cl.zombie != nil {
		return
	}
	pct := w.rng.IntN(101)
	wipe := w.rng.IntN(3) == 0
	w.cl.zombies++
	w.logf("stall: a successor takes over with the transaction open (unsynced data kept: %d%%, store wiped %v)", pct, wipe)
	w.cl.s.Encode()
	w.cl.zombie = &zombie{eng: w.eng, db: w.db, s: w.cl.s}
	w.restart(w.nextDisk(pct, wipe))
}

// startStalled replaces the process while its transaction is open by a
// process of another node id, as when it stalled past its session timeout
// and the group gave its partitions to another node: its producer epoch is
// not fenced (another transactional id), but its group member is gone. Its
// commit, tried later (fenceZombie), must leave no trace: the Machine's
// membership check, or the group's refusal of its offsets, aborts it.
func (w *world) startStalled() {
	if w.d.Commits() == 0 || w.cl.zombie != nil {
		return
	}
	pct := w.rng.IntN(101)
	wipe := w.rng.IntN(3) == 0
	w.cl.stalls++
	old := w.cl.node
	w.cl.node = fmt.Sprintf("node-%d", w.epoch+1)
	w.logf("stall: node %s takes over from %q with the transaction open (unsynced data kept: %d%%, store wiped %v)", w.cl.node, old, pct, wipe)
	w.cl.s.Encode()
	w.cl.k.Expel(old)
	w.cl.zombie = &zombie{eng: w.eng, db: w.db, s: w.cl.s, stalled: true}
	w.restart(w.nextDisk(pct, wipe))
}

// fenceZombie lets the replaced process try to commit: it must be fenced
// (a zombie of its own node id) or abort (a stalled one of another), with
// nothing of its transaction in Kafka.
func (w *world) fenceZombie() {
	z := w.cl.zombie
	if z == nil {
		return
	}
	w.cl.zombie = nil
	before := w.kafkaSize()
	err := z.s.Finish(true)
	switch {
	case z.stalled && err != nil:
		w.fail("the stalled process's commit: %v; want it aborted", err)
	case !z.stalled && !errors.Is(err, sessiontest.ErrFenced):
		w.fail("the replaced process's commit: %v; want it fenced", err)
	}
	if after := w.kafkaSize(); after != before {
		w.fail("the fenced commit changed Kafka: %s, before %s", after, before)
	}
	w.logf("the replaced process's commit was fenced")
	z.eng.Close()
	_ = z.db.Close()
}

// kafkaSize sums up what Kafka holds: records per topic, committed
// offsets.
func (w *world) kafkaSize() string {
	msgs, logs, offs := 0, 0, int64(0)
	for p := range partitions {
		msgs += len(w.cl.k.Messages(p))
		logs += len(w.cl.k.Changelog(p))
		offs += w.cl.k.Committed(p)
	}
	return fmt.Sprintf("%d messages, %d changelog records, %d egress records, offsets summing to %d", msgs, logs, len(w.cl.k.Egress()), offs)
}

// moved reports whether err is a cluster answer that leaves the outcome
// unknown: the partition was revoked or rebuilt while the caller waited.
func moved(err error) bool {
	return errors.Is(err, engine.ErrMoved) || errors.Is(err, engine.ErrAborted)
}

// command is the state API's command for mutation pm, as it produces it
// to the messages topic (docs/explanation/cluster.md, the state API on every node).
func command(pm partition.Mutation) *protocol.Envelope {
	sm := &protocol.StateMutation{
		Id: pm.ID, Target: target(pm.Addr.ID), State: pm.State, Op: int32(pm.Op), Typename: pm.Typename,
		Value: pm.Value, IfMatch: pm.IfMatch, IfNoneMatch: pm.IfNoneMatch, Principal: pm.Principal,
	}
	if c := pm.IfMatchTags; c != nil {
		sm.IfMatchTags = &protocol.Condition{Any: c.Any, Versions: c.Versions}
	}
	return &protocol.Envelope{Mutation: sm}
}

// kafkaEgress counts the egress records committed to Kafka by argument.
func (w *world) kafkaEgress(got map[string]int) {
	for _, eg := range w.cl.k.Egress() {
		if eg.Egress != egressID {
			w.fail("an egress record for %s", eg.Egress)
		}
		got[string(eg.Record.GetArgument().GetValue())]++
	}
}
