package sim

import (
	"strings"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// The reference model: what the simulation sent and what it was told, per
// address in the order the engine received it, and the checks that hold
// the durable outcome against it.

type model struct {
	sent     map[string]sentMessage // ingress messages by id
	acked    map[string]bool        // ingress messages acknowledged (durable)
	seen     map[string]bool        // ids in arrivals
	arrivals map[string][]item      // per address, in arrival order
	muts     map[string]*mutation
	failed   map[string]bool // messages of a batch answered with an error or violation
	// failedAt is, per address, how many arrivals it had at each failed
	// attempt; calledAt, per message, how many its address had at the
	// last call that carried it. A mutation applies at once, ahead of
	// queued messages, while the address's failed batch waits out its
	// backoff: these bound which messages may have seen it.
	failedAt map[string][]failure
	calledAt map[string]int
	reads    []*read
	popped   []string // egress records handed out
	// lostPops bounds the egress records a pop may have taken with it: pops
	// whose removal was in a group that met a disk error.
	lostPops    int
	epoch       int
	lastVersion map[string]uint64 // the latest version of "op" the simulation heard of
}

type sentMessage struct {
	to  string
	msg message
}

// item is one arrival at an address: a message or a mutation.
type item struct {
	id  string
	mut bool
}

// mutation is an operator mutation of the state "op" and what its caller
// heard.
type mutation struct {
	id, addr    string
	del         bool
	ifMatch     uint64
	ifNoneMatch bool
	ifMatchAny  bool
	ack         partition.AckMode
	acked       *partition.Receipt // the answer, once in
	ackEpoch    int
	// heardEpoch is the epoch in which the caller heard the answer: an
	// applied one is lost by a later crash (or, in cluster mode, an
	// aborted transaction).
	heardEpoch int
}

// read is a read of "op" posted when pos items had arrived at its address.
type read struct {
	addr       string
	pos, epoch int
	// after is the arrival index of the last mutation of addr whose caller
	// had heard it applied when the read was sent (-1: none): the read
	// must see it (read your writes).
	after        int
	done, exists bool
	value        string
}

func newModel() *model {
	return &model{
		sent: map[string]sentMessage{}, acked: map[string]bool{},
		seen: map[string]bool{}, arrivals: map[string][]item{}, muts: map[string]*mutation{},
		failed: map[string]bool{}, lastVersion: map[string]uint64{},
		failedAt: map[string][]failure{}, calledAt: map[string]int{},
	}
}

func (m *model) arrived(addr, id string, mut bool) {
	if m.seen[id] {
		return
	}
	m.seen[id] = true
	m.arrivals[addr] = append(m.arrivals[addr], item{id: id, mut: mut})
}

// untracked reports whether a message went from a partition to itself: the
// core queues such a message when its sender's result is applied, before
// the commit is durable, so the simulation cannot see where it arrived
// among the others (its exactly-once is checked all the same).
func (m *model) untracked(id string) bool {
	p, kind, ok := parent(id)
	if !ok {
		return false
	}
	s := m.sent[p]
	to := ""
	for _, in := range s.msg.instrs {
		if f := strings.Split(in, ":"); f[0] == kind {
			to = f[1]
		}
	}
	return address.Partition(s.to, partitions) == address.Partition(to, partitions)
}

func (m *model) failedAttempt(addr string, ids []string) {
	for _, id := range ids {
		m.failed[id] = true
	}
	m.failedAt[addr] = append(m.failedAt[addr], failure{at: len(m.arrivals[addr]), ids: ids})
}

// failure is a failed attempt: how many arrivals its address had, and
// the batch's messages.
type failure struct {
	at  int
	ids []string
}

// called notes a call of the function that carried ids.
func (m *model) called(addr string, ids []string) {
	for _, id := range ids {
		m.calledAt[id] = max(m.calledAt[id], len(m.arrivals[addr]))
	}
}

func (m *model) crashed(faulted bool, pendingPops int) {
	if faulted {
		m.lostPops += pendingPops
	}
	m.epoch++
}

// logOf reads the durable log of an address: the ids it applied, in order,
// with the op value each saw.
func logOf(w *world, id string) (ids, ops []string) {
	e, ok, err := w.db.GetState(addrOf(id), "log")
	w.must(err, "read log")
	if !ok || len(e.Value) == 0 {
		return nil, nil
	}
	for _, en := range strings.Split(string(e.Value), ";") {
		i := strings.LastIndexByte(en, '@')
		ids, ops = append(ids, en[:i]), append(ops, en[i+1:])
	}
	return ids, ops
}

// parent returns the message a derived message ("<parent>>f") came from.
func parent(id string) (string, string, bool) {
	i := strings.LastIndexByte(id, '>')
	if i < 0 {
		return "", "", false
	}
	return id[:i], id[i+1:], true
}

// checkLogs holds at every point: no message applied twice, none that was
// never sent, and the tracked messages of each address applied as a prefix
// of their arrival order.
func (m *model) checkLogs(w *world) {
	for _, a := range ids {
		logIDs, _ := logOf(w, a)
		twice := map[string]bool{}
		var tracked []string
		for _, id := range logIDs {
			if twice[id] {
				w.fail("message %s applied twice at %s: log %v", id, a, logIDs)
			}
			twice[id] = true
			if p, _, ok := parent(id); ok {
				if _, sent := m.sent[rootOf(p)]; !sent {
					w.fail("message %s at %s derives from a message never sent", id, a)
				}
			} else if s, ok := m.sent[id]; !ok || s.to != a {
				w.fail("message %s applied at %s, which it was not sent to", id, a)
			}
			if !m.untracked(id) {
				tracked = append(tracked, id)
			}
		}
		var arrived []string
		for _, it := range m.arrivals[a] {
			if !it.mut {
				arrived = append(arrived, it.id)
			}
		}
		if len(tracked) > len(arrived) || strings.Join(tracked, ",") != strings.Join(arrived[:len(tracked)], ",") {
			w.fail("at %s the applied messages %v are not the first of the arrival order %v", a, tracked, arrived)
		}
	}
}

func rootOf(id string) string {
	for {
		p, _, ok := parent(id)
		if !ok {
			return id
		}
		id = p
	}
}

// checkSettled holds once the engine settled: everything acknowledged
// applied exactly once, in order, every receipt as the model decides it,
// every derived message and egress record exactly once.
func (m *model) checkSettled(w *world) {
	m.checkLogs(w)
	for p := range partitions {
		err := w.db.ScanInbox(p, func(_ store.InboxKey, env *protocol.Envelope) error {
			w.fail("settled with a message still in partition %d's inbox: %v", p, env)
			return nil
		})
		w.must(err, "scan inbox")
	}
	applied := map[string]string{} // message id → address whose log holds it
	logs := map[string][]string{}
	opsSeen := map[string][]string{}
	for _, a := range ids {
		logIDs, ops := logOf(w, a)
		logs[a], opsSeen[a] = logIDs, ops
		for _, id := range logIDs {
			if other, ok := applied[id]; ok {
				w.fail("message %s applied at %s and at %s", id, other, a)
			}
			applied[id] = a
		}
	}
	for id := range m.acked {
		if !m.seen[id] {
			w.fail("acknowledged message %s was never durable in an inbox", id)
		}
	}
	// Every tracked message that arrived is applied (checkLogs: in order).
	for a, its := range m.arrivals {
		for _, it := range its {
			if !it.mut && applied[it.id] != a {
				w.fail("message %s arrived at %s but was never applied", it.id, a)
			}
		}
	}
	// Derived messages and egress records: exactly once per applied parent.
	cancelled := map[string]bool{}
	for id := range applied {
		if s, ok := m.sent[id]; ok {
			for _, in := range s.msg.instrs {
				if strings.HasPrefix(in, "c:") {
					cancelled[in[2:]] = true
				}
			}
		}
	}
	wantEgress := map[string]bool{}
	for id, a := range applied {
		if p, kind, ok := parent(id); ok {
			if _, ok := applied[p]; !ok {
				w.fail("message %s at %s applied, but its parent %s never was", id, a, p)
			}
			_ = kind
			continue
		}
		s := m.sent[id]
		for _, in := range s.msg.instrs {
			f := strings.Split(in, ":")
			switch f[0] {
			case "f", "d", "dt":
				child := id + ">" + f[0]
				got, ok := applied[child]
				switch {
				case ok && got != f[1]:
					w.fail("%s went to %s, not %s", child, got, f[1])
				case !ok && !(f[0] == "dt" && cancelled[id]):
					w.fail("message %s was applied but %s never arrived at %s", id, child, f[1])
				}
			case "e":
				wantEgress[id+">e"] = true
			}
		}
	}
	// Egress: popped or still stored, each at most once; missing only as
	// many as pops that met a disk error may have taken.
	got := map[string]int{}
	for _, v := range m.popped {
		got[v]++
	}
	if w.cl != nil {
		w.kafkaEgress(got)
	}
	var after uint64
	for {
		seq, rec, ok, err := w.db.NextEgress(egressID, egressRoute, after)
		w.must(err, "read egress")
		if !ok {
			break
		}
		after = seq
		got[string(rec.GetArgument().GetValue())]++
	}
	missing := 0
	for v, n := range got {
		if n > 1 || !wantEgress[v] {
			w.fail("egress record %s handed out or stored %d times (expected: %v)", v, n, wantEgress[v])
		}
	}
	for v := range wantEgress {
		if got[v] == 0 {
			missing++
		}
	}
	if missing > m.lostPops {
		w.fail("%d egress records missing, only %d pops met a disk error", missing, m.lostPops)
	}
	for _, a := range ids {
		m.checkOrder(w, a, logs[a], opsSeen[a])
	}
	// Each mutation applied or rejected once, whatever the retries.
	audits := map[string]int{}
	err := w.db.ScanAudit(-1<<63, 1<<63-1, func(r *protocol.AuditRecord) bool {
		audits[r.GetMutation()]++
		return true
	})
	w.must(err, "scan the audit log")
	for id, n := range audits {
		if n > 1 {
			w.fail("mutation %s has %d audit records: it applied more than once", id, n)
		}
	}
}

// opState is the entry "op" of one address, as the model has it.
type opState struct {
	exists  bool
	version uint64
	value   string
}

// checkOrder replays the arrivals of one address: the mutations decide as
// the model says (their durable receipts), and each message saw the value
// of "op" that the mutations before it left — the state API's ordering
// promise — or, if its batch failed and sat out a backoff, of mutations
// queued right behind it.
func (m *model) checkOrder(w *world, a string, logIDs, ops []string) {
	var cur opState
	var maxVersion uint64
	states := []string{""}
	at := make([]int, 0, len(m.arrivals[a])+1) // states index before each arrival
	for _, it := range m.arrivals[a] {
		at = append(at, len(states)-1)
		if !it.mut {
			continue
		}
		mu := m.muts[it.id]
		rc, ok, err := w.db.Receipt(mu.id)
		w.must(err, "read receipt")
		final := ok && rc.GetStatus() != "accepted"
		if !final {
			switch {
			case mu.ack == partition.AckAccepted:
				w.fail("accepted mutation %s at %s was never decided (receipt %v)", mu.id, a, rc)
			case mu.ack == partition.AckCommitted && mu.acked != nil:
				w.fail("committed mutation %s at %s has no durable receipt", mu.id, a)
			case mu.ack == partition.AckApplied && mu.acked != nil && mu.ackEpoch == m.epoch:
				w.fail("applied mutation %s at %s was lost without a crash", mu.id, a)
			}
			continue // lost in a crash before its commit
		}
		want := partition.Applied
		switch {
		case mu.del && !cur.exists:
			want = partition.RejectNotFound
		case mu.ifMatch != 0 && (!cur.exists || cur.version != mu.ifMatch):
			want = partition.RejectPrecondition
		case mu.ifMatchAny && !cur.exists:
			want = partition.RejectPrecondition
		case mu.ifNoneMatch && cur.exists:
			want = partition.RejectPrecondition
		}
		if got := partition.RejectCode(rc.GetReject()); got != want {
			w.fail("mutation %s at %s (%+v) decided %d (%s), the model says %d; op was %+v", mu.id, a, *mu, got, rc.GetReason(), want, cur)
		}
		// An accepted mutation's caller heard only that it is durable.
		if mu.acked != nil && mu.ack != partition.AckAccepted && (mu.acked.Reject != want || mu.acked.Version != rc.GetVersion()) {
			w.fail("mutation %s at %s: the caller heard %+v, the durable receipt says %v", mu.id, a, *mu.acked, rc)
		}
		if want == partition.Applied {
			if cur.exists && rc.GetPreviousVersion() != cur.version {
				w.fail("mutation %s at %s: previous version %d, the model has %d", mu.id, a, rc.GetPreviousVersion(), cur.version)
			}
			if mu.del {
				cur = opState{}
			} else {
				if rc.GetVersion() <= maxVersion {
					w.fail("mutation %s at %s: version %d does not follow %d", mu.id, a, rc.GetVersion(), maxVersion)
				}
				maxVersion = rc.GetVersion()
				cur = opState{exists: true, version: rc.GetVersion(), value: mu.id}
			}
		}
		states = append(states, cur.value)
	}
	at = append(at, len(states)-1)
	// Where each tracked message stands: lo, and hi when its batch failed.
	lo, hi := map[string]int{}, map[string]int{}
	its := m.arrivals[a]
	for i, it := range its {
		if it.mut {
			continue
		}
		lo[it.id], hi[it.id] = at[i], at[i]
		if m.failed[it.id] {
			j := i + 1
			for j < len(its) && (its[j].mut || m.failed[its[j].id]) {
				j++
			}
			hi[it.id] = at[j]
		}
		// A batch of the address failed before this message was called
		// and was called again after it arrived: the mutations that
		// arrived meanwhile applied at once, ahead of this message if it
		// was still queued; at the latest, those that arrived before the
		// call that carried it.
		called := min(m.calledAt[it.id], len(its))
		for _, f := range m.failedAt[a] {
			end := 0
			for _, id := range f.ids {
				end = max(end, m.calledAt[id])
			}
			if f.at <= called && end > i {
				hi[it.id] = max(hi[it.id], at[called])
				break
			}
		}
	}
	for i, id := range logIDs {
		l, ok := lo[id]
		if !ok {
			continue // untracked: a message its partition sent itself
		}
		okSeen := false
		for j := l; j <= hi[id]; j++ {
			if states[j] == ops[i] {
				okSeen = true
			}
		}
		if !okSeen {
			w.fail("ordering: message %s at %s saw op %q; the mutations before it left %q (states %v, window %d..%d)",
				id, a, ops[i], states[l], states, l, hi[id])
		}
	}
	// Reads: a value some prefix of the mutations before the read left; one
	// that no crash followed saw no mutation that was later lost.
	for _, rd := range m.reads {
		if rd.addr != a || !rd.done {
			continue
		}
		v := ""
		if rd.exists {
			v = rd.value
		}
		okRead := false
		from := 0
		if rd.after >= 0 && rd.epoch == m.epoch {
			from = at[rd.after+1] // the state that mutation left, or later
		}
		for j := from; j <= at[min(rd.pos, len(at)-1)]; j++ {
			if states[j] == v {
				okRead = true
			}
		}
		if !okRead && rd.epoch != m.epoch {
			if mu, ok := m.muts[v]; ok && mu.addr == a {
				okRead = true // a mutation lost in a later crash
			}
		}
		if !okRead {
			w.fail("read of op at %s after %d arrivals (and mutation arrival %d heard applied) saw %q; states %v", a, rd.pos, rd.after, v, states)
		}
	}
}
