package sim

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/cluster/sessiontest"
	"github.com/statefun-go/statefun/internal/engine"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// partitions and ids shape the simulated application: eight addresses of
// one function type over four partitions.
const partitions = 4

var ids = []string{"a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7"}

func addrOf(id string) address.Address { return address.Address{Type: fnType, ID: id} }

// world is one simulated run: the disk, the store and engine on it (one
// "process", replaced at every crash), the clock, the function, what the
// simulation asked for and is still waiting on, and the model.
type world struct {
	t     testing.TB
	seed  int64
	steps int
	rng   *rand.Rand
	trace []string

	now time.Time
	mem *vfs.MemFS // the disk: survives a crash through CrashClone
	// faultArmed makes the next write (1) or sync (2) of the write-ahead log
	// fail, and every one after it: Pebble cannot go on after that.
	faultArmed *atomic.Int32
	db         *store.DB
	eng        *engine.Engine
	d          *engine.Driver
	fn         *function
	epoch      int // restarts so far
	leaked     int // stores abandoned after a fatal disk error

	m *model
	// cl is the cluster variant's Kafka and session; nil for the
	// embedded engine.
	cl *clusterSim

	ingresses []*pendingIngress
	mutations []*pendingMutation
	reads     []*pendingRead
	pops      []*engine.PopFuture
	seq       int // names messages and mutations
	// lim is the engine's bounds (0: its defaults).
	lim limits
}

type pendingIngress struct {
	id string
	f  *engine.Future
}

type pendingMutation struct {
	mu *mutation
	f  *engine.Future
}

type pendingRead struct {
	rd *read
	f  *engine.ReadFuture
}

type quietPebble struct{}

func (quietPebble) Infof(string, ...any)  {}
func (quietPebble) Errorf(string, ...any) {}
func (quietPebble) Fatalf(f string, args ...any) {
	panic("sim: Pebble's Fatalf reached the test logger: " + fmt.Sprintf(f, args...))
}

func newWorld(t testing.TB, seed int64, steps int, cluster bool, lim limits) *world {
	w := &world{
		t: t, seed: seed, steps: steps, lim: lim,
		rng: rand.New(rand.NewPCG(uint64(seed), 0x5157)),
		now: time.UnixMilli(1_700_000_000_000),
		mem: vfs.NewCrashableMem(),
		m:   newModel(),
	}
	w.fn = &function{failed: w.m.failedAttempt, called: w.m.called}
	if cluster {
		w.cl = &clusterSim{k: sessiontest.NewKafka()}
	}
	w.open()
	return w
}

// logf records one step of the run; the tail is printed on failure and the
// whole trace is what the reproducibility test compares.
func (w *world) logf(format string, args ...any) {
	w.trace = append(w.trace, fmt.Sprintf(format, args...))
}

// fail stops the run with the seed and the command that reproduces it.
func (w *world) fail(format string, args ...any) {
	w.t.Helper()
	tail := w.trace
	if f := os.Getenv("SIM_TRACE"); f != "" {
		_ = os.WriteFile(f, []byte(strings.Join(w.trace, "\n")), 0o644)
	}
	if len(tail) > 40 {
		tail = tail[len(tail)-40:]
	}
	test := "TestSimulation"
	if w.cl != nil {
		test = "TestSimulationCluster"
	}
	w.t.Fatalf("simulation seed %d failed after %d trace lines: %s\nreproduce: go test ./internal/sim -run '%s$' -sim.seed=%d -sim.steps=%d -v\nlast steps:\n  %s",
		w.seed, len(w.trace), fmt.Sprintf(format, args...), test, w.seed, w.steps, strings.Join(tail, "\n  "))
}

func (w *world) must(err error, what string) {
	w.t.Helper()
	if err != nil {
		w.fail("%s: %v", what, err)
	}
}

