package partition

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/protocol"
)

// TestScripts runs the scripts in testdata/*.txt against one partition core
// of a one-partition application, with a store that applies commits only
// when a script says they are durable. Regenerate the expected output with
//
//	go test ./internal/partition -run TestScripts -rewrite
//
// and read the diff: it is the behaviour change.
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		s := &script{}
		datadriven.RunTest(t, path, s.run)
	})
}

// scriptType is the function type of every address in the scripts.
var scriptType = address.TypeName{Namespace: "test", Name: "fn"}

// defaultTypename is the typename of script values.
const defaultTypename = "t/s"

// script is the state of one script: the core, the durable store and what
// the core produced that is not durable yet.
type script struct {
	cfg   Config
	core  *Core
	store *memStore
	// Durable beyond memStore: meta and inbox mutations.
	inboxMut   map[InboxKey]*Mutation
	pauses     map[address.Address]Pause
	commitID   uint64
	versionSeq uint64

	now      int64
	seq      uint64    // ingress sequence
	request  uint64    // reply correlation for reads and mutations
	unsynced []*Commit // handed out by Ready, not durable yet
	last     map[address.Address]Invocation
	// handed is the messages durable commits handed to the shell
	// (Produced.Deliver), not delivered back yet (handback).
	handed []Produced
	// repair is the state of the repair commands (repair_script_test.go).
	repair repairScript
}

func (s *script) run(t *testing.T, d *datadriven.TestData) string {
	if s.core == nil && d.Cmd != "init" {
		s.cmdInit(t, &datadriven.TestData{})
	}
	handlers := map[string]func(*testing.T, *datadriven.TestData) string{
		"init": s.cmdInit, "deliver": s.cmdDeliver, "ready": s.cmdReady, "result": s.cmdResult,
		"incomplete": s.cmdIncomplete, "fail": s.cmdFail, "tick": s.cmdTick, "mutate": s.cmdMutate,
		"read": s.cmdRead, "durable": s.cmdDurable, "restore": s.cmdRestore, "store": s.cmdStore,
		"pause": s.cmdPause, "resume": s.cmdPause, "inspect": s.cmdInspect, "window": s.cmdWindow,
		"handback": s.cmdHandback,
	}
	for cmd, h := range s.repairHandlers() {
		handlers[cmd] = h
	}
	h, ok := handlers[d.Cmd]
	if !ok {
		t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
	}
	return h(t, d)
}

// step feeds one event; a Reader error fails the script.
func (s *script) step(t *testing.T, ev Event) {
	t.Helper()
	if err := s.core.Step(s.now, ev); err != nil {
		t.Fatal(err)
	}
}

// cmdInit starts a fresh core. Arguments: max-batch, max-batch-bytes,
// retry-base, retry-max (ms) and routable (function names of test/ that an
// endpoint serves; all when absent). Each input line registers a state of
// test/fn (see parseSpec).
//
//	init max-batch=2 retry-base=10 retry-max=40 routable=fn
//	count
//	seen after-write=100
func (s *script) cmdInit(t *testing.T, d *datadriven.TestData) string {
	*s = script{store: newMemStore(), inboxMut: map[InboxKey]*Mutation{},
		pauses: map[address.Address]Pause{}}
	s.cfg = Config{Partitions: 1}
	if v, ok := intArg(t, d, "max-batch"); ok {
		s.cfg.MaxBatch = func(address.TypeName) int { return int(v) }
	}
	s.cfg.RetryBase, _ = intArg(t, d, "retry-base")
	s.cfg.RetryMax, _ = intArg(t, d, "retry-max")
	if n, ok := intArg(t, d, "pause-after"); ok {
		s.cfg.PauseAfter = func(address.TypeName) int { return int(n) }
	}
	if d.HasArg("pause-on-violation") {
		s.cfg.PauseOnViolation = func(address.TypeName) bool { return true }
	}
	if n, ok := intArg(t, d, "timer-window"); ok {
		s.cfg.TimerWindow = int(n)
	}
	if n, ok := intArg(t, d, "max-queued"); ok {
		s.cfg.MaxQueued = int(n)
	}
	if n, ok := intArg(t, d, "max-batch-bytes"); ok {
		s.cfg.MaxBatchBytes = func(address.TypeName) int { return int(n) }
	}
	if names, ok := d.Arg("routable"); ok {
		served := map[string]bool{}
		for _, n := range names.Vals {
			served[n] = true
		}
		s.cfg.Routable = func(t address.TypeName) error {
			if t.Namespace == "test" && served[t.Name] {
				return nil
			}
			return fmt.Errorf("no endpoint serves function type %s", t)
		}
	}
	s.cfg.Egress = func(ns, typ string, _ *protocol.TypedValue) (string, error) {
		if ns+"/"+typ != "io.statefun.playground/egress" {
			return "", errors.New("unknown egress")
		}
		return "topic", nil
	}
	for _, line := range lines(d.Input) {
		s.store.specs[scriptType] = append(s.store.specs[scriptType], parseSpec(t, line))
	}
	s.core = New(s.cfg, s.store, Restore{})
	s.last = map[address.Address]Invocation{}
	return ""
}

