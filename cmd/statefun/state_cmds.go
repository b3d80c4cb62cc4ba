package main

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/statefun-go/statefun/pkg/stateclient"
)

// getCmd prints one value.
func (c *stateCLI) getCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "get [-o auto|text|raw|json|table] <namespace>/<type> <id> <state>",
		Short: "Print a value",
		Long: `Prints one entry's value. auto (the default) prints the value as text when it has
a text form (the built-in scalar types, JSON), else its exact bytes; text requires
a text form; raw prints the exact stored bytes (the SDK's encoding); json prints
the envelope with typename, version, expiry, value and valueBase64; table the
entry's type, version, expiry and value on one row. Text is printed as stored; a
newline is added only when stdout is a terminal. A value that is not there is
exit status 1.`,
	}
	var output string
	outputVarP(cmd.Flags(), &output, "auto", "auto", "text", "raw", "json", "table")
	return c.stateCommand(cmd, func(_ *cobra.Command, pos []string) error { return c.get(pos, output) })
}

func (c *stateCLI) get(pos []string, output string) error {
	a, state, err := entryArgs(pos)
	if err != nil {
		return err
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	var accept string
	switch output {
	case "auto":
		accept = "text/plain, application/octet-stream;q=0.5"
	case "text":
		accept = "text/plain"
	case "raw":
		accept = "application/octet-stream"
	case "json", "table":
		env, err := cl.GetEnvelope(c.ctx(), a, state)
		if err != nil {
			return err
		}
		if output == "json" {
			return writeJSON(c.stdout, env)
		}
		tw := newTable(c.stdout)
		fmt.Fprintln(tw, "STATE\tTYPE\tVERSION\tEXPIRES\tVALUE")
		value := "base64:" + env.ValueBase64
		if env.Value != nil {
			value = oneLine(string(env.Value))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", shellQuote(env.State), env.Typename, orDash(env.Version), formatTimePtr(env.ExpiresAt), value)
		return tw.Flush()
	}
	v, err := cl.Get(c.ctx(), a, state, accept)
	if err != nil {
		return err
	}
	if !v.IsText() {
		if output == "auto" && c.terminal(c.stdout) {
			return fmt.Errorf("%s is binary (%s, %d bytes) and stdout is a terminal: use -o raw to write the bytes, or -o json for the envelope with valueBase64",
				describeEntry(a, state), v.Typename, len(v.Bytes))
		}
		_, err = c.stdout.Write(v.Bytes)
		return err
	}
	out := v.Bytes
	if c.terminal(c.stdout) && !bytes.HasSuffix(out, []byte("\n")) {
		out = append(out, '\n')
	}
	_, err = c.stdout.Write(out)
	return err
}

// mutationFlags are the flags every mutating command shares.
type mutationFlags struct {
	ack    string
	reason string
	quiet  bool
	output string
}

func (m *mutationFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&m.reason, "reason", "", "why, recorded in the audit log")
	fs.StringVar(&m.ack, "ack", "", "answer when the mutation is committed (default), applied or accepted")
	m.registerOutput(fs)
}

// registerOutput registers -q and -o of a command that prints a receipt.
func (m *mutationFlags) registerOutput(fs *pflag.FlagSet) {
	fs.BoolVarP(&m.quiet, "quiet", "q", false, "print nothing on success (not the receipt)")
	outputVarP(fs, &m.output, "table", "table", "json")
}

func (m *mutationFlags) ackMode() (stateclient.Ack, error) {
	switch m.ack {
	case "", "committed", "applied", "accepted":
		return stateclient.Ack(m.ack), nil
	}
	return "", usagef("--ack %q: want committed, applied or accepted", m.ack)
}

// putCmd sets one value.
func (c *stateCLI) putCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "put [flags] <namespace>/<type> <id> <state> <value>",
		Short: "Set a value; <value> \"-\" reads stdin",
		Long: `Sets one entry. <value> is text parsed into the state's type (--format text, the
default): 42, true, 3.5, any text for a string, JSON for a JSON type. "-" reads
the value from stdin, taken as is (a string keeps a trailing newline). --format
raw takes the exact bytes to store; --format json the envelope of "get -o json".
The type is --type, else the one the function registered, else the existing
value's. Prints the receipt.`,
		Annotations: map[string]string{synopsisAnnotation: "put [flags] <namespace>/<type> <id> <state> <value>\nput [flags] <namespace>/<type> <id> <state> - < file"},
	}
	var (
		m           mutationFlags
		format      string
		typename    string
		ifMatch     string
		ifNoneMatch bool
	)
	fs := cmd.Flags()
	choiceVarP(fs, &format, "format", "", "text", []string{"text", "raw", "json"}, "what <value> is: text, raw (exact bytes) or json (the envelope)")
	fs.StringVar(&typename, "type", "", "store the value as this typename, e.g. io.statefun.types/long")
	fs.StringVar(&ifMatch, "if-match", "", "write only if the entry's version is this (from get -o json or a receipt)")
	fs.BoolVar(&ifNoneMatch, "if-none-match", false, "write only if the entry has no value (create)")
	m.register(fs)
	return c.stateCommand(cmd, func(_ *cobra.Command, pos []string) error {
		return c.put(pos, &m, format, stateclient.PutOptions{Typename: typename, IfMatch: ifMatch, IfNoneMatch: ifNoneMatch})
	})
}

