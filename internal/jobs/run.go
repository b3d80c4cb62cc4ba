package jobs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/engine"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// How a job survives a crash without applying anything twice.
//
// A job works in pages of ids (pageIDs). Its writes are mutations through
// each address's mailbox, committed before the next page starts; the
// cursor and the counters move only when a page is done, in one synced
// write of the job's record. The cursor and the writes are therefore not
// one atomic commit: they live in different parts of the store, and a
// partition's commit does not carry a job's record. What makes a replay
// harmless instead:
//
//   - Every write is conditional: If-Match on the version the job read.
//     A write whose entry changed since (a function wrote it, or the job
//     itself before a crash) is rejected, never applied over it.
//   - Every write's mutation id contains the job's id (Marker), and the
//     mutation's audit record is written in the same commit as the change
//     it describes. When a runner starts (a resume, a restart after a
//     crash) it replays the page after the cursor, and before evaluating
//     an entry of that page it looks in the audit log for a record of the
//     entry by this job since the cursor last moved (Record.PageAt): if
//     there is one, the entry was written and is counted, not evaluated
//     again (an expression such as value * 2 must not apply twice).
//
// So after SIGKILL each entry is written at most once, and the counters
// stay those of the pages done, plus the replayed page counted once.
//
// In cluster mode (Config.IdempotentWrites) the record is written by a
// commit of the job's home partition, so it is in Kafka and moves with
// the partition, and every write travels as a command that its owner
// applies once per mutation id. A write's id there is made of the job,
// the time the cursor last moved (PageAt), the entry and the attempt:
// the runner that goes on after a crash or a move — on whichever node
// owns the home partition then — sends the writes of the replayed page
// under the ids the previous runner used, and one applied before is
// answered by its receipt, never applied twice. Writes are sent with
// ack=committed there, so the cursor moves past durable writes only.
//
// The writes are sent with ack=applied, and the cursor moves only once
// the commits carrying a page's writes are durable (Engine.WaitDurable on
// each partition the page wrote to). Waiting for each write's own commit
// (ack=committed) would make a job cost a synced commit per entry, which
// the functions' own commits then queue behind; applied, a job's writes
// share the commits that are made anyway. A write applied and lost in a
// crash has no audit record, so the replay writes it again. A runner that
// stops (a pause, a cancel) waits for its writes' commits too, so the
// runner of a resume finds every write of the previous one in the durable
// audit log.

const (
	// pageSize is how many entries (a revert: writes) a page holds.
	pageSize = 100
	// replaySlack widens the audit lookup of a replayed page before
	// PageAt, for a clock stepped back between the cursor's move and a
	// write.
	replaySlack = time.Minute
	// busyBackoff is how long a write refused by a full partition waits.
	busyBackoff = 50 * time.Millisecond
)

// run is one job's runner.
type run struct {
	m   *Manager
	rec *Record // the manager's record: guarded by m.mu
	c   *compiled
	// pace spaces the writes at the job's adaptive pace (pace.go).
	pace *pacer
	// seq numbers the job's mutations in this process.
	seq atomic.Uint64
	// again is why a page stopped that is not the job's failure
	// (ErrUnavailable, ErrMoved): set by runPage before the workers'
	// results are read by loop, on the runner's goroutine.
	again error
	// cut is set when a read or write of the job was cut short by a
	// context that ended (the process stops): the page is not done, and
	// the job's status is left for the next start.
	cut atomic.Bool

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	mu sync.Mutex
	// then is the status to store when the runner stops ("" leaves it).
	then string
	// page holds the counters of the page in progress.
	page pageState
	// commits holds, per partition, the newest commit that carries a
	// write of the page in progress: the cursor waits for them.
	commits map[int]uint64
}

type pageState struct {
	counts              Counts
	conflicts, failures []Problem
}