// cmdDeliver makes an ingress message durable in the inbox and delivers it.
//
//	deliver id=a value=hello
func (s *script) cmdDeliver(t *testing.T, d *datadriven.TestData) string {
	s.seq++
	k := InboxKey{Source: SourceIngress, Seq: s.seq}
	env := &protocol.Envelope{Target: toProto(scriptAddr(t, d)), Argument: value(argOr(d, "value", ""))}
	s.store.inbox[k] = env
	s.step(t, MessageArrived{Key: k, Env: env})
	return ""
}

// cmdReady takes the core's Ready and prints it, then the backlog and the
// next deadline. Its commit is not durable until a durable command.
//
//	ready
func (s *script) cmdReady(t *testing.T, d *datadriven.TestData) string {
	rd := s.core.Ready()
	s.repair.saw(rd)
	for _, inv := range rd.Invocations {
		s.last[inv.Addr] = inv
	}
	if rd.Commit != nil {
		s.unsynced = append(s.unsynced, rd.Commit)
	}
	out := DescribeReady(rd)
	if d.HasArg("causes") && rd.Commit != nil {
		out += describeCauses(rd.Commit)
	}
	if out == "" {
		out = "nothing\n"
	}
	next := "none"
	if at, ok := s.core.NextDeadline(); ok {
		next = strconv.FormatInt(at, 10)
	}
	return out + fmt.Sprintf("backlog=%d next=%s\n", s.core.Backlog(), next)
}

// cmdResult answers the last invocation of an address (or request=N) with
// an InvocationResult whose effects are the input lines:
//
//	result id=a
//	set count=5
//	del seen
//	send id=b value=hi
//	delay id=b ms=500 token=t value=later
//	cancel token=t
//	egress value=out
func (s *script) cmdResult(t *testing.T, d *datadriven.TestData) string {
	inv := s.invocation(t, d)
	r := &protocol.FromFunction_InvocationResponse{}
	for _, line := range lines(d.Input) {
		verb, args := parseLine(line)
		switch verb {
		case "set":
			for _, f := range strings.Fields(line)[1:] {
				name, v, _ := strings.Cut(f, "=")
				r.StateMutations = append(r.StateMutations, &protocol.FromFunction_PersistedValueMutation{
					MutationType: protocol.FromFunction_PersistedValueMutation_MODIFY, StateName: name, StateValue: value(v)})
			}
		case "del":
			for _, name := range strings.Fields(line)[1:] {
				r.StateMutations = append(r.StateMutations, &protocol.FromFunction_PersistedValueMutation{
					MutationType: protocol.FromFunction_PersistedValueMutation_DELETE, StateName: name})
			}
		case "send":
			r.OutgoingMessages = append(r.OutgoingMessages, &protocol.FromFunction_Invocation{Target: target(args), Argument: value(args["value"])})
		case "delay":
			ms, _ := strconv.ParseInt(args["ms"], 10, 64)
			r.DelayedInvocations = append(r.DelayedInvocations, &protocol.FromFunction_DelayedInvocation{
				DelayInMs: ms, Target: target(args), Argument: value(args["value"]), CancellationToken: args["token"]})
		case "cancel":
			r.DelayedInvocations = append(r.DelayedInvocations, &protocol.FromFunction_DelayedInvocation{
				IsCancellationRequest: true, CancellationToken: args["token"]})
		case "egress":
			r.OutgoingEgresses = append(r.OutgoingEgresses, &protocol.FromFunction_EgressMessage{
				EgressNamespace: "io.statefun.playground", EgressType: "egress", Argument: value(args["value"])})
		default:
			t.Fatalf("%s: unknown effect %q", d.Pos, line)
		}
	}
	s.step(t, ResultArrived{Addr: inv.Addr, Request: inv.Request, Response: &protocol.FromFunction{
		Response: &protocol.FromFunction_InvocationResult{InvocationResult: r}}})
	return ""
}

