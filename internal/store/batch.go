package store

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/cockroachdb/pebble/v2"
	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/protocol"
	"google.golang.org/protobuf/proto"
)

// Batch collects writes to commit atomically: after a crash either all of a
// committed batch is in the store or none of it. The engine builds one Batch
// per group commit (state changes, consumed inbox messages, produced
// messages, egress records, timer changes and partition meta of every
// partition in the group) and commits it with sync.
//
// The Put and Delete methods do not fail: the layouts cannot fail to encode,
// and a record that protobuf refuses to marshal (a string field that is not
// valid UTF-8) is remembered and returned by Commit, which then writes
// nothing. They panic on programmer errors: a partition outside the store's,
// a nil record, use after Commit or Close. Writes in one batch apply in
// order, so a later write to the same key wins.
//
// A Batch is not safe for concurrent use. Its writes are invisible to reads
// until Commit.
type Batch struct {
	db  *DB
	pb  *pebble.Batch
	key []byte // scratch for encoding keys; pebble copies them
	val []byte // scratch for encoding values
	err error  // the first encoding error, returned by Commit
	// stage is the scratch batch of Stage, kept for reuse.
	stage *Batch
	// touched lists the entries given a history record (history.go), for
	// the retention sweep once the batch is committed.
	touched []string
	// added counts the records it adds to each space the retention bounds
	// by count (pressure.go).
	added [retainedSpaces]int32
}

// NewBatch returns an empty batch. Call Close when done with it, committed
// or not.
func (db *DB) NewBatch() *Batch {
	return &Batch{db: db, pb: db.pdb.NewBatch()}
}

// live returns the pebble batch, panicking if b was committed or closed.
func (b *Batch) live() *pebble.Batch {
	if b.pb == nil {
		panic("store: batch used after Commit or Close")
	}
	return b.pb
}

// partition checks that p is a partition of the store.
func (b *Batch) partition(p int) int {
	if p < 0 || p >= b.db.partitions {
		panic(fmt.Sprintf("store: partition %d out of range [0, %d)", p, b.db.partitions))
	}
	return p
}

func (b *Batch) set(key, val []byte) {
	// pebble's Set fails only on an indexed batch whose index rejects the
	// key, which ours are not.
	if err := b.live().Set(key, val, nil); err != nil {
		panic(fmt.Sprintf("store: batch set %s: %v", formatKey(key), err))
	}
}

func (b *Batch) delete(key []byte) {
	if err := b.live().Delete(key, nil); err != nil {
		panic(fmt.Sprintf("store: batch delete %s: %v", formatKey(key), err))
	}
}

// setProto writes m at key (b.key).
func (b *Batch) setProto(key []byte, m proto.Message) {
	val, err := marshalOpts.MarshalAppend(b.val[:0], m)
	if err != nil {
		if b.err == nil {
			b.err = fmt.Errorf("store: encode %s: %w", formatKey(key), err)
		}
		return
	}
	b.val = val
	b.set(key, val)
}

// PutState writes the entry of state of instance a.
func (b *Batch) PutState(a address.Address, state string, e Entry) {
	b.key = stateKey(b.key[:0], a, state)
	b.val = appendEntry(b.val[:0], e)
	b.set(b.key, b.val)
}

// DeleteState removes the entry of state of instance a, if any.
func (b *Batch) DeleteState(a address.Address, state string) {
	b.key = stateKey(b.key[:0], a, state)
	b.delete(b.key)
}

// PutInbox writes a message into a partition inbox.
func (b *Batch) PutInbox(k InboxKey, env *protocol.Envelope) {
	if env == nil {
		panic("store: PutInbox with a nil envelope")
	}
	b.partition(k.Partition)
	b.key = inboxKey(b.key[:0], k)
	b.setProto(b.key, env)
}

// DeleteInbox removes a message from a partition inbox (it was consumed).
func (b *Batch) DeleteInbox(k InboxKey) {
	b.partition(k.Partition)
	b.key = inboxKey(b.key[:0], k)
	b.delete(b.key)
}