func (m *Manager) newRun(r *Record) (*run, error) {
	rn := &run{m: m, rec: r, done: make(chan struct{})}
	if r.Kind == KindUpdate {
		c, err := compileSpec(m.env, *r.Spec)
		if err != nil {
			return nil, err
		}
		rn.c = c
	}
	limit := r.Rate
	if r.Spec != nil {
		limit = r.Spec.Rate
	}
	rn.pace = newPacer(limit, nil, m.cfg.Engine.CallLatencies)
	rn.pace.backoffMetric = m.met.backoffs
	rn.ctx, rn.cancel = context.WithCancel(context.Background())
	return rn, nil
}

// store is where the runner reads, on behalf of the job's principal.
func (rn *run) store() Store { return rn.m.storeAs(rn.rec.Principal) }

// stop asks the runner to stop after its writes in flight and store then.
func (rn *run) stop(then string) {
	rn.mu.Lock()
	rn.then = then
	rn.mu.Unlock()
	rn.cancel()
}

// loop runs the job to its end, or until stopped.
func (rn *run) loop() {
	defer close(rn.done)
	var err error
	if rn.rec.Kind == KindRevert {
		err = rn.revert()
	} else {
		err = rn.update()
	}
	m := rn.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.runs[rn.rec.ID] == rn {
		delete(m.runs, rn.rec.ID)
	}
	r := rn.rec
	rn.mu.Lock()
	then := rn.then
	rn.mu.Unlock()
	now := m.cfg.Now().UTC()
	if err == nil {
		err = rn.again // a page stopped by an error that is not the job's
	}
	switch {
	case rn.ctx.Err() != nil:
		if then == "" {
			return // the process stops: the job goes on at the next start
		}
		r.Status = then
	case errors.Is(err, context.Canceled) || rn.cut.Load():
		return // the process stops: the job goes on at the next start
	case errors.Is(err, ErrMoved) || errors.Is(err, ErrUnavailable):
		// Its home partition's commit refused the record (the partition
		// moved, or is being rebuilt), or partitions it reads did not
		// answer. The partition's owner goes on from the stored cursor:
		// this node, once it serves the partition (reconcile reads the
		// record back and starts it again), or the next owner.
		m.log.Info("jobs: a job stops where it is and goes on from its cursor with its home partition's owner", "job", r.ID, "error", err)
		m.reload = true
		return
	case err != nil:
		r.Status, r.Error = StatusFailed, err.Error()
		m.log.Error("jobs: job failed", "job", r.ID, "error", err)
	default:
		r.Status = StatusDone
	}
	r.UpdatedAt = now
	if ended(r.Status) {
		r.EndedAt = &now
	}
	if err := m.saveLocked(r); err != nil {
		m.log.Error("jobs: cannot store a job's status", "job", r.ID, "status", r.Status, "error", err)
	}
}

// item is one entry of a page.
type item struct {
	addr  address.Address
	state string
	entry store.Entry
	// audit is, in a revert, the write to undo.
	audit *protocol.AuditRecord
}

// update walks the selected types and ids from the cursor, a page at a
// time.
func (rn *run) update() error {
	replay := true // the first page after a start may have been written before
	types, err := rn.types()
	if err != nil {
		return err
	}
	for _, t := range types {
		for {
			items, last, more, err := rn.nextPage(t)
			if err != nil {
				return err
			}
			if last == nil {
				break // nothing after the cursor: the cursor stays
			}
			if !rn.runPage(items, replay, rn.entry) {
				return nil // stopped; the page is replayed on resume
			}
			replay = false
			cur := Cursor{Namespace: t.Namespace, Type: t.Name, ID: last.ID, State: last.State}
			if err := rn.advance(cur); err != nil {
				return err
			}
			if !more {
				break
			}
		}
	}
	return nil
}

// types are the types the job walks, from the cursor's on.
func (rn *run) types() ([]address.TypeName, error) {
	cur := rn.rec.Cursor
	if rn.c.typ != nil {
		return []address.TypeName{*rn.c.typ}, nil
	}
	var out []address.TypeName
	err := rn.store().ScanTypes(func(t address.TypeName) bool {
		if cur.Namespace != "" && typeLess(t, address.TypeName{Namespace: cur.Namespace, Name: cur.Type}) {
			return true
		}
		out = append(out, t)
		return true
	})
	return out, err
}