// cmdIncomplete answers the last invocation of an address with an
// IncompleteInvocationContext declaring the states of the input lines.
//
//	incomplete id=a
//	count
//	seen after-invoke=100
func (s *script) cmdIncomplete(t *testing.T, d *datadriven.TestData) string {
	inv := s.invocation(t, d)
	ctx := &protocol.FromFunction_IncompleteInvocationContext{}
	for _, line := range lines(d.Input) {
		sp := parseSpec(t, line)
		ctx.MissingValues = append(ctx.MissingValues, &protocol.FromFunction_PersistedValueSpec{
			StateName: sp.Name, TypeTypename: sp.Typename,
			ExpirationSpec: &protocol.FromFunction_ExpirationSpec{Mode: protocol.FromFunction_ExpirationSpec_ExpireMode(sp.Mode), ExpireAfterMillis: sp.TTL}})
	}
	s.step(t, ResultArrived{Addr: inv.Addr, Request: inv.Request, Response: &protocol.FromFunction{
		Response: &protocol.FromFunction_IncompleteInvocationContext_{IncompleteInvocationContext: ctx}}})
	return ""
}

// cmdFail answers the last invocation of an address with a call error.
//
//	fail id=a err=connection-refused
func (s *script) cmdFail(t *testing.T, d *datadriven.TestData) string {
	inv := s.invocation(t, d)
	s.step(t, ResultArrived{Addr: inv.Addr, Request: inv.Request, Err: errors.New(argOr(d, "err", "call failed"))})
	return ""
}

// cmdTick moves the clock by ms, or to at, and steps a Tick.
//
//	tick ms=100
//	tick at=1500
func (s *script) cmdTick(t *testing.T, d *datadriven.TestData) string {
	if ms, ok := intArg(t, d, "ms"); ok {
		s.now += ms
	}
	if at, ok := intArg(t, d, "at"); ok {
		s.now = at
	}
	s.step(t, Tick{})
	return fmt.Sprintf("now=%d\n", s.now)
}

// cmdMutate sends an operator mutation of the state API: op put, delete or
// delete-all; ack applied (the default), committed or accepted (made
// durable in the inbox first, then delivered); if-match as epoch.count.
//
//	mutate id=a op=put state=count value=7 ack=accepted
func (s *script) cmdMutate(t *testing.T, d *datadriven.TestData) string {
	s.request++
	m := &Mutation{ID: fmt.Sprintf("m%d", s.request), Request: s.request, Addr: scriptAddr(t, d),
		State: argOr(d, "state", ""), Value: []byte(argOr(d, "value", "")), Typename: argOr(d, "type", ""),
		Principal: argOr(d, "principal", ""), Reason: argOr(d, "reason", "")}
	switch op := argOr(d, "op", "put"); op {
	case "put":
		m.Op = OpPut
	case "delete":
		m.Op = OpDelete
	case "delete-all":
		m.Op = OpDeleteAll
	case "restore":
		m.Op, m.Image = OpRestore, parseImage(t, d)
	default:
		t.Fatalf("%s: unknown op %q", d.Pos, op)
	}
	if v := argOr(d, "if-match", ""); v != "" {
		epoch, n, _ := strings.Cut(v, ".")
		e, _ := strconv.ParseUint(epoch, 10, 64)
		c, _ := strconv.ParseUint(n, 10, 64)
		m.IfMatch = e*versionEpoch + c
	}
	switch ack := argOr(d, "ack", "applied"); ack {
	case "applied":
		m.Ack = AckApplied
	case "committed":
		m.Ack = AckCommitted
	case "accepted":
		m.Ack, m.Request = AckAccepted, 0
		s.seq++
		k := InboxKey{Source: SourceIngress, Seq: s.seq}
		s.inboxMut[k] = m
		s.step(t, MessageArrived{Key: k, Mutation: m})
		return ""
	default:
		t.Fatalf("%s: unknown ack %q", d.Pos, ack)
	}
	s.step(t, Mutate{Mutation: m})
	return ""
}

