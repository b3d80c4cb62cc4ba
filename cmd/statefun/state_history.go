package main

import (
	"encoding/base64"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/statefun-go/statefun/pkg/stateclient"
)

// historyCmd prints the committed changes of one entry.
func (c *stateCLI) historyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "history [--oldest] [--limit N] [-o table|json] <namespace>/<type> <id> <state>",
		Short: "Every committed change of an entry, with its cause",
		Long: `Prints every committed change of the entry that retention kept, newest first:
its commit, time, version, value (or deletion) and cause — the messages of the
invocation that wrote it (typename and caller) or the operator's mutation. A
commit is what "statefun state restore --as-of" takes.`,
	}
	var (
		oldest bool
		limit  int
		output string
	)
	fs := cmd.Flags()
	fs.BoolVar(&oldest, "oldest", false, "oldest first")
	fs.IntVar(&limit, "limit", 100, "at most this many changes (-1: all)")
	outputVarP(fs, &output, "table", "table", "json")
	return c.stateCommand(cmd, func(_ *cobra.Command, pos []string) error { return c.history(pos, oldest, &limit, &output) })
}

func (c *stateCLI) history(pos []string, oldestFirst bool, limit *int, output *string) error {
	oldest := &oldestFirst
	a, state, err := entryArgs(pos)
	if err != nil {
		return err
	}
	if *limit == 0 || *limit < -1 {
		return usagef("--limit %d: want a positive count, or -1 for all", *limit)
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	recs := []stateclient.HistoryRecord{}
	after := ""
	for *limit < 0 || len(recs) < *limit {
		page := 1000
		if *limit > 0 {
			page = min(page, *limit-len(recs))
		}
		p, err := cl.History(c.ctx(), a, state, stateclient.HistoryOptions{OldestFirst: *oldest, After: after, Limit: page})
		if err != nil {
			return err
		}
		recs = append(recs, p.Records...)
		if p.Next == "" {
			break
		}
		after = p.Next
	}
	if *output == "json" {
		return writeJSON(c.stdout, recs)
	}
	tw := newTable(c.stdout)
	fmt.Fprintln(tw, "COMMIT\tAT\tVERSION\tVALUE\tCAUSE")
	for _, r := range recs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Position, formatTime(r.At), orDash(r.Version), historyValue(r), describeCause(r))
	}
	return tw.Flush()
}

// historyValue is a record's value on one line: its JSON form, else its
// bytes as text when they are UTF-8, else base64.
func historyValue(r stateclient.HistoryRecord) string {
	switch {
	case r.Deleted:
		return "(deleted)"
	case len(r.Value) > 0:
		return oneLine(string(r.Value))
	}
	b, err := base64.StdEncoding.DecodeString(r.ValueBase64)
	if err == nil && utf8.Valid(b) {
		return oneLine(fmt.Sprintf("%q", b))
	}
	return "base64:" + r.ValueBase64
}

func describeCause(r stateclient.HistoryRecord) string {
	c := r.Cause
	var s string
	switch c.Kind {
	case "invocation":
		var ms []string
		for _, m := range c.Messages {
			from := "ingress"
			if m.Caller != nil {
				from = m.Caller.Namespace + "/" + m.Caller.Type + " " + shellQuote(m.Caller.ID)
			}
			ms = append(ms, m.Typename+" from "+from)
		}
		s = fmt.Sprintf("invocation of %d message(s): %s", c.MessageCount, strings.Join(ms, ", "))
		if len(c.Messages) < c.MessageCount {
			s += ", …"
		}
	case "mutation":
		s = fmt.Sprintf("mutation %s by %s", c.Mutation, c.Principal)
		if c.Reason != "" {
			s += ": " + oneLine(c.Reason)
		}
	default:
		s = c.Kind
	}
	if r.Truncated {
		s += " (older changes removed by retention)"
	}
	return s
}

// restoreCmd sets an address or one entry back to a point in time.
func (c *stateCLI) restoreCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "restore (--as-of COMMIT | --as-of-time TIME) [--yes] [--reason R] [--ack A] [-q] <namespace>/<type> <id> [<state>]",
		Short: "Set an instance (or one entry) back to a point in time",
		Long: `Sets the instance (or one entry) back to what it held at a commit (from
"statefun state history" or a receipt) or a time (RFC 3339, or like --since of
audit: 10m, 2h ago), as one mutation in the instance's mailbox order. Entries
created since are deleted (the whole instance); unchanged ones are left alone.
It asks for confirmation on a terminal; without one it needs --yes. Prints the
receipt; "statefun state revert <mutation>" undoes it.`,
	}
	var (
		m              mutationFlags
		asOf, asOfTime string
		yes            bool
	)
	fs := cmd.Flags()
	fs.StringVar(&asOf, "as-of", "", "a commit id (or a receipt's <partition>.<commit>)")
	fs.StringVar(&asOfTime, "as-of-time", "", "a time: RFC 3339, or a duration ago (10m)")
	yesFlag(fs, &yes, "restore")
	m.register(fs)
	return c.stateCommand(cmd, func(_ *cobra.Command, pos []string) error { return c.restore(pos, &m, &asOf, &asOfTime, yes) })
}

func (c *stateCLI) restore(pos []string, m *mutationFlags, asOf, asOfTime *string, yes bool) error {
	var (
		a   stateclient.Address
		err error
	)
	state := ""
	switch len(pos) {
	case 2:
		a, err = addressArgs(pos[0], pos[1])
	case 3:
		a, state, err = entryArgs(pos)
	default:
		return usagef("want <namespace>/<type> <id> [<state>], got %d argument(s)", len(pos))
	}
	if err != nil {
		return err
	}
	var p stateclient.Point
	switch {
	case (*asOf == "") == (*asOfTime == ""):
		return usagef("give one of --as-of and --as-of-time")
	case *asOf != "":
		p.Commit = *asOf
	default:
		t, err := parseWhen(*asOfTime, time.Now())
		if err != nil {
			return usagef("--as-of-time: %v", err)
		}
		p.Time = t
	}
	ack, err := m.ackMode()
	if err != nil {
		return err
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	what, when := "every entry of "+describeAddress(a), "commit "+p.Commit
	if state != "" {
		what = describeEntry(a, state)
	}
	if p.Commit == "" {
		when = formatTime(p.Time)
	}
	if err := c.confirmDestructive(yes, fmt.Sprintf("Set %s back to what it held at %s?", what, when)); err != nil {
		return err
	}
	rc, err := cl.Restore(c.ctx(), a, state, p, stateclient.RestoreOptions{Ack: ack, Reason: m.reason})
	if err != nil {
		return err
	}
	return c.printReceipts(m, *rc)
}
