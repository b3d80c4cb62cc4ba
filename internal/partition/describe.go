package partition

import (
	"fmt"
	"sort"
	"strings"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/protocol"
)

// This file renders the core's outputs as short, stable text for scripted
// tests and debugging: one line per effect, in the order the core produced
// them, with versions as epoch.count (the epoch is bumped by a restore).

// DescribeReady renders every part of a Ready: invocations, the commit,
// failures and replies.
func DescribeReady(rd Ready) string {
	var b strings.Builder
	for _, inv := range rd.Invocations {
		b.WriteString(DescribeInvocation(inv))
	}
	if rd.Commit != nil {
		b.WriteString(DescribeCommit(rd.Commit))
	}
	for _, f := range rd.Failures {
		kind := "call failed"
		if f.Violation {
			kind = "violation"
		}
		if f.Paused {
			fmt.Fprintf(&b, "failure %s attempt=%d %s, paused: %v\n", f.Addr, f.Attempt, kind, f.Err)
			continue
		}
		fmt.Fprintf(&b, "failure %s attempt=%d %s, retry at %d: %v\n", f.Addr, f.Attempt, kind, f.RetryAt, f.Err)
	}
	for _, r := range rd.Replies {
		b.WriteString(describeReply(r))
	}
	return b.String()
}

// DescribeInvocation renders a request: its address, attempt, the states
// it carries and its messages.
func DescribeInvocation(inv Invocation) string {
	var b strings.Builder
	req := inv.Body.GetInvocation()
	fmt.Fprintf(&b, "invoke %s request=%d attempt=%d\n", inv.Addr, inv.Request, inv.Attempt)
	for _, s := range req.GetState() {
		if s.GetStateValue() == nil {
			fmt.Fprintf(&b, "  state %s absent\n", s.GetStateName())
		} else {
			fmt.Fprintf(&b, "  state %s = %s\n", s.GetStateName(), DescribeValue(s.GetStateValue()))
		}
	}
	for _, m := range req.GetInvocations() {
		fmt.Fprintf(&b, "  message %s from %s\n", DescribeValue(m.GetArgument()), describeCaller(m.GetCaller()))
	}
	return b.String()
}

// DescribeCommit renders a commit in the order the committer applies it.
func DescribeCommit(c *Commit) string {
	var b strings.Builder
	fmt.Fprintf(&b, "commit %d versions=%s\n", c.ID, describeVersion(c.VersionSeq))
	for _, p := range c.Produced {
		handed := ""
		if p.Deliver {
			handed = " (handed over)"
		}
		fmt.Fprintf(&b, "  produce %s -> %s from %s: %s%s\n", describeKey(p.Key), describeAddr(p.Env.GetTarget()), describeCaller(p.Env.GetCaller()), DescribeValue(p.Env.GetArgument()), handed)
	}
	for _, t := range c.TimersAdded {
		tok := ""
		if t.Env.GetCancellationToken() != "" {
			tok = " token=" + t.Env.GetCancellationToken()
		}
		fmt.Fprintf(&b, "  timer+ due=%d id=%d -> %s%s: %s\n", t.Key.Due, t.Key.ID, describeAddr(t.Env.GetTarget()), tok, DescribeValue(t.Env.GetArgument()))
	}
	for _, w := range c.State {
		if w.Delete {
			fmt.Fprintf(&b, "  delete %s %s\n", w.Addr, w.State)
			continue
		}
		fmt.Fprintf(&b, "  write %s %s = %s\n", w.Addr, w.State, DescribeEntry(w.Entry))
	}
	types := make([]address.TypeName, 0, len(c.Specs))
	for t := range c.Specs {
		types = append(types, t)
	}
	sort.Slice(types, func(i, j int) bool { return types[i].String() < types[j].String() })
	for _, t := range types {
		fmt.Fprintf(&b, "  specs %s:", t)
		for _, s := range c.Specs[t] {
			fmt.Fprintf(&b, " %s", DescribeSpec(s))
		}
		b.WriteString("\n")
	}
	for _, k := range c.Consumed {
		fmt.Fprintf(&b, "  consume %s\n", describeKey(k))
	}
	for _, r := range c.TimersRemoved {
		fmt.Fprintf(&b, "  timer- due=%d id=%d\n", r.Key.Due, r.Key.ID)
	}
	for _, e := range c.Egress {
		fmt.Fprintf(&b, "  egress %s route=%s: %s\n", e.Egress, e.Route, DescribeValue(e.Record.GetArgument()))
	}
	for _, r := range c.Receipts {
		fmt.Fprintf(&b, "  receipt %s\n", describeReceipt(r))
	}
	for _, a := range c.Audit {
		if a.Op == OpPause || a.Op == OpResume {
			fmt.Fprintf(&b, "  audit %s %s %s by %s: %s\n", a.Mutation, describePauseTarget(a.Addr), describeOp(a.Op), a.Principal, a.Reason)
			continue
		}
		if a.State == "" && a.Op >= OpSkipMessage {
			b.WriteString(describeRepairAudit(a))
			continue
		}
		before := "absent"
		if a.Before != nil {
			before = DescribeEntry(*a.Before)
		}
		fmt.Fprintf(&b, "  audit %s %s %s before %s\n", a.Mutation, a.Addr, a.State, before)
	}
	for _, d := range c.DeadLetters {
		fmt.Fprintf(&b, "  dead-letter %s %s attempts=%d error=%q: %s\n", d.ID, describeKey(d.Key), d.Attempts, d.LastError, DescribeValue(d.Env.GetArgument()))
	}
	for _, p := range c.Rewritten {
		fmt.Fprintf(&b, "  rewrite %s -> %s: %s\n", describeKey(p.Key), describeAddr(p.Env.GetTarget()), DescribeValue(p.Env.GetArgument()))
	}
	for _, p := range c.Pauses {
		if p.Pause == nil {
			fmt.Fprintf(&b, "  unpause %s\n", describePauseTarget(p.Addr))
			continue
		}
		fmt.Fprintf(&b, "  pause %s %s\n", describePauseTarget(p.Addr), describePause(*p.Pause))
	}
	return b.String()
}