func (c *stateCLI) put(pos []string, m *mutationFlags, format string, opts stateclient.PutOptions) error {
	if len(pos) != 4 {
		if len(pos) > 0 {
			if _, err := typeArg(pos[0]); err != nil {
				return err
			}
		}
		return usagef("want <namespace>/<type> <id> <state> <value>, got %d argument(s) (\"-\" reads the value from stdin)", len(pos))
	}
	a, state, err := entryArgs(pos[:3])
	if err != nil {
		return err
	}
	contentType := map[string]string{"text": "text/plain; charset=utf-8", "raw": "application/octet-stream", "json": "application/json"}[format]
	ack, err := m.ackMode()
	if err != nil {
		return err
	}
	body := []byte(pos[3])
	if pos[3] == "-" {
		if body, err = io.ReadAll(c.stdin); err != nil {
			return fmt.Errorf("reading stdin: %w", err)
		}
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	opts.Ack, opts.Reason = ack, m.reason
	rc, err := cl.Put(c.ctx(), a, state, body, contentType, opts)
	if err != nil {
		return err
	}
	return c.printReceipts(m, *rc)
}

// deleteCmd drops one entry or, with --all, every entry of an instance.
func (c *stateCLI) deleteCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "delete [flags] <namespace>/<type> <id> <state>",
		Short: "Drop one entry, or with --all every entry of an instance",
		Long: `Drops one entry, or with --all every entry of the instance (as one mutation;
"statefun state revert" puts them back). --all asks for confirmation on a
terminal and needs --yes without one. Prints the receipt. An entry without a
value is exit status 1.`,
		Annotations: map[string]string{synopsisAnnotation: "delete [flags] <namespace>/<type> <id> <state>\ndelete --all [--yes] [flags] <namespace>/<type> <id>"},
	}
	var (
		m       mutationFlags
		all     bool
		yes     bool
		ifMatch string
	)
	fs := cmd.Flags()
	fs.BoolVar(&all, "all", false, "drop every entry of the instance")
	yesFlag(fs, &yes, "with --all, drop them")
	fs.StringVar(&ifMatch, "if-match", "", "delete only if the entry's version is this (not with --all)")
	m.register(fs)
	return c.stateCommand(cmd, func(_ *cobra.Command, pos []string) error { return c.delete(pos, &m, all, yes, ifMatch) })
}

