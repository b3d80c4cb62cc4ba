package jobs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"cel.dev/cel-go/cel"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// Engine is what a job needs of the running engine: the latest applied
// entries, and mutations in the address's mailbox order.
type Engine interface {
	Read(ctx context.Context, a address.Address, state string) (partition.Reply, error)
	Mutate(ctx context.Context, m partition.Mutation) (partition.Receipt, error)
	SpecsOf(t address.TypeName) []partition.Spec
	// WaitDurable waits until commit min of partition p is durable, or
	// ctx ends (reached false).
	WaitDurable(ctx context.Context, p int, min uint64) (cur uint64, reached bool, err error)
	// Partitions is the partition count (address.Partition's n).
	Partitions() int
	// CallLatencies gives the round trips of this process's calls to
	// remote functions since a cursor: the functions' side of a job's
	// pace (pace.go).
	CallLatencies(cursor uint64, buf []time.Duration) ([]time.Duration, uint64)
}

// Store is where a job reads the entries it walks, the audit log, and
// where it keeps its record: the local store in embedded mode
// (*store.DB); in cluster mode every partition's owner for the reads, and
// the commits of the job's home partition for its record
// (internal/stateapi's cluster backend).
type Store interface {
	ScanTypes(fn func(t address.TypeName) bool) error
	// ScanState calls fn with the entries of type t whose id starts with
	// prefix, strictly after the cursor after (nil: from the first), in
	// (id, state) order, until fn returns false.
	ScanState(t address.TypeName, prefix string, after *store.StateCursor, fn func(id, state string, e store.Entry) bool) error
	StateStatsOf(t address.TypeName, maxKeys int, keep func(id string) bool) (store.StateStats, error)
	ScanAuditFiltered(f store.AuditFilter, fn func(*protocol.AuditRecord) bool) error
	PutJob(id string, record []byte) error
	DeleteJob(id string) error
	ScanJobs(fn func(id string, record []byte) error) error
}

// Local is what the orphans listing reads of this process's own store
// (*store.DB): in cluster mode the state API gathers every node's listing
// of the partitions it owns.
type Local interface {
	ScanTypes(fn func(t address.TypeName) bool) error
	ScanIDs(t address.TypeName, prefix, after string, fn func(id string) bool) error
	ScanAddressState(a address.Address, fn func(state string, e store.Entry) error) error
	StateStatsOf(t address.TypeName, maxKeys int, keep func(id string) bool) (store.StateStats, error)
}

// ErrMoved is wrapped by the errors of a Store whose job records live in
// their home partition's commits (cluster mode) when this node no longer
// owns the home partition: the job stops here, its status left as it is,
// and goes on with the partition's next owner.
var ErrMoved = errors.New("jobs: the job's home partition is not this node's")

// ErrUnavailable is wrapped by the errors of a Store that could not read
// part of the application (cluster mode: no node answered for some
// partitions in time). A runner that meets it stops where it is, its
// status left running, and goes on from its cursor a moment later.
var ErrUnavailable = errors.New("jobs: part of the application did not answer")

// Config configures a Manager.
type Config struct {
	Engine Engine
	Store  Store
	// StoreAs, in cluster mode, is Store reading on behalf of a job's
	// principal: the reads go to other nodes in its name. Nil: Store.
	StoreAs func(principal string) Store
	// Local is where orphans are counted (default: Store, which must then
	// be a Local too).
	Local Local
	// Owned, in cluster mode, returns the partitions this node owns now:
	// the manager keeps and runs the jobs whose home partition (Home) is
	// one of them, and finds those of a partition it is assigned in the
	// store once the partition's changelog is restored. Nil: every job
	// in the store is this process's (embedded mode).
	Owned func() []int
	// NodeID names this node in the jobs it shows (cluster mode).
	NodeID string
	// IdempotentWrites says the Engine applies a mutation id once, its
	// receipt answering a repeat (cluster mode: every write travels as a
	// command). The runner then names each write after the entry and the
	// attempt, so that a page replayed after a crash or a move sends its
	// writes again under the same ids, and the ones applied before are
	// answered by their receipts instead of being applied twice; the
	// audit log is not searched.
	IdempotentWrites bool
	// Deployed reports whether module.yaml binds a function type to an
	// endpoint; state of a type it does not is an orphan.
	Deployed func(t address.TypeName) bool
	// Now is the clock of records and mutation ids; default time.Now.
	Now    func() time.Time
	Logger *slog.Logger
	// MaxJobs caps the records kept (DefaultMaxJobs when 0): a new job
	// forgets the oldest ended one beyond it.
	MaxJobs int
	// MaxRunning caps the jobs running at once (DefaultMaxRunning when 0).
	MaxRunning int
	// Workers is how many writes of one job are in flight at once
	// (DefaultWorkers when 0).
	Workers int
	// Metrics registers the jobs' metrics (nil: none are exported).
	Metrics prometheus.Registerer
}