func describeOp(op MutationOp) string {
	if op == OpPause {
		return "pause"
	}
	return "resume"
}

// describePauseTarget renders an address, or "type ns/name" for a
// type-level pause.
func describePauseTarget(a address.Address) string {
	if a.ID == "" {
		return "type " + a.Type.String()
	}
	return a.String()
}

func describePause(p Pause) string {
	s := fmt.Sprintf("%s by %s since=%d", p.Mutation, p.Principal, p.Since)
	if p.ExpiresAt != 0 {
		s += fmt.Sprintf(" expires=%d", p.ExpiresAt)
	}
	if p.Auto {
		s += " auto"
	}
	return s + ": " + p.Reason
}

// describeInspection renders the answer of an Inspect.
func describeInspection(b *strings.Builder, in *Inspection) {
	for _, f := range in.Failing {
		fmt.Fprintf(b, "  failing %s since=%d attempts=%d retry=%d messages=%d queued=%d paused=%t violation=%t: %s\n",
			f.Addr, f.Since, f.Attempts, f.RetryAt, f.Messages, f.Queued, f.Paused, f.Violation, f.LastError)
	}
	for _, p := range in.Pauses {
		fmt.Fprintf(b, "  paused %s %s\n", describePauseTarget(p.Addr), describePause(*p.Pause))
	}
	if in.Queued != nil {
		types := make([]address.TypeName, 0, len(in.Queued))
		for t := range in.Queued {
			types = append(types, t)
		}
		sort.Slice(types, func(i, j int) bool { return types[i].String() < types[j].String() })
		b.WriteString("  queued")
		for _, t := range types {
			fmt.Fprintf(b, " %s=%d", t, in.Queued[t])
		}
		b.WriteString("\n")
	}
	if ib := in.Inbox; ib != nil {
		fmt.Fprintf(b, "  inbox %s\n", ib.Addr)
		if ib.Pause != nil {
			fmt.Fprintf(b, "    paused %s\n", describePause(*ib.Pause))
		}
		if ib.TypePause != nil {
			fmt.Fprintf(b, "    type paused %s\n", describePause(*ib.TypePause))
		}
		if f := ib.Inflight; f != nil {
			fmt.Fprintf(b, "    inflight attempt=%d waiting=%t since=%d retry=%d violation=%t error=%q\n", f.Attempt, f.Waiting, f.Since, f.RetryAt, f.Violation, f.LastError)
			for _, m := range f.Messages {
				fmt.Fprintf(b, "      %s\n", describeInboxMessage(m))
			}
		}
		for _, m := range ib.Queued {
			fmt.Fprintf(b, "    queued %s\n", describeInboxMessage(m))
		}
		for _, d := range ib.Delayed {
			from := "ingress"
			if d.Sender != nil {
				from = d.Sender.String()
			}
			fmt.Fprintf(b, "    delayed due=%d id=%d from %s token=%q %s size=%d\n", d.Key.Due, d.Key.ID, from, d.Token, d.Typename, d.Size)
		}
	}
}

