package partition

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/protocol"
)

// repairScript is what the repair commands of the scripts keep: the audit
// records the core handed out (a revert is built from them, as the state
// API builds it from the stored audit log) and the durable dead letters.
type repairScript struct {
	audits      map[string][]AuditRecord
	deadLetters map[string]MessageDeadLetter
}

func (r *repairScript) saw(rd Ready) {
	if rd.Commit == nil {
		return
	}
	if r.audits == nil {
		r.audits = map[string][]AuditRecord{}
	}
	for _, a := range rd.Commit.Audit {
		r.audits[a.Mutation] = append(r.audits[a.Mutation], a)
	}
}

func (r *repairScript) durable(c *Commit) {
	if r.deadLetters == nil {
		r.deadLetters = map[string]MessageDeadLetter{}
	}
	for _, d := range c.DeadLetters {
		r.deadLetters[d.ID] = d
	}
}

func (r *repairScript) describe() []string {
	var out []string
	for id, d := range r.deadLetters {
		out = append(out, fmt.Sprintf("dead-letter %s %s -> %s: %s", id, describeKey(d.Key), describeAddr(d.Env.GetTarget()), DescribeValue(d.Env.GetArgument())))
	}
	return out
}

func (s *script) repairHandlers() map[string]func(*testing.T, *datadriven.TestData) string {
	return map[string]func(*testing.T, *datadriven.TestData) string{
		"skip": s.cmdRepairMessage, "edit": s.cmdRepairMessage, "cancel": s.cmdRepairMessage,
		"delete-address": s.cmdRepairMessage, "cancel-delayed": s.cmdCancelDelayed, "revert": s.cmdRevert,
	}
}

// cmdRepairMessage skips, edits or cancels a message of an address's
// inbox (key=<source>/<seq>, source "ingress" or a partition; the head
// without one), or deletes the address. Receipts show in the commit.
//
//	skip id=a
//	skip id=a key=ingress/3
//	edit id=a value=fixed type=t/other
//	cancel id=a key=ingress/2
//	delete-address id=a
func (s *script) cmdRepairMessage(t *testing.T, d *datadriven.TestData) string {
	s.request++
	m := &Mutation{ID: fmt.Sprintf("%s%d", d.Cmd[:1], s.request), Request: s.request, Addr: scriptAddr(t, d),
		Ack: AckCommitted, Principal: "op", Reason: argOr(d, "reason", ""), Repair: &MessageRepair{}}
	if k := argOr(d, "key", ""); k != "" {
		key := parseScriptKey(t, k)
		m.Repair.Key = &key
	}
	switch d.Cmd {
	case "skip":
		m.Op = OpSkipMessage
	case "edit":
		m.Op = OpEditMessage
		m.Repair.Argument = &protocol.TypedValue{Typename: argOr(d, "type", defaultTypename), HasValue: true, Value: []byte(argOr(d, "value", ""))}
	case "cancel":
		m.Op = OpCancelMessage
	case "delete-address":
		m.Op = OpDeleteAddress
	}
	s.step(t, Mutate{Mutation: m})
	return ""
}

func parseScriptKey(t *testing.T, k string) InboxKey {
	src, seq, _ := strings.Cut(k, "/")
	n, err := strconv.ParseUint(seq, 10, 64)
	if err != nil {
		t.Fatalf("key %q: want <source>/<seq>", k)
	}
	key := InboxKey{Source: SourceIngress, Seq: n}
	if src != "ingress" {
		p, err := strconv.ParseUint(src, 10, 32)
		if err != nil {
			t.Fatalf("key %q: source: %v", k, err)
		}
		key.Source = uint32(p)
	}
	return key
}

// cmdCancelDelayed cancels a pending delayed message for id, by timer id
// or by its sender and token.
//
//	cancel-delayed id=b timer=1
//	cancel-delayed id=b sender=a token=t
func (s *script) cmdCancelDelayed(t *testing.T, d *datadriven.TestData) string {
	s.request++
	ev := DelayedRepair{Request: s.request, Mutation: fmt.Sprintf("c%d", s.request), Principal: "op",
		Reason: argOr(d, "reason", ""), Addr: scriptAddr(t, d), Token: argOr(d, "token", "")}
	if n, ok := intArg(t, d, "timer"); ok {
		ev.TimerID = uint64(n)
	}
	if sender := argOr(d, "sender", ""); sender != "" {
		ev.Sender = address.Address{Type: scriptType, ID: sender}
	}
	s.step(t, ev)
	return ""
}

// cmdRevert reverts a cancel or a delete of an address from the audit
// records it wrote, as the state API does: one reinstate that puts back
// the entries, messages and delayed messages.
//
//	revert mutation=c5
func (s *script) cmdRevert(t *testing.T, d *datadriven.TestData) string {
	id := argOr(d, "mutation", "")
	recs := s.repair.audits[id]
	if len(recs) == 0 {
		return "no audit records of " + id + "\n"
	}
	s.request++
	rid := fmt.Sprintf("v%d", s.request)
	if recs[0].Op == OpCancelDelayed {
		s.step(t, DelayedRepair{Request: s.request, Mutation: rid, Principal: "op", Reverts: id, Addr: recs[0].Addr, Reinstate: recs[0].Timers})
		return ""
	}
	r := &MessageRepair{}
	for _, a := range recs {
		if a.State != "" && a.Before != nil {
			r.Entries = append(r.Entries, StateEntry{State: a.State, Entry: *a.Before})
		}
		r.Messages = append(r.Messages, a.Messages...)
		r.Timers = append(r.Timers, a.Timers...)
	}
	s.step(t, Mutate{Mutation: &Mutation{ID: rid, Request: s.request, Addr: recs[0].Addr, Op: OpReinstate, Ack: AckCommitted,
		Principal: "op", Reverts: id, Repair: r}})
	return ""
}
