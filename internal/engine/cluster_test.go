package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/cluster/sessiontest"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// The tests of this file drive the cluster-mode seam (cluster.go) with its
// own test double of the cluster session (package sessiontest, a shell
// around the commit cycle's Machine as the real session is): the
// topics in memory, and a session per engine that implements Durability
// and Outbound on them the way docs/explanation/cluster.md's commit protocol says. The
// real session is tested against Kafka in internal/cluster/session.

// restoreFrom applies partition p's changelog from the store's position
// to its end, as the session's restore does before Assign.
func restoreFrom(t *testing.T, k *sessiontest.Kafka, db *store.DB, p int) {
	t.Helper()
	if err := k.Restore(db, p); err != nil {
		t.Fatal(err)
	}
}

// relay is a remote function for the cluster tests: it counts its
// messages in state "n" and obeys their text: "fwd:<id>" forwards a
// message to <id>, "later:<id>" sends <id> a message in an hour, "out"
// sends an egress record.
type relay struct {
	mu    sync.Mutex
	seen  []string // "<id>:<text>"
	gate  chan struct{}
	calls int
}

func (f *relay) Call(ctx context.Context, _ address.TypeName, req *protocol.ToFunction) (*protocol.FromFunction, error) {
	f.mu.Lock()
	f.calls++
	gate := f.gate
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	b := req.GetInvocation()
	var n int64
	have := false
	for _, pv := range b.GetState() {
		if pv.GetStateName() == "n" {
			have = true
			if v := pv.GetStateValue(); v.GetHasValue() {
				n, _ = strconv.ParseInt(string(v.GetValue()), 10, 64)
			}
		}
	}
	if !have {
		return &protocol.FromFunction{Response: &protocol.FromFunction_IncompleteInvocationContext_{
			IncompleteInvocationContext: &protocol.FromFunction_IncompleteInvocationContext{
				MissingValues: []*protocol.FromFunction_PersistedValueSpec{{StateName: "n", TypeTypename: countTypename}},
			}}}, nil
	}
	res := &protocol.FromFunction_InvocationResponse{}
	text := func(id string) *protocol.TypedValue {
		return &protocol.TypedValue{Typename: "test/text", HasValue: true, Value: []byte("from " + id)}
	}
	self := b.GetTarget().GetId()
	f.mu.Lock()
	for _, inv := range b.GetInvocations() {
		s := string(inv.GetArgument().GetValue())
		f.seen = append(f.seen, self+":"+s)
		switch {
		case strings.HasPrefix(s, "fwd:"):
			res.OutgoingMessages = append(res.OutgoingMessages, &protocol.FromFunction_Invocation{
				Target: &protocol.Address{Namespace: counterType.Namespace, Type: counterType.Name, Id: s[4:]}, Argument: text(self)})
		case strings.HasPrefix(s, "later:"):
			res.DelayedInvocations = append(res.DelayedInvocations, &protocol.FromFunction_DelayedInvocation{DelayInMs: 3_600_000,
				Target: &protocol.Address{Namespace: counterType.Namespace, Type: counterType.Name, Id: s[6:]}, Argument: text(self)})
		case s == "out":
			res.OutgoingEgresses = append(res.OutgoingEgresses, &protocol.FromFunction_EgressMessage{
				EgressNamespace: "io", EgressType: "kafka", Argument: text(self)})
		}
	}
	f.mu.Unlock()
	n += int64(len(b.GetInvocations()))
	res.StateMutations = []*protocol.FromFunction_PersistedValueMutation{{
		MutationType: protocol.FromFunction_PersistedValueMutation_MODIFY, StateName: "n",
		StateValue: &protocol.TypedValue{Typename: countTypename, HasValue: true, Value: []byte(strconv.FormatInt(n, 10))},
	}}
	return &protocol.FromFunction{Response: &protocol.FromFunction_InvocationResult{InvocationResult: res}}, nil
}

func (f *relay) messages() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.seen...)
}