func (c *stateCLI) delete(pos []string, m *mutationFlags, all, yes bool, ifMatch string) error {
	ack, err := m.ackMode()
	if err != nil {
		return err
	}
	opts := stateclient.DeleteOptions{IfMatch: ifMatch, Ack: ack, Reason: m.reason}
	if all {
		if len(pos) != 2 {
			return usagef("--all: want <namespace>/<type> <id>, got %d argument(s)", len(pos))
		}
		if ifMatch != "" {
			return usagef("--if-match applies to one entry, not --all")
		}
		a, err := addressArgs(pos[0], pos[1])
		if err != nil {
			return err
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		if err := c.confirmDestructive(yes, fmt.Sprintf("Delete every entry of %s?", describeAddress(a))); err != nil {
			return err
		}
		rc, err := cl.DeleteAddress(c.ctx(), a, opts)
		if err != nil {
			return err
		}
		return c.printReceipts(m, *rc)
	}
	if len(pos) == 2 {
		return usagef("want <namespace>/<type> <id> <state>; to drop every entry of the instance, add --all")
	}
	a, state, err := entryArgs(pos)
	if err != nil {
		return err
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	rc, err := cl.Delete(c.ctx(), a, state, opts)
	if err != nil {
		return err
	}
	return c.printReceipts(m, *rc)
}

// lsCmd lists types, ids or entries.
func (c *stateCLI) lsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ls [flags] [<namespace>[/<type>] [<id>]]",
		Short: "List function types, the ids of a type, or the entries of an instance",
		Long: `Lists the function types (of one namespace), the ids of a type that hold state,
or the entries of an instance. Types and ids print one per line (-o name, their
default), entries as a table (-o table, their default); -o json for scripts.
Ids are listed in order; without --limit every page is fetched. With --limit N
one page is printed and, when there are more, the --after of the next page is
printed on stderr. Listings of types and ids read the durable store.`,
		Annotations: map[string]string{synopsisAnnotation: `ls [-o name|table|json]                                 function types
ls [-o name|table|json] <namespace>                     the types of one namespace
ls [--prefix P] [--after A] [--limit N] [-0] [-o name|table|json] <namespace>/<type>   ids holding state
ls [-o table|name|json] <namespace>/<type> <id>         entries of an instance`},
	}
	var (
		output, prefix, after string
		limit                 int
		nul                   bool
	)
	fs := cmd.Flags()
	choiceVarP(fs, &output, "output", "o", "", []string{"name", "table", "json"}, "output: name (one per line), table or json; name by default, table for entries")
	fs.StringVar(&prefix, "prefix", "", "ids: only those starting with this")
	fs.StringVar(&after, "after", "", "ids: only those after this one (the cursor of a page)")
	fs.IntVar(&limit, "limit", 0, "ids: print one page of at most this many (1 to 10000)")
	fs.BoolVarP(&nul, "null", "0", false, "ids: end each id with a NUL byte instead of a newline (for xargs -0)")
	return c.stateCommand(cmd, func(_ *cobra.Command, pos []string) error {
		return c.ls(pos, output, prefix, after, limit, nul)
	})
}

func (c *stateCLI) ls(pos []string, output, prefix, after string, limit int, nul bool) error {
	if limit < 0 || limit > 10000 {
		return usagef("--limit %d: want 1 to 10000", limit)
	}
	idFlags := prefix != "" || after != "" || limit != 0 || nul
	cl, err := c.client()
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 0 || len(pos) == 1 && !strings.Contains(pos[0], "/"):
		if idFlags {
			return usagef("--prefix, --after, --limit and -0 apply to a listing of ids (ls <namespace>/<type>)")
		}
		ns := ""
		if len(pos) == 1 {
			ns = pos[0]
		}
		return c.lsTypes(cl, ns, output)
	case len(pos) == 1:
		t, err := typeArg(pos[0])
		if err != nil {
			return err
		}
		return c.lsIDs(cl, t, output, prefix, after, limit, nul)
	case len(pos) == 2:
		if idFlags {
			return usagef("--prefix, --after, --limit and -0 apply to a listing of ids (ls <namespace>/<type>)")
		}
		a, err := addressArgs(pos[0], pos[1])
		if err != nil {
			return err
		}
		return c.lsEntries(cl, a, output)
	}
	return usagef("want at most <namespace>/<type> <id>, got %d arguments", len(pos))
}