// Defaults of Config.
const (
	DefaultMaxJobs    = 1000
	DefaultMaxRunning = 4
	DefaultWorkers    = 8
)

// Errors the API turns into status codes.
var (
	// ErrNotFound: no job has that id.
	ErrNotFound = errors.New("jobs: no such job")
	// ErrState: the job's status does not allow the operation (a 409).
	ErrState = errors.New("jobs: not now")
	// ErrTooMany: too many jobs running, or kept and none ended (a 409).
	ErrTooMany = errors.New("jobs: too many jobs")
)

// Manager keeps the jobs of one store and runs them.
type Manager struct {
	cfg Config
	env *cel.Env
	log *slog.Logger
	met *metrics

	mu   sync.Mutex
	jobs map[string]*Record
	runs map[string]*run
	// closed is set by Close: no job starts after it.
	closed bool
	wg     sync.WaitGroup
	// owned is the set of partitions Config.Owned gave at the last
	// reconcile (cluster mode); reload asks the next reconcile to read the
	// records of every owned partition again (a runner stopped because
	// its home's commit was refused).
	owned  map[int]bool
	reload bool
	// ctx is the writes' context: Close ends it, so a write waiting on an
	// engine that stops does not hold the process (a job's replay makes a
	// write whose outcome was not seen harmless).
	ctx    context.Context
	cancel context.CancelFunc
}

// New returns a manager over cfg's store. Call Start to go on with the
// jobs that were running when the process stopped.
func New(cfg Config) (*Manager, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxJobs <= 0 {
		cfg.MaxJobs = DefaultMaxJobs
	}
	if cfg.MaxRunning <= 0 {
		cfg.MaxRunning = DefaultMaxRunning
	}
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.Deployed == nil {
		cfg.Deployed = func(address.TypeName) bool { return true }
	}
	if cfg.Local == nil {
		l, ok := cfg.Store.(Local)
		if !ok {
			return nil, errors.New("jobs: Config.Local is required when the Store does not read the local store")
		}
		cfg.Local = l
	}
	env, err := newEnv()
	if err != nil {
		return nil, fmt.Errorf("jobs: CEL environment: %w", err)
	}
	m := &Manager{cfg: cfg, env: env, log: cfg.Logger, jobs: map[string]*Record{}, runs: map[string]*run{}}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.met = newMetrics(cfg.Metrics, m)
	if cfg.Owned != nil {
		// The records of the partitions this node owns are read as it is
		// assigned them (reconcile).
		m.owned = map[int]bool{}
		return m, nil
	}
	recs, err := m.scanRecords(nil)
	if err != nil {
		return nil, err
	}
	m.jobs = recs
	return m, nil
}

// scanRecords reads the stored job records, those whose home is in homes
// (nil: all).
func (m *Manager) scanRecords(homes map[int]bool) (map[string]*Record, error) {
	out := map[string]*Record{}
	err := m.cfg.Store.ScanJobs(func(id string, b []byte) error {
		if homes != nil && !homes[m.home(id)] {
			return nil // another node's, or a stale copy of a partition that moved
		}
		r := new(Record)
		if err := json.Unmarshal(b, r); err != nil || r.ID != id {
			// Not a reason to refuse to start: the job is not run, and
			// its record stays in the store for a look.
			m.log.Error("jobs: a stored job record does not decode; it is not run", "job", id, "error", err)
			return nil
		}
		out[id] = r
		return nil
	})
	return out, err
}

// Home is the home partition of job id among n partitions: in cluster
// mode its record is written by that partition's commits, and that
// partition's owner runs it.
func Home(id string, n int) int { return address.Partition(id, n) }

func (m *Manager) home(id string) int { return Home(id, m.cfg.Engine.Partitions()) }