// clusterNode is one engine in cluster mode on its own store.
type clusterNode struct {
	t  *testing.T
	e  *Engine
	s  *sessiontest.Session
	db *store.DB
	// arrivalsDone is the channel of the last poll's SubmitArrivals.
	arrivalsDone <-chan error
}

// newClusterNode returns an owned engine over db with a session on k
// (auto-committing unless driven), with nothing assigned.
func newClusterNode(t *testing.T, k *sessiontest.Kafka, db *store.DB, fn Functions, driven bool, mod func(*Options)) *clusterNode {
	t.Helper()
	s := sessiontest.NewSession(k, db, sessiontest.Options{Auto: !driven, Errorf: t.Errorf})
	e := newEngine(t, db, fn, func(o *Options) {
		o.Owned, o.Durability, o.Outbound, o.Driven = true, s, s, driven
		o.Egress = func(namespace, typ string, arg *protocol.TypedValue) (string, error) { return "route", nil }
		if mod != nil {
			mod(o)
		}
	})
	s.Bind(e)
	return &clusterNode{t: t, e: e, s: s, db: db}
}

// poll hands the records of partition p past the consumer's position to
// the engine, as the session does for an owned partition.
func (n *clusterNode) poll(p int) {
	n.t.Helper()
	recs := n.s.Poll(p)
	if len(recs) == 0 {
		return
	}
	arr := make([]Arrival, len(recs))
	for i, r := range recs {
		arr[i] = Arrival(r)
	}
	ch, err := n.e.SubmitArrivals(p, arr)
	if err != nil {
		n.t.Fatal(err)
	}
	n.arrivalsDone = ch
}

// inboxKeysOf lists the partitions whose inbox keys ops write.
func inboxPartitions(ops []store.Op) map[int]bool {
	out := map[int]bool{}
	for _, op := range ops {
		if len(op.Key) >= 3 && op.Key[0] == 0x02 {
			out[int(binary.BigEndian.Uint16(op.Key[1:3]))] = true
		}
	}
	return out
}

func TestClusterOptionsGoTogether(t *testing.T) {
	db := openStore(t, vfs.NewMem(), 2)
	s := sessiontest.NewSession(sessiontest.NewKafka(), db, sessiontest.Options{Errorf: t.Errorf})
	for name, o := range map[string]Options{
		"owned without outbound":   {Owned: true, Durability: s},
		"outbound without owned":   {Outbound: s, Durability: s},
		"owned without durability": {Owned: true, Outbound: s},
	} {
		o.Store, o.Functions = db, &relay{}
		if _, err := New(o); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
}

// A message a function sends to another partition leaves through
// Outbound in the sender's transaction and never enters the sender's
// batch; the target's owner gets it from the messages topic. A message to
// the same partition stays local: in the batch, and delivered here.
func TestClusterMessagesToOtherPartitionsGoOutbound(t *testing.T) {
	const parts = 2
	k := sessiontest.NewKafka()
	fn := &relay{}
	n := newClusterNode(t, k, openStore(t, vfs.NewMem(), parts), fn, false, nil)
	for p := range parts {
		if err := n.s.Assign(p); err != nil {
			t.Fatal(err)
		}
	}
	n.e.Start()
	a, b, c := idIn(0, parts, "a"), idIn(1, parts, "b"), idIn(0, parts, "c")

	k.Produce(0, msg(a, "fwd:"+b))
	k.Produce(0, msg(a, "fwd:"+c))
	k.Produce(0, msg(a, "out"))
	n.poll(0)
	waitFor(t, "c got a's message (same partition)", func() bool { return n.db != nil && storedCount(t, n.db, c) == "1" })
	waitFor(t, "a counted its three messages", func() bool { return storedCount(t, n.db, a) == "3" })

	toB := k.Messages(1)
	own := len(k.Messages(0))
	cl0 := k.Changelog(0)
	egress := k.Egress()
	if len(toB) != 1 || toB[0].GetTarget().GetId() != b || string(toB[0].GetArgument().GetValue()) != "from "+a {
		t.Fatalf("messages topic, partition 1: %v; want a's message to %s", toB, b)
	}
	if own != 3 {
		t.Errorf("messages topic, partition 0: %d records; want only the three produced (c's message stays local)", own)
	}
	if got := inboxPartitions(cl0); got[1] || !got[0] {
		t.Errorf("partition 0's changelog writes inboxes of partitions %v; want its own only", got)
	}
	if len(egress) != 1 || egress[0].Egress != "io/kafka" {
		t.Errorf("egress records through Outbound: %+v; want one for io/kafka", egress)
	}
	for _, op := range cl0 {
		if op.Key[0] == 0x07 {
			t.Errorf("partition 0's changelog writes an egress outbox key: %x", op.Key)
		}
	}
	if got := storedCount(t, n.db, b); got != "" {
		t.Fatalf("b counted %q before its partition polled the message", got)
	}
	n.poll(1)
	waitFor(t, "b got a's message from the messages topic", func() bool { return storedCount(t, n.db, b) == "1" })
}

// storedCount reads state n of counter id from the store ("" when absent).
func storedCount(t *testing.T, db *store.DB, id string) string {
	t.Helper()
	v, ok, err := db.GetState(addr(id), "n")
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return ""
	}
	return string(v.Value)
}