// PutTimer writes a delayed message: env is delivered to its target at
// k.Due. Its caller is the sender; its CancellationToken is set when the
// sender gave one, and then the token's entry in the index by token
// (TimerByToken) is written too, naming this timer.
func (b *Batch) PutTimer(k TimerKey, env *protocol.Envelope) {
	if env == nil {
		panic("store: PutTimer with a nil envelope")
	}
	b.partition(k.Partition)
	b.key = timerKey(b.key[:0], k)
	b.setProto(b.key, env)
	if tok := env.GetCancellationToken(); tok != "" {
		b.putToken(k, env.GetCaller().GetId(), tok)
	}
}

func (b *Batch) putToken(k TimerKey, sender, token string) {
	b.key = tokenKey(b.key[:0], k.Partition, sender, token)
	b.val = appendTokenValue(b.val[:0], k)
	b.set(b.key, b.val)
}

// DeleteTimerToken removes the entry of a cancellation token from the
// index by token: the timer sender scheduled with token in partition p
// was delivered or cancelled. The caller deletes it only when no timer
// written by the same batch took the token again.
func (b *Batch) DeleteTimerToken(p int, sender, token string) {
	b.key = tokenKey(b.key[:0], b.partition(p), sender, token)
	b.delete(b.key)
}

// DeleteTimer removes a delayed message (it was delivered or cancelled).
func (b *Batch) DeleteTimer(k TimerKey) {
	b.partition(k.Partition)
	b.key = timerKey(b.key[:0], k)
	b.delete(b.key)
}

// PutSpecs replaces the registered state specs of function type t.
func (b *Batch) PutSpecs(t address.TypeName, specs []*protocol.FromFunction_PersistedValueSpec) {
	b.key = specsKey(b.key[:0], t)
	b.setProto(b.key, &protocol.Specs{Specs: specs})
}

// PutMeta replaces the meta record of partition p.
func (b *Batch) PutMeta(p int, m PartitionMeta) {
	b.key = partitionKey(b.key[:0], b.partition(p))
	b.setProto(b.key, &protocol.PartitionMeta{CommitId: m.CommitID, VersionSeq: m.VersionSeq})
}

// PutEgress writes a record into the outbox (egress, route) at seq. egress is
// the egress's typename as one string, "namespace/type".
func (b *Batch) PutEgress(egress, route string, seq uint64, rec *protocol.EgressRecord) {
	b.added[retainedEgress]++
	if rec == nil {
		panic("store: PutEgress with a nil record")
	}
	b.key = egressKey(b.key[:0], egress, route, seq)
	b.setProto(b.key, rec)
}

// DeleteEgress removes a record from the outbox (egress, route) (it was
// handed on).
func (b *Batch) DeleteEgress(egress, route string, seq uint64) {
	b.key = egressKey(b.key[:0], egress, route, seq)
	b.delete(b.key)
}

// DeleteEgressThrough removes every record of the outbox (egress, route)
// whose sequence number is at most seq (a consumer acknowledged them), with
// one range deletion.
func (b *Batch) DeleteEgressThrough(egress, route string, seq uint64) {
	lower := egressKey(nil, egress, route, 0)
	upper := prefixSuccessor(egressPrefix(nil, egress, route))
	if seq < math.MaxUint64 {
		upper = egressKey(nil, egress, route, seq+1)
	}
	if err := b.live().DeleteRange(lower, upper, nil); err != nil {
		panic(fmt.Sprintf("store: batch delete range %s: %v", formatKey(lower), err))
	}
}

// PutEgressSeq records seq as the highest egress sequence number written so
// far: MaxEgressSeq never returns less, even after every outbox emptied.
// The engine writes it with the records it numbers.
func (b *Batch) PutEgressSeq(seq uint64) {
	b.key = metaKey(b.key[:0], metaEgressSeq)
	b.val = binary.BigEndian.AppendUint64(b.val[:0], seq)
	b.set(b.key, b.val)
}

