package cycle

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestScripts runs the scripts in testdata/*.txt against one Machine, the
// script playing its shell. Regenerate the expected output with
//
//	go test ./internal/cluster/cycle -run TestScripts -rewrite
//
// and read the diff: it is the behaviour change.
//
// Commands (partitions as p=1,2; the open transaction is implicit):
//
//	init [backoff=1s] [give-up=10s] [interval=100ms] [min-gap=2ms]
//	assign p=…          revoke p=…          restored p= gen= [failed]
//	serving p= [full]   filled p=           drained p=     rearm
//	begin               began member= gen=  idle           discard
//	polled p=           polled-ingress      engine-refused p=
//	take p=             route-failed        encode-failed p=   log-failed p=
//	produced n=         refused from=       moves-heard
//	check-member member= gen=               member-checked [err=]
//	poll-for polling=<duration> at=<duration> [work]
//	committing at=<duration>
//	how-to-end [starts] finish outcome=committed|not|unknown at=<duration>
//
// Times (at=, polling=) are offsets from the script's start.
//
//	state
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		s := &script{}
		datadriven.RunTest(t, path, s.run)
	})
}

type script struct {
	m  *Machine
	t  *Txn
	t0 time.Time
}

func (s *script) run(t *testing.T, d *datadriven.TestData) string {
	if s.m == nil && d.Cmd != "init" {
		s.m = New(Config{RebuildBackoff: time.Second, GiveUpAfter: 10 * time.Second})
	}
	txn := func() *Txn {
		if s.t == nil {
			t.Fatalf("%s: %s with no transaction open (begin)", d.Pos, d.Cmd)
		}
		return s.t
	}
	switch d.Cmd {
	case "init":
		cfg := Config{RebuildBackoff: time.Second, GiveUpAfter: 10 * time.Second}
		if d.HasArg("backoff") {
			cfg.RebuildBackoff = durArg(t, d, "backoff")
		}
		if d.HasArg("give-up") {
			cfg.GiveUpAfter = durArg(t, d, "give-up")
		}
		if d.HasArg("interval") {
			cfg.Interval = durArg(t, d, "interval")
		}
		if d.HasArg("min-gap") {
			cfg.MinGap = durArg(t, d, "min-gap")
		}
		s.m, s.t = New(cfg), nil
		return "ok"
	case "assign":
		drops, restores := s.m.Assigned(parts(t, d))
		return describeDrops(drops) + describeRestores(restores)
	case "revoke":
		return describeDrops(s.m.Revoked(parts(t, d)))
	case "restored":
		what, again := s.m.Restored(int32(intArg(t, d, "p")), uint64(intArg(t, d, "gen")), d.HasArg("failed"))
		out := []string{"stale", "restore-again", "serve"}[what]
		if what == RestoreAgain {
			out += "\n" + describeRestores([]Restore{again})
		}
		return out
	case "serving":
		return fmt.Sprintf("resume fetching: %v", s.m.Serving(int32(intArg(t, d, "p")), d.HasArg("full")))
	case "filled":
		return fmt.Sprintf("pause fetching: %v", s.m.Filled(int32(intArg(t, d, "p"))))
	case "drained":
		return fmt.Sprintf("resume fetching: %v", s.m.Drained(int32(intArg(t, d, "p"))))
	case "rearm":
		return fmt.Sprintf("end the session's state: %v", s.m.Rearm())
	case "begin":
		s.t = s.m.Begin()
		return "ok"
	case "began":
		txn().Began(strArg(t, d, "member"), int32(intArg(t, d, "gen")))
		return "ok"
	case "idle":
		return fmt.Sprintf("idle: %v", txn().Idle())
	case "discard":
		txn().Discard()
		s.t = nil
		return "ok"
	case "polled":
		return fmt.Sprintf("hand to the engine: %v%s", txn().Polled(int32(intArg(t, d, "p"))), s.aborting())
	case "polled-ingress":
		txn().PolledIngress()
		return "ok"
	case "engine-refused":
		txn().EngineRefused(int32(intArg(t, d, "p")))
		return "ok" + s.aborting()
	case "take":
		encode, why := txn().Take(int32(intArg(t, d, "p")))
		if !encode {
			return "fail as moved: partition " + why
		}
		return "encode"
	case "route-failed":
		txn().RouteFailed()
		return "ok" + s.aborting()
	case "encode-failed":
		txn().EncodeFailed(int32(intArg(t, d, "p")))
		return "ok" + s.aborting()
	case "log-failed":
		txn().LogFailed(int32(intArg(t, d, "p")))
		return "ok" + s.aborting()
	case "produced":
		txn().Produced(intArg(t, d, "n"))
		return "ok"
	case "refused":
		txn().Refused(int32(intArg(t, d, "from")))
		return "ok" + s.aborting()
	case "unsettled":
		txn().Unsettled()
		return "ok" + s.aborting()
	case "moves-heard":
		txn().MovesHeard()
		return "ok"
	case "check-member":
		check, member, gen := txn().MustCheckMember(strArg(t, d, "member"), int32(intArg(t, d, "gen")))
		if check {
			return fmt.Sprintf("heartbeat as %s generation %d", member, gen)
		}
		if err := txn().FenceErr(); err != nil {
			return "no heartbeat; fenced: " + err.Error() + s.aborting()
		}
		return "no heartbeat"
	case "member-checked":
		var err error
		if d.HasArg("err") {
			err = errors.New(strArg(t, d, "err"))
		}
		txn().MemberChecked(err)
		return "ok" + s.aborting()
	case "poll-for":
		wait := s.m.PollFor(s.t0.Add(durArg(t, d, "at")), s.t0.Add(durArg(t, d, "polling")), d.HasArg("work"))
		if wait <= 0 {
			return "begin the transaction now"
		}
		return fmt.Sprintf("poll on for %v", wait)
	case "committing":
		txn().Committing(s.t0.Add(durArg(t, d, "at")))
		return "ok"
	case "how-to-end":
		return []string{"abort", "commit with offsets", "commit without offsets"}[txn().HowToEnd(d.HasArg("starts"))]
	case "finish":
		o := map[string]Outcome{"committed": Committed, "not": NotCommitted, "unknown": OutcomeUnknown}[strArg(t, d, "outcome")]
		var at time.Duration
		if d.HasArg("at") {
			at = durArg(t, d, "at")
		}
		res := txn().Finish(o, s.t0.Add(at))
		s.t = nil
		return describeResult(res)
	case "state":
		return s.m.Describe()
	}
	t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
	return ""
}

// aborting says why the open transaction aborts, if it does.
func (s *script) aborting() string {
	if s.t == nil || s.t.Abort() == NoReason {
		return ""
	}
	return fmt.Sprintf(" (aborting: %s)", s.t.Abort())
}

func describeDrops(ds []Drop) string {
	var b strings.Builder
	for _, d := range ds {
		what := "cancel the restore of"
		if d.Serving {
			what = "revoke from the engine"
		}
		fmt.Fprintf(&b, "%s %d", what, d.P)
		if d.Full {
			b.WriteString(" (was paused full)")
		}
		b.WriteString("\n")
	}
	if b.Len() == 0 {
		return "no drops\n"
	}
	return b.String()
}

func describeRestores(rs []Restore) string {
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, "restore %d gen %d", r.P, r.Gen)
		if r.After > 0 {
			fmt.Fprintf(&b, " after %v", r.After)
		}
		if r.Retry {
			b.WriteString(" (retry)")
		}
		if r.Strikes > 0 {
			fmt.Fprintf(&b, " (its own abort, %d in a row)", r.Strikes)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func describeResult(r Result) string {
	var b strings.Builder
	if r.Committed {
		fmt.Fprintf(&b, "committed; touched %v\n", r.Touched)
	} else {
		fmt.Fprintf(&b, "aborted (%s); touched %v\n", r.Reason, r.Touched)
		b.WriteString(describeRestores(r.Rebuild))
	}
	if r.Warn != "" {
		fmt.Fprintf(&b, "warn: %s\n", r.Warn)
	}
	if r.GiveUp != nil {
		fmt.Fprintf(&b, "give up: %v\n", r.GiveUp)
	}
	return b.String()
}

func parts(t *testing.T, d *datadriven.TestData) []int32 {
	var ps []int32
	for _, a := range d.CmdArgs {
		if a.Key != "p" {
			continue
		}
		for _, v := range strings.Split(strings.Join(a.Vals, ","), ",") {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("%s: p=%s: %v", d.Pos, v, err)
			}
			ps = append(ps, int32(n))
		}
	}
	return ps
}

func intArg(t *testing.T, d *datadriven.TestData, key string) int {
	var n int
	d.ScanArgs(t, key, &n)
	return n
}

func strArg(t *testing.T, d *datadriven.TestData, key string) string {
	var v string
	d.ScanArgs(t, key, &v)
	return v
}

func durArg(t *testing.T, d *datadriven.TestData, key string) time.Duration {
	v, err := time.ParseDuration(strArg(t, d, key))
	if err != nil {
		t.Fatalf("%s: %s: %v", d.Pos, key, err)
	}
	return v
}