// open starts a "process": the store on the current disk, behind an
// injector of write-ahead log errors, and an engine on it; then records
// the inbox it restored (messages of a failed group may have survived).
func (w *world) open() {
	armed := &atomic.Int32{}
	w.faultArmed = armed
	fs := errorfs.Wrap(w.mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if !strings.HasSuffix(op.Path, ".log") {
			return nil
		}
		switch a := armed.Load(); {
		case a == 1 && (op.Kind == errorfs.OpFileWrite || op.Kind == errorfs.OpFileWriteAt):
		case a >= 1 && (op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData || op.Kind == errorfs.OpFileSyncTo):
		default:
			return nil
		}
		return errors.New("sim: injected disk error")
	}))
	db, err := store.Open("data", store.Options{Partitions: partitions, FS: fs, Logger: quietPebble{}, SweepInterval: -1, CacheSize: 1 << 20})
	w.must(err, "open the store")
	w.db = db
	opts := engine.Options{
		Store: db, Functions: w.fn, Driven: true, Now: func() time.Time { return w.now },
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		RetryBase: 20 * time.Millisecond, RetryMax: 400 * time.Millisecond,
		TimerWindow: w.lim.timerWindow, MaxBacklog: w.lim.maxBacklog,
		Egress: func(ns, typ string, _ *protocol.TypedValue) (string, error) {
			if ns != egressNS || typ != egressName {
				return "", fmt.Errorf("unknown egress %s/%s", ns, typ)
			}
			return egressRoute, nil
		},
	}
	if w.cl != nil {
		w.clusterOptions(&opts, db)
	}
	e, err := engine.New(opts)
	w.must(err, "start the engine")
	w.eng, w.d = e, e.Driver()
	if w.cl != nil {
		w.cl.s.Bind(e)
		w.assignAll()
	}
	e.Start()
	w.scanInboxes()
}

// crash ends the process at this instant: the disk keeps what was synced
// and, at random, part of what was not; the next process restarts on it.
// faulted says a disk error killed the store: it cannot be closed.
func (w *world) crash(faulted bool) {
	if w.cl != nil {
		w.crashCluster()
		return
	}
	pct := w.rng.IntN(101)
	if faulted {
		// Which part of the failed group's log write survives would depend
		// on how Pebble's log writer happened to split it: keep all or
		// nothing of what was not synced, both of which are determined.
		pct = 100 * w.rng.IntN(2)
	}
	w.logf("crash (unsynced data kept: %d%%, faulted %v)", pct, faulted)
	clone := w.mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: pct, RNG: rand.New(rand.NewPCG(w.rng.Uint64(), 1))})
	w.eng.Close()
	if faulted {
		w.leaked++ // Pebble parked its goroutines; nothing to close
	} else {
		_ = w.db.Close()
	}
	w.m.crashed(faulted, len(w.pops))
	w.ingresses, w.mutations, w.reads, w.pops = nil, nil, nil, nil
	w.mem = clone
	w.epoch++
	w.open()
}

// commit writes one group. With a disk fault armed the write-ahead log
// fails: Pebble parks the committing goroutine for good (see
// internal/store/health.go), so the group runs on its own goroutine and
// the simulation waits for either outcome — which the injector decides,
// not the scheduler.
func (w *world) commit() {
	if w.cl != nil {
		w.fenceZombie()
	}
	if w.d.Commits() == 0 {
		return
	}
	if w.faultArmed.Load() == 0 {
		w.must(w.d.Commit(), "commit")
		if w.cl != nil {
			w.rebuild() // the cycle aborted if a request failed to encode
		}
		w.afterCommit()
		return
	}
	done := make(chan error, 1)
	go func() { done <- w.d.Commit() }()
	select {
	case err := <-done:
		if err == nil {
			w.fail("a group commit succeeded although every write-ahead log write fails")
		}
		w.logf("commit failed: %v", err)
	case <-w.db.Failed():
		// Not the error's text: it names a log file, whose number depends
		// on Pebble's background flushes.
		w.logf("store failed")
	case <-time.After(time.Minute):
		w.fail("a group commit on a failing disk neither returned nor failed the store in a minute")
	}
	w.crash(true)
}

// afterCommit notes what became durable: the inbox arrivals, the answers
// of ingress and accepted mutations.
func (w *world) afterCommit() {
	w.scanInboxes()
	w.poll()
	w.m.checkLogs(w)
}

// scanInboxes records, in arrival order, every inbox record not seen yet:
// the order in which its partition gets them. Messages a partition sends
// to itself are queued in its core before they are durable, so they are
// not ordered against others (the checker treats them as untracked).
func (w *world) scanInboxes() {
	for p := range partitions {
		err := w.db.ScanInbox(p, func(k store.InboxKey, env *protocol.Envelope) error {
			if mu := env.GetMutation(); mu != nil {
				w.m.arrived(mu.GetTarget().GetId(), mu.GetId(), true)
				return nil
			}
			id := parseMessage(env.GetArgument().GetValue()).id
			if k.Source == uint32(p) {
				return nil // untracked: see model.untracked
			}
			w.m.arrived(env.GetTarget().GetId(), id, false)
			return nil
		})
		w.must(err, "scan the inbox")
	}
}