func (c *stateCLI) lsTypes(cl *stateclient.Client, ns, output string) error {
	ts, err := cl.ListTypes(c.ctx(), ns)
	if err != nil {
		return err
	}
	switch output {
	case "", "name":
		for _, t := range ts.Types {
			fmt.Fprintf(c.stdout, "%s/%s\n", t.Namespace, t.Type)
		}
		return nil
	case "table":
		tw := newTable(c.stdout)
		fmt.Fprintln(tw, "TYPE\tREGISTERED\tSTATES\tHOLDS STATE")
		for _, t := range ts.Types {
			fmt.Fprintf(tw, "%s/%s\t%s\t%d\t%s\n", t.Namespace, t.Type, yesNo(t.Registered), t.RegisteredStates, yesNo(t.HoldsState))
		}
		return tw.Flush()
	case "json":
		return writeJSON(c.stdout, ts)
	}
	return nil
}

func (c *stateCLI) lsIDs(cl *stateclient.Client, t stateclient.TypeName, output, prefix, after string, limit int, nul bool) error {
	// line is how one id is printed: as is (name), or shell-quoted under a
	// head (table), so that an id with a space or a newline reads as one.
	line := func(id string) string { return id + "\n" }
	switch {
	case nul && output == "table":
		return usagef("-0 ends each id with a NUL byte: it applies to -o name, not -o table")
	case nul:
		line = func(id string) string { return id + "\x00" }
	case output == "table":
		line = func(id string) string { return shellQuote(id) + "\n" }
		fmt.Fprintln(c.stdout, "ID")
	}
	page := &stateclient.IDPage{IDs: []string{}}
	if limit > 0 {
		p, err := cl.ListIDs(c.ctx(), t, prefix, after, limit)
		if err != nil {
			return err
		}
		page = p
	} else {
		for id, err := range cl.AllIDs(c.ctx(), t, prefix, after, 1000) {
			if err != nil {
				return err
			}
			if output == "json" {
				page.IDs = append(page.IDs, id)
				continue
			}
			if _, err := io.WriteString(c.stdout, line(id)); err != nil {
				return err
			}
		}
		if output != "json" {
			return nil
		}
	}
	if output == "json" {
		return writeJSON(c.stdout, page)
	}
	for _, id := range page.IDs {
		if _, err := io.WriteString(c.stdout, line(id)); err != nil {
			return err
		}
	}
	if page.Next != "" {
		fmt.Fprintf(c.stderr, "more ids: next page with --after %s\n", shellQuote(page.Next))
	}
	return nil
}

func (c *stateCLI) lsEntries(cl *stateclient.Client, a stateclient.Address, output string) error {
	es, err := cl.ListEntries(c.ctx(), a)
	if err != nil {
		return err
	}
	switch output {
	case "name":
		for _, e := range es.Entries {
			fmt.Fprintln(c.stdout, e.State)
		}
		return nil
	case "json":
		return writeJSON(c.stdout, es)
	}
	tw := newTable(c.stdout)
	fmt.Fprintln(tw, "STATE\tTYPE\tSIZE\tVERSION\tEXPIRES\tREGISTERED")
	seen := map[string]bool{}
	for _, e := range es.Entries {
		seen[e.State] = true
		exp := formatTimePtr(e.ExpiresAt)
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", shellQuote(e.State), e.Typename, e.Size, e.Version, exp, yesNo(e.Registered))
	}
	for _, s := range es.Registered {
		if !seen[s.State] {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\tyes (no value)\n", shellQuote(s.State), s.Typename)
		}
	}
	return tw.Flush()
}

// revertCmd undoes a mutation.
func (c *stateCLI) revertCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "revert [--reason R] [-q] <mutation-id>",
		Short: "Undo a mutation",
		Long: `Restores what the mutation overwrote or deleted, if the entry still holds the
version the mutation wrote; otherwise nothing is changed and the exit status is
1. Prints the receipts (one per entry the mutation changed).`,
	}
	var m mutationFlags
	cmd.Flags().StringVar(&m.reason, "reason", "", "why, recorded in the audit log (default \"revert of <id>\")")
	m.registerOutput(cmd.Flags())
	return c.stateCommand(cmd, func(_ *cobra.Command, pos []string) error { return c.revert(pos, &m) })
}