// cmdRead reads an address's applied state (its reply shows in ready).
//
//	read id=a
func (s *script) cmdRead(t *testing.T, d *datadriven.TestData) string {
	s.request++
	s.step(t, ReadState{Request: s.request, Addr: scriptAddr(t, d), State: argOr(d, "state", "")})
	return ""
}

// cmdDurable makes the commits handed out so far durable (through id=N
// when given), in order, as the committer would.
//
//	durable
//	durable id=3
func (s *script) cmdDurable(t *testing.T, d *datadriven.TestData) string {
	upTo, ok := intArg(t, d, "id")
	var done []string
	for len(s.unsynced) > 0 && (!ok || s.unsynced[0].ID <= uint64(upTo)) {
		c := s.unsynced[0]
		s.unsynced = s.unsynced[1:]
		s.store.apply(c)
		for _, p := range c.Rewritten {
			s.store.inbox[p.Key] = p.Env
		}
		for _, p := range c.Produced {
			if p.Deliver {
				s.handed = append(s.handed, p)
			}
		}
		for _, k := range c.Consumed {
			delete(s.inboxMut, k)
		}
		s.repair.durable(c)
		for _, p := range c.Pauses {
			if p.Pause == nil {
				delete(s.pauses, p.Addr)
			} else {
				s.pauses[p.Addr] = *p.Pause
			}
		}
		s.commitID, s.versionSeq = c.ID, c.VersionSeq
		s.step(t, CommitDurable{ID: c.ID})
		done = append(done, strconv.FormatUint(c.ID, 10))
	}
	if len(done) == 0 {
		return "nothing to sync\n"
	}
	return "durable: " + strings.Join(done, " ") + "\n"
}

// cmdHandback delivers the first n (all when absent) of the messages
// durable commits handed to the shell, as the shell does once the
// partition has room for them.
//
//	handback n=2
func (s *script) cmdHandback(t *testing.T, d *datadriven.TestData) string {
	n := len(s.handed)
	if v, ok := intArg(t, d, "n"); ok {
		n = min(n, int(v))
	}
	var keys []string
	for _, p := range s.handed[:n] {
		s.step(t, MessageArrived{Key: p.Key, Env: p.Env})
		keys = append(keys, describeKey(p.Key))
	}
	s.handed = s.handed[n:]
	return fmt.Sprintf("handed back: %s; handed over: %v\n", strings.Join(keys, " "), s.core.HandedOver())
}

// cmdWindow prints the delayed messages the core holds in memory: in its
// window, and past it for commits not durable yet.
//
//	window
func (s *script) cmdWindow(t *testing.T, d *datadriven.TestData) string {
	in := len(s.core.pendingT)
	var tks []TimerKey
	for _, it := range s.core.pendingT {
		tks = append(tks, it.timer.Key)
	}
	sort.Slice(tks, func(i, j int) bool { return timerLess(tks[i], tks[j]) })
	var keys []string
	for _, k := range tks {
		keys = append(keys, fmt.Sprintf("%d/%d", k.Due, k.ID))
	}
	horizon := "all"
	if !s.core.all {
		horizon = fmt.Sprintf("%d/%d", s.core.horizon.Due, s.core.horizon.ID)
	}
	return fmt.Sprintf("held=%d in-window=%d [%s] past=%d horizon=%s\n", s.core.TimersHeld(), in, strings.Join(keys, " "), len(s.core.past), horizon)
}