// poll collects the answers that came in.
func (w *world) poll() {
	w.ingresses = slices.DeleteFunc(w.ingresses, func(pi *pendingIngress) bool {
		if !pi.f.Done() {
			return false
		}
		w.must(pi.f.Err(), "ingest "+pi.id)
		w.m.acked[pi.id] = true
		return true
	})
	w.mutations = slices.DeleteFunc(w.mutations, func(pm *pendingMutation) bool {
		if !pm.f.Done() {
			return false
		}
		if w.cl != nil && moved(pm.f.Err()) {
			w.logf("mutation %s: %v", pm.mu.id, pm.f.Err())
			return true // its outcome is unknown to its caller
		}
		if errors.Is(pm.f.Err(), engine.ErrBusy) {
			// Refused as its turn came, behind messages paged to the
			// store: never applied (no receipt, which checkOrder sees).
			w.logf("mutation %s refused at its turn: busy", pm.mu.id)
			return true
		}
		w.must(pm.f.Err(), "mutation "+pm.mu.id)
		rc := pm.f.Receipt()
		pm.mu.acked, pm.mu.heardEpoch = &rc, w.m.epoch
		if rc.Version > 0 {
			w.m.lastVersion[pm.mu.addr] = rc.Version
		}
		return true
	})
	w.reads = slices.DeleteFunc(w.reads, func(pr *pendingRead) bool {
		if !pr.f.Done() {
			return false
		}
		if w.cl != nil && moved(pr.f.Err()) {
			return true // the caller retries elsewhere
		}
		w.must(pr.f.Err(), "read")
		for _, en := range pr.f.Reply().Entries {
			if en.State == "op" {
				pr.rd.value, pr.rd.exists = string(en.Entry.Value), true
				w.m.lastVersion[pr.rd.addr] = en.Entry.Version
			}
		}
		pr.rd.done = true
		return true
	})
	w.pops = slices.DeleteFunc(w.pops, func(f *engine.PopFuture) bool {
		if !f.Done() {
			return false
		}
		w.must(f.Err(), "pop")
		if rec, ok := f.Record(); ok {
			w.m.popped = append(w.m.popped, string(rec.GetArgument().GetValue()))
		}
		return true
	})
}

// step runs partition p once.
func (w *world) step(p int) {
	w.must(w.d.Step(p), fmt.Sprintf("step partition %d", p))
	w.poll()
}

// sortedCalls returns the waiting calls' indexes ordered by address (at
// most one call per address is in flight), so that the choice does not
// depend on the order the engine queued them in.
func (w *world) sortedCalls() []int {
	calls := w.d.Calls()
	idx := make([]int, len(calls))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return calls[idx[a]].Invocation.Addr.ID < calls[idx[b]].Invocation.Addr.ID })
	return idx
}

func (w *world) runCall(i int, mode callMode) {
	c := w.d.Calls()[i]
	w.fn.mode, w.fn.violation = mode, w.rng.IntN(4)
	w.logf("call %s attempt %d mode %d", c.Invocation.Addr.ID, c.Invocation.Attempt, mode)
	w.d.RunCall(i)
	w.fn.mode = answerOK
}

// settle runs the engine until nothing is left to do, every call answered
// well, the clock moved to each next deadline (delayed messages, retry
// backoffs) until there is none.
func (w *world) settle() {
	for round := 0; ; round++ {
		if round > 100_000 {
			w.fail("the engine did not settle")
		}
		busy := false
		for p := range partitions {
			if w.d.HasWork(p) {
				w.step(p)
				busy = true
			}
		}
		if w.d.Commits() > 0 {
			w.commit()
			busy = true
		}
		if w.cl != nil {
			w.fenceZombie()
			for p := range partitions {
				if w.cl.s.Unpolled(p) {
					w.fetch(p)
					busy = true
				}
			}
		}
		if idx := w.sortedCalls(); len(idx) > 0 {
			w.runCall(idx[0], answerOK)
			busy = true
		}
		if busy {
			continue
		}
		next, ok := time.Time{}, false
		for p := range partitions {
			if at, has := w.d.NextDeadline(p); has && (!ok || at.Before(next)) {
				next, ok = at, true
			}
		}
		if !ok {
			break
		}
		if next.After(w.now) {
			w.now = next
		}
		for p := range partitions {
			if at, has := w.d.NextDeadline(p); has && !at.After(w.now) {
				w.step(p)
			}
		}
	}
	w.poll()
	if len(w.ingresses)+len(w.mutations)+len(w.reads)+len(w.pops) > 0 {
		w.fail("settled with answers still missing: %d ingresses, %d mutations, %d reads, %d pops",
			len(w.ingresses), len(w.mutations), len(w.reads), len(w.pops))
	}
}