func (c *stateCLI) revert(pos []string, m *mutationFlags) error {
	if len(pos) != 1 || pos[0] == "" {
		return usagef("want one <mutation-id> (from a receipt or the audit log)")
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	rs, err := cl.Revert(c.ctx(), pos[0], m.reason)
	if err != nil {
		return err
	}
	return c.printReceipts(m, rs...)
}

// receiptCmd prints a mutation's receipt.
func (c *stateCLI) receiptCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "receipt [--wait D] [-o table|json] <mutation-id>",
		Short: "Print a mutation's receipt",
		Long: `Prints a mutation's receipt. With --wait, waits up to D for the receipt to be
final (committed or rejected). The exit status is 1 when the mutation was
rejected or failed.`,
	}
	var (
		wait time.Duration
		m    mutationFlags
	)
	cmd.Flags().DurationVar(&wait, "wait", 0, "wait up to this long for a final receipt (e.g. 10s)")
	outputVarP(cmd.Flags(), &m.output, "table", "table", "json")
	return c.stateCommand(cmd, func(_ *cobra.Command, pos []string) error { return c.receipt(pos, wait, &m) })
}

func (c *stateCLI) receipt(pos []string, wait time.Duration, m *mutationFlags) error {
	if len(pos) != 1 || pos[0] == "" {
		return usagef("want one <mutation-id>")
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	rc, err := cl.Receipt(c.ctx(), pos[0], wait)
	if err != nil {
		return err
	}
	if err := c.printReceipts(m, *rc); err != nil {
		return err
	}
	if rc.Status == "rejected" || rc.Status == "failed" {
		return fmt.Errorf("mutation %s was %s: %s", rc.Mutation, rc.Status, rc.Reason)
	}
	return nil
}

// auditCmd prints the audit log.
func (c *stateCLI) auditCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit [filters] [-o table|json]",
		Short: "Print the audit log",
		Long: `Prints the audit log, oldest first: who changed which entry, when, from which
version to which, what it held before and why. --since and --until take an RFC
3339 time or a duration back from now (1h). --type takes <type> or
<namespace>/<type>.`,
	}
	var (
		f            stateclient.AuditFilter
		since, until string
		output       string
	)
	fs := cmd.Flags()
	fs.StringVar(&f.Namespace, "namespace", "", "only this namespace")
	fs.StringVar(&f.Type, "type", "", "only this function type: <type> or <namespace>/<type>")
	fs.StringVar(&f.ID, "id", "", "only this id")
	fs.StringVar(&f.State, "state", "", "only this state name")
	fs.StringVar(&f.Principal, "principal", "", "only mutations by this principal (token name, or anonymous)")
	fs.StringVar(&f.Mutation, "mutation", "", "only this mutation")
	fs.StringVar(&since, "since", "", "only records at or after this time (RFC 3339, or a duration ago like 1h)")
	fs.StringVar(&until, "until", "", "only records at or before this time (RFC 3339, or a duration ago)")
	fs.IntVar(&f.Limit, "limit", 0, "at most this many records (default 1000 by the server)")
	outputVarP(fs, &output, "table", "table", "json")
	return c.stateCommand(cmd, func(_ *cobra.Command, pos []string) error { return c.audit(pos, f, since, until, output) })
}