// inboxView is what an operator sees of an address's inbox, without the
// times a rebuild resets (when the core got each message).
type inboxView struct {
	paused  bool
	queued  []string
	delayed []string
}

func viewInbox(t *testing.T, e *Engine, id string) inboxView {
	t.Helper()
	in, err := e.Inbox(context.Background(), addr(id))
	if err != nil {
		t.Fatal(err)
	}
	v := inboxView{paused: in.Pause != nil}
	for _, m := range in.Queued {
		v.queued = append(v.queued, FormatInboxKey(m.Key)+" "+m.Typename)
	}
	for _, d := range in.Delayed {
		v.delayed = append(v.delayed, fmt.Sprintf("%d/%d/%d", d.Key.Partition, d.Key.Due, d.Key.ID))
	}
	return v
}

// Revoke and Assign again, and Assign on another process from the
// changelog, rebuild a partition exactly: its state, the messages held in
// a paused address's inbox, its pending delayed messages and its pauses.
// Meanwhile the partition answers ErrMoved instead of blocking.
func TestClusterAssignRevokeAssignRebuildsFromTheStore(t *testing.T) {
	const parts = 2
	k := sessiontest.NewKafka()
	fn := &relay{}
	clock := &simClock{now: time.UnixMilli(1_000_000)}
	n := newClusterNode(t, k, openStore(t, vfs.NewMem(), parts), fn, false, func(o *Options) { o.Now = clock.Now })
	for p := range parts {
		if err := n.s.Assign(p); err != nil {
			t.Fatal(err)
		}
	}
	n.e.Start()
	ctx := context.Background()
	a, b, c := idIn(0, parts, "a"), idIn(1, parts, "b"), idIn(0, parts, "c")

	k.Produce(0, msg(a, "one"))
	k.Produce(0, msg(a, "later:"+b)) // a timer in partition 0, for b
	n.poll(0)
	waitFor(t, "a counted two", func() bool { return storedCount(t, n.db, a) == "2" })
	if _, err := n.e.Pause(ctx, PauseRequest{Mutation: "pause-c", Addr: addr(c), Principal: "test"}); err != nil {
		t.Fatal(err)
	}
	k.Produce(0, msg(c, "held 1"))
	k.Produce(0, msg(c, "held 2"))
	n.poll(0)
	waitFor(t, "c's two messages held in its inbox", func() bool { return len(viewInbox(t, n.e, c).queued) == 2 })

	before := struct{ c, b inboxView }{viewInbox(t, n.e, c), viewInbox(t, n.e, b)}
	if !before.c.paused || len(before.b.delayed) != 1 {
		t.Fatalf("before: c %+v, b %+v; want c paused, one delayed message for b", before.c, before.b)
	}

	n.s.Revoke(0)
	if got := n.e.Owned(); len(got) != 1 || got[0] != 1 {
		t.Fatalf("Owned after revoking 0: %v", got)
	}
	for name, err := range map[string]error{
		"read":     errOf(n.e.Read(ctx, addr(a), "n")),
		"mutate":   errOf(n.e.Mutate(ctx, partition.Mutation{ID: "m", Addr: addr(a), State: "n", Op: partition.OpPut, Value: []byte("9"), Ack: AckApplied})),
		"accepted": errOf(n.e.Mutate(ctx, partition.Mutation{ID: "m", Addr: addr(a), State: "n", Op: partition.OpPut, Value: []byte("9"), Ack: AckAccepted})),
		"ingest":   n.e.Ingest(ctx, msg(a, "x")),
		"inbox":    errOf(n.e.Inbox(ctx, addr(c))),
		"pause":    errOf(n.e.Pause(ctx, PauseRequest{Mutation: "p2", Addr: addr(a)})),
		"arrivals": errOf(n.e.SubmitArrivals(0, nil)),
	} {
		if !errors.Is(err, ErrMoved) {
			t.Errorf("%s on a revoked partition: %v; want ErrMoved", name, err)
		}
	}
	if got := viewInbox(t, n.e, b); len(got.delayed) != 0 {
		t.Errorf("b's delayed message (held by revoked partition 0) still listed: %+v", got)
	}

	if err := n.s.Assign(0); err != nil {
		t.Fatal(err)
	}
	after := struct{ c, b inboxView }{viewInbox(t, n.e, c), viewInbox(t, n.e, b)}
	if fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("after Revoke and Assign:\n%+v\nbefore:\n%+v", after, before)
	}
	if got := count(t, n.e, a); got != "2" {
		t.Fatalf("a = %q after the rebuild; want 2", got)
	}

	// Another process takes partition 0 over from the changelog alone.
	n.s.Revoke(0)
	m := newClusterNode(t, k, openStore(t, vfs.NewMem(), parts), fn, false, func(o *Options) { o.Now = clock.Now })
	restoreFrom(t, k, m.db, 0)
	if err := m.s.Assign(0); err != nil {
		t.Fatal(err)
	}
	m.e.Start()
	moved := viewInbox(t, m.e, c)
	if fmt.Sprint(moved) != fmt.Sprint(before.c) {
		t.Fatalf("c on the other process:\n%+v\nbefore:\n%+v", moved, before.c)
	}
	if got := count(t, m.e, a); got != "2" {
		t.Fatalf("a = %q on the other process; want 2", got)
	}
	// It goes on where the first left: resuming c runs its held messages,
	// and b's delayed message fires (to partition 1, through the topic).
	if _, err := m.e.Pause(ctx, PauseRequest{Mutation: "resume-c", Addr: addr(c), Resume: true, Principal: "test"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "c ran its two held messages", func() bool { return storedCount(t, m.db, c) == "2" })
	clock.advance(time.Hour + time.Millisecond)
	m.e.part(0).post(partition.Tick{}) // its timer waits on the wall clock
	waitFor(t, "the delayed message for b on the messages topic", func() bool { return len(k.Messages(1)) == 1 })
}