func typeLess(a, b address.TypeName) bool {
	if a.Namespace != b.Namespace {
		return a.Namespace < b.Namespace
	}
	return a.Name < b.Name
}

// nextPage reads the next page of entries of t after the cursor: last is
// the position of the last entry it read (nil: none was left), more
// whether entries may follow. Entries the selection leaves out by id, and
// expired ones, are read and not returned.
func (rn *run) nextPage(t address.TypeName) (items []item, last *store.StateCursor, more bool, err error) {
	sel := rn.c.spec.Select
	var after *store.StateCursor
	if a := sel.scanAfter(); a != "" {
		after = &store.StateCursor{ID: a}
	}
	skipID := "" // a cursor of an earlier build names an id done whole
	if cur := rn.rec.Cursor; cur.Namespace == t.Namespace && cur.Type == t.Name && (after == nil || cur.ID > after.ID) {
		after = &store.StateCursor{ID: cur.ID, State: cur.State}
		if cur.State == "" {
			skipID = cur.ID
		}
	}
	now := rn.m.cfg.Now().UnixMilli()
	n := 0
	err = rn.store().ScanState(t, sel.IDPrefix, after, func(id, state string, e store.Entry) bool {
		if sel.pastEnd(id) {
			return false
		}
		if n == pageSize {
			more = true
			return false
		}
		n++
		last = &store.StateCursor{ID: id, State: state}
		if id == skipID || !sel.keepID(id) || (e.ExpiresAt != 0 && e.ExpiresAt <= now) {
			return true // expired: no value
		}
		items = append(items, item{addr: address.Address{Type: t, ID: id}, state: state, entry: e})
		return true
	})
	return items, last, more, err
}

// runPage runs fn over the items with the job's workers; it reports false
// when the job was stopped before the page was done (its counters are
// then dropped: the page is replayed).
func (rn *run) runPage(items []item, replay bool, fn func(item, bool) error) bool {
	rn.mu.Lock()
	rn.page = pageState{}
	rn.commits = map[int]uint64{}
	rn.mu.Unlock()
	work := make(chan item)
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	for range min(rn.m.cfg.Workers, max(len(items), 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range work {
				err := fn(it, replay)
				switch {
				case errors.Is(err, context.Canceled):
					rn.cut.Store(true)
				case err != nil:
					failed.CompareAndSwap(nil, &err)
					rn.cancel()
				}
			}
		}()
	}
	stopped := false
	for _, it := range items {
		if rn.ctx.Err() != nil {
			stopped = true
			break
		}
		select {
		case work <- it:
		case <-rn.ctx.Done():
			stopped = true
		}
		if stopped {
			break
		}
	}
	close(work)
	wg.Wait()
	// The page's writes durable, whether it is done or stopped: before the
	// cursor passes them, and before another runner of the job starts (a
	// resume), whose replay reads the durable audit log to tell the
	// entries this one wrote: one applied and not yet durable would be
	// evaluated again.
	durable := rn.waitDurable()
	if perr := failed.Load(); perr != nil && (errors.Is(*perr, ErrUnavailable) || errors.Is(*perr, ErrMoved)) {
		// Not the job's failure: it goes on from its cursor at the next
		// look (reconcile), the page done again.
		rn.again = *perr
		return false
	}
	if perr := failed.Load(); perr != nil {
		rn.mu.Lock()
		rn.then = StatusFailed
		rn.mu.Unlock()
		rn.m.mu.Lock()
		rn.rec.Error = (*perr).Error()
		rn.m.mu.Unlock()
		return false
	}
	return durable && !stopped && !rn.cut.Load() && rn.ctx.Err() == nil
}

