package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/statefun-go/statefun/pkg/stateclient"
)

// The repair commands of `statefun state`: failing, inbox, pauses, pause
// and resume (docs/how-to/repair.md).

// target reads "<ns>/<type> [<id>]": an address, or a whole type (ID "")
// when typeOK.
func target(pos []string, typeOK bool) (stateclient.Address, error) {
	want := "<namespace>/<type> <id>"
	if typeOK {
		want = "<namespace>/<type> [<id>]"
	}
	if len(pos) < 1 || len(pos) > 2 || (!typeOK && len(pos) != 2) {
		return stateclient.Address{}, usagef("want %s", want)
	}
	t, err := stateclient.ParseTypeName(pos[0])
	if err != nil {
		return stateclient.Address{}, usagef("%q is not a function type <namespace>/<type>", pos[0])
	}
	a := stateclient.Address{Namespace: t.Namespace, Type: t.Type}
	if len(pos) == 2 {
		if pos[1] == "" {
			return a, usagef("the id is empty")
		}
		a.ID = pos[1]
	}
	return a, nil
}

// failingCmd prints the addresses whose batch is failing.
func (c *stateCLI) failingCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "failing [-o table|json] [<namespace>/<type>]",
		Short: "Addresses whose batch keeps failing",
		Long: `Lists every address whose batch failed and has not succeeded yet: retrying, or
held by a pause. Every page is fetched.`,
	}
	var output string
	outputVarP(cmd.Flags(), &output, "table", "table", "json")
	return c.stateCommand(cmd, func(_ *cobra.Command, pos []string) error { return c.failing(pos, output) })
}

func (c *stateCLI) failing(pos []string, output string) error {
	var (
		t   stateclient.TypeName
		err error
	)
	if len(pos) > 1 {
		return usagef("want at most one <namespace>/<type>")
	}
	if len(pos) == 1 {
		if t, err = stateclient.ParseTypeName(pos[0]); err != nil {
			return usagef("%q is not a function type <namespace>/<type>", pos[0])
		}
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	list := []stateclient.Failing{}
	after := ""
	for {
		p, err := cl.Failing(c.ctx(), t, after, 1000)
		if err != nil {
			return err
		}
		list = append(list, p.Failing...)
		if after = p.Next; after == "" {
			break
		}
	}
	if output == "json" {
		return writeJSON(c.stdout, list)
	}
	tw := newTable(c.stdout)
	fmt.Fprintln(tw, "ADDRESS\tSINCE\tATTEMPTS\tNEXT\tQUEUED\tLAST ERROR")
	for _, f := range list {
		next := "-"
		switch {
		case f.Paused:
			next = "paused"
		case f.NextAttempt != nil:
			next = formatTime(*f.NextAttempt)
		}
		fmt.Fprintf(tw, "%s/%s %s\t%s\t%d\t%s\t%d\t%s\n", f.Namespace, f.Type, shellQuote(f.ID),
			formatTime(f.Since), f.Attempts, next, f.Messages+f.Queued, oneLine(f.LastError))
	}
	return tw.Flush()
}

// inboxCmd prints what the runtime holds for one address.
func (c *stateCLI) inboxCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "inbox [--limit N] [-o table|json] <namespace>/<type> <id>",
		Short: "What an address holds: failing batch, queue, timers",
		Long: `Shows the address's pauses, the batch in flight or failing (at the head of its
inbox), its queued messages and its pending delayed messages, with the keys and
timers skip, edit-message and cancel take.`,
	}
	var (
		limit  int
		output string
	)
	cmd.Flags().IntVar(&limit, "limit", 0, "list at most this many queued messages (1 to 1000; all are counted)")
	outputVarP(cmd.Flags(), &output, "table", "table", "json")
	return c.stateCommand(cmd, func(_ *cobra.Command, pos []string) error { return c.inbox(pos, limit, output) })
}

func (c *stateCLI) inbox(pos []string, limit int, output string) error {
	a, err := target(pos, false)
	if err != nil {
		return err
	}
	if limit < 0 || limit > 1000 {
		return usagef("--limit %d: want 1 to 1000", limit)
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	in, err := cl.Inbox(c.ctx(), a, limit)
	if err != nil {
		return err
	}
	if output == "json" {
		return writeJSON(c.stdout, in)
	}
	return writeInbox(c.stdout, in)
}

// pausesCmd prints the pauses in force.
func (c *stateCLI) pausesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pauses [-o table|json] [<namespace>/<type>]",
		Short: "The pauses in force",
		Long:  "Lists the pauses in force (of one function type): what, since when, until when, by whom and why.",
	}
	var output string
	outputVarP(cmd.Flags(), &output, "table", "table", "json")
	return c.stateCommand(cmd, func(_ *cobra.Command, pos []string) error { return c.pauses(pos, output) })
}