func describeInboxMessage(m InboxMessage) string {
	if m.Mutation != "" {
		return fmt.Sprintf("%s mutation %s at=%d", describeKey(m.Key), m.Mutation, m.ArrivedAt)
	}
	from := "ingress"
	if m.Caller != nil {
		from = m.Caller.String()
	}
	return fmt.Sprintf("%s %s size=%d from %s at=%d", describeKey(m.Key), m.Typename, m.Size, from, m.ArrivedAt)
}

// DescribeEntry renders a state entry: value, version and expiry.
func DescribeEntry(e Entry) string {
	s := fmt.Sprintf("%s:%q v=%s", e.Typename, e.Value, describeVersion(e.Version))
	if e.ExpiresAt != 0 {
		s += fmt.Sprintf(" expires=%d", e.ExpiresAt)
	}
	return s
}

// DescribeValue renders a typed value as typename:"bytes".
func DescribeValue(v *protocol.TypedValue) string {
	if v == nil {
		return "<nil>"
	}
	return fmt.Sprintf("%s:%q", v.GetTypename(), v.GetValue())
}

// DescribeSpec renders a registered state: name(typename[, ttl]).
func DescribeSpec(s Spec) string {
	switch s.Mode {
	case ExpireAfterWrite:
		return fmt.Sprintf("%s(%s, after-write %d)", s.Name, s.Typename, s.TTL)
	case ExpireAfterInvoke:
		return fmt.Sprintf("%s(%s, after-invoke %d)", s.Name, s.Typename, s.TTL)
	}
	return fmt.Sprintf("%s(%s)", s.Name, s.Typename)
}

func describeReply(r Reply) string {
	var b strings.Builder
	fmt.Fprintf(&b, "reply %d", r.Request)
	if r.Receipt != nil {
		fmt.Fprintf(&b, " receipt %s", describeReceipt(*r.Receipt))
	}
	if r.Err != nil {
		fmt.Fprintf(&b, " error %v", r.Err)
	}
	b.WriteString("\n")
	if r.Inspection != nil {
		describeInspection(&b, r.Inspection)
	}
	for _, e := range r.Entries {
		fmt.Fprintf(&b, "  %s = %s\n", e.State, DescribeEntry(e.Entry))
	}
	return b.String()
}

func describeReceipt(r Receipt) string {
	outcome := "applied"
	switch r.Reject {
	case RejectPrecondition:
		outcome = "rejected (precondition)"
	case RejectTypeConflict:
		outcome = "rejected (type conflict)"
	case RejectNoTypename:
		outcome = "rejected (no typename)"
	case RejectNotFound:
		outcome = "rejected (not found)"
	case RejectConflict:
		outcome = "rejected (conflict)"
	}
	return fmt.Sprintf("%s %s %s checkpoint=%d version=%s", r.Mutation, r.Addr, outcome, r.Checkpoint, describeVersion(r.Version))
}

func describeVersion(v uint64) string {
	return fmt.Sprintf("%d.%d", v/versionEpoch, v%versionEpoch)
}

func describeKey(k InboxKey) string {
	src := fmt.Sprint(k.Source)
	switch k.Source {
	case SourceIngress:
		src = "ingress"
	case SourceMessages:
		src = "messages"
	}
	return fmt.Sprintf("p%d/%s/%d", k.Partition, src, k.Seq)
}

func describeAddr(a *protocol.Address) string { return toAddress(a).String() }

func describeCaller(a *protocol.Address) string {
	if a == nil {
		return "ingress"
	}
	return describeAddr(a)
}