// waitDurable waits until the commits carrying the page's writes are
// durable; false when the manager closes first (the process stops: what
// was not durable is lost or durable by the next start, and the page is
// replayed then).
func (rn *run) waitDurable() bool {
	rn.mu.Lock()
	commits := rn.commits
	rn.mu.Unlock()
	for p, c := range commits {
		if _, ok, err := rn.m.cfg.Engine.WaitDurable(rn.m.ctx, p, c); err != nil || !ok {
			return false
		}
	}
	return true
}

// applied notes the commit of a's partition that carries a write.
func (rn *run) applied(a address.Address, rc partition.Receipt) {
	p := address.Partition(a.ID, rn.m.cfg.Engine.Partitions())
	rn.mu.Lock()
	if rc.Checkpoint > rn.commits[p] {
		rn.commits[p] = rc.Checkpoint
	}
	rn.mu.Unlock()
}

// advance moves the cursor past the page done, with its counters, in one
// synced write of the record.
func (rn *run) advance(cur Cursor) error {
	m := rn.m
	m.mu.Lock()
	defer m.mu.Unlock()
	rn.mu.Lock()
	p := rn.page
	rn.page = pageState{}
	rn.mu.Unlock()
	r := rn.rec
	r.Counts.add(p.counts)
	r.Conflicts = appendListed(r.Conflicts, p.conflicts...)
	r.Failures = appendListed(r.Failures, p.failures...)
	r.Cursor = cur
	now := m.cfg.Now().UTC()
	r.UpdatedAt, r.PageAt = now, now.UnixMilli()
	return m.saveLocked(r)
}

// count adds to the page's counters.
func (rn *run) count(f func(c *pageState)) {
	rn.mu.Lock()
	f(&rn.page)
	rn.mu.Unlock()
}

// MaxValueBytes caps a value a job writes: the state API's cap of a PUT
// body.
const MaxValueBytes = 8 << 20

// maxDetail caps a Problem's detail: an expression's error may quote a
// value.
const maxDetail = 1024

func problem(it item, version uint64, detail, mutation string) Problem {
	detail = truncate(detail, maxDetail)
	return Problem{Namespace: it.addr.Type.Namespace, Type: it.addr.Type.Name, ID: it.addr.ID, State: it.state,
		Version: version, Detail: detail, Mutation: mutation}
}

// entry evaluates one entry and writes what it becomes.
func (rn *run) entry(it item, replay bool) error {
	rn.count(func(p *pageState) { p.counts.Scanned++ })
	if !rn.m.stateSelected(rn.c, it) {
		return nil
	}
	if replay && !rn.m.cfg.IdempotentWrites {
		done, err := rn.wroteBefore(it)
		if err != nil {
			return err
		}
		if done {
			rn.count(func(p *pageState) { p.counts.Matched++; p.counts.Changed++ })
			return nil
		}
	}
	for attempt := 0; ; attempt++ {
		out, err := rn.m.evaluate(rn.c, it)
		if err != nil {
			rn.count(func(p *pageState) {
				if attempt == 0 {
					p.counts.Matched++
				}
				p.counts.Failed++
				p.failures = appendListed(p.failures, problem(it, it.entry.Version, err.Error(), ""))
			})
			return nil
		}
		if !out.selected || out.unchanged {
			rn.count(func(p *pageState) {
				switch {
				case attempt > 0 && !out.selected:
					p.counts.Skipped++
				case out.unchanged:
					if attempt == 0 {
						p.counts.Matched++
					}
					p.counts.Unchanged++
				}
			})
			return nil
		}
		if attempt == 0 {
			rn.count(func(p *pageState) { p.counts.Matched++ })
		}
		mu := partition.Mutation{ID: rn.mutationID(it, attempt), Addr: it.addr, State: it.state,
			IfMatch: it.entry.Version, Principal: rn.rec.Principal, Reason: rn.reason(), Ack: partition.AckApplied}
		if out.delete {
			mu.Op = partition.OpDelete
		} else {
			mu.Op, mu.Typename, mu.Value = partition.OpPut, out.typename, out.value
		}
		rc, err := rn.mutate(mu, attempt == 0)
		if errors.Is(err, engine.ErrTooLarge) {
			rn.count(func(p *pageState) {
				p.counts.Failed++
				p.failures = appendListed(p.failures, problem(it, it.entry.Version, strings.TrimPrefix(err.Error(), "engine: "), mu.ID))
			})
			return nil
		}
		if err != nil {
			return err
		}
		switch rc.Reject {
		case partition.Applied:
			rn.applied(it.addr, rc)
			rn.count(func(p *pageState) { p.counts.Changed++ })
			return nil
		case partition.RejectPrecondition, partition.RejectNotFound:
			if attempt >= rn.c.spec.retries() {
				rn.count(func(p *pageState) {
					p.counts.Conflicts++
					p.conflicts = appendListed(p.conflicts, problem(it, rc.Version,
						fmt.Sprintf("written by another writer %d times in a row between the job's read and its write", attempt+1), mu.ID))
				})
				return nil
			}
			rn.count(func(p *pageState) { p.counts.Retried++ })
			e, ok, err := rn.reread(it)
			if err != nil {
				return err
			}
			if !ok {
				rn.count(func(p *pageState) { p.counts.Skipped++ })
				return nil
			}
			it.entry = e
		default:
			rn.count(func(p *pageState) {
				p.counts.Failed++
				p.failures = appendListed(p.failures, problem(it, rc.Version, rejectDetail(rc, mu.Typename), mu.ID))
			})
			return nil
		}
	}
}