// Start goes on with every job that was running when the process stopped,
// from its cursor. In cluster mode it starts following the partitions
// this node is assigned: the running jobs of each are started from their
// cursor once it is restored here, and stopped when it moves away.
func (m *Manager) Start() {
	if m.cfg.Owned != nil {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.follow()
		}()
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.jobs {
		if r.Status == StatusRunning {
			if err := m.startLocked(r); err != nil {
				m.log.Error("jobs: cannot go on with a job", "job", r.ID, "error", err)
			}
		}
	}
}

// followEvery is how often the manager looks at the partitions it owns
// (cluster mode): a job whose home moved here goes on within it.
const followEvery = 250 * time.Millisecond

// follow reconciles the jobs with the partitions owned until Close.
func (m *Manager) follow() {
	t := time.NewTicker(followEvery)
	defer t.Stop()
	for {
		m.reconcile()
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// arrived makes sure, in cluster mode, that the record of job id is
// known when its home partition has just come to this node: a request
// about the job may come before the next reconcile.
func (m *Manager) arrived(id string) {
	if m.cfg.Owned == nil {
		return
	}
	m.mu.Lock()
	_, known := m.jobs[id]
	m.mu.Unlock()
	if !known {
		m.reconcile()
	}
}

// reconcile keeps the jobs of the partitions owned now, and runs those
// running: a partition that moved away takes its jobs (their runners stop
// where they are, their status left for the next owner); one assigned
// here brings the records its changelog restored.
func (m *Manager) reconcile() {
	owned := map[int]bool{}
	for _, p := range m.cfg.Owned() {
		owned[p] = true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	changed := m.reload || len(owned) != len(m.owned)
	for p := range owned {
		changed = changed || !m.owned[p]
	}
	for id := range m.jobs {
		if owned[m.home(id)] {
			continue
		}
		if rn, ok := m.runs[id]; ok {
			rn.stop("")
		}
		delete(m.jobs, id)
	}
	m.owned = owned
	if changed {
		m.reload = false
		recs, err := m.scanRecords(owned)
		if err != nil {
			m.log.Error("jobs: cannot read the job records of the partitions this node owns; trying again", "error", err)
			m.reload = true
			return
		}
		for id, r := range recs {
			if _, running := m.runs[id]; !running {
				m.jobs[id] = r // its runner's record, if any, is newer
			}
		}
	}
	// Running jobs without a runner: just arrived, or waiting for one of
	// the MaxRunning slots.
	for id, r := range m.jobs {
		if _, running := m.runs[id]; running || r.Status != StatusRunning || len(m.runs) >= m.cfg.MaxRunning {
			continue
		}
		if err := m.startLocked(r); err != nil {
			m.log.Error("jobs: cannot go on with a job", "job", id, "error", err)
		}
	}
}

// Close stops every running job where it is, its status left running:
// the next Start goes on with it.
func (m *Manager) Close() {
	m.mu.Lock()
	m.closed = true
	for _, rn := range m.runs {
		rn.stop("")
	}
	m.mu.Unlock()
	m.cancel()
	m.wg.Wait()
}

// Preview evaluates spec over every entry it selects and writes nothing;
// principal is who asks (in cluster mode the reads go to other nodes in
// its name).
func (m *Manager) Preview(ctx context.Context, spec Spec, sample int, principal string) (*Preview, error) {
	c, err := compileSpec(m.env, spec)
	if err != nil {
		return nil, err
	}
	return m.preview(ctx, c, sample, principal)
}

func (m *Manager) storeAs(principal string) Store {
	if m.cfg.StoreAs != nil {
		return m.cfg.StoreAs(principal)
	}
	return m.cfg.Store
}

// Create stores a new job and starts it.
func (m *Manager) Create(spec Spec, principal string) (*Record, error) {
	c, err := compileSpec(m.env, spec)
	if err != nil {
		return nil, err
	}
	total, err := m.total(c, principal)
	if err != nil {
		return nil, err
	}
	return m.create(&Record{Kind: KindUpdate, Spec: &c.spec, Principal: principal, Total: total})
}

// Revert creates a job that undoes every write of job id: each entry set
// back to what it held before, on the condition that it still holds what
// the job wrote; an entry changed since is listed in the revert's
// conflicts and left as it is.
func (m *Manager) Revert(id, principal, reason string) (*Record, error) {
	m.arrived(id)
	m.mu.Lock()
	t, ok := m.jobs[id]
	var target Record
	if ok {
		target = *t
	}
	m.mu.Unlock()
	switch {
	case !ok:
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	case !ended(target.Status):
		return nil, fmt.Errorf("%w: job %s is %s; cancel it (or let it finish) before reverting it", ErrState, id, target.Status)
	case target.Kind != KindUpdate:
		return nil, fmt.Errorf("%w: job %s is a revert; a revert is not reverted (run the original job's expression again instead)", ErrState, id)
	}
	if len(reason) > maxReasonBytes {
		return nil, specError("reason: %d bytes, at most %d", len(reason), maxReasonBytes)
	}
	if reason == "" {
		reason = "revert of job " + id
	}
	var rate float64
	if target.Spec != nil {
		rate = target.Spec.Rate
	}
	// The revert keeps what it needs of the job it reverts: in cluster
	// mode it may run on another node than that job's record.
	created := target.CreatedAt
	return m.create(&Record{Kind: KindRevert, Reverts: id, Principal: principal, Total: target.Counts.Changed,
		Reason: reason, Rate: rate, RevertsPrincipal: target.Principal, RevertsCreatedAt: &created})
}

// create stores r as a new running job and starts it.
func (m *Manager) create(r *Record) (*Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, fmt.Errorf("%w: the runtime is stopping", ErrState)
	}
	if n := m.runningLocked(); n >= m.cfg.MaxRunning {
		return nil, fmt.Errorf("%w: %d jobs are running, at most %d at once; wait for one to end, or pause or cancel one", ErrTooMany, n, m.cfg.MaxRunning)
	}
	if len(m.jobs) >= m.cfg.MaxJobs {
		// In cluster mode, the jobs of this node's partitions: each node
		// keeps at most MaxJobs.
		if err := m.forgetOldestLocked(); err != nil {
			return nil, err
		}
	}
	now := m.cfg.Now().UTC()
	id, err := m.newIDLocked()
	if err != nil {
		return nil, err
	}
	r.ID = id
	r.Status, r.CreatedAt, r.UpdatedAt, r.PageAt = StatusRunning, now, now, now.UnixMilli()
	r.Conflicts, r.Failures = []Problem{}, []Problem{}
	if err := m.saveLocked(r); err != nil {
		return nil, err
	}
	m.jobs[r.ID] = r
	if err := m.startLocked(r); err != nil {
		return nil, err
	}
	out := m.viewLocked(r)
	return &out, nil
}

// forgetOldestLocked deletes the record of the oldest ended job.
func (m *Manager) forgetOldestLocked() error {
	var oldest *Record
	for _, r := range m.jobs {
		if ended(r.Status) && (oldest == nil || r.CreatedAt.Before(oldest.CreatedAt)) {
			oldest = r
		}
	}
	if oldest == nil {
		return fmt.Errorf("%w: %d jobs are kept and none has ended; cancel one first", ErrTooMany, len(m.jobs))
	}
	if err := m.cfg.Store.DeleteJob(oldest.ID); err != nil {
		return err
	}
	delete(m.jobs, oldest.ID)
	return nil
}

func (m *Manager) runningLocked() int { return len(m.runs) }

// Get returns a job with its progress: the stored counters and those of
// the page in progress.
func (m *Manager) Get(id string) (Record, error) {
	m.arrived(id)
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.jobs[id]
	if !ok {
		return Record{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return m.viewLocked(r), nil
}

// List returns every job, newest first.
func (m *Manager) List() []Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Record, 0, len(m.jobs))
	for _, r := range m.jobs {
		out = append(out, m.viewLocked(r))
	}
	slices.SortFunc(out, func(a, b Record) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return cmpString(b.ID, a.ID)
	})
	return out
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// viewLocked is r with the counters of the page in progress added.
func (m *Manager) viewLocked(r *Record) Record {
	out := *r
	out.Node = m.cfg.NodeID
	out.Conflicts = slices.Clone(r.Conflicts)
	out.Failures = slices.Clone(r.Failures)
	if rn, ok := m.runs[r.ID]; ok {
		rn.mu.Lock()
		out.Counts.add(rn.page.counts)
		out.Conflicts = appendListed(out.Conflicts, rn.page.conflicts...)
		out.Failures = appendListed(out.Failures, rn.page.failures...)
		rn.mu.Unlock()
		out.Pace = rn.pace.view()
	}
	return out
}

func appendListed(l []Problem, ps ...Problem) []Problem {
	for _, p := range ps {
		if len(l) < MaxListed {
			l = append(l, p)
		}
	}
	return l
}

// Pause stops a running job after its writes in flight; Resume goes on
// from its cursor.
func (m *Manager) Pause(id string) (Record, error) {
	return m.stopJob(id, StatusPaused, func(s string) bool { return s == StatusRunning })
}

// Cancel stops a running or paused job for good. What it wrote stays
// written (Revert undoes it).
func (m *Manager) Cancel(id string) (Record, error) {
	return m.stopJob(id, StatusCancelled, func(s string) bool { return s == StatusRunning || s == StatusPaused })
}

// stopJob sets a job's status to status, stopping its runner first.
func (m *Manager) stopJob(id, status string, allowed func(string) bool) (Record, error) {
	m.arrived(id)
	m.mu.Lock()
	r, ok := m.jobs[id]
	if !ok {
		m.mu.Unlock()
		return Record{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if !allowed(r.Status) {
		m.mu.Unlock()
		return Record{}, fmt.Errorf("%w: job %s is %s", ErrState, id, r.Status)
	}
	if rn, ok := m.runs[id]; ok {
		rn.stop(status)
		m.mu.Unlock()
		<-rn.done // the runner stores the status as it stops
		m.mu.Lock()
	} else {
		r.Status, r.UpdatedAt = status, m.cfg.Now().UTC()
		if ended(status) {
			t := r.UpdatedAt
			r.EndedAt = &t
		}
		if err := m.saveLocked(r); err != nil {
			m.mu.Unlock()
			return Record{}, err
		}
	}
	defer m.mu.Unlock()
	return m.viewLocked(r), nil
}

// Resume goes on with a paused job from its cursor.
func (m *Manager) Resume(id string) (Record, error) {
	m.arrived(id)
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.jobs[id]
	if !ok {
		return Record{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if r.Status != StatusPaused {
		return Record{}, fmt.Errorf("%w: job %s is %s; only a paused job resumes", ErrState, id, r.Status)
	}
	if n := m.runningLocked(); n >= m.cfg.MaxRunning {
		return Record{}, fmt.Errorf("%w: %d jobs are running, at most %d at once", ErrTooMany, n, m.cfg.MaxRunning)
	}
	r.Status, r.UpdatedAt = StatusRunning, m.cfg.Now().UTC()
	if err := m.saveLocked(r); err != nil {
		return Record{}, err
	}
	if err := m.startLocked(r); err != nil {
		return Record{}, err
	}
	return m.viewLocked(r), nil
}

// Delete forgets an ended job's record (its writes stay in the audit log).
func (m *Manager) Delete(id string) error {
	m.arrived(id)
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.jobs[id]
	if !ok {
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if !ended(r.Status) {
		return fmt.Errorf("%w: job %s is %s; cancel it first", ErrState, id, r.Status)
	}
	if err := m.cfg.Store.DeleteJob(id); err != nil {
		return err
	}
	delete(m.jobs, id)
	return nil
}

// saveLocked writes r, synced.
func (m *Manager) saveLocked(r *Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("jobs: encode job %s: %w", r.ID, err)
	}
	return m.cfg.Store.PutJob(r.ID, b)
}

// startLocked starts r's runner.
func (m *Manager) startLocked(r *Record) error {
	if m.closed {
		return fmt.Errorf("%w: the runtime is stopping", ErrState)
	}
	rn, err := m.newRun(r)
	if err != nil {
		return err
	}
	m.runs[r.ID] = rn
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		rn.loop()
	}()
	return nil
}

// newIDLocked returns a new job id; in cluster mode one whose home
// partition this node owns, so that it runs the job it was asked to
// create.
func (m *Manager) newIDLocked() (string, error) {
	if m.cfg.Owned == nil {
		return newJobID(), nil
	}
	if len(m.owned) == 0 {
		return "", fmt.Errorf("%w: this node owns no partition at the moment (it is starting, or the cluster is rebalancing); retry, or send the request to another node", ErrMoved)
	}
	for {
		// Each try lands on an owned partition with probability
		// owned/P: a few tries.
		id := newJobID()
		if m.owned[m.home(id)] {
			return id, nil
		}
	}
}

func newJobID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Marker is what the mutation ids of job id contain: the audit log's
// records of a job are those whose mutation id contains it.
func Marker(id string) string { return "-job-" + id + "-" }