// cmdRestore simulates a crash: commits that are not durable are lost, a
// new core starts from the store and its inbox is replayed in key order.
//
//	restore
func (s *script) cmdRestore(t *testing.T, d *datadriven.TestData) string {
	s.unsynced = nil
	s.last = map[address.Address]Invocation{}
	rs := Restore{CommitID: s.commitID, VersionSeq: s.versionSeq}
	// As the engine does: the first window's worth of timers, the
	// highest id, and whether there are more.
	window := s.cfg.TimerWindow
	if window <= 0 {
		window = DefaultTimerWindow
	}
	all := s.store.sortedTimers()
	pending := len(all)
	for _, tm := range all {
		rs.TimerSeq = max(rs.TimerSeq, tm.Key.ID)
	}
	if len(all) > window {
		all, rs.MoreTimers = all[:window], true
	}
	rs.Timers = all
	for a, p := range s.pauses {
		p := p
		rs.Pauses = append(rs.Pauses, PauseWrite{Addr: a, Pause: &p})
	}
	sort.Slice(rs.Pauses, func(i, j int) bool { return addrLess(rs.Pauses[i].Addr, rs.Pauses[j].Addr) })
	var keys []InboxKey
	for k := range s.store.inbox {
		keys = append(keys, k)
	}
	for k := range s.inboxMut {
		keys = append(keys, k)
	}
	for _, k := range keys {
		if k.Source == uint32(s.cfg.ID) && k.Seq >= rs.OutSeq {
			rs.OutSeq = k.Seq + 1
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].Source != keys[j].Source {
			return keys[i].Source < keys[j].Source
		}
		return keys[i].Seq < keys[j].Seq
	})
	s.core = New(s.cfg, s.store, rs)
	for _, k := range keys {
		if m, ok := s.inboxMut[k]; ok {
			s.step(t, MessageArrived{Key: k, Mutation: m})
		} else {
			s.step(t, MessageArrived{Key: k, Env: s.store.inbox[k]})
		}
	}
	return fmt.Sprintf("restored at commit %d: %d inbox records, %d timers\n", s.commitID, len(keys), pending)
}

// cmdStore prints what is durable: state entries, timers and the inbox.
//
//	store
func (s *script) cmdStore(t *testing.T, d *datadriven.TestData) string {
	var out []string
	for k, e := range s.store.state {
		out = append(out, fmt.Sprintf("state %s %s = %s", k.addr, k.state, DescribeEntry(e)))
	}
	for k, env := range s.store.timers {
		out = append(out, fmt.Sprintf("timer due=%d id=%d -> %s: %s", k.Due, k.ID, describeAddr(env.GetTarget()), DescribeValue(env.GetArgument())))
	}
	for k, env := range s.store.inbox {
		out = append(out, fmt.Sprintf("inbox %s -> %s: %s", describeKey(k), describeAddr(env.GetTarget()), DescribeValue(env.GetArgument())))
	}
	for k, m := range s.inboxMut {
		out = append(out, fmt.Sprintf("inbox %s mutation %s of %s", describeKey(k), m.ID, m.Addr))
	}
	for a, p := range s.pauses {
		out = append(out, fmt.Sprintf("pause %s %s", describePauseTarget(a), describePause(p)))
	}
	out = append(out, s.repair.describe()...)
	sort.Strings(out)
	if len(out) == 0 {
		return "empty\n"
	}
	return strings.Join(out, "\n") + "\n"
}

// invocation returns the invocation a result answers: the last one sent
// to id, or request=N (a stale one) when given.
func (s *script) invocation(t *testing.T, d *datadriven.TestData) Invocation {
	a := scriptAddr(t, d)
	inv, ok := s.last[a]
	if !ok {
		t.Fatalf("%s: no invocation of %s was sent", d.Pos, a)
	}
	if r, ok := intArg(t, d, "request"); ok {
		inv.Request = uint64(r)
	}
	return inv
}

func timerLess(a, b TimerKey) bool {
	if a.Due != b.Due {
		return a.Due < b.Due
	}
	return a.ID < b.ID
}