func rejectDetail(rc partition.Receipt, typename string) string {
	switch rc.Reject {
	case partition.RejectTypeConflict:
		return fmt.Sprintf("the function registers another type than %s for this state; set action.typename to the registered one", typename)
	case partition.RejectNoTypename:
		return "no typename: the function registers none and the entry has none"
	}
	if rc.Reason != "" {
		return rc.Reason
	}
	return fmt.Sprintf("rejected (%d)", rc.Reject)
}

// reread returns the entry's latest applied value.
func (rn *run) reread(it item) (store.Entry, bool, error) {
	rep, err := rn.m.cfg.Engine.Read(context.WithValue(rn.m.ctx, principalKey{}, rn.rec.Principal), it.addr, it.state)
	if err != nil {
		return store.Entry{}, false, err
	}
	for _, e := range rep.Entries {
		if e.State == it.state {
			return store.Entry{Typename: e.Entry.Typename, Value: e.Entry.Value, Version: e.Entry.Version, ExpiresAt: e.Entry.ExpiresAt}, true, nil
		}
	}
	return store.Entry{}, false, nil
}

// principalKey keys, in the context of an Engine.Read, the principal of
// the job that reads (PrincipalOf).
type principalKey struct{}

// PrincipalOf returns the principal of the job an Engine.Read is made
// for: in cluster mode the read may go to another node in its name.
func PrincipalOf(ctx context.Context) string {
	p, _ := ctx.Value(principalKey{}).(string)
	return p
}

// mutate sends m once the pace allows (paced: an entry's first write; a
// retry after a conflict goes at once, or a hot entry's function would
// win every time against a slow pace), waiting out a full partition. The
// write in flight is not cut short by a pause: its outcome is counted.
func (rn *run) mutate(m partition.Mutation, paced bool) (partition.Receipt, error) {
	if paced {
		if err := rn.pace.wait(rn.ctx); err != nil {
			return partition.Receipt{}, err
		}
	}
	for {
		sent := time.Now()
		rc, err := rn.m.cfg.Engine.Mutate(rn.m.ctx, m)
		if !errors.Is(err, engine.ErrBusy) {
			if err == nil {
				rn.settled(m.Addr, rc, sent)
			}
			return rc, err
		}
		rn.pace.busy()
		select {
		case <-time.After(busyBackoff):
		case <-rn.ctx.Done():
			return partition.Receipt{}, rn.ctx.Err()
		}
	}
}