func (c *stateCLI) audit(pos []string, f stateclient.AuditFilter, since, until, output string) error {
	if len(pos) > 0 {
		return usagef("unexpected argument %q: filters are flags (--namespace, --type, --id, --state, ...)", pos[0])
	}
	if ns, name, ok := strings.Cut(f.Type, "/"); ok {
		if f.Namespace != "" && f.Namespace != ns {
			return usagef("--type %s contradicts --namespace %s", f.Type, f.Namespace)
		}
		f.Namespace, f.Type = ns, name
	}
	if err := parseWindow(since, until, &f.Since, &f.Until); err != nil {
		return err
	}
	if f.Limit < 0 || f.Limit > 100000 {
		return usagef("--limit %d: want 1 to 100000", f.Limit)
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	recs, err := cl.Audit(c.ctx(), f)
	if err != nil {
		return err
	}
	if output == "json" {
		return writeJSON(c.stdout, recs)
	}
	tw := newTable(c.stdout)
	fmt.Fprintln(tw, "AT\tPRINCIPAL\tOP\tINSTANCE\tSTATE\tVERSION\tBEFORE\tMUTATION\tREASON")
	for _, r := range recs {
		state := shellQuote(r.State)
		if r.Op == "delete-all" && r.State == "" {
			state = "*"
		}
		before, was := "-", "-"
		if r.Before != nil {
			before, was = r.Before.Version, auditValue(r.Before)
		}
		after := r.Version
		if after == "" {
			after = "-"
		}
		reason := r.Reason
		if r.Reverts != "" && !strings.Contains(reason, r.Reverts) {
			reason = strings.TrimSpace(reason + " (reverts " + r.Reverts + ")")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s/%s %s\t%s\t%s→%s\t%s\t%s\t%s\n", formatTime(r.At),
			r.Principal, r.Op, r.Namespace, r.Type, shellQuote(r.ID), state, before, after, was, r.Mutation, oneLine(reason))
	}
	return tw.Flush()
}

// auditValue renders a before-image for the table: its JSON form, cut to
// 40 characters, or the size of bytes that have none.
func auditValue(img *stateclient.AuditImage) string {
	if len(img.JSON) == 0 {
		return fmt.Sprintf("<%d bytes %s>", len(img.Value), img.Typename)
	}
	s := oneLine(string(img.JSON))
	if r := []rune(s); len(r) > 40 {
		s = string(r[:39]) + "…"
	}
	return s
}

// parseWhen reads an RFC 3339 time, or a duration before now.
func parseWhen(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("not a time")
	}
	return now.Add(-d), nil
}

// deadLettersCmd prints the summary of every ingress's dead letters, or
// one ingress's dead letters.
func (c *stateCLI) deadLettersCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dead-letters [filters] [-o table|json] [<namespace>/<name>]",
		Short: "The dead letters of every Kafka ingress, counted, or of one ingress",
		Long: `Dead letters are the records a Kafka ingress consumed but could not deliver (a
null, empty, non-UTF-8 or too long key, a value too large, a topic without a
route), kept until retention removes them (--dead-letter-retention,
--dead-letter-max of run). They are listed in the order they were stored.
Without --limit every page is fetched; with --limit N one page is printed and,
when there are more, the --after of the next page is printed on stderr. The
table shows keys and values as text when they are UTF-8 (shortened); -o json
has their exact bytes (base64) and full text.`,
		Annotations: map[string]string{synopsisAnnotation: `dead-letters [-o table|json]                        every ingress holding dead letters, counted
dead-letters [filters] [-o table|json] <namespace>/<name>   one ingress's dead letters`},
	}
	var (
		f                           stateclient.DeadLetterFilter
		since, until, after, output string
		partition, limit            int
	)
	fs := cmd.Flags()
	fs.StringVar(&f.Topic, "topic", "", "only this Kafka topic")
	fs.IntVar(&partition, "partition", -1, "only this Kafka partition")
	fs.StringVar(&f.Reason, "reason", "", "only this reason (null-key, empty-key, invalid-utf8-key, key-too-long, value-too-large, no-route)")
	fs.StringVar(&since, "since", "", "only records stored at or after this time (RFC 3339, or a duration ago like 1h)")
	fs.StringVar(&until, "until", "", "only records stored at or before this time (RFC 3339, or a duration ago)")
	fs.StringVar(&after, "after", "", "only records after this cursor (the next of a page)")
	fs.IntVar(&limit, "limit", 0, "print one page of at most this many (1 to 1000)")
	outputVarP(fs, &output, "table", "table", "json")
	return c.stateCommand(cmd, func(cmd *cobra.Command, pos []string) error {
		return c.deadLetters(cmd.Flags(), pos, f, since, until, after, output, partition, limit)
	})
}