// Stage runs fn, which adds the writes of one request, and keeps them only
// if every record encodes and fn returns nil: otherwise it returns fn's
// error or the first encoding error, and b is as it was before fn. So a record that protobuf refuses (a string that
// is not valid UTF-8) fails only the request it belongs to, not the group
// commit it would have joined. The writes are copied once into b.
func (b *Batch) Stage(fn func(*Batch) error) error {
	pb := b.live()
	if b.stage == nil {
		b.stage = b.db.NewBatch()
	}
	st := b.stage
	err := fn(st)
	if err == nil {
		err = st.err
	}
	if err != nil {
		st.err = nil
		st.touched = st.touched[:0]
		st.live().Reset()
		return err
	}
	b.touched = append(b.touched, st.touched...)
	st.touched = st.touched[:0]
	if st.live().Empty() {
		return nil
	}
	err = pb.Apply(st.pb, nil)
	st.pb.Reset()
	if err != nil {
		return fmt.Errorf("store: stage: %w", err)
	}
	return nil
}

// DeleteKey deletes key, whatever its space: the deletions a partition's
// owner makes through its changelog for the retention sweep
// (DB.SetChangelogSweep).
func (b *Batch) DeleteKey(key []byte) { b.delete(key) }

// Len returns the number of writes in the batch.
func (b *Batch) Len() int { return int(b.live().Count()) }

// Size returns the size of the batch's encoding in bytes, roughly what it
// adds to the write-ahead log.
func (b *Batch) Size() int { return b.live().Len() }

// Commit applies every write of the batch to the store in one atomic Pebble
// batch. With sync, it returns only once the batch is durable on disk (the
// write-ahead log is synced); without, a crash of the machine or process may
// lose it (whole, never in part), though reads see it at once. An empty batch
// commits nothing and returns nil at once.
//
// Commit returns the first encoding error of the batch, if any, and then
// writes nothing. After Commit, only Close may be called. (Pebble treats a
// failed write of its log as fatal and stops the process through its
// Logger.Fatalf.)
func (b *Batch) Commit(sync bool) error {
	pb, err := b.ready(sync)
	if err != nil || pb == nil {
		return err
	}
	opts := pebble.NoSync
	if sync {
		opts = pebble.Sync
	}
	err = pb.Commit(opts)
	b.Close()
	if err != nil {
		return fmt.Errorf("store: commit: %w", err)
	}
	b.committed()
	return nil
}

// Apply writes the batch as Commit(true) does, but returns as soon as its
// writes are applied — visible to reads, as a synced Commit's are while
// the log syncs — and leaves the wait for the sync to the returned
// Applied. So one goroutine can encode and apply the next batch while
// this one's sync runs: the store syncs its log in order, so a batch
// applied later is never durable before this one.
//
// Apply returns the batch's first encoding error, or the store's, and then
// writes nothing. Call Applied.Wait exactly once; after Apply, only Close
// may be called on b, and it must not be before Wait returned (Wait closes
// the batch itself). An empty batch is durable at once.
func (b *Batch) Apply() (*Applied, error) {
	pb, err := b.ready(true)
	if err != nil {
		return nil, err
	}
	if pb == nil {
		return &Applied{}, nil
	}
	if err := b.db.pdb.ApplyNoSyncWait(pb, pebble.Sync); err != nil {
		b.Close()
		return nil, fmt.Errorf("store: commit: %w", err)
	}
	return &Applied{b: b}, nil
}

// Applied is a batch written by Apply whose sync may still be running.
type Applied struct {
	b *Batch // nil: nothing to wait for
}

// Wait returns once the batch is durable, or the error that made it never
// be; it releases the batch.
func (a *Applied) Wait() error {
	b := a.b
	if b == nil {
		return nil
	}
	a.b = nil
	err := b.pb.SyncWait()
	b.Close()
	if err != nil {
		return fmt.Errorf("store: commit: %w", err)
	}
	b.committed()
	return nil
}