func (c *stateCLI) pauses(pos []string, output string) error {
	var (
		t   stateclient.TypeName
		err error
	)
	if len(pos) > 1 {
		return usagef("want at most one <namespace>/<type>")
	}
	if len(pos) == 1 {
		if t, err = stateclient.ParseTypeName(pos[0]); err != nil {
			return usagef("%q is not a function type <namespace>/<type>", pos[0])
		}
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	list, err := cl.Pauses(c.ctx(), t)
	if err != nil {
		return err
	}
	if output == "json" {
		return writeJSON(c.stdout, list)
	}
	tw := newTable(c.stdout)
	fmt.Fprintln(tw, "PAUSED\tSINCE\tEXPIRES\tBY\tMUTATION\tREASON")
	for _, p := range list {
		what := p.Namespace + "/" + p.Type + " (every address)"
		if p.ID != nil {
			what = p.Namespace + "/" + p.Type + " " + shellQuote(*p.ID)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", what, formatTime(p.Since), formatTimePtr(p.ExpiresAt),
			p.Principal, p.Mutation, oneLine(p.Reason))
	}
	return tw.Flush()
}

// pauseCmd pauses an address or every address of a type.
func (c *stateCLI) pauseCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pause [--reason R] [--for D | --until T] <namespace>/<type> [<id>]",
		Short: "Hold an address (no id: every address of the type)",
		Long: `Pauses an address; without an id, every address of the type. Nothing of it is
invoked until it is resumed; its messages keep arriving, state reads and writes
apply at once. Prints the receipt once the pause is durable.`,
	}
	var (
		reason, until, mutationID string
		dur                       time.Duration
		m                         mutationFlags
	)
	fs := cmd.Flags()
	fs.StringVar(&reason, "reason", "", "why, recorded in the audit log")
	fs.DurationVar(&dur, "for", 0, "lift the pause by itself after this long (e.g. 30m)")
	fs.StringVar(&until, "until", "", "lift the pause by itself at this time (RFC 3339)")
	fs.StringVar(&mutationID, "mutation-id", "", "cluster mode, a whole type: complete the earlier pause answered 503 with this mutation id")
	m.registerOutput(fs)
	return c.stateCommand(cmd, func(_ *cobra.Command, pos []string) error {
		return c.pause(pos, &m, reason, until, mutationID, dur)
	})
}

func (c *stateCLI) pause(pos []string, m *mutationFlags, reason, until, mutationID string, dur time.Duration) error {
	a, err := target(pos, true)
	if err != nil {
		return err
	}
	o := stateclient.PauseOptions{Reason: reason, ExpiresIn: dur, MutationID: mutationID}
	switch {
	case dur < 0:
		return usagef("--for %s: want a positive duration", dur)
	case dur != 0 && until != "":
		return usagef("give --for or --until, not both")
	case until != "":
		if o.ExpiresAt, err = time.Parse(time.RFC3339Nano, until); err != nil {
			return usagef("--until %q: want an RFC 3339 time", until)
		}
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	rc, err := cl.Pause(c.ctx(), a, o)
	if err != nil {
		return partialHint(err, "pause")
	}
	return c.printReceipts(m, *rc)
}

// resumeCmd lifts a pause.
func (c *stateCLI) resumeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "resume [--reason R] <namespace>/<type> [<id>]",
		Short: "Release a pause: retry the failed batch, then the queue",
		Long: `Lifts the address's pause (without an id: the type's). A failed batch is retried
at once, then the queued messages go out in arrival order. Exit status 1 when it
was not paused.`,
	}
	var (
		reason, mutationID string
		m                  mutationFlags
	)
	fs := cmd.Flags()
	fs.StringVar(&reason, "reason", "", "why, recorded in the audit log")
	fs.StringVar(&mutationID, "mutation-id", "", "cluster mode, a whole type: complete the earlier resume answered 503 with this mutation id")
	m.registerOutput(fs)
	return c.stateCommand(cmd, func(_ *cobra.Command, pos []string) error { return c.resume(pos, &m, reason, mutationID) })
}

func (c *stateCLI) resume(pos []string, m *mutationFlags, reason, mutationID string) error {
	a, err := target(pos, true)
	if err != nil {
		return err
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	rc, err := cl.ResumeWith(c.ctx(), a, stateclient.ResumeOptions{Reason: reason, MutationID: mutationID})
	if err != nil {
		return partialHint(err, "resume")
	}
	return c.printReceipts(m, *rc)
}

// partialHint adds to the error of a type-level pause or resume that some
// partitions could not be given (cluster mode) the command that completes
// it.
func partialHint(err error, cmd string) error {
	var p *stateclient.ProblemError
	if !errors.As(err, &p) || p.Mutation == "" {
		return err
	}
	return withHint(err, fmt.Sprintf("the %s may be partially applied (partitions %v do not have it yet); complete it: run the same command again with --mutation-id %s",
		cmd, p.MissingPartitions, p.Mutation))
}