func (c *stateCLI) deadLetters(fs *pflag.FlagSet, pos []string, f stateclient.DeadLetterFilter, since, until, after, output string, partition, limit int) error {
	if len(pos) > 1 {
		return usagef("want at most one ingress <namespace>/<name>, got %d arguments", len(pos))
	}
	if len(pos) == 0 {
		if f.Topic != "" || partition != -1 || f.Reason != "" || since != "" || until != "" || after != "" || limit != 0 {
			return usagef("--topic, --partition, --reason, --since, --until, --after and --limit apply to one ingress's dead letters (dead-letters <namespace>/<name>)")
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		return c.deadLetterSummary(cl, output)
	}
	ingress, err := stateclient.ParseTypeName(pos[0])
	if err != nil {
		return usagef("%q is not an ingress id <namespace>/<name>", pos[0])
	}
	if partition < -1 || partition > 1<<31-1 {
		return usagef("--partition %d: want a Kafka partition number from 0", partition)
	}
	if partition >= 0 {
		p := int32(partition)
		f.Partition = &p
	}
	for _, name := range []string{"topic", "reason", "after"} {
		if fs.Changed(name) && fs.Lookup(name).Value.String() == "" {
			return usagef("--%s is empty", name)
		}
	}
	if after != "" && limit == 0 {
		return usagef("--after applies to one page: give --limit N too")
	}
	if err := parseWindow(since, until, &f.Since, &f.Until); err != nil {
		return err
	}
	if limit < 0 || limit > 1000 {
		return usagef("--limit %d: want 1 to 1000", limit)
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	var (
		list []stateclient.DeadLetter
		next string
	)
	if limit > 0 {
		p, err := cl.DeadLetters(c.ctx(), ingress, f, after, limit)
		if err != nil {
			return err
		}
		list, next = p.DeadLetters, p.Next
	} else {
		list = []stateclient.DeadLetter{}
		for d, err := range cl.AllDeadLetters(c.ctx(), ingress, f, 0) {
			if err != nil {
				return err
			}
			list = append(list, d)
		}
	}
	if output == "json" {
		if err := writeJSON(c.stdout, list); err != nil {
			return err
		}
	} else {
		tw := newTable(c.stdout)
		fmt.Fprintln(tw, "STORED\tTOPIC\tPARTITION\tOFFSET\tREASON\tKEY\tVALUE")
		for _, d := range list {
			value := recordCell(&d.Value)
			if d.ValueOmitted {
				value = "(not kept: too large)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\n", formatTime(d.StoredAt), d.Topic, d.Partition,
				d.Offset, d.Reason, recordCell(d.Key), value)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if next != "" {
		fmt.Fprintf(c.stderr, "more dead letters: next page with --after %s\n", shellQuote(next))
	}
	return nil
}

// recordCell shows a record's key or value in a table cell: (null), its
// text quoted and shortened, or its size when it is not text.
func recordCell(b *stateclient.RecordBytes) string {
	switch {
	case b == nil:
		return "(null)"
	case b.Text == nil:
		return fmt.Sprintf("(%d bytes, not UTF-8)", b.Length)
	}
	s := *b.Text
	if r := []rune(s); len(r) > 40 {
		s = string(r[:40]) + "…"
	}
	return strconv.Quote(s)
}

func (c *stateCLI) deadLetterSummary(cl *stateclient.Client, output string) error {
	sum, err := cl.DeadLetterSummary(c.ctx())
	if err != nil {
		return err
	}
	if output == "json" {
		return writeJSON(c.stdout, sum)
	}
	tw := newTable(c.stdout)
	fmt.Fprintln(tw, "INGRESS\tTOPIC\tREASON\tCOUNT\tOLDEST\tNEWEST")
	for _, in := range sum {
		for _, n := range in.Counts {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", in.Ingress, n.Topic, n.Reason, n.Count,
				formatTime(n.OldestStoredAt), formatTime(n.NewestStoredAt))
		}
	}
	return tw.Flush()
}

// parseWindow reads the --since and --until flags (an RFC 3339 time or a
// duration before now) into their destinations; an empty flag leaves its
// destination zero.
func parseWindow(since, until string, dstSince, dstUntil *time.Time) error {
	now := time.Now()
	for _, tf := range []struct {
		name string
		s    string
		dst  *time.Time
	}{{"since", since, dstSince}, {"until", until, dstUntil}} {
		if tf.s == "" {
			continue
		}
		t, err := parseWhen(tf.s, now)
		if err != nil {
			return usagef("--%s %q: want an RFC 3339 time (2024-05-06T07:08:09Z) or a duration like 1h", tf.name, tf.s)
		}
		*tf.dst = t
	}
	return nil
}