func scriptAddr(t *testing.T, d *datadriven.TestData) address.Address {
	id := argOr(d, "id", "")
	if id == "" {
		t.Fatalf("%s: %s needs id=", d.Pos, d.Cmd)
	}
	return address.Address{Type: scriptType, ID: id}
}

// target is the address of a send or delay line: id=, and fn= for a
// function of test/ other than fn.
func target(args map[string]string) *protocol.Address {
	fn := args["fn"]
	if fn == "" {
		fn = scriptType.Name
	}
	return &protocol.Address{Namespace: scriptType.Namespace, Type: fn, Id: args["id"]}
}

func value(v string) *protocol.TypedValue {
	return &protocol.TypedValue{Typename: defaultTypename, HasValue: true, Value: []byte(v)}
}

// parseSpec parses "name [type=t/s] [after-write=ms | after-invoke=ms]".
func parseSpec(t *testing.T, line string) Spec {
	name, args := parseLine(line)
	sp := Spec{Name: name, Typename: defaultTypename}
	if v, ok := args["type"]; ok {
		sp.Typename = v
	}
	for key, mode := range map[string]ExpireMode{"after-write": ExpireAfterWrite, "after-invoke": ExpireAfterInvoke} {
		if v, ok := args[key]; ok {
			ttl, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("spec %q: %v", line, err)
			}
			sp.Mode, sp.TTL = mode, ttl
		}
	}
	return sp
}

// parseLine splits "verb k=v k=v" (a verb of the form k=v counts as an
// argument too, for "set count=5").
func parseLine(line string) (string, map[string]string) {
	fields := strings.Fields(line)
	args := map[string]string{}
	for _, f := range fields[1:] {
		k, v, _ := strings.Cut(f, "=")
		args[k] = v
	}
	return fields[0], args
}

func lines(input string) []string {
	var out []string
	for _, l := range strings.Split(input, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

func argOr(d *datadriven.TestData, key, def string) string {
	if a, ok := d.Arg(key); ok && len(a.Vals) > 0 {
		return a.Vals[0]
	}
	return def
}

func intArg(t *testing.T, d *datadriven.TestData, key string) (int64, bool) {
	a, ok := d.Arg(key)
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseInt(a.SingleVal(t), 10, 64)
	if err != nil {
		t.Fatalf("%s: %s: %v", d.Pos, key, err)
	}
	return v, true
}

// cmdPause pauses or resumes an address (id=) or, with type, every
// address of test/fn; an operator's, with reason and expires=<ms>. Its
// receipt shows in ready once the commit is cut (as reply N when ack
// applied... pauses answer at commit, so the receipt is in the commit).
//
//	pause id=a reason=repair expires=500
//	pause type reason=deploy
//	resume id=a
func (s *script) cmdPause(t *testing.T, d *datadriven.TestData) string {
	s.request++
	ev := SetPause{Request: s.request, Resume: d.Cmd == "resume", Principal: "op",
		Mutation: fmt.Sprintf("%s%d", d.Cmd[:1], s.request), Reason: argOr(d, "reason", "")}
	if d.HasArg("type") {
		ev.Addr = address.Address{Type: scriptType}
	} else {
		ev.Addr = scriptAddr(t, d)
	}
	if at, ok := intArg(t, d, "expires"); ok {
		ev.ExpiresAt = at
	}
	s.step(t, ev)
	return ""
}

// cmdInspect asks the core what it holds (its reply shows in ready):
// failing addresses, an address's inbox, or the pauses.
//
//	inspect failing
//	inspect inbox id=a
//	inspect pauses
//	inspect queued
func (s *script) cmdInspect(t *testing.T, d *datadriven.TestData) string {
	s.request++
	ev := Inspect{Request: s.request}
	switch {
	case d.HasArg("failing"):
		ev.Kind = InspectFailing
	case d.HasArg("inbox"):
		ev.Kind, ev.Addr = InspectInbox, scriptAddr(t, d)
	case d.HasArg("pauses"):
		ev.Kind = InspectPauses
	case d.HasArg("queued"):
		ev.Kind = InspectQueued
	default:
		t.Fatalf("%s: inspect failing, inbox, pauses or queued", d.Pos)
	}
	s.step(t, ev)
	return ""
}