// ready returns the pebble batch to commit, or nil (and b closed) when it
// is empty; on an encoding error, or a store that cannot take a write, it
// closes b and returns the error.
func (b *Batch) ready(sync bool) (*pebble.Batch, error) {
	pb := b.live()
	if b.err != nil {
		b.Close()
		return nil, b.err
	}
	if pb.Empty() {
		b.Close()
		return nil, nil
	}
	if sync {
		// A synced commit is what work is acknowledged on: first make
		// sure it goes into the directory a restart will open (one
		// stat call, next to a sync of the log).
		if err := b.db.checkDir(false); err != nil {
			b.Close()
			return nil, fmt.Errorf("store: commit: %w", err)
		}
	} else if err := b.db.health.fatalErr(); err != nil {
		b.Close()
		return nil, fmt.Errorf("store: commit: %w", err)
	}
	return pb, nil
}

// committed does the bookkeeping of a committed batch: its history
// records for the retention sweep, its records for the space bounds.
func (b *Batch) committed() {
	if len(b.touched) > 0 {
		b.db.histTouched.add(b.touched)
	}
	b.db.wrote(&b.added)
	b.added = [retainedSpaces]int32{}
}

// Close releases the batch, discarding its writes if it was not committed.
// Close may be called more than once.
func (b *Batch) Close() {
	if b.stage != nil {
		b.stage.Close()
		b.stage = nil
	}
	if b.pb != nil {
		_ = b.pb.Close()
		b.pb = nil
	}
}

// PutReceipt writes a mutation's receipt, replacing an earlier one.
func (b *Batch) PutReceipt(r *protocol.Receipt) {
	b.added[retainedReceipts]++
	b.setProto(receiptKey(b.key[:0], r.GetMutation()), r)
}

// PutAudit appends one record to the audit log, with its entries in the
// indexes by target address, by principal, by mutation and by function
// type.
func (b *Batch) PutAudit(r *protocol.AuditRecord) {
	b.added[retainedAudit]++
	b.key = auditKey(b.key[:0], r.GetAt(), r.GetMutation(), r.GetState())
	b.setProto(b.key, r)
	b.putAuditIndex(r)
}

// putAuditIndex writes the index entries of audit record r.
func (b *Batch) putAuditIndex(r *protocol.AuditRecord) {
	at, id, state := r.GetAt(), r.GetMutation(), r.GetState()
	b.key = auditAddrKey(b.key[:0], auditTarget(r), at, id, state)
	b.set(b.key, nil)
	b.key = auditWhoKey(b.key[:0], r.GetPrincipal(), at, id, state)
	b.set(b.key, nil)
	b.key = auditMutationKey(b.key[:0], at, id, state)
	b.set(b.key, nil)
	b.key = auditTypeKey(b.key[:0], auditTarget(r).Type, at, id, state)
	b.set(b.key, nil)
}

// deleteAudit removes audit record r and its index entries.
func (b *Batch) deleteAudit(r *protocol.AuditRecord) {
	at, id, state := r.GetAt(), r.GetMutation(), r.GetState()
	b.key = auditKey(b.key[:0], at, id, state)
	b.delete(b.key)
	b.key = auditAddrKey(b.key[:0], auditTarget(r), at, id, state)
	b.delete(b.key)
	b.key = auditWhoKey(b.key[:0], r.GetPrincipal(), at, id, state)
	b.delete(b.key)
	b.key = auditMutationKey(b.key[:0], at, id, state)
	b.delete(b.key)
	b.key = auditTypeKey(b.key[:0], auditTarget(r).Type, at, id, state)
	b.delete(b.key)
}

// auditTarget is the address an audit record is about.
func auditTarget(r *protocol.AuditRecord) address.Address {
	t := r.GetTarget()
	return address.Address{Type: address.TypeName{Namespace: t.GetNamespace(), Name: t.GetType()}, ID: t.GetId()}
}