func errOf[T any](_ T, err error) error { return err }

// runUntilCommit steps a driven partition and runs its calls until a
// commit waits for the session.
func runUntilCommit(t *testing.T, d *Driver, p int) {
	t.Helper()
	for range 100 {
		if d.Commits() > 0 {
			return
		}
		if d.HasWork(p) {
			if err := d.Step(p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if len(d.Calls()) == 0 {
			t.Fatal("partition idle before a commit was submitted")
		}
		d.RunCall(0)
	}
	t.Fatal("no commit after 100 steps")
}

// A transaction aborted after a partition's commit was encoded (its state
// change and a message to another partition in it) stops only that
// partition; Revoke and Assign rebuild it from the store, which never saw
// the aborted work, and the non-durable suffix runs again: the state and
// the message come out once.
func TestClusterAbortThenReassignRerunsOnce(t *testing.T) {
	const parts = 2
	k := sessiontest.NewKafka()
	fn := &relay{}
	n := newClusterNode(t, k, openStore(t, vfs.NewMem(), parts), fn, true, nil)
	for p := range parts {
		if err := n.s.Assign(p); err != nil {
			t.Fatal(err)
		}
	}
	d := n.e.Driver()
	a, b := idIn(0, parts, "a"), idIn(1, parts, "b")
	k.Produce(0, msg(a, "fwd:"+b))
	n.poll(0)
	if err := d.Commit(); err != nil { // the arrival is durable in a's inbox
		t.Fatal(err)
	}
	runUntilCommit(t, d, 0) // a's state and its message for b wait to be committed
	n.s.Cycle(false)        // the transaction aborts

	if err := n.e.Err(); err != nil {
		t.Fatalf("the abort stopped the engine: %v", err)
	}
	leaked := len(k.Messages(1))
	if leaked != 0 || storedCount(t, n.db, a) != "" {
		t.Fatalf("aborted work reached the topic (%d messages) or the store (a = %q)", leaked, storedCount(t, n.db, a))
	}
	// Until the session assigns it again, the partition takes no work.
	if _, err := n.e.SubmitArrivals(0, nil); !errors.Is(err, ErrMoved) {
		t.Fatalf("arrivals for the aborted partition: %v; want ErrMoved", err)
	}
	if _, err := d.Read(addr(a), "n"); !errors.Is(err, ErrMoved) {
		t.Fatalf("a read of the aborted partition: %v; want ErrMoved", err)
	}

	n.s.Revoke(0)
	if err := n.s.Assign(0); err != nil {
		t.Fatal(err)
	}
	settle(t, d, parts)
	n.poll(1)
	settle(t, d, parts)
	if got := storedCount(t, n.db, a); got != "1" {
		t.Fatalf("a = %q after the re-run; want 1", got)
	}
	if got := storedCount(t, n.db, b); got != "1" {
		t.Fatalf("b = %q; want 1: a's message once", got)
	}
	sent := len(k.Messages(1))
	if sent != 1 {
		t.Fatalf("%d messages for b on the topic; want 1", sent)
	}
}

// Durable of a request of a revoked assignment releases nothing into the
// next one, and Assign refuses to rebuild while such a request is encoded
// and unsettled (its writes could reach the store after the rebuild read
// it). A request of a revoked assignment that was not encoded yet is
// refused at Encode without stopping the engine.
func TestClusterRequestsOfARevokedAssignment(t *testing.T) {
	k := sessiontest.NewKafka()
	fn := &relay{}
	n := newClusterNode(t, k, openStore(t, vfs.NewMem(), 1), fn, true, nil)
	if err := n.s.Assign(0); err != nil {
		t.Fatal(err)
	}
	d := n.e.Driver()
	k.Produce(0, msg("a", "x"))
	n.poll(0)
	n.s.Encode() // in the open transaction
	n.s.Revoke(0)
	if err := n.s.Assign(0); err == nil || !strings.Contains(err.Error(), "neither Durable nor Fail") {
		t.Fatalf("Assign with an unsettled request of the revoked assignment: %v", err)
	}
	n.s.Finish(true) // committed: in the store, and Durable for the old assignment
	if err := n.s.Assign(0); err != nil {
		t.Fatal(err)
	}
	settle(t, d, 1) // the new assignment finds the message in the store
	if got := fn.messages(); len(got) != 1 || got[0] != "a:x" {
		t.Fatalf("the function saw %v; want a:x once", got)
	}

	// Submitted, revoked before it was encoded: refused, harmlessly.
	k.Produce(0, msg("a", "y"))
	n.poll(0)
	n.s.Revoke(0)
	ch := n.arrivalsDone
	n.s.Cycle(true)
	if err := <-ch; !errors.Is(err, ErrMoved) {
		t.Fatalf("the arrivals of a revoked assignment: %v; want ErrMoved", err)
	}
	if err := n.e.Err(); err != nil {
		t.Fatalf("the refused request stopped the engine: %v", err)
	}
}

// countAudit counts the audit records of mutation id.
func countAudit(t *testing.T, e *Engine, id string) int {
	t.Helper()
	n := 0
	err := e.ScanAudit(store.AuditFilter{From: -1 << 63, To: 1<<63 - 1, Mutation: id}, func(r *protocol.AuditRecord) bool {
		n++
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// putCommand is a state mutation command as the state API produces it to
// the messages topic: a put of n.
func putCommand(id, target, value string) *protocol.Envelope {
	return &protocol.Envelope{Mutation: &protocol.StateMutation{Id: id, Op: int32(partition.OpPut), State: "n", Value: []byte(value),
		Target: &protocol.Address{Namespace: counterType.Namespace, Type: counterType.Name, Id: target}, Principal: "test"}}
}

// ifMatch makes a command conditional on the entry's version: applied a
// second time, it would be rejected (and its receipt say so).
func ifMatch(env *protocol.Envelope, version uint64) *protocol.Envelope {
	env.Mutation.IfMatch = version
	return env
}

// A mutation command that arrives more than once — twice in one poll,
// again after it applied, again after its partition was rebuilt while it
// waited in the inbox — applies once: a forwarded or retried write never
// applies twice. Each one accepted gets its accepted receipt with its
// inbox entry, then its final one when it applies.
func TestClusterMutationCommandAppliesOnce(t *testing.T) {
	k := sessiontest.NewKafka()
	fn := &relay{}
	n := newClusterNode(t, k, openStore(t, vfs.NewMem(), 1), fn, true, nil)
	if err := n.s.Assign(0); err != nil {
		t.Fatal(err)
	}
	d := n.e.Driver()
	k.Produce(0, msg("a", "first")) // the function registers n
	n.poll(0)
	settle(t, d, 1)

	v, _, err := n.db.GetState(addr("a"), "n")
	if err != nil {
		t.Fatal(err)
	}
	k.Produce(0, ifMatch(putCommand("m1", "a", "10"), v.Version))
	k.Produce(0, ifMatch(putCommand("m1", "a", "10"), v.Version)) // the state API retried the produce
	n.poll(0)
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	if rc, ok, err := n.e.Receipt("m1"); err != nil || !ok || rc.GetStatus() != "accepted" {
		t.Fatalf("m1's receipt once its arrival is durable: %v, %v, %v; want accepted", rc, ok, err)
	}
	settle(t, d, 1)
	if rc, _, _ := n.e.Receipt("m1"); rc.GetStatus() != "committed" {
		t.Fatalf("m1's receipt after it applied: %v; want committed (a second apply is rejected: the version moved)", rc)
	}
	if got := countAudit(t, n.e, "m1"); got != 1 {
		t.Fatalf("m1 has %d audit records; want 1 (applied once)", got)
	}
	if got := len(n.e.part(0).commands); got != 0 {
		t.Fatalf("partition 0 remembers %d command ids once they are durable; want 0 (the receipts in the store say they were seen)", got)
	}
	k.Produce(0, msg("a", "next")) // n = 11
	k.Produce(0, putCommand("m1", "a", "10"))
	n.poll(0)
	settle(t, d, 1)
	if got := storedCount(t, n.db, "a"); got != "11" {
		t.Fatalf("a = %q; want 11 (m1's late repeat not applied)", got)
	}

	// m2 is accepted (durable in the inbox, with its accepted receipt) but
	// not applied when the partition is rebuilt: it comes back from the
	// inbox. Its repeat, and one of m1, arriving at the new assignment are
	// known from their receipts in the store.
	k.Produce(0, msg("a", "before"))
	k.Produce(0, putCommand("m2", "a", "20"))
	n.poll(0)
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	n.s.Revoke(0)
	if err := n.s.Assign(0); err != nil {
		t.Fatal(err)
	}
	k.Produce(0, msg("a", "after"))
	k.Produce(0, putCommand("m2", "a", "20"))
	k.Produce(0, putCommand("m1", "a", "10"))
	n.poll(0)
	settle(t, d, 1)
	if got := storedCount(t, n.db, "a"); got != "21" {
		t.Fatalf("a = %q; want 21 (before, m2 once, after; the repeats of m2 and m1 skipped)", got)
	}
	if got := countAudit(t, n.e, "m2"); got != 1 {
		t.Fatalf("m2 has %d audit records; want 1", got)
	}

	// m3's arrival is aborted: it is polled again and applies once.
	k.Produce(0, putCommand("m3", "a", "30"))
	n.poll(0)
	n.s.Cycle(false)
	n.s.Revoke(0)
	if err := n.s.Assign(0); err != nil {
		t.Fatal(err)
	}
	n.poll(0)
	settle(t, d, 1)
	if got := countAudit(t, n.e, "m3"); got != 1 || storedCount(t, n.db, "a") != "30" {
		t.Fatalf("m3: %d audit records, a = %q; want 1 and 30", got, storedCount(t, n.db, "a"))
	}
}

// Callers waiting on a partition when it is revoked get ErrMoved; the
// result of its invocation in flight is ignored, and the next assignment
// runs the message again from the store.
func TestClusterRevokeAnswersWaitersWithErrMoved(t *testing.T) {
	k := sessiontest.NewKafka()
	fn := &relay{gate: make(chan struct{})}
	n := newClusterNode(t, k, openStore(t, vfs.NewMem(), 1), fn, false, nil)
	if err := n.s.Assign(0); err != nil {
		t.Fatal(err)
	}
	n.e.Start()
	ctx := context.Background()
	k.Produce(0, msg("a", "x"))
	n.poll(0)
	waitFor(t, "a's call in flight", func() bool {
		fn.mu.Lock()
		defer fn.mu.Unlock()
		return fn.calls > 0
	})
	mutated := make(chan error, 1)
	go func() {
		_, err := n.e.Mutate(ctx, partition.Mutation{ID: "m", Addr: addr("a"), State: "n", Op: partition.OpPut, Value: []byte("5"), Ack: AckApplied})
		mutated <- err
	}()
	waited := make(chan error, 1)
	go func() {
		_, _, err := n.e.WaitDurable(ctx, 0, 1000)
		waited <- err
	}()
	waitFor(t, "the mutation queued behind the call", func() bool { return n.e.part(0).queued.Load() == 2 })
	n.s.Revoke(0)
	if err := <-mutated; !errors.Is(err, ErrMoved) {
		t.Fatalf("the waiting mutation: %v; want ErrMoved", err)
	}
	if err := <-waited; !errors.Is(err, ErrMoved) {
		t.Fatalf("WaitDurable: %v; want ErrMoved", err)
	}
	close(fn.gate) // the old call's result comes back to nobody
	if err := n.s.Assign(0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a counted x once", func() bool { return storedCount(t, n.db, "a") == "1" })

	// The playground egress and replayable-source ingress are refused.
	if _, _, err := n.e.PopEgress(ctx, "io/egress", "t"); !errors.Is(err, ErrPlaygroundEgress) {
		t.Errorf("PopEgress in cluster mode: %v", err)
	}
	if err := n.e.AckEgress(ctx, "io/egress", "t", 1); !errors.Is(err, ErrPlaygroundEgress) {
		t.Errorf("AckEgress in cluster mode: %v", err)
	}
	if err := n.e.IngestFrom(ctx, SourceBatch{Position: store.SourcePosition{Ingress: "i"}}); err == nil || !strings.Contains(err.Error(), "cluster mode") {
		t.Errorf("IngestFrom in cluster mode: %v", err)
	}
}