// mutationID names a write of the job: time-ordered like every mutation
// id (receipts are kept in id order), with the job's Marker. With
// Config.IdempotentWrites it is the same for the same attempt at the same
// entry in the same page, whichever runner makes it (see the top of this
// file); otherwise unique.
func (rn *run) mutationID(it item, attempt int) string {
	if !rn.m.cfg.IdempotentWrites {
		ms := max(rn.m.cfg.Now().UnixMilli(), 0)
		return strconv.FormatInt(ms, 36) + Marker(rn.rec.ID) + strconv.FormatUint(rn.seq.Add(1), 36) + "-" + newJobID()[:4]
	}
	h := sha256.New()
	for _, s := range []string{it.addr.Type.Namespace, it.addr.Type.Name, it.addr.ID, it.state, it.audit.GetMutation()} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	sum := h.Sum(nil)
	return strconv.FormatInt(max(rn.rec.PageAt, 0), 36) + Marker(rn.rec.ID) + hex.EncodeToString(sum[:8]) + "-" + strconv.Itoa(attempt)
}

// reason is what the audit log records with each write.
func (rn *run) reason() string {
	r, why := "job "+rn.rec.ID, rn.rec.Reason
	if rn.rec.Spec != nil {
		why = rn.rec.Spec.Reason
	}
	if why != "" {
		r += ": " + why
	}
	return r
}

// wroteBefore reports whether this job wrote the entry since the cursor
// last moved: a write of the page in progress when the runner stopped.
func (rn *run) wroteBefore(it item) (bool, error) {
	marker := Marker(rn.rec.ID)
	from := rn.rec.PageAt - replaySlack.Milliseconds()
	found := false
	err := rn.store().ScanAuditFiltered(store.AuditFilter{From: from, To: math.MaxInt64,
		Namespace: it.addr.Type.Namespace, Type: it.addr.Type.Name, ID: it.addr.ID, State: it.state},
		func(a *protocol.AuditRecord) bool {
			found = strings.Contains(a.GetMutation(), marker)
			return !found
		})
	return found, err
}

// outcome is what an entry becomes.
type outcome struct {
	selected, unchanged, delete bool
	typename                    string
	value                       []byte
}

// stateSelected applies the selection's state name and orphans filter.
func (m *Manager) stateSelected(c *compiled, it item) bool {
	if c.spec.Select.State != "" && it.state != c.spec.Select.State {
		return false
	}
	return !c.spec.Select.Orphans || m.orphan(it.addr.Type, it.state)
}

// evaluate runs the job's predicate and expression over one entry.
func (m *Manager) evaluate(c *compiled, it item) (outcome, error) {
	in := input{ID: it.addr.ID, State: it.state, Typename: it.entry.Typename, Value: it.entry.Value, Version: it.entry.Version}
	var vars map[string]any
	if c.where != nil || c.expr != nil {
		var err error
		if vars, err = in.vars(); err != nil {
			return outcome{}, fmt.Errorf("the value does not decode as %s: %v", it.entry.Typename, err)
		}
	}
	if c.where != nil {
		ok, err := c.where.test(vars)
		if err != nil {
			return outcome{}, fmt.Errorf("select.where: %v", err)
		}
		if !ok {
			return outcome{}, nil
		}
	}
	if c.expr == nil {
		return outcome{selected: true, delete: true}, nil
	}
	v, err := c.expr.eval(vars)
	if err != nil {
		return outcome{}, fmt.Errorf("action.expr: %v", err)
	}
	tn := c.spec.Action.Typename
	if tn == "" {
		tn = it.entry.Typename
	}
	b, err := encode(tn, v)
	if err != nil {
		return outcome{}, err
	}
	if len(b) > MaxValueBytes {
		return outcome{}, fmt.Errorf("action.expr: the new value is %d bytes, more than a state value may be written with (%d, as a PUT)", len(b), MaxValueBytes)
	}
	return outcome{selected: true, typename: tn, value: b,
		unchanged: tn == it.entry.Typename && bytes.Equal(b, it.entry.Value)}, nil
}
